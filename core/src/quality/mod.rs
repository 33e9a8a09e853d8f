//! Quality parity (docs/metrics.md, "Quality parity"): a shipped, versioned set of prompts
//! whose answers a machine can check ([`prompt_set`]), the grader ([`grade`]), the row one
//! sampled answer becomes ([`QualitySample`]) and the fingerprint of a provider's answers
//! ([`answers_fingerprint`]) that `latmesh check` compares against a baseline.
//!
//! Every prompt asks the model to end its reply with `Answer: <answer>`; the grader reads
//! the line after the last such marker (else the last line with text, [`extract_answer`]),
//! normalizes it ([`normalize`]) and compares it with the prompt's [`Expected`] answer. Only the normalized final answer, cut
//! to [`MAX_ANSWER_BYTES`], is ever kept; the reply itself never leaves the engine (never
//! logged or stored).
//!
//! Pure: no I/O (the set is compiled in from `core/prompts/quality-v1.json`).

use std::sync::LazyLock;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::record::Outcome;

/// Name and version of the shipped prompt set; stored with every sample. Bump (a new file)
/// when a prompt or an expected answer changes.
pub const QUALITY_SET_VERSION: &str = "quality-v1";

/// Longest normalized answer kept in a [`QualitySample`], bytes (cut on a character
/// boundary, the `…` included).
pub const MAX_ANSWER_BYTES: usize = 64;

/// The marker the instruction asks every reply to end with.
pub const ANSWER_MARKER: &str = "Answer:";

/// What kind of knowledge a prompt checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// Exact arithmetic.
    Arithmetic,
    /// A fixed fact.
    Fact,
    /// Extraction into a given JSON shape.
    Extraction,
    /// The output of a short program.
    Code,
}

/// The expected answer of a prompt and how a reply is compared with it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Expected {
    /// A number: the answer's number equals it within 1e-9 relative. The answer's number is
    /// the first after its last `=` (`17 × 23 = 391`), else its first (commas between digit
    /// groups removed, `-` or `−` in front negating it).
    Number(f64),
    /// Any of these texts, compared normalized ([`normalize`]).
    Text(Vec<String>),
    /// A JSON object: the first `{…}` that parses as an object, in the text after the last
    /// marker (it may span lines) or else in the whole reply, equals it: the same keys in any
    /// order, numbers compared as numbers (`34.0` is `34`), strings normalized, other values
    /// (booleans, null) exactly.
    Json(serde_json::Value),
    /// A program's output, compared normalized.
    Output(String),
}

/// One prompt of the set.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QualityPrompt {
    /// Stable id (`arith-01`, …): stored with every sample.
    pub id: String,
    /// Its category.
    pub category: Category,
    /// The user message, without the set's instruction ([`QualitySet::instruction`]).
    pub prompt: String,
    /// The expected answer.
    pub expected: Expected,
}

/// The whole shipped set.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QualitySet {
    /// Must equal [`QUALITY_SET_VERSION`].
    pub set: String,
    /// The system message sent before every prompt.
    pub instruction: String,
    /// The prompts, in order.
    pub prompts: Vec<QualityPrompt>,
}

static SET: LazyLock<QualitySet> = LazyLock::new(|| {
    let set: QualitySet = serde_json::from_str(include_str!("../../prompts/quality-v1.json"))
        .expect("core/prompts/quality-v1.json parses (checked by a unit test)");
    set
});

/// The shipped prompt set ([`QUALITY_SET_VERSION`]).
pub fn prompt_set() -> &'static QualitySet {
    &SET
}

/// The prompt of the set whose user message is `user_text` (exactly, after trimming), for the
/// simulator's ground truth; `None` for any other text.
pub fn find_by_text(user_text: &str) -> Option<&'static QualityPrompt> {
    let t = user_text.trim();
    SET.prompts.iter().find(|p| p.prompt.trim() == t)
}

