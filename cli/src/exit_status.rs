//! The exit status of a run that measured (`campaign launch`, `campaign watch`, `campaign
//! series --wait`, `demo`): besides "the campaign did not finish" (status 1, an error), a
//! finished campaign exits non-zero when a provider was dead in a region
//! ([`EXIT_CELL_FAILED_ALL`]) or, with `--fail-above-pct`, when a cell's failure rate is
//! surely above the user's limit ([`EXIT_CELL_FAILED_ABOVE`]).
//!
//! Requests are counted as the matrix counts them: logical requests (warm-up left out, a
//! request and its retries counted once, `cancelled` and `dropped` left out, as
//! `request_error_pct`), per region (never the merged `ALL` row). The rules:
//! * *a dead provider*: a provider failed every one of its requests in a region, over every
//!   scenario of the campaign (status 3) — a closed port, a wrong path, a revoked key. One
//!   scenario failing whole while the provider served others (a context tier it refuses, two
//!   throttled requests of a small cell) is a finding of the matrix, not a dead provider; the
//!   threshold below catches it when asked;
//! * *failure rate above the limit* (`--fail-above-pct P`): the 95 % Wilson interval of a
//!   region × provider × scenario cell's failed requests lies wholly above `P` % (status 4) —
//!   the rule `latmesh check`'s `error_pct_above` applies, so a few unlucky requests in a
//!   small cell do not fail a run.
//!
//! The measurement is printed and written before the status is decided: this module only
//! judges a finished [`Summary`] and names the cells (their failed counts and last error).

use std::collections::BTreeMap;
use std::fmt;

use latmesh_results::matrix::{ALL_REGIONS, MatrixCell};
use latmesh_results::summary::Summary;

/// Exit status: a usage error (clap's, e.g. an unknown flag).
pub const EXIT_USAGE: u8 = 2;
/// Exit status: some provider failed every one of its requests in a region (over every
/// scenario).
pub const EXIT_CELL_FAILED_ALL: u8 = 3;
/// Exit status: with `--fail-above-pct P`, some cell's failed-request rate is significantly
/// above `P` % (and no cell failed every request).
pub const EXIT_CELL_FAILED_ABOVE: u8 = 4;

/// The exit statuses in words, for the `--help` of the commands that measure.
pub const EXIT_HELP: &str = "Exit status: 0 the campaign finished and no cell failed; 1 an error, or the campaign did not finish whole (incomplete, cancelled, stopped by the budget guard); 2 a usage error; 3 some provider failed every one of its requests in a region, over every scenario (warm-up left out); 4 with --fail-above-pct, some cell's failed requests significantly above it. The matrix and the JSON summary are printed and written first, whatever the status.";

/// Cells named in full in the line; more are counted.
const NAMED_CELLS: usize = 6;

/// Longest last-error text shown per cell, characters.
const LAST_ERROR_CHARS: usize = 80;

/// The `--fail-above-pct` flag shared by the commands that measure.
#[derive(clap::Args, Debug, Clone, Copy, Default)]
pub struct FailGate {
    /// Also exit non-zero (status 4) when some region × provider × scenario cell's failed
    /// requests are significantly above this % (the lower end of their 95 % Wilson interval
    /// above it). Without it, only a provider that failed every request in a region fails
    /// the run (status 3).
    #[arg(long, value_name = "PCT", value_parser = parse_pct)]
    pub fail_above_pct: Option<f64>,
}

/// `--fail-above-pct`'s value: a percentage in `[0, 100)`.
fn parse_pct(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number: give a percentage such as 20"))?;
    if !(0.0..100.0).contains(&v) {
        return Err(format!(
            "{v} is not a percentage in [0, 100): a cell cannot fail more than 100 % of its requests"
        ));
    }
    Ok(v)
}

/// Why a finished measurement ends with a non-zero status; its `Display` is the one line
/// printed, and `main` exits with [`CellFailure::code`].
#[derive(Debug, Clone, PartialEq)]
pub struct CellFailure {
    /// [`EXIT_CELL_FAILED_ALL`] or [`EXIT_CELL_FAILED_ABOVE`].
    pub code: u8,
    /// The line: which cells, their failed counts and last errors.
    pub line: String,
}

impl fmt::Display for CellFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "exit status {}: {}", self.code, self.line)
    }
}

impl std::error::Error for CellFailure {}

/// Failed requests of a cell (from its request count and `request_error_pct`).
fn failed_requests(c: &MatrixCell) -> u64 {
    ((c.request_error_pct * c.requests as f64 / 100.0).round() as u64).min(c.requests)
}

/// `us-east × fast × chat: 2/2 failed (last: connection_error: tcp connect error: Connection refused)`.
fn describe(c: &MatrixCell, run: Option<&str>) -> String {
    let last = c.last_error.as_deref().map_or(String::new(), |e| {
        let cut: String = e.chars().take(LAST_ERROR_CHARS).collect();
        let more = if cut.len() < e.len() { "…" } else { "" };
        format!(" (last: {cut}{more})")
    });
    let run = run.map_or(String::new(), |r| format!("{r}: "));
    format!(
        "{run}{} × {} × {}: {}/{} failed{last}",
        c.region,
        c.provider,
        c.scenario,
        failed_requests(c),
        c.requests
    )
}

