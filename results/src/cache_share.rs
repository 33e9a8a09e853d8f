//! The cached share of a cell: how much of its prompts the provider served from its prompt
//! cache, and whether that was asked for (docs/metrics.md "Generated prompts", "Cached
//! share").
//!
//! Over the `ok` attempts of a cell (warm-up left out) whose `usage` reported both the prompt
//! tokens (more than 0) and a cached count (`usage.cached_tokens`, 0 included):
//! * **share** = Σ cached tokens ÷ Σ prompt tokens, % ([`CachedShare::share_pct`]);
//! * a request is **cache-hot** when at least [`HOT_SHARE`] of its own prompt tokens were
//!   cached.
//!
//! A cell without such an attempt (the provider reports no cached count) has no share (`–`
//! in tables): unknown, not 0.
//!
//! The cell is **flagged** ([`CachedShare::flagged`]) when the file did not ask for caching
//! ([`caching_asked`]: no `shared_prefix_tokens`, no `reuse_text`, one turn) and its
//! cache-hot requests are significantly at least half of those that reported: the Wilson
//! 95 % interval's lower bound of hot ÷ reported is at least [`HOT_SHARE`]
//! ([`latmesh_core::proportion::wilson`]). Then its TTFT measures cache hits, not prefill. A
//! cell with fewer samples than that needs is never flagged (3 hot requests of 3 are not
//! enough; 4 of 4 are).

use std::collections::BTreeMap;

use latmesh_core::plan::{Plan, ScenarioSpec};
use latmesh_core::proportion::wilson;
use latmesh_core::record::{Outcome, ProbeRecord};
use latmesh_core::synth::TextMode;
use serde::{Deserialize, Serialize};

/// A request is cache-hot at this fraction of its prompt tokens cached, and a cell is flagged
/// when its hot requests are significantly at least this fraction: 0.5.
pub const HOT_SHARE: f64 = 0.5;

/// The counters a cell's cached share is made of (summed over regions by [`CacheCounts::merge`];
/// the ClickHouse path sums the same columns).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheCounts {
    /// `ok` attempts that reported prompt tokens (> 0) and a cached count.
    pub reports: u64,
    /// Σ `usage.cached_tokens` over them (each capped at its prompt tokens).
    pub cached_tokens: u64,
    /// Σ `usage.prompt_tokens` over them.
    pub prompt_tokens: u64,
    /// Those whose cached tokens are at least [`HOT_SHARE`] of their prompt tokens.
    pub hot: u64,
}

impl CacheCounts {
    /// Counts one request that reported `prompt` tokens and `cached` of them cached.
    pub fn add(&mut self, prompt: u32, cached: u32) {
        if prompt == 0 {
            return;
        }
        let cached = cached.min(prompt);
        self.reports += 1;
        self.cached_tokens = self.cached_tokens.saturating_add(u64::from(cached));
        self.prompt_tokens = self.prompt_tokens.saturating_add(u64::from(prompt));
        self.hot += u64::from(f64::from(cached) >= HOT_SHARE * f64::from(prompt));
    }

    /// Counts `rec` when it is an `ok`, non-warm-up attempt whose usage reported both counts.
    pub fn add_record(&mut self, rec: &ProbeRecord) {
        if rec.warmup || rec.outcome() != Outcome::Ok {
            return;
        }
        if let (Some(prompt), Some(cached)) = (rec.usage.prompt_tokens, rec.usage.cached_tokens) {
            self.add(prompt, cached);
        }
    }

    /// Adds another cell's counters (another region's).
    pub fn merge(&mut self, other: &CacheCounts) {
        self.reports += other.reports;
        self.cached_tokens = self.cached_tokens.saturating_add(other.cached_tokens);
        self.prompt_tokens = self.prompt_tokens.saturating_add(other.prompt_tokens);
        self.hot += other.hot;
    }

    /// The cell's share; `None` when no request reported a cached count. `asked` is
    /// [`caching_asked`] of the cell's scenario.
    pub fn share(&self, asked: Option<&'static str>) -> Option<CachedShare> {
        if self.reports == 0 || self.prompt_tokens == 0 {
            return None;
        }
        let ci = wilson(self.hot, self.reports)?;
        let share_pct = self.cached_tokens as f64 * 100.0 / self.prompt_tokens as f64;
        let flagged = asked.is_none() && ci.lower >= HOT_SHARE;
        let note = flagged.then(|| {
            format!(
                "{share_pct:.0} % of prompt tokens came from the provider's cache ({} of {} requests cache-hot) though the file asked for no caching: its TTFT measures cache hits, not prefill",
                self.hot, self.reports
            )
        });
        Some(CachedShare {
            share_pct,
            cached_tokens: self.cached_tokens,
            prompt_tokens: self.prompt_tokens,
            requests: self.reports,
            hot_requests: self.hot,
            hot_lower_pct: ci.lower * 100.0,
            hot_upper_pct: ci.upper * 100.0,
            asked_by: asked.map(str::to_string),
            flagged,
            note,
        })
    }
}

