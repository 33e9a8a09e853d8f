//! Budget guard during a campaign: what its arriving records used, and the caps that stop it.
//!
//! `latmesh campaign launch --max-cost USD --max-tokens N` sends caps with the launch
//! (`LaunchRequest.max_cost_usd`, `max_tokens`). The coordinator adds up every record of every
//! agent as its batch is merged ([`Guard::add`]) and, once a cap is passed, cancels the
//! campaign through the ordinary cancel path (agents stop scheduling, in-flight attempts get
//! their grace, everything measured is kept) with the reason `budget: measured cost $X passed
//! --max-cost $Y`; the summary then says `stopped_by: "budget"`. Caps apply to one campaign
//! (each run of a series has its own).
//!
//! What counts, per attempt (record):
//!
//! * the provider's `usage.prompt_tokens` and `usage.completion_tokens` when it reported
//!   them;
//! * else, when the attempt got a response that may be billed (outcome `ok`, an HTTP 2xx, or
//!   any generated token): the prompt estimated like the pre-launch estimate
//!   ([`latmesh_core::budget::prompt_tokens`]: ~4 bytes per token, earlier turns' answers at
//!   `max_tokens`) and the `output_tokens` counted from the stream; such attempts are counted
//!   in [`Spent::estimated_attempts`];
//! * nothing for attempts refused before any generation (HTTP 4xx/429/5xx without usage,
//!   connection errors, dropped arrivals).
//!
//! Cost is prompt tokens at the provider's input price plus completion tokens at its output
//! price (cached prompt tokens at the full price: an upper bound); tokens of providers
//! without a price are counted in tokens but not in dollars ([`Spent::unpriced`]), which is
//! why `--max-cost` needs a price for every provider.
//!
//! The guard acts on results as they arrive: agents send a batch about every second, so a
//! campaign stops within a second or two of passing a cap, plus whatever was in flight (an
//! overshoot of up to agents × in-flight requests, each at most `max_tokens`).

use latmesh_core::budget::usd;
use latmesh_core::plan::Plan;
use latmesh_core::record::{Outcome, ProbeRecord};
use serde::{Deserialize, Serialize};

pub use latmesh_results::budget::{BudgetSummary, Caps, Spent};

/// The `stopped_by` value of a campaign the budget guard cancelled.
pub const STOPPED_BY_BUDGET: &str = "budget";

/// One campaign's budget guard: its caps, what it spent, and why it stopped (if it did).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Guard {
    /// The caps.
    #[serde(default)]
    pub caps: Caps,
    /// Spent so far (rebuilt from the batch log when a coordinator restarts).
    #[serde(default)]
    pub spent: Spent,
    /// Why the guard stopped the campaign (`budget: measured … passed …`), once it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
}

/// The tokens one attempt used: (prompt, completion, estimated), see the module docs.
pub fn tokens_of(plan: &Plan, rec: &ProbeRecord) -> (u64, u64, bool) {
    let u = &rec.usage;
    if let (Some(p), Some(c)) = (u.prompt_tokens, u.completion_tokens) {
        return (u64::from(p), u64::from(c), false);
    }
    let outcome = rec.outcome();
    let answered = outcome == Outcome::Ok
        || rec.output_tokens > 0
        || rec.http_status.is_some_and(|s| (200..300).contains(&s))
        || u.completion_tokens.is_some();
    if !answered {
        return (0, 0, false);
    }
    let prompt = u.prompt_tokens.map(u64::from).unwrap_or_else(|| {
        plan.scenarios
            .iter()
            .find(|s| s.name == rec.scenario)
            .and_then(|s| {
                let p = s.prompts.iter().find(|p| p.id == rec.prompt_id)?;
                Some(latmesh_core::budget::prompt_tokens(s, p, rec.turn.max(1)))
            })
            .unwrap_or(0)
    });
    let completion = u
        .completion_tokens
        .map_or(u64::from(rec.output_tokens), u64::from);
    (prompt, completion, true)
}

impl Guard {
    /// A guard with `caps` and nothing spent.
    pub fn new(caps: Caps) -> Guard {
        Guard {
            caps,
            ..Guard::default()
        }
    }

