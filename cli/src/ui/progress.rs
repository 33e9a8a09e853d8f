//! A followed campaign's progress on the terminal ([`Renderer`]): what `latmesh campaign
//! launch`, `campaign watch` or `latmesh demo` draws from the `Watch` stream's
//! [`pb::Progress`] messages, whose live cells the coordinator computes
//! ([`latmesh_coordinator::progress`]).
//!
//! With a terminal on stderr it draws indicatif bars: a total bar, one bar per region (slots
//! done / expected, agent states, errors) and one per provider (slots done / expected,
//! errors, live TTFT P50/P95/P99 with `~` on a percentile its samples do not support yet, E2E
//! for plans without streaming scenarios). Without one (pipes, CI, tests) it prints plain
//! `progress:` lines every `every`, with the providers' live numbers appended, and never an
//! escape code. The final line and the summary that follow a campaign are printed by
//! [`crate::watch::follow`] the same way in both cases.

use std::collections::BTreeMap;
use std::io::{IsTerminal as _, Write};
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use latmesh_proto::pb;

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
/// advance, plus open-ended sweeps and SLO searches)`.
pub fn counts_text(p: &pb::Progress) -> String {
    let open_ended = p
        .live
        .iter()
        .any(|c| c.provider.is_empty() && c.expected == 0);
    if open_ended {
        format!(
            "{} probes ({} planned in advance, plus open-ended sweeps and SLO searches)",
            p.probes_done, p.probes_expected
        )
    } else {
        format!("{}/{} probes", p.probes_done, p.probes_expected)
    }
}

/// Agents listed one per line in a plain progress block; a larger fleet is summarized.
const AGENT_LINES_MAX: usize = 6;

/// A plain progress block (for a pipe or a log, where bars cannot redraw), every line short
/// enough to read in a log viewer (a provider's line stays under ~100 characters whatever the
/// number of providers):
///
/// ```text
/// progress: 105/120 probes
///   agent us-east 53 done, running (2 in flight)
///   p1 104/60, 3 err, TTFT P50 50 ms P95 95 ms P99 ~99 ms
/// ```
///
/// One line per agent up to [`AGENT_LINES_MAX`] agents; a larger fleet is one line of counts
/// by status, naming the first agents that are not running or done. Then one line per
/// provider (requests done/expected, errors, live latency).
pub fn progress_line(p: &pb::Progress, now_unix_us: i64) -> String {
    let mut lines = vec![format!(
        "progress: {}{}",
        counts_text(p),
        if p.cancelled { ", cancelling" } else { "" }
    )];
    if p.agents.len() <= AGENT_LINES_MAX {
        lines.extend(
            p.agents
                .iter()
                .map(|a| format!("  agent {}", super::agents::describe_agent(a, now_unix_us))),
        );
    } else {
        lines.push(format!(
            "  agents: {}",
            fleet_summary(&p.agents, now_unix_us)
        ));
    }
    for c in p.live.iter().filter(|c| c.region.is_empty()) {
        let mut line = format!("  {} {}", c.provider, c.done);
        if c.expected > 0 {
            line += &format!("/{}", c.expected);
        }
        line += &format!(", {} err", c.errors);
        let lat = latency(c);
        if !lat.is_empty() {
            line += ", ";
            line += &lat;
        }
        lines.push(line);
    }
    lines.join("\n")
}