/// The validated `[quality]` section of a campaign file.
///
/// ```toml
/// [quality]
/// samples = 3                 # optional (default 3, 1..=20): answers per prompt and provider
/// prompt_ids = ["arith-*"]    # optional (default: the whole set): ids or `prefix*` patterns
/// max_tokens = 512            # optional (default 512, 1..=32768): output cap of each request
/// providers = ["fast-lane"]   # optional (default: every provider)
/// timeout_s = 60              # optional (default 60, at most 86400): total timeout of each request
/// ```
///
/// Requests are sent at temperature 0 (top_p 1), not streamed (usage then always carries
/// the provider's token count), with the set's instruction as the system message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QualitySpec {
    /// Answers per prompt and provider (1..=20).
    pub samples: u32,
    /// Prompt ids of the set to send (resolved from the patterns, in set order, not empty).
    pub prompt_ids: Vec<String>,
    /// Output cap of each request.
    pub max_tokens: u32,
    /// Provider names (each one of the campaign's); empty: every provider.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub providers: Vec<String>,
    /// Total timeout of each request, seconds (> 0).
    pub timeout_s: f64,
}

/// Default [`QualitySpec::samples`].
pub const DEFAULT_SAMPLES: u32 = 3;
/// Most [`QualitySpec::samples`].
pub const MAX_SAMPLES: u32 = 20;
/// Default [`QualitySpec::max_tokens`].
pub const DEFAULT_MAX_TOKENS: u32 = 512;
/// Largest [`QualitySpec::max_tokens`].
pub const MAX_QUALITY_MAX_TOKENS: u32 = 32_768;
/// Default [`QualitySpec::timeout_s`].
pub const DEFAULT_QUALITY_TIMEOUT_S: f64 = 60.0;

impl Default for QualitySpec {
    fn default() -> Self {
        QualitySpec {
            samples: DEFAULT_SAMPLES,
            prompt_ids: prompt_set().prompts.iter().map(|p| p.id.clone()).collect(),
            max_tokens: DEFAULT_MAX_TOKENS,
            providers: Vec::new(),
            timeout_s: DEFAULT_QUALITY_TIMEOUT_S,
        }
    }
}

/// A grading: whether the reply's final answer is the expected one, and that answer in the
/// form kept and compared across providers ([`grade`] says which form).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grade {
    /// The final answer equals the expected one.
    pub correct: bool,
    /// The final answer, normalized, cut to [`MAX_ANSWER_BYTES`]: [`QualitySample::answer`].
    pub answer: String,
    /// [`answer_hash`] of the whole answer (before the cut): [`QualitySample::answer_hash`].
    pub answer_hash: String,
}

/// The final answer of a reply: after the last [`ANSWER_MARKER`] (ASCII case-insensitive),
/// the first line with an answer on it (the marker's own line, else the next: lines that are
/// empty, a code fence or only Markdown marks are skipped); without the marker, the last such
/// line of the reply. Trimmed; empty when there is none.
pub fn extract_answer(reply: &str) -> &str {
    match after_marker(reply) {
        Some(rest) => rest.lines().map(str::trim).find(|l| has_answer(l)),
        None => reply.lines().rev().map(str::trim).find(|l| has_answer(l)),
    }
    .unwrap_or("")
}

/// The text after the last [`ANSWER_MARKER`] of `reply` (ASCII case-insensitive), if any.
fn after_marker(reply: &str) -> Option<&str> {
    // ASCII lowercasing keeps every byte offset.
    let i = reply
        .to_ascii_lowercase()
        .rfind(&ANSWER_MARKER.to_ascii_lowercase())?;
    Some(&reply[i + ANSWER_MARKER.len()..])
}

/// A line that can hold an answer: not a code fence (```` ``` ````, ```` ```text ````), and not
/// empty once Markdown marks are removed.
fn has_answer(line: &str) -> bool {
    !line.starts_with("```") && !normalize(line).is_empty()
}

/// Normal form of an answer for comparison and agreement: Unicode-lowercased, Markdown
/// emphasis/code marks (`*`, `` ` ``, `_` at the ends) and surrounding quotes removed,
/// whitespace runs collapsed to one space, trailing `.`/`!` removed.
pub fn normalize(answer: &str) -> String {
    let collapsed = answer.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut s = collapsed.as_str();
    loop {
        let t = s
            .trim_matches(|c: char| matches!(c, '*' | '`' | '"' | '\'' | '_' | ' '))
            .trim_end_matches(['.', '!']);
        if t.len() == s.len() {
            break;
        }
        s = t;
    }
    s.to_lowercase()
}