    /// Whether it holds nothing worth persisting (no caps, nothing spent, not stopped).
    pub fn is_default(&self) -> bool {
        *self == Guard::default()
    }

    /// Adds the records of one merged batch of `plan`'s campaign.
    pub fn add(&mut self, plan: &Plan, records: &[ProbeRecord]) {
        for rec in records {
            let (prompt, completion, estimated) = tokens_of(plan, rec);
            if prompt == 0 && completion == 0 {
                continue;
            }
            let s = &mut self.spent;
            // Saturating: token counts come from providers (and agents).
            s.prompt_tokens = s.prompt_tokens.saturating_add(prompt);
            s.completion_tokens = s.completion_tokens.saturating_add(completion);
            s.estimated_attempts += u64::from(estimated);
            match plan
                .providers
                .iter()
                .find(|p| p.name == rec.provider)
                .and_then(|p| p.price.as_ref())
            {
                Some(price) => s.cost_usd += price.cost_usd(prompt, completion),
                None if !s.unpriced.contains(&rec.provider) => {
                    s.unpriced.push(rec.provider.clone())
                }
                None => {}
            }
        }
    }

    /// The reason to stop when a cap is passed (`budget: measured cost $0.0123 passed
    /// --max-cost $0.01`); `None` while within the caps.
    pub fn passed(&self) -> Option<String> {
        let s = &self.spent;
        if let Some(max) = self.caps.max_cost_usd
            && s.cost_usd > max
        {
            return Some(format!(
                "budget: measured cost {} passed --max-cost {}",
                usd(s.cost_usd),
                usd(max)
            ));
        }
        if let Some(max) = self.caps.max_tokens
            && s.tokens() > max
        {
            return Some(format!(
                "budget: measured tokens {} passed --max-tokens {max}",
                s.tokens()
            ));
        }
        None
    }

