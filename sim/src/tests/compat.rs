//! The compatibility and quality ground truth ([`crate::script`] and the profile's feature
//! switches) over real loopback sockets, on the three APIs, streamed and not: oracle answers,
//! stop sequences, JSON mode, tool calls. Each reply is read off the wire by the test's own
//! readers ([`Reply::read`]), so the bytes each API carries are what is checked.

use latmesh_core::api::Api;
use latmesh_core::compat::{JSON_PROMPT, STOP_PROMPT, STOP_SEQUENCE, TOOL_NAME, TOOL_PROMPT};
use latmesh_core::quality::{self, prompt_set};
use serde_json::{Value, json};

use super::{Raw, raw_request, start};
use crate::profile::Feature;
use crate::script::{JSON_ANSWER, TOOL_ARGUMENTS, expected_text};
use crate::{ProviderProfile, SimConfig};

pub(super) const APIS: [Api; 3] = [Api::Chat, Api::Anthropic, Api::Responses];
const MODEL: &str = "deepseek-v4-flash";

/// A quiet, fast provider: 1 ms TTFT, no ITL, one token per chunk.
pub(super) fn quick(name: &str) -> ProviderProfile {
    ProviderProfile::fixed(name, 1_000, 0)
}

pub(super) fn cfg(profiles: Vec<ProviderProfile>) -> SimConfig {
    SimConfig {
        profiles,
        ..SimConfig::default()
    }
}

pub(super) fn path(api: Api, provider: &str) -> String {
    match api {
        Api::Chat => format!("/{provider}/v1/chat/completions"),
        Api::Anthropic => format!("/{provider}/v1/messages"),
        Api::Responses => format!("/{provider}/v1/responses"),
    }
}

/// A request on `api` with the quality set's instruction as the system prompt, `user` as
/// the one user message, a cap of 512, and `extra`'s fields merged in last.
pub(super) fn body(api: Api, user: &str, stream: bool, extra: &Value) -> String {
    let sys = &prompt_set().instruction;
    let mut b = match api {
        Api::Chat => json!({"model": MODEL, "stream": stream, "max_tokens": 512,
            "messages": [{"role": "system", "content": sys}, {"role": "user", "content": user}]}),
        Api::Anthropic => json!({"model": MODEL, "stream": stream, "max_tokens": 512,
            "system": sys, "messages": [{"role": "user", "content": user}]}),
        Api::Responses => json!({"model": MODEL, "stream": stream, "max_output_tokens": 512,
            "instructions": sys,
            "input": [{"role": "user", "content": [{"type": "input_text", "text": user}]}]}),
    };
    if api == Api::Chat && stream {
        b["stream_options"] = json!({"include_usage": true});
    }
    if let (Some(b), Some(extra)) = (b.as_object_mut(), extra.as_object()) {
        b.extend(extra.clone());
    }
    b.to_string()
}

/// What a reply carried, read the way each API writes it.
#[derive(Debug, Default)]
pub(super) struct Reply {
    pub status: u16,
    /// The visible text.
    pub text: String,
    /// Chat `finish_reason`, Anthropic `stop_reason`, Responses `status`.
    pub finish: String,
    /// Anthropic's `stop_sequence`.
    pub stop_sequence: Value,
    /// Output tokens in `usage`.
    pub output_tokens: u64,
    /// Cached prompt tokens in `usage`.
    pub cached_tokens: u64,
    /// Input tokens in `usage` (Chat `prompt_tokens`).
    pub input_tokens: u64,
    /// Token events of a stream (text or tool-argument deltas).
    pub token_events: usize,
    /// The tool call: id, name, arguments.
    pub tool: Option<(String, String, String)>,
    /// Every `model` seen.
    pub models: Vec<String>,
    /// Every `system_fingerprint` seen (`null` included), Chat only.
    pub fingerprints: Vec<Value>,
    /// The error body of a non-200 answer.
    pub error: Value,
}

impl Reply {
    fn tool_mut(&mut self) -> &mut (String, String, String) {
        self.tool.get_or_insert_default()
    }

    fn model(&mut self, v: &Value) {
        if let Some(m) = v.as_str() {
            self.models.push(m.to_string());
        }
    }

