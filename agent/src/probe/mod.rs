//! The probe engine: one OpenAI Chat Completions request, measured per `docs/metrics.md`
//! (metrics_version 2).
//!
//! [`Prober::probe`] sends one request and returns a [`ProbeResult`] whose
//! [`ProbeRecord`](latmesh_core::record::ProbeRecord) has every measured field set and an
//! outcome on every path (no request is silently dropped). The caller fills the plan fields
//! (`round`, `slot`, `provider`, `scenario`, `prompt_id`, `attempt`, `sched_lag_us`).
//! [`Prober::probe_with`] also keeps, when [`ProbeOptions`] asks, the read instant of every
//! token-bearing payload ([`ProbeResult::token_read_at`]; `t_send` is always set), for
//! checks against a server's clock in the same process.
//!
//! # Timing
//! Requests go over the probe's own HTTP/1.1 client (the `transport` module: hyper's HTTP/1
//! connection over streams it opens itself; HTTP/1.1 only, as the OpenAI Python SDK speaks
//! by default). `t_send` is taken with `Instant::now()` right before a connection is taken
//! from the pool or opened, with `send_agent_unix_us` (wall clock) next to it; so on a new
//! connection every duration from `t_send` (TTFB included) contains the connection phases.
//!
//! The connection phases are durations of their own, each measured around its phase alone,
//! and set on every record, whatever the outcome:
//!
//! * `conn_reused`: the request went over an idle pooled connection; then `dns_us`,
//!   `connect_us` and `tls_us` are `None`;
//! * `conn_retried`: the pooled connection failed before any byte of the response arrived
//!   (closed or reset by the server, before or after the request was written), and the
//!   request was sent again, once, on a new connection, which the phases then describe
//!   (`t_send` stays the first send: every duration includes the failed try). A failure on
//!   a new connection, or after a response byte, is not retried;
//! * `dns_us`: `tokio::net::lookup_host` of the host (`None` for an IP literal);
//! * `connect_us`: TCP connect, after DNS, over the resolved addresses in order until one
//!   accepts (refused addresses included);
//! * `tls_us`: the rustls handshake after the TCP connect (`None` for `http://`).
//!
//! A phase that failed or was cut short by a deadline has no duration; the phases before it
//! keep theirs (a refused connection has `dns_us`; a failed or timed-out TLS handshake has
//! `dns_us` and `connect_us`). The HTTP/1 handshake does no I/O and is not timed. The
//! connect timeout runs from `t_send` over DNS + TCP + TLS of a new connection
//! (→ `timeout_connect`, or the TTFT or total timeout when that one passes first); a pooled
//! connection skips it.
//!
//! TTFB is stamped when the response head has been parsed. Each body read (a data frame of
//! hyper's body) is stamped as soon as it arrives, before any parsing; all events parsed out
//! of that read carry its stamp (a compressed body is decoded read by read, each decoded
//! byte with its read's stamp: [`content_encoding`]). (One timer per body watches the deadlines: it is not
//! registered again for every read.) Then, from those stamps:
//!
//! * `ttft`: the first payload with a non-empty generated token of any kind (content,
//!   refusal, audio, reasoning, tool-call fragment, a delta of a kind latmesh does not
//!   know); `ttfc`: the first with the answer's text (non-empty `content`, `refusal` or
//!   audio transcript; never audio bytes; with `reasoning_tags` declared, the first
//!   content after the closing tag: [`think_tags`]);
//! * `e2e`: `[DONE]`, or the end of the body after a `finish_reason`;
//! * ITL: every gap between consecutive token-bearing payloads (payloads of one read are
//!   0 µs apart);
//! * `output_tokens`: `usage.completion_tokens` when reported, else the token-bearing payload
//!   count; in an event stream the payloads when they outnumber usage (reasoning streamed
//!   but not counted), with `output_tokens_source` saying which
//!   ([`latmesh_core::output_tokens`]); TPOT and decode rate from [`latmesh_core::metrics`]
//!   with that count, less reasoning the provider generated without streaming it, over the
//!   streamed span ([`ProbeResult::decode_tokens`]);
//! * `answered_model`, `system_fingerprint`: the first non-empty ones of the response.
//!
//! A non-streaming request (`stream: false`) has no token timing: `ttft`/`ttfc` are `None`,
//! `e2e` is the end of the body, and the whole body counts as payload 0. (Setting
//! `ttft = e2e` would put whole-generation times into the TTFT histograms.) Which way a body
//! is read follows its content type: an event stream is measured as one even when the
//! request did not ask for it; a JSON body (or, for a streaming request, a body with no
//! event that starts with `{`) is read whole.
//!
//! # Timeouts (from [`Timeouts`](latmesh_core::plan::Timeouts))
//! * connect: DNS + TCP + TLS of a new connection not done by `t_send + connect_s` →
//!   `timeout_connect` (see Timing);
//! * TTFT (streaming requests only): no token by `t_send + ttft_s`, headers included →
//!   `timeout_ttft`;
//! * idle: no body bytes for `idle_s` → `timeout_idle`;
//! * total: the attempt passes `t_send + total_s` → `timeout_total`.
//!
//! The first failure is kept: a stream that sent an error and then stalled is a
//! `stream_error`. After `[DONE]` the rest of the body is drained for a short grace so the
//! connection can be reused; nothing after `[DONE]` changes the outcome.
//!
//! # Outcomes
//! `ok`; `http_4xx`/`http_5xx`/`throttled` (with `retry_after_s` from `retry-after-ms` or
//! Retry-After, seconds or HTTP-date) with the provider's error type, code and message read
//! from the body; `stream_error` for an error inside a 2xx response (`data: {"error":…}`, a
//! vLLM error object, an `error:` line, an `event: error`, or an aborting finish_reason such
//! as `insufficient_system_resource`, which is kept); `protocol_error` for an empty 2xx body,
//! a payload that is not JSON, a 2xx with no chat payload, an event longer than 4 MiB, a
//! body in a content coding latmesh does not decode or a corrupt compressed stream, or a
//! streaming request answered with a whole JSON completion (its fields are still read);
//! `truncated` when the body ends, cleanly or not, with neither `[DONE]` nor a finish_reason;
//! `connection_error` for refused/reset connections (and a break before any payload); the
//! four timeouts.
//!
//! Error messages are scrubbed of the API key, of the provider's secret header values and
//! of echoed prompt text, then truncated to 256 bytes.
//!
//! # Request shape
//! The provider's [`RequestShape`](latmesh_core::api::RequestShape) (README "Request
//! shaping") decides the URL's query, the auth header, extra headers and the body's cap
//! field and extra keys ([`request::apply_shape`]); the record's `usage_requested` says
//! whether a chat stream asked for usage ([`request::usage_requested`]).

