//! How many tokens an attempt generated, when the provider's `usage` and the streamed payloads
//! disagree (docs/metrics.md, "Output tokens"): [`output_tokens`] and the
//! [`OutputTokensSource`] every record carries.
//!
//! The rule, in words: `usage.completion_tokens` is the count, except that
//!
//! * reasoning reported apart is added: when `usage.reasoning_tokens` exceeds
//!   `completion_tokens` (a count cannot include more than itself), or, in an event stream,
//!   when `completion_tokens` is smaller than the token-bearing payloads streamed (each
//!   carries at least one token, so such a count left some out) and reasoning tokens were
//!   reported;
//! * in an event stream, the token-bearing payloads win when they still outnumber that
//!   count: a provider whose usage counts only the answer while it streamed its reasoning
//!   gets the payload count, a lower bound of what it generated;
//! * without a completion count, the payloads are the count.
//!
//! So for a stream: `output_tokens = max(usage count, token_payloads)`. A body read whole is
//! one payload; its usage count stands.

use serde::{Deserialize, Serialize};

/// Where a record's `output_tokens` came from.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum OutputTokensSource {
    /// `usage.completion_tokens`: it covers every token-bearing payload streamed (or the body
    /// was read whole).
    Usage,
    /// `usage.completion_tokens + usage.reasoning_tokens`: the completion count cannot include
    /// the reasoning (see the module documentation), which was reported apart.
    UsagePlusReasoning,
    /// The token-bearing payloads: no usage reported a completion count (also the value of
    /// attempts without a readable body, whose count is 0).
    #[default]
    Payloads,
    /// The token-bearing payloads of an event stream, which outnumbered the usage count: the
    /// provider's usage left tokens out (typically streamed reasoning).
    PayloadsOverUsage,
}

impl OutputTokensSource {
    /// Every source.
    pub const ALL: [OutputTokensSource; 4] = [
        OutputTokensSource::Usage,
        OutputTokensSource::UsagePlusReasoning,
        OutputTokensSource::Payloads,
        OutputTokensSource::PayloadsOverUsage,
    ];

    /// The snake_case name used on the wire, in JSON and in ClickHouse.
    pub fn as_str(self) -> &'static str {
        match self {
            OutputTokensSource::Usage => "usage",
            OutputTokensSource::UsagePlusReasoning => "usage_plus_reasoning",
            OutputTokensSource::Payloads => "payloads",
            OutputTokensSource::PayloadsOverUsage => "payloads_over_usage",
        }
    }

    /// Parses [`OutputTokensSource::as_str`]'s names; `None` for anything else.
    pub fn parse(s: &str) -> Option<OutputTokensSource> {
        Self::ALL.into_iter().find(|o| o.as_str() == s)
    }

    /// The source of a record that carries only `tokens_from_usage` (written before the
    /// source was recorded, when usage always won): `usage` or `payloads`.
    pub fn from_usage_flag(tokens_from_usage: bool) -> OutputTokensSource {
        if tokens_from_usage {
            OutputTokensSource::Usage
        } else {
            OutputTokensSource::Payloads
        }
    }

    /// [`OutputTokensSource::parse`], or, for an empty or unknown name (older agents and
    /// rows), [`OutputTokensSource::from_usage_flag`].
    pub fn parse_or_flag(s: &str, tokens_from_usage: bool) -> OutputTokensSource {
        Self::parse(s).unwrap_or(Self::from_usage_flag(tokens_from_usage))
    }

    /// Whether the count came from `usage` (the record's `tokens_from_usage`).
    pub fn from_usage(self) -> bool {
        matches!(
            self,
            OutputTokensSource::Usage | OutputTokensSource::UsagePlusReasoning
        )
    }
}

