//! Compatibility checks (docs/metrics.md, "Compatibility checks"): a fixed, versioned list of
//! small probes run against each provider, each ending in a [`Verdict`] with its
//! [`Evidence`], and the rule that turns a provider's verdicts into the selection matrix's
//! compatibility score ([`score`]).
//!
//! The checks are run by `latmesh compat` (the engine is `latmesh_agent::compat`); the
//! simulator's ground-truth profiles fail known ones. Pure: no I/O.

use serde::{Deserialize, Serialize};

/// Version of the check list and of each check's pass rule. Bump when a check is added,
/// removed, or its rule changes; every stored result carries it. 2: the checks that can flip
/// are decided from repeated samples ([`SampleTally::verdict`], [`Verdict::Unstable`]).
pub const COMPAT_CHECKS_VERSION: u32 = 2;

/// Longest evidence message kept, bytes (cut on a character boundary, the `…` included):
/// room for the sample counts of a repeated check and [`MAX_QUOTE_CHARS`] of an answer.
pub const MAX_EVIDENCE_BYTES: usize = 512;

/// Longest excerpt of an answer quoted in evidence, characters (enough to see why JSON did
/// not parse or where an answer stopped).
pub const MAX_QUOTE_CHARS: usize = 200;

/// One compatibility check. Each sends one or two small requests (see the variant) and
/// judges what came back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompatCheck {
    /// A streamed request ends `ok` with visible content.
    Stream,
    /// A non-streamed request ends `ok` with visible content.
    NonStream,
    /// Chat: a stream sent with `stream_options.include_usage` is accepted (a 4xx naming the
    /// field fails) and carries a non-zero `usage.completion_tokens` after streamed text.
    /// Other APIs: the same usage in the stream (they send it unasked); a count of 0 after
    /// streamed text fails.
    StreamUsage,
    /// The output cap is honoured: a request with a small cap asking for a long answer ends
    /// with `finish_reason` `length` (or the API's equivalent) and completion tokens ≤ cap.
    OutputCap,
    /// A stop sequence is honoured: the answer ends before the stop string, which does not
    /// appear in it, with finish reason `stop`. Inconclusive when the answer cannot tell
    /// (it never counts up to 6, or reaches the cap without the stop string: a server
    /// ignoring `stop` would pass on a canned reply). Not applicable on the Responses API
    /// (it has no stop parameter).
    Stop,
    /// JSON mode (`response_format: {"type": "json_object"}`; Responses:
    /// `text.format`) returns content that parses as a JSON object. A 4xx naming the field is
    /// *not offered*; not applicable on the Anthropic API.
    JsonMode,
    /// A tool call comes back, for a prompt that needs the declared tool, with the tool's
    /// name and arguments that parse as a JSON object. A 4xx naming `tools` is *not offered*.
    ToolCall,
    /// Which field carries reasoning (`reasoning_content`, `reasoning`, a thinking block, …):
    /// informational (its evidence names the field), weight 0 in the score; *not offered*
    /// when the answer carried no reasoning.
    ReasoningField,
    /// A second turn is sent twice: with the first answer's reasoning sent back and without
    /// it. Passes when both are accepted; fails when either is refused (the evidence says
    /// which: the provider *needs* reasoning back, or *rejects* it).
    ReasoningHistory,
    /// The `model` answered names the model asked for
    /// ([`crate::answered_model::model_matches`], against `expect_model` when set).
    ModelName,
    /// The answer carries a `system_fingerprint` (*not offered* when absent: many servers
    /// send none).
    SystemFingerprint,
    /// Prompt caching is seen: the second of two requests sharing a long prefix reports
    /// cached prompt tokens (*not offered* when none are reported).
    PromptCache,
    /// A deliberately wrong API key (random, never the real one) is answered 401 or 403
    /// quickly; a 5xx, another status or a timeout fails; a 2xx is *not offered* (the
    /// endpoint checks no key).
    WrongKey,
}

impl CompatCheck {
    /// Every check, in report order.
    pub const ALL: [CompatCheck; 13] = [
        CompatCheck::Stream,
        CompatCheck::NonStream,
        CompatCheck::StreamUsage,
        CompatCheck::OutputCap,
        CompatCheck::Stop,
        CompatCheck::JsonMode,
        CompatCheck::ToolCall,
        CompatCheck::ReasoningField,
        CompatCheck::ReasoningHistory,
        CompatCheck::ModelName,
        CompatCheck::SystemFingerprint,
        CompatCheck::PromptCache,
        CompatCheck::WrongKey,
    ];

