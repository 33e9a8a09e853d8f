//! Versioned prompt sets: JSON Lines files of prompts with stable ids.
//!
//! Each line: `{"id", "version", "class", "lang", "max_tokens_hint", "messages": [{"role",
//! "content"}]}`. latmesh ships `core/prompts/latmesh-prompts-v1.jsonl` (embedded in the
//! binaries as [`BUILTIN_NAME`]); a campaign may name its own file instead.
//!
//! Multi-turn scenarios send a follow-up user message for each turn after the first: the
//! scenario's own `follow_ups`, else [`builtin_follow_ups`] in the prompt's language.

use serde::{Deserialize, Serialize};

/// Name of the prompt set embedded in the binaries.
pub const BUILTIN_NAME: &str = "latmesh-prompts-v1";

const BUILTIN_JSONL: &str = include_str!("../prompts/latmesh-prompts-v1.jsonl");

/// One chat message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// The text.
    pub content: String,
    /// An assistant message's reasoning, sent back in a multi-turn history to providers that
    /// require it (`pass_reasoning = true`). Absent from the JSON when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// An Anthropic assistant message's thinking blocks, in order, sent back before its text
    /// as the Messages API wants them (`api = "anthropic"` with `pass_reasoning = true`).
    /// Conversation state, never in the message's JSON: only the Anthropic request body sends
    /// them (a Chat Completions provider later in a failover chain never sees them).
    #[serde(skip)]
    pub thinking_blocks: Option<Vec<ThinkingBlock>>,
    /// An assistant message's reasoning items (Responses API: `{"type": "reasoning",
    /// "summary", "content", "encrypted_content"}` as the answer carried them), sent back
    /// before it when the provider has `pass_reasoning = true`. Conversation state, never in
    /// the message's JSON: only the Responses request body sends them, as input items (a
    /// Chat Completions provider later in a failover chain never sees them).
    #[serde(skip)]
    pub reasoning_items: Vec<serde_json::Value>,
}

impl Message {
    /// A message with `role` and `content` and no reasoning.
    pub fn new(role: &str, content: impl Into<String>) -> Message {
        Message {
            role: role.to_string(),
            content: content.into(),
            reasoning_content: None,
            thinking_blocks: None,
            reasoning_items: Vec::new(),
        }
    }
}

/// One thinking block of an Anthropic Messages answer, kept whole so it can be sent back in a
/// later turn: the API checks `signature` (and decrypts `data`), so neither may be changed.
/// Its JSON is the API's own content block (`{"type":"thinking","thinking","signature"}`,
/// `{"type":"redacted_thinking","data"}`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ThinkingBlock {
    /// Readable thinking and the signature that authenticates it (`""` when the provider
    /// sent none).
    Thinking {
        /// The thinking text (`thinking_delta`s concatenated).
        thinking: String,
        /// The signature (`signature_delta`s concatenated).
        signature: String,
    },
    /// Thinking the provider encrypted.
    RedactedThinking {
        /// The encrypted thinking, opaque.
        data: String,
    },
}

/// Follow-up user messages of turns 2, 3, … of a multi-turn conversation, in English: generic
/// enough to follow any prompt of the builtin set, one per turn (at most 10 turns).
pub const FOLLOW_UPS_EN: [&str; 9] = [
    "Thanks. Can you explain that in more detail, step by step?",
    "Give one concrete example that illustrates your answer.",
    "What is the most common mistake people make about this?",
    "Summarize everything so far in three short bullet points.",
    "How would you explain this to a twelve-year-old?",
    "What are the limits or exceptions of what you said?",
    "Suggest one follow-up question worth asking about this topic.",
    "Rewrite your first answer more concisely.",
    "Finally, state the key takeaway in one sentence.",
];

/// Follow-up user messages of turns 2, 3, … in Chinese (same meaning as [`FOLLOW_UPS_EN`]).
pub const FOLLOW_UPS_ZH: [&str; 9] = [
    "谢谢。能一步一步更详细地解释一下吗？",
    "请举一个具体的例子来说明你的回答。",
    "关于这个问题，人们最常犯的错误是什么？",
    "请用三个简短的要点总结到目前为止的内容。",
    "你会怎样向一个十二岁的孩子解释这个？",
    "你刚才说的内容有哪些局限或例外？",
    "请提出一个值得就此话题继续追问的问题。",
    "请把你的第一个回答改写得更简洁。",
    "最后，请用一句话说明最重要的结论。",
];