pub mod anthropic;
pub mod chunk;
mod client;
pub mod content_encoding;
pub mod emulation;
mod measure;
pub mod outcome;
pub mod progress;
pub mod request;
pub mod responses;
pub mod secrets;
pub mod shape;
pub mod sse;
pub mod think_tags;
mod transport;

#[cfg(test)]
mod tests;

use std::time::Instant;

use serde::{Deserialize, Serialize};

pub use client::Prober;
pub use emulation::{PROBE_ID_HEADER, REGION_HEADER, emulation_headers};

/// One request to probe. Its `Debug` output leaves the API key and the prompt out.
#[derive(Clone, Copy)]
pub struct ProbeRequest<'a> {
    /// Base URL; the request is `POST {base_url}{api path}?{query}`
    /// ([`request::target_url`]).
    pub base_url: &'a str,
    /// Model id sent.
    pub model_id: &'a str,
    /// Sent as the provider's `auth` says (`Authorization: Bearer …` by default); never
    /// logged, stored or put in a message.
    pub api_key: Option<&'a str>,
    /// Messages sent.
    pub messages: &'a [latmesh_core::prompts::Message],
    /// Ask for a stream (SSE) and for usage in it (`stream_options.include_usage`).
    pub stream: bool,
    /// `max_tokens` sent.
    pub max_tokens: u32,
    /// `temperature`, when set.
    pub temperature: Option<f64>,
    /// `top_p`, when set.
    pub top_p: Option<f64>,
    /// Timeouts of this attempt.
    pub timeouts: &'a latmesh_core::plan::Timeouts,
    /// Sent as `x-latmesh-probe-id` when set, to a loopback peer only: lets a test server
    /// (the simulator's ground-truth log) match its own timings to this attempt. `None` for
    /// real providers.
    pub probe_id: Option<&'a str>,
    /// `user-agent` sent; `None`: the API's default ([`request::default_user_agent`]). A value that is not a
    /// valid header value makes the attempt a `connection_error` ("cannot build the
    /// request"); campaigns validate it first.
    pub user_agent: Option<&'a str>,
    /// The API spoken and how the request is shaped (the provider's
    /// [`RequestShape`](latmesh_core::api::RequestShape);
    /// [`RequestShape::chat_default`](latmesh_core::api::RequestShape::chat_default) for
    /// plain Chat Completions).
    pub shape: &'a latmesh_core::api::RequestShape,
    /// The provider's secret headers (`{ env = … }`) with their values read on this agent
    /// ([`request::secret_headers`]); `&[]` when it has none. Sent as sensitive headers,
    /// redacted from provider values like the API key, never logged.
    pub secret_headers: &'a [request::SecretHeader],
}

