//! What an answer says when the request asks for something a client can check: the
//! simulator's ground truth for compatibility checks and quality parity.
//!
//! Without a script an answer is filler ([`crate::text::token_text`]), as in every latency
//! campaign. A request gets a [`Script`] (its visible content, token by token) when:
//! 1. it declares tools (and the profile honours them): one call of the first tool, arguments
//!    [`TOOL_ARGUMENTS`] in the fragments [`TOOL_ARGUMENT_FRAGMENTS`];
//! 2. its last user message is a quality prompt ([`latmesh_core::quality::find_by_text`]),
//!    alone or with the set's instruction before or after it: a few filler words, then a
//!    last line `Answer: <expected>` ([`expected_text`]);
//! 3. its last user message is [`STOP_PROMPT`]: `1 2 3 … 30`; [`PLAIN_PROMPT`] or
//!    [`FOLLOW_UP_PROMPT`] (without JSON mode): [`GREETING`];
//! 4. it asks for JSON mode: [`JSON_ANSWER`] for [`JSON_PROMPT`], else a small JSON object of
//!    filler words;
//! 5. it carries stop sequences: the filler it would get anyway.
//!
//! Stop sequences then cut the content before the first occurrence of any of them
//! ([`Script::stop_sequence`] says which one matched). Tool-call arguments are never cut.

use latmesh_core::compat::{FOLLOW_UP_PROMPT, JSON_PROMPT, PLAIN_PROMPT, STOP_PROMPT};
use latmesh_core::quality::{self, Expected};

use crate::plan::FinishReason;
use crate::profile::ProviderProfile;
use crate::request::SimRequest;
use crate::text::{self, TokenKind};
use crate::truth;

/// The arguments of the simulated tool call.
pub const TOOL_ARGUMENTS: &str = r#"{"city":"Paris"}"#;

/// [`TOOL_ARGUMENTS`] as streamed: one fragment per token event.
pub const TOOL_ARGUMENT_FRAGMENTS: [&str; 3] = [r#"{"city":"#, r#""Paris""#, "}"];

/// The JSON-mode answer to [`JSON_PROMPT`].
pub const JSON_ANSWER: &str = r#"{"city":"Paris","country":"France"}"#;

/// The answer to [`PLAIN_PROMPT`] and [`FOLLOW_UP_PROMPT`] (five words).
pub const GREETING: &str = "Hello there, nice to meet!";

/// Fewest filler words before a quality answer's `Answer:` line (at full length).
pub const ORACLE_FILLER_MIN: u32 = 10;
/// Most filler words before a quality answer's `Answer:` line (at full length).
pub const ORACLE_FILLER_MAX: u32 = 20;

/// A scripted answer's visible content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Script {
    /// The content tokens, in order (their concatenation is the answer's text; for a tool
    /// call, its arguments).
    pub tokens: Vec<String>,
    /// The stop sequence the content was cut before, when one matched.
    pub stop_sequence: Option<String>,
    /// The name of the tool called, when the answer is a tool call.
    pub tool: Option<String>,
}

impl Script {
    /// The finish reason when the cap does not cut the answer.
    pub fn finish(&self) -> FinishReason {
        if self.tool.is_some() {
            FinishReason::ToolCalls
        } else if self.stop_sequence.is_some() {
            FinishReason::StopSequence
        } else {
            FinishReason::Stop
        }
    }

    /// The text of tokens `first..first + count` (past the end: what there is).
    pub fn text(&self, first: u32, count: u32) -> String {
        let end = (first as usize + count as usize).min(self.tokens.len());
        let first = (first as usize).min(end);
        self.tokens[first..end].concat()
    }

    /// The whole content.
    pub fn content(&self) -> String {
        self.tokens.concat()
    }
}

/// The canonical text of an expected answer: a number without a `.0`, the first accepted
/// text, compact JSON, the program output.
pub fn expected_text(expected: &Expected) -> String {
    match expected {
        Expected::Number(n) => number_text(*n),
        Expected::Text(any) => any.first().cloned().unwrap_or_default(),
        Expected::Json(v) => v.to_string(),
        Expected::Output(out) => out.clone(),
    }
}

