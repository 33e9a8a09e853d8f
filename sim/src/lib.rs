//! `latmesh-sim`: simulated LLM inference providers for latmesh's demo, tests and benchmarks,
//! speaking OpenAI Chat Completions, Anthropic Messages and OpenAI Responses.
//!
//! * [`serve_providers`] serves the nine built-in providers (see [`builtin_profiles`]),
//!   the seven compatibility trap providers ([`trap_profiles`]) and the three lab providers
//!   ([`lab_profiles`]), or
//!   your own [`ProviderProfile`]s at `http://ADDR/{provider}/v1` on the three APIs
//!   (`/chat/completions`, `/messages`, `/responses`: one planner ([`plan`]) and one
//!   renderer per API ([`render`]), so a provider behaves the same on each), each with its own
//!   latency profile, faults, home region and serving capacity (requests beyond it queue
//!   first come first served: see [`ProviderProfile`]'s *Serving capacity*). Every answered
//!   response carries its plan in `x-sim-planned-ttft-us` and `x-sim-region-delay-us`, and
//!   its wait for a serving slot in `x-sim-queue-wait-us`.
//! * Ground truth ([`truth`]): for every request carrying `x-latmesh-probe-id`, the
//!   simulator records the monotonic instant it received the request and the instants each
//!   token frame was handed to hyper and written to the socket, in the bounded
//!   [`TruthLog`] of [`SimConfig::truth`] (last 100,000 probe ids by default). Read it
//!   in-process with [`TruthLog::get`] (instants, comparable with a prober's in the same
//!   process) or over HTTP with `GET /_truth/{probe_id}` ([`TruthReport`]: `server_ttft_us`,
//!   `server_ttfc_us`, `server_e2e_us`, per-frame `handed_us`/`written_us`, all µs after
//!   the receipt), for a simulator in another process. With [`TruthLog::recording_all`]
//!   (`latmesh-sim serve --truth-all`) requests without the header are recorded too (as
//!   `unlabeled-N`), and `GET /_truth` lists every kept request ([`TruthSummary`], JSON
//!   lines), for benchmark clients that send no probe id:
//!
//!   ```no_run
//!   # async fn f() -> std::io::Result<()> {
//!   let cfg = latmesh_sim::SimConfig::default();
//!   let truth = cfg.truth.clone(); // keep a handle: clones share the log
//!   let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//!   tokio::spawn(latmesh_sim::serve_providers(listener, cfg));
//!   // … probe with probe_id "p1", then:
//!   if let Some(t) = truth.get("p1") {
//!       println!("server TTFT {:?}, {} token frames", t.ttft(), t.frames.len());
//!   }
//!   # Ok(()) }
//!   ```
//! * Compatibility and quality ground truth: each profile says which optional features it
//!   honours, ignores or rejects (stop sequences, JSON mode, tool calls), which model and
//!   `system_fingerprint` it answers with (and whether it swaps them mid-campaign), which key
//!   it accepts, whether it caches prompts, and how often it answers a quality prompt wrong
//!   ([`ProviderProfile`]); quality prompts get answers a grader can check ([`script`]);
//!   [`truth`] says exactly which prompts a quantized profile answers wrong and which model
//!   answers request N; [`compat_truth`] says which verdict each check must get on each
//!   profile. The seven [`trap_profiles`] each fail known checks.
//! * [`serve_replay`] serves one recorded response (`tests/fixtures/sse-cases/NN-name.sse`) byte for
//!   byte.
//!
//! Prompt tokens ([`tokens`]) are counted over all message contents (the system prompt /
//! `instructions` included), whichever API carried them ([`request`]): latmesh's generated
//! prompts ([`latmesh_core::synth`]) by words (times the profile's `tokens_per_word`), other
//! text as `ceil(chars / 4)`, plus the profile's `template_tokens`. A request longer than the
//! profile's context window is refused with the API's `context_length_exceeded` error
//! ([`context_limit`]); `ignore_eos` and `min_tokens` shape the answer's length on every API.
//! * Long-context and SLO ground truth ([`slo_truth`]): the TTFT a jitter-free profile plans
//!   for a prompt, the time a request holds a serving slot, and the highest constant rate at
//!   which an SLO still holds; the three exact [`lab_profiles`] (`slo-lab`, `long-ctx`,
//!   `short-ctx`) make these known in advance.
//!
//! Timing uses tokio timers (1 ms resolution) against absolute deadlines: an ITL below
//! 1 ms comes out as small bursts whose average rate is right; an ITL of 0 streams as fast
//! as the connection takes it.

#![warn(missing_docs)]

