//! `latmesh check`: regression alerts. Rules from a TOML file are evaluated per (region,
//! provider, scenario) on a current campaign against a baseline; fired rules are printed
//! (or `--json`), optionally POSTed to a webhook, and the exit status says what happened:
//! **0** no rule fired, **1** at least one fired, **2** an error (bad rules, unreachable
//! ClickHouse or webhook, unknown campaign…).
//!
//! ```text
//! latmesh check --current CAMPAIGN --baseline BASE_CAMPAIGN --rules rules.toml [--clickhouse-url URL]
//! latmesh check --current CAMPAIGN --baseline-days 7 --rules rules.toml
//! latmesh check --current-summary now.json --baseline-summary before.json --rules rules.toml
//!               [--webhook https://hooks.example/T0/B0] [--webhook-always] [--json]
//! ```
//!
//! Where the numbers come from:
//!
//! * `--current CAMPAIGN` / `--baseline CAMPAIGN`: the stored campaign's counts from its
//!   matrix ([`query::matrix`]: attempts, error % of attempts) and every percentile a rule
//!   reads, with its 95 % interval, from its merged histograms (the report analysis'
//!   [`PercentileCi`]: HdrHistogram's `value_at_quantile`, the matrix's convention).
//! * `--baseline-days N`: every stored row (any campaign) whose time lies in the `N` days
//!   before the current campaign's start ([`query::matrix_filtered`] with a time filter, the
//!   agents' clocks), merged per (region, provider, scenario) — a rolling baseline.
//! * `--current-summary FILE` / `--baseline-summary FILE`: the JSON summaries `campaign launch
//!   --json` (or the demo) writes; no ClickHouse needed. They carry P50/P90/P95/P99 (and the
//!   campaign's `percentiles`) of TTFT, TTFC and E2E with their sample count and 95 %
//!   intervals, and P50 of TPOT and ITL (no interval), so rules on other percentiles need
//!   ClickHouse. A summary written before intervals were stored gives point estimates only.
//!
//! # Rules file
//!
//! ```toml
//! [[rules]]
//! name = "ttft-p99-regression"   # optional (default: kind, metric, percentile)
//! kind = "p99_increase_pct"      # = kind "increase_pct" with percentile = 99
//! metric = "ttft"                # default ttft
//! threshold = 30                 # fires when current > baseline × (1 + 30 %), significantly
//!
//! [[rules]]
//! kind = "p95_above_prev_day_mean"
//! metric = "ttft"
//! factor = 2                     # fires when each of the last 3 runs has P95 > 2 × the mean
//! consecutive_runs = 3           #   P95 of the runs of the 24 h before the first of them
//!
//! [[rules]]
//! kind = "absolute"
//! metric = "e2e"
//! percentile = 99
//! limit_ms = 2000                # fires when current P99 is surely (95 %) > 2000 ms
//!
//! [[rules]]
//! kind = "error_pct_above"
//! limit_pct = 5                  # fires when the error % of attempts is surely above 5
//!
//! [[rules]]
//! kind = "goodput_below"
//! limit_pct = 90                 # fires when the SLO goodput is surely below 90 %
//!
//! [[rules]]
//! kind = "slo_rps_below"
//! limit_rps = 4                  # fires when the SLO search found no rate ≥ 4 rps meeting it
//! ```
//!
//! (and the silent-swap kinds `model_changed`, `fingerprint_changed`, `answers_changed`:
//! [below](#silent-swap-rules)).
//!
//! Every rule also takes `region` (default: each region, not the `ALL` row; `"ALL"`: only
//! the merged row), `provider` and `scenario` (default: every scenario but sweeps) and
//! `min_samples` (a floor on top of the sample-size policy below). A sweep scenario's matrix
//! cell merges every concurrency step, so two runs of it compare mixtures of load levels (and
//! of how loaded the agents' machines were): a rule checks one only when it names it with
//! `scenario`, and the report says which were left out. A `region`, `provider` or `scenario`
//! that names nothing in the current campaign is an error ([`check_filters`]).
//!
//! # Evidence: the sample-size policy and significance
//!
//! (docs/metrics.md, "Decisions", states the same rules for users.)
//!
//! * A latency rule checks a cell only when its percentile is **supported** on every side it
//!   reads: at least [`min_samples`]`(p)` samples (P50 6, P90 36, P95 72, P99 368 — the
//!   fewest for which a distribution-free 95 % interval exists), or the rule's `min_samples`
//!   when higher. Other cells are not checked and the report says how many and why.
//! * A rule **fires** only when the point estimate crosses its threshold **and** the change is
//!   significant by 95 % intervals (`analysis::stats` for percentiles, Wilson for error
//!   rates). Over the threshold without significance is listed as *not significant*
//!   ([`CheckReport::inconclusive`]), not fired.
//! * Intervals come from the merged histograms: computed from ClickHouse's buckets, or stored
//!   per percentile in the summary file. A side without them (a summary written before
//!   intervals were stored; TPOT and ITL medians) is compared on the point estimates (the
//!   sample counts still apply) and the report says so.
//!
//! Kinds:
//!
//! * `increase_pct` (or `pNN_increase_pct`): current > baseline × (1 + threshold / 100) on the
//!   point estimates, **and** the current interval's lower bound above the baseline
//!   interval's upper bound, for cells present in both (needs a baseline). The threshold is
//!   not required of the lower bound: a P99 interval of 1000 samples spans about P98.4–P99.7
//!   (10–20 % of typical latency tails), so "surely more than +30 %" would miss a real +40 %.
//! * `absolute` (or `pNN_absolute`): the interval's lower bound above `limit_ms` (surely over
//!   the limit; a point over it with the interval reaching below is *not significant*).
//! * `above_prev_day_mean` (or `pNN_above_prev_day_mean`): needs `--current CAMPAIGN`
//!   (ClickHouse). The *runs* are the stored campaigns with the current campaign's name (a
//!   series' runs share their plan's name, as do repeated launches of one file), ordered by
//!   start. The last `consecutive_runs` runs up to the current one (default 1) must each have
//!   the percentile's point estimate above `factor` × the mean of the point estimates of the
//!   runs that started in the 24 hours before the first of them, and its lower bound above
//!   the mean of those runs' upper bounds (the previous day's level is uncertain too). Runs
//!   whose percentile is not supported do not count; cells without such runs are not checked.
//!   Ignores the baseline options.
//! * `error_pct_above`: error % of attempts (non-`ok`, `cancelled` and `dropped` left out)
//!   whose 95 % Wilson interval lies above `limit_pct` (its lower bound above it).
//! * `goodput_below` (`limit_pct = 90`): per region × provider × scenario with an SLO, the
//!   goodput (requests that met every per-request bound / judged requests, warm-up left out;
//!   docs/metrics.md "SLOs and goodput") whose 95 % Wilson interval lies below `limit_pct`
//!   (its upper bound below it); a cell needs [`MIN_GOODPUT_REQUESTS`] judged requests (or
//!   the rule's `min_samples` when higher). From a summary file: the cell's `goodput`; from
//!   ClickHouse: `countIf(slo_met = 1)` / `countIf(slo_met IS NOT NULL)` of the rows with
//!   `warmup = 0` ([`check_queries::goodput_counts`]). Percentile bounds of the SLO are not
//!   this rule's: `absolute` checks a percentile.
//! * `slo_rps_below` (`limit_rps = 4`): per region × provider × SLO-search scenario, the
//!   search's answer (the highest rate per agent meeting the SLO, recomputed from the merged
//!   step records: `Summary.searches`) below `limit_rps`, or no rate met. It fires when a
//!   step at a rate at or below the limit missed the SLO and no higher rate below that miss
//!   met it; an answer below the limit whose bracket reaches past it (met 4, missed 8, limit
//!   6), a search that stopped unjudged or at a `max_rps` below the limit, or one that ended
//!   `unstable` (docs/metrics.md "Rate steps and the SLO search"), is *not significant*. From ClickHouse the answers come from the stored summary
//!   ([`query::stored_summary`]).
//!
//! # Silent-swap rules
//!
//! Three kinds compare *what answered* with the baseline (pure verdicts in
//! `latmesh_results::swap`); each needs a baseline, fires per region × provider, and names
//! provider, region and time in the text and in the JSON (`time_unix_us`, `time`):
//!
//! ```toml
//! [[rules]]
//! kind = "model_changed"         # a `model` answered that the baseline never answered with
//!
//! [[rules]]
//! kind = "fingerprint_changed"   # the same for `system_fingerprint`
//!
//! [[rules]]
//! kind = "answers_changed"       # the campaign's `latmesh compat` quality answers changed
//! threshold_pct = 25             # optional (default 25): % of prompts whose modal answer changed
//! ```
//!
//! * `model_changed`: the names of every scenario (or the rule's `scenario`) merged per
//!   region × provider; fires when the current side answered with a name the baseline's same
//!   region × provider never answered with. Names are compared exactly: a dated name
//!   (`gpt-4o-2024-08-06` for `gpt-4o`) answered in both runs is no change, another date is.
//!   From ClickHouse the time is when the new name was first seen (the earliest send time of
//!   its answers, coordinator clock); from summary files, which keep no per-row time, the
//!   current campaign's start (the change happened during it). A baseline that answered no
//!   name there is skipped and counted.
//! * `fingerprint_changed`: the same for `system_fingerprint`, only where the baseline has
//!   fingerprints (many servers send none).
//! * `answers_changed`: ClickHouse only (summary files do not carry quality samples; the rule
//!   is skipped and says so). The latest `latmesh compat` run stored for the current campaign
//!   (`--current`) and for the baseline (`--baseline`; `--baseline-days`: the latest run that
//!   started in the window) are compared per provider and the region the current run ran
//!   from: per prompt answered in both, whether its modal answer hash changed. Fires when the
//!   share of changed prompts exceeds `threshold_pct`, or when the current accuracy is
//!   significantly below the baseline's (95 % Wilson intervals, each prompt counted once,
//!   separated). The time is the current run's start; the message gives both runs, the counts
//!   and the intervals.
//!
//! # Webhook
//!
//! With `--webhook URL` (http or https), the [`CheckReport`] is POSTed as JSON
//! (`{"campaign", "baseline", "fired": [...], "inconclusive": [...], "checked", "skipped"}`) when a rule fired
//! (`--webhook-always`: every time). A non-2xx answer or no answer within 10 s is an error
//! (exit 2).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow, bail};
use clap::Args;
use latmesh_core::metrics::Metric;
use serde::{Deserialize, Serialize};