    /// Its part of the campaign summary.
    pub fn summary(&self) -> BudgetSummary {
        BudgetSummary {
            stopped_by: self.stopped.as_ref().map(|_| STOPPED_BY_BUDGET.to_string()),
            stop_reason: self.stopped.clone(),
            caps: (!self.caps.is_empty()).then(|| self.caps.clone()),
            spent: Some(self.spent.clone()),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use latmesh_core::load::Price;
    use latmesh_core::record::Usage;

    #[test]
    fn token_sums_saturate_instead_of_wrapping() {
        let spent = Spent {
            prompt_tokens: u64::MAX - 1,
            completion_tokens: 7,
            ..Spent::default()
        };
        assert_eq!(spent.tokens(), u64::MAX);
        let mut guard = Guard {
            spent,
            ..Guard::default()
        };
        let rec = ProbeRecord {
            outcome: Some(Outcome::Ok),
            usage: Usage {
                prompt_tokens: Some(u32::MAX),
                completion_tokens: Some(u32::MAX),
                ..Usage::default()
            },
            ..ProbeRecord::default()
        };
        guard.add(&plan(), &[rec]);
        assert_eq!(guard.spent.prompt_tokens, u64::MAX);
        assert_eq!(guard.spent.completion_tokens, 7 + u64::from(u32::MAX));
    }

    /// A plan with a priced provider and a free one.
    pub(crate) fn plan() -> Plan {
        let text = r#"
[campaign]
name = "b"
regions = ["us-east"]
[rounds]
count = 2
interval_s = 1.0
gap_ms = 10
[[scenarios]]
name = "chat"
prompt_ids = ["short-qa-en-001"]
max_tokens = 16
[[providers]]
name = "priced"
base_url = "http://127.0.0.1:9/v1"
model_id = "m"
price_input_usd_per_mtok = 1.0
price_output_usd_per_mtok = 3.0
[[providers]]
name = "free"
base_url = "http://127.0.0.1:9/v1"
model_id = "m"
"#;
        latmesh_core::campaign::load_toml_str(text, std::path::Path::new(".")).unwrap()
    }

    /// A final first-turn record of `provider` with its usage (prompt, completion tokens).
    pub(crate) fn rec(
        provider: &str,
        outcome: Outcome,
        usage: Option<(u32, u32)>,
        output: u32,
    ) -> ProbeRecord {
        ProbeRecord {
            provider: provider.into(),
            scenario: "chat".into(),
            prompt_id: "short-qa-en-001".into(),
            outcome: Some(outcome),
            turn: 1,
            attempt: 1,
            final_attempt: true,
            output_tokens: output,
            usage: Usage {
                prompt_tokens: usage.map(|u| u.0),
                completion_tokens: usage.map(|u| u.1),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn usage_counts_and_missing_usage_is_estimated() {
        let p = plan();
        let mut g = Guard::new(Caps::from_request(0.0, 0));
        assert!(g.caps.is_empty());
        g.add(
            &p,
            &[
                rec("priced", Outcome::Ok, Some((100_000, 200_000)), 5),
                // No usage: prompt estimated from the prompt's bytes, completion = output_tokens.
                rec("priced", Outcome::Ok, None, 7),
                // Refused before generating anything: free.
                rec("priced", Outcome::Throttled, None, 0),
                rec("free", Outcome::Ok, Some((10, 20)), 20),
            ],
        );
        let est = latmesh_core::budget::message_tokens(&p.scenarios[0].prompts[0].messages);
        assert!(est > 0);
        let s = &g.spent;
        assert_eq!(s.prompt_tokens, 100_000 + est + 10);
        assert_eq!(s.completion_tokens, 200_000 + 7 + 20);
        assert_eq!(s.estimated_attempts, 1);
        assert_eq!(s.unpriced, ["free"]);
        let want = 0.1 + 0.6 + (est as f64 * 1.0 + 7.0 * 3.0) / 1e6;
        assert!((s.cost_usd - want).abs() < 1e-9, "{}", s.cost_usd);
        assert_eq!(g.passed(), None);
        // The summary's lines (no price: free; 1 attempt without usage estimated; not
        // stopped): the CLI's `ui::budget` tests.
        let sum = g.summary();
        assert_eq!(sum.spent.as_ref(), Some(s));
        assert!(!sum.stopped() && sum.stop_reason.is_none());
    }

    #[test]
    fn caps_are_passed_strictly_and_say_why() {
        let p = plan();
        let mut g = Guard::new(Caps::from_request(0.8, 300_100));
        assert_eq!(g.caps.max_tokens, Some(300_100));
        g.add(
            &p,
            &[rec("priced", Outcome::Ok, Some((100_000, 200_000)), 5)],
        );
        assert_eq!(g.passed(), None, "$0.70 and 300 000 tokens: within both");
        g.caps.max_cost_usd = Some(0.69);
        assert_eq!(
            g.passed().as_deref(),
            Some("budget: measured cost $0.7000 passed --max-cost $0.6900")
        );
        g.caps.max_cost_usd = None;
        g.add(&p, &[rec("free", Outcome::Ok, Some((50, 51)), 51)]);
        assert_eq!(
            g.passed().as_deref(),
            Some("budget: measured tokens 300101 passed --max-tokens 300100")
        );
        g.stopped = g.passed();
        let sum = g.summary();
        assert!(sum.stopped());
        let json = serde_json::to_value(&sum).unwrap();
        assert_eq!(json["stopped_by"], "budget");
        assert_eq!(json["spent"]["prompt_tokens"], 100_050);
        assert_eq!(json["caps"]["max_tokens"], 300_100);
        // Its line `STOPPED BY BUDGET (budget: measured tokens …`: the CLI's `ui::budget` tests.
        assert!(
            sum.stop_reason
                .as_deref()
                .is_some_and(|r| r.starts_with("budget: measured tokens"))
        );
        // Persisted and read back.
        let back: Guard = serde_json::from_str(&serde_json::to_string(&g).unwrap()).unwrap();
        assert_eq!(back, g);
        assert!(Guard::default().is_default() && !g.is_default());
    }

    #[test]
    fn max_cost_needs_every_price() {
        let mut p = plan();
        let e = Caps::from_request(1.0, 0).check(&p).unwrap_err();
        assert!(e.contains("free has none"), "{e}");
        assert!(Caps::from_request(0.0, 10).check(&p).is_ok());
        p.providers[1].price = Some(Price::default());
        assert!(Caps::from_request(1.0, 0).check(&p).is_ok());
    }
}
