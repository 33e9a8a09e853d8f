//! The fast path against the full decoder: every corpus payload, generated chunk shapes and
//! JSON texts, the template of the previous chunk.

use latmesh_core::record::Usage;

use super::*;
use crate::probe::chunk::{ProviderError, decode};

type Facts = (
    String,
    String,
    bool,
    Option<String>,
    Option<Usage>,
    Option<ProviderError>,
    (String, String),
    Option<&'static str>,
);

/// What a measurement reads from a payload, by the full decoder.
fn full_facts(b: &[u8]) -> Option<Facts> {
    let c = decode(b).ok()?;
    let d = c.delta().cloned().unwrap_or_default();
    let tools = d.has_tool_fragment() || !d.tool_calls.0.is_empty() || d.function_call.0.is_some();
    Some((
        d.content().to_string(),
        d.reasoning().into_owned(),
        tools,
        c.finish_reason().map(str::to_string),
        c.usage(),
        c.error(),
        (c.model().to_string(), c.system_fingerprint().to_string()),
        d.reasoning_field(),
    ))
}

/// Whenever the fast path answers, it answers what the full decoder does.
fn agrees(b: &[u8]) -> Result<bool, String> {
    let mut scratch = String::from("left over");
    let Some(l) = decode_lite(b, &mut scratch) else {
        return Ok(false);
    };
    let lite: Facts = (
        l.content.to_string(),
        l.reasoning.to_string(),
        false,
        l.finish_reason.map(str::to_string),
        None,
        None,
        (l.model.to_string(), l.system_fingerprint.to_string()),
        l.reasoning_field,
    );
    match full_facts(b) {
        Some(f) if f == lite => Ok(true),
        f => Err(format!(
            "{:?}: lite {lite:?}, full {f:?}",
            String::from_utf8_lossy(b)
        )),
    }
}

#[test]
fn the_fast_path_reads_common_chunks_as_the_full_decoder() {
    let common = [
        // The simulator, OpenAI, DeepSeek, vLLM, a finish chunk, a role chunk.
        r#"{"id":"chatcmpl-sim1","object":"chat.completion.chunk","created":1764445200,"model":"deepseek-v4-flash","system_fingerprint":"latmesh-sim","choices":[{"index":0,"delta":{"content":" tok"},"logprobs":null,"finish_reason":null}],"usage":null}"#,
        r#"{"id":"chatcmpl-B","object":"chat.completion.chunk","created":1,"model":"gpt-4o","service_tier":"default","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"content":"Hi"},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"a1B"}"#,
        r#"{"id":"x","choices":[{"index":0,"delta":{"content":null,"reasoning_content":"think"},"logprobs":null,"finish_reason":null}],"created":1,"model":"deepseek-reasoner","object":"chat.completion.chunk"}"#,
        r#"{"id":"x","choices":[{"index":0,"delta":{"content":"","reasoning":"r","tool_calls":null},"logprobs":{"content":[{"token":"a","logprob":-0.5,"bytes":[97],"top_logprobs":[]}]},"finish_reason":null,"stop_reason":null}]}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}"#,
        r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"é ü 中"},"finish_reason":"length"}]}"#,
        " {  \"choices\" : [ { \"delta\" : { \"thinking\" : \"t\" , \"reasoning\" : \"r\" } } ] } ",
        r#"{"choices":[],"created":-1.5e+3,"a":[[{}],{"b":[true,false,null]}],"s":"\"\\\/\b\f\n\r\t\u00e9"}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":""}],"error":null,"x_groq":null,"object":null}"#,
    ];
    for j in common {
        assert_eq!(agrees(j.as_bytes()), Ok(true), "{j}");
    }
    let mut scratch = String::new();
    let c = decode_lite(common[2].as_bytes(), &mut scratch).unwrap();
    assert_eq!((c.content, c.reasoning), ("", "think"));
    assert_eq!(c.reasoning_field, Some("reasoning_content"));
    let c = decode_lite(common[7].as_bytes(), &mut scratch).unwrap();
    assert_eq!((c.reasoning, c.reasoning_field), ("r", Some("reasoning")));
    let j = r#"{"choices":[{"delta":{"content":"a\nb\"\u00e9\/","reasoning":"","thinking":"\tt"},"finish_reason":"s\u0074op"}]}"#;
    let c = decode_lite(j.as_bytes(), &mut scratch).unwrap();
    assert_eq!(
        (c.content, c.reasoning, c.finish_reason),
        ("a\nb\"é/", "\tt", Some("stop"))
    );
    assert_eq!(agrees(j.as_bytes()), Ok(true));
    // Left to the full decoder (which may accept or refuse them).
    let other = [
        r#"{"choices":[{"index":0,"delta":{"content":"\ud83d\ude00"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"\udc00"}}]}"#,
        r#"{"object":"err\u006fr"}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"a","content":"b"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"con\u0074ent":"a"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":[{"type":"text","text":"v"}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":5}}]}"#,
        r#"{"choices":[{"index":1,"delta":{"content":"b"}},{"index":0,"delta":{"content":"a"}}]}"#,
        r#"{"choices":[{"index":0.0,"delta":{"content":"a"}}]}"#,
        r#"{"choices":[{"index":00,"delta":{"content":"a"}}]}"#,
        r#"{"choices":[{"delta":{"tool_calls":[]}}]}"#,
        r#"{"choices":[{"delta":{"content":"a"}}],"usage":{"completion_tokens":1}}"#,
        r#"{"choices":[],"usage":{}}"#,
        r#"{"object":"error","message":"m","type":"t","code":1}"#,
        r#"{"error":{"message":"boom"}}"#,
        r#"{"choices":[{"delta":{"content":"a"}}]} x"#,
        r#"{"choices":[{"delta":{"content":"a"}}],}"#,
        r#"{"created":01}"#,
        r#"{"created":1.}"#,
        r#"{"created":1e}"#,
        r#"{"s":"\x"}"#,
        r#"{"s":"\u12G4"}"#,
        "{\"s\":\"a\tb\"}",
        "{\n\"choices\":[]}",
        "[1]",
        "",
        "{",
    ];
    for j in other {
        assert_eq!(agrees(j.as_bytes()), Ok(false), "{j}");
    }
    assert_eq!(
        agrees(b"{\"choices\":[{\"delta\":{\"content\":\"\xff\"}}]}"),
        Ok(false)
    );
}

