//! The stamping of token-bearing payloads: which payload carries content, reasoning, a
//! tool-call fragment or other generated output; TTFT and TTFC at their first one; an ITL
//! gap between consecutive ones; reasoning between declared tags split out of the content
//! (docs/metrics.md, "Reasoning inside content" and "Parsing rules").

use std::time::Instant;

use latmesh_core::api::Api;

use crate::probe::think_tags::Split;

use super::state::State;

/// [`crate::probe::ProbeResult::reasoning_field`] of reasoning split out of `content` by the
/// provider's declared tags.
pub const REASONING_TAGS_FIELD: &str = "reasoning_tags";

/// One payload's generated output ([`State::on_output`]).
#[derive(Clone, Copy, Debug)]
pub(super) struct Output<'a> {
    /// The answer's text.
    pub(super) content: &'a str,
    /// Reasoning text.
    pub(super) reasoning: &'a str,
    /// A tool-call fragment.
    pub(super) tool: bool,
    /// Generated output that is neither the answer's text, reasoning nor a tool call: audio
    /// bytes, or a delta of a kind latmesh does not know. Token-bearing (TTFT, ITL), never
    /// the answer (no TTFC, no content text).
    pub(super) other: bool,
}

impl State {
    /// The generated text of one payload (`tool`: it carries a tool-call fragment). With
    /// reasoning tags declared, the content's text between them is reasoning.
    pub(in crate::probe) fn on_tokens(
        &mut self,
        at: Instant,
        index: u32,
        content: &str,
        reasoning: &str,
        tool: bool,
    ) {
        let output = Output {
            content,
            reasoning,
            tool,
            other: false,
        };
        self.on_output(at, index, output);
    }

    /// Payload `index`, read at `at`, carries generated output that is not the answer's text,
    /// reasoning or a tool call (audio bytes, a delta of a kind latmesh does not know): a
    /// token-bearing payload that never stamps TTFC.
    pub(in crate::probe) fn on_other_output(&mut self, at: Instant, index: u32) {
        let output = Output {
            content: "",
            reasoning: "",
            tool: false,
            other: true,
        };
        self.on_output(at, index, output);
    }

    /// Counts and stamps one payload's output ([`State::on_tokens`]).
    pub(super) fn on_output(&mut self, at: Instant, index: u32, out: Output<'_>) {
        // Taken out while its split borrows it.
        let mut think = self.think.take();
        let split = match think.as_mut() {
            Some(t) if !out.content.is_empty() => t.split(out.content),
            _ => Split {
                content: out.content,
                ..Split::default()
            },
        };
        let (content, reasoning) = (split.content, out.reasoning);
        let is_content = !content.is_empty();
        let is_reasoning =
            !reasoning.is_empty() || !split.reasoning.is_empty() || split.reasoning_payload;
        if is_content {
            self.content_chunks = self.content_chunks.saturating_add(1);
            self.first_content.get_or_insert((at, index));
            if self.keep_text {
                self.content_text.push_str(content);
            }
        }
        if !reasoning.is_empty() {
            self.field_reasoning = true;
            // The Chat Completions reader names its field first; the other APIs have one.
            self.reasoning_field.get_or_insert(match self.api {
                Api::Anthropic => "thinking",
                Api::Responses => "reasoning",
                Api::Chat => "reasoning_content",
            });
        }
        if !split.reasoning.is_empty() || split.reasoning_payload {
            self.first_tag_reasoning.get_or_insert((at, index));
            self.reasoning_field.get_or_insert(REASONING_TAGS_FIELD);
        }
        if is_reasoning {
            self.reasoning_streamed = true;
            self.reasoning_chunks = self.reasoning_chunks.saturating_add(1);
            self.first_reasoning.get_or_insert(index);
            if self.keep_text {
                self.reasoning_text.push_str(reasoning);
                self.reasoning_text.push_str(split.reasoning);
            }
        }
        self.think = think;
        if out.tool {
            self.tool_call_chunks = self.tool_call_chunks.saturating_add(1);
        }
        if is_content || is_reasoning || out.tool || out.other {
            self.first_streamed_token.get_or_insert(at);
            self.on_token_payload(at, index);
        }
    }

    /// At the end of a response with reasoning tags declared in which neither tag appeared,
    /// no reasoning field was read and no content was split out: the text split as reasoning
    /// (the opening tag implied) was the answer of a model that did not think. It becomes the
    /// content, TTFC at its first payload (docs/metrics.md, "Reasoning inside content").
    pub(super) fn untagged_reasoning_is_content(&mut self) {
        let Some(first) = self.first_tag_reasoning else {
            return;
        };
        let untagged = self.think.as_ref().is_some_and(|t| t.saw_no_tag());
        if !untagged || self.field_reasoning || self.content_chunks > 0 {
            return;
        }
        self.content_chunks = self.reasoning_chunks;
        self.reasoning_chunks = 0;
        self.reasoning_field = None;
        self.first_content = Some(first);
        self.first_reasoning = None;
        self.content_text = std::mem::take(&mut self.reasoning_text);
        if self.keep_text
            && let Some(t) = &self.think
        {
            self.content_text.push_str(t.held());
        }
    }

    /// Accounts payload `index`, read at `at`, as token-bearing: `token_payloads`, the ITL
    /// gap, TTFT (the first such payload) and TTST (the second). Every API's reader reaches
    /// it (Chat Completions, Anthropic, Responses).
    pub(super) fn on_token_payload(&mut self, at: Instant, index: u32) {
        if self.first_token.is_some() {
            self.second_token.get_or_insert(at);
        }
        self.token_payloads = self.token_payloads.saturating_add(1);
        if let Some(last) = self.last_token_at {
            let gap = at.saturating_duration_since(last).as_micros();
            self.itl_gaps_us
                .push(u64::try_from(gap).unwrap_or(u64::MAX));
        }
        self.last_token_at = Some(at);
        self.first_token.get_or_insert((at, index));
        if self.keep_timestamps {
            self.token_read_at.push(at);
        }
    }

    /// Payload `index`, read at `at`, carries reasoning the provider sent encrypted (an
    /// Anthropic `redacted_thinking` block): a reasoning token with no readable text. Its
    /// tokens were generated before it and not streamed ([`State::on_reasoning_block`]).
    pub(in crate::probe) fn on_hidden_reasoning(&mut self, at: Instant, index: u32) {
        self.on_reasoning_block();
        self.hidden_reasoning_payloads = self.hidden_reasoning_payloads.saturating_add(1);
        self.reasoning_chunks = self.reasoning_chunks.saturating_add(1);
        self.first_reasoning.get_or_insert(index);
        self.reasoning_field.get_or_insert("redacted_thinking");
        self.on_token_payload(at, index);
    }
}

impl State {
    /// The answer holds a reasoning block or item (an Anthropic `thinking` or
    /// `redacted_thinking` block, a Responses `reasoning` item), whether or not its text is
    /// streamed: when none of its text is, the reasoning was not streamed
    /// ([`super::decode`]).
    pub(in crate::probe) fn on_reasoning_block(&mut self) {
        self.reasoning_block = true;
    }
}
