//! `choices[].delta` of a chunk or `choices[].message` of a whole completion
//! ([`DeltaWire`]), with its tool calls ([`ToolCallWire`]) and audio ([`AudioWire`]).

use std::borrow::Cow;

use serde::de::{IgnoredAny, SeqAccess};

use super::content::ContentField;
use super::lenient::{Args, Many, Num, Obj, Text};

/// `function` of a tool call (or a legacy `function_call`).
#[derive(serde::Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct FunctionWire<'a> {
    /// Function name (or a fragment of it).
    #[serde(borrow)]
    pub name: Text<'a>,
    /// Arguments (or a fragment of them).
    #[serde(borrow)]
    pub arguments: Args<'a>,
}

/// One tool-call entry of a delta (a fragment) or of a message (whole).
///
/// A call of any tool kind is read (docs/metrics.md, "Parsing rules"): its body is the
/// `function` object, or, for another kind, the object under the key its `type` names
/// (`{"type": "custom", "custom": {"name", "input"}}`) or any other object member with a
/// `name`, `arguments` or `input`; a custom tool's `input` is the call's arguments.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ToolCallWire<'a> {
    /// Which call this fragment belongs to; missing for some servers.
    pub index: Num,
    /// Call id; often only on the first fragment, missing entirely for some servers.
    pub id: Text<'a>,
    /// The function part (or the body of a call of another kind).
    pub function: Obj<FunctionWire<'a>>,
}

/// The body of a call of a kind other than `function` (a custom tool's `input`).
#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct CallBodyWire<'a> {
    #[serde(borrow)]
    name: Text<'a>,
    #[serde(borrow)]
    arguments: Args<'a>,
    #[serde(borrow)]
    input: Args<'a>,
}

impl<'a> CallBodyWire<'a> {
    fn is_empty(&self) -> bool {
        self.name.0.is_none() && self.arguments.0.is_none() && self.input.0.is_none()
    }

    fn into_function(self) -> FunctionWire<'a> {
        FunctionWire {
            name: self.name,
            arguments: if self.arguments.0.is_some() {
                self.arguments
            } else {
                self.input
            },
        }
    }
}

impl<'de: 'a, 'a> serde::Deserialize<'de> for ToolCallWire<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::{MapAccess, Visitor};
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = ToolCallWire<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a tool call")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = ToolCallWire::default();
                let mut kind: Option<String> = None;
                // Bodies under other keys, by key: the one `type` names wins, else the first.
                let mut others: Vec<(String, CallBodyWire<'a>)> = Vec::new();
                while let Some(key) = map.next_key::<Text<'de>>()? {
                    match key.as_str() {
                        "index" => out.index = map.next_value()?,
                        "id" => out.id = map.next_value()?,
                        "type" => kind = map.next_value::<Text<'de>>()?.0.map(|t| t.into_owned()),
                        "function" => out.function = map.next_value()?,
                        k => {
                            let k = k.to_string();
                            if let Obj(Some(b)) = map.next_value::<Obj<CallBodyWire<'de>>>()?
                                && !b.is_empty()
                            {
                                others.push((k, b));
                            }
                        }
                    }
                }
                if out.function.0.is_none() && !others.is_empty() {
                    let at = kind
                        .and_then(|t| others.iter().position(|(k, _)| *k == t))
                        .unwrap_or(0);
                    out.function = Obj(Some(others.swap_remove(at).1.into_function()));
                }
                Ok(out)
            }
            ignore_types!(bool, num, str, null, seq);
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

impl ToolCallWire<'_> {
    /// Whether the fragment carries anything generated (an id, a name or arguments).
    pub fn is_nonempty(&self) -> bool {
        !self.id.as_str().is_empty()
            || self.function.0.as_ref().is_some_and(|f| {
                !f.name.as_str().is_empty()
                    || f.arguments.0.as_deref().is_some_and(|a| !a.is_empty())
            })
    }
}

#[derive(serde::Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
struct ReasoningDetail<'a> {
    #[serde(borrow)]
    text: Text<'a>,
    #[serde(borrow)]
    summary: Text<'a>,
}

/// `audio` of a delta or message (a model asked for audio output): its transcript is the
/// answer's text; its `data` (base64 audio) is generated output but never text.
#[derive(serde::Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct AudioWire<'a> {
    /// Text of the audio (or a fragment of it).
    #[serde(borrow)]
    pub transcript: Text<'a>,
    /// Base64 audio bytes (or a fragment).
    #[serde(borrow)]
    pub data: Text<'a>,
}