pub mod cache;
pub mod compat_truth;
pub mod context_limit;
pub mod hostile;
pub mod plan;
pub mod profile;
pub mod provider;
pub mod region;
pub mod render;
pub mod replay;
pub mod request;
pub mod script;
pub mod slo_truth;
pub mod text;
pub mod tokens;
pub mod truth;

#[cfg(test)]
mod tests;

use std::path::Path;

use axum::serve::ListenerExt;
use tokio::net::TcpListener;

pub use profile::{
    DEFAULT_MODEL_ID, LAB_OUTPUT_TOKENS, LOCKED_API_KEY, ProviderProfile, all_builtin_profiles,
    builtin_profiles, lab_profiles, trap_profiles,
};
pub use provider::{
    PLANNED_TTFT_HEADER, PLANNED_TTST_HEADER, QUEUE_WAIT_HEADER, REGION_DELAY_HEADER,
    providers_router,
};
pub use region::{REGION_HEADER, RegionTable};
pub use replay::{ReplayCase, replay_router};
pub use truth::{PROBE_ID_HEADER, ProbeTruth, TruthLog, TruthReport, TruthSummary};

/// Configuration of the simulated providers.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Seeds every request's RNG (with the provider name and its request counter).
    pub seed: u64,
    /// The providers to serve; names must be unique.
    pub profiles: Vec<ProviderProfile>,
    /// Delays between the providers' home regions and the callers' regions.
    pub regions: RegionTable,
    /// Multiplies every server-side delay (TTFT, ITL, stalls, keep-alive period; not the
    /// region delay):
    /// `0.1` runs ten times faster. Must be finite and ≥ 0.
    pub time_scale: f64,
    /// Where requests carrying `x-latmesh-probe-id` are recorded ([`truth`]); clone it
    /// before serving to read it.
    pub truth: TruthLog,
}

impl Default for SimConfig {
    /// Seed 7, every built-in profile (the nine demo providers, the seven trap providers
    /// and the three lab providers: [`all_builtin_profiles`]), the built-in region table, real time, a new
    /// ground-truth log of the default capacity.
    fn default() -> Self {
        SimConfig {
            seed: 7,
            profiles: all_builtin_profiles(),
            regions: RegionTable::default(),
            time_scale: 1.0,
            truth: TruthLog::default(),
        }
    }
}

impl SimConfig {
    /// Check every profile, that names are unique and that `time_scale` is usable.
    ///
    /// # Errors
    /// A message naming the first problem.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.time_scale.is_finite() && self.time_scale >= 0.0) {
            return Err(format!(
                "time_scale {} must be finite and >= 0",
                self.time_scale
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for p in &self.profiles {
            p.validate()?;
            if !seen.insert(p.name.as_str()) {
                return Err(format!("two profiles are named {:?}", p.name));
            }
        }
        Ok(())
    }

    /// The profile named `name`, if served.
    pub fn profile(&self, name: &str) -> Option<&ProviderProfile> {
        self.profiles.iter().find(|p| p.name == name)
    }
}

fn nodelay(listener: TcpListener) -> impl axum::serve::Listener<Addr = std::net::SocketAddr> {
    listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!("set_nodelay: {e}");
        }
    })
}

/// Serve the simulated providers on `listener` until the future is dropped.
///
/// Routes: `POST /{provider}/v1/chat/completions`, `POST /{provider}/v1/messages`,
/// `POST /{provider}/v1/responses` (see [`provider`]), `GET /{provider}/v1/models`,
/// `GET /_truth/{probe_id}`, `GET /_truth` (every kept request, JSON lines), `GET /healthz`. Connections already open when the future is
/// dropped finish their current responses. Every connection gets `TCP_NODELAY` and, for the
/// ground truth, a socket wrapper that takes the `written` stamps (see [`truth`]).
///
/// # Errors
/// `InvalidInput` when `cfg` does not validate; otherwise only I/O errors of the server.
pub async fn serve_providers(listener: TcpListener, cfg: SimConfig) -> std::io::Result<()> {
    let router = providers_router(cfg)?;
    axum::serve(
        truth::TruthListener(listener),
        router.into_make_service_with_connect_info::<truth::ConnTap>(),
    )
    .await
}

/// Serve one recorded response (a `.sse` body file + its sibling `.expect.json`) to every
/// `POST` whose path ends in `/chat/completions`, `/messages` or `/responses`, until the
/// future is dropped.
///
/// # Errors
/// The files cannot be read or parsed, or the server fails.
pub async fn serve_replay(listener: TcpListener, sse_path: &Path) -> anyhow::Result<()> {
    let case = ReplayCase::load(sse_path)?;
    axum::serve(nodelay(listener), replay_router(case)).await?;
    Ok(())
}