/// A wrong answer in place of `expected`'s (what a quantized profile answers, see
/// [`ProviderProfile::quantized_wrong_share`]): the number plus one; the first text
/// plus one when it is an integer, else reversed; the JSON object with its first number
/// plus one (else its first string changed likewise, else its first boolean flipped); the
/// output changed like a text. Never graded right ([`latmesh_core::quality::grade`]).
pub fn wrong_text(expected: &Expected) -> String {
    match expected {
        Expected::Number(n) => number_text(n + 1.0),
        Expected::Text(any) => {
            let first = any.first().map_or("", String::as_str);
            let wrong = other_text(first);
            if any
                .iter()
                .any(|t| quality::normalize(t) == quality::normalize(&wrong))
            {
                format!("{wrong} (other)")
            } else {
                wrong
            }
        }
        Expected::Json(v) => wrong_json(v).to_string(),
        Expected::Output(out) => other_text(out),
    }
}

/// `s` plus one when it is an integer, else reversed (with `x` appended when reversing
/// changes nothing).
fn other_text(s: &str) -> String {
    if let Ok(n) = s.trim().parse::<i64>() {
        return n.saturating_add(1).to_string();
    }
    let rev: String = s.chars().rev().collect();
    if quality::normalize(&rev) == quality::normalize(s) {
        format!("{s}x")
    } else {
        rev
    }
}

/// `v` with its first number plus one, else its first string changed ([`other_text`]),
/// else its first boolean flipped, else a key added.
fn wrong_json(v: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value as V;
    let mut out = v.clone();
    let Some(map) = out.as_object_mut() else {
        return serde_json::json!({"wrong": true});
    };
    if let Some(n) = map.values_mut().find(|x| x.is_number()) {
        *n = match n.as_i64() {
            Some(i) => serde_json::json!(i.saturating_add(1)),
            None => serde_json::json!(n.as_f64().unwrap_or(0.0) + 1.0),
        };
    } else if let Some(V::String(s)) = map.values_mut().find(|x| x.is_string()) {
        *s = other_text(s);
    } else if let Some(V::Bool(b)) = map.values_mut().find(|x| x.is_boolean()) {
        *b = !*b;
    } else {
        map.insert("wrong".into(), V::Bool(true));
    }
    out
}

fn number_text(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        format!("{n}")
    }
}

/// The script of `req` on `profile` (see the [module documentation](self)), or `None` for
/// plain filler. `natural_tokens` is the filler's length without a script, `answer_key` and
/// `cjk` fix its words. A quality prompt's filler is scaled by the profile's
/// `quantized_length_factor`, and its answer is [`wrong_text`] when
/// [`truth::quantized_answers_wrong`] says so.
pub fn script(
    req: &SimRequest,
    profile: &ProviderProfile,
    natural_tokens: u32,
    answer_key: u64,
    cjk: bool,
) -> Option<Script> {
    if let Some(name) = &req.tool {
        return Some(Script {
            tokens: TOOL_ARGUMENT_FRAGMENTS.map(str::to_string).to_vec(),
            stop_sequence: None,
            tool: Some(name.clone()),
        });
    }
    let filler = |n: u32| -> Vec<String> {
        (0..n)
            .map(|i| text::token_text(answer_key, TokenKind::Content, i, cjk))
            .collect()
    };
    let last = req.last_user.as_deref().map(str::trim).unwrap_or("");
    let tokens = if let Some(prompt) = quality_prompt(last) {
        let span = u64::from(ORACLE_FILLER_MAX - ORACLE_FILLER_MIN) + 1;
        let words = ORACLE_FILLER_MIN + (answer_key % span) as u32;
        let words = (f64::from(words) * profile.quantized_length_factor)
            .round()
            .max(1.0) as u32;
        let mut t: Vec<String> = (0..words)
            .map(|i| text::token_text(answer_key, TokenKind::Content, i, false))
            .collect();
        let wrong = truth::quantized_answers_wrong(profile.quantized_wrong_share, &prompt.id);
        let answer = if wrong {
            wrong_text(&prompt.expected)
        } else {
            expected_text(&prompt.expected)
        };
        t.extend(text::split_tokens(&format!(
            ".\n{} {answer}",
            quality::ANSWER_MARKER
        )));
        t
    } else if !req.json_mode && (last == PLAIN_PROMPT.trim() || last == FOLLOW_UP_PROMPT.trim()) {
        // A greeting is short, as a model's is: [`GREETING`] (the checks that send these
        // prompts need some answer, not a long one).
        text::split_tokens(GREETING)
    } else if last == STOP_PROMPT.trim() {
        let count: Vec<String> = (1..=30).map(|i| i.to_string()).collect();
        text::split_tokens(&count.join(" "))
    } else if req.json_mode {
        let body = if last == JSON_PROMPT.trim() {
            JSON_ANSWER.to_string()
        } else {
            let words = 3 + (answer_key % 6) as u32;
            serde_json::json!({"answer": filler(words).concat()}).to_string()
        };
        text::split_tokens(&body)
    } else if !req.stop.is_empty() {
        filler(natural_tokens)
    } else {
        return None;
    };
    let mut s = Script {
        tokens,
        stop_sequence: None,
        tool: None,
    };
    cut_at_stop(&mut s, &req.stop);
    Some(s)
}