impl std::fmt::Debug for ProbeRequest<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProbeRequest")
            .field("base_url", &self.base_url)
            .field("model_id", &self.model_id)
            .field("api_key", &self.api_key.map(|_| "[redacted]"))
            .field("messages", &self.messages.len())
            .field("stream", &self.stream)
            .field("max_tokens", &self.max_tokens)
            .field("temperature", &self.temperature)
            .field("top_p", &self.top_p)
            .field("timeouts", &self.timeouts)
            .field("probe_id", &self.probe_id)
            .field("user_agent", &self.user_agent)
            .field("api", &self.shape.api)
            .field("secret_headers", &self.secret_headers)
            .finish()
    }
}

/// One tool call of the answer, accumulated from its fragments.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// `index` of the call (its position when a server omits it).
    pub index: u32,
    /// Call id; `None` when the server sent none.
    pub id: Option<String>,
    /// Function name.
    pub name: String,
    /// Arguments, concatenated (normally JSON text).
    pub arguments: String,
}

/// What one probe measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProbeResult {
    /// The record: every measured field set; plan fields left for the caller.
    pub record: latmesh_core::record::ProbeRecord,
    /// Every ITL gap, µs, in arrival order.
    pub itl_gaps_us: Vec<u64>,
    /// Visible text; filled only when `keep_text`.
    pub content_text: String,
    /// Reasoning text; filled only when `keep_text`.
    pub reasoning_text: String,
    /// Where the answer's first reasoning came from (always set when there was any):
    /// a Chat Completions field (`reasoning_content`, `reasoning`, `reasoning_text`,
    /// `thinking`, `content[].reasoning`, `reasoning_details`), `thinking` or
    /// `redacted_thinking` (Anthropic blocks), `reasoning` (a Responses item), or
    /// `reasoning_tags` (split out of the content by the provider's declared tags).
    pub reasoning_field: Option<&'static str>,
    /// Tool calls, in order of first appearance (always filled: they are small and rare).
    pub tool_calls: Vec<ToolCall>,
    /// 0-based index, among JSON chat payloads, of the payload where TTFT was stamped.
    pub first_output_payload_index: Option<u32>,
    /// 0-based index, among JSON chat payloads, of the payload where TTFC was stamped.
    pub first_content_payload_index: Option<u32>,
    /// The output tokens TPOT and the decode rate were computed over: `output_tokens`, less
    /// reasoning the provider generated without streaming it (docs/metrics.md, "Parsing
    /// rules"); `None` for a body read whole, and when that reasoning could not be told
    /// apart (no reasoning count reported: TPOT and the decode rate are then empty).
    pub decode_tokens: Option<u32>,
    /// `t_send` (see Timing in the [module documentation](self)): every `*_us` duration of
    /// the record is measured from it. Set on every path.
    pub t_send: Option<Instant>,
    /// The read instant of every token-bearing payload of an event stream, in order (one
    /// per `token_payloads`; several payloads of one read share its instant): `ttft_us` is
    /// `token_read_at[0] − t_send` and the ITL gaps are the differences, floored to µs.
    /// Filled only when asked ([`ProbeOptions::keep_timestamps`]); empty for a body read
    /// whole.
    pub token_read_at: Vec<Instant>,
    /// The thinking blocks of an Anthropic Messages answer, in order, each whole with its
    /// signature (or encrypted `data`), to send back in a later turn; filled only when
    /// `keep_text`, empty for the other APIs.
    pub thinking_blocks: Vec<latmesh_core::prompts::ThinkingBlock>,
    /// The answer's reasoning items (Responses API), in order, each as
    /// `{"type": "reasoning", "summary": [summary_text parts], "content": [reasoning_text
    /// parts] (when any), "encrypted_content" (when the provider sent one: the request's
    /// `include` asked for `reasoning.encrypted_content`)}`; kept only with `keep_text`, for
    /// a later turn to pass back. Provider data: never logged, stored or put in a record.
    pub reasoning_items: Vec<serde_json::Value>,
    /// Of the request fields latmesh may stop sending ([`request::REFUSABLE_FIELDS`]), those
    /// the whole error body of a non-2xx answer named (empty otherwise): what the record's
    /// cut message may no longer show.
    pub error_body_fields: Vec<&'static str>,
}

/// What [`Prober::probe_with`] keeps besides the record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProbeOptions {
    /// Keep the visible and reasoning texts ([`ProbeResult::content_text`],
    /// [`ProbeResult::reasoning_text`]).
    pub keep_text: bool,
    /// Keep the read instant of every token-bearing payload
    /// ([`ProbeResult::token_read_at`]; one allocation per probe, none per payload).
    pub keep_timestamps: bool,
    /// Largest response body accepted, bytes; past it the attempt ends as `protocol_error`
    /// ("response larger than N bytes"). `None`: no cap beyond the built-in ones (a JSON body
    /// read whole, an SSE event or line).
    pub max_response_bytes: Option<u64>,
}

