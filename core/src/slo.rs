//! Service-level objectives and goodput (docs/metrics.md "SLOs and goodput").
//!
//! A scenario's `slo = { ttft_ms = 2000, tpot_ms = 50, e2e_ms = 30000, ttft_p95_ms = 1500,
//! goodput_pct = 95 }` has, each optional:
//! * **per-request bounds** (`ttft_ms`, `tpot_ms`, `e2e_ms`): a request *meets the SLO* when
//!   it ended `ok` and each bound given holds for it ([`Slo::met`]); **goodput** is the share
//!   of a cell's requests (final attempts, warm-up, `cancelled` and `dropped` left out) that
//!   met it, and the rate of those, per second of the phase (AIPerf's and vLLM's goodput,
//!   DistServe's definition);
//! * **percentile bounds** (`ttft_p95_ms`, `e2e_p99_ms`, …): the cell's or step's percentile
//!   of that metric at most the bound;
//! * `goodput_pct` (default [`DEFAULT_GOODPUT_PCT`]): a cell or rate step **meets the SLO**
//!   when its goodput is at least this and every percentile bound holds. The SLO search and
//!   the `goodput_below` check rule use it.
//!
//! Latencies are from the request's actual send (`ttft`, `tpot`, `e2e` of the record); a
//! non-streamed request's TTFT is its whole answer's arrival.

use serde::{Deserialize, Serialize};

use crate::metrics::Metric;
use crate::record::{Outcome, ProbeRecord};

/// Default [`Slo::goodput_pct`]: 90 %.
pub const DEFAULT_GOODPUT_PCT: f64 = 90.0;

/// A scenario's SLO (see the [module](self)).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Slo {
    /// Per request: TTFT at most this, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<f64>,
    /// Per request: TPOT at most this, ms (a request with fewer than two output tokens has no
    /// TPOT and meets this bound).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpot_ms: Option<f64>,
    /// Per request: E2E at most this, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub e2e_ms: Option<f64>,
    /// Bounds on percentiles of a cell or step.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub percentiles: Vec<PercentileBound>,
    /// A cell or step meets the SLO when its goodput is at least this, % in (0, 100].
    pub goodput_pct: f64,
}

/// `{metric}_p{percentile}_ms = ms`: the percentile of `metric` at most `ms`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PercentileBound {
    /// `ttft`, `tpot` or `e2e`.
    pub metric: Metric,
    /// In (0, 100).
    pub percentile: f64,
    /// The bound, ms.
    pub ms: f64,
}

impl Slo {
    /// Whether it has per-request bounds (without them goodput is the share of `ok`
    /// requests).
    pub fn has_request_bounds(&self) -> bool {
        self.ttft_ms.is_some() || self.tpot_ms.is_some() || self.e2e_ms.is_some()
    }

    /// Whether the request whose final attempt is `rec` met every per-request bound: it ended
    /// `ok`, and its TTFT, TPOT and E2E are within the bounds given (a missing TTFT or E2E
    /// fails its bound; a missing TPOT passes only with fewer than two output tokens).
    pub fn met(&self, rec: &ProbeRecord) -> bool {
        if rec.outcome() != Outcome::Ok {
            return false;
        }
        let within = |bound_ms: Option<f64>, v_us: Option<u64>| match (bound_ms, v_us) {
            (None, _) => true,
            (Some(ms), Some(us)) => us as f64 <= ms * 1000.0,
            (Some(_), None) => false,
        };
        let tpot_ok = match (self.tpot_ms, rec.tpot_us) {
            (Some(_), None) => rec.output_tokens < 2,
            (b, v) => within(b, v),
        };
        // A non-streamed answer's first token arrives with the whole answer: its E2E.
        let ttft_us = if rec.stream {
            rec.ttft_us
        } else {
            rec.ttft_us.or(rec.e2e_us)
        };
        within(self.ttft_ms, ttft_us) && tpot_ok && within(self.e2e_ms, rec.e2e_us)
    }

    /// One line: `TTFT ≤ 2000 ms, TPOT ≤ 50 ms, P95 TTFT ≤ 1500 ms; goodput ≥ 95 %`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        for (name, b) in [
            ("TTFT", self.ttft_ms),
            ("TPOT", self.tpot_ms),
            ("E2E", self.e2e_ms),
        ] {
            if let Some(ms) = b {
                parts.push(format!("{name} ≤ {ms} ms"));
            }
        }
        for p in &self.percentiles {
            parts.push(format!(
                "P{} {} ≤ {} ms",
                p.percentile,
                p.metric.as_str().to_uppercase(),
                p.ms
            ));
        }
        if parts.is_empty() {
            return format!("goodput (ok requests) ≥ {} %", self.goodput_pct);
        }
        format!("{}; goodput ≥ {} %", parts.join(", "), self.goodput_pct)
    }
}

/// Fewest judged requests for a goodput verdict ([`Judgement::meets`]): 20.
pub const MIN_GOODPUT_REQUESTS: u64 = 20;