use latmesh_core::quality::QualitySample;
use latmesh_results::report_data::ALL;
use latmesh_results::stats::{PercentileCi, min_samples};
use latmesh_results::swap::{NameVerdict, Names, Seen, compare_answers, compare_names};
use latmesh_store::check_queries::RowScope;
use latmesh_store::query::{NameColumn, RunScope};
use latmesh_store::{self as store, QueryFilter, check_queries, query};

pub use crate::check_report::{CheckReport, Fired};
use crate::webhook::{WEBHOOK_TIMEOUT, post_json, redact_url};
use latmesh_results::slo_stats::{MIN_GOODPUT_REQUESTS, SearchRow};
use latmesh_results::summary::{MatrixCell, Summary};

/// Arguments of `latmesh check`.
#[derive(Args, Debug, Clone, Default)]
pub struct CheckArgs {
    /// The campaign to check (its id in ClickHouse).
    #[arg(
        long,
        required_unless_present = "current_summary",
        conflicts_with = "current_summary"
    )]
    pub current: Option<String>,
    /// The campaign to check, as a JSON summary file (`campaign launch --json`).
    #[arg(long, value_name = "FILE")]
    pub current_summary: Option<PathBuf>,
    /// Baseline campaign id (ClickHouse).
    #[arg(long, value_name = "BASE_CAMPAIGN", conflicts_with_all = ["baseline_days", "baseline_summary"])]
    pub baseline: Option<String>,
    /// Rolling baseline: every stored row of the N days before the current campaign's start.
    #[arg(long, value_name = "N", conflicts_with = "baseline_summary")]
    pub baseline_days: Option<f64>,
    /// Baseline as a JSON summary file.
    #[arg(long, value_name = "FILE")]
    pub baseline_summary: Option<PathBuf>,
    /// Rules file (TOML, `[[rules]]`).
    #[arg(long, value_name = "RULES.toml")]
    pub rules: PathBuf,
    /// ClickHouse HTTP URL (needed unless both sides are summary files).
    #[arg(long, env = "LATMESH_CLICKHOUSE_URL")]
    pub clickhouse_url: Option<String>,
    /// ClickHouse database.
    #[arg(long, env = "LATMESH_CLICKHOUSE_DB", default_value = "latmesh")]
    pub clickhouse_db: String,
    /// POST the report (JSON) here when a rule fired (http:// or https://).
    #[arg(long, value_name = "URL")]
    pub webhook: Option<String>,
    /// POST to the webhook even when no rule fired.
    #[arg(long, requires = "webhook")]
    pub webhook_always: bool,
    /// Print the report as JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// How long to wait for ClickHouse (the whole check's queries).
    #[command(flatten)]
    pub timeouts: crate::cmd::query::TimeoutArgs,
}

/// What a rule compares.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RuleKind {
    /// Current percentile above baseline × (1 + threshold %).
    IncreasePct {
        /// %.
        threshold_pct: f64,
    },
    /// Current percentile above a limit.
    Absolute {
        /// ms.
        limit_ms: f64,
    },
    /// The last runs' percentile above `factor` × the previous day's mean of it.
    AbovePrevDayMean {
        /// Multiple of the previous day's mean.
        factor: f64,
        /// Runs that must all be above.
        consecutive_runs: u32,
    },
    /// Error % of attempts above a limit.
    ErrorPctAbove {
        /// %.
        limit_pct: f64,
    },
    /// SLO goodput (met / judged requests) below a limit, per cell of a scenario with an SLO.
    GoodputBelow {
        /// %.
        limit_pct: f64,
    },
    /// The SLO search's answer (highest rate meeting the SLO) below a limit, or none met.
    SloRpsBelow {
        /// Requests/s per provider and agent.
        limit_rps: f64,
    },
    /// A `model` answered that the baseline never answered with (per region × provider).
    ModelChanged,
    /// A `system_fingerprint` answered that the baseline never answered with (per region ×
    /// provider; only where the baseline has fingerprints).
    FingerprintChanged,
    /// The quality answers of the campaign's `latmesh compat` run changed against the
    /// baseline's: more prompts with another modal answer than `threshold_pct`, or the
    /// accuracy significantly lower.
    AnswersChanged {
        /// % of prompts (default 25).
        threshold_pct: f64,
    },
}

/// Default `threshold_pct` of `answers_changed`.
pub const DEFAULT_ANSWERS_THRESHOLD_PCT: f64 = 25.0;

impl RuleKind {
    /// Whether the rule reads a latency percentile (`increase_pct`, `absolute`,
    /// `above_prev_day_mean`).
    pub fn is_latency(&self) -> bool {
        matches!(
            self,
            RuleKind::IncreasePct { .. }
                | RuleKind::Absolute { .. }
                | RuleKind::AbovePrevDayMean { .. }
        )
    }

    /// Whether it is a silent-swap rule (`model_changed`, `fingerprint_changed`,
    /// `answers_changed`): it compares what answered, not a cell's numbers.
    pub fn is_swap(&self) -> bool {
        matches!(
            self,
            RuleKind::ModelChanged | RuleKind::FingerprintChanged | RuleKind::AnswersChanged { .. }
        )
    }
}