/// A single probe's view of a record: every field of the record, plus what only a single
/// probe shows. `latmesh probe` prints [`ProbeOutput::to_json_pretty`], which leaves out the plan
/// fields ([`PLAN_FIELDS`]) that mean nothing outside a campaign.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProbeOutput {
    /// The record, its fields at the top level of the object.
    #[serde(flatten)]
    pub record: latmesh_core::record::ProbeRecord,
    /// Median ITL gap, µs.
    pub itl_p50_us: Option<u64>,
    /// Payload index of TTFT.
    pub first_output_payload_index: Option<u32>,
    /// Payload index of TTFC.
    pub first_content_payload_index: Option<u32>,
    /// Tool calls.
    pub tool_calls: Vec<ToolCall>,
    /// Visible text (only with `show_text`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_text: Option<String>,
    /// Reasoning text (only with `show_text`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_text: Option<String>,
}

/// Record fields set by a campaign's plan (load model, round, slot, provider, scenario, …):
/// 0, empty or `false` for a lone probe.
pub const PLAN_FIELDS: &[&str] = &[
    "load",
    "round",
    "slot",
    "step",
    "concurrency",
    "failover",
    "provider",
    "scenario",
    "prompt_id",
    "cache_nonce",
    "sched_lag_us",
];

impl ProbeOutput {
    /// The JSON object `latmesh probe` prints, pretty: the fields of `self` in their order,
    /// without [`PLAN_FIELDS`].
    pub fn to_json_pretty(&self) -> String {
        let text = serde_json::to_string(self).unwrap_or_default();
        let Ok(OrderedObject(mut fields)) = serde_json::from_str::<OrderedObject>(&text) else {
            return text;
        };
        fields.retain(|(k, _)| !PLAN_FIELDS.contains(&k.as_str()));
        serde_json::to_string_pretty(&OrderedObject(fields)).unwrap_or(text)
    }

    /// The same view with the API key (whole, or any run of
    /// [`outcome::KEY_FRAGMENT_BYTES`] of its bytes) redacted from the visible and reasoning
    /// texts, which are otherwise printed as the provider sent them (a provider may echo the
    /// key into its answer; the record's own strings are scrubbed already).
    pub fn without_key(mut self, api_key: Option<&str>) -> Self {
        if let Some(key) = api_key {
            self.redact_texts(key);
        }
        self
    }

    /// `secret` (whole, or any run of [`outcome::KEY_FRAGMENT_BYTES`] of its bytes)
    /// redacted from the visible and reasoning texts.
    fn redact_texts(&mut self, secret: &str) {
        if secret.is_empty() {
            return;
        }
        for text in [&mut self.content_text, &mut self.reasoning_text]
            .into_iter()
            .flatten()
        {
            *text = outcome::redact_fragments(text, secret.as_bytes(), "[redacted]");
        }
    }

    /// The same view with the values of `secrets` (secret headers) redacted from the
    /// visible and reasoning texts, as [`ProbeOutput::without_key`] does the key.
    pub fn without_secrets(mut self, secrets: &[request::SecretHeader]) -> Self {
        for secret in secrets {
            self.redact_texts(secret.value());
        }
        self
    }

    /// The printable view of `r`; texts only with `show_text`.
    pub fn new(r: &ProbeResult, show_text: bool) -> Self {
        let itl_p50_us = if r.itl_gaps_us.is_empty() {
            None
        } else {
            let mut g = r.itl_gaps_us.clone();
            g.sort_unstable();
            Some(g[(g.len() - 1) / 2])
        };
        ProbeOutput {
            record: r.record.clone(),
            itl_p50_us,
            first_output_payload_index: r.first_output_payload_index,
            first_content_payload_index: r.first_content_payload_index,
            tool_calls: r.tool_calls.clone(),
            content_text: show_text.then(|| r.content_text.clone()),
            reasoning_text: show_text.then(|| r.reasoning_text.clone()),
        }
    }
}

/// A JSON object's fields in their order (serde_json's `Map` sorts them).
struct OrderedObject(Vec<(String, serde_json::Value)>);

impl<'de> Deserialize<'de> for OrderedObject {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> serde::de::Visitor<'de> for Fields {
            type Value = OrderedObject;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> Result<Self::Value, A::Error> {
                let mut fields = Vec::new();
                while let Some(kv) = m.next_entry()? {
                    fields.push(kv);
                }
                Ok(OrderedObject(fields))
            }
        }
        d.deserialize_map(Fields)
    }
}

impl Serialize for OrderedObject {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}
