//! Reasoning inside `content` between declared tags (`RequestShape.reasoning_tags`, e.g.
//! `<think>` … `</think>`): a model served without a reasoning parser streams its thinking
//! as content. [`ThinkTags`] splits the content of each payload, incrementally, into
//! reasoning and answer (docs/metrics.md, "Reasoning inside content").
//!
//! The rules, as vLLM's DeepSeek-R1 reasoning parser reads such output:
//! * the opening tag is implied at the start: DeepSeek-R1's chat template puts `<think>` in
//!   the prompt, so the output often begins with the thinking itself and only closes it.
//!   An opening tag at the start (after any whitespace) is consumed, not shown;
//! * everything up to the first closing tag is reasoning; a stream that never closes it is
//!   all reasoning (no content, no TTFC);
//! * whitespace right after the closing tag separates thinking from answer: it belongs to
//!   neither text, and a payload carrying only that counts as a reasoning payload (its
//!   tokens were generated); the answer, and TTFC, start at the first other character;
//! * after that everything is content, tags included;
//! * a response in which neither tag ever appears was not thinking at all (thinking switched
//!   off, a model that answered directly): at its end, what was split as reasoning is the
//!   answer ([`ThinkTags::saw_no_tag`]; the measurement moves it, TTFC at its first payload);
//! * a tag may be split across payloads: the text that may be the start of a tag is held
//!   until the next payload tells, and then belongs to that payload. A payload whose text
//!   is all held still counts as a reasoning payload.

use latmesh_core::api::ReasoningTags;

/// Where in the content the stream is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Reasoning, before any text but whitespace (an opening tag here is consumed).
    Start,
    /// Reasoning, after the start.
    Thinking,
    /// After the closing tag, only whitespace so far.
    Separator,
    /// The answer.
    Answer,
}

/// One payload's content, split.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Split<'a> {
    /// Reasoning text (tags and the separator left out).
    pub reasoning: &'a str,
    /// Answer text.
    pub content: &'a str,
    /// The payload carried reasoning tokens (text, a tag, a held tag prefix, or separator
    /// whitespace), even when `reasoning` is empty.
    pub reasoning_payload: bool,
}

/// The splitter of one response's content. No allocation once its buffers have grown to
/// the longest payload.
#[derive(Clone, Debug)]
pub struct ThinkTags {
    open: String,
    close: String,
    mode: Mode,
    /// Text held back: it may be the start of a tag.
    held: String,
    /// Scratch: the held text and the payload's, joined.
    joined: String,
    reasoning: String,
    /// An opening or closing tag was seen.
    saw_tag: bool,
}

impl ThinkTags {
    /// A splitter for `tags`; `None` when the closing tag is empty (nothing to split on).
    pub fn new(tags: &ReasoningTags) -> Option<ThinkTags> {
        (!tags.close.is_empty()).then(|| ThinkTags {
            open: tags.open.clone(),
            close: tags.close.clone(),
            mode: Mode::Start,
            held: String::new(),
            joined: String::new(),
            reasoning: String::new(),
            saw_tag: false,
        })
    }

    /// Splits the next payload's `content`.
    pub fn split<'s>(&'s mut self, content: &'s str) -> Split<'s> {
        if self.mode == Mode::Answer {
            return Split {
                content,
                ..Split::default()
            };
        }
        self.joined.clear();
        self.joined.push_str(&self.held);
        self.joined.push_str(content);
        self.held.clear();
        self.reasoning.clear();
        let text = self.joined.as_str();
        let mut rest = text;
        if self.mode == Mode::Start {
            let body = rest.trim_start();
            if body.is_empty() {
                self.reasoning.push_str(rest);
                rest = "";
            } else if !self.open.is_empty() && body.starts_with(self.open.as_str()) {
                self.reasoning.push_str(&rest[..rest.len() - body.len()]);
                rest = &body[self.open.len()..];
                self.mode = Mode::Thinking;
                self.saw_tag = true;
            } else if !self.open.is_empty() && self.open.starts_with(body) {
                // Maybe the opening tag, cut: wait for more.
                self.reasoning.push_str(&rest[..rest.len() - body.len()]);
                self.held.push_str(body);
                rest = "";
            } else {
                self.mode = Mode::Thinking;
            }
        }
        if self.mode == Mode::Thinking {
            if let Some(p) = rest.find(self.close.as_str()) {
                self.reasoning.push_str(&rest[..p]);
                rest = &rest[p + self.close.len()..];
                self.mode = Mode::Separator;
                self.saw_tag = true;
            } else {
                let keep = partial_suffix(rest, &self.close);
                self.reasoning.push_str(&rest[..rest.len() - keep]);
                self.held.push_str(&rest[rest.len() - keep..]);
                rest = "";
            }
        }
        let mut answer = "";
        if self.mode == Mode::Separator {
            let body = rest.trim_start();
            if !body.is_empty() {
                self.mode = Mode::Answer;
                answer = body;
            }
        }
        Split {
            reasoning: &self.reasoning,
            content: answer,
            // Anything before the answer in this payload was thinking (or a tag, or the
            // separator).
            reasoning_payload: answer.len() < text.len(),
        }
    }
}

