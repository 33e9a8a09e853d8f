//! The failover lines of the campaign summary: per scenario and region, the clients' requests
//! through the chain and the backups' own probes.

use std::fmt::Write as _;

use latmesh_results::failover_stats::FailoverRow;

/// Renders the failover rows as text (latency P50/P95/P99; `~` marks a percentile its samples
/// do not support, with the legend after the rows).
pub fn render_failover(rows: &[FailoverRow]) -> String {
    let mut out = String::new();
    let mut last = "";
    let mut marked = false;
    for r in rows {
        if r.scenario != last {
            let _ = writeln!(
                out,
                "\nfailover {}: client requests through {} (latency from the first send to the answer)",
                r.scenario,
                r.chain.join(" → ")
            );
            last = &r.scenario;
        }
        let served: Vec<String> = r
            .served_by_pct
            .iter()
            .map(|(p, v)| format!("{p} {v:.0}%"))
            .collect();
        let latency = r.latency.as_ref().map_or("-".to_string(), |p| {
            let parts: Vec<String> = [50.0, 95.0, 99.0]
                .into_iter()
                .filter_map(|q| p.point(q))
                .map(|q| {
                    marked |= !q.supported;
                    format!("P{} {} ms", q.percentile, q.text(|v| format!("{v:.0}")))
                })
                .collect();
            parts.join(", ")
        });
        let backups: Vec<String> = r
            .backups
            .iter()
            .map(|b| format!("{} {:.0}% ok of {}", b.provider, b.ok_pct, b.probes))
            .collect();
        let _ = writeln!(
            out,
            "  {:<13} {:>4} requests, {:>5.1}% ok, {:.2} attempts each; served by {}; {}; backups alone: {}",
            r.region,
            r.requests,
            r.ok_pct,
            r.attempts_per_request,
            served.join(", "),
            latency,
            backups.join(", ")
        );
    }
    if marked {
        let _ = writeln!(out, "{}", latmesh_results::percentiles::legend());
    }
    out
}