    pub fn read(api: Api, raw: &Raw) -> Reply {
        let mut r = Reply {
            status: raw.status,
            ..Reply::default()
        };
        if raw.status != 200 {
            r.error = serde_json::from_slice(&raw.body()).unwrap();
            return r;
        }
        if raw.header("content-type") == Some("text/event-stream") {
            for ev in raw.events() {
                r.event(api, &ev.data);
            }
        } else {
            r.body(api, &serde_json::from_slice(&raw.body()).unwrap());
        }
        r
    }

    fn event(&mut self, api: Api, d: &Value) {
        match api {
            Api::Chat => {
                if !d.is_object() {
                    return;
                }
                self.model(&d["model"]);
                if let Some(fp) = d.get("system_fingerprint") {
                    self.fingerprints.push(fp.clone());
                }
                let delta = &d["choices"][0]["delta"];
                if let Some(t) = delta["content"].as_str().filter(|t| !t.is_empty()) {
                    self.text.push_str(t);
                    self.token_events += 1;
                }
                if let Some(call) = delta["tool_calls"].get(0) {
                    let tool = self.tool_mut();
                    if let Some(id) = call["id"].as_str() {
                        tool.0 = id.to_string();
                    }
                    if let Some(n) = call["function"]["name"].as_str() {
                        tool.1 = n.to_string();
                    }
                    tool.2
                        .push_str(call["function"]["arguments"].as_str().unwrap_or(""));
                    self.token_events += 1;
                }
                if let Some(f) = d["choices"][0]["finish_reason"].as_str() {
                    self.finish = f.to_string();
                }
                if d["usage"].is_object() {
                    self.chat_usage(&d["usage"]);
                }
            }
            Api::Anthropic => match d["type"].as_str().unwrap_or("") {
                "message_start" => {
                    self.model(&d["message"]["model"]);
                    let u = &d["message"]["usage"];
                    self.cached_tokens = u["cache_read_input_tokens"].as_u64().unwrap();
                    self.input_tokens = u["input_tokens"].as_u64().unwrap();
                }
                "content_block_start" if d["content_block"]["type"] == "tool_use" => {
                    let b = &d["content_block"];
                    *self.tool_mut() = (
                        b["id"].as_str().unwrap().into(),
                        b["name"].as_str().unwrap().into(),
                        String::new(),
                    );
                }
                "content_block_delta" => match d["delta"]["type"].as_str().unwrap_or("") {
                    "text_delta" => {
                        self.text.push_str(d["delta"]["text"].as_str().unwrap());
                        self.token_events += 1;
                    }
                    "input_json_delta" => {
                        let part = d["delta"]["partial_json"].as_str().unwrap().to_string();
                        self.tool_mut().2.push_str(&part);
                        self.token_events += 1;
                    }
                    _ => {}
                },
                "message_delta" => {
                    self.finish = d["delta"]["stop_reason"].as_str().unwrap().into();
                    self.stop_sequence = d["delta"]["stop_sequence"].clone();
                    self.output_tokens = d["usage"]["output_tokens"].as_u64().unwrap();
                }
                _ => {}
            },
            Api::Responses => match d["type"].as_str().unwrap_or("") {
                "response.created" => self.model(&d["response"]["model"]),
                "response.output_text.delta" => {
                    self.text.push_str(d["delta"].as_str().unwrap());
                    self.token_events += 1;
                }
                "response.output_item.added" if d["item"]["type"] == "function_call" => {
                    let it = &d["item"];
                    *self.tool_mut() = (
                        it["call_id"].as_str().unwrap().into(),
                        it["name"].as_str().unwrap().into(),
                        String::new(),
                    );
                }
                "response.function_call_arguments.delta" => {
                    let part = d["delta"].as_str().unwrap().to_string();
                    self.tool_mut().2.push_str(&part);
                    self.token_events += 1;
                }
                "response.completed" | "response.incomplete" => {
                    let resp = &d["response"];
                    self.model(&resp["model"]);
                    self.finish = resp["status"].as_str().unwrap().into();
                    self.responses_usage(&resp["usage"]);
                }
                _ => {}
            },
        }
    }

