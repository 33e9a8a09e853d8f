//! The campaign summary as text: per scenario the region × provider matrices (samples, TTFT,
//! E2E, TPOT, errors), then the sweeps, rates, failover, notices (politeness, dropped, last
//! errors, usage vs chunks, retried connections, models, budget) and the agents.

use std::fmt::Write as _;

use comfy_table::{Cell as TCell, CellAlignment, Table, presets};

use super::{budget, cache, failover, models, rate, slo, sweep, tiers};
use latmesh_results::summary::{ALL_REGIONS, MatrixCell, Percentiles, Summary};

/// Renders the matrices as text tables: per scenario, rows are regions (and `ALL`),
/// columns providers; one table per quantity. Then the sweeps (knee metric per step and
/// the knee, [`sweep::render_sweeps`]), the open-loop rates
/// ([`rate::render_rates`]), dropped arrivals, errors, and the start skew line.
pub fn render(summary: &Summary) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "campaign {} ({}), plan {}",
        summary.name,
        summary.campaign_id,
        &summary.plan_hash[..12]
    );
    // A view gives a cell's text and whether it holds a percentile the samples do not
    // support (then the table gets the legend).
    let list = &summary.percentiles;
    let names = latmesh_results::percentiles::header(list);
    let fmt_p = |p: &Option<Percentiles>| match p {
        Some(p) => p.text(list, |v| format!("{v:.0}")),
        None => ("-".into(), false),
    };
    type View<'a> = (String, &'a dyn Fn(&MatrixCell) -> (String, bool));
    let plain = |text: String| (text, false);
    let views: [View; 5] = [
        ("samples (ok / attempts)".into(), &|c| {
            plain(format!("{}/{}", c.samples, c.attempts))
        }),
        (format!("TTFT ms {names}"), &|c| fmt_p(&c.ttft)),
        (format!("E2E ms {names}"), &|c| fmt_p(&c.e2e)),
        ("TPOT ms P50".into(), &|c| {
            plain(c.tpot_p50_ms.map_or("-".into(), |v| format!("{v:.1}")))
        }),
        (
            "errors % / throttled % (attempts) / failed % (requests, after retries)".into(),
            &|c| {
                plain(format!(
                    "{:.1} / {:.1} / {:.1}",
                    c.error_pct, c.throttled_pct, c.request_error_pct
                ))
            },
        ),
    ];
    for scenario in &summary.scenarios {
        for (title, view) in &views {
            let _ = writeln!(out, "\n{scenario}: {title}");
            let mut t = Table::new();
            t.load_preset(presets::ASCII_MARKDOWN);
            let mut header = vec![TCell::new("region")];
            header.extend(summary.providers.iter().map(TCell::new));
            t.set_header(header);
            let mut marked = false;
            for region in summary
                .regions
                .iter()
                .map(String::as_str)
                .chain([ALL_REGIONS])
            {
                let mut row = vec![TCell::new(region)];
                for provider in &summary.providers {
                    let (text, m) = summary
                        .cell(region, provider, scenario)
                        .map_or(("-".into(), false), view);
                    marked |= m;
                    row.push(TCell::new(text).set_alignment(CellAlignment::Right));
                }
                t.add_row(row);
            }
            let _ = writeln!(out, "{t}");
            if marked {
                let _ = writeln!(
                    out,
                    "{}",
                    latmesh_results::percentiles::legend_for(&summary.percentiles)
                );
            }
        }
        if summary
            .cells
            .iter()
            .any(|c| c.scenario == *scenario && c.goodput.is_some())
        {
            out.push_str(&goodput_table(summary, scenario));
        }
        out.push_str(&cache::render_cached_matrix(summary, scenario));
    }
    out.push_str(&cache::render_text_modes(summary));
    out.push_str(&cache::render_flags(summary));
    if !summary.tiers.is_empty() || !summary.token_counts.is_empty() {
        out.push_str(&tiers::render_tiers(&summary.tiers, &summary.token_counts));
    }
    if !summary.sweeps.is_empty() {
        out.push_str(&sweep::render_sweeps(&summary.sweeps));
    }
    if !summary.rates.is_empty() {
        out.push_str(&rate::render_rates(&summary.rates));
    }
    if !summary.rate_steps.is_empty() {
        out.push_str(&slo::render_rate_steps(&summary.rate_steps));
    }
    if !summary.searches.is_empty() {
        out.push_str(&slo::render_searches(&summary.searches));
    }
    out.push_str(&rate::render_loaded_starts(&summary.cells));
    if !summary.failover.is_empty() {
        out.push_str(&failover::render_failover(&summary.failover));
    }
    for n in &summary.politeness {
        let _ = writeln!(
            out,
            "\n{}: {} throttled (429) while the agents kept within its caps ({}): the provider's own limit is lower",
            n.provider, n.throttled, n.caps
        );
    }
    let dropped: Vec<&MatrixCell> = summary
        .cells
        .iter()
        .filter(|c| c.region != ALL_REGIONS && c.dropped > 0)
        .collect();
    if !dropped.is_empty() {
        let _ = writeln!(
            out,
            "
dropped (not sent in time: open-loop arrivals, or rounds probes held by their caps; not in error rates):"
        );
        for c in dropped {
            let _ = writeln!(
                out,
                "  {:<14} {:<20} {:<14} {}",
                c.region, c.provider, c.scenario, c.dropped
            );
        }
    }
    let warm: Vec<&MatrixCell> = summary
        .cells
        .iter()
        .filter(|c| c.region != ALL_REGIONS && c.warmup > 0)
        .collect();
    if !warm.is_empty() {
        let _ = writeln!(
            out,
            "\nwarm-up requests (sent and stored, left out of every figure above):"
        );
        // A scenario whose every region × provider cell had the same warm-up: one line.
        let mut scenarios: Vec<&str> = warm.iter().map(|c| c.scenario.as_str()).collect();
        scenarios.dedup();
        for scenario in scenarios {
            let of: Vec<&&MatrixCell> = warm.iter().filter(|c| c.scenario == scenario).collect();
            let cells = summary
                .cells
                .iter()
                .filter(|c| c.region != ALL_REGIONS && c.scenario == scenario)
                .count();
            if of.len() == cells && of.iter().all(|c| c.warmup == of[0].warmup) {
                let _ = writeln!(
                    out,
                    "  {scenario}: {} per region × provider ({} in all)",
                    of[0].warmup,
                    of[0].warmup * of.len() as u64
                );
                continue;
            }
            for c in of {
                let _ = writeln!(
                    out,
                    "  {:<14} {:<20} {:<14} {}",
                    c.region, c.provider, c.scenario, c.warmup
                );
            }
        }
    }
    let failing: Vec<&MatrixCell> = summary
        .cells
        .iter()
        .filter(|c| c.region != ALL_REGIONS && c.last_error.is_some())
        .collect();
    if !failing.is_empty() {
        let _ = writeln!(out, "\nlast error per cell:");
        for c in failing {
            let _ = writeln!(
                out,
                "  {:<14} {:<20} {:<14} {}",
                c.region,
                c.provider,
                c.scenario,
                c.last_error.as_deref().unwrap_or_default()
            );
        }
    }
    let mismatched: Vec<&MatrixCell> = summary
        .cells
        .iter()
        .filter(|c| c.region == ALL_REGIONS && c.usage_chunk_mismatches > 0)
        .collect();
    if !mismatched.is_empty() {
        let _ = writeln!(
            out,
            "\nusage vs chunk count (ok streamed attempts, all regions; usage − token payloads, mean: \
             + when chunks carry several tokens, − when usage leaves tokens out):"
        );
        for c in mismatched {
            let over = if c.tokens_over_usage > 0 {
                format!(
                    "; {} counted from payloads (usage counted fewer tokens than streamed)",
                    c.tokens_over_usage
                )
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                "  {:<20} {:<14} mean {:+.1} tokens, {} of {} attempts differ{over}",
                c.provider,
                c.scenario,
                c.usage_chunk_delta_mean.unwrap_or_default(),
                c.usage_chunk_mismatches,
                c.samples
            );
        }
    }
    let retried: Vec<&MatrixCell> = summary
        .cells
        .iter()
        .filter(|c| c.region == ALL_REGIONS && c.conn_retried > 0)
        .collect();
    if !retried.is_empty() {
        let _ = writeln!(
            out,
            "\nconnections retried (the provider closed a pooled connection before any response \
             byte; sent again on a new one, not an error; TTFT/E2E include the new connect):"
        );
        for c in retried {
            let _ = writeln!(
                out,
                "  {:<20} {:<14} {} of {} attempts",
                c.provider, c.scenario, c.conn_retried, c.attempts
            );
        }
    }
    out.push_str(&models::render(&summary.models));
    out.push_str(&budget::render(&summary.guard)); // budget guard: spent, STOPPED BY BUDGET
    if summary.cancelled && !summary.guard.stopped() {
        let _ = writeln!(
            out,
            "\nCANCELLED: latmesh campaign cancel stopped this campaign; the tables hold what was measured before"
        );
    }
    if !summary.complete {
        let short: Vec<String> = summary
            .agents
            .iter()
            .filter(|a| !a.complete)
            .map(|a| {
                let d = &a.delivery;
                let mut quarantine = String::new();
                if d.batches_rejected > 0 {
                    let seqs: Vec<String> = d.rejected.iter().map(|r| r.seq.to_string()).collect();
                    quarantine = format!(
                        ", {} batch(es) refused and quarantined (seq {})",
                        d.batches_rejected,
                        seqs.join(", ")
                    );
                }
                if d.records_quarantined > 0 || d.histograms_quarantined > 0 {
                    quarantine.push_str(&format!(
                        ", {} record(s) and {} histogram(s) too large to send, quarantined",
                        d.records_quarantined, d.histograms_quarantined
                    ));
                }
                format!(
                    "{} ({}, {} records, {} skipped{quarantine})",
                    a.agent_id, a.region, a.records, a.skipped
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "\nINCOMPLETE: these agents did not deliver every probe of the plan: {}",
            short.join(", ")
        );
    }
    if let Some(line) = summary.start.line() {
        let _ = writeln!(out, "\n{line}");
    }
    if !summary.agents.is_empty() {
        let _ = writeln!(out, "\nagents:");
        for a in &summary.agents {
            let _ = writeln!(
                out,
                "  {:<16} {:<14} records {:>5}  batches {:>4}  clock offset {:+} µs ± {} µs",
                a.agent_id,
                a.region,
                a.records,
                a.batches,
                a.clock_offset_us,
                a.clock_uncertainty_us
            );
        }
    }
    out
}

/// The goodput table of `scenario` (every cell has an SLO): rows regions (and `ALL`), columns
/// providers; each cell goodput % with its 95 % interval and whether the SLO is met
/// ([`slo::goodput_text`]), then the met requests per second per agent and the percentile
/// bounds a cell exceeded.
fn goodput_table(summary: &Summary, scenario: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n{scenario}: goodput % [95 % CI] of judged requests (warm-up left out), vs the SLO"
    );
    let mut t = Table::new();
    t.load_preset(presets::ASCII_MARKDOWN);
    let mut header = vec![TCell::new("region")];
    header.extend(summary.providers.iter().map(TCell::new));
    t.set_header(header);
    let mut notes = Vec::new();
    for region in summary
        .regions
        .iter()
        .map(String::as_str)
        .chain([ALL_REGIONS])
    {
        let mut row = vec![TCell::new(region)];
        for provider in &summary.providers {
            let g = summary
                .cell(region, provider, scenario)
                .and_then(|c| c.goodput.as_ref());
            row.push(
                TCell::new(g.map_or("-".into(), slo::goodput_text))
                    .set_alignment(CellAlignment::Right),
            );
            if let Some(g) = g.filter(|g| !g.exceeded.is_empty()) {
                notes.push(format!("  {region} {provider}: {}", g.exceeded.join("; ")));
            }
        }
        t.add_row(row);
    }
    let _ = writeln!(out, "{t}");
    let rates: Vec<String> = summary
        .providers
        .iter()
        .filter_map(|p| {
            let g = summary.cell(ALL_REGIONS, p, scenario)?.goodput.as_ref()?;
            Some(format!(
                "{p} {} of {} ({})",
                g.met,
                g.requests,
                g.rps.map_or("-".into(), |r| format!("{r:.2}/s per agent"))
            ))
        })
        .collect();
    if !rates.is_empty() {
        let _ = writeln!(out, "met requests, all regions: {}", rates.join(", "));
    }
    for n in notes {
        let _ = writeln!(out, "{n}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use latmesh_results::aggregate::Aggregate;
    use latmesh_results::fixtures::{
        agent, demo_sized, demo_sized_with, plan, sweep_rate_summary, usage_summary,
    };
    use latmesh_results::summary::build;
    /// What the coordinator's state and budget tests leave to the renderer: an incomplete,
    /// a cancelled and a budget-stopped campaign say so.
    #[test]
    fn incomplete_cancelled_and_budget_stopped_campaigns_say_so() {
        let mut s = demo_sized();
        assert!(!render(&s).contains("INCOMPLETE") && !render(&s).contains("CANCELLED"));
        s.complete = false;
        assert!(render(&s).contains("INCOMPLETE"));
        s.cancelled = true;
        assert!(render(&s).contains("CANCELLED"));
        s.guard.stopped_by = Some("budget".into());
        s.guard.stop_reason = Some("budget: measured tokens 1500 passed --max-tokens 1000".into());
        let text = render(&s);
        assert!(
            text.contains("STOPPED BY BUDGET (budget: measured tokens 1500"),
            "{text}"
        );
        assert!(
            !text.contains("CANCELLED: latmesh campaign cancel"),
            "{text}"
        );
    }

    #[test]
    fn the_tables_show_the_campaigns_percentiles() {
        let s = demo_sized_with(&[50.0, 99.9]);
        let text = render(&s);
        assert!(text.contains("open: E2E ms P50/P99.9"), "{text}");
        assert!(text.contains("| 1200/~1401 |"), "{text}");
        // The legend names the campaign's percentiles.
        assert!(
            text.contains("~ marks a percentile with fewer samples than a 95% interval needs (P50 6, P99.9 3688)"),
            "{text}"
        );
    }

    #[test]
    fn percentiles_the_samples_do_not_support_are_marked_with_a_legend() {
        let s = demo_sized();
        let text = render(&s);
        println!("{text}");
        for want in [
            "open: E2E ms P50/P90/P95/P99",
            "| us-east      | 600/~1101/~1200/~1200 | 1200/1361/1380/1397 |",
            "| ALL          |  600/1101/~1200/~1200 | 1200/1361/1380/1397 |",
            &latmesh_results::percentiles::legend(),
        ] {
            assert!(text.contains(want), "{want:?} not in\n{text}");
        }
        // The legend only under tables with a marked value.
        let samples_table = text.find("open: samples").unwrap();
        let ttft_table = text.find("open: TTFT").unwrap();
        assert!(!text[samples_table..ttft_table].contains("~"));
    }

    #[test]
    fn the_text_shows_sweeps_rates_dropped_and_start_skew() {
        let (s, _, _) = sweep_rate_summary();
        let text = render(&s);
        println!("{text}");
        for want in [
            "sweep sw: E2E P50 ms by concurrency, all regions (10 s steps); knee: elasticity ≥ 0.5 or errors ≥ 5%",
            "  each significant (95 % intervals), with ≥ 10 requests in every step up to it",
            "c = workers per agent and provider; total = the provider's concurrency, c × 2 agents (all regions)",
            "| p        | eu-west |     9.00/10.00 |      10 |  0.20/~0.20 |   0.0 | YES        | - (too few)   |",
            "rate open: latency ms P50/P95/P99 from the actual send and from the intended send",
            "| p        | us-east | 0.50/0.50/~0.50 | 0.70/0.70/~0.70 | 1.00/1.00/~1.00 | 1.20/1.20/~1.20 |",
            // eu-west's 1 failure in 10 requests at c = 4 is not a significant rise.
            "  p                us-east c=8 (latency), eu-west none",
            "rate open: target 10 rps per provider and agent for 10 s; rps sent per agent vs scheduled",
            "  agent saturated: p eu-west: 10 arrivals dropped; achieved 9.00 rps < 95% of scheduled 10.00",
            "start skew 0.42 ms over 3 agents (± 0.08 ms of clock uncertainty)",
            "dropped (not sent in time: open-loop arrivals, or rounds probes held by their caps; not in error rates):",
        ] {
            assert!(text.contains(want), "{want:?} not in\n{text}");
        }
        let from = text.find("\nsweep ").unwrap();
        let to = text.find("\ndropped ").unwrap();
        for line in text[from..to].lines() {
            assert!(
                line.chars().count() <= 100,
                "{} chars: {line}",
                line.chars().count()
            );
        }
    }

    #[test]
    fn the_summary_shows_goodput_tiers_rate_steps_searches_and_warm_up() {
        let s = latmesh_results::fixtures::workloads::summary();
        let text = render(&s);
        println!("{text}");
        for want in [
            "ctx.1k: goodput % [95 % CI] of judged requests (warm-up left out), vs the SLO",
            "| us-east |   93.3 [78.7, 98.2] undecided | 100.0 [88.6, 100.0] undecided |",
            "met requests, all regions: p 58 of 60 (0.97/s per agent), q 60 of 60 (1.00/s per agent)",
            // The ramp's bound is judged per step (a cell pooling its steps has no goodput).
            "  p ALL step 1: P90 TTFT 900 > 400 ms",
            "context tiers ctx: TTFT ms P50/P95 (samples) by input tokens",
            "rate steps ramp:",
            "SLO search find (TTFT ≤ 500 ms; goodput ≥ 90 %)",
            "warm-up requests (sent and stored, left out of every figure above):",
            // One warm-up per region × provider of each tier: one line each.
            "  ctx.1k: 1 per region × provider (4 in all)",
            "  us-east        p                    ramp           1",
        ] {
            assert!(text.contains(want), "{want:?} not in\n{text}");
        }
        // Multi-step rate scenarios have no one-rate table.
        assert!(!text.contains("\nrate ramp:"), "{text}");
    }

    /// A reasoning stream whose usage counts only the answer, a non-streaming scenario, and a
    /// provider that answers with its own model name: the usage notice names the streamed
    /// scenario only, with the attempts that took the payload count, and the model flag names
    /// the provider.
    #[test]
    fn the_usage_notice_names_streams_only_and_another_model_is_flagged() {
        let s = usage_summary();
        let text = render(&s);
        assert!(
            text.contains("reasoner             stream         mean -23.0 tokens, 1 of 1 attempts differ; 1 counted from payloads"),
            "{text}"
        );
        assert!(!text.contains("whole          mean"), "{text}");
        assert!(
            text.contains("\nconnections retried (the provider closed a pooled connection")
                && text.contains("  llama                stream         1 of 1 attempts\n")
                && !text.contains("  reasoner             stream         0 of"),
            "{text}"
        );
        assert!(
            text.contains(
                "llama                answered with another model than \"gpt-4o\": smollm2"
            ),
            "{text}"
        );
    }

    /// A summary persisted before the coordinator bounded done notices may hold any count:
    /// rendering it never overflows.
    #[test]
    fn quarantine_counts_at_their_maximum_render_without_overflow() {
        let mut a = agent("a1", "us-east");
        a.complete = false;
        a.delivery.records_quarantined = u64::MAX;
        a.delivery.histograms_quarantined = u64::MAX;
        let mut r = latmesh_coordinator::delivery::Rejections::default();
        r.reject(1, "x");
        a.delivery.batches_rejected = r.batches();
        let s = build("c1", &plan(), 0, &Aggregate::default(), vec![a]);
        assert!(
            render(&s)
                .contains("18446744073709551615 record(s) and 18446744073709551615 histogram(s)"),
            "{}",
            render(&s)
        );
    }
}