/// A validated rule.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Rule {
    /// Its name (from the file, or kind + metric + percentile).
    pub name: String,
    /// What it compares.
    #[serde(flatten)]
    pub kind: RuleKind,
    /// Metric (latency rules).
    pub metric: Metric,
    /// Percentile, 0 < p < 100 (latency rules).
    pub percentile: f64,
    /// Only this region (`ALL`: the merged row); `None`: every region, not `ALL`.
    pub region: Option<String>,
    /// Only this provider.
    pub provider: Option<String>,
    /// Only this scenario.
    pub scenario: Option<String>,
    /// A floor on the samples of a cell (latency rules: of the percentile's metric; error
    /// rules: attempts) on top of the sample-size policy (latency rules always need
    /// `analysis::stats::min_samples(percentile)`, error rules 1); 0 when not given.
    pub min_samples: u64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RulesFile {
    #[serde(default)]
    rules: Vec<RuleSection>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleSection {
    name: Option<String>,
    kind: String,
    metric: Option<String>,
    percentile: Option<f64>,
    threshold: Option<f64>,
    limit_ms: Option<f64>,
    limit_pct: Option<f64>,
    limit_rps: Option<f64>,
    factor: Option<f64>,
    consecutive_runs: Option<u32>,
    threshold_pct: Option<f64>,
    region: Option<String>,
    provider: Option<String>,
    scenario: Option<String>,
    min_samples: Option<u64>,
}

/// Parses and validates a rules file's text; errors name the rule (`rules[1].threshold`).
///
/// # Errors
/// A TOML error, or a rule that is incomplete or out of range.
pub fn parse_rules(text: &str) -> anyhow::Result<Vec<Rule>> {
    // toml's whole message: where (line, column, the line itself) and what.
    let file: RulesFile = toml::from_str(text).map_err(|e| {
        anyhow!(
            "{}",
            latmesh_core::suggest::annotate_serde(e.to_string().trim_end())
        )
    })?;
    if file.rules.is_empty() {
        bail!("no [[rules]]");
    }
    let mut out = Vec::new();
    for (i, r) in file.rules.iter().enumerate() {
        let key = |f: &str| format!("rules[{i}].{f}");
        // `p99_increase_pct` = `increase_pct` at 99.
        let (prefix_pct, base) = match r.kind.split_once('_') {
            Some((p, rest))
                if p.len() > 1
                    && p.starts_with('p')
                    && p[1..].chars().all(|c| c.is_ascii_digit()) =>
            {
                (Some(p[1..].parse::<f64>()?), rest)
            }
            _ => (None, r.kind.as_str()),
        };
        let percentile = match (prefix_pct, r.percentile) {
            (Some(a), Some(b)) if a != b => {
                bail!(
                    "{}: {b} contradicts the kind {:?} (P{a})",
                    key("percentile"),
                    r.kind
                )
            }
            (Some(p), _) | (None, Some(p)) => Some(p),
            (None, None) => None,
        };
        let need = |v: Option<f64>, f: &str| -> anyhow::Result<f64> {
            let v = v.ok_or_else(|| anyhow!("{}: missing (kind {:?})", key(f), r.kind))?;
            if !(v.is_finite() && v >= 0.0) {
                bail!("{}: {v} is not a number ≥ 0", key(f));
            }
            Ok(v)
        };
        let kind = match base {
            "increase_pct" => RuleKind::IncreasePct {
                threshold_pct: need(r.threshold, "threshold")?,
            },
            "absolute" => RuleKind::Absolute {
                limit_ms: need(r.limit_ms, "limit_ms")?,
            },
            "above_prev_day_mean" => {
                let factor = need(r.factor, "factor")?;
                let consecutive_runs = r.consecutive_runs.unwrap_or(1);
                if consecutive_runs == 0 || consecutive_runs > 1000 {
                    bail!(
                        "{}: {consecutive_runs} is not in 1..=1000",
                        key("consecutive_runs")
                    );
                }
                RuleKind::AbovePrevDayMean {
                    factor,
                    consecutive_runs,
                }
            }
            "error_pct_above" if prefix_pct.is_none() => RuleKind::ErrorPctAbove {
                limit_pct: need(r.limit_pct, "limit_pct")?,
            },
            "goodput_below" if prefix_pct.is_none() => {
                let limit_pct = need(r.limit_pct, "limit_pct")?;
                if limit_pct <= 0.0 || limit_pct > 100.0 {
                    bail!(
                        "{}: {limit_pct} is not a share of requests (0 < limit ≤ 100)",
                        key("limit_pct")
                    );
                }
                RuleKind::GoodputBelow { limit_pct }
            }
            "slo_rps_below" if prefix_pct.is_none() => {
                let limit_rps = need(r.limit_rps, "limit_rps")?;
                if limit_rps <= 0.0 {
                    bail!("{}: give a rate > 0 (requests/s)", key("limit_rps"));
                }
                RuleKind::SloRpsBelow { limit_rps }
            }
            "model_changed" if prefix_pct.is_none() => RuleKind::ModelChanged,
            "fingerprint_changed" if prefix_pct.is_none() => RuleKind::FingerprintChanged,
            "answers_changed" if prefix_pct.is_none() => {
                let threshold_pct = match r.threshold_pct {
                    None => DEFAULT_ANSWERS_THRESHOLD_PCT,
                    Some(_) => need(r.threshold_pct, "threshold_pct")?,
                };
                if threshold_pct >= 100.0 {
                    bail!(
                        "{}: {threshold_pct} can never be exceeded (a share of prompts, 0 ≤ t < 100)",
                        key("threshold_pct")
                    );
                }
                RuleKind::AnswersChanged { threshold_pct }
            }
            _ => bail!(
                "{}: {:?} is not a rule kind (increase_pct, absolute, above_prev_day_mean — each also as pNN_… —, error_pct_above, goodput_below, slo_rps_below, model_changed, fingerprint_changed, answers_changed)",
                key("kind"),
                r.kind
            ),
        };
        let latency = kind.is_latency();
        // `metric` and `percentile` choose a latency rule's percentile: on another kind they
        // would be ignored, so they are refused.
        for (field, given) in [
            ("metric", r.metric.is_some()),
            ("percentile", percentile.is_some()),
        ] {
            if given && !latency {
                bail!(
                    "{}: does not apply to kind {:?}, which judges no latency percentile: remove it",
                    key(field),
                    r.kind
                );
            }
        }
        let percentile = match percentile {
            Some(p) if p > 0.0 && p < 100.0 => p,
            Some(p) => bail!(
                "{}: {p} is not a percentile (0 < p < 100)",
                key("percentile")
            ),
            None if latency => bail!(
                "{}: missing: give percentile = 99 (or a kind such as \"p99_{base}\")",
                key("percentile")
            ),
            None => 0.0,
        };
        let metric = match &r.metric {
            None => Metric::Ttft,
            Some(m) => Metric::parse(m).ok_or_else(|| {
                anyhow!(
                    "{}: {m:?} is not a metric{}",
                    key("metric"),
                    latmesh_core::suggest::hint(m, Metric::ALL.iter().map(|m| m.as_str()))
                )
            })?,
        };
        let name = r.name.clone().unwrap_or_else(|| {
            if latency {
                format!("{base} {metric} P{percentile}")
            } else {
                base.to_string()
            }
        });
        out.push(Rule {
            name,
            kind,
            metric,
            percentile,
            region: r.region.clone(),
            provider: r.provider.clone(),
            scenario: r.scenario.clone(),
            min_samples: r.min_samples.unwrap_or(0),
        });
    }
    Ok(out)
}

/// Percentile as a map key (thousandths).
fn pkey(p: f64) -> u32 {
    (p * 1000.0).round() as u32
}

/// One percentile of one cell as the rules read it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Estimate {
    /// The point estimate (HdrHistogram's `value_at_quantile`), ms.
    pub ms: f64,
    /// Samples behind it.
    pub n: u64,
    /// Its 95 % confidence interval (lower, upper), ms; `None` when the percentile is not
    /// supported by `n`, or the source carries no intervals (a summary file without them).
    pub ci_ms: Option<(f64, f64)>,
}

impl Estimate {
    /// Percentile `percentile` of `h` with its interval ([`PercentileCi::of`]).
    pub fn of(h: &hdrhistogram::Histogram<u64>, percentile: f64) -> Estimate {
        let p = PercentileCi::of(h, percentile);
        Estimate {
            ms: p.estimate_ms,
            n: p.n,
            ci_ms: p.ci.map(|c| (c.lower_ms, c.upper_ms)),
        }
    }
}

/// The numbers of one cell that rules read.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CellStats {
    /// `ok` attempts.
    pub samples: u64,
    /// Attempts (any outcome).
    pub attempts: u64,
    /// Error % of attempts.
    pub error_pct: f64,
    /// Failed attempts and the attempts counted in `error_pct`
    /// ([`latmesh_results::aggregate::failed_attempts`]).
    pub failed: (u64, u64),
    /// SLO goodput: (met, judged) requests, warm-up left out; `None` when the scenario has
    /// no SLO (or, from ClickHouse, no request was judged).
    pub goodput: Option<(u64, u64)>,
    /// (metric, percentile key) → estimate.
    values: BTreeMap<(Metric, u32), Estimate>,
}

impl CellStats {
    /// The percentile `p` of `metric`, ms, when known.
    pub fn value(&self, metric: Metric, p: f64) -> Option<f64> {
        self.estimate(metric, p).map(|e| e.ms)
    }

    /// The percentile `p` of `metric` with its sample count and interval, when known.
    pub fn estimate(&self, metric: Metric, p: f64) -> Option<&Estimate> {
        self.values.get(&(metric, pkey(p)))
    }

    /// Sets the percentile `p` of `metric`.
    pub fn set(&mut self, metric: Metric, p: f64, e: Estimate) {
        self.values.insert((metric, pkey(p)), e);
    }

    /// The counts and percentiles of a summary cell: P50/P90/P95/P99 and the campaign's
    /// list with their sample count and 95 % intervals ([`latmesh_results::summary::Percentiles::point`]); a summary
    /// written before intervals were stored gives point estimates only, with `n` = the cell's
    /// `ok` attempts.
    pub fn from_cell(c: &MatrixCell) -> CellStats {
        let mut s = CellStats {
            samples: c.samples,
            attempts: c.attempts,
            error_pct: c.error_pct,
            failed: latmesh_results::aggregate::failed_attempts(c),
            goodput: c.goodput.as_ref().map(|g| (g.met, g.requests)),
            values: BTreeMap::new(),
        };
        for (m, v) in [
            (Metric::Ttft, &c.ttft),
            (Metric::Ttfc, &c.ttfc),
            (Metric::E2e, &c.e2e),
        ] {
            let Some(v) = v else { continue };
            let n = if v.n > 0 { v.n } else { c.samples };
            let listed = v.points.iter().map(|p| p.percentile);
            for p in [50.0, 90.0, 95.0, 99.0].into_iter().chain(listed) {
                if let Some(pt) = v.point(p) {
                    let ci_ms = pt.lo_ms.zip(pt.hi_ms);
                    s.set(
                        m,
                        p,
                        Estimate {
                            ms: pt.ms,
                            n,
                            ci_ms,
                        },
                    );
                }
            }
        }
        let n = c.samples;
        for (m, v) in [(Metric::Tpot, c.tpot_p50_ms), (Metric::Itl, c.itl_p50_ms)] {
            if let Some(ms) = v {
                s.set(m, 50.0, Estimate { ms, n, ci_ms: None });
            }
        }
        s
    }
}

/// (region or `ALL`, provider, scenario).
pub type CellKey = (String, String, String);

/// One side of a check: a campaign's (or a time range's) cells.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// What it is (`campaign X`, `summary FILE`, `7 days before …`).
    pub label: String,
    /// Campaign id, when one campaign.
    pub campaign_id: Option<String>,
    /// Round 0 start, UTC µs, when known.
    pub start_at_unix_us: Option<i64>,
    /// Cells.
    pub cells: BTreeMap<CellKey, CellStats>,
    /// Whether every percentile can be computed, with its interval, from the merged
    /// histograms (ClickHouse); `false` for a summary file.
    pub exact: bool,
    /// The sweep (closed-loop concurrency steps) scenarios among the cells: rules that name
    /// no scenario leave them out (their cells merge every step).
    pub sweep_scenarios: BTreeSet<String>,
    /// Per cell, the `model`s answered (how often, first seen when known).
    pub models: BTreeMap<CellKey, Names>,
    /// Per cell, the `system_fingerprint`s answered.
    pub fingerprints: BTreeMap<CellKey, Names>,
    /// The quality samples of the `latmesh compat` run attached to this side (ClickHouse
    /// only; `None` when not read or none stored).
    pub answers: Option<AnswersRun>,
    /// The SLO searches' answers per region × provider (`Summary.searches`; from ClickHouse
    /// the stored summary's, read only for `slo_rps_below`).
    pub searches: Vec<SearchRow>,
}

