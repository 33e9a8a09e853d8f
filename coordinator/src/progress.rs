//! Live campaign progress: the coordinator's side computes [`pb::LiveCell`]s (per region and
//! per provider, over every scenario) from a campaign's [`Aggregate`] at most once a second
//! ([`LiveCache`]); the client's side ([`Renderer`]) draws them while `latmesh campaign
//! launch`, `campaign watch` or `latmesh demo` follows the `Watch` stream.
//!
//! With a terminal on stderr the client draws indicatif bars: a total bar, one bar per region
//! (slots done / expected, agent states, errors) and one per provider (slots done / expected,
//! errors, live TTFT P50/P95/P99 with `~` on a percentile its samples do not support yet, E2E
//! for plans without streaming scenarios). Without one (pipes,
//! CI, tests) it prints today's plain `progress:` lines every `every`, with the providers'
//! live numbers appended, and never an escape code. The final line and the summary that
//! follow a campaign are printed by [`crate::watch::follow`] the same way in both cases.

use std::collections::BTreeMap;
use std::io::{IsTerminal as _, Write};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use latmesh_core::hist::HistKey;
use latmesh_core::load::LoadModel;
use latmesh_core::metrics::Metric;
use latmesh_core::plan::Plan;
use latmesh_core::record::Outcome;
use latmesh_proto::pb;

use latmesh_results::aggregate::{Aggregate, CellCounts};

/// Live cells are recomputed at most this often per campaign (the last message always gets
/// fresh ones).
pub const LIVE_EVERY: Duration = Duration::from_secs(1);

/// The latency the live cells report: TTFT when the plan has a streaming scenario (over the
/// streaming scenarios only), E2E otherwise.
pub fn live_metric(plan: &Plan) -> Metric {
    if plan.scenarios.iter().any(|s| s.stream) {
        Metric::Ttft
    } else {
        Metric::E2e
    }
}

/// Attempts that count as errors: neither `ok`, nor `cancelled` (cut by a campaign cancel), nor
/// `dropped` (an open-loop arrival or a rounds probe its provider's caps held past its queue
/// bound, never sent).
fn errors(c: &CellCounts) -> u64 {
    c.attempts()
        .saturating_sub(c.count(Outcome::Ok))
        .saturating_sub(c.count(Outcome::Cancelled))
        .saturating_sub(c.count(Outcome::Dropped))
}

/// The `sweep` scenarios without `step_requests`: they send as many requests as their
/// providers answer in the steps' time, a count nobody knows in advance.
pub fn open_ended_sweeps(plan: &Plan) -> Vec<&str> {
    plan.scenarios
        .iter()
        .filter(|s| matches!(&s.load, LoadModel::Sweep(sw) if sw.step_requests.is_none()))
        .map(|s| s.name.as_str())
        .collect()
}

/// Whether the requests an agent makes are all known in advance: not with an open-ended
/// sweep ([`open_ended_sweeps`]).
pub fn expected_known(plan: &Plan) -> bool {
    open_ended_sweeps(plan).is_empty()
}

/// Requests of `sweep` scenario `s` with `step_requests` per agent and provider: every step
/// sends at most that many (fewer when a step's time ends first).
fn bounded_sweep_requests(plan: &Plan, s: usize) -> u64 {
    match &plan.scenarios[s].load {
        LoadModel::Sweep(sw) => sw
            .step_requests
            .map_or(0, |n| sw.concurrency.len() as u64 * u64::from(n)),
        _ => 0,
    }
}

/// Requests one agent is planned to make, every load model counted as progress counts them
/// (final attempts of first turns): rounds slots and `rate` arrivals
/// ([`Plan::probes_per_agent`]), and each `sweep` with `step_requests` at its maximum
/// (steps × `step_requests` × providers). An open-ended sweep ([`open_ended_sweeps`]) adds
/// nothing here: its requests are counted as they are made, against no total.
pub fn planned_requests_per_agent(plan: &Plan) -> u64 {
    let providers = plan.providers.len() as u64;
    plan.probes_per_agent()
        + (0..plan.scenarios.len())
            .map(|s| bounded_sweep_requests(plan, s) * providers)
            .sum::<u64>()
}