#[test]
fn what_answered_is_read_by_both_decoders_and_the_template() {
    let p = |t: &str| {
        format!(
            r#"{{"id":"c1","object":"chat.completion.chunk","model":"gpt-4o-2024-08-06","system_fingerprint":"fp_50cad350e4","choices":[{{"index":0,"delta":{{"content":"{t}"}},"finish_reason":null}}]}}"#
        )
    };
    let first = p("a");
    let full = decode(first.as_bytes()).unwrap();
    assert_eq!(
        (full.model(), full.system_fingerprint()),
        ("gpt-4o-2024-08-06", "fp_50cad350e4")
    );
    let mut cache = LiteCache::default();
    for t in ["a", "bcd", "e"] {
        let next = p(t);
        let c = decode_cached(next.as_bytes(), &mut cache).unwrap();
        assert_eq!(
            (c.content, c.model, c.system_fingerprint),
            (t, "gpt-4o-2024-08-06", "fp_50cad350e4")
        );
    }
    // A null fingerprint (vLLM) and an escaped model name.
    let j = r#"{"model":"org\/m\u00e9","system_fingerprint":null,"choices":[{"index":0,"delta":{"content":"x"}}]}"#;
    assert_eq!(agrees(j.as_bytes()), Ok(true));
    let mut scratch = String::new();
    let c = decode_lite(j.as_bytes(), &mut scratch).unwrap();
    assert_eq!((c.model, c.system_fingerprint), ("org/mé", ""));
    // A whole completion.
    let body = br#"{"id":"x","object":"chat.completion","model":"deepseek-chat-v3-0324","system_fingerprint":"fp_8802369eaa","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}"#;
    let c = decode(body).unwrap();
    assert_eq!(
        (c.model(), c.system_fingerprint()),
        ("deepseek-chat-v3-0324", "fp_8802369eaa")
    );
    // Not a string: absent for the full decoder, left to it by the fast path.
    for j in [
        r#"{"model":5,"choices":[{"index":0,"delta":{"content":"x"}}]}"#,
        r#"{"system_fingerprint":{"a":1},"choices":[]}"#,
        r#"{"model":"a","model":"b","choices":[]}"#,
    ] {
        assert_eq!(agrees(j.as_bytes()), Ok(false), "{j}");
    }
    assert_eq!(decode(br#"{"model":5,"choices":[]}"#).unwrap().model(), "");
}

#[test]
fn quote_or_backslash_finds_the_first() {
    for n in 0..40 {
        for at in 0..=n {
            for c in [b'"', b'\\'] {
                let mut b = vec![b'a'; n];
                if at < n {
                    b[at] = c;
                    // Bytes that a carry could turn into a false hit, after the real one.
                    for (i, x) in b.iter_mut().enumerate().skip(at + 1) {
                        *x = [b'"', b'\\', 0x21, 0x5b, 0xa2, 0x01][i % 6];
                    }
                }
                let want = b.iter().position(|&c| c == b'"' || c == b'\\');
                assert_eq!(quote_or_backslash(&b), want, "{n} {at}");
            }
        }
    }
}

#[test]
fn the_fast_path_agrees_on_every_corpus_payload() {
    let mut answered = 0;
    for (name, body) in crate::probe::sse::tests::corpus() {
        for line in body.split(|&b| b == b'\n' || b == b'\r') {
            let Some(data) = line.strip_prefix(b"data:") else {
                continue;
            };
            let data = data.trim_ascii();
            if let Err(e) = agrees(data) {
                panic!("{name}: {e}");
            }
            answered += usize::from(agrees(data) == Ok(true));
        }
    }
    assert!(
        answered > 20,
        "the fast path answered {answered} corpus payloads"
    );
}

use proptest::prelude::*;

/// A JSON scalar, or something close to one that is not.
fn leaf() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "null",
        "true",
        "false",
        "0",
        "1",
        "-0",
        "01",
        "1.5",
        "-2e+3",
        "1e400",
        "1.",
        "-",
        "\"\"",
        "\"x\"",
        "\"stop\"",
        "\"error\"",
        "\"a\\nb\"",
        "\"\\u00e9\"",
        "\"\\x\"",
        "\"é\"",
        "\"tab\there\"",
        "nul",
        "\"unterminated",
    ])
    .prop_map(str::to_string)
}