/// `98 running, 1 done, 1 disconnected; eu-west 12 done, disconnected since 3.1 s ago`: a
/// fleet's agents counted by status, then (at most three) agents that are neither running nor
/// done, described in full.
fn fleet_summary(agents: &[pb::AgentProgress], now_unix_us: i64) -> String {
    let mut by_status: BTreeMap<String, usize> = BTreeMap::new();
    let mut unusual = Vec::new();
    for a in agents {
        let text = super::agents::describe_agent(a, now_unix_us);
        let status = super::agents::agent_status(a);
        *by_status.entry(status.to_string()).or_default() += 1;
        if !matches!(status, "running" | "done") && unusual.len() < 3 {
            unusual.push(text);
        }
    }
    let counts = by_status
        .iter()
        .map(|(s, n)| format!("{n} {s}"))
        .collect::<Vec<_>>()
        .join(", ");
    if unusual.is_empty() {
        counts
    } else {
        format!("{counts}; {}", unusual.join("; "))
    }
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
    use std::sync::{Arc, Mutex};

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

    /// The coordinator's live cells (`latmesh_coordinator::progress::live_cells`, tested
    /// there) of a 10-round plan over regions us-east (1 agent) and eu-west (2 agents),
    /// providers p1 and p2 and two scenarios, where p1 has 100 TTFT samples of 1..=100 ms,
    /// 3 errors (all in us-east) and 1 cancelled attempt, and p2 one ok attempt.
    fn progress() -> pb::Progress {
        let region = |region: &str, done, expected, errors| pb::LiveCell {
            region: region.into(),
            done,
            expected,
            errors,
            ..Default::default()
        };
        let provider =
            |provider: &str, done, errors, [p50_ms, p95_ms, p99_ms]: [f64; 3], samples| {
                pb::LiveCell {
                    provider: provider.into(),
                    done,
                    expected: 60,
                    errors,
                    p50_ms,
                    p95_ms,
                    p99_ms,
                    metric: "ttft".into(),
                    samples,
                    ..Default::default()
                }
            };
        pb::Progress {
            campaign_id: "c".into(),
            probes_done: 105,
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
            live: vec![
                region("eu-west", 52, 80, 0),
                region("us-east", 53, 40, 3),
                provider("p1", 104, 3, [50.0, 95.0, 99.0], 100),
                provider("p2", 1, 0, [0.0; 3], 0),
            ],
            ..Default::default()
        }
    }

    /// An open-ended sweep (the coordinator's cells then have no expectation): a count
    /// against what was planned in advance, and bars with counts only.
    #[test]
    fn open_ended_sweeps_show_counts() {
        let mut cells = progress().live;
        for c in &mut cells {
            c.expected = 0;
        }
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
                "progress: 105 probes (60 planned in advance, plus open-ended sweeps and SLO searches)"
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
    fn plain_lines_carry_the_live_numbers() {
        let out = Shared::default();
        let mut r = Renderer::lines_to(Duration::ZERO, Box::new(out.clone()));
        let p = progress();
        r.update(&p, 0);
        r.update(&p, 0);
        r.finish();
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        // Two blocks of four lines: counts, the agent, the two providers.
        assert_eq!(
            lines[..4],
            [
                "progress: 105/120 probes",
                "  agent us-east 53 done, running (2 in flight)",
                "  p1 104/60, 3 err, TTFT P50 50 ms P95 95 ms P99 ~99 ms",
                "  p2 1/60, 0 err",
            ],
            "{text}"
        );
        assert_eq!(lines.len(), 8, "{text}");
        assert_eq!(lines[4..], lines[..4], "{text}");
        assert!(
            !text.contains('\x1b'),
            "no escape codes in a pipe: {text:?}"
        );
    }

    /// A fleet is one line of counts by status, naming the agents that need a look; no line
    /// of the block grows with the number of agents or providers.
    #[test]
    fn a_fleet_is_summarized_and_lines_stay_short() {
        let mut p = progress();
        let agent = |region: &str, status: &str| pb::AgentProgress {
            agent_id: format!("{region}-{status}"),
            region: region.into(),
            probes_done: 7,
            connected: status != "disconnected",
            status: status.into(),
            ..Default::default()
        };
        p.agents = (0..40)
            .map(|i| agent(&format!("r{i}"), "running"))
            .chain([agent("eu-west", "disconnected"), agent("ap-south", "done")])
            .collect();
        p.live.extend((0..30).map(|i| pb::LiveCell {
            provider: format!("provider-with-a-long-name-{i}"),
            done: 1000,
            expected: 2000,
            errors: 12,
            p50_ms: 1234.0,
            p95_ms: 5678.0,
            p99_ms: 9012.0,
            metric: "ttft".into(),
            samples: 1000,
            ..Default::default()
        }));
        let block = progress_line(&p, 0);
        let lines: Vec<&str> = block.lines().collect();
        assert_eq!(
            lines[1], "  agents: 1 disconnected, 1 done, 40 running; eu-west 7 done, disconnected",
            "{block}"
        );
        assert_eq!(lines.len(), 2 + 2 + 30, "{block}");
        let longest = lines.iter().map(|l| l.chars().count()).max().unwrap();
        assert!(longest <= 100, "a line of {longest} characters: {block}");
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