/// The quality samples of one stored `latmesh compat` run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AnswersRun {
    /// The run's id.
    pub run_id: String,
    /// When it started, UTC µs.
    pub time_unix_us: i64,
    /// Its samples, each with the region it ran from.
    pub samples: Vec<(String, QualitySample)>,
}

/// The names of a summary cell's map, without time (a summary keeps none).
fn names_of(counts: &BTreeMap<String, u64>) -> Names {
    counts
        .iter()
        .map(|(n, c)| {
            (
                n.clone(),
                Seen {
                    count: *c,
                    first_unix_us: None,
                },
            )
        })
        .collect()
}

impl Snapshot {
    /// The cells of a JSON summary.
    pub fn from_summary(label: String, s: &Summary) -> Snapshot {
        Snapshot {
            label,
            campaign_id: Some(s.campaign_id.clone()),
            start_at_unix_us: Some(s.start_at_unix_us),
            cells: s
                .cells
                .iter()
                .map(|c| {
                    (
                        (c.region.clone(), c.provider.clone(), c.scenario.clone()),
                        CellStats::from_cell(c),
                    )
                })
                .collect(),
            exact: false,
            sweep_scenarios: s.sweeps.iter().map(|r| r.scenario.clone()).collect(),
            models: s
                .cells
                .iter()
                .map(|c| (cell_key(c), names_of(&c.answered_models)))
                .collect(),
            fingerprints: s
                .cells
                .iter()
                .map(|c| (cell_key(c), names_of(&c.system_fingerprints)))
                .collect(),
            answers: None,
            searches: s.searches.clone(),
        }
    }
}

/// The key of a summary cell.
fn cell_key(c: &MatrixCell) -> CellKey {
    (c.region.clone(), c.provider.clone(), c.scenario.clone())
}

/// The sweep scenarios of a stored plan (JSON); none when it does not parse.
fn sweep_scenarios_of(plan_json: &str) -> BTreeSet<String> {
    serde_json::from_str::<latmesh_core::plan::Plan>(plan_json)
        .map(|p| {
            p.scenarios
                .iter()
                .filter(|s| matches!(s.load, latmesh_core::load::LoadModel::Sweep(_)))
                .map(|s| s.name.clone())
                .collect()
        })
        .unwrap_or_default()
}

/// Reads a JSON summary file.
fn read_summary(path: &Path) -> anyhow::Result<Summary> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read summary {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not a summary", path.display()))
}

/// Where a ClickHouse snapshot's rows come from.
#[derive(Clone, Debug)]
enum Scope {
    /// One campaign.
    Campaign(String),
    /// A time range (agents' clocks, UTC µs, `[from, to)`), every campaign.
    Range(i64, i64),
}

impl Scope {
    /// The compat runs of this side.
    fn runs(&self) -> RunScope {
        match self {
            Scope::Campaign(id) => RunScope::Campaign(id.clone()),
            Scope::Range(from, to) => RunScope::Range(*from, *to),
        }
    }

    fn filter(&self) -> QueryFilter {
        match self {
            Scope::Campaign(id) => QueryFilter::campaign(id),
            Scope::Range(from, to) => QueryFilter {
                from_unix_us: Some(*from),
                to_unix_us: Some(*to),
                ..Default::default()
            },
        }
    }
}

/// Every (metric, percentile) of `needs` of every cell of the `histograms` rows `filter`
/// selects, per region and `ALL`, with its interval, from the merged histograms
/// ([`query::merged_histograms`], every sweep step merged).
async fn estimates(
    client: &clickhouse::Client,
    db: &str,
    filter: &QueryFilter,
    needs: &BTreeSet<(Metric, u32)>,
) -> anyhow::Result<BTreeMap<CellKey, Vec<(Metric, f64, Estimate)>>> {
    let mut out: BTreeMap<CellKey, Vec<(Metric, f64, Estimate)>> = BTreeMap::new();
    let metrics: Vec<Metric> = needs
        .iter()
        .map(|(m, _)| *m)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    for (g, h) in query::merged_histograms(client, db, filter, &metrics, false).await? {
        if h.is_empty() {
            continue;
        }
        for &(m, pk) in needs.iter().filter(|(m, _)| *m == g.metric) {
            let p = f64::from(pk) / 1000.0;
            out.entry((g.region.clone(), g.provider.clone(), g.scenario.clone()))
                .or_default()
                .push((m, p, Estimate::of(&h, p)));
        }
    }
    Ok(out)
}

/// A snapshot from ClickHouse: the counts of the matrix of `scope`, and every (metric,
/// percentile) of `needs` with its interval from the merged histograms.
async fn clickhouse_snapshot(
    client: &clickhouse::Client,
    db: &str,
    scope: &Scope,
    label: String,
    needs: &BTreeSet<(Metric, u32)>,
    swaps: SwapNeeds,
) -> anyhow::Result<Snapshot> {
    let rows = query::matrix_filtered(client, db, &scope.filter()).await?;
    let mut cells: BTreeMap<CellKey, CellStats> = rows
        .iter()
        .map(|r| {
            let mut s = CellStats::from_cell(&r.to_cell());
            // Percentiles come from the histograms below, with their intervals.
            s.values.clear();
            (
                (r.region.clone(), r.provider.clone(), r.scenario.clone()),
                s,
            )
        })
        .collect();
    for (key, list) in estimates(client, db, &scope.filter(), needs).await? {
        let cell = cells.entry(key).or_default();
        for (m, p, e) in list {
            cell.set(m, p, e);
        }
    }
    let stored = match scope {
        Scope::Campaign(id) => query::campaign(client, db, id).await?,
        Scope::Range(..) => None,
    };
    let start = stored.as_ref().map(|c| c.start_at_us as i64);
    let sweep_scenarios = stored
        .as_ref()
        .map(|c| sweep_scenarios_of(&c.plan_json))
        .unwrap_or_default();
    let (mut models, mut fingerprints) = (BTreeMap::new(), BTreeMap::new());
    if swaps.names {
        for (column, into) in [
            (NameColumn::Model, &mut models),
            (NameColumn::Fingerprint, &mut fingerprints),
        ] {
            for r in query::answered_names(client, db, &scope.filter(), column).await? {
                let names: &mut Names = into.entry((r.region, r.provider, r.scenario)).or_default();
                names.entry(r.name).or_default().merge(Seen {
                    count: r.n,
                    first_unix_us: Some(r.first_unix_us as i64),
                });
            }
        }
    }
    if swaps.goodput {
        let rows = match scope {
            Scope::Campaign(id) => RowScope::Campaign(id),
            Scope::Range(from, to) => RowScope::Range {
                from_unix_us: *from,
                to_unix_us: *to,
            },
        };
        for g in check_queries::goodput_counts(client, db, rows).await? {
            cells
                .entry((g.region, g.provider, g.scenario))
                .or_default()
                .goodput = Some((g.met, g.judged));
        }
    }
    let searches = match scope {
        Scope::Campaign(id) if swaps.searches => {
            query::stored_summary(client, db, &QueryFilter::campaign(id))
                .await?
                .searches
        }
        _ => Vec::new(),
    };
    let answers = if swaps.answers {
        match query::latest_run(client, db, &scope.runs(), query::RunPart::Quality).await? {
            Some(run) => Some(AnswersRun {
                samples: query::run_samples(client, db, &run.run_id).await?,
                run_id: run.run_id,
                time_unix_us: run.time_us as i64,
            }),
            None => None,
        }
    } else {
        None
    };
    Ok(Snapshot {
        label,
        campaign_id: match scope {
            Scope::Campaign(id) => Some(id.clone()),
            Scope::Range(..) => None,
        },
        start_at_unix_us: start,
        cells,
        exact: true,
        sweep_scenarios,
        models,
        fingerprints,
        answers,
        searches,
    })
}

/// [`clickhouse_snapshot`] of stored campaign `id` (`what`: how the error names it).
async fn stored_snapshot(
    client: &clickhouse::Client,
    db: &str,
    id: &str,
    what: &str,
    needs: &BTreeSet<(Metric, u32)>,
    swaps: SwapNeeds,
) -> anyhow::Result<Snapshot> {
    if query::campaign(client, db, id).await?.is_none() {
        bail!("{what} {id:?} is not stored in {db}");
    }
    let scope = Scope::Campaign(id.to_string());
    clickhouse_snapshot(client, db, &scope, id.to_string(), needs, swaps).await
}

/// What the silent-swap and SLO rules need read from ClickHouse besides the cells.
#[derive(Clone, Copy, Debug, Default)]
struct SwapNeeds {
    /// The names answered (`model_changed`, `fingerprint_changed`).
    names: bool,
    /// The quality samples of the side's latest compat run (`answers_changed`).
    answers: bool,
    /// The cells' SLO goodput counts (`goodput_below`).
    goodput: bool,
    /// The SLO searches' answers (`slo_rps_below`).
    searches: bool,
}

