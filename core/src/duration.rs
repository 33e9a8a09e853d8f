//! How long a campaign runs, from its plan alone, and the bound past which starting it needs
//! an explicit `--allow-long`.
//!
//! The planned duration is the plan's time layout ([`Plan::phases`]): the rounds phase
//! (`rounds.count × rounds.interval_s`), then each sweep (`steps × step_s`) and open-loop
//! scenario (`duration_s`) in declaration order, with the pause after each
//! ([`crate::plan::pause_after_us`]) between phases. Requests still in flight at the end may add up to their timeouts (not
//! counted). A plan with a `[schedule]` runs this long per run. `campaign validate` and
//! `campaign launch` print it and refuse a plan longer than [`MAX_PLANNED_DURATION_S`]
//! (24 h) unless `--allow-long` is given, naming the setting of the longest phase: a
//! `rounds.count` of 1,000,000 at 3 s is 35 days, almost certainly a typo.

use crate::load::{LoadModel, PhaseKind};
use crate::plan::Plan;

/// Longest planned duration accepted without `--allow-long`, seconds (24 h).
pub const MAX_PLANNED_DURATION_S: u64 = 86_400;

/// One phase of the planned duration and the settings that make it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PhaseLength {
    /// The settings, with their values: `rounds.count = 1000000 × rounds.interval_s = 3 s`.
    pub settings: String,
    /// Its length, µs.
    pub span_us: u64,
}

/// A plan's planned duration (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedDuration {
    /// From the start of the first phase to the end of the last, µs ([`Plan::span_us`]).
    pub total_us: u64,
    /// Each phase, in time order.
    pub phases: Vec<PhaseLength>,
}

impl PlannedDuration {
    /// The plan's phases and their total.
    pub fn of(plan: &Plan) -> PlannedDuration {
        let phases = plan
            .phases()
            .iter()
            .map(|p| PhaseLength {
                settings: settings_of(plan, p.kind),
                span_us: p.span_us,
            })
            .collect();
        PlannedDuration {
            total_us: plan.span_us(),
            phases,
        }
    }

    /// `planned duration: 35 d (rounds.count = 1000000 × rounds.interval_s = 3 s), plus the
    /// last requests' time` in one line, with every phase when there are several.
    pub fn describe(&self) -> String {
        let parts: Vec<String> = self
            .phases
            .iter()
            .map(|p| format!("{} for {}", human(p.span_us), p.settings))
            .collect();
        format!(
            "planned duration: {} ({}), plus the last requests' time",
            human(self.total_us),
            parts.join("; ")
        )
    }

    /// Refuses a planned duration over [`MAX_PLANNED_DURATION_S`] unless `allow_long`.
    ///
    /// # Errors
    /// The duration, the limit and the settings of the longest phase, and how to go on.
    pub fn check(&self, allow_long: bool) -> Result<(), String> {
        if allow_long || self.total_us <= MAX_PLANNED_DURATION_S * 1_000_000 {
            return Ok(());
        }
        let longest = self
            .phases
            .iter()
            .max_by_key(|p| p.span_us)
            .map_or_else(String::new, |p| p.settings.clone());
        Err(format!(
            "the campaign would run for {}, more than {} h: {longest} makes it long. Lower it, or pass --allow-long if this is meant",
            human(self.total_us),
            MAX_PLANNED_DURATION_S / 3600
        ))
    }
}

/// The settings that make phase `kind` as long as it is.
fn settings_of(plan: &Plan, kind: PhaseKind) -> String {
    match kind {
        PhaseKind::Rounds => format!(
            "rounds.count = {} × rounds.interval_s = {} s",
            plan.rounds.count,
            plan.rounds.interval_ms as f64 / 1000.0
        ),
        PhaseKind::Scenario(p) => {
            let s = &plan.scenarios[p];
            // The file's index (each tier of a scenario is a plan scenario of its own).
            let i = plan.scenarios[..=p]
                .iter()
                .enumerate()
                .filter(|(k, x)| *k == 0 || plan.scenarios[k - 1].group() != x.group())
                .count()
                - 1;
            match &s.load {
                LoadModel::Sweep(w) => format!(
                    "scenarios[{i}] ({}): {} sweep steps × sweep.step_s = {} s",
                    s.name,
                    w.concurrency.len(),
                    w.step_ms as f64 / 1000.0
                ),
                LoadModel::Rate(r) if r.search.is_some() => format!(
                    "scenarios[{i}] ({}): {} search steps × 2 × rate.duration_s = {} s (each step, then a quiet gap as long)",
                    s.name,
                    r.step_count(),
                    r.duration_ms as f64 / 1000.0
                ),
                LoadModel::Rate(r) if r.step_count() > 1 => format!(
                    "scenarios[{i}] ({}): {} rate steps × rate.duration_s = {} s",
                    s.name,
                    r.step_count(),
                    r.duration_ms as f64 / 1000.0
                ),
                LoadModel::Rate(r) => format!(
                    "scenarios[{i}] ({}): rate.duration_s = {} s",
                    s.name,
                    r.duration_ms as f64 / 1000.0
                ),
                LoadModel::Rounds => format!("scenarios[{i}] ({})", s.name),
            }
        }
    }
}

