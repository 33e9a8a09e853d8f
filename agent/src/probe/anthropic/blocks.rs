//! What an Anthropic Messages stream needs across its events ([`StreamState`]): which
//! content block is which tool call, and the thinking blocks kept for a later turn. The
//! measured state holds one (`crate::probe::measure::state::State`).

use latmesh_core::prompts::ThinkingBlock;

/// What a stream needs across its events: which content block is which tool call, and the
/// thinking blocks kept (with `keep_text`) for a later turn.
#[derive(Debug, Default)]
pub(in crate::probe) struct StreamState {
    /// Content-block index → tool-call ordinal (0, 1, … in order of appearance).
    tools: Vec<(u64, u32)>,
    /// Content-block index → position in `thinking`.
    thinking_at: Vec<(u64, usize)>,
    thinking: Vec<ThinkingBlock>,
}

impl StreamState {
    /// The thinking blocks kept, in order.
    pub(in crate::probe) fn into_thinking_blocks(self) -> Vec<ThinkingBlock> {
        self.thinking
    }

    /// The tool-call ordinal of content block `block` (a new one for a block not seen yet).
    pub(super) fn tool(&mut self, block: u64) -> u32 {
        if let Some(&(_, t)) = self.tools.iter().find(|(b, _)| *b == block) {
            return t;
        }
        let t = u32::try_from(self.tools.len()).unwrap_or(u32::MAX);
        self.tools.push((block, t));
        t
    }

    /// Keeps a new thinking block for content block `block`.
    pub(super) fn start_thinking(&mut self, block: u64, b: ThinkingBlock) {
        self.thinking_at.push((block, self.thinking.len()));
        self.thinking.push(b);
    }

    /// The thinking block kept for content block `block` (one is started when its
    /// `content_block_start` was missing).
    pub(super) fn thinking(&mut self, block: u64) -> &mut ThinkingBlock {
        let at = match self.thinking_at.iter().rev().find(|(b, _)| *b == block) {
            Some(&(_, at)) => at,
            None => {
                self.start_thinking(
                    block,
                    ThinkingBlock::Thinking {
                        thinking: String::new(),
                        signature: String::new(),
                    },
                );
                self.thinking.len() - 1
            }
        };
        &mut self.thinking[at]
    }
}