/// Requests one agent is planned to make per provider, in `plan.providers` order, when that
/// is known in advance ([`planned_requests_per_agent`]). All zeros (unknown) with an
/// open-ended sweep ([`expected_known`]), when a failover scenario may end a slot on another
/// provider than the slot's, or when the attribution does not add up to
/// `planned_requests_per_agent`.
pub fn provider_expected_per_agent(plan: &Plan) -> Vec<u64> {
    let n = plan.providers.len();
    let mut out = vec![0u64; n];
    if !expected_known(plan) || plan.scenarios.iter().any(|s| s.failover.is_some()) {
        return out;
    }
    for s in plan.rounds_scenarios() {
        for slot in plan.scenario_slots(s) {
            if let Some(e) = out.get_mut(slot.provider) {
                *e += u64::from(plan.rounds.count);
            }
        }
    }
    for (s, scenario) in plan.scenarios.iter().enumerate() {
        if let LoadModel::Rate(r) = &scenario.load {
            let arrivals = r.arrival_count(plan.seed, s);
            for e in out.iter_mut() {
                *e += arrivals;
            }
        }
        let sweep = bounded_sweep_requests(plan, s);
        for e in out.iter_mut() {
            *e += sweep;
        }
    }
    if out.iter().sum::<u64>() != planned_requests_per_agent(plan) {
        out.iter_mut().for_each(|e| *e = 0);
    }
    out
}

/// The live cells of a campaign: one per region (provider empty; counts only) in plan order,
/// then one per provider (region empty; counts and percentiles of [`live_metric`] from the
/// histograms merged over regions and scenarios). `agents_per_region` is how many agents run
/// the campaign in each region (regions of agents missing from the plan are added after the
/// plan's); `provider_expected` is [`provider_expected_per_agent`] and `probes_per_agent`
/// is [`planned_requests_per_agent`] (counted once by the caller: it generates every
/// open-loop arrival).
pub fn live_cells(
    plan: &Plan,
    probes_per_agent: u64,
    agg: &Aggregate,
    agents_per_region: &BTreeMap<String, u64>,
    provider_expected: &[u64],
) -> Vec<pb::LiveCell> {
    let per_agent = if expected_known(plan) {
        probes_per_agent
    } else {
        0
    };
    let agents_total: u64 = agents_per_region.values().sum();
    let metric = live_metric(plan);
    let mut regions: Vec<&str> = plan.regions.iter().map(String::as_str).collect();
    for r in agents_per_region.keys() {
        if !regions.contains(&r.as_str()) {
            regions.push(r);
        }
    }
    let mut out = Vec::with_capacity(regions.len() + plan.providers.len());
    for region in regions {
        let mut cell = pb::LiveCell {
            region: region.to_string(),
            expected: per_agent * agents_per_region.get(region).copied().unwrap_or(0),
            metric: metric.as_str().to_string(),
            ..Default::default()
        };
        for p in &plan.providers {
            for s in &plan.scenarios {
                let c = agg.counts(Some(region), &p.name, &s.name);
                cell.done += c.slots_done;
                cell.errors += errors(&c);
            }
        }
        out.push(cell);
    }
    for (i, p) in plan.providers.iter().enumerate() {
        let mut cell = pb::LiveCell {
            provider: p.name.clone(),
            expected: provider_expected.get(i).copied().unwrap_or(0) * agents_total,
            metric: metric.as_str().to_string(),
            ..Default::default()
        };
        let mut merged: Option<Histogram<u64>> = None;
        for s in &plan.scenarios {
            let c = agg.counts(None, &p.name, &s.name);
            cell.done += c.slots_done;
            cell.errors += errors(&c);
            if metric == Metric::Ttft && !s.stream {
                continue;
            }
            let key = HistKey {
                provider: p.name.clone(),
                scenario: s.name.clone(),
                metric,
                step: 0,
            };
            if let Some(h) = agg.histogram(None, &key) {
                match &mut merged {
                    Some(acc) => acc.add(&h).expect("shared bounds"),
                    None => merged = Some(h),
                }
            }
        }
        if let Some(h) = merged.filter(|h| !h.is_empty()) {
            cell.p50_ms = h.value_at_quantile(0.5) as f64 / 1000.0;
            cell.p95_ms = h.value_at_quantile(0.95) as f64 / 1000.0;
            cell.p99_ms = h.value_at_quantile(0.99) as f64 / 1000.0;
            cell.samples = h.len();
        }
        out.push(cell);
    }
    out
}

/// A campaign's live cells, recomputed at most once per [`LIVE_EVERY`].
#[derive(Debug, Default)]
pub struct LiveCache {
    at: Option<Instant>,
    cells: Vec<pb::LiveCell>,
    provider_expected: Option<Vec<u64>>,
}