impl SwapNeeds {
    fn of(rules: &[Rule]) -> SwapNeeds {
        SwapNeeds {
            names: rules.iter().any(|r| {
                matches!(
                    r.kind,
                    RuleKind::ModelChanged | RuleKind::FingerprintChanged
                )
            }),
            answers: rules
                .iter()
                .any(|r| matches!(r.kind, RuleKind::AnswersChanged { .. })),
            goodput: rules
                .iter()
                .any(|r| matches!(r.kind, RuleKind::GoodputBelow { .. })),
            searches: rules
                .iter()
                .any(|r| matches!(r.kind, RuleKind::SloRpsBelow { .. })),
        }
    }
}

/// Whether `rule` checks the cell `key`; `sweeps` are the sweep scenarios, left out unless
/// the rule names one.
fn matches(rule: &Rule, key: &CellKey, sweeps: &BTreeSet<String>) -> bool {
    let (region, provider, scenario) = key;
    if rule.scenario.is_none() && sweeps.contains(scenario) {
        return false;
    }
    let region_ok = match &rule.region {
        None => region != ALL,
        Some(r) => r == region,
    };
    region_ok
        && rule.provider.as_ref().is_none_or(|p| p == provider)
        && rule.scenario.as_ref().is_none_or(|s| s == scenario)
}

fn kind_name(kind: &RuleKind) -> &'static str {
    match kind {
        RuleKind::IncreasePct { .. } => "increase_pct",
        RuleKind::Absolute { .. } => "absolute",
        RuleKind::AbovePrevDayMean { .. } => "above_prev_day_mean",
        RuleKind::ErrorPctAbove { .. } => "error_pct_above",
        RuleKind::GoodputBelow { .. } => "goodput_below",
        RuleKind::SloRpsBelow { .. } => "slo_rps_below",
        RuleKind::ModelChanged => "model_changed",
        RuleKind::FingerprintChanged => "fingerprint_changed",
        RuleKind::AnswersChanged { .. } => "answers_changed",
    }
}

fn ms(v: f64) -> String {
    latmesh_results::stats::fmt_ms(v)
}

/// What one evaluation found on one cell: the values it compared and the verdict.
struct Finding {
    current: f64,
    current_ci: Option<(f64, f64)>,
    baseline: Option<f64>,
    baseline_ci: Option<(f64, f64)>,
    limit: f64,
    /// The point estimate crossed the threshold.
    over: bool,
    /// The change is significant (or no intervals are known: point estimates only).
    significant: bool,
    message: String,
    /// When the change was seen (silent-swap rules), UTC µs, and in words.
    time: Option<(i64, String)>,
}

/// Records `f` in `report`: fired when over the threshold and significant, inconclusive when
/// over it only.
fn record(report: &mut CheckReport, rule: &Rule, key: &CellKey, f: Finding) {
    if !f.over {
        return;
    }
    let latency = rule.kind.is_latency();
    let out = Fired {
        rule: rule.name.clone(),
        kind: kind_name(&rule.kind).to_string(),
        region: key.0.clone(),
        provider: key.1.clone(),
        scenario: key.2.clone(),
        metric: latency.then(|| rule.metric.to_string()),
        percentile: latency.then_some(rule.percentile),
        current: f.current,
        baseline: f.baseline,
        limit: f.limit,
        current_ci: f.current_ci,
        baseline_ci: f.baseline_ci,
        unit: match rule.kind {
            _ if latency => "ms",
            RuleKind::ModelChanged | RuleKind::FingerprintChanged => "attempts",
            RuleKind::SloRpsBelow { .. } => "rps",
            _ => "%",
        }
        .into(),
        message: f.message,
        time_unix_us: f.time.as_ref().map(|t| t.0),
        time: f.time.map(|t| t.1),
    };
    if f.significant {
        report.fired.push(out);
    } else {
        report.inconclusive.push(out);
    }
}

/// `" [lo, hi]"` or `""`.
fn ci_text(ci: Option<(f64, f64)>) -> String {
    ci.map_or(String::new(), |(lo, hi)| {
        format!(" [{}, {}]", ms(lo), ms(hi))
    })
}

/// The samples a latency rule needs in a cell: the policy's
/// [`min_samples`]`(percentile)`, or the rule's `min_samples` when higher.
pub fn latency_samples_needed(rule: &Rule) -> u64 {
    min_samples(rule.percentile / 100.0).max(rule.min_samples)
}

/// Evaluates the rules that compare two snapshots (every kind but `above_prev_day_mean`).
/// Pure: the tests feed it known numbers. See the [module docs](self) for each rule's
/// condition.
pub fn evaluate(rules: &[Rule], current: &Snapshot, baseline: Option<&Snapshot>) -> CheckReport {
    let mut report = CheckReport {
        campaign: current.label.clone(),
        baseline: baseline.map(|b| b.label.clone()),
        fired: Vec::new(),
        inconclusive: Vec::new(),
        checked: 0,
        skipped: Vec::new(),
    };
    let left_out: Vec<&str> = current
        .sweep_scenarios
        .iter()
        .filter(|sc| current.cells.keys().any(|k| &k.2 == *sc))
        .map(String::as_str)
        .collect();
    if !left_out.is_empty() && rules.iter().any(|r| r.scenario.is_none()) {
        report.skipped.push(format!(
            "sweep scenario(s) {} left out: a sweep's matrix merges every concurrency step, so \
             runs compare mixed load levels (a rule with scenario = \"{}\" checks it)",
            left_out.join(", "),
            left_out[0]
        ));
    }
    for rule in rules {
        if matches!(
            rule.kind,
            RuleKind::AbovePrevDayMean { .. } | RuleKind::SloRpsBelow { .. }
        ) || rule.kind.is_swap()
        {
            continue;
        }
        let what = format!("{} P{}", rule.metric, rule.percentile);
        let need = match rule.kind {
            RuleKind::ErrorPctAbove { .. } => rule.min_samples.max(1),
            RuleKind::GoodputBelow { .. } => rule.min_samples.max(MIN_GOODPUT_REQUESTS),
            _ => latency_samples_needed(rule),
        };
        let mut largest_n = 0u64;
        let (mut matched, mut too_small, mut missing, mut no_baseline, mut points_only) =
            (0u64, 0u64, 0u64, 0u64, 0u64);
        let mut no_slo = 0u64;
        for (key, cur) in current
            .cells
            .iter()
            .filter(|(k, _)| matches(rule, k, &current.sweep_scenarios))
        {
            matched += 1;
            let finding = match &rule.kind {
                RuleKind::ErrorPctAbove { limit_pct } => {
                    let (failed, counted) = cur.failed;
                    if counted < need {
                        too_small += 1;
                        continue;
                    }
                    let Some(w) = latmesh_core::proportion::wilson(failed, counted) else {
                        too_small += 1;
                        continue;
                    };
                    let point = w.point() * 100.0;
                    let ci = (w.lower * 100.0, w.upper * 100.0);
                    Finding {
                        current: point,
                        current_ci: Some(ci),
                        baseline: None,
                        baseline_ci: None,
                        limit: *limit_pct,
                        over: point > *limit_pct,
                        significant: ci.0 > *limit_pct,
                        message: format!(
                            "error {point:.2}% of {counted} attempts [{:.2}%, {:.2}%] > limit {limit_pct}%",
                            ci.0, ci.1
                        ),
                        time: None,
                    }
                }
                RuleKind::GoodputBelow { limit_pct } => {
                    let Some((met, judged)) = cur.goodput else {
                        no_slo += 1;
                        continue;
                    };
                    if judged < need {
                        too_small += 1;
                        largest_n = largest_n.max(judged);
                        continue;
                    }
                    let Some(w) = latmesh_core::proportion::wilson(met, judged) else {
                        too_small += 1;
                        continue;
                    };
                    let point = w.point() * 100.0;
                    let ci = (w.lower * 100.0, w.upper * 100.0);
                    Finding {
                        current: point,
                        current_ci: Some(ci),
                        baseline: None,
                        baseline_ci: None,
                        limit: *limit_pct,
                        over: point < *limit_pct,
                        significant: ci.1 < *limit_pct,
                        message: format!(
                            "goodput {point:.2}% ({met} of {judged} judged requests met the SLO) [{:.2}%, {:.2}%] < limit {limit_pct}%",
                            ci.0, ci.1
                        ),
                        time: None,
                    }
                }
                RuleKind::Absolute { limit_ms } => {
                    let Some(e) = cur.estimate(rule.metric, rule.percentile) else {
                        missing += 1;
                        continue;
                    };
                    if e.n < need {
                        too_small += 1;
                        largest_n = largest_n.max(e.n);
                        continue;
                    }
                    if e.ci_ms.is_none() {
                        points_only += 1;
                    }
                    Finding {
                        current: e.ms,
                        current_ci: e.ci_ms,
                        baseline: None,
                        baseline_ci: None,
                        limit: *limit_ms,
                        over: e.ms > *limit_ms,
                        significant: e.ci_ms.is_none_or(|(lo, _)| lo > *limit_ms),
                        message: format!(
                            "{what} {} ms{} > limit {} ms",
                            ms(e.ms),
                            ci_text(e.ci_ms),
                            ms(*limit_ms)
                        ),
                        time: None,
                    }
                }
                RuleKind::IncreasePct { threshold_pct } => {
                    let Some(base) = baseline.and_then(|b| b.cells.get(key)) else {
                        no_baseline += 1;
                        continue;
                    };
                    let (Some(c), Some(b)) = (
                        cur.estimate(rule.metric, rule.percentile),
                        base.estimate(rule.metric, rule.percentile),
                    ) else {
                        missing += 1;
                        continue;
                    };
                    if c.n < need || b.n < need {
                        too_small += 1;
                        largest_n = largest_n.max(c.n.min(b.n));
                        continue;
                    }
                    let significant = match (c.ci_ms, b.ci_ms) {
                        (Some((lo, _)), Some((_, hi))) => lo > hi,
                        _ => {
                            points_only += 1;
                            true
                        }
                    };
                    let limit = b.ms * (1.0 + threshold_pct / 100.0);
                    Finding {
                        current: c.ms,
                        current_ci: c.ci_ms,
                        baseline: Some(b.ms),
                        baseline_ci: b.ci_ms,
                        limit,
                        over: b.ms > 0.0 && c.ms > limit,
                        significant,
                        message: format!(
                            "{what} {} ms{} is {:+.1}% over baseline {} ms{} (threshold +{threshold_pct}%: {} ms)",
                            ms(c.ms),
                            ci_text(c.ci_ms),
                            (c.ms / b.ms - 1.0) * 100.0,
                            ms(b.ms),
                            ci_text(b.ci_ms),
                            ms(limit)
                        ),
                        time: None,
                    }
                }
                RuleKind::AbovePrevDayMean { .. }
                | RuleKind::SloRpsBelow { .. }
                | RuleKind::ModelChanged
                | RuleKind::FingerprintChanged
                | RuleKind::AnswersChanged { .. } => continue,
            };
            report.checked += 1;
            record(&mut report, rule, key, finding);
        }
        if matched == 0 {
            let filters: Vec<String> = [
                ("region", &rule.region),
                ("provider", &rule.provider),
                ("scenario", &rule.scenario),
            ]
            .into_iter()
            .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k} = {v:?}")))
            .collect();
            report.skipped.push(format!(
                "{}: no cell of campaign {} matches{}",
                rule.name,
                report.campaign,
                if filters.is_empty() {
                    String::new()
                } else {
                    format!(" {}", filters.join(", "))
                }
            ));
        }
        if too_small > 0 {
            report.skipped.push(match rule.kind {
                RuleKind::ErrorPctAbove { .. } => format!(
                    "{}: {too_small} cell(s) with fewer than {need} attempts (min_samples)",
                    rule.name
                ),
                RuleKind::GoodputBelow { .. } => format!(
                    "{}: {too_small} cell(s) with fewer than {need} judged requests (the largest had {largest_n}: more requests, or region = \"ALL\")",
                    rule.name
                ),
                _ => format!(
                    "{}: {too_small} cell(s) where {what} is not supported: fewer than {need} samples on either side (sample-size policy{}; the largest had {largest_n}: more rounds, region = \"ALL\" or a lower percentile would have more evidence)",
                    rule.name,
                    if rule.min_samples > min_samples(rule.percentile / 100.0) {
                        ", raised by min_samples"
                    } else {
                        ""
                    }
                ),
            });
        }
        if missing > 0 {
            report.skipped.push(format!(
                "{}: {what} unknown in {missing} cell(s)",
                rule.name
            ));
        }
        if no_slo > 0 {
            report.skipped.push(format!(
                "{}: {no_slo} cell(s) of scenarios without an SLO (no goodput)",
                rule.name
            ));
        }
        if no_baseline > 0 {
            report.skipped.push(format!(
                "{}: {no_baseline} cell(s) not in the baseline",
                rule.name
            ));
        }
        if points_only > 0 {
            report.skipped.push(format!(
                "{}: {points_only} cell(s) compared on point estimates only (a summary file without intervals: no significance test)",
                rule.name
            ));
        }
    }
    evaluate_swaps(rules, current, baseline, &mut report);
    evaluate_searches(rules, current, &mut report);
    report
}