/// The quality prompt `user` asks: the set's prompt whose text it is, alone or with the
/// set's instruction before or after it (a client may send the instruction in the user
/// message instead of the system prompt).
fn quality_prompt(user: &str) -> Option<&'static quality::QualityPrompt> {
    quality::find_by_text(user).or_else(|| {
        let instruction = quality::prompt_set().instruction.trim();
        let rest = user.trim();
        let rest = rest
            .strip_prefix(instruction)
            .or_else(|| rest.strip_suffix(instruction))?;
        quality::find_by_text(rest)
    })
}

/// Cuts `s` before the earliest occurrence of any of `stops` (on a tie, the first listed),
/// keeping the part of the token it starts in that comes before it.
fn cut_at_stop(s: &mut Script, stops: &[String]) {
    let text = s.content();
    let Some((at, stop)) = stops
        .iter()
        .filter_map(|st| text.find(st.as_str()).map(|i| (i, st)))
        .min_by_key(|(i, _)| *i)
    else {
        return;
    };
    let mut kept = Vec::new();
    let mut start = 0;
    for t in &s.tokens {
        if start + t.len() <= at {
            kept.push(t.clone());
        } else {
            if at > start {
                kept.push(t[..at - start].to_string());
            }
            break;
        }
        start += t.len();
    }
    s.tokens = kept;
    s.stop_sequence = Some(stop.clone());
}

#[cfg(test)]
mod tests {
    use super::*;
    use latmesh_core::api::Api;
    use latmesh_core::quality::{grade, prompt_set};

    fn honest() -> ProviderProfile {
        ProviderProfile::default()
    }

    fn req(user: &str) -> SimRequest {
        SimRequest {
            api: Api::Chat,
            model: None,
            stream: true,
            max_tokens: None,
            include_usage: false,
            seed: None,
            thinking: crate::plan::Thinking::Default,
            parts: vec![user.to_string()],
            assistant_turns: Vec::new(),
            last_user: Some(user.to_string()),
            stop: Vec::new(),
            json_mode: false,
            tool: None,
            ignore_eos: false,
            min_tokens: 0,
        }
    }

    #[test]
    fn every_quality_prompt_is_answered_right_on_its_last_line() {
        for p in &prompt_set().prompts {
            for key in 0..5 {
                let s = script(&req(&p.prompt), &honest(), 99, key, false).unwrap();
                // The instruction in the user message, before or after: the same answer.
                let ins = &prompt_set().instruction;
                for user in [
                    format!("{ins}\n\n{}", p.prompt),
                    format!("{}\n{ins}", p.prompt),
                ] {
                    let with = script(&req(&user), &honest(), 99, key, false).unwrap();
                    assert_eq!(with, s, "{}", p.id);
                }
                let reply = s.content();
                assert!(grade(p, &reply).correct, "{}: {reply:?}", p.id);
                let last = reply.lines().last().unwrap();
                assert_eq!(last, format!("Answer: {}", expected_text(&p.expected)));
                let words = s.tokens.len() as u32;
                assert!(words > ORACLE_FILLER_MIN, "{}", p.id);
                assert_eq!(s.finish(), FinishReason::Stop);
            }
        }
        assert_eq!(number_text(391.0), "391");
        assert_eq!(number_text(-2.5), "-2.5");
    }

