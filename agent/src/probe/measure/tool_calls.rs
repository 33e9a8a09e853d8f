//! Tool calls assembled from their streamed fragments (`tool_calls[]` of Chat Completions,
//! and the other APIs' tool-use blocks).

use crate::probe::ToolCall;
use crate::probe::chunk::ToolCallWire;

use super::state::State;

impl State {
    /// Adds one tool-call fragment to the call it continues (by `index`, else by `id`), or
    /// starts a call.
    pub(in crate::probe) fn add_tool_fragment(&mut self, t: &ToolCallWire<'_>) {
        let id = t.id.0.as_deref().filter(|s| !s.is_empty());
        let f = t.function.0.as_ref();
        let name = f.map(|f| f.name.as_str()).unwrap_or("");
        let args = f.and_then(|f| f.arguments.0.as_deref()).unwrap_or("");
        if id.is_none() && name.is_empty() && args.is_empty() && t.index.0.is_none() {
            return;
        }
        let slot = match t.index.0 {
            Some(i) => {
                let i = u32::try_from(i).unwrap_or(u32::MAX);
                self.tool_calls
                    .iter()
                    .position(|c| c.index == i)
                    .unwrap_or_else(|| {
                        self.tool_calls.push(ToolCall {
                            index: i,
                            ..ToolCall::default()
                        });
                        self.tool_calls.len() - 1
                    })
            }
            // No index: a new id starts a new call; anything else continues the last one.
            None => match (self.tool_calls.last(), id) {
                (Some(last), Some(id)) if last.id.as_deref().is_some_and(|l| l != id) => {
                    self.push_call()
                }
                (Some(_), _) => self.tool_calls.len() - 1,
                (None, _) => self.push_call(),
            },
        };
        let call = &mut self.tool_calls[slot];
        if call.id.is_none() {
            call.id = id.map(str::to_string);
        }
        if !name.is_empty() {
            if call.name.is_empty() {
                call.name = name.to_string();
            } else if call.name != name {
                call.name.push_str(name);
            }
        }
        call.arguments.push_str(args);
    }

    /// Starts a call after the last index; returns its position.
    pub(in crate::probe) fn push_call(&mut self) -> usize {
        let index = self
            .tool_calls
            .iter()
            .map(|c| c.index + 1)
            .max()
            .unwrap_or(0);
        self.tool_calls.push(ToolCall {
            index,
            ..ToolCall::default()
        });
        self.tool_calls.len() - 1
    }
}
