//! Ground truth for long contexts and SLO rates: what a jitter-free profile's TTFT is for a
//! prompt, how long a request holds a serving slot, and the highest constant arrival rate at
//! which an SLO's per-request bounds still hold (see [`ProviderProfile`]'s *Serving
//! capacity*).
//!
//! # The model
//! A request with `P` prompt tokens ([`crate::tokens`]: for a generated prompt of `w` words,
//! [`generated_prompt_tokens`](crate::tokens::generated_prompt_tokens)) and `n` output tokens
//! on a profile without jitter, tail, faults, cache hits or reasoning, with one token per
//! chunk, answered at time scale `k`:
//! * server-side TTFT `t(P) = round(k × (ttft_base_us + prefill_us_per_input_token × P))`
//!   ([`ttft_us`]), exactly what the planner plans;
//! * each later token one `round(k × itl_median_us)` after the previous one;
//! * the request holds a slot for `S = t(P) + (n − 1) × round(k × itl_median_us)`
//!   ([`service_us`]);
//! * a client in a region `d` µs away ([`crate::RegionTable::delay_us`]; not scaled) sees,
//!   for a streamed request, TTFT `d + wait + t(P)`, E2E `d + wait + S`, TPOT
//!   `(S − t(P)) / (n − 1)` (plus its own loopback and parsing time, tens of µs).
//!
//! With `capacity` `c` and requests arriving at a constant rate `r` (one every `1/r` s, from
//! one client or spread over several), no request waits while `r ≤ c / S`
//! ([`capacity_rps`]); above it each request waits `S / c − 1/r` longer than the one before,
//! so TTFT and E2E grow without bound. The SLO rate ([`slo_rate_rps`]) is therefore `c / S`
//! when the unloaded request meets every per-request bound, and 0 when it does not. A step of
//! finite length above `c / S` still meets the SLO while the queue is short: [`step_met_share`]
//! plays a step out exactly (FIFO, from an empty queue), so a test can tell how far above
//! `c / S` a search may find a step met.
//!
//! Times are µs (`_us`), rates requests per second (`_rps`), bounds ms as in
//! [`Slo`].

use latmesh_core::metrics::Metric;
use latmesh_core::slo::Slo;

use crate::profile::ProviderProfile;

fn scaled_us(us: f64, time_scale: f64) -> u64 {
    (us * time_scale).max(0.0).round() as u64
}

/// The server-side TTFT `profile` plans for a prompt of `prompt_tokens` tokens (the count
/// it bills, template included; none cached) at `time_scale`, in µs, from the moment its
/// service starts (region delay and queue wait excluded): the `x-sim-planned-ttft-us` of
/// such a request. Exact for a profile without TTFT jitter or tail; the median otherwise.
pub fn ttft_us(profile: &ProviderProfile, prompt_tokens: u32, time_scale: f64) -> u64 {
    let median = profile.ttft_base_us as f64
        + profile.prefill_us_per_input_token as f64 * f64::from(prompt_tokens);
    scaled_us(median, time_scale)
}

/// The gap between two tokens at `time_scale`, µs (exact without ITL jitter).
pub fn itl_us(profile: &ProviderProfile, time_scale: f64) -> u64 {
    scaled_us(profile.itl_median_us as f64, time_scale)
}

/// The planned time to second token (second token chunk) from the service start, µs:
/// [`ttft_us`] + one [`itl_us`] (one token per chunk).
pub fn ttst_us(profile: &ProviderProfile, prompt_tokens: u32, time_scale: f64) -> u64 {
    ttft_us(profile, prompt_tokens, time_scale) + itl_us(profile, time_scale)
}

/// How long a request of `prompt_tokens` prompt tokens and `output_tokens` output tokens
/// holds a serving slot, µs: [`ttft_us`] + (`output_tokens` − 1) × [`itl_us`] (the last
/// token's planned time; the terminal event goes out with it).
pub fn service_us(
    profile: &ProviderProfile,
    prompt_tokens: u32,
    output_tokens: u32,
    time_scale: f64,
) -> u64 {
    ttft_us(profile, prompt_tokens, time_scale)
        + u64::from(output_tokens.saturating_sub(1)) * itl_us(profile, time_scale)
}