/// Evaluates the `slo_rps_below` rules of `rules` on the current side's search answers (see
/// the [module docs](self)). Pure.
pub fn evaluate_searches(rules: &[Rule], current: &Snapshot, report: &mut CheckReport) {
    for rule in rules {
        let RuleKind::SloRpsBelow { limit_rps } = rule.kind else {
            continue;
        };
        let rows: Vec<&SearchRow> = current
            .searches
            .iter()
            .filter(|r| {
                let key = (r.region.clone(), r.provider.clone(), r.scenario.clone());
                matches(rule, &key, &BTreeSet::new())
            })
            .collect();
        if rows.is_empty() {
            report.skipped.push(format!(
                "{}: no SLO search answer in {} matches (a search scenario, [scenarios.rate.search] with an slo, has them{})",
                rule.name,
                current.label,
                if current.exact {
                    "; from ClickHouse they come from the stored summary"
                } else {
                    ""
                }
            ));
            continue;
        }
        let mut unjudged = 0u64;
        for r in rows {
            let o = &r.outcome;
            let rps = |v: f64| format!("{v:.2} rps");
            // A miss at or below the limit makes the answer surely below it, unless the search
            // was unstable (the provider changed during it: no answer).
            let unstable = o.end == latmesh_core::load::SearchEnd::Unstable;
            let miss_at_or_below = o.missed_rps.is_some_and(|m| m <= limit_rps) && !unstable;
            let (current_rps, over) = match o.met_rps {
                Some(m) => (m, m < limit_rps),
                None if o.missed_rps.is_some() => (0.0, true),
                None => {
                    unjudged += 1;
                    continue;
                }
            };
            report.checked += 1;
            let answer = match o.met_rps {
                Some(m) => format!("meets the SLO up to {}", rps(m)),
                None => "met the SLO at no rate tried".to_string(),
            };
            let why = if over && unstable {
                "; the search was unstable (the provider changed during it): no answer to judge"
                    .to_string()
            } else if over && !miss_at_or_below {
                match o.missed_rps {
                    Some(m) => format!(
                        "; it missed only at {}, above the limit: the highest rate meeting it may reach the limit",
                        rps(m)
                    ),
                    None => format!(
                        "; no step missed ({}): the highest rate meeting it may reach the limit",
                        o.end.describe()
                    ),
                }
            } else {
                String::new()
            };
            record(
                report,
                rule,
                &(r.region.clone(), r.provider.clone(), r.scenario.clone()),
                Finding {
                    current: current_rps,
                    current_ci: None,
                    baseline: None,
                    baseline_ci: None,
                    limit: limit_rps,
                    over,
                    significant: miss_at_or_below,
                    message: format!(
                        "SLO search ({}): {answer}, below limit {} ({}){why}",
                        r.slo,
                        rps(limit_rps),
                        r.outcome.end.describe()
                    ),
                    time: None,
                },
            );
        }
        if unjudged > 0 {
            report.skipped.push(format!(
                "{}: {unjudged} search(es) where no step could be judged",
                rule.name
            ));
        }
    }
}

/// `2026-12-02 03:40 UTC` of a UTC µs time.
fn utc(unix_us: i64) -> String {
    format!(
        "{} UTC",
        latmesh_core::windows::utc_label(unix_us.div_euclid(1_000_000), false)
    )
}

/// The names of `by_cell` the rule covers, merged per (region, provider) over its scenarios.
fn names_by_region_provider(
    rule: &Rule,
    by_cell: &BTreeMap<CellKey, Names>,
) -> BTreeMap<(String, String), Names> {
    let mut out: BTreeMap<(String, String), Names> = BTreeMap::new();
    for (key, names) in by_cell
        .iter()
        .filter(|(k, _)| matches(rule, k, &BTreeSet::new()))
    {
        let merged = out.entry((key.0.clone(), key.1.clone())).or_default();
        for (n, seen) in names {
            merged.entry(n.clone()).or_default().merge(*seen);
        }
    }
    out
}

/// Evaluates the silent-swap rules (`model_changed`, `fingerprint_changed`,
/// `answers_changed`; see the [module docs](self)) of `rules` on two snapshots. Pure.
pub fn evaluate_swaps(
    rules: &[Rule],
    current: &Snapshot,
    baseline: Option<&Snapshot>,
    report: &mut CheckReport,
) {
    for rule in rules.iter().filter(|r| r.kind.is_swap()) {
        let Some(base) = baseline else {
            report.skipped.push(format!(
                "{}: compares with a baseline: give --baseline, --baseline-days or --baseline-summary",
                rule.name
            ));
            continue;
        };
        match rule.kind {
            RuleKind::ModelChanged => names_rule(rule, "model", current, base, report),
            RuleKind::FingerprintChanged => {
                names_rule(rule, "system_fingerprint", current, base, report);
            }
            RuleKind::AnswersChanged { threshold_pct } => {
                answers_rule(rule, threshold_pct, current, base, report);
            }
            _ => {}
        }
    }
}