    fn chat_usage(&mut self, u: &Value) {
        self.output_tokens = u["completion_tokens"].as_u64().unwrap();
        self.input_tokens = u["prompt_tokens"].as_u64().unwrap();
        self.cached_tokens = u["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap();
    }

    fn responses_usage(&mut self, u: &Value) {
        self.output_tokens = u["output_tokens"].as_u64().unwrap();
        self.input_tokens = u["input_tokens"].as_u64().unwrap();
        self.cached_tokens = u["input_tokens_details"]["cached_tokens"].as_u64().unwrap();
    }

    fn body(&mut self, api: Api, b: &Value) {
        self.model(&b["model"]);
        match api {
            Api::Chat => {
                if let Some(fp) = b.get("system_fingerprint") {
                    self.fingerprints.push(fp.clone());
                }
                let choice = &b["choices"][0];
                self.text = choice["message"]["content"].as_str().unwrap_or("").into();
                if let Some(call) = choice["message"]["tool_calls"].get(0) {
                    self.tool = Some((
                        call["id"].as_str().unwrap().into(),
                        call["function"]["name"].as_str().unwrap().into(),
                        call["function"]["arguments"].as_str().unwrap().into(),
                    ));
                }
                self.finish = choice["finish_reason"].as_str().unwrap().into();
                self.chat_usage(&b["usage"]);
            }
            Api::Anthropic => {
                for block in b["content"].as_array().unwrap() {
                    match block["type"].as_str().unwrap() {
                        "text" => self.text.push_str(block["text"].as_str().unwrap()),
                        "tool_use" => {
                            self.tool = Some((
                                block["id"].as_str().unwrap().into(),
                                block["name"].as_str().unwrap().into(),
                                block["input"].to_string(),
                            ));
                        }
                        _ => {}
                    }
                }
                self.finish = b["stop_reason"].as_str().unwrap().into();
                self.stop_sequence = b["stop_sequence"].clone();
                let u = &b["usage"];
                self.output_tokens = u["output_tokens"].as_u64().unwrap();
                self.input_tokens = u["input_tokens"].as_u64().unwrap();
                self.cached_tokens = u["cache_read_input_tokens"].as_u64().unwrap();
            }
            Api::Responses => {
                for item in b["output"].as_array().unwrap() {
                    match item["type"].as_str().unwrap() {
                        "message" => self
                            .text
                            .push_str(item["content"][0]["text"].as_str().unwrap()),
                        "function_call" => {
                            self.tool = Some((
                                item["call_id"].as_str().unwrap().into(),
                                item["name"].as_str().unwrap().into(),
                                item["arguments"].as_str().unwrap().into(),
                            ));
                        }
                        _ => {}
                    }
                }
                self.finish = b["status"].as_str().unwrap().into();
                self.responses_usage(&b["usage"]);
            }
        }
    }

    /// The error message of a non-200 answer, in either error shape.
    pub fn error_message(&self) -> &str {
        self.error["error"]["message"].as_str().unwrap_or("")
    }
}

/// Sends `body(api, user, stream, extra)` to `provider` and reads the reply.
pub(super) async fn ask(
    addr: std::net::SocketAddr,
    api: Api,
    provider: &str,
    user: &str,
    stream: bool,
    extra: &Value,
) -> Reply {
    let raw = raw_request(
        addr,
        "POST",
        &path(api, provider),
        &[],
        &body(api, user, stream, extra),
    )
    .await;
    Reply::read(api, &raw)
}

/// Serves `q` (honours every feature), `ign` (`set` to [`Feature::Ignored`]) and `rej`
/// (`set` to [`Feature::Rejected`]).
async fn start_honest_ignoring_refusing(
    set: fn(&mut ProviderProfile, Feature),
) -> std::net::SocketAddr {
    let mut ign = quick("ign");
    set(&mut ign, Feature::Ignored);
    let mut rej = quick("rej");
    set(&mut rej, Feature::Rejected);
    start(cfg(vec![quick("q"), ign, rej])).await
}

/// The natural end on `api`: Chat `stop`, Anthropic `end_turn`, Responses `completed`.
fn natural_end(api: Api) -> &'static str {
    match api {
        Api::Chat => "stop",
        Api::Anthropic => "end_turn",
        Api::Responses => "completed",
    }
}

fn counted(n: u32) -> String {
    (1..=n).map(|i| i.to_string()).collect::<Vec<_>>().join(" ")
}