/// The highest constant arrival rate, requests/s over all clients together, at which no
/// request of this shape waits for a slot: `capacity / S` ([`service_us`]). `None` for an
/// unlimited capacity (or a zero service time): no rate makes a queue.
pub fn capacity_rps(
    profile: &ProviderProfile,
    prompt_tokens: u32,
    output_tokens: u32,
    time_scale: f64,
) -> Option<f64> {
    let s = service_us(profile, prompt_tokens, output_tokens, time_scale);
    (profile.capacity > 0 && s > 0).then(|| f64::from(profile.capacity) * 1e6 / s as f64)
}

/// One kind of request of an SLO question: its size, how far its client is, and the time
/// scale the simulator runs at.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Workload {
    /// Prompt tokens as the provider counts them ([`crate::tokens`]).
    pub prompt_tokens: u32,
    /// Output tokens of every answer (an exact output length: `ignore_eos`, or a lab
    /// profile's fixed answers).
    pub output_tokens: u32,
    /// The region delay between the client and the provider's home, µs
    /// ([`crate::RegionTable::delay_us`]; not scaled).
    pub region_delay_us: u64,
    /// The simulator's [`time_scale`](crate::SimConfig::time_scale).
    pub time_scale: f64,
}

impl Workload {
    /// What a client sees of one request that waited `wait_us` for a slot, µs:
    /// `(ttft, tpot, e2e)` (`tpot` `None` with fewer than two output tokens).
    fn seen_us(&self, profile: &ProviderProfile, wait_us: u64) -> (u64, Option<u64>, u64) {
        let t = ttft_us(profile, self.prompt_tokens, self.time_scale);
        let s = service_us(
            profile,
            self.prompt_tokens,
            self.output_tokens,
            self.time_scale,
        );
        let tpot = (self.output_tokens >= 2).then(|| (s - t) / u64::from(self.output_tokens - 1));
        let d = self.region_delay_us + wait_us;
        (d + t, tpot, d + s)
    }
}

/// Whether a request seen as `(ttft, tpot, e2e)` µs meets the per-request bounds of `slo`
/// (as [`Slo::met`] judges an `ok` record).
fn meets(slo: &Slo, (ttft, tpot, e2e): (u64, Option<u64>, u64)) -> bool {
    let within =
        |bound_ms: Option<f64>, us: u64| bound_ms.is_none_or(|ms| us as f64 <= ms * 1000.0);
    let tpot_ok = match (slo.tpot_ms, tpot) {
        (Some(ms), Some(us)) => us as f64 <= ms * 1000.0,
        _ => true,
    };
    within(slo.ttft_ms, ttft) && tpot_ok && within(slo.e2e_ms, e2e)
}

/// Whether a request of workload `w`, sent to an idle `profile`, meets every bound of
/// `slo`: its per-request bounds, and its percentile bounds on `ttft`, `tpot` and `e2e`
/// (every request of a constant load below [`capacity_rps`] is alike, so each percentile is
/// the request's value). A percentile bound on another metric is not judged here (the
/// campaign file admits only those three).
pub fn unloaded_meets(slo: &Slo, profile: &ProviderProfile, w: &Workload) -> bool {
    let seen = w.seen_us(profile, 0);
    let percentiles_hold = slo.percentiles.iter().all(|b| {
        let v = match b.metric {
            Metric::Ttft => Some(seen.0),
            Metric::Tpot => seen.1,
            Metric::E2e => Some(seen.2),
            _ => None,
        };
        v.is_none_or(|us| us as f64 <= b.ms * 1000.0)
    });
    meets(slo, seen) && percentiles_hold
}