/// What a cell or a rate step shows against an SLO ([`Slo::judge`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Judgement {
    /// `met / judged`, % (0 without judged requests).
    pub pct: f64,
    /// Percentile bounds exceeded, each `"P95 TTFT 1830 > 1500 ms"` ([`crate::metrics::fmt_ms`]).
    pub exceeded: Vec<String>,
    /// Meets the SLO: `Some(false)` when a percentile bound is exceeded (with at least
    /// [`MIN_GOODPUT_REQUESTS`] judged); `None` with fewer judged requests, or when a bound's
    /// percentile is not supported by its samples ([`crate::sample_size::supported`]); else
    /// whether `pct ≥ goodput_pct`.
    pub meets: Option<bool>,
}

impl Slo {
    /// The one judgement of a cell or step (the coordinator's and ClickHouse's summaries, and
    /// the agent's SLO-search steps, all call it): `met` of `judged` requests met the
    /// per-request bounds; `percentile` gives, for a bound, the number of samples of its
    /// metric and the value at its percentile in ms (`None`: no samples).
    pub fn judge(
        &self,
        judged: u64,
        met: u64,
        percentile: impl Fn(&PercentileBound) -> Option<(u64, f64)>,
    ) -> Judgement {
        let met = met.min(judged);
        let pct = if judged == 0 {
            0.0
        } else {
            met as f64 * 100.0 / judged as f64
        };
        let mut exceeded = Vec::new();
        let mut unjudged = judged < MIN_GOODPUT_REQUESTS;
        for b in &self.percentiles {
            match percentile(b) {
                Some((n, ms)) if crate::sample_size::supported(n, b.percentile) => {
                    if ms > b.ms {
                        exceeded.push(format!(
                            "P{} {} {} > {} ms",
                            b.percentile,
                            b.metric.as_str().to_uppercase(),
                            crate::metrics::fmt_ms(ms),
                            b.ms
                        ));
                    }
                }
                _ => unjudged = true,
            }
        }
        let meets = if !exceeded.is_empty() && judged >= MIN_GOODPUT_REQUESTS {
            Some(false)
        } else if unjudged {
            None
        } else {
            Some(pct >= self.goodput_pct)
        };
        Judgement {
            pct,
            exceeded,
            meets,
        }
    }
}

/// The verdict of one rate step from its [`Judgement::meets`]: `agent_limited` when arrivals
/// were dropped (the agent could not send the offered load: never the provider's fault),
/// `insufficient` with fewer than `min_requests` judged requests or no verdict, else met or
/// missed.
pub fn step_verdict(
    meets: Option<bool>,
    judged: u64,
    dropped: u64,
    min_requests: u32,
) -> crate::load::StepVerdict {
    use crate::load::StepVerdict;
    if dropped > 0 {
        return StepVerdict::AgentLimited;
    }
    if judged < u64::from(min_requests) {
        return StepVerdict::Insufficient;
    }
    match meets {
        Some(true) => StepVerdict::Met,
        Some(false) => StepVerdict::Missed,
        None => StepVerdict::Insufficient,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(ttft_ms: u64, e2e_ms: u64, tokens: u32) -> ProbeRecord {
        ProbeRecord {
            outcome: Some(Outcome::Ok),
            ttft_us: Some(ttft_ms * 1000),
            e2e_us: Some(e2e_ms * 1000),
            tpot_us: crate::metrics::tpot_us(ttft_ms * 1000, e2e_ms * 1000, tokens),
            output_tokens: tokens,
            final_attempt: true,
            ..ProbeRecord::default()
        }
    }

    fn slo() -> Slo {
        Slo {
            ttft_ms: Some(500.0),
            tpot_ms: Some(20.0),
            e2e_ms: None,
            percentiles: vec![],
            goodput_pct: DEFAULT_GOODPUT_PCT,
        }
    }

    #[test]
    fn a_request_meets_the_slo_only_when_every_bound_holds() {
        let s = slo();
        assert!(s.met(&ok(500, 2500, 101))); // TTFT at the bound, TPOT 20 ms
        assert!(!s.met(&ok(501, 2501, 101))); // TTFT over
        assert!(!s.met(&ok(100, 3000, 101))); // TPOT 29 ms
        assert!(s.met(&ok(100, 100, 1))); // one token: no TPOT to judge
        let mut failed = ok(100, 200, 5);
        failed.outcome = Some(Outcome::Http5xx);
        assert!(!s.met(&failed));
        let mut no_ttft = ok(100, 200, 5);
        no_ttft.ttft_us = None;
        no_ttft.stream = true;
        assert!(!s.met(&no_ttft));
        // Not streamed: the first token came with the whole answer, at its E2E.
        let mut whole = ok(100, 400, 1);
        whole.ttft_us = None;
        assert!(s.met(&whole));
        whole.e2e_us = Some(600_000);
        assert!(!s.met(&whole));
    }

    #[test]
    fn it_describes_itself_in_one_line() {
        let mut s = slo();
        s.percentiles.push(PercentileBound {
            metric: Metric::E2e,
            percentile: 95.0,
            ms: 8000.0,
        });
        assert_eq!(
            s.describe(),
            "TTFT ≤ 500 ms, TPOT ≤ 20 ms, P95 E2E ≤ 8000 ms; goodput ≥ 90 %"
        );
    }
}