impl LiveCache {
    /// The live cells as of `now`: the cached ones when they were computed less than
    /// [`LIVE_EVERY`] ago and `force` is false, fresh ones otherwise.
    pub fn cells(
        &mut self,
        now: Instant,
        force: bool,
        plan: &Plan,
        probes_per_agent: u64,
        agg: &Aggregate,
        agents_per_region: &BTreeMap<String, u64>,
    ) -> Vec<pb::LiveCell> {
        let stale = self
            .at
            .is_none_or(|at| now.saturating_duration_since(at) >= LIVE_EVERY);
        if force || stale {
            let expected = self
                .provider_expected
                .get_or_insert_with(|| provider_expected_per_agent(plan));
            self.cells = live_cells(plan, probes_per_agent, agg, agents_per_region, expected);
            self.at = Some(now);
        }
        self.cells.clone()
    }
}

/// How a client shows a campaign's progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Nothing until the final line.
    Quiet,
    /// A plain line every `every` (no escape codes).
    Lines {
        /// Between two lines.
        every: Duration,
    },
    /// indicatif bars on stderr.
    Bars,
}

/// An `every` of at least this asks for no periodic output (e.g. `latmesh demo` without
/// progress passes an hour).
pub const QUIET_EVERY: Duration = Duration::from_secs(3600);

/// The mode for a caller that asked for a line every `every`: quiet for an `every` of
/// [`QUIET_EVERY`] or more, bars when `stderr_is_terminal`, plain lines otherwise.
pub fn choose(every: Duration, stderr_is_terminal: bool) -> Mode {
    if every >= QUIET_EVERY {
        Mode::Quiet
    } else if stderr_is_terminal {
        Mode::Bars
    } else {
        Mode::Lines { every }
    }
}

/// Whether stderr is a terminal that can take bars ([`std::io::IsTerminal`], and `TERM` is
/// not `dumb`).
pub fn stderr_is_terminal() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("TERM").is_none_or(|t| t != "dumb")
}

/// `TTFT P50 312 ms P95 790 ms P99 ~845 ms` style latency text of a provider cell (empty
/// without samples): `~` marks a percentile its samples do not support
/// ([`latmesh_results::stats::supported`]); a cell from an older coordinator, without a
/// sample count or P95, shows P50 and P99 unmarked.
fn latency(c: &pb::LiveCell) -> String {
    if c.p50_ms <= 0.0 && c.p99_ms <= 0.0 {
        return String::new();
    }
    let mut parts = vec![c.metric.to_uppercase()];
    for (q, v) in [(50.0, c.p50_ms), (95.0, c.p95_ms), (99.0, c.p99_ms)] {
        if c.samples == 0 && q == 95.0 {
            continue;
        }
        let unsupported = c.samples > 0 && !latmesh_results::stats::supported(c.samples, q);
        let mark = if unsupported {
            latmesh_results::percentiles::UNSUPPORTED_MARK
        } else {
            ""
        };
        parts.push(format!("P{q} {mark}{v:.0} ms"));
    }
    parts.join(" ")
}

/// `105/120 probes`, or with an open-ended sweep (live region cells without an expectation:
/// its requests count as they are made, against no total) `105 probes (60 planned in
/// advance, plus open-ended sweeps)`.
pub fn counts_text(p: &pb::Progress) -> String {
    let open_ended = p
        .live
        .iter()
        .any(|c| c.provider.is_empty() && c.expected == 0);
    if open_ended {
        format!(
            "{} probes ({} planned in advance, plus open-ended sweeps)",
            p.probes_done, p.probes_expected
        )
    } else {
        format!("{}/{} probes", p.probes_done, p.probes_expected)
    }
}

/// A plain progress line: today's `progress: done/expected probes [agents]`, then the
/// providers' live numbers (`; openai 12/40, 1 err, TTFT P50 312 ms P99 845 ms`).
pub fn progress_line(p: &pb::Progress, now_unix_us: i64) -> String {
    let regions: Vec<String> = p
        .agents
        .iter()
        .map(|a| crate::watch::describe_agent(a, now_unix_us))
        .collect();
    let mut line = format!(
        "progress: {}{} [{}]",
        counts_text(p),
        if p.cancelled { ", cancelling" } else { "" },
        regions.join(", ")
    );
    for c in p.live.iter().filter(|c| c.region.is_empty()) {
        line += &format!("; {} {}", c.provider, c.done);
        if c.expected > 0 {
            line += &format!("/{}", c.expected);
        }
        line += &format!(", {} err", c.errors);
        let lat = latency(c);
        if !lat.is_empty() {
            line += ", ";
            line += &lat;
        }
    }
    line
}