/// The highest constant arrival rate (requests/s, over all clients of the provider: with one
/// agent in one region, that agent's rate) at which requests of workload `w` meet `slo` on
/// `profile`: [`capacity_rps`] when the unloaded request meets it ([`unloaded_meets`]), else
/// 0; `f64::INFINITY` for an unlimited capacity that meets it (no rate makes a queue).
pub fn slo_rate_rps(slo: &Slo, profile: &ProviderProfile, w: &Workload) -> f64 {
    if !unloaded_meets(slo, profile, w) {
        return 0.0;
    }
    capacity_rps(profile, w.prompt_tokens, w.output_tokens, w.time_scale).unwrap_or(f64::INFINITY)
}

/// One step of constant arrivals played out exactly: `rps` requests/s of workload `w` for
/// `duration_ms` (arrivals at `k / rps`, as latmesh's constant arrivals are, from an empty
/// queue), FIFO on `profile`'s `capacity` slots, each held [`service_us`]. Returns the share
/// (0..=1) of the step's requests that meet the per-request bounds of `slo`, and the
/// longest wait for a slot, µs. `(1, 0)` for a step without requests.
pub fn step_met_share(
    slo: &Slo,
    profile: &ProviderProfile,
    w: &Workload,
    rps: f64,
    duration_ms: u64,
) -> (f64, u64) {
    let s = service_us(profile, w.prompt_tokens, w.output_tokens, w.time_scale);
    let gap_us = 1e6 / rps;
    let span_us = duration_ms as f64 * 1000.0;
    let c = profile.capacity as usize;
    // Start of each request's service, µs (region delay left out: it shifts every arrival
    // alike).
    let mut starts: Vec<u64> = Vec::new();
    let (mut met, mut longest) = (0u64, 0u64);
    let mut k = 0u64;
    while rps > 0.0 && (k as f64 * gap_us) < span_us {
        let arrival = (k as f64 * gap_us) as u64;
        let free_at = if c > 0 && starts.len() >= c {
            starts[starts.len() - c] + s
        } else {
            0
        };
        let start = arrival.max(free_at);
        let wait = start - arrival;
        longest = longest.max(wait);
        starts.push(start);
        met += u64::from(meets(slo, w.seen_us(profile, wait)));
        k += 1;
    }
    if k == 0 {
        return (1.0, 0);
    }
    (met as f64 / k as f64, longest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::lab_profiles;
    use crate::tokens::generated_prompt_tokens;

    fn lab(name: &str) -> ProviderProfile {
        lab_profiles().into_iter().find(|p| p.name == name).unwrap()
    }

    /// `prompt_tokens` prompt tokens, `output_tokens` output tokens, `d` µs away, real time.
    fn w(prompt_tokens: u32, output_tokens: u32, d: u64) -> Workload {
        Workload {
            prompt_tokens,
            output_tokens,
            region_delay_us: d,
            time_scale: 1.0,
        }
    }

    fn slo(ttft_ms: f64, e2e_ms: Option<f64>) -> Slo {
        Slo {
            ttft_ms: Some(ttft_ms),
            tpot_ms: Some(20.0),
            e2e_ms,
            percentiles: vec![],
            goodput_pct: 90.0,
        }
    }

    #[test]
    fn long_ctx_ttft_grows_linearly_with_the_prompt() {
        let p = lab("long-ctx");
        let t = |w| ttft_us(&p, generated_prompt_tokens(&p, w), 1.0);
        assert_eq!((t(1000), t(8000), t(32_000)), (150_000, 500_000, 1_700_000));
        // Time scale: every server-side delay shrinks alike.
        assert_eq!(ttft_us(&p, 32_000, 0.1), 170_000);
        assert_eq!(ttst_us(&p, 32_000, 1.0), 1_710_000);
        // The other tokenizer bills more tokens, so prefills longer: 100 ms + 50 µs × 10,007.
        let s = lab("short-ctx");
        assert_eq!(ttft_us(&s, generated_prompt_tokens(&s, 8000), 1.0), 600_350);
    }

    #[test]
    fn slo_lab_meets_a_loose_slo_up_to_six_requests_per_second() {
        let p = lab("slo-lab");
        // 41 output tokens: S = 100 ms + 40 × 10 ms = 500 ms; 3 slots.
        assert_eq!(service_us(&p, 1000, 41, 1.0), 500_000);
        assert_eq!(capacity_rps(&p, 1000, 41, 1.0), Some(6.0));
        // The prompt does not matter (no prefill); the time scale does.
        assert_eq!(capacity_rps(&p, 32_000, 41, 1.0), Some(6.0));
        assert_eq!(capacity_rps(&p, 1000, 41, 0.1), Some(60.0));
        let loose = slo(300.0, Some(1000.0));
        assert_eq!(slo_rate_rps(&loose, &p, &w(1000, 41, 3_000)), 6.0);
        // An unloaded request already breaks a tight bound: no rate meets it.
        assert_eq!(slo_rate_rps(&slo(99.0, None), &p, &w(1000, 41, 0)), 0.0);
        assert_eq!(
            slo_rate_rps(&slo(300.0, Some(499.0)), &p, &w(1000, 41, 0)),
            0.0
        );
        // The region delay counts in what the client sees: 3 ms more breaks a 102 ms bound.
        assert_eq!(slo_rate_rps(&slo(102.0, None), &p, &w(1000, 41, 0)), 6.0);
        assert_eq!(
            slo_rate_rps(&slo(102.0, None), &p, &w(1000, 41, 3_000)),
            0.0
        );
        // TPOT 10 ms: a 9 ms bound fails.
        let mut tight_tpot = loose.clone();
        tight_tpot.tpot_ms = Some(9.0);
        assert_eq!(slo_rate_rps(&tight_tpot, &p, &w(1000, 41, 0)), 0.0);
        // Percentile bounds are judged on the unloaded values.
        let mut p95 = loose.clone();
        p95.percentiles.push(latmesh_core::slo::PercentileBound {
            metric: Metric::E2e,
            percentile: 95.0,
            ms: 450.0,
        });
        assert_eq!(slo_rate_rps(&p95, &p, &w(1000, 41, 0)), 0.0);
        // Unlimited capacity: every rate.
        let free = lab("long-ctx");
        assert_eq!(capacity_rps(&free, 1000, 41, 1.0), None);
        assert_eq!(
            slo_rate_rps(&slo(2000.0, None), &free, &w(1000, 41, 0)),
            f64::INFINITY
        );
    }

    #[test]
    fn steps_at_or_below_the_rate_never_queue_and_above_it_the_queue_grows() {
        let p = lab("slo-lab");
        let loose = slo(300.0, Some(1000.0));
        let step = |rps| step_met_share(&loose, &p, &w(1000, 41, 3_000), rps, 10_000);
        for rps in [1.0, 3.0, 5.9, 6.0] {
            assert_eq!(step(rps), (1.0, 0), "{rps}");
        }
        // 7.5/s: from the 4th request on, every third waits 100 ms more (33.3 ms a request:
        // 500/3 − 133.3); the TTFT bound leaves 197 ms of slack: 6 of 75 requests meet it.
        let (share, longest) = step(7.5);
        assert_eq!(share, 6.0 / 75.0);
        assert!(longest > 2_000_000, "{longest}");
        // 12/s (twice the rate): almost nothing meets it.
        assert!(step(12.0).0 < 0.1);
        // Just above the rate, a short step still looks fine: why a search's answer is
        // within one step of `capacity_rps`, not exactly it.
        let (share, _) = step_met_share(&loose, &p, &w(1000, 41, 3_000), 6.3, 2_000);
        assert_eq!(share, 1.0);
        assert_eq!(
            step_met_share(&loose, &p, &w(1000, 41, 0), 6.0, 0),
            (1.0, 0)
        );
    }
}