/// `model_changed` / `fingerprint_changed` (`what`: `model` or `system_fingerprint`).
fn names_rule(
    rule: &Rule,
    what: &str,
    current: &Snapshot,
    base: &Snapshot,
    report: &mut CheckReport,
) {
    let pick = |s: &Snapshot| {
        if what == "model" {
            names_by_region_provider(rule, &s.models)
        } else {
            names_by_region_provider(rule, &s.fingerprints)
        }
    };
    let (cur, old) = (pick(current), pick(base));
    let none = Names::new();
    let mut no_baseline = 0u64;
    for ((region, provider), names) in &cur {
        let verdict = compare_names(
            names,
            old.get(&(region.clone(), provider.clone()))
                .unwrap_or(&none),
        );
        let (new, before) = match verdict {
            NameVerdict::NoBaseline => {
                no_baseline += 1;
                continue;
            }
            NameVerdict::Unchanged => {
                report.checked += 1;
                continue;
            }
            NameVerdict::Changed { new, baseline } => (new, baseline),
        };
        report.checked += 1;
        let first = new.iter().filter_map(|(_, s)| s.first_unix_us).min();
        let time = match (first, current.start_at_unix_us) {
            (Some(t), _) => Some((t, utc(t))),
            (None, Some(start)) => Some((start, format!("campaign started {}", utc(start)))),
            (None, None) => None,
        };
        let attempts: u64 = new.iter().map(|(_, s)| s.count).sum();
        let listed: Vec<String> = new
            .iter()
            .map(|(n, s)| match s.first_unix_us {
                Some(t) => format!("{n} ×{} (first seen {})", s.count, utc(t)),
                None => format!("{n} ×{}", s.count),
            })
            .collect();
        let when = match (first, &time) {
            (None, Some((_, w))) => format!(" during {} ({w})", current.label),
            _ => String::new(),
        };
        let key = (
            region.clone(),
            provider.clone(),
            rule.scenario.clone().unwrap_or_else(|| "*".into()),
        );
        record(
            report,
            rule,
            &key,
            Finding {
                current: attempts as f64,
                current_ci: None,
                baseline: None,
                baseline_ci: None,
                limit: 0.0,
                over: true,
                significant: true,
                message: format!(
                    "{provider} in {region} answered with {what} {}{when}, never answered in the baseline {} (it answered {})",
                    listed.join(", "),
                    base.label,
                    before.join(", ")
                ),
                time,
            },
        );
    }
    if no_baseline > 0 {
        report.skipped.push(format!(
            "{}: {no_baseline} region × provider pair(s) whose baseline answered no {what}: nothing to compare with",
            rule.name
        ));
    }
}

/// `answers_changed`.
fn answers_rule(
    rule: &Rule,
    threshold_pct: f64,
    current: &Snapshot,
    base: &Snapshot,
    report: &mut CheckReport,
) {
    let (Some(cur), Some(old)) = (&current.answers, &base.answers) else {
        let why = if !current.exact || !base.exact {
            "compares the quality samples of `latmesh compat` runs stored in ClickHouse: give --current CAMPAIGN and --baseline CAMPAIGN (or --baseline-days)".to_string()
        } else {
            let side = if current.answers.is_none() {
                &current.label
            } else {
                &base.label
            };
            format!("no `latmesh compat` run with quality samples is stored for {side}")
        };
        report.skipped.push(format!("{}: {why}", rule.name));
        return;
    };
    let mut groups: BTreeMap<(&str, &str), Vec<&QualitySample>> = BTreeMap::new();
    for (region, s) in &cur.samples {
        let region_ok = rule.region.as_ref().is_none_or(|r| r == region);
        if region_ok && rule.provider.as_ref().is_none_or(|p| *p == s.provider) {
            groups.entry((region, &s.provider)).or_default().push(s);
        }
    }
    let mut not_compared = 0u64;
    for ((region, provider), mine) in groups {
        // The baseline run's samples of the provider from the same region, else from any.
        let of = |same_region: bool| -> Vec<&QualitySample> {
            old.samples
                .iter()
                .filter(|(r, s)| s.provider == provider && (!same_region || r == region))
                .map(|(_, s)| s)
                .collect()
        };
        let mut theirs = of(true);
        if theirs.is_empty() {
            theirs = of(false);
        }
        let Some(c) = compare_answers(&mine, &theirs) else {
            not_compared += 1;
            continue;
        };
        report.checked += 1;
        let set = mine
            .first()
            .map(|_| latmesh_core::quality::QUALITY_SET_VERSION.to_string())
            .unwrap_or_default();
        record(
            report,
            rule,
            &(region.to_string(), provider.to_string(), set),
            Finding {
                current: c.changed_pct(),
                current_ci: c.changed_ci.map(|(lo, hi)| (lo * 100.0, hi * 100.0)),
                baseline: None,
                baseline_ci: None,
                limit: threshold_pct,
                over: c.fires(threshold_pct),
                significant: true,
                message: format!(
                    "{provider} from {region}: {} (compat run {} of {} vs run {} of {})",
                    c.message(threshold_pct),
                    cur.run_id,
                    utc(cur.time_unix_us),
                    old.run_id,
                    utc(old.time_unix_us)
                ),
                time: Some((cur.time_unix_us, utc(cur.time_unix_us))),
            },
        );
    }
    if not_compared > 0 {
        report.skipped.push(format!(
            "{}: {not_compared} provider(s) without a prompt answered in both compat runs",
            rule.name
        ));
    }
}

/// The per-run estimates the `above_prev_day_mean` rule reads: run id → cell → estimate.
pub type RunValues = BTreeMap<String, BTreeMap<CellKey, Estimate>>;

