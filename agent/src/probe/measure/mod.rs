//! The measurement state machine: consumes the body of a 2xx response, read by read, each
//! read with its arrival instant, and produces the [`ProbeResult`].
//!
//! It knows nothing about HTTP I/O (the client feeds it), so unit tests drive it with bytes
//! and synthetic instants.
//!
//! What it fills, on every path (`ok` or not), all µs from `t_send` (docs/metrics.md):
//!
//! * `first_byte_us`: the read that brought the first body byte; `first_nonblank_us`: the
//!   read that brought the first byte that is not ASCII whitespace (blank lines a server sends
//!   while a request is queued, mostly before a non-streaming JSON body, are not an answer).
//!   Both are stamped for event streams and for bodies read whole, before any parsing;
//! * `ttft_us`/`ttfc_us` (event streams only), and `reasoning_us` = `ttfc − ttft` when a
//!   reasoning payload came before the first content payload (`None` without reasoning, or
//!   when reasoning and content first arrived in one payload);
//! * `token_payloads`: payloads carrying any generated token (content, reasoning, a
//!   tool-call fragment or other generated output such as audio bytes; a payload counts
//!   once);
//! * `output_tokens` and `output_tokens_source` by [`output_tokens`]: usage's count, or in
//!   an event stream the payloads when they outnumber it (reasoning streamed but left out of
//!   usage), or the payloads when no usage was reported;
//! * `tpot_us` and `decode_tps` over the streamed tokens and span ([`decode`]: reasoning
//!   the provider generated without streaming it is left out);
//! * `usage_chunk_delta` = `usage.completion_tokens − token_payloads` when usage reported
//!   completion tokens in an event stream (a body read whole is one payload by definition:
//!   no delta);
//! * `answered_model` and `system_fingerprint`: the first non-empty `model` and
//!   `system_fingerprint` of any payload (or of the body read whole), scrubbed and cut to
//!   [`MAX_ANSWERED_BYTES`];
//! * `error_code`: the provider's error code (also in [`ProbeResult::error_code`]).
//!
//! [`Head::failed`] fills the head's fields for attempts without a readable 2xx body;
//! [`Head::failed_with_body`] also the body stamps, when the caller kept a [`BodyStamps`]
//! while reading an error body.
//!
//! # Files
//! * [`body`]: [`Measurement`], the byte-driven shell: body reads with their instants,
//!   content decoding, size caps, the event parser, sniffing a JSON body;
//! * [`state`]: `State`, what is measured so far, and its primitives (payload count,
//!   terminal event, failure, usage, finish reason, what answered);
//! * [`tokens`]: the stamping of token-bearing payloads (TTFT, TTFC, ITL, reasoning);
//! * [`tool_calls`]: tool-call fragments assembled into calls;
//! * [`decode`]: the tokens and span TPOT and the decode rate divide (reasoning that was
//!   not streamed left out);
//! * [`events`]: each event or whole body handed to its API's reader;
//! * [`chat`]: the Chat Completions reader (the other APIs': `super::anthropic`,
//!   `super::responses`);
//! * [`flow`]: whether to read on ([`Flow`]);
//! * [`finish`]: the outcome and the record, once the body has ended;
//! * [`head`]: the request and response head ([`Head`]), results of attempts without a
//!   readable 2xx body, body stamps ([`BodyStamps`]).

pub mod body;
pub mod chat;
pub mod decode;
pub mod events;
pub mod finish;
pub mod flow;
pub mod head;
pub mod state;
#[cfg(test)]
pub(crate) mod tests;
pub mod tokens;
pub mod tool_calls;

pub use body::Measurement;
pub use flow::Flow;
pub use head::{BodyStamps, Head};