/// The builtin follow-ups for `lang` (`zh…` → Chinese, anything else → English).
pub fn builtin_follow_ups(lang: &str) -> &'static [&'static str] {
    if lang.starts_with("zh") {
        &FOLLOW_UPS_ZH
    } else {
        &FOLLOW_UPS_EN
    }
}

/// The language of `messages` when a prompt does not say: `zh` when CJK ideographs are more
/// than a tenth of the letters (code with Chinese comments counts as Chinese), else `en`.
pub fn guess_lang(messages: &[Message]) -> &'static str {
    let (mut cjk, mut other) = (0usize, 0usize);
    for c in messages.iter().flat_map(|m| m.content.chars()) {
        if ('\u{4E00}'..='\u{9FFF}').contains(&c) || ('\u{3400}'..='\u{4DBF}').contains(&c) {
            cjk += 1;
        } else if c.is_alphabetic() {
            other += 1;
        }
    }
    if cjk * 9 > other { "zh" } else { "en" }
}

/// One prompt of a set.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Prompt {
    /// Stable id, never reused (e.g. `short-qa-en-001`).
    pub id: String,
    /// Version of the prompt text.
    #[serde(default = "one")]
    pub version: u32,
    /// Class: `short-qa`, `long-in`, `long-out`, `code`, or a user's own.
    #[serde(default)]
    pub class: String,
    /// Language tag (`en`, `zh`).
    #[serde(default)]
    pub lang: String,
    /// The messages sent.
    pub messages: Vec<Message>,
}

fn one() -> u32 {
    1
}

/// Longest prompt id, bytes: every record carries its prompt's id (the coordinator refuses
/// a record whose texts are longer than its own, larger, limit).
pub const MAX_PROMPT_ID_BYTES: usize = 256;

/// A loaded prompt set.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PromptSet {
    /// Set name (the builtin's name, or the file stem).
    pub name: String,
    /// Prompts in file order.
    pub prompts: Vec<Prompt>,
}

/// Errors loading a prompt set.
#[derive(Debug, thiserror::Error)]
pub enum PromptError {
    /// A line is not a valid prompt.
    #[error("{source_name}:{line}: {message}")]
    Line {
        /// File name or builtin name.
        source_name: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// The file could not be read.
    #[error("cannot read prompt set {path}: {error}")]
    Io {
        /// The path.
        path: String,
        /// The I/O error (shown in this error's message, so not a `source`).
        error: std::io::Error,
    },
}

impl PromptSet {
    /// The embedded `latmesh-prompts-v1` set.
    pub fn builtin() -> PromptSet {
        PromptSet::parse(BUILTIN_NAME, BUILTIN_JSONL)
            .expect("the embedded prompt set is valid (tested)")
    }

    /// Reads a JSONL prompt set from `path`.
    ///
    /// # Errors
    /// [`PromptError::Io`] if unreadable, [`PromptError::Line`] naming the first bad line.
    pub fn load(path: &std::path::Path) -> Result<PromptSet, PromptError> {
        let text = std::fs::read_to_string(path).map_err(|error| PromptError::Io {
            path: path.display().to_string(),
            error,
        })?;
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        PromptSet::parse(&name, &text)
    }

    /// Parses JSONL text; blank lines are skipped; ids must be unique, at most
    /// [`MAX_PROMPT_ID_BYTES`], and messages non-empty.
    ///
    /// # Errors
    /// [`PromptError::Line`] naming the first bad line.
    pub fn parse(name: &str, text: &str) -> Result<PromptSet, PromptError> {
        let mut prompts: Vec<Prompt> = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let err = |message: String| PromptError::Line {
                source_name: name.to_string(),
                line: i + 1,
                message,
            };
            if line.trim().is_empty() {
                continue;
            }
            let p: Prompt = serde_json::from_str(line)
                .map_err(|e| err(crate::suggest::annotate_serde(&e.to_string())))?;
            if p.id.trim().is_empty() {
                return Err(err("empty id".into()));
            }
            if p.id.len() > MAX_PROMPT_ID_BYTES {
                return Err(err(format!(
                    "id of {} bytes is longer than {MAX_PROMPT_ID_BYTES} (every record carries it)",
                    p.id.len()
                )));
            }
            if p.messages.is_empty() {
                return Err(err(format!("prompt {:?} has no messages", p.id)));
            }
            if prompts.iter().any(|q| q.id == p.id) {
                return Err(err(format!("duplicate id {:?}", p.id)));
            }
            prompts.push(p);
        }
        Ok(PromptSet {
            name: name.to_string(),
            prompts,
        })
    }