/// Evaluates an `above_prev_day_mean` rule on known runs: `runs` are (id, start µs) sorted by
/// start and ending with the current run; `values[run][cell]` its estimate. Runs whose
/// percentile is not supported (fewer samples than [`latency_samples_needed`]) do not count;
/// the rule fires on a cell when each of the last `consecutive_runs` runs is supported, has
/// its point estimate above `factor` × the mean of the earlier runs' point estimates, and its
/// interval's lower bound above the mean of their upper bounds (significant). Pure.
pub fn evaluate_prev_day(
    rule: &Rule,
    runs: &[(String, i64)],
    values: &RunValues,
    report: &mut CheckReport,
) {
    let RuleKind::AbovePrevDayMean {
        factor,
        consecutive_runs,
    } = rule.kind
    else {
        return;
    };
    let n = consecutive_runs as usize;
    if runs.len() < n {
        report.skipped.push(format!(
            "{}: {} run(s) stored, {n} needed",
            rule.name,
            runs.len()
        ));
        return;
    }
    let recent = &runs[runs.len() - n..];
    let first_start = recent[0].1;
    let day_us = 86_400_000_000i64;
    let earlier: Vec<&(String, i64)> = runs
        .iter()
        .filter(|(_, s)| *s >= first_start - day_us && *s < first_start)
        .collect();
    if earlier.is_empty() {
        report.skipped.push(format!(
            "{}: no run in the 24 h before {} (the first of the last {n})",
            rule.name, recent[0].0
        ));
        return;
    }
    let current = &recent[n - 1].0;
    let Some(cells) = values.get(current) else {
        return;
    };
    let need = latency_samples_needed(rule);
    let what = format!("{} P{}", rule.metric, rule.percentile);
    let supported =
        |id: &String, key: &CellKey| values.get(id)?.get(key).filter(|e| e.n >= need).copied();
    let (mut unsupported, mut points_only) = (0u64, 0u64);
    for key in cells.keys().filter(|k| matches(rule, k, &BTreeSet::new())) {
        let prev: Vec<Estimate> = earlier
            .iter()
            .filter_map(|(id, _)| supported(id, key))
            .collect();
        let mine: Vec<Option<Estimate>> = recent.iter().map(|(id, _)| supported(id, key)).collect();
        if prev.is_empty() || mine.iter().any(Option::is_none) {
            unsupported += 1;
            continue;
        }
        let mine: Vec<Estimate> = mine.into_iter().flatten().collect();
        report.checked += 1;
        let mean = prev.iter().map(|e| e.ms).sum::<f64>() / prev.len() as f64;
        let mean_ci = prev
            .iter()
            .map(|e| e.ci_ms)
            .collect::<Option<Vec<_>>>()
            .map(|cis| {
                let k = cis.len() as f64;
                (
                    cis.iter().map(|c| c.0).sum::<f64>() / k,
                    cis.iter().map(|c| c.1).sum::<f64>() / k,
                )
            });
        let limit = factor * mean;
        let significant = match mean_ci {
            Some((_, hi)) if mine.iter().all(|e| e.ci_ms.is_some()) => {
                mine.iter().all(|e| e.ci_ms.is_some_and(|(lo, _)| lo > hi))
            }
            _ => {
                points_only += 1;
                true
            }
        };
        let last = *mine.last().expect("n ≥ 1");
        record(
            report,
            rule,
            key,
            Finding {
                current: last.ms,
                current_ci: last.ci_ms,
                baseline: Some(mean),
                baseline_ci: mean_ci,
                limit,
                over: mine.iter().all(|e| e.ms > limit),
                significant,
                message: format!(
                    "{what} above {factor}× the previous day's mean ({} ms{} over {} run(s): limit {} ms) in the last {n} run(s): {} ms",
                    ms(mean),
                    ci_text(mean_ci),
                    prev.len(),
                    ms(limit),
                    mine.iter()
                        .map(|e| format!("{}{}", ms(e.ms), ci_text(e.ci_ms)))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                time: None,
            },
        );
    }
    if unsupported > 0 {
        report.skipped.push(format!(
            "{}: {unsupported} cell(s) without a supported {what} (≥ {need} samples) in each of the last {n} run(s) and in an earlier one",
            rule.name
        ));
    }
    if points_only > 0 {
        report.skipped.push(format!(
            "{}: {points_only} cell(s) compared on point estimates only (no intervals)",
            rule.name
        ));
    }
}

/// Runs the `above_prev_day_mean` rules against ClickHouse for current campaign `current`.
async fn prev_day_rules(
    client: &clickhouse::Client,
    db: &str,
    current: &str,
    rules: &[&Rule],
    report: &mut CheckReport,
) -> anyhow::Result<()> {
    let row = query::campaign(client, db, current)
        .await?
        .ok_or_else(|| anyhow!("campaign {current:?} is not stored"))?;
    let all_runs = check_queries::runs_named(client, db, &row.name).await?;
    let cur_start = row.start_at_us as i64;
    let sweeps = sweep_scenarios_of(&row.plan_json);
    let runs: Vec<(String, i64)> = all_runs
        .into_iter()
        .filter(|(id, s)| *s < cur_start || id == current)
        .collect();
    for rule in rules {
        let RuleKind::AbovePrevDayMean {
            consecutive_runs, ..
        } = rule.kind
        else {
            continue;
        };
        let n = (consecutive_runs as usize).min(runs.len());
        let first = runs.get(runs.len() - n).map_or(cur_start, |r| r.1);
        let ids: Vec<&String> = runs
            .iter()
            .filter(|(_, s)| *s >= first - 86_400_000_000)
            .map(|(id, _)| id)
            .collect();
        let needs = BTreeSet::from([(rule.metric, pkey(rule.percentile))]);
        let mut values: RunValues = BTreeMap::new();
        for id in ids {
            let cells = estimates(client, db, &QueryFilter::campaign(id), &needs).await?;
            let run = values.entry(id.clone()).or_default();
            for (key, list) in cells {
                if rule.scenario.is_none() && sweeps.contains(&key.2) {
                    continue;
                }
                if let Some((_, _, e)) = list.into_iter().next() {
                    run.insert(key, e);
                }
            }
        }
        evaluate_prev_day(rule, &runs, &values, report);
    }
    Ok(())
}

/// Every `region`, `provider` and `scenario` a rule names must name one of `current`'s cells:
/// a misspelled filter would otherwise check nothing while other rules pass the gate.
///
/// # Errors
/// The first filter that names nothing, with the names `current` has.
pub fn check_filters(rules: &[Rule], current: &Snapshot) -> anyhow::Result<()> {
    let names = |i: usize| -> BTreeSet<&str> {
        current
            .cells
            .keys()
            .map(|k| match i {
                0 => k.0.as_str(),
                1 => k.1.as_str(),
                _ => k.2.as_str(),
            })
            .collect()
    };
    for r in rules {
        for (i, key, value) in [
            (0, "region", &r.region),
            (1, "provider", &r.provider),
            (2, "scenario", &r.scenario),
        ] {
            let Some(v) = value else { continue };
            let have = names(i);
            if !have.contains(v.as_str()) {
                let list: Vec<&str> = have.into_iter().collect();
                bail!(
                    "rule {:?}: {key} = {v:?} names no {key} of {} (it has: {})",
                    r.name,
                    current.label,
                    list.join(", ")
                );
            }
        }
    }
    Ok(())
}

/// Loads everything and evaluates the rules (no printing, no webhook).
///
/// # Errors
/// Bad rules, unreadable summaries, a missing ClickHouse URL, unknown campaigns, ClickHouse
/// errors, a rule asking for a percentile a summary does not carry; ClickHouse not answering
/// within `--clickhouse-timeout-s`.
pub async fn run(args: &CheckArgs) -> anyhow::Result<CheckReport> {
    match &args.clickhouse_url {
        Some(url) => args.timeouts.bound(url, "check", run_unbounded(args)).await,
        None => run_unbounded(args).await,
    }
}

async fn run_unbounded(args: &CheckArgs) -> anyhow::Result<CheckReport> {
    let text = std::fs::read_to_string(&args.rules)
        .with_context(|| format!("cannot read rules {}", args.rules.display()))?;
    let rules =
        parse_rules(&text).with_context(|| format!("rules file {}", args.rules.display()))?;
    let needs: BTreeSet<(Metric, u32)> = rules
        .iter()
        .filter(|r| r.kind.is_latency())
        .map(|r| (r.metric, pkey(r.percentile)))
        .collect();
    let swaps = SwapNeeds::of(&rules);
    // Search answers are read for the current side only (`slo_rps_below` has no baseline).
    let base_swaps = SwapNeeds {
        searches: false,
        ..swaps
    };
    let client = match &args.clickhouse_url {
        Some(url)
            if args.current.is_some()
                || args.baseline.is_some()
                || args.baseline_days.is_some() =>
        {
            Some(store::client_with(url, &args.timeouts.timeouts()))
        }
        _ => None,
    };
    let ch = || -> anyhow::Result<&clickhouse::Client> {
        client
            .as_ref()
            .ok_or_else(|| anyhow!("--clickhouse-url (or LATMESH_CLICKHOUSE_URL) is needed to read campaigns from ClickHouse"))
    };
    let db = args.clickhouse_db.as_str();
    let current = match (&args.current, &args.current_summary) {
        (Some(id), _) => stored_snapshot(ch()?, db, id, "campaign", &needs, swaps).await?,
        (None, Some(path)) => {
            let s = read_summary(path)?;
            Snapshot::from_summary(
                format!("{} (summary {})", s.campaign_id, path.display()),
                &s,
            )
        }
        (None, None) => bail!("give --current CAMPAIGN or --current-summary FILE"),
    };
    let baseline = match (&args.baseline, args.baseline_days, &args.baseline_summary) {
        (Some(id), _, _) => {
            Some(stored_snapshot(ch()?, db, id, "baseline campaign", &needs, base_swaps).await?)
        }
        (None, Some(days), _) => {
            if !(days.is_finite() && days > 0.0) {
                bail!("--baseline-days {days}: give a number of days > 0");
            }
            let start = current
                .start_at_unix_us
                .ok_or_else(|| anyhow!("the current campaign's start is unknown"))?;
            let from = start - (days * 86_400e6) as i64;
            let label = format!(
                "{days} day(s) before {}",
                latmesh_core::windows::utc_label(start / 1_000_000, false)
            );
            Some(
                clickhouse_snapshot(
                    ch()?,
                    db,
                    &Scope::Range(from, start),
                    label,
                    &needs,
                    base_swaps,
                )
                .await?,
            )
        }
        (None, None, Some(path)) => {
            let s = read_summary(path)?;
            Some(Snapshot::from_summary(
                format!("{} (summary {})", s.campaign_id, path.display()),
                &s,
            ))
        }
        (None, None, None) => None,
    };
    for r in &rules {
        if (matches!(r.kind, RuleKind::IncreasePct { .. }) || r.kind.is_swap())
            && baseline.is_none()
        {
            bail!(
                "rule {:?} compares with a baseline: give --baseline, --baseline-days or --baseline-summary",
                r.name
            );
        }
        let summary_sides = [Some(&current), baseline.as_ref()];
        for side in summary_sides.into_iter().flatten().filter(|s| !s.exact) {
            let p = r.percentile;
            let carried = match r.metric {
                Metric::Ttft | Metric::Ttfc | Metric::E2e => {
                    [50.0, 90.0, 95.0, 99.0].contains(&p)
                        || side
                            .cells
                            .values()
                            .any(|c| c.estimate(r.metric, p).is_some())
                }
                Metric::Tpot | Metric::Itl => p == 50.0,
                _ => false,
            };
            if r.kind.is_latency()
                && !matches!(r.kind, RuleKind::AbovePrevDayMean { .. })
                && !carried
            {
                bail!(
                    "rule {:?}: {} P{p} is not in a summary file (it has P50/P90/P95/P99 and the campaign's percentiles of ttft, ttfc, e2e and P50 of tpot, itl): read {} from ClickHouse",
                    r.name,
                    r.metric,
                    side.label
                );
            }
        }
    }
    check_filters(&rules, &current)?;
    let mut report = evaluate(&rules, &current, baseline.as_ref());
    let prev_day: Vec<&Rule> = rules
        .iter()
        .filter(|r| matches!(r.kind, RuleKind::AbovePrevDayMean { .. }))
        .collect();
    if !prev_day.is_empty() {
        match &args.current {
            Some(id) => prev_day_rules(ch()?, db, id, &prev_day, &mut report).await?,
            None => {
                for r in prev_day {
                    report.skipped.push(format!(
                        "{}: above_prev_day_mean reads earlier runs from ClickHouse: give --current CAMPAIGN",
                        r.name
                    ));
                }
            }
        }
    }
    Ok(report)
}

/// `latmesh check`: [`run`], prints the report (text or `--json`), POSTs it to the webhook,
/// and returns the exit status: 0 nothing fired, 1 a rule fired, 2 an error (printed to
/// stderr).
pub async fn run_cli(args: CheckArgs) -> u8 {
    let report = match run(&args).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e:#}");
            return 2;
        }
    };
    if args.json {
        match serde_json::to_string_pretty(&report) {
            Ok(j) => println!("{j}"),
            Err(e) => {
                eprintln!("error: {e}");
                return 2;
            }
        }
    } else {
        print!("{}", crate::ui::check::render(&report));
    }
    if let Some(url) = &args.webhook
        && (args.webhook_always || !report.fired.is_empty())
    {
        let body = match serde_json::to_vec(&report) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("error: {e}");
                return 2;
            }
        };
        if let Err(e) = post_json(url, &body, WEBHOOK_TIMEOUT).await {
            eprintln!("error: webhook {}: {e:#}", redact_url(url));
            return 2;
        }
    }
    report.exit_code()
}