/// Grades `reply` against `prompt`'s expected answer ([`Expected`] says how each kind
/// compares). The answer kept is the final answer ([`extract_answer`]) normalized
/// ([`normalize`]), except where the kind reads a value out of it: a number prompt keeps the
/// number read (`391 km` → `391`), a JSON prompt the object read, compact, keys sorted,
/// strings normalized and whole numbers without a fraction (`{"age":34,"name":"maria lopez"}`).
/// So answers that say the same thing hash the same, across providers and runs.
pub fn grade(prompt: &QualityPrompt, reply: &str) -> Grade {
    let text = normalize(extract_answer(reply));
    let (correct, answer) = match &prompt.expected {
        Expected::Number(want) => match final_number(&text) {
            Some(got) => (
                (got - want).abs() <= want.abs().max(1.0) * 1e-9,
                got.to_string(),
            ),
            None => (false, text),
        },
        Expected::Text(any) => (any.iter().any(|t| normalize(t) == text), text),
        Expected::Output(out) => (normalize(out) == text, text),
        // An object may span lines: look in all the text after the marker, then the reply.
        Expected::Json(want) => match after_marker(reply)
            .and_then(first_json_object)
            .or_else(|| first_json_object(reply))
        {
            Some(got) => (json_equal(&got, want), canonical_json(&got).to_string()),
            None => (false, text),
        },
    };
    Grade {
        correct,
        answer_hash: answer_hash(&answer),
        answer: crate::record::truncate_message(&answer, MAX_ANSWER_BYTES - '…'.len_utf8()),
    }
}

/// `v` with object keys sorted, strings normalized and whole numbers (up to 2^53) written
/// without a fraction: equal answers give equal text.
fn canonical_json(v: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value as V;
    match v {
        V::String(s) => V::String(normalize(s)),
        V::Number(n) => match n.as_f64() {
            Some(f) if f.fract() == 0.0 && f.abs() <= 9_007_199_254_740_992.0 => V::from(f as i64),
            _ => v.clone(),
        },
        V::Array(a) => V::Array(a.iter().map(canonical_json).collect()),
        V::Object(o) => {
            let sorted: std::collections::BTreeMap<&String, V> =
                o.iter().map(|(k, x)| (k, canonical_json(x))).collect();
            V::Object(sorted.into_iter().map(|(k, x)| (k.clone(), x)).collect())
        }
        _ => v.clone(),
    }
}

/// The number a normalized answer gives: the first number after its last `=` (so
/// `17 × 23 = 391` gives 391), else its first number.
fn final_number(answer: &str) -> Option<f64> {
    first_number(answer.rsplit('=').next().unwrap_or(answer))
}

/// The first number in `s` (an optional `-` or `−`, digits with `,` group separators, an
/// optional fraction).
fn first_number(s: &str) -> Option<f64> {
    let start = s.find(|c: char| c.is_ascii_digit())?;
    let neg = s[..start].ends_with(['-', '\u{2212}']);
    let mut num = String::new();
    for c in s[start..].chars() {
        match c {
            '0'..='9' | '.' => num.push(c),
            ',' => {}
            _ => break,
        }
    }
    let num = num.trim_end_matches('.');
    num.parse::<f64>().ok().map(|v| if neg { -v } else { v })
}

/// The first `{…}` of `s` that parses as a JSON object (text may follow it).
fn first_json_object(s: &str) -> Option<serde_json::Value> {
    s.match_indices('{').find_map(|(i, _)| {
        serde_json::Deserializer::from_str(&s[i..])
            .into_iter::<serde_json::Value>()
            .next()
            .and_then(Result::ok)
            .filter(serde_json::Value::is_object)
    })
}

/// JSON equality with numbers compared as `f64` and strings normalized.
fn json_equal(got: &serde_json::Value, want: &serde_json::Value) -> bool {
    use serde_json::Value as V;
    match (got, want) {
        (V::Number(a), V::Number(b)) => a.as_f64() == b.as_f64(),
        (V::String(a), V::String(b)) => normalize(a) == normalize(b),
        (V::Object(a), V::Object(b)) => {
            a.len() == b.len()
                && b.iter()
                    .all(|(k, wv)| a.get(k).is_some_and(|gv| json_equal(gv, wv)))
        }
        (V::Array(a), V::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| json_equal(x, y))
        }
        (a, b) => a == b,
    }
}