impl std::fmt::Display for OutputTokensSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The output token count of an attempt and where it came from (see the module
/// documentation): `completion_tokens` and `reasoning_tokens` as `usage` reported them,
/// `token_payloads` the payloads that carried a generated token, `event_stream` whether they
/// were counted one by one (false for a body read whole, which is one payload).
pub fn output_tokens(
    completion_tokens: Option<u32>,
    reasoning_tokens: Option<u32>,
    token_payloads: u32,
    event_stream: bool,
) -> (u32, OutputTokensSource) {
    let Some(completion) = completion_tokens else {
        return (token_payloads, OutputTokensSource::Payloads);
    };
    let short = event_stream && completion < token_payloads;
    let (usage, source) = match reasoning_tokens.filter(|&r| r > 0) {
        Some(r) if r > completion || short => (
            completion.saturating_add(r),
            OutputTokensSource::UsagePlusReasoning,
        ),
        _ => (completion, OutputTokensSource::Usage),
    };
    if event_stream && token_payloads > usage {
        (token_payloads, OutputTokensSource::PayloadsOverUsage)
    } else {
        (usage, source)
    }
}

#[cfg(test)]
mod tests {
    use super::OutputTokensSource::*;
    use super::*;

    #[test]
    fn the_larger_of_usage_and_payloads_in_a_stream() {
        // Usage counts only the answer (8) while 23 reasoning + 8 content payloads streamed.
        assert_eq!(
            output_tokens(Some(8), None, 31, true),
            (31, PayloadsOverUsage)
        );
        // Several tokens per payload: usage is larger and wins.
        assert_eq!(output_tokens(Some(7), None, 3, true), (7, Usage));
        assert_eq!(output_tokens(Some(3), None, 3, true), (3, Usage));
        // No usage: payloads.
        assert_eq!(output_tokens(None, Some(5), 4, true), (4, Payloads));
        // Usage that includes its reasoning (reasoning ≤ completion, covers the payloads).
        assert_eq!(output_tokens(Some(40), Some(30), 12, true), (40, Usage));
    }

    #[test]
    fn reasoning_reported_apart_is_added() {
        // More reasoning than completion tokens: the completion count cannot include it.
        assert_eq!(
            output_tokens(Some(8), Some(40), 31, true),
            (48, UsagePlusReasoning)
        );
        assert_eq!(
            output_tokens(Some(8), Some(40), 1, false),
            (48, UsagePlusReasoning)
        );
        // Fewer completion tokens than payloads, reasoning reported: added, then compared.
        assert_eq!(
            output_tokens(Some(8), Some(5), 13, true),
            (13, UsagePlusReasoning)
        );
        assert_eq!(
            output_tokens(Some(8), Some(3), 13, true),
            (13, PayloadsOverUsage)
        );
        // A zero reasoning count changes nothing.
        assert_eq!(
            output_tokens(Some(8), Some(0), 13, true),
            (13, PayloadsOverUsage)
        );
    }

    #[test]
    fn a_body_read_whole_keeps_its_usage() {
        assert_eq!(output_tokens(Some(0), None, 1, false), (0, Usage));
        assert_eq!(output_tokens(Some(120), Some(20), 1, false), (120, Usage));
        assert_eq!(output_tokens(None, None, 1, false), (1, Payloads));
    }

    #[test]
    fn names_round_trip_and_old_records_read_from_the_flag() {
        for s in OutputTokensSource::ALL {
            assert_eq!(OutputTokensSource::parse(s.as_str()), Some(s));
            let json = serde_json::to_string(&s).unwrap();
            assert_eq!(json, format!("\"{s}\""));
        }
        assert_eq!(OutputTokensSource::parse_or_flag("", true), Usage);
        assert_eq!(OutputTokensSource::parse_or_flag("", false), Payloads);
        assert_eq!(
            OutputTokensSource::parse_or_flag("usage_plus_reasoning", false),
            UsagePlusReasoning
        );
        assert!(UsagePlusReasoning.from_usage() && !PayloadsOverUsage.from_usage());
    }
}