    /// Prompts whose id matches `pattern` (`*` matches any run of characters), in set order.
    pub fn select(&self, pattern: &str) -> Vec<&Prompt> {
        self.prompts
            .iter()
            .filter(|p| wildcard_match(pattern, &p.id))
            .collect()
    }
}

/// Matches `text` against `pattern`, where `*` matches any (possibly empty) run of characters.
pub fn wildcard_match(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_set_has_the_four_classes_in_two_languages() {
        let set = PromptSet::builtin();
        for class in ["short-qa", "long-in", "long-out", "code"] {
            let n = set.prompts.iter().filter(|p| p.class == class).count();
            assert!(n >= 4, "class {class} has {n} prompts");
        }
        assert!(set.prompts.iter().any(|p| p.lang == "zh"));
        let long = set.select("long-in-en-*");
        assert!(
            long.iter()
                .all(|p| p.messages.iter().map(|m| m.content.len()).sum::<usize>() > 5_000)
        );
    }

    #[test]
    fn wildcards() {
        assert!(wildcard_match("short-*", "short-qa-en-001"));
        assert!(wildcard_match("*-zh-*", "code-zh-001"));
        assert!(wildcard_match("exact", "exact"));
        assert!(!wildcard_match("exact", "exactly"));
        assert!(!wildcard_match("a*b", "ab-c"));
        assert!(wildcard_match("a*b*c", "abc"));
        assert!(!wildcard_match("ab*ba", "aba"));
    }

    #[test]
    fn reasoning_content_is_optional_in_json() {
        let m: Message = serde_json::from_str(r#"{"role":"user","content":"hi"}"#).unwrap();
        assert_eq!(m, Message::new("user", "hi"));
        assert_eq!(
            serde_json::to_string(&m).unwrap(),
            r#"{"role":"user","content":"hi"}"#
        );
        let a = Message {
            reasoning_content: Some("think".into()),
            ..Message::new("assistant", "answer")
        };
        assert_eq!(
            serde_json::to_string(&a).unwrap(),
            r#"{"role":"assistant","content":"answer","reasoning_content":"think"}"#
        );
        let t = Message {
            thinking_blocks: Some(vec![
                ThinkingBlock::Thinking {
                    thinking: "t".into(),
                    signature: "s".into(),
                },
                ThinkingBlock::RedactedThinking { data: "d".into() },
            ]),
            reasoning_items: vec![serde_json::json!({"type": "reasoning", "summary": []})],
            ..Message::new("assistant", "answer")
        };
        // Conversation state of one API is never serialized with the message (the chat body
        // serializes messages as they are).
        assert_eq!(
            serde_json::to_string(&t).unwrap(),
            r#"{"role":"assistant","content":"answer"}"#
        );
        let block = serde_json::to_string(&t.thinking_blocks.as_ref().unwrap()[0]).unwrap();
        assert_eq!(
            block,
            r#"{"type":"thinking","thinking":"t","signature":"s"}"#
        );
    }

    #[test]
    fn follow_ups_follow_the_language() {
        assert_eq!(builtin_follow_ups("zh")[0], FOLLOW_UPS_ZH[0]);
        assert_eq!(builtin_follow_ups("en")[0], FOLLOW_UPS_EN[0]);
        assert_eq!(builtin_follow_ups("")[0], FOLLOW_UPS_EN[0]);
        let set = PromptSet::builtin();
        for p in &set.prompts {
            assert_eq!(guess_lang(&p.messages), p.lang, "{}", p.id);
        }
    }

    #[test]
    fn bad_lines_are_named() {
        let err = PromptSet::parse(
            "x",
            "{\"id\":\"a\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}\n{oops}\n",
        )
        .unwrap_err();
        assert!(err.to_string().starts_with("x:2:"), "{err}");
        let dup = "{\"id\":\"a\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}\n";
        let err = PromptSet::parse("x", &dup.repeat(2)).unwrap_err();
        assert!(err.to_string().contains("duplicate id"), "{err}");
        let long = format!(
            "{{\"id\":\"{}\",\"messages\":[{{\"role\":\"user\",\"content\":\"hi\"}}]}}\n",
            "p".repeat(MAX_PROMPT_ID_BYTES + 1)
        );
        let err = PromptSet::parse("x", &long).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("x:1: id of 257 bytes is longer than 256"),
            "{err}"
        );
    }
}