/// `us-east × gone: 3/3 failed in every scenario (last: connection_error: …)`.
fn describe_dead(
    region: &str,
    provider: &str,
    requests: u64,
    last: Option<&str>,
    run: Option<&str>,
) -> String {
    let last = last.map_or(String::new(), |e| {
        let cut: String = e.chars().take(LAST_ERROR_CHARS).collect();
        let more = if cut.len() < e.len() { "…" } else { "" };
        format!(" (last: {cut}{more})")
    });
    let run = run.map_or(String::new(), |r| format!("{r}: "));
    format!("{run}{region} × {provider}: {requests}/{requests} failed in every scenario{last}")
}

/// `a; b; c; and 4 more`.
fn listed(items: &[String]) -> String {
    let mut s = items
        .iter()
        .take(NAMED_CELLS)
        .cloned()
        .collect::<Vec<_>>()
        .join("; ");
    if items.len() > NAMED_CELLS {
        s += &format!("; and {} more", items.len() - NAMED_CELLS);
    }
    s
}

impl FailGate {
    /// Judges finished summaries (one; or each run of a series, named by its id): `None`
    /// when the status stays 0.
    pub fn judge<'a>(
        &self,
        runs: impl IntoIterator<Item = (Option<&'a str>, &'a Summary)>,
    ) -> Option<CellFailure> {
        let (mut dead, mut above) = (Vec::new(), Vec::new());
        for (run, s) in runs {
            // (region, provider) → (requests, failed, last error), over every scenario.
            let mut by_provider: BTreeMap<(&str, &str), (u64, u64, Option<&str>)> = BTreeMap::new();
            // Cells surely above the limit, with their (region, provider).
            let mut run_above = Vec::new();
            for c in s.cells.iter().filter(|c| c.region != ALL_REGIONS) {
                let failed = failed_requests(c);
                let e = by_provider
                    .entry((c.region.as_str(), c.provider.as_str()))
                    .or_default();
                e.0 += c.requests;
                e.1 += failed;
                e.2 = c.last_error.as_deref().or(e.2);
                if let Some(limit) = self.fail_above_pct
                    && latmesh_core::proportion::wilson(failed, c.requests)
                        .is_some_and(|w| w.lower * 100.0 > limit)
                {
                    run_above.push(((c.region.as_str(), c.provider.as_str()), describe(c, run)));
                }
            }
            let dead_here: Vec<(&str, &str)> = by_provider
                .iter()
                .filter(|(_, (requests, failed, _))| *requests > 0 && failed == requests)
                .map(|(k, _)| *k)
                .collect();
            for k in &dead_here {
                let (requests, _, last) = by_provider[k];
                dead.push(describe_dead(k.0, k.1, requests, last, run));
            }
            // A dead provider is named once, as dead, not again cell by cell.
            above.extend(
                run_above
                    .into_iter()
                    .filter(|(k, _)| !dead_here.contains(k))
                    .map(|(_, text)| text),
            );
        }
        if !dead.is_empty() {
            return Some(CellFailure {
                code: EXIT_CELL_FAILED_ALL,
                line: format!(
                    "{} provider(s) failed every request in a region: {}",
                    dead.len(),
                    listed(&dead)
                ),
            });
        }
        let limit = self.fail_above_pct?;
        (!above.is_empty()).then(|| CellFailure {
            code: EXIT_CELL_FAILED_ABOVE,
            line: format!(
                "{} cell(s) failed significantly more than --fail-above-pct {limit} % of their requests (95 % interval above it): {}",
                above.len(),
                listed(&above)
            ),
        })
    }
}

/// The end of a command that measured: `finished` (the campaign's own check: complete, not
/// cancelled, not stopped; status 1 when it fails) wins over the cells' `failure`, whose
/// line is then printed as a note so neither is hidden; else the `failure` is the error.
///
/// # Errors
/// `finished`'s error, or the [`CellFailure`].
pub fn conclude(finished: anyhow::Result<()>, failure: Option<CellFailure>) -> anyhow::Result<()> {
    match (finished, failure) {
        (Err(e), Some(f)) => {
            eprintln!("also: {}", f.line);
            Err(e)
        }
        (Err(e), None) => Err(e),
        (Ok(()), Some(f)) => Err(f.into()),
        (Ok(()), None) => Ok(()),
    }
}

