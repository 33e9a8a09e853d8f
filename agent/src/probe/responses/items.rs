//! What a Responses stream needs across its events ([`StreamItems`]: each output item's
//! type by its `output_index`), and the rule that says what a `*.delta` event's text is
//! ([`delta_kind`]; docs/metrics.md, "Parsing rules"): only the answer's known text fields
//! are answer text, a delta of a call item is tool-call input whatever its name, audio is
//! not text, and any other delta is generated output that is not the answer.

/// Output items remembered per stream: more are not (a provider cannot grow the state
/// without bound); a delta of an item past them is read by its name alone.
const MAX_ITEMS: usize = 256;

/// Bytes of an item type kept (types are short names; a longer one is cut).
const MAX_TYPE_BYTES: usize = 64;

/// Each output item's `type`, by `output_index`, from its `response.output_item.added`.
#[derive(Debug, Default)]
pub(in crate::probe) struct StreamItems {
    kinds: Vec<(u64, String)>,
}

impl StreamItems {
    /// Remembers that output item `index` is of type `kind` (the latest word wins).
    pub(super) fn add(&mut self, index: u64, kind: &str) {
        let mut end = kind.len().min(MAX_TYPE_BYTES);
        while !kind.is_char_boundary(end) {
            end -= 1;
        }
        let kind = &kind[..end];
        if let Some(slot) = self.kinds.iter_mut().find(|(i, _)| *i == index) {
            slot.1 = kind.to_string();
        } else if self.kinds.len() < MAX_ITEMS {
            self.kinds.push((index, kind.to_string()));
        }
    }

    /// The type of output item `index`, when its start was read.
    pub(super) fn kind(&self, index: Option<u64>) -> Option<&str> {
        let index = index?;
        self.kinds
            .iter()
            .find(|(i, _)| *i == index)
            .map(|(_, k)| k.as_str())
    }
}

/// What a `*.delta` event's text is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum DeltaKind {
    /// The answer's text (TTFC): output text, refusal, the transcript of audio output.
    Content,
    /// Reasoning (raw reasoning text or its summary).
    Reasoning,
    /// Tool-call input (arguments, a custom tool's input, a command, code, a patch).
    Tool,
    /// Generated output that is not text of the answer (audio bytes, a delta of a kind
    /// latmesh does not know): a token, never the answer.
    Other,
}

/// Whether an output item `type` is a call of a tool whose input the model writes (the
/// call is read as a tool call: its name, id and input): function and custom tools, MCP,
/// shell, local shell, apply-patch, computer use and code interpreter calls.
pub(super) fn is_tool_item(kind: &str) -> bool {
    matches!(
        kind,
        "function_call"
            | "custom_tool_call"
            | "mcp_call"
            | "shell_call"
            | "local_shell_call"
            | "apply_patch_call"
            | "computer_call"
            | "code_interpreter_call"
    )
}

/// Whether an output item `type` is a call of any tool (`*_call`, a kind added later
/// included): a delta inside it is tool-call input.
fn is_call_item(kind: &str) -> bool {
    kind.ends_with("_call")
}

/// Whether a delta event's name (without `response.` and `.delta`) names a call's input:
/// `function_call_arguments`, `custom_tool_call_input`, `mcp_call_arguments` (or the older
/// `mcp_call.arguments`), `code_interpreter_call_code`, `shell_call_command`,
/// `apply_patch_call_operation_diff`, and any `<kind>_call_<field>` added later.
fn names_a_call(name: &str) -> bool {
    name.contains("_call_")
        || name.contains("_call.")
        || name.ends_with("_arguments")
        || name.ends_with("_input")
}

/// The kind of text of delta event `event` (`None`: not a delta event), whose output item
/// is of type `item` when its start was read.
///
/// In order: `output_text` and `refusal` are the answer; a name with `reasoning` (or a
/// delta of a `reasoning` item) is reasoning; a transcript (`audio.transcript`,
/// `output_audio_transcript`) is the answer's text; audio (`audio`, `output_audio`) is not
/// text; a delta of a call item, or whose name names a call's input, is tool-call input;
/// anything else is output that is not the answer.
pub(super) fn delta_kind(event: &str, item: Option<&str>) -> Option<DeltaKind> {
    let stem = event.strip_suffix(".delta")?;
    let name = stem.strip_prefix("response.").unwrap_or(stem);
    Some(match name {
        "output_text" | "refusal" => DeltaKind::Content,
        n if n.contains("reasoning") || item == Some("reasoning") => DeltaKind::Reasoning,
        n if n.ends_with("transcript") => DeltaKind::Content,
        n if n.ends_with("audio") => DeltaKind::Other,
        _ if item.is_some_and(is_call_item) => DeltaKind::Tool,
        n if names_a_call(n) => DeltaKind::Tool,
        _ => DeltaKind::Other,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_delta_kind_by_name_and_item() {
        use DeltaKind::*;
        for (event, item, want) in [
            ("response.output_text.delta", Some("message"), Content),
            ("response.refusal.delta", None, Content),
            ("response.audio.transcript.delta", None, Content),
            ("response.output_audio_transcript.delta", None, Content),
            (
                "response.reasoning_text.delta",
                Some("reasoning"),
                Reasoning,
            ),
            ("response.reasoning_summary_text.delta", None, Reasoning),
            ("response.some_future.delta", Some("reasoning"), Reasoning),
            ("response.audio.delta", None, Other),
            ("response.output_audio.delta", Some("message"), Other),
            ("response.function_call_arguments.delta", None, Tool),
            ("response.custom_tool_call_input.delta", None, Tool),
            ("response.mcp_call_arguments.delta", None, Tool),
            ("response.mcp_call.arguments.delta", None, Tool),
            ("response.code_interpreter_call_code.delta", None, Tool),
            ("response.shell_call_command.delta", None, Tool),
            ("response.apply_patch_call_operation_diff.delta", None, Tool),
            // A kind added later: a call by its item, or by its name.
            ("response.future_tool_call_script.delta", None, Tool),
            ("response.script.delta", Some("future_tool_call"), Tool),
            // Neither the answer nor a call: not the answer.
            ("response.output_markdown.delta", Some("message"), Other),
            ("response.some_future_text.delta", None, Other),
        ] {
            assert_eq!(delta_kind(event, item), Some(want), "{event} in {item:?}");
        }
        assert_eq!(delta_kind("response.output_text.done", None), None);
        assert_eq!(delta_kind("response.created", None), None);
    }

    #[test]
    fn items_are_remembered_and_bounded() {
        let mut items = StreamItems::default();
        items.add(1, "shell_call");
        items.add(0, "message");
        assert_eq!(items.kind(Some(1)), Some("shell_call"));
        assert_eq!(items.kind(Some(0)), Some("message"));
        assert_eq!((items.kind(Some(2)), items.kind(None)), (None, None));
        items.add(1, "function_call");
        assert_eq!(items.kind(Some(1)), Some("function_call"));
        for i in 0..1_000 {
            items.add(i, &"x".repeat(1_000));
        }
        assert_eq!(items.kinds.len(), MAX_ITEMS);
        assert_eq!(items.kind(Some(5)).map(str::len), Some(MAX_TYPE_BYTES));
        assert_eq!(items.kind(Some(999)), None);
        assert!(is_tool_item("shell_call") && !is_tool_item("web_search_call"));
    }
}
