//! The tokens and the span TPOT and the decode rate are computed over ([`Decode`]): the
//! streamed tokens between the first streamed one and the end, so reasoning a provider
//! generated without streaming it (Claude's omitted or redacted thinking, a Responses
//! reasoning item with encrypted content only, a Chat Completions model that reports
//! `reasoning_tokens` and streams none) is not spread over the time the answer streamed in
//! (docs/metrics.md, "Parsing rules").

use std::time::Instant;

use latmesh_core::record::{OutputTokensSource, Usage};

use super::state::State;

/// What TPOT and the decode rate divide: `tokens` generated from `from` to the end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Decode {
    /// The streamed tokens; `None` when they cannot be told apart from unstreamed
    /// reasoning (no count of it was reported): TPOT and the decode rate stay empty.
    pub(super) tokens: Option<u32>,
    /// Where the streamed span begins: TTFT's instant, or, when reasoning was not
    /// streamed, the first payload that carried anything but that reasoning.
    pub(super) from: Option<Instant>,
}

impl State {
    /// Whether reasoning was generated and not streamed: a reasoning block or item was seen,
    /// or `usage` reports reasoning tokens, while no reasoning text arrived. (A reasoning
    /// summary streamed by the Responses API is streamed reasoning.)
    pub(super) fn reasoning_unstreamed(&self, usage: &Usage) -> bool {
        let reported = usage.reasoning_tokens.is_some_and(|r| r > 0);
        (self.reasoning_block || reported) && !self.reasoning_streamed
    }

    /// The decode tokens and span of an event stream whose output counts `output_tokens`
    /// (by `source`), with `usage` as read (bounded).
    ///
    /// * Reasoning streamed, or none: every output token, from TTFT.
    /// * Reasoning not streamed: from the first payload that carried anything but it, the
    ///   output tokens less the reported reasoning tokens, at least the payloads streamed
    ///   after it (each carries a token); a payload count (no usage) holds no unstreamed
    ///   token, so it is those payloads; a usage count without a reasoning count cannot be
    ///   split: `None`.
    pub(super) fn decode(
        &self,
        output_tokens: u32,
        source: OutputTokensSource,
        usage: &Usage,
    ) -> Decode {
        let first_token = self.first_token.map(|(t, _)| t);
        if !self.reasoning_unstreamed(usage) {
            return Decode {
                tokens: Some(output_tokens),
                from: first_token,
            };
        }
        let streamed = self
            .token_payloads
            .saturating_sub(self.hidden_reasoning_payloads);
        let tokens = match (source.from_usage(), usage.reasoning_tokens) {
            (false, _) => Some(streamed),
            (true, Some(r)) => Some(output_tokens.saturating_sub(r).max(streamed)),
            (true, None) => None,
        };
        Decode {
            tokens,
            from: self.first_streamed_token,
        }
    }
}