/// JSON-like text over the decoder's own keys, with invalid numbers, strings, escapes,
/// duplicates and odd whitespace mixed in.
fn json_text() -> impl Strategy<Value = String> {
    let keys = prop::sample::select(vec![
        "choices",
        "index",
        "delta",
        "message",
        "content",
        "reasoning_content",
        "reasoning",
        "reasoning_text",
        "thinking",
        "reasoning_details",
        "tool_calls",
        "function_call",
        "finish_reason",
        "usage",
        "x_groq",
        "error",
        "object",
        "type",
        "code",
        "role",
        "id",
        "logprobs",
        "text",
        "completion_tokens",
        "con\\u0074ent",
    ]);
    let leaf = leaf();
    let ws = prop::sample::select(vec!["", "", "", " ", "\n", "\t ", "\u{c}"]);
    leaf.prop_recursive(5, 48, 6, move |inner| {
        prop_oneof![
            prop::collection::vec((keys.clone(), inner.clone(), ws.clone()), 0..6).prop_map(
                |members| {
                    let m: Vec<String> = members
                        .into_iter()
                        .map(|(k, v, w)| format!("{w}\"{k}\"{w}:{w}{v}{w}"))
                        .collect();
                    format!("{{{}}}", m.join(","))
                }
            ),
            prop::collection::vec(inner, 0..3).prop_map(|v| format!("[{}]", v.join(","))),
        ]
    })
}

/// Chunk-shaped text: one choice with a delta, members drawn as in [`json_text`].
fn chunk_text() -> impl Strategy<Value = String> {
    let keys = prop::sample::select(vec![
        "content",
        "reasoning_content",
        "reasoning",
        "reasoning_text",
        "thinking",
        "role",
        "tool_calls",
        "refusal",
        "content",
    ]);
    let top = prop::sample::select(vec![
        "\"id\":\"c1\"",
        "\"object\":\"chat.completion.chunk\"",
        "\"usage\":null",
        "\"created\":17",
        "\"model\":\"m\"",
        "\"error\":null",
        "\"x_groq\":null",
        "\"object\":\"error\"",
        "\"usage\":{\"completion_tokens\":2}",
        "\"type\":\"t\"",
        "\"id\":\"c1\"",
        "\"usage\":null",
        "\"model\":\"m\"",
        "\"created\":17",
    ]);
    let index = prop::sample::select(vec![
        "",
        "\"index\":0,",
        "\"index\":0,",
        "\"index\":1,",
        "\"index\":null,",
    ]);
    let good = prop::sample::select(vec!["null", "\"\"", "\"x\"", "\"stop\"", "\"é\""])
        .prop_map(str::to_string);
    let value = prop_oneof![12 => good, 2 => leaf(), 1 => json_text()];
    (
        prop::collection::vec((keys, value.clone()), 0..4),
        value,
        prop::collection::vec(top, 0..4),
        index,
    )
        .prop_map(|(delta, finish, top, index)| {
            let d: Vec<String> = delta.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
            let mut members = vec![format!(
                "\"choices\":[{{{index}\"delta\":{{{}}},\"finish_reason\":{finish}}}]",
                d.join(",")
            )];
            members.extend(top.into_iter().map(str::to_string));
            format!("{{{}}}", members.join(","))
        })
}