#[tokio::test]
async fn quality_prompts_are_answered_right_with_usage_matching_the_stream() {
    let addr = start(cfg(vec![quick("q")])).await;
    let none = json!({});
    for p in &prompt_set().prompts {
        let mut texts = Vec::new();
        for api in APIS {
            for stream in [true, false] {
                let r = ask(addr, api, "q", &p.prompt, stream, &none).await;
                assert_eq!(r.status, 200, "{} {api:?}", p.id);
                let g = quality::grade(p, &r.text);
                assert!(g.correct, "{} {api:?} stream={stream}: {:?}", p.id, r.text);
                let last = r.text.lines().last().unwrap();
                assert_eq!(last, format!("Answer: {}", expected_text(&p.expected)));
                assert_eq!(r.finish, natural_end(api));
                // Usage counts exactly what was streamed (and the bodies, below, the same).
                if stream {
                    assert_eq!(r.output_tokens, r.token_events as u64, "{} {api:?}", p.id);
                }
                texts.push((r.text, r.output_tokens));
            }
        }
        // The same prompt gets the same answer, of the same token count, everywhere.
        assert!(
            texts.windows(2).all(|w| w[0] == w[1]),
            "{}: {texts:?}",
            p.id
        );
    }
    // The stop prompt is counted out; any other prompt keeps its filler.
    for api in APIS {
        let r = ask(addr, api, "q", STOP_PROMPT, true, &none).await;
        assert_eq!(r.text, counted(30));
        assert_eq!((r.output_tokens, r.token_events), (30, 30));
        let r = ask(addr, api, "q", "Tell me about latency.", true, &none).await;
        assert!(
            !r.text.contains("Answer:") && r.text.len() > 20,
            "{}",
            r.text
        );
    }
}

#[tokio::test]
async fn stop_sequences_cut_the_answer_or_are_ignored_or_refused() {
    let addr = start_honest_ignoring_refusing(|p, f| p.stop = f).await;
    let chat_forms = [
        json!({"stop": STOP_SEQUENCE}),
        json!({"stop": ["x7y", STOP_SEQUENCE]}),
    ];
    let anthropic = json!({"stop_sequences": [STOP_SEQUENCE]});
    for stream in [true, false] {
        for extra in &chat_forms {
            let r = ask(addr, Api::Chat, "q", STOP_PROMPT, stream, extra).await;
            assert_eq!(r.text, "1 2 3 4 5 6 ", "{extra}");
            assert_eq!(r.finish, "stop");
            assert_eq!(r.output_tokens, 7);
            let r = ask(addr, Api::Chat, "ign", STOP_PROMPT, stream, extra).await;
            assert_eq!(
                (r.text.as_str(), r.finish.as_str()),
                (&*counted(30), "stop")
            );
            let r = ask(addr, Api::Chat, "rej", STOP_PROMPT, stream, extra).await;
            assert_eq!(r.status, 400);
            assert_eq!(r.error["error"]["param"], "stop");
            assert!(r.error_message().contains("'stop'"), "{:?}", r.error);
        }
        let r = ask(addr, Api::Anthropic, "q", STOP_PROMPT, stream, &anthropic).await;
        assert_eq!(r.text, "1 2 3 4 5 6 ");
        assert_eq!(r.finish, "stop_sequence");
        assert_eq!(r.stop_sequence, json!(STOP_SEQUENCE));
        assert_eq!(r.output_tokens, 7);
        let r = ask(addr, Api::Anthropic, "ign", STOP_PROMPT, stream, &anthropic).await;
        assert_eq!(r.text, counted(30));
        assert_eq!(
            (r.finish.as_str(), &r.stop_sequence),
            ("end_turn", &Value::Null)
        );
        let r = ask(addr, Api::Anthropic, "rej", STOP_PROMPT, stream, &anthropic).await;
        assert_eq!(r.status, 400);
        assert_eq!(r.error["type"], "error");
        assert!(
            r.error_message().contains("stop_sequences"),
            "{:?}",
            r.error
        );
        // A stop sequence on filler text cuts it too.
        let r = ask(
            addr,
            Api::Chat,
            "q",
            "Tell me about latency.",
            stream,
            &json!({}),
        )
        .await;
        let word = r.text.split(' ').nth(3).unwrap().trim_matches([',', '.']);
        let cut = ask(
            addr,
            Api::Chat,
            "q",
            "Tell me about latency.",
            stream,
            &json!({"stop": word}),
        )
        .await;
        assert!(
            r.text.starts_with(&cut.text) && !cut.text.contains(word),
            "{word}"
        );
        assert_eq!(cut.finish, "stop");
    }
}