/// Draws a followed campaign's progress in one [`Mode`].
pub struct Renderer {
    kind: Kind,
}

enum Kind {
    Quiet,
    Lines {
        every: Duration,
        last: Instant,
        out: Box<dyn Write + Send>,
    },
    Bars(Bars),
}

impl Renderer {
    /// A renderer for `mode`, drawing on stderr.
    pub fn new(mode: Mode) -> Renderer {
        match mode {
            Mode::Quiet => Renderer { kind: Kind::Quiet },
            Mode::Lines { every } => Renderer::lines_to(every, Box::new(std::io::stderr())),
            Mode::Bars => Renderer {
                kind: Kind::Bars(Bars::new(ProgressDrawTarget::stderr())),
            },
        }
    }

    /// Plain lines to `out`, at most one per `every` (the first after `every`, as before).
    pub fn lines_to(every: Duration, out: Box<dyn Write + Send>) -> Renderer {
        Renderer {
            kind: Kind::Lines {
                every,
                last: Instant::now(),
                out,
            },
        }
    }

    /// Bars drawn on `target` (tests: [`ProgressDrawTarget::hidden`]).
    pub fn bars_to(target: ProgressDrawTarget) -> Renderer {
        Renderer {
            kind: Kind::Bars(Bars::new(target)),
        }
    }

    /// The mode it draws in (`every` of lines as given).
    pub fn mode(&self) -> Mode {
        match &self.kind {
            Kind::Quiet => Mode::Quiet,
            Kind::Lines { every, .. } => Mode::Lines { every: *every },
            Kind::Bars(_) => Mode::Bars,
        }
    }

    /// Shows one progress message (not the finished one).
    pub fn update(&mut self, p: &pb::Progress, now_unix_us: i64) {
        match &mut self.kind {
            Kind::Quiet => {}
            Kind::Lines { every, last, out } => {
                if last.elapsed() >= *every {
                    *last = Instant::now();
                    let _ = writeln!(out, "{}", progress_line(p, now_unix_us));
                }
            }
            Kind::Bars(b) => b.update(p),
        }
    }

    /// Takes the bars off the screen (before the final line is printed).
    pub fn finish(&mut self) {
        if let Kind::Bars(b) = &mut self.kind {
            b.clear();
        }
    }
}

/// The indicatif bars: total, regions, providers.
struct Bars {
    mp: MultiProgress,
    total: Option<ProgressBar>,
    /// By (region, provider) of the cell.
    cells: BTreeMap<(String, String), ProgressBar>,
}

const KNOWN: &str = "{prefix:<18} [{bar:30}] {pos:>7}/{len:<7} {msg}";
const UNKNOWN: &str = "{prefix:<18} {pos:>7} done {msg}";

fn style(known: bool) -> ProgressStyle {
    ProgressStyle::with_template(if known { KNOWN } else { UNKNOWN })
        .expect("valid template")
        .progress_chars("=> ")
}

/// Sets a bar's position and length (a bar without a known length, or past it, shows a count
/// only).
fn set(bar: &ProgressBar, done: u64, expected: u64) {
    let known = expected > 0 && done <= expected;
    if bar.length().is_some_and(|l| l > 0) != known {
        bar.set_style(style(known));
    }
    if known {
        bar.set_length(expected);
    } else {
        bar.unset_length();
    }
    bar.set_position(done);
}

impl Bars {
    fn new(target: ProgressDrawTarget) -> Bars {
        Bars {
            mp: MultiProgress::with_draw_target(target),
            total: None,
            cells: BTreeMap::new(),
        }
    }

    fn bar(&mut self, key: (String, String), prefix: String) -> ProgressBar {
        let mp = &self.mp;
        self.cells
            .entry(key)
            .or_insert_with(|| {
                mp.add(
                    ProgressBar::no_length()
                        .with_style(style(false))
                        .with_prefix(prefix),
                )
            })
            .clone()
    }

