//! The budget lines of the campaign summary: what the records used, the caps, and whether
//! the guard stopped the campaign.

use std::fmt::Write as _;

use latmesh_core::budget::usd;

use latmesh_coordinator::budget::BudgetSummary;

/// The summary's budget lines: what was spent (and the caps), and a `STOPPED BY BUDGET`
/// line when the guard cancelled the campaign. Empty when nothing is known.
pub fn render(b: &BudgetSummary) -> String {
    let mut out = String::new();
    if let Some(s) = &b.spent {
        let mut line = format!(
            "\nspent: {} prompt + {} completion tokens",
            latmesh_core::budget::thousands(s.prompt_tokens),
            latmesh_core::budget::thousands(s.completion_tokens)
        );
        if s.cost_usd > 0.0 || s.unpriced.is_empty() {
            let _ = write!(line, ", {}", usd(s.cost_usd));
        }
        if !s.unpriced.is_empty() {
            let _ = write!(line, " (no price: {})", s.unpriced.join(", "));
        }
        if s.estimated_attempts > 0 {
            let _ = write!(
                line,
                "; {} attempt{} without usage estimated",
                s.estimated_attempts,
                if s.estimated_attempts == 1 { "" } else { "s" }
            );
        }
        if let Some(c) = &b.caps {
            let caps: Vec<String> = c
                .max_cost_usd
                .map(|v| format!("--max-cost {}", usd(v)))
                .into_iter()
                .chain(c.max_tokens.map(|v| format!("--max-tokens {v}")))
                .collect();
            let _ = write!(line, " [caps: {}]", caps.join(", "));
        }
        let _ = writeln!(out, "{line}");
    }
    if let Some(reason) = &b.stop_reason {
        let _ = writeln!(
            out,
            "\nSTOPPED BY BUDGET ({reason}): the campaign was cancelled; the tables hold what was measured before"
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use latmesh_coordinator::budget::Spent;

    /// What the coordinator's budget tests leave to the renderer.
    #[test]
    fn spent_unpriced_estimated_and_stopped_lines() {
        let mut b = BudgetSummary {
            spent: Some(Spent {
                prompt_tokens: 100_010,
                completion_tokens: 200_027,
                cost_usd: 0.7,
                estimated_attempts: 1,
                unpriced: vec!["free".into()],
            }),
            ..Default::default()
        };
        let text = render(&b);
        assert!(text.contains("(no price: free)"), "{text}");
        assert!(
            text.contains("; 1 attempt without usage estimated"),
            "{text}"
        );
        assert!(!text.contains("STOPPED"), "{text}");
        b.stopped_by = Some("budget".into());
        b.stop_reason = Some("budget: measured tokens 300101 passed --max-tokens 300100".into());
        assert!(render(&b).contains("STOPPED BY BUDGET (budget: measured tokens"));
    }
}