/// A duration for people: `45 s`, `12 min 30 s`, `5 h 20 min` (`24 h 0 min 3 s`), `34.7 days`.
pub fn human(us: u64) -> String {
    let s = us / 1_000_000;
    if s < 60 {
        format!("{:.0} s", us as f64 / 1e6)
    } else if s < 3600 {
        format!("{} min {} s", s / 60, s % 60)
    } else if s < 2 * 86_400 {
        // Seconds too when there are any: "24 h 0 min" must not hide that it is over 24 h.
        let secs = if s.is_multiple_of(60) {
            String::new()
        } else {
            format!(" {} s", s % 60)
        };
        format!("{} h {} min{secs}", s / 3600, (s % 3600) / 60)
    } else {
        format!("{:.1} days", s as f64 / 86_400.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"
[campaign]
name = "t"
regions = ["us-east"]

[rounds]
count = 10
interval_s = 3.0
gap_ms = 10

[[scenarios]]
name = "chat"
prompt_ids = ["short-qa-en-*"]
max_tokens = 8

[[scenarios]]
name = "knee"
prompt_ids = ["short-qa-en-*"]
max_tokens = 8
[scenarios.sweep]
concurrency = [1, 2]
step_s = 5

[[providers]]
name = "a"
base_url = "http://127.0.0.1:9/v1"
model_id = "m"
"#;

    fn plan(text: &str) -> Plan {
        crate::campaign::load_toml_str(text, std::path::Path::new(".")).unwrap()
    }

    #[test]
    fn the_duration_is_the_phases_and_their_settle_time() {
        let d = PlannedDuration::of(&plan(TEXT));
        // 10 × 3 s, 2 s settle, 2 × 5 s.
        assert_eq!(d.total_us, 42_000_000);
        assert_eq!(
            d.describe(),
            "planned duration: 42 s (30 s for rounds.count = 10 × rounds.interval_s = 3 s; 10 s for scenarios[1] (knee): 2 sweep steps × sweep.step_s = 5 s), plus the last requests' time"
        );
        assert_eq!(d.check(false), Ok(()));
    }

    #[test]
    fn an_absurd_duration_is_refused_naming_the_setting_unless_allowed() {
        let d = PlannedDuration::of(&plan(&TEXT.replace("count = 10", "count = 1000000")));
        let e = d.check(false).unwrap_err();
        assert!(e.starts_with("the campaign would run for 34.7 days, more than 24 h: rounds.count = 1000000 × rounds.interval_s = 3 s makes it long"), "{e}");
        assert!(e.contains("--allow-long"), "{e}");
        assert_eq!(d.check(true), Ok(()));
        // A long sweep is named as such.
        let d = PlannedDuration::of(&plan(&TEXT.replace("step_s = 5", "step_s = 50000")));
        let e = d.check(false).unwrap_err();
        assert!(
            e.contains("scenarios[1] (knee): 2 sweep steps × sweep.step_s = 50000 s makes it long"),
            "{e}"
        );
        // Exactly 24 h is accepted.
        let d = PlannedDuration::of(&plan(&TEXT.replace("count = 10", "count = 28799").replace(
            "[scenarios.sweep]\nconcurrency = [1, 2]\nstep_s = 5",
            "[scenarios.sweep]\nconcurrency = [1]\nstep_s = 1",
        )));
        assert_eq!(d.total_us, 86_400_000_000);
        assert_eq!(d.check(false), Ok(()));
    }

    #[test]
    fn rate_steps_and_tiers_are_named_by_the_file() {
        // `chat` becomes chat.1k and chat.2k; the rate scenario is still scenarios[1].
        let text = TEXT
            .replacen(
                "prompt_ids = [\"short-qa-en-*\"]",
                "input_tokens = [1000, 2000]",
                1,
            )
            .replace(
                "[scenarios.sweep]\nconcurrency = [1, 2]\nstep_s = 5",
                "[scenarios.rate]\nrps = [1, 2, 4]\nduration_s = 5",
            );
        let d = PlannedDuration::of(&plan(&text));
        assert_eq!(d.total_us, 47_000_000);
        assert!(
            d.describe()
                .contains("15 s for scenarios[1] (knee): 3 rate steps × rate.duration_s = 5 s"),
            "{}",
            d.describe()
        );
    }

    #[test]
    fn human_durations() {
        assert_eq!(human(45_000_000), "45 s");
        assert_eq!(human(750_000_000), "12 min 30 s");
        assert_eq!(human(19_200_000_000), "5 h 20 min");
        assert_eq!(human(86_403_000_000), "24 h 0 min 3 s");
        assert_eq!(human(3_000_000_000_000), "34.7 days");
    }
}