/// `choices[].delta` of a chunk, or `choices[].message` of a whole completion.
///
/// Every field of the Chat Completions specification that carries generated output is
/// read (<https://platform.openai.com/docs/api-reference/chat-streaming>, and `message` of
/// <https://platform.openai.com/docs/api-reference/chat/object>): `content`, `refusal`,
/// `audio` (`transcript`, `data`), `tool_calls`, the legacy `function_call`, and the
/// reasoning fields servers add. `annotations` (citations of the content) and `role` carry
/// no generated text.
#[derive(serde::Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct DeltaWire<'a> {
    /// Visible text.
    #[serde(borrow)]
    pub content: ContentField<'a>,
    /// The model's refusal, shown instead of content.
    #[serde(borrow)]
    pub refusal: Text<'a>,
    /// Audio output.
    #[serde(borrow)]
    pub audio: Obj<AudioWire<'a>>,
    #[serde(borrow)]
    reasoning_content: ContentField<'a>,
    #[serde(borrow)]
    reasoning: ContentField<'a>,
    #[serde(borrow)]
    reasoning_text: ContentField<'a>,
    #[serde(borrow)]
    thinking: ContentField<'a>,
    #[serde(borrow)]
    reasoning_details: Many<ReasoningDetail<'a>>,
    /// Tool-call fragments.
    #[serde(borrow)]
    pub tool_calls: Many<ToolCallWire<'a>>,
    /// Legacy function call (treated as tool call 0).
    #[serde(borrow)]
    pub function_call: Obj<FunctionWire<'a>>,
}

impl DeltaWire<'_> {
    /// The answer's text in this delta: `content`, then `refusal`, then the audio
    /// transcript (each usually alone in a delta; joined when several are there).
    pub fn content(&self) -> Cow<'_, str> {
        let transcript = self.audio.0.as_ref().map_or("", |a| a.transcript.as_str());
        let parts = [self.content.visible(), self.refusal.as_str(), transcript];
        match parts.iter().filter(|p| !p.is_empty()).count() {
            0 => Cow::Borrowed(""),
            1 => Cow::Borrowed(parts.into_iter().find(|p| !p.is_empty()).unwrap_or("")),
            _ => Cow::Owned(parts.concat()),
        }
    }

    /// Whether the delta carries audio bytes (generated output that is not text: a token,
    /// never the answer's text nor TTFC).
    pub fn has_audio_data(&self) -> bool {
        self.audio
            .0
            .as_ref()
            .is_some_and(|a| !a.data.as_str().is_empty())
    }

    /// Reasoning text of this delta, from the first field (in the module's order) that is
    /// non-empty: one provider field is never counted twice.
    pub fn reasoning(&self) -> Cow<'_, str> {
        for f in [
            &self.reasoning_content,
            &self.reasoning,
            &self.reasoning_text,
            &self.thinking,
        ] {
            let t = f.all();
            if !t.is_empty() {
                return t;
            }
        }
        let parts = self.content.part_reasoning();
        if !parts.is_empty() {
            return Cow::Borrowed(parts);
        }
        let mut out = String::new();
        for d in &self.reasoning_details.0 {
            out.push_str(d.text.as_str());
            out.push_str(d.summary.as_str());
        }
        Cow::Owned(out)
    }

    /// The field [`DeltaWire::reasoning`] read its text from (`reasoning_content`,
    /// `reasoning`, `reasoning_text`, `thinking`, `content` parts, `reasoning_details`);
    /// `None` when it is empty.
    pub fn reasoning_field(&self) -> Option<&'static str> {
        let fields = [
            (&self.reasoning_content, "reasoning_content"),
            (&self.reasoning, "reasoning"),
            (&self.reasoning_text, "reasoning_text"),
            (&self.thinking, "thinking"),
        ];
        if let Some((_, name)) = fields.iter().find(|(f, _)| !f.all().is_empty()) {
            return Some(name);
        }
        if !self.content.part_reasoning().is_empty() {
            return Some("content[].reasoning");
        }
        self.reasoning_details
            .0
            .iter()
            .any(|d| !d.text.as_str().is_empty() || !d.summary.as_str().is_empty())
            .then_some("reasoning_details")
    }

    /// Whether a tool-call fragment (or legacy function call) with content is present.
    pub fn has_tool_fragment(&self) -> bool {
        self.tool_calls.0.iter().any(ToolCallWire::is_nonempty)
            || self.function_call.0.as_ref().is_some_and(|f| {
                !f.name.as_str().is_empty()
                    || f.arguments.0.as_deref().is_some_and(|a| !a.is_empty())
            })
    }
}