/// One sampled answer of one provider to one prompt: the row `latmesh compat` stores and
/// the quality-parity analysis reads.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QualitySample {
    /// Provider name from the campaign file.
    pub provider: String,
    /// [`QualityPrompt::id`].
    pub prompt_id: String,
    /// 0-based sample index (several samples per prompt at temperature 0).
    pub sample: u32,
    /// How the request ended; only `ok` samples are graded.
    pub outcome: Outcome,
    /// The grade; `None` when the request did not end `ok`.
    pub correct: Option<bool>,
    /// [`Grade::answer`]: the normalized final answer (for number and JSON prompts the value
    /// read, [`grade`]), cut to [`MAX_ANSWER_BYTES`] and scrubbed of secrets; empty when not
    /// `ok`.
    pub answer: String,
    /// [`Grade::answer_hash`]: [`answer_hash`] of the whole answer (before the cut); empty
    /// when not `ok`.
    pub answer_hash: String,
    /// Output tokens of the reply (the record's `output_tokens`).
    pub output_tokens: u32,
    /// The `model` the provider answered with, when sent.
    pub answered_model: Option<String>,
}

/// A stable 16-hex-digit hash of a normalized answer (the first 8 bytes of its SHA-256).
pub fn answer_hash(normalized: &str) -> String {
    hex::encode(&Sha256::digest(normalized.as_bytes())[..8])
}

/// The fingerprint of one provider's answers: per prompt (sorted by id), its most frequent
/// `answer_hash` over `ok` samples (ties: the smaller hash), hashed together with the prompt
/// ids; 16 hex digits. `None` without `ok` samples. Two runs of an unchanged model at
/// temperature 0 give the same fingerprint unless its modal answer to a prompt changed.
pub fn answers_fingerprint<'a>(
    samples: impl IntoIterator<Item = &'a QualitySample>,
) -> Option<String> {
    let modal = modal_answers(samples);
    if modal.is_empty() {
        return None;
    }
    let mut h = Sha256::new();
    for (id, hash) in &modal {
        h.update(id.as_bytes());
        h.update(b"=");
        h.update(hash.as_bytes());
        h.update(b"\n");
    }
    Some(hex::encode(&h.finalize()[..8]))
}