    /// The snake_case name used in campaign files, JSON and ClickHouse.
    pub fn as_str(self) -> &'static str {
        match self {
            CompatCheck::Stream => "stream",
            CompatCheck::NonStream => "non_stream",
            CompatCheck::StreamUsage => "stream_usage",
            CompatCheck::OutputCap => "output_cap",
            CompatCheck::Stop => "stop",
            CompatCheck::JsonMode => "json_mode",
            CompatCheck::ToolCall => "tool_call",
            CompatCheck::ReasoningField => "reasoning_field",
            CompatCheck::ReasoningHistory => "reasoning_history",
            CompatCheck::ModelName => "model_name",
            CompatCheck::SystemFingerprint => "system_fingerprint",
            CompatCheck::PromptCache => "prompt_cache",
            CompatCheck::WrongKey => "wrong_key",
        }
    }

    /// Parses [`CompatCheck::as_str`]'s names; `None` for anything else.
    pub fn parse(s: &str) -> Option<CompatCheck> {
        CompatCheck::ALL.into_iter().find(|c| c.as_str() == s)
    }

    /// Whether the check's verdict can differ between two runs against the same provider:
    /// its pass rule judges what the model generated (where an answer stopped, whether its
    /// text parses, whether it called the tool, how long it ran), not the protocol (statuses,
    /// fields, headers). Such a check is sampled [`CompatSpec::samples`] times and is
    /// [`Verdict::Unstable`] when its samples disagree; every other check is sampled once.
    pub fn can_flip(self) -> bool {
        match self {
            CompatCheck::OutputCap
            | CompatCheck::Stop
            | CompatCheck::JsonMode
            | CompatCheck::ToolCall => true,
            CompatCheck::Stream
            | CompatCheck::NonStream
            | CompatCheck::StreamUsage
            | CompatCheck::ReasoningField
            | CompatCheck::ReasoningHistory
            | CompatCheck::ModelName
            | CompatCheck::SystemFingerprint
            | CompatCheck::PromptCache
            | CompatCheck::WrongKey => false,
        }
    }

    /// The check's weight in [`score`]: 0 for the informational [`CompatCheck::ReasoningField`],
    /// 1 for every other.
    pub fn weight(self) -> f64 {
        match self {
            CompatCheck::ReasoningField => 0.0,
            _ => 1.0,
        }
    }
}

impl std::fmt::Display for CompatCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A check's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The provider did what the check asks.
    Pass,
    /// It answered, and not as the check asks (the evidence says how).
    Fail,
    /// The feature is refused or absent (a 4xx naming the field, no cached tokens, no
    /// fingerprint): counts as not passing in the score.
    NotOffered,
    /// The check does not exist in the provider's API (e.g. JSON mode on the Anthropic API,
    /// a stop sequence on the Responses API): left out of the score.
    NotApplicable,
    /// The check could not decide: the request failed for a reason that says nothing about
    /// the feature (throttled, 5xx, timeout, connection error). Left out of the score and
    /// counted apart.
    Inconclusive,
    /// The samples of a check that can flip ([`CompatCheck::can_flip`]) disagreed (e.g. JSON
    /// that parsed in 1 of 3 answers; [`CompatResult::samples`] has the counts): the feature
    /// cannot be relied on, so it counts as not passing in the score.
    Unstable,
}

impl Verdict {
    /// Every verdict, in report order.
    pub const ALL: [Verdict; 6] = [
        Verdict::Pass,
        Verdict::Fail,
        Verdict::NotOffered,
        Verdict::NotApplicable,
        Verdict::Inconclusive,
        Verdict::Unstable,
    ];

    /// The snake_case name used in JSON and ClickHouse.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail => "fail",
            Verdict::NotOffered => "not_offered",
            Verdict::NotApplicable => "not_applicable",
            Verdict::Inconclusive => "inconclusive",
            Verdict::Unstable => "unstable",
        }
    }

    /// Parses [`Verdict::as_str`]'s names.
    pub fn parse(s: &str) -> Option<Verdict> {
        Verdict::ALL.into_iter().find(|v| v.as_str() == s)
    }

    /// The short form of the terminal and HTML tables: `pass`, `FAIL`, `n/o`, `n/a`, `?`,
    /// `UNST` (the tables add the passes, `UNST 1/3`).
    pub fn short(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail => "FAIL",
            Verdict::NotOffered => "n/o",
            Verdict::NotApplicable => "n/a",
            Verdict::Inconclusive => "?",
            Verdict::Unstable => "UNST",
        }
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a verdict rests on: the HTTP status, the field seen (or missing), and a short
/// message (the provider's error, or what was wrong), scrubbed of the key and cut to
/// [`MAX_EVIDENCE_BYTES`]. Never answer text beyond a short quoted excerpt.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evidence {
    /// HTTP status of the deciding response, when one arrived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_status: Option<u16>,
    /// The field the verdict is about (`reasoning_content`, `usage.completion_tokens`,
    /// `finish_reason=length`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// What was seen, in words (≤ [`MAX_EVIDENCE_BYTES`]).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// One check's result for one provider.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompatResult {
    /// Provider name from the campaign file.
    pub provider: String,
    /// The check.
    pub check: CompatCheck,
    /// Its verdict.
    pub verdict: Verdict,
    /// What it rests on.
    pub evidence: Evidence,
    /// The verdicts of its samples (one for a check that cannot flip; none for a check not
    /// applicable). Absent in results written before samples were counted.
    #[serde(default)]
    pub samples: SampleTally,
}

