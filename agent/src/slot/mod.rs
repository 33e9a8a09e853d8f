//! One slot: a logical request of some load model, run in its own task, so its retries and
//! later turns never hold up the next slots (they do add load: with retries and turns a slot
//! can send up to `turns × (max_retries + 1)` requests).
//!
//! * **Attempts.** Every attempt is one record with `attempt` (1-based). When the scenario's
//!   [`RetryPolicy`](latmesh_core::plan::RetryPolicy) retries the outcome, the task waits
//!   [`RetryPolicy::wait_ms`](latmesh_core::plan::RetryPolicy::wait_ms) (its backoff,
//!   or a longer Retry-After when honoured, capped) and sends the same request again. The last
//!   attempt of a logical request has `final_attempt = true` and `request_latency_us`: from
//!   the first attempt's start to this attempt's end (`e2e`, or the end of the attempt when it
//!   has none), backoff waits included; for a single attempt it equals `e2e`. Its outcome is
//!   the logical request's outcome. `sched_lag_us` of a retry is measured from the end of its
//!   wait, of a later turn from the end of the previous turn.
//! * **Turns.** A scenario with `turns = N` makes each slot a conversation: turn `k > 1` sends
//!   the prompt, then for each earlier turn its assistant answer (with `reasoning_content`
//!   when the provider has `pass_reasoning`, and for `api = "anthropic"` its thinking blocks
//!   whole with their signatures) and the next follow-up user message, in order.
//!   Records carry `turn`. Turns are sent back to back; answers are read with `keep_text`
//!   (all but the last turn). A turn whose logical outcome is not `ok` ends the conversation:
//!   later turns are not sent and leave no record (the agent logs how many); they are not
//!   "skipped" probes, which would mark the agent's campaign incomplete. A later turn refused
//!   with 400/413/422 is `history_rejected` (the provider refused the history sent back).
//! * **Cache nonce.** With `cache_nonce`, `[nonce XXXXXXXX] ` (8 random hex digits) goes in
//!   front of the first message's content (the very first tokens: provider prompt caches
//!   match prefixes, so a nonce after a long system message would leave that cacheable). One
//!   nonce per logical request: all attempts resend the identical request, and all turns of a
//!   conversation share it so the conversation's own prefix caching (turn k+1 extends turn k,
//!   as in any chat client) stays as realistic as it is for users, while no probe can hit a
//!   cache warmed by another probe, round or region. Records carry `cache_nonce`.
//!
//! * **Generated prompts.** A tier scenario (`synth`: the campaign file's `input_tokens`)
//!   sends one user message of exactly `input_tokens` words, the text of the request key
//!   (this agent's region, round, step, slot; every attempt and every provider of the slot
//!   the same) from the tier's prompt the run built once ([`SynthPrompts`]); records carry
//!   `input_tokens`. With `output_tokens` the cap is that, and the provider's `exact_output`
//!   fields go into the body ([`crate::shaping::exact_output_fields`]).
//! * **Warm-up and SLO.** Every attempt of a warm-up slot
//!   ([`ScenarioSpec::is_warmup`](latmesh_core::plan::ScenarioSpec::is_warmup)) has
//!   `warmup`; the final attempt of a scenario with an SLO has `slo_met`
//!   ([`Slo::met`](latmesh_core::slo::Slo::met)), except a `cancelled` or `dropped` one.
//!   `rate` records carry their step's `target_rps`.
//!
//! Histograms count `ok` attempts of every turn (not split by turn; records carry it), warm-up
//! left out.
//!
//! # Cancel ([`Cancel`])
//! When the coordinator cancels the campaign, no further slot is scheduled, no retry and no
//! later turn is started, and attempts in flight get
//! [`RunnerConfig::cancel_grace`](crate::runner::RunnerConfig::cancel_grace) to finish.
//! One still running after it is aborted and recorded all the same: outcome `cancelled`
//! (left out of error rates: not the provider's doing), final attempt of its
//! logical request. A record held for a retry wait that the cancel interrupts becomes the
//! final attempt. Everything measured is sealed and sent; the slots not run are reported as
//! `skipped` in the campaign's done notice.
//!
//! # Memory per slot
//! Answers kept for a later turn's history are cut at [`MAX_KEPT_ANSWER_BYTES`] each (a
//! provider ignoring `max_tokens` cannot grow the conversation without bound); the body of
//! each attempt is bounded by the probe engine's limits and the scenario's timeouts.
//!
//! # Files
//! * [`spec`]: what a slot is ([`SlotRef`]), what it reports ([`SlotDone`]), where its
//!   records go ([`RecordTx`]);
//! * [`conversation`]: the slot's turns, the history sent back, the cache nonce;
//! * [`attempts`]: one logical request's attempts (caps, probe, record, retry wait);
//! * [`failover`]: which target the next attempt goes to (retry policy or failover chain);
//! * [`label`]: the plan fields every record of a slot carries;
//! * [`cancel`] and [`env`]: what a slot shares with its campaign run;
//! * [`synth`]: the run's generated prompts, built once per tier.

pub mod attempts;
pub mod cancel;
pub mod conversation;
pub mod env;
pub mod failover;
pub mod label;
pub mod spec;
pub mod synth;
#[cfg(test)]
mod tests;

pub use cancel::Cancel;
pub use conversation::{MAX_KEPT_ANSWER_BYTES, new_nonce, run_slot, run_slot_with};
pub use env::SlotEnv;
pub use spec::{RecordTx, SlotDone, SlotRef};
pub use synth::SynthPrompts;