/// Payloads of one shape with tokens put in as they are (some break the JSON, escape
/// themselves out of the string, or are not UTF-8).
fn payload_runs() -> impl Strategy<Value = Vec<Vec<u8>>> {
    let shapes = prop::sample::select(vec![
        r#"{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"TOK"},"logprobs":null,"finish_reason":null}],"usage":null}"#,
        r#"{"id":"c1","choices":[{"index":0,"delta":{"content":null,"reasoning_content":"TOK"},"finish_reason":null}]}"#,
        r#"{"id":"c1","choices":[{"index":0,"delta":{"content":"TOK","reasoning":"r"},"finish_reason":null}]}"#,
        r#"{"id":"c1","choices":[{"index":0,"delta":{"reasoning":"","thinking":"TOK","content":"v"},"finish_reason":"length"}]}"#,
        r#"{"id":"c1","choices":[{"index":0,"delta":{"reasoning_content":"TOK","content":""},"finish_reason":"stop"}]}"#,
        r#"{"id":"c2","choices":[{"index":0,"delta":{"content":"TOK"}}],"obfuscation":"TOK"}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"a\nb"},"finish_reason":"TOK"}]}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}"#,
        r#"{"choices":[],"usage":{"completion_tokens":3}}"#,
    ]);
    let tokens = prop::sample::select(vec![
        &b"x"[..],
        b"hello",
        b" world",
        "é".as_bytes(),
        "中文".as_bytes(),
        b"",
        b"\\n",
        b"a\\\"b",
        b"\"",
        b"\\",
        b"\x01",
        b"\t",
        b"\\u00e9",
        b"\\ud83d",
        b"\xff",
        b"\xc3",
        br#"x"}],"usage":{"completion_tokens":1},"a":[{"b":""#,
        br#"","content":"y"#,
    ]);
    let item = (shapes, tokens).prop_map(|(shape, token)| {
        let (a, b) = shape.split_once("TOK").unwrap_or((shape, ""));
        let b = b.replacen("TOK", "o", 1);
        [a.as_bytes(), token, b.as_bytes()].concat()
    });
    prop::collection::vec(item, 1..12)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 2000,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// The template gives, payload after payload, what a fresh parse gives.
    #[test]
    fn the_template_answers_as_the_parser(run in payload_runs()) {
        let mut cache = LiteCache::default();
        for p in &run {
            let mut scratch = String::new();
            let want = decode_lite(p, &mut scratch);
            prop_assert_eq!(
                decode_cached(p, &mut cache),
                want,
                "{:?}",
                String::from_utf8_lossy(p)
            );
        }
    }
}

#[test]
fn the_template_is_used_for_the_next_token_only() {
    let p = |t: &str| {
        format!(
            r#"{{"id":"c1","choices":[{{"index":0,"delta":{{"content":"{t}"}},"finish_reason":null}}]}}"#
        )
    };
    let mut cache = LiteCache::default();
    assert_eq!(
        decode_cached(p("a").as_bytes(), &mut cache)
            .unwrap()
            .content,
        "a"
    );
    assert_eq!(cache.slot.map(|s| s.2), Some(SlotKind::Content));
    let hit = p("bcd");
    let c = decode_cached(hit.as_bytes(), &mut cache).unwrap();
    // Answered from the payload itself, not from the template.
    assert_eq!(c.content, "bcd");
    assert_eq!(c.content.as_ptr(), hit[hit.find("bcd").unwrap()..].as_ptr());
    // Not parsed: a parse would have made it the template.
    assert_eq!(&cache.buf[..], p("a").as_bytes());
    // Another shape is parsed and becomes the template.
    let other = p("z").replace("null", r#""stop""#);
    assert_eq!(
        decode_cached(other.as_bytes(), &mut cache)
            .unwrap()
            .finish_reason,
        Some("stop")
    );
    assert_eq!(&cache.buf[..], other.as_bytes());
    let next = p("w").replace("null", r#""stop""#);
    let c = decode_cached(next.as_bytes(), &mut cache).unwrap();
    assert_eq!((c.content, c.finish_reason), ("w", Some("stop")));
    assert_eq!(&cache.buf[..], other.as_bytes());
    let a = p("a");
    decode_cached(a.as_bytes(), &mut cache).unwrap();
    // An escaped token is parsed (and leaves the template as it was).
    let escaped = p(r"x\ny");
    let c = decode_cached(escaped.as_bytes(), &mut cache).unwrap();
    assert_eq!(c.content, "x\ny");
    assert_eq!(&cache.buf[..], p("a").as_bytes());
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 3000,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn the_fast_path_agrees_on_chunk_shapes(j in chunk_text()) {
        prop_assert_eq!(agrees(j.as_bytes()).err(), None);
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 4000,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn the_fast_path_never_disagrees_with_the_full_decoder(j in json_text(), cut in 0usize..4) {
        prop_assert_eq!(agrees(j.as_bytes()).err(), None);
        // And with the end cut off (half a payload).
        let b = j.as_bytes();
        let b = &b[..b.len().saturating_sub(cut)];
        prop_assert_eq!(agrees(b).err(), None);
    }
}