    fn update(&mut self, p: &pb::Progress) {
        let mp = &self.mp;
        let total = self.total.get_or_insert_with(|| {
            mp.add(
                ProgressBar::no_length()
                    .with_style(style(false))
                    .with_prefix("total"),
            )
        });
        // With live cells, the regions' expectations (unknown with sweeps) over the total's.
        let region_cells = p.live.iter().filter(|c| c.provider.is_empty());
        let expected = if p.live.is_empty() {
            p.probes_expected
        } else {
            region_cells.map(|c| c.expected).sum()
        };
        set(total, p.probes_done, expected);
        total.set_message(if p.cancelled { "cancelling" } else { "" });

        // Regions: the live cells, or (from a coordinator without them) the agents' counts.
        let mut regions: Vec<pb::LiveCell> = p
            .live
            .iter()
            .filter(|c| c.provider.is_empty())
            .cloned()
            .collect();
        if regions.is_empty() {
            for a in &p.agents {
                match regions.iter_mut().find(|c| c.region == a.region) {
                    Some(c) => c.done += a.probes_done,
                    None => regions.push(pb::LiveCell {
                        region: a.region.clone(),
                        done: a.probes_done,
                        ..Default::default()
                    }),
                }
            }
        }
        for c in &regions {
            let bar = self.bar((c.region.clone(), String::new()), c.region.clone());
            set(&bar, c.done, c.expected);
            bar.set_message(region_message(c, &p.agents));
        }
        for c in p.live.iter().filter(|c| c.region.is_empty()) {
            let bar = self.bar(
                (String::new(), c.provider.clone()),
                format!("  {}", c.provider),
            );
            set(&bar, c.done, c.expected);
            let lat = latency(c);
            bar.set_message(if lat.is_empty() {
                format!("{} err", c.errors)
            } else {
                format!("{} err  {lat}", c.errors)
            });
        }
    }

    fn clear(&mut self) {
        // Off the screen at once, then finished without drawing again.
        let _ = self.mp.clear();
        self.mp.set_draw_target(ProgressDrawTarget::hidden());
        for bar in self.total.iter().chain(self.cells.values()) {
            bar.finish_and_clear();
        }
    }
}

impl Drop for Bars {
    fn drop(&mut self) {
        self.clear();
    }
}