    #[test]
    fn quantized_profiles_answer_the_ground_truths_prompts_wrong_and_shorter() {
        let q = ProviderProfile {
            quantized_wrong_share: 0.5,
            quantized_length_factor: 0.5,
            ..ProviderProfile::default()
        };
        for p in &prompt_set().prompts {
            let wrong = wrong_text(&p.expected);
            assert!(
                !grade(p, &format!("Answer: {wrong}")).correct,
                "{}: {wrong}",
                p.id
            );
            let honest = script(&req(&p.prompt), &honest(), 9, 3, false).unwrap();
            let s = script(&req(&p.prompt), &q, 9, 3, false).unwrap();
            let want_wrong = truth::quantized_answers_wrong(0.5, &p.id);
            assert_eq!(grade(p, &s.content()).correct, !want_wrong, "{}", p.id);
            // Half the filler words (the Answer line's tokens may differ by one or two).
            let filler = |s: &Script| s.tokens.iter().position(|t| t == "\nAnswer").unwrap() - 1;
            let (h, f) = (filler(&honest), filler(&s));
            assert_eq!(f, (h as f64 * 0.5).round() as usize, "{}", p.id);
        }
        assert_eq!(wrong_text(&Expected::Number(391.0)), "392");
        assert_eq!(
            wrong_text(&Expected::Text(vec!["6".into(), "six".into()])),
            "7"
        );
        assert_eq!(
            wrong_text(&Expected::Text(vec!["Canberra".into()])),
            "arrebnaC"
        );
        assert_eq!(wrong_text(&Expected::Text(vec!["Anna".into()])), "Annax");
        assert_eq!(wrong_text(&Expected::Output("12-8-10".into())), "01-8-21");
        assert_eq!(
            wrong_text(&Expected::Json(
                serde_json::json!({"name": "Tom", "ok": true})
            )),
            r#"{"name":"moT","ok":true}"#
        );
    }

    #[test]
    fn stop_prompt_counts_and_stop_sequences_cut() {
        let s = script(&req(STOP_PROMPT), &honest(), 99, 1, false).unwrap();
        assert_eq!(
            s.content(),
            (1..=30)
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        );
        assert_eq!(s.tokens.len(), 30);
        let mut r = req(STOP_PROMPT);
        r.stop = vec!["12".into(), latmesh_core::compat::STOP_SEQUENCE.into()];
        let s = script(&r, &honest(), 99, 1, false).unwrap();
        assert_eq!(s.content(), "1 2 3 4 5 6 ");
        assert_eq!(s.stop_sequence.as_deref(), Some("7"));
        assert_eq!(s.finish(), FinishReason::StopSequence);
        // Filler with a stop sequence that never occurs: the natural length, finish stop.
        let mut r = req("hello");
        r.stop = vec!["\u{1}".into()];
        let s = script(&r, &honest(), 12, 3, false).unwrap();
        assert_eq!(s.tokens.len(), 12);
        assert_eq!(s.finish(), FinishReason::Stop);
        // No script at all for a plain prompt.
        assert_eq!(script(&req("hello"), &honest(), 12, 3, false), None);
    }

    #[test]
    fn json_mode_and_tools() {
        let mut r = req(JSON_PROMPT);
        r.json_mode = true;
        assert_eq!(
            script(&r, &honest(), 9, 1, false).unwrap().content(),
            JSON_ANSWER
        );
        let mut r = req("hello");
        r.json_mode = true;
        let v: serde_json::Value =
            serde_json::from_str(&script(&r, &honest(), 9, 1, false).unwrap().content()).unwrap();
        assert!(v["answer"].as_str().unwrap().len() > 3);
        r.tool = Some("get_weather".into());
        r.stop = vec!["Paris".into()];
        let s = script(&r, &honest(), 9, 1, false).unwrap();
        assert_eq!(s.content(), TOOL_ARGUMENTS);
        assert_eq!(s.tool.as_deref(), Some("get_weather"));
        assert_eq!(s.finish(), FinishReason::ToolCalls);
    }
}
