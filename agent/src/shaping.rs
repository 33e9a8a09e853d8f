//! What an agent keeps per provider of a campaign run to shape its requests: the values of
//! its secret headers, read once when the plan arrives, and whether it refused
//! `stream_options` (`stream_usage = "auto"`).
//!
//! `stream_usage = "auto"` asks for usage in Chat Completions streams. When an attempt that
//! asked is answered 400 (or 422) with an error naming `stream_options` or `include_usage`
//! ([`request::refuses_stream_usage`]), this agent stops asking that provider for the rest of
//! the run and logs one WARN naming it: that attempt stays a record as it is (an `http_4xx`,
//! `usage_requested` true), attempts sent after it go without the field (`usage_requested`
//! false). Other agents find out on their own.

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};

use latmesh_core::api::{Api, RequestShape, StreamUsage};
use latmesh_core::plan::{Plan, ScenarioSpec};
use latmesh_core::record::ProbeRecord;

use crate::probe::request::{self, SecretHeader};

/// The provider's `exact_output` fields for a scenario wanting `output_tokens` tokens: each
/// string `"$output_tokens"` (at any depth) replaced by the number.
pub fn exact_output_fields(
    exact_output: &serde_json::Map<String, serde_json::Value>,
    output_tokens: u32,
) -> serde_json::Map<String, serde_json::Value> {
    fn fill(v: &serde_json::Value, n: u32) -> serde_json::Value {
        use serde_json::Value;
        match v {
            Value::String(s) if s == "$output_tokens" => Value::from(n),
            Value::Array(a) => Value::Array(a.iter().map(|x| fill(x, n)).collect()),
            Value::Object(o) => {
                Value::Object(o.iter().map(|(k, x)| (k.clone(), fill(x, n))).collect())
            }
            other => other.clone(),
        }
    }
    exact_output
        .iter()
        .map(|(k, v)| (k.clone(), fill(v, output_tokens)))
        .collect()
}

/// Per provider of a run (indexed like the plan's providers); empty for a slot run outside a
/// campaign ([`Shaping::default`]: secrets are then read for each slot, refusals not kept).
#[derive(Debug, Default)]
pub struct Shaping {
    providers: Vec<ProviderShaping>,
}

#[derive(Debug)]
struct ProviderShaping {
    secrets: Vec<SecretHeader>,
    usage_refused: AtomicBool,
}

impl Shaping {
    /// Reads the secret headers of every provider of `plan` from this agent's environment,
    /// logging a WARN for each that cannot be sent (naming the provider, header and
    /// variable, never a value): such a header is left out of the requests.
    pub fn new(plan: &Plan) -> Shaping {
        let providers = plan
            .providers
            .iter()
            .map(|p| {
                let (secrets, problems) = request::secret_headers(&p.request);
                for problem in problems {
                    tracing::warn!(provider = %p.name, "{problem}; requests go without that header");
                }
                ProviderShaping {
                    secrets,
                    usage_refused: AtomicBool::new(false),
                }
            })
            .collect();
        Shaping { providers }
    }

    /// The secret headers of provider `p` (read now when this run keeps none).
    pub fn secrets<'a>(&'a self, plan: &Plan, p: usize) -> Cow<'a, [SecretHeader]> {
        match self.providers.get(p) {
            Some(s) => Cow::Borrowed(&s.secrets),
            None => Cow::Owned(request::secret_headers(&plan.providers[p].request).0),
        }
    }

    /// The shape of a request of `scenario` to provider `p`: the provider's, with the
    /// scenario's `extra_body` under its own ([`latmesh_core::shaping::with_scenario_body`]),
    /// for a scenario with `output_tokens` the provider's `exact_output` fields over both
    /// ([`exact_output_fields`]),
    /// and `stream_usage = "never"` once the provider refused `stream_options` under `auto`.
    pub fn shape<'a>(
        &self,
        plan: &'a Plan,
        p: usize,
        scenario: &ScenarioSpec,
    ) -> Cow<'a, RequestShape> {
        let mut shape = latmesh_core::shaping::with_scenario_body(
            &plan.providers[p].request,
            &scenario.extra_body,
        );
        if let Some(n) = scenario.output_tokens
            && !shape.exact_output.is_empty()
        {
            // After extra_body: the fields that keep the provider generating to the cap win.
            let fields = exact_output_fields(&shape.exact_output, n);
            shape.to_mut().extra_body.extend(fields);
        }
        if shape.stream_usage == StreamUsage::Auto
            && self
                .providers
                .get(p)
                .is_some_and(|s| s.usage_refused.load(Ordering::Relaxed))
        {
            shape.to_mut().stream_usage = StreamUsage::Never;
        }
        shape
    }

    /// After an attempt to provider `p` (named `name`) sent with `shape`: when it asked for
    /// usage under `auto` and `rec` is a refusal of the field (its message, type or code, or
    /// its whole error body, `error_body_fields`, names it), stops asking that provider and
    /// logs it, once.
    pub fn after_attempt(
        &self,
        p: usize,
        name: &str,
        shape: &RequestShape,
        rec: &ProbeRecord,
        error_body_fields: &[&str],
    ) {
        if shape.api != Api::Chat
            || shape.stream_usage != StreamUsage::Auto
            || !rec.stream
            || !rec.usage_requested
            || !request::refuses_stream_usage(rec, error_body_fields)
        {
            return;
        }
        if let Some(s) = self.providers.get(p)
            && !s.usage_refused.swap(true, Ordering::Relaxed)
        {
            tracing::warn!(
                provider = %name,
                "the provider refused stream_options (HTTP {}): this agent no longer asks it for usage in streams (stream_usage = \"auto\"; set \"never\" to skip the refused attempt)",
                rec.http_status.unwrap_or_default()
            );
        }
    }
}