/// How many samples of a check ended in each verdict ([`SampleTally::verdict`] is the rule
/// that decides the check).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SampleTally {
    /// Samples that passed.
    pub pass: u32,
    /// Samples that failed.
    pub fail: u32,
    /// Samples refused as not offered.
    pub not_offered: u32,
    /// Samples that could not decide.
    pub inconclusive: u32,
}

impl SampleTally {
    /// One sample of `v` (`None` for [`Verdict::NotApplicable`], which is never sampled, and
    /// [`Verdict::Unstable`], which is no sample's verdict).
    pub fn of(v: Verdict) -> SampleTally {
        let mut t = SampleTally::default();
        t.add(v);
        t
    }

    /// Counts one sample's verdict (not applicable and unstable add nothing: no sample ends
    /// in either).
    pub fn add(&mut self, v: Verdict) {
        match v {
            Verdict::Pass => self.pass += 1,
            Verdict::Fail => self.fail += 1,
            Verdict::NotOffered => self.not_offered += 1,
            Verdict::Inconclusive => self.inconclusive += 1,
            Verdict::NotApplicable | Verdict::Unstable => {}
        }
    }

    /// Samples counted.
    pub fn taken(&self) -> u32 {
        self.pass + self.fail + self.not_offered + self.inconclusive
    }

    /// The check's verdict from its samples: inconclusive samples are left out; no sample
    /// left is [`Verdict::Inconclusive`]; the rest all alike is their verdict; any
    /// disagreement (pass and fail, or fail and not offered, …) is [`Verdict::Unstable`].
    pub fn verdict(&self) -> Verdict {
        let decided = [
            (Verdict::Pass, self.pass),
            (Verdict::Fail, self.fail),
            (Verdict::NotOffered, self.not_offered),
        ];
        let mut kinds = decided.iter().filter(|(_, n)| *n > 0);
        match (kinds.next(), kinds.next()) {
            (None, _) => Verdict::Inconclusive,
            (Some((v, _)), None) => *v,
            (Some(_), Some(_)) => Verdict::Unstable,
        }
    }

    /// The counts in words, zeros left out: `pass 1/3, fail 2/3`.
    pub fn describe(&self) -> String {
        let n = self.taken();
        [
            (Verdict::Pass, self.pass),
            (Verdict::Fail, self.fail),
            (Verdict::NotOffered, self.not_offered),
            (Verdict::Inconclusive, self.inconclusive),
        ]
        .iter()
        .filter(|(_, k)| *k > 0)
        .map(|(v, k)| format!("{} {k}/{n}", v.as_str()))
        .collect::<Vec<_>>()
        .join(", ")
    }
}

/// A provider's compatibility score ([`score`]).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct CompatScore {
    /// Σ weight of passed checks / Σ weight of counted checks, 0..=1.
    pub score: f64,
    /// Checks passed (weight > 0).
    pub passed: u32,
    /// Checks counted: pass, fail, not offered or unstable (weight > 0).
    pub counted: u32,
    /// Checks left out because they were inconclusive.
    pub inconclusive: u32,
}

/// The compatibility score of one provider's results (docs/metrics.md, "Compatibility
/// checks"): Σ weight of `pass` / Σ weight of `pass`, `fail`, `not_offered` and `unstable`, over checks of
/// weight > 0 ([`CompatCheck::weight`]); `not_applicable` and `inconclusive` are left out
/// (the latter counted in [`CompatScore::inconclusive`]). `None` when no check counts.
pub fn score<'a>(results: impl IntoIterator<Item = &'a CompatResult>) -> Option<CompatScore> {
    let (mut pass_w, mut counted_w) = (0.0, 0.0);
    let (mut passed, mut counted, mut inconclusive) = (0, 0, 0);
    for r in results {
        let w = r.check.weight();
        if w <= 0.0 {
            continue;
        }
        match r.verdict {
            Verdict::Pass => {
                pass_w += w;
                counted_w += w;
                passed += 1;
                counted += 1;
            }
            Verdict::Fail | Verdict::NotOffered | Verdict::Unstable => {
                counted_w += w;
                counted += 1;
            }
            Verdict::Inconclusive => inconclusive += 1,
            Verdict::NotApplicable => {}
        }
    }
    (counted > 0).then(|| CompatScore {
        score: pass_w / counted_w,
        passed,
        counted,
        inconclusive,
    })
}

