//! The `campaign series` table of a scheduled series and its runs.

use std::fmt::Write as _;

use latmesh_core::schedule::rfc3339;
use latmesh_proto::pb;

/// The `campaign series` table: one line per run (id, due, start, state, complete).
pub fn render(s: &pb::SeriesReply, now_unix_us: i64) -> String {
    let mut out = format!(
        "series {} ({}): {}; {} of {} runs launched; {}\n",
        s.series_id,
        s.name,
        s.schedule,
        s.runs.len(),
        s.runs_planned,
        s.state
    );
    if s.next_due_coord_unix_us > 0 {
        let in_s = (s.next_due_coord_unix_us - now_unix_us) as f64 / 1e6;
        let _ = writeln!(
            out,
            "next run due {} ({})",
            rfc3339(s.next_due_coord_unix_us),
            if in_s >= 0.0 {
                format!("in {in_s:.0} s")
            } else {
                format!("{:.0} s ago", -in_s)
            }
        );
    }
    if !s.warning.is_empty() {
        let _ = writeln!(out, "warning: {}", s.warning);
    }
    if !s.runs.is_empty() {
        let _ = writeln!(
            out,
            "{:<36} {:<21} {:<21} {:<11} COMPLETE",
            "RUN", "DUE (UTC)", "STARTED (UTC)", "STATE"
        );
        for r in &s.runs {
            let _ = writeln!(
                out,
                "{:<36} {:<21} {:<21} {:<11} {}",
                r.campaign_id,
                rfc3339(r.due_coord_unix_us),
                rfc3339(r.start_at_coord_unix_us),
                r.state,
                if !r.finished {
                    "-"
                } else if r.complete {
                    "yes"
                } else {
                    "no"
                }
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the coordinator's series test leaves to the table.
    #[test]
    fn a_series_lists_its_schedule_and_runs() {
        let run = |n: u32| pb::SeriesRun {
            campaign_id: format!("s1-r{n}"),
            run: n,
            state: "complete".into(),
            finished: true,
            complete: true,
            ..Default::default()
        };
        let s = pb::SeriesReply {
            series_id: "s1".into(),
            name: "demo".into(),
            schedule: "every 3s, 2 runs".into(),
            runs_planned: 2,
            state: "finished".into(),
            runs: vec![run(1), run(2)],
            finished: true,
            ..Default::default()
        };
        let text = render(&s, 0);
        assert!(
            text.contains("s1-r2") && text.contains("every 3s, 2 runs"),
            "{text}"
        );
        assert!(text.contains("2 of 2 runs launched; finished"), "{text}");
    }
}