/// Per prompt id (sorted), the most frequent `answer_hash` among `ok` samples (ties: the
/// smaller hash).
pub fn modal_answers<'a>(
    samples: impl IntoIterator<Item = &'a QualitySample>,
) -> std::collections::BTreeMap<String, String> {
    use std::collections::BTreeMap;
    let mut counts: BTreeMap<&str, BTreeMap<&str, u32>> = BTreeMap::new();
    for s in samples {
        if s.outcome == Outcome::Ok && !s.answer_hash.is_empty() {
            *counts
                .entry(&s.prompt_id)
                .or_default()
                .entry(&s.answer_hash)
                .or_default() += 1;
        }
    }
    counts
        .into_iter()
        .filter_map(|(id, hs)| {
            let best = hs
                .iter()
                .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))?
                .0
                .to_string();
            Some((id.to_string(), best))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_set_parses_and_each_expected_answer_grades_correct() {
        let set = prompt_set();
        assert_eq!(set.set, QUALITY_SET_VERSION);
        assert!(!set.prompts.is_empty());
        let mut ids = std::collections::BTreeSet::new();
        for p in &set.prompts {
            assert!(ids.insert(&p.id), "duplicate id {}", p.id);
            let reply = match &p.expected {
                Expected::Number(n) => format!("Working it out.\nAnswer: {n}"),
                Expected::Text(t) => format!("Answer: {}", t[0]),
                Expected::Json(v) => format!("Answer: {v}"),
                Expected::Output(o) => format!("It prints:\nAnswer: {o}"),
            };
            assert!(grade(p, &reply).correct, "{}: {reply}", p.id);
            assert!(!grade(p, "Answer: I do not know").correct, "{}", p.id);
            assert_eq!(find_by_text(&p.prompt).map(|q| &q.id), Some(&p.id));
        }
    }

    fn prompt(id: &str) -> &'static QualityPrompt {
        prompt_set().prompts.iter().find(|p| p.id == id).unwrap()
    }

    #[test]
    fn the_set_has_eight_prompts_per_category_with_their_ids() {
        let set = prompt_set();
        assert_eq!(set.prompts.len(), 32);
        for (cat, prefix) in [
            (Category::Arithmetic, "arith"),
            (Category::Fact, "fact"),
            (Category::Extraction, "extract"),
            (Category::Code, "code"),
        ] {
            let ids: Vec<&str> = set
                .prompts
                .iter()
                .filter(|p| p.category == cat)
                .map(|p| p.id.as_str())
                .collect();
            let want: Vec<String> = (1..=8).map(|i| format!("{prefix}-{i:02}")).collect();
            assert_eq!(ids, want, "{cat:?}");
        }
        for p in &set.prompts {
            let kind_fits = match (&p.category, &p.expected) {
                (Category::Arithmetic, Expected::Number(n)) => n.fract() == 0.0,
                (Category::Fact, Expected::Text(t)) => !t.is_empty(),
                (Category::Extraction, Expected::Json(v)) => {
                    v.as_object().is_some_and(|o| (2..=3).contains(&o.len()))
                }
                (Category::Code, Expected::Output(o)) => !o.contains('\n'),
                _ => false,
            };
            assert!(kind_fits, "{}: {:?}", p.id, p.expected);
            let lower = p.prompt.to_lowercase();
            for word in ["latmesh", "test", "probe"] {
                assert!(!lower.contains(word), "{} mentions {word}", p.id);
            }
        }
    }

    #[test]
    fn a_wrong_answer_grades_wrong_in_every_category() {
        for (id, reply) in [
            ("arith-01", "17 × 23 = 381\nAnswer: 381"),
            ("arith-01", "Answer: 3910"),
            ("arith-08", "Answer: -66"),
            ("fact-01", "Answer: Sydney"),
            ("fact-03", "Answer: 8 sides"),
            (
                "extract-01",
                "Answer: {\"name\": \"Maria Lopez\", \"age\": 43}",
            ),
            (
                "extract-01",
                "Answer: {\"name\": \"Maria Lopez\", \"age\": \"34\"}",
            ),
            (
                "extract-01",
                "Answer: {\"name\": \"Maria Lopez\", \"age\": 34, \"week\": \"last\"}",
            ),
            (
                "extract-05",
                "Answer: {\"train\": 518, \"destination\": \"Denver\", \"delayed\": true}",
            ),
            ("code-01", "Answer: 13"),
            ("code-05", "Answer: kiwicherry"),
        ] {
            let g = grade(prompt(id), reply);
            assert!(!g.correct, "{id}: {reply}");
        }
    }

    #[test]
    fn json_keys_in_another_order_and_numbers_as_floats_grade_right() {
        let g = grade(
            prompt("extract-01"),
            "Here it is.\nAnswer: {\"age\": 34.0, \"name\": \"maria lopez\"}",
        );
        assert!(g.correct, "{g:?}");
        // Over several lines, in a fence, with text after it.
        let reply =
            "Answer:\n```json\n{\n  \"temperature_c\": -7.0,\n  \"city\": \"Oslo\"\n}\n```\nDone.";
        assert!(grade(prompt("extract-06"), reply).correct);
        // No marker: the reply's first object.
        assert!(
            grade(
                prompt("extract-02"),
                "{\"year\": 2019, \"city\": \"Lisbon\"}"
            )
            .correct
        );
        // The answer kept is the object read, in one form however it was written.
        let a = grade(
            prompt("extract-01"),
            "Answer: {\"age\": 34.0, \"name\": \"Maria Lopez\"}",
        );
        let b = grade(
            prompt("extract-01"),
            "Answer:\n```json\n{\n  \"name\": \"Maria  Lopez\",\n  \"age\": 34\n}\n```",
        );
        assert_eq!(a.answer, r#"{"age":34,"name":"maria lopez"}"#);
        assert_eq!((&a.answer, &a.answer_hash), (&b.answer, &b.answer_hash));
        assert_eq!(a.answer_hash, answer_hash(&a.answer));
        let wrong = grade(
            prompt("extract-01"),
            "Answer: {\"name\": \"Maria Lopez\", \"age\": 43}",
        );
        assert_ne!(wrong.answer_hash, a.answer_hash);
        // A draft before the final object: the one after the marker counts.
        let reply = "Draft {\"city\": \"Porto\", \"year\": 2019}\nAnswer: {\"city\": \"Lisbon\", \"year\": 2019}";
        assert!(grade(prompt("extract-02"), reply).correct);
    }

    #[test]
    fn markdown_bold_and_backticks_grade_right() {
        for (id, reply) in [
            ("arith-01", "**Answer:** 391"),
            ("arith-01", "**Answer: 391**"),
            ("arith-01", "Answer: `391`."),
            ("arith-01", "Answer: 17 × 23 = **391**"),
            ("arith-06", "Answer: 372 km"),
            ("arith-03", "Answer: 36."),
            ("fact-01", "**Answer:** *Canberra*"),
            ("fact-02", "Answer: `Au`"),
            ("fact-03", "Answer: **Six**"),
            ("fact-08", "Answer: H₂O"),
            (
                "extract-04",
                "Answer: `{\"email\": \"tom.becker@example.com\", \"name\": \"Tom Becker\"}`",
            ),
            ("code-08", "Answer: `12-8-10`"),
            (
                "code-05",
                "The program prints:\n\nAnswer:\n```\nfigcherry\n```\n",
            ),
            ("code-02", "answer: __18__"),
        ] {
            let g = grade(prompt(id), reply);
            assert!(g.correct, "{id}: {reply:?} → {g:?}");
        }
        // A number prompt keeps the number read: the same answer, the same hash.
        let a = grade(prompt("arith-06"), "Answer: 372 km");
        let b = grade(prompt("arith-06"), "84 × 3 + 60 × 2 = **372**");
        assert_eq!((a.answer.as_str(), a.correct), ("372", true));
        assert_eq!((&a.answer, &a.answer_hash), (&b.answer, &b.answer_hash));
        let unread = grade(prompt("arith-06"), "Answer: I do not know.");
        assert_eq!(
            (unread.answer.as_str(), unread.correct),
            ("i do not know", false)
        );
        // Negative numbers, with either minus sign.
        let neg = QualityPrompt {
            id: "n".into(),
            category: Category::Arithmetic,
            prompt: String::new(),
            expected: Expected::Number(-7.0),
        };
        assert!(grade(&neg, "Answer: −7").correct);
        assert!(grade(&neg, "Answer: -7").correct);
        assert!(!grade(&neg, "Answer: 7").correct);
    }

    #[test]
    fn extraction_and_normalization() {
        assert_eq!(extract_answer("blah\nanswer: **391**."), "**391**.");
        assert_eq!(normalize("**391**."), "391");
        assert_eq!(extract_answer("first\n\n  last line \n"), "last line");
        // The marker's line, else the next line with text; text after it is not the answer.
        assert_eq!(extract_answer("Answer: 391\n\nHope this helps!"), "391");
        assert_eq!(extract_answer("Answer:\n\n**391**\nmore"), "**391**");
        assert_eq!(extract_answer("x\n```\n31\n```\n"), "31");
        assert_eq!(extract_answer("Answer:"), "");
        assert_eq!(first_number("about 1,234.5 units"), Some(1234.5));
        assert_eq!(first_number("-7"), Some(-7.0));
        assert_eq!(final_number("17 × 23 = 391"), Some(391.0));
        assert_eq!(first_number("none"), None);
        // The kept answer is cut to MAX_ANSWER_BYTES.
        let long = format!("Answer: {}", "é".repeat(100));
        let g = grade(prompt("fact-01"), &long);
        assert!(!g.correct);
        assert!(
            g.answer.len() <= MAX_ANSWER_BYTES && g.answer.ends_with('…'),
            "{}",
            g.answer
        );
    }
}