/// The user message of the checks that only need some answer (stream, non-stream, stream
/// usage, model name, fingerprint, wrong key, and the first turn of reasoning history).
/// Plain text a normal client could send: nothing names latmesh or a probe.
pub const PLAIN_PROMPT: &str = "Say hello in five words.";

/// The second turn of [`CompatCheck::ReasoningHistory`].
pub const FOLLOW_UP_PROMPT: &str = "Now say it in three words.";

/// [`CompatCheck::OutputCap`]: a prompt whose answer is far longer than [`OUTPUT_CAP_TOKENS`].
pub const LONG_ANSWER_PROMPT: &str =
    "Write a story of about 300 words about a lighthouse keeper and a storm.";

/// The output cap of [`CompatCheck::OutputCap`], tokens.
pub const OUTPUT_CAP_TOKENS: u32 = 8;

/// [`CompatCheck::Stop`]: a prompt whose answer contains [`STOP_SEQUENCE`] early.
pub const STOP_PROMPT: &str =
    "Count from 1 to 30, writing the numbers separated by single spaces and nothing else.";

/// The stop sequence of [`CompatCheck::Stop`]: the answer must end before it (so contain
/// neither it nor anything after it).
pub const STOP_SEQUENCE: &str = "7";

/// [`CompatCheck::JsonMode`]: sent with JSON mode on; the answer must parse as an object.
pub const JSON_PROMPT: &str = "Return a JSON object with the keys \"city\" and \"country\" \
     naming the capital of France and its country.";

/// [`CompatCheck::ToolCall`]: sent with one tool, [`TOOL_NAME`], declared.
pub const TOOL_PROMPT: &str = "What is the weather in Paris right now? Use the tool.";

/// The function [`CompatCheck::ToolCall`] declares: `get_weather(city: string)`.
pub const TOOL_NAME: &str = "get_weather";

/// The JSON Schema of [`TOOL_NAME`]'s parameters.
pub fn tool_parameters() -> serde_json::Value {
    serde_json::json!({
        "type": "object",
        "properties": { "city": { "type": "string", "description": "City name" } },
        "required": ["city"]
    })
}

/// [`CompatCheck::PromptCache`]: the shared system message of its two requests, long enough
/// (about 1,500 tokens) for providers that cache prefixes of 1,024 tokens or more. Fixed text:
/// the same in every run, so a provider's cache may already hold it (the check then passes on
/// its first request too).
pub fn cache_prefix() -> String {
    let sentence = "You are a careful assistant for a small engineering team. \
        Answer questions about their build system, their test suite and their deployment \
        scripts precisely, and say so when you do not know. ";
    let mut s = String::with_capacity(sentence.len() * 40);
    for i in 0..40 {
        s.push_str(&format!("Rule {}: ", i + 1));
        s.push_str(sentence);
    }
    s
}

/// The validated `[compat]` section of a campaign file.
///
/// ```toml
/// [compat]
/// checks = ["stream", "json_mode"]   # optional (default: every check, CompatCheck::ALL)
/// providers = ["fast-lane"]          # optional (default: every provider)
/// timeout_s = 30                     # optional (default 30, at most 86400): total timeout of each request
/// samples = 3                        # optional (default 3, 1..=10): samples of each check that can flip
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CompatSpec {
    /// The checks to run, in [`CompatCheck::ALL`] order, unique, not empty.
    pub checks: Vec<CompatCheck>,
    /// Provider names to check (each one of the campaign's); empty: every provider.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub providers: Vec<String>,
    /// Total timeout of each check's request, seconds (> 0).
    pub timeout_s: f64,
    /// Samples of each check that can flip ([`CompatCheck::can_flip`]), in
    /// 1..=[`MAX_COMPAT_SAMPLES`]; every other check is sampled once.
    #[serde(default = "default_compat_samples")]
    pub samples: u32,
}

/// Default [`CompatSpec::timeout_s`].
pub const DEFAULT_COMPAT_TIMEOUT_S: f64 = 30.0;