impl ThinkTags {
    /// Whether no opening or closing tag has been seen: the text split so far as reasoning
    /// (the opening tag implied) may be an answer from a model that did not think.
    pub fn saw_no_tag(&self) -> bool {
        !self.saw_tag
    }

    /// Text held back at the end because it might have been the start of a tag.
    pub fn held(&self) -> &str {
        &self.held
    }
}

/// Length of the longest proper suffix of `text` that is a prefix of `tag` (on a character
/// boundary).
fn partial_suffix(text: &str, tag: &str) -> usize {
    let max = tag.len().saturating_sub(1).min(text.len());
    (1..=max)
        .rev()
        .find(|&n| {
            text.is_char_boundary(text.len() - n) && tag.starts_with(&text[text.len() - n..])
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags() -> ThinkTags {
        ThinkTags::new(&ReasoningTags {
            open: "<think>".into(),
            close: "</think>".into(),
        })
        .unwrap()
    }

    /// (reasoning, content, reasoning_payload) of each piece.
    fn run(pieces: &[&str]) -> Vec<(String, String, bool)> {
        let mut t = tags();
        pieces
            .iter()
            .map(|p| {
                let s = t.split(p);
                (
                    s.reasoning.to_string(),
                    s.content.to_string(),
                    s.reasoning_payload,
                )
            })
            .collect()
    }

    fn joined(pieces: &[&str]) -> (String, String) {
        run(pieces)
            .into_iter()
            .fold((String::new(), String::new()), |(r, c), (pr, pc, _)| {
                (r + &pr, c + &pc)
            })
    }

    #[test]
    fn explicit_and_implied_opening_tags() {
        let s = |r: &str, c: &str, p| (r.to_string(), c.to_string(), p);
        assert_eq!(
            run(&["<think>", "plan", "</think>", "\n\n", "Answer", " <think>"]),
            vec![
                s("", "", true),
                s("plan", "", true),
                s("", "", true),
                s("", "", true),
                s("", "Answer", false),
                s("", " <think>", false),
            ]
        );
        // DeepSeek-R1: no opening tag in the output.
        assert_eq!(
            run(&["Let me", " see.</think>\n\nIt is 4."]),
            vec![s("Let me", "", true), s(" see.", "It is 4.", true)]
        );
        // Never closed: all reasoning.
        assert_eq!(joined(&["\n", "<think>a", "b"]), ("\nab".into(), "".into()));
    }

    #[test]
    fn tags_split_at_every_offset_give_the_same_texts() {
        let full = "  <think>\nweigh 9.8 vs 9.11 </think>\n\n9.8 is larger.</think>";
        for i in 0..=full.len() {
            for j in i..=full.len() {
                let pieces = [&full[..i], &full[i..j], &full[j..]];
                assert_eq!(
                    joined(&pieces),
                    (
                        "  \nweigh 9.8 vs 9.11 ".into(),
                        "9.8 is larger.</think>".into()
                    ),
                    "{i} {j}"
                );
            }
        }
    }

    #[test]
    fn a_held_tag_prefix_that_is_no_tag_is_given_back() {
        assert_eq!(
            run(&["a </th", "ing"]),
            vec![
                ("a ".into(), "".into(), true),
                ("</thing".into(), "".into(), true)
            ]
        );
        assert_eq!(joined(&["<thi", "nk>x</think>y"]), ("x".into(), "y".into()));
        assert_eq!(
            joined(&["<thin", "g> y</think>z"]),
            ("<thing> y".into(), "z".into())
        );
        assert_eq!(partial_suffix("aé<", "</t"), 1);
        assert_eq!(partial_suffix("x", ""), 0);
    }

    #[test]
    fn an_empty_closing_tag_declares_nothing() {
        let t = ReasoningTags {
            open: "<think>".into(),
            close: String::new(),
        };
        assert!(ThinkTags::new(&t).is_none());
    }
}