/// A region bar's message: its agents' states (`2 running, 1 disconnected`), requests in
/// flight, errors.
fn region_message(c: &pb::LiveCell, agents: &[pb::AgentProgress]) -> String {
    let mut states: BTreeMap<&str, u32> = BTreeMap::new();
    let mut in_flight = 0u64;
    for a in agents.iter().filter(|a| a.region == c.region) {
        let status = if !a.status.is_empty() {
            a.status.as_str()
        } else if a.done {
            "done"
        } else if a.connected {
            "running"
        } else {
            "disconnected"
        };
        *states.entry(status).or_default() += 1;
        if matches!(status, "running" | "cancelling") {
            in_flight += u64::from(a.in_flight);
        }
    }
    let mut parts: Vec<String> = states.iter().map(|(s, n)| format!("{n} {s}")).collect();
    if in_flight > 0 {
        parts.push(format!("{in_flight} in flight"));
    }
    parts.push(format!("{} err", c.errors));
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use latmesh_core::hist::new_histogram;
    use latmesh_core::record::ProbeRecord;
    use std::sync::{Arc, Mutex};

    /// Regions us-east and eu-west; providers p1 and p2; rounds scenarios chat and long
    /// (10 rounds).
    fn plan(stream: bool) -> Plan {
        let scenario = |name: &str| {
            serde_json::json!({
                "name": name, "stream": stream, "max_tokens": 16, "temperature": null,
                "top_p": null, "prompts": [{ "id": "a", "messages": [] }],
                "timeouts": { "connect_s": 10.0, "ttft_s": 60.0, "idle_s": 30.0, "total_s": 120.0 }
            })
        };
        let provider = |name: &str| {
            serde_json::json!({
                "name": name, "base_url": "http://127.0.0.1:9/v1", "api_key_env": null,
                "model_id": "m"
            })
        };
        serde_json::from_value(serde_json::json!({
            "name": "live", "seed": 1, "metrics_version": 3,
            "regions": ["us-east", "eu-west"],
            "rounds": { "count": 10, "interval_ms": 1000, "gap_ms": 10 },
            "providers": [provider("p1"), provider("p2")],
            "scenarios": [scenario("chat"), scenario("long")],
            "prompt_set": "x"
        }))
        .expect("test plan parses")
    }

    fn rec(provider: &str, scenario: &str, outcome: Outcome) -> ProbeRecord {
        ProbeRecord {
            provider: provider.into(),
            scenario: scenario.into(),
            outcome: Some(outcome),
            attempt: 1,
            turn: 1,
            final_attempt: true,
            ..Default::default()
        }
    }

    /// p1: 100 TTFT samples 1..=100 ms over two regions and scenarios; 3 errors, 1 cancelled.
    fn aggregate() -> Aggregate {
        let mut agg = Aggregate::default();
        for (i, ms) in (1..=100u64).enumerate() {
            let region = if i % 2 == 0 { "us-east" } else { "eu-west" };
            let scenario = if i % 3 == 0 { "chat" } else { "long" };
            agg.add_record(region, &rec("p1", scenario, Outcome::Ok));
            let mut h = new_histogram();
            h.record(ms * 1000).unwrap();
            let key = |metric| HistKey {
                provider: "p1".into(),
                scenario: scenario.into(),
                metric,
                step: 0,
            };
            agg.add_histogram(region, key(Metric::Ttft), &h);
            // E2E is 10× slower: it must not leak into the TTFT numbers.
            let mut e = new_histogram();
            e.record(ms * 10_000).unwrap();
            agg.add_histogram(region, key(Metric::E2e), &e);
        }
        for o in [Outcome::Throttled, Outcome::Http5xx, Outcome::TimeoutTtft] {
            agg.add_record("us-east", &rec("p1", "chat", o));
        }
        agg.add_record("eu-west", &rec("p1", "chat", Outcome::Cancelled));
        agg.add_record("eu-west", &rec("p2", "long", Outcome::Ok));
        agg
    }

    fn agents() -> BTreeMap<String, u64> {
        BTreeMap::from([("us-east".into(), 1), ("eu-west".into(), 2)])
    }

    fn approx(a: f64, b: f64) -> bool {
        (a - b).abs() <= b * 0.01
    }

    #[test]
    fn live_cells_from_a_synthetic_aggregate() {
        let plan = plan(true);
        let expected = provider_expected_per_agent(&plan);
        // Rounds: 10 rounds × 2 scenarios, one slot per provider each.
        assert_eq!(expected, vec![20, 20]);
        assert_eq!(plan.probes_per_agent(), 40);
        let cells = live_cells(
            &plan,
            plan.probes_per_agent(),
            &aggregate(),
            &agents(),
            &expected,
        );
        let keys: Vec<(&str, &str)> = cells
            .iter()
            .map(|c| (c.region.as_str(), c.provider.as_str()))
            .collect();
        assert_eq!(
            keys,
            [("us-east", ""), ("eu-west", ""), ("", "p1"), ("", "p2")]
        );
        let (us, eu, p1, p2) = (&cells[0], &cells[1], &cells[2], &cells[3]);
        // Regions: 40 slots per agent × agents; counts only.
        assert_eq!((us.done, us.expected, us.errors), (53, 40, 3));
        assert_eq!((eu.done, eu.expected, eu.errors), (52, 80, 0));
        assert_eq!((us.p50_ms, us.p99_ms), (0.0, 0.0));
        // p1: 100 ok + 3 failed + 1 cancelled slots; the cancelled one is no error.
        assert_eq!((p1.done, p1.expected, p1.errors), (104, 60, 3));
        assert_eq!(p1.metric, "ttft");
        assert!(approx(p1.p50_ms, 50.0), "{}", p1.p50_ms);
        assert!(approx(p1.p95_ms, 95.0), "{}", p1.p95_ms);
        assert!(approx(p1.p99_ms, 99.0), "{}", p1.p99_ms);
        assert_eq!(p1.samples, 100);
        // p2: one slot, no histogram: no percentiles.
        assert_eq!((p2.done, p2.errors, p2.p50_ms, p2.p99_ms), (1, 0, 0.0, 0.0));
    }

    #[test]
    fn non_streaming_plans_report_e2e() {
        let plan = plan(false);
        let cells = live_cells(
            &plan,
            plan.probes_per_agent(),
            &aggregate(),
            &agents(),
            &[0, 0],
        );
        let p1 = &cells[2];
        assert_eq!((p1.metric.as_str(), p1.expected), ("e2e", 0));
        assert!(approx(p1.p50_ms, 500.0), "{}", p1.p50_ms);
        assert!(approx(p1.p99_ms, 990.0), "{}", p1.p99_ms);
    }

    /// `plan(true)` with its second scenario a sweep (c = 2, 4) of `step_requests`.
    fn sweep_plan(step_requests: Option<u32>) -> Plan {
        let mut plan = plan(true);
        plan.scenarios[1].load = serde_json::from_value(serde_json::json!({ "sweep": {
            "concurrency": [2, 4], "step_ms": 10000, "step_requests": step_requests,
            "knee": { "metric": "e2e", "percentile": 50.0, "elasticity": 0.5, "error_pct": 5.0 }
        } }))
        .unwrap();
        plan
    }

    #[test]
    fn progress_counts_sweep_requests() {
        // 10 rounds of the rounds scenario (one slot per provider), and a sweep of 2 steps of
        // at most 5 requests per provider: 10 + 10 per provider and agent.
        let plan = sweep_plan(Some(5));
        assert_eq!(open_ended_sweeps(&plan), Vec::<&str>::new());
        assert_eq!(planned_requests_per_agent(&plan), 40);
        assert_eq!(provider_expected_per_agent(&plan), vec![20, 20]);
        // A sweep request's final attempt counts as done, like a rounds slot; a retried
        // attempt (not final) does not.
        let mut agg = Aggregate::default();
        for step in [0, 1] {
            let mut r = rec("p1", "long", Outcome::Ok);
            (r.load, r.step, r.concurrency) = (latmesh_core::load::LoadKind::Sweep, step, 2);
            agg.add_record("us-east", &r);
            agg.add_record(
                "us-east",
                &ProbeRecord {
                    final_attempt: false,
                    ..r
                },
            );
        }
        agg.add_record("us-east", &rec("p1", "chat", Outcome::Ok));
        assert_eq!(agg.slots_done(), 3);
        let cells = live_cells(
            &plan,
            planned_requests_per_agent(&plan),
            &agg,
            &agents(),
            &provider_expected_per_agent(&plan),
        );
        let (us, p1) = (&cells[0], &cells[2]);
        assert_eq!((us.done, us.expected), (3, 40));
        assert_eq!((p1.done, p1.expected), (3, 60));
    }

    #[test]
    fn open_ended_sweep_plans_leave_expectations_unknown() {
        let plan = sweep_plan(None);
        assert_eq!(open_ended_sweeps(&plan), ["long"]);
        assert_eq!(
            planned_requests_per_agent(&plan),
            20,
            "the rounds scenario still counts"
        );
        assert_eq!(provider_expected_per_agent(&plan), vec![0, 0]);
        let cells = live_cells(
            &plan,
            planned_requests_per_agent(&plan),
            &aggregate(),
            &agents(),
            &[0, 0],
        );
        assert!(cells.iter().all(|c| c.expected == 0), "{cells:?}");
        let line = progress_line(
            &pb::Progress {
                live: cells.clone(),
                probes_expected: 60,
                ..progress()
            },
            0,
        );
        assert!(
            line.starts_with(
                "progress: 105 probes (60 planned in advance, plus open-ended sweeps)"
            ),
            "{line}"
        );
        // Bars show counts only, also a total past its expectation.
        let mut r = Renderer::bars_to(ProgressDrawTarget::hidden());
        r.update(
            &pb::Progress {
                live: cells,
                ..progress()
            },
            0,
        );
        let Kind::Bars(b) = &r.kind else {
            unreachable!()
        };
        assert_eq!(b.total.as_ref().unwrap().length(), None);
        assert_eq!(
            b.cells[&("us-east".to_string(), String::new())].length(),
            None
        );
    }

    #[test]
    fn failover_plans_leave_provider_expectations_unknown() {
        let mut plan = plan(true);
        plan.scenarios[0].failover = Some(latmesh_core::plan::FailoverSpec {
            chain: vec![0, 1],
            attempts: 2,
            on: latmesh_core::plan::FailoverSpec::default_on(),
        });
        assert_eq!(provider_expected_per_agent(&plan), vec![0, 0]);
    }

    #[test]
    fn live_cells_recompute_at_most_once_a_second() {
        let plan = plan(true);
        let mut agg = Aggregate::default();
        let mut cache = LiveCache::default();
        let t0 = Instant::now();
        let done = |cells: &[pb::LiveCell]| cells[2].done;
        assert_eq!(
            done(&cache.cells(t0, false, &plan, plan.probes_per_agent(), &agg, &agents())),
            0
        );
        agg.add_record("us-east", &rec("p1", "chat", Outcome::Ok));
        let soon = t0 + Duration::from_millis(500);
        assert_eq!(
            done(&cache.cells(soon, false, &plan, plan.probes_per_agent(), &agg, &agents())),
            0
        );
        // The last message forces fresh numbers.
        assert_eq!(
            done(&cache.cells(soon, true, &plan, plan.probes_per_agent(), &agg, &agents())),
            1
        );
        agg.add_record("us-east", &rec("p1", "chat", Outcome::Ok));
        let later = soon + LIVE_EVERY;
        assert_eq!(
            done(&cache.cells(
                later,
                false,
                &plan,
                plan.probes_per_agent(),
                &agg,
                &agents()
            )),
            2
        );
    }

    #[test]
    fn bars_only_on_a_terminal() {
        let every = Duration::from_secs(5);
        assert_eq!(choose(every, true), Mode::Bars);
        assert_eq!(choose(every, false), Mode::Lines { every });
        assert_eq!(choose(QUIET_EVERY, true), Mode::Quiet);
        assert_eq!(choose(Duration::from_secs(7200), false), Mode::Quiet);
        assert_eq!(
            Renderer::new(choose(every, false)).mode(),
            Mode::Lines { every }
        );
        assert_eq!(Renderer::new(Mode::Quiet).mode(), Mode::Quiet);
    }

    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn progress() -> pb::Progress {
        let plan = plan(true);
        let agg = aggregate();
        pb::Progress {
            campaign_id: "c".into(),
            probes_done: agg.slots_done(),
            probes_expected: 120,
            agents: vec![pb::AgentProgress {
                agent_id: "a1".into(),
                region: "us-east".into(),
                probes_done: 53,
                connected: true,
                status: "running".into(),
                in_flight: 2,
                ..Default::default()
            }],
            live: live_cells(
                &plan,
                plan.probes_per_agent(),
                &agg,
                &agents(),
                &provider_expected_per_agent(&plan),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn plain_lines_carry_the_live_numbers() {
        let out = Shared::default();
        let mut r = Renderer::lines_to(Duration::ZERO, Box::new(out.clone()));
        let p = progress();
        r.update(&p, 0);
        r.update(&p, 0);
        r.finish();
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        let line = lines[0];
        assert!(
            line.starts_with("progress: 105/120 probes [us-east 53 done, running (2 in flight)]"),
            "{line}"
        );
        assert!(
            line.contains("; p1 104/60, 3 err, TTFT P50 50 ms P95 95 ms P99 ~99 ms"),
            "{line}"
        );
        assert!(line.contains("; p2 1/60, 0 err"), "{line}");
        assert!(
            !text.contains('\x1b'),
            "no escape codes in a pipe: {text:?}"
        );
    }

    #[test]
    fn plain_lines_wait_for_every() {
        let out = Shared::default();
        let mut r = Renderer::lines_to(Duration::from_secs(3600), Box::new(out.clone()));
        r.update(&progress(), 0);
        assert!(out.0.lock().unwrap().is_empty());
    }

    #[test]
    fn bars_follow_the_live_cells() {
        let mut r = Renderer::bars_to(ProgressDrawTarget::hidden());
        assert_eq!(r.mode(), Mode::Bars);
        r.update(&progress(), 0);
        let Kind::Bars(b) = &r.kind else {
            unreachable!()
        };
        let total = b.total.as_ref().unwrap();
        assert_eq!((total.position(), total.length()), (105, Some(120)));
        let bar = |region: &str, provider: &str| {
            let bar = &b.cells[&(region.to_string(), provider.to_string())];
            (bar.position(), bar.length(), bar.message())
        };
        let msg = "1 running, 2 in flight, 3 err".to_string();
        // Past its expectation (53 of 40): a count without a bar.
        assert_eq!(bar("us-east", ""), (53, None, msg));
        assert_eq!(bar("eu-west", ""), (52, Some(80), "0 err".into()));
        // 100 samples support P95 (72), not P99 (368).
        let p1 = "3 err  TTFT P50 50 ms P95 95 ms P99 ~99 ms".to_string();
        assert_eq!(bar("", "p1"), (104, None, p1));
        assert_eq!(bar("", "p2"), (1, Some(60), "0 err".into()));
        r.finish();
        let Kind::Bars(b) = &r.kind else {
            unreachable!()
        };
        assert!(b.cells.values().all(ProgressBar::is_finished));
    }

    #[test]
    fn bars_without_live_cells_count_per_region() {
        let mut r = Renderer::bars_to(ProgressDrawTarget::hidden());
        let p = pb::Progress {
            live: Vec::new(),
            ..progress()
        };
        r.update(&p, 0);
        let Kind::Bars(b) = &r.kind else {
            unreachable!()
        };
        let us = &b.cells[&("us-east".to_string(), String::new())];
        assert_eq!((us.position(), us.length()), (53, None));
        assert_eq!(b.cells.len(), 1);
    }
}
