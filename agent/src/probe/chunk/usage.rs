//! The usage object in any spelling ([`UsageWire`]), and usage merged over a stream
//! ([`merge_usage`]).

use latmesh_core::record::Usage;

use super::lenient::{Num, Obj};

/// The usage object (any spelling).
#[derive(serde::Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct UsageWire {
    prompt_tokens: Num,
    completion_tokens: Num,
    total_tokens: Num,
    input_tokens: Num,
    output_tokens: Num,
    reasoning_tokens: Num,
    completion_tokens_details: Obj<Details>,
    output_tokens_details: Obj<Details>,
    prompt_tokens_details: Obj<Details>,
    input_tokens_details: Obj<Details>,
    prompt_cache_hit_tokens: Num,
    cached_tokens: Num,
    cache_read_input_tokens: Num,
}

#[derive(serde::Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
struct Details {
    reasoning_tokens: Num,
    cached_tokens: Num,
}

impl UsageWire {
    /// The counts found, `None` when the object holds none.
    pub fn to_usage(&self) -> Option<Usage> {
        let detail =
            |o: &Obj<Details>, f: fn(&Details) -> Num| o.0.as_ref().and_then(|d| f(d).u32());
        let u = Usage {
            prompt_tokens: self.prompt_tokens.u32().or(self.input_tokens.u32()),
            completion_tokens: self.completion_tokens.u32().or(self.output_tokens.u32()),
            total_tokens: self.total_tokens.u32(),
            reasoning_tokens: detail(&self.completion_tokens_details, |d| d.reasoning_tokens)
                .or(detail(&self.output_tokens_details, |d| d.reasoning_tokens))
                .or(self.reasoning_tokens.u32()),
            cached_tokens: detail(&self.prompt_tokens_details, |d| d.cached_tokens)
                .or(detail(&self.input_tokens_details, |d| d.cached_tokens))
                .or(self.prompt_cache_hit_tokens.u32())
                .or(self.cached_tokens.u32())
                .or(self.cache_read_input_tokens.u32()),
        };
        (u != Usage::default()).then_some(u)
    }
}

/// Merges `newer` over `older` field by field (a field the newer object lacks is kept).
pub fn merge_usage(older: &mut Option<Usage>, newer: Usage) {
    match older {
        None => *older = Some(newer),
        Some(o) => {
            o.prompt_tokens = newer.prompt_tokens.or(o.prompt_tokens);
            o.completion_tokens = newer.completion_tokens.or(o.completion_tokens);
            o.total_tokens = newer.total_tokens.or(o.total_tokens);
            o.reasoning_tokens = newer.reasoning_tokens.or(o.reasoning_tokens);
            o.cached_tokens = newer.cached_tokens.or(o.cached_tokens);
        }
    }
}