/// Default [`CompatSpec::samples`]: three, so one odd answer out of three shows as unstable.
pub const DEFAULT_COMPAT_SAMPLES: u32 = 3;

/// Largest [`CompatSpec::samples`].
pub const MAX_COMPAT_SAMPLES: u32 = 10;

fn default_compat_samples() -> u32 {
    DEFAULT_COMPAT_SAMPLES
}

impl CompatSpec {
    /// How many samples `check` gets: [`CompatSpec::samples`] when it can flip, else 1.
    pub fn samples_of(&self, check: CompatCheck) -> u32 {
        if check.can_flip() { self.samples } else { 1 }
    }
}

impl Default for CompatSpec {
    fn default() -> Self {
        CompatSpec {
            checks: CompatCheck::ALL.to_vec(),
            providers: Vec::new(),
            timeout_s: DEFAULT_COMPAT_TIMEOUT_S,
            samples: DEFAULT_COMPAT_SAMPLES,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(check: CompatCheck, verdict: Verdict) -> CompatResult {
        CompatResult {
            provider: "p".into(),
            check,
            verdict,
            evidence: Evidence::default(),
            samples: SampleTally::of(verdict),
        }
    }

    #[test]
    fn names_round_trip() {
        for c in CompatCheck::ALL {
            assert_eq!(CompatCheck::parse(c.as_str()), Some(c));
            assert_eq!(
                serde_json::to_string(&c).unwrap(),
                format!("\"{}\"", c.as_str())
            );
        }
        for v in Verdict::ALL {
            assert_eq!(Verdict::parse(v.as_str()), Some(v));
        }
        assert_eq!(CompatCheck::parse("streaming"), None);
    }

    #[test]
    fn score_counts_not_offered_and_leaves_out_na_and_inconclusive() {
        let rs = [
            r(CompatCheck::Stream, Verdict::Pass),
            r(CompatCheck::NonStream, Verdict::Pass),
            r(CompatCheck::JsonMode, Verdict::NotOffered),
            r(CompatCheck::Stop, Verdict::Fail),
            r(CompatCheck::StreamUsage, Verdict::NotApplicable),
            r(CompatCheck::WrongKey, Verdict::Inconclusive),
            r(CompatCheck::ReasoningField, Verdict::Fail),
            r(CompatCheck::ToolCall, Verdict::Unstable),
        ];
        let s = score(&rs).unwrap();
        assert_eq!((s.passed, s.counted, s.inconclusive), (2, 5, 1));
        assert!((s.score - 0.4).abs() < 1e-12);
        assert_eq!(score(&[r(CompatCheck::Stop, Verdict::NotApplicable)]), None);
    }

    #[test]
    fn samples_decide_by_agreement_and_leave_inconclusive_out() {
        let t = |pass, fail, not_offered, inconclusive| SampleTally {
            pass,
            fail,
            not_offered,
            inconclusive,
        };
        assert_eq!(t(3, 0, 0, 0).verdict(), Verdict::Pass);
        assert_eq!(t(1, 2, 0, 0).verdict(), Verdict::Unstable);
        assert_eq!(t(1, 2, 0, 0).describe(), "pass 1/3, fail 2/3");
        assert_eq!(t(0, 2, 1, 0).verdict(), Verdict::Unstable);
        assert_eq!(t(2, 0, 0, 1).verdict(), Verdict::Pass);
        assert_eq!(t(2, 0, 0, 1).describe(), "pass 2/3, inconclusive 1/3");
        assert_eq!(t(0, 0, 0, 2).verdict(), Verdict::Inconclusive);
        assert_eq!(t(0, 0, 0, 0).verdict(), Verdict::Inconclusive);
        assert_eq!(t(0, 0, 1, 0).verdict(), Verdict::NotOffered);
        assert_eq!(SampleTally::of(Verdict::NotApplicable).taken(), 0);
    }

    #[test]
    fn only_checks_that_judge_generated_text_are_repeated() {
        let spec = CompatSpec::default();
        let repeated: Vec<&str> = CompatCheck::ALL
            .into_iter()
            .filter(|c| spec.samples_of(*c) == DEFAULT_COMPAT_SAMPLES)
            .map(CompatCheck::as_str)
            .collect();
        assert_eq!(repeated, ["output_cap", "stop", "json_mode", "tool_call"]);
        assert_eq!(spec.samples_of(CompatCheck::WrongKey), 1);
        // A spec written before `samples` existed reads with the default.
        let old: CompatSpec =
            serde_json::from_str(r#"{"checks": ["stream"], "timeout_s": 30.0}"#).unwrap();
        assert_eq!(old.samples, DEFAULT_COMPAT_SAMPLES);
    }
}