/// The exit status of an error `main` got: a [`CellFailure`]'s code, else 1.
pub fn code_of(e: &anyhow::Error) -> u8 {
    e.chain()
        .find_map(|c| c.downcast_ref::<CellFailure>())
        .map_or(1, |f| f.code)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(region: &str, requests: u64, failed: u64) -> MatrixCell {
        let mut c = latmesh_results::fixtures::demo_sized().cells[0].clone();
        c.region = region.to_string();
        c.provider = "p".into();
        c.scenario = "chat".into();
        c.requests = requests;
        c.request_error_pct = if requests > 0 {
            failed as f64 * 100.0 / requests as f64
        } else {
            0.0
        };
        c.last_error =
            (failed > 0).then(|| "connection_error: tcp connect error: Connection refused".into());
        c
    }

    fn summary(cells: Vec<MatrixCell>) -> Summary {
        let mut s = latmesh_results::fixtures::demo_sized();
        s.cells = cells;
        s
    }

    #[test]
    fn a_provider_that_failed_every_request_in_a_region_is_status_3_naming_it() {
        let s = summary(vec![
            cell("us", 12, 0),
            cell("eu", 2, 2),
            cell(ALL_REGIONS, 14, 2),
        ]);
        let f = FailGate::default().judge([(None, &s)]).unwrap();
        assert_eq!(f.code, EXIT_CELL_FAILED_ALL);
        assert_eq!(
            f.line,
            "1 provider(s) failed every request in a region: eu × p: 2/2 failed in every scenario (last: connection_error: tcp connect error: Connection refused)"
        );
        // One scenario failing whole while the provider served another (a refused context
        // tier, two throttled requests): not a dead provider; above a limit when one is set.
        let mut tier = cell("eu", 2, 2);
        tier.scenario = "ctx.32k".into();
        let s = summary(vec![cell("eu", 12, 0), tier]);
        assert_eq!(FailGate::default().judge([(None, &s)]), None);
        let gate = FailGate {
            fail_above_pct: Some(5.0),
        };
        let f = gate.judge([(None, &s)]).unwrap();
        assert_eq!(f.code, EXIT_CELL_FAILED_ABOVE);
        assert!(
            f.line.contains("eu × p × ctx.32k: 2/2 failed"),
            "{}",
            f.line
        );
        // Dead in every scenario: status 3, named once as a provider.
        let mut tier = cell("eu", 2, 2);
        tier.scenario = "ctx.32k".into();
        let s = summary(vec![cell("eu", 12, 12), tier]);
        let f = gate.judge([(None, &s)]).unwrap();
        assert_eq!(f.code, EXIT_CELL_FAILED_ALL);
        assert!(
            f.line.contains("eu × p: 14/14 failed in every scenario"),
            "{}",
            f.line
        );
        // The ALL row alone never counts; a cell without requests says nothing.
        let s = summary(vec![cell(ALL_REGIONS, 2, 2), cell("us", 0, 0)]);
        assert_eq!(FailGate::default().judge([(None, &s)]), None);
        // A series names the run.
        let s = summary(vec![cell("eu", 3, 3)]);
        let f = FailGate::default().judge([(Some("s-r2"), &s)]).unwrap();
        assert!(f.line.contains("s-r2: eu × p: 3/3 failed"), "{}", f.line);
    }

    #[test]
    fn the_threshold_needs_the_interval_above_it() {
        // 3 of 12 (25 %): interval [8.9 %, 53.2 %]; 10 of 40: [14.2 %, 40.2 %].
        let small = summary(vec![cell("us", 12, 3)]);
        let large = summary(vec![cell("us", 40, 10)]);
        let gate = FailGate {
            fail_above_pct: Some(10.0),
        };
        assert_eq!(gate.judge([(None, &small)]), None);
        let f = gate.judge([(None, &large)]).unwrap();
        assert_eq!(f.code, EXIT_CELL_FAILED_ABOVE);
        assert!(
            f.line
                .starts_with("1 cell(s) failed significantly more than --fail-above-pct 10 %"),
            "{}",
            f.line
        );
        assert!(f.line.contains("us × p × chat: 10/40 failed"), "{}", f.line);
        // Without the flag, failures short of every request keep status 0.
        assert_eq!(FailGate::default().judge([(None, &large)]), None);
        // A dead cell wins over one above the limit.
        let both = summary(vec![cell("us", 40, 10), cell("eu", 2, 2)]);
        assert_eq!(
            gate.judge([(None, &both)]).unwrap().code,
            EXIT_CELL_FAILED_ALL
        );
    }

    #[test]
    fn the_flag_takes_a_percentage_and_the_code_is_found_in_a_chain() {
        assert_eq!(parse_pct(" 20 "), Ok(20.0));
        assert!(parse_pct("100").unwrap_err().contains("[0, 100)"));
        assert!(parse_pct("-1").is_err());
        assert!(parse_pct("ten").unwrap_err().contains("not a number"));
        let e = anyhow::Error::new(CellFailure {
            code: EXIT_CELL_FAILED_ALL,
            line: "x".into(),
        })
        .context("campaign c");
        assert_eq!(code_of(&e), 3);
        assert_eq!(code_of(&anyhow::anyhow!("other")), 1);
    }

    #[test]
    fn many_cells_are_counted_past_the_sixth() {
        let s = summary((0..9).map(|i| cell(&format!("r{i}"), 1, 1)).collect());
        let f = FailGate::default().judge([(None, &s)]).unwrap();
        assert!(
            f.line.starts_with("9 provider(s) failed every request"),
            "{}",
            f.line
        );
        assert!(f.line.ends_with("; and 3 more"), "{}", f.line);
    }
}