#[tokio::test]
async fn json_mode_answers_a_json_object_or_prose_or_is_refused() {
    let addr = start_honest_ignoring_refusing(|p, f| p.json_mode = f).await;
    let forms = [
        (
            Api::Chat,
            json!({"response_format": {"type": "json_object"}}),
        ),
        (
            Api::Chat,
            json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}}),
        ),
        (
            Api::Responses,
            json!({"text": {"format": {"type": "json_object"}}}),
        ),
    ];
    for stream in [true, false] {
        for (api, extra) in &forms {
            let r = ask(addr, *api, "q", JSON_PROMPT, stream, extra).await;
            assert_eq!(r.text, JSON_ANSWER, "{api:?} {extra}");
            let v: Value = serde_json::from_str(&r.text).unwrap();
            assert_eq!(v, json!({"city": "Paris", "country": "France"}));
            if stream {
                assert_eq!(r.output_tokens, r.token_events as u64);
            }
            let r = ask(addr, *api, "q", "Tell me about latency.", stream, extra).await;
            let v: Value = serde_json::from_str(&r.text).unwrap();
            assert!(v.is_object() && v["answer"].as_str().unwrap().len() > 3);
            let r = ask(addr, *api, "ign", JSON_PROMPT, stream, extra).await;
            assert_eq!(r.status, 200);
            assert!(
                serde_json::from_str::<Value>(&r.text).is_err(),
                "{}",
                r.text
            );
            let r = ask(addr, *api, "rej", JSON_PROMPT, stream, extra).await;
            assert_eq!(r.status, 400);
            let field = if *api == Api::Chat {
                "response_format"
            } else {
                "text.format"
            };
            assert_eq!(r.error["error"]["param"], field);
            assert!(r.error_message().contains(field));
            assert!(r.error_message().contains("json_object"));
        }
        // `{"type": "text"}` is not JSON mode: prose, even where JSON mode is refused.
        let text = json!({"response_format": {"type": "text"}});
        let r = ask(addr, Api::Chat, "rej", JSON_PROMPT, stream, &text).await;
        assert_eq!(r.status, 200);
        assert!(serde_json::from_str::<Value>(&r.text).is_err());
    }
}

/// The `tools` of a request declaring [`TOOL_NAME`] on `api`.
pub(super) fn tools(api: Api) -> Value {
    let params = latmesh_core::compat::tool_parameters();
    match api {
        Api::Chat => json!({"tools": [{"type": "function",
            "function": {"name": TOOL_NAME, "description": "Weather", "parameters": params}}]}),
        Api::Anthropic => json!({"tools": [{"name": TOOL_NAME, "input_schema": params}]}),
        Api::Responses => {
            json!({"tools": [{"type": "function", "name": TOOL_NAME, "parameters": params}]})
        }
    }
}

#[tokio::test]
async fn tool_calls_come_back_in_each_apis_shape() {
    let addr = start_honest_ignoring_refusing(|p, f| p.tool_calls = f).await;
    for api in APIS {
        let (finish, id_prefix) = match api {
            Api::Chat => ("tool_calls", "call_"),
            Api::Anthropic => ("tool_use", "toolu_"),
            Api::Responses => ("completed", "call_"),
        };
        for stream in [true, false] {
            let r = ask(addr, api, "q", TOOL_PROMPT, stream, &tools(api)).await;
            assert_eq!(r.status, 200);
            let (id, name, args) = r.tool.clone().expect("a tool call");
            assert!(id.starts_with(id_prefix), "{id}");
            assert_eq!(name, TOOL_NAME);
            let args: Value = serde_json::from_str(&args).unwrap();
            assert_eq!(args, serde_json::from_str::<Value>(TOOL_ARGUMENTS).unwrap());
            assert_eq!(r.finish, finish, "{api:?}");
            assert_eq!(r.text, "");
            assert_eq!(r.output_tokens, 3);
            if stream {
                assert_eq!(r.token_events, 3, "{api:?}: arguments in 3 fragments");
            }
            let r = ask(addr, api, "ign", TOOL_PROMPT, stream, &tools(api)).await;
            assert!(r.tool.is_none() && r.text.len() > 10);
            assert_eq!(r.finish, natural_end(api));
            let r = ask(addr, api, "rej", TOOL_PROMPT, stream, &tools(api)).await;
            assert_eq!(r.status, 400);
            assert!(r.error_message().contains("'tools'"), "{:?}", r.error);
        }
    }
}