/// What in scenario `spec` asks for prompt caching, by its key: `shared_prefix_tokens`,
/// `reuse_text` or `turns` (a conversation resends its earlier turns); `None` when nothing
/// does.
pub fn caching_asked(spec: &ScenarioSpec) -> Option<&'static str> {
    if let Some(s) = &spec.synth {
        if s.shared_prefix_tokens > 0 {
            return Some("shared_prefix_tokens");
        }
        if s.reuse_text {
            return Some("reuse_text");
        }
    }
    (spec.policy.turns > 1).then_some("turns")
}

/// Per generated-prompt scenario of `plan`, by its name in the campaign file: whether its
/// words were fresh in this run or reused ([`latmesh_core::plan::Plan::text_mode`]).
pub fn text_modes(plan: &Plan) -> BTreeMap<String, TextMode> {
    plan.scenarios
        .iter()
        .filter_map(|s| s.synth.as_ref())
        .map(|g| (g.group.clone(), plan.text_mode(g)))
        .collect()
}

/// A cell's cached share (see the [module](self)).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CachedShare {
    /// Σ cached tokens ÷ Σ prompt tokens over the requests that reported both, %.
    pub share_pct: f64,
    /// Σ cached tokens, tokens.
    pub cached_tokens: u64,
    /// Σ prompt tokens, tokens.
    pub prompt_tokens: u64,
    /// `ok` requests that reported both counts.
    pub requests: u64,
    /// Those at least half cached.
    pub hot_requests: u64,
    /// Wilson 95 % interval of `hot_requests ÷ requests`, lower bound, %.
    pub hot_lower_pct: f64,
    /// Its upper bound, %.
    pub hot_upper_pct: f64,
    /// The scenario key that asked for caching ([`caching_asked`]); absent when none did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asked_by: Option<String>,
    /// Cache-hot though not asked for, significantly (see the [module](self)).
    pub flagged: bool,
    /// One line for a flagged cell; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl CachedShare {
    /// Table text: `57 %`, with `!` when flagged (`–` for no share: [`cell_text`]).
    pub fn text(&self) -> String {
        format!(
            "{:.0} %{}",
            self.share_pct,
            if self.flagged { " !" } else { "" }
        )
    }
}

/// The table text of an optional share: [`CachedShare::text`], or `–` when the provider
/// reported no cached count.
pub fn cell_text(share: Option<&CachedShare>) -> String {
    share.map_or_else(|| "–".to_string(), CachedShare::text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_share_is_summed_tokens_and_a_flag_needs_support() {
        let mut c = CacheCounts::default();
        c.add(1000, 990);
        c.add(1000, 990);
        c.add(1000, 990);
        c.add(0, 0); // no prompt count: not a report
        let s = c.share(None).unwrap();
        assert_eq!((s.requests, s.hot_requests), (3, 3));
        assert!((s.share_pct - 99.0).abs() < 1e-9);
        // 3 of 3: the interval's lower bound is 43.9 %, under half: not flagged yet.
        assert!(!s.flagged, "{s:?}");
        c.add(2000, 1500);
        let s = c.share(None).unwrap();
        assert!(
            (s.share_pct - 4470.0 / 50.0).abs() < 1e-9,
            "{}",
            s.share_pct
        );
        assert!(s.flagged && s.hot_lower_pct >= 50.0, "{s:?}");
        assert!(
            s.note
                .as_deref()
                .unwrap()
                .starts_with("89 % of prompt tokens")
        );
        assert_eq!(s.text(), "89 % !");
        // Asked for: shown, never flagged.
        let asked = c.share(Some("reuse_text")).unwrap();
        assert!(!asked.flagged && asked.note.is_none());
        assert_eq!(asked.asked_by.as_deref(), Some("reuse_text"));
        assert_eq!(asked.text(), "89 %");
    }

    #[test]
    fn cold_cells_and_unreported_counts_are_not_flagged() {
        let mut c = CacheCounts::default();
        for _ in 0..50 {
            c.add(1000, 0);
        }
        c.add(1000, 1200); // capped at the prompt
        let s = c.share(None).unwrap();
        assert_eq!((s.hot_requests, s.cached_tokens), (1, 1000));
        assert!(!s.flagged);
        assert_eq!(CacheCounts::default().share(None), None);
        assert_eq!(cell_text(None), "–");
        let mut m = CacheCounts::default();
        m.merge(&c);
        m.merge(&c);
        assert_eq!((m.reports, m.hot, m.prompt_tokens), (102, 2, 102_000));
    }
}
