//! The full decoder of provider payloads: leniency, every field's spellings, errors,
//! choices (the fast path's tests: `lite/tests.rs`).

use std::borrow::Cow;

use latmesh_core::record::Usage;

use super::*;

fn delta_of(json: &str) -> (String, String, bool) {
    let c = decode(json.as_bytes()).unwrap();
    let d = c.delta().cloned().unwrap_or_default();
    (
        d.content().to_string(),
        d.reasoning().into_owned(),
        d.has_tool_fragment(),
    )
}

#[test]
fn content_and_every_reasoning_spelling() {
    assert_eq!(
        delta_of(r#"{"choices":[{"delta":{"content":"a\nb"}}]}"#).0,
        "a\nb"
    );
    for field in [
        "reasoning_content",
        "reasoning",
        "reasoning_text",
        "thinking",
    ] {
        let j =
            format!(r#"{{"choices":[{{"index":0,"delta":{{"content":null,"{field}":"hm"}}}}]}}"#);
        assert_eq!(
            delta_of(&j),
            (String::new(), "hm".to_string(), false),
            "{field}"
        );
    }
    // OpenRouter sends reasoning and reasoning_details with the same text: counted once.
    let j = r#"{"choices":[{"delta":{"reasoning":"x","reasoning_details":[{"type":"reasoning.text","text":"x"}]}}]}"#;
    assert_eq!(delta_of(j).1, "x");
    let j =
        r#"{"choices":[{"delta":{"reasoning_details":[{"type":"reasoning.text","text":"y"}]}}]}"#;
    assert_eq!(delta_of(j).1, "y");
    // Content parts (Mistral thinking parts).
    let j = r#"{"choices":[{"delta":{"content":[{"type":"thinking","thinking":[{"type":"text","text":"t"}]},{"type":"text","text":"v"}]}}]}"#;
    assert_eq!(delta_of(j), ("v".to_string(), "t".to_string(), false));
}

#[test]
fn odd_types_are_absent_not_errors() {
    let j = r#"{"choices":[{"index":0,"delta":{"content":5,"reasoning":{"x":1},"tool_calls":null},"finish_reason":7}],"usage":"n/a"}"#;
    let c = decode(j.as_bytes()).unwrap();
    assert_eq!(c.delta().unwrap().content(), "");
    assert_eq!(c.finish_reason(), None);
    assert_eq!(c.usage(), None);
    assert!(decode(b"[1,2]").is_err());
    assert!(decode(b"{\"id\":\"x\",\"obj").is_err());
    assert!(decode(b"{}").unwrap().delta().is_none());
}

#[test]
fn strings_without_escapes_are_borrowed() {
    let j = r#"{"choices":[{"delta":{"content":"plain"}}]}"#;
    let c = decode(j.as_bytes()).unwrap();
    assert!(matches!(
        c.delta().unwrap().content,
        ContentField::Str(Cow::Borrowed("plain"))
    ));
}

#[test]
fn tool_call_fragments() {
    let j = r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"get_weather","arguments":"{\""}}]}}]}"#;
    let c = decode(j.as_bytes()).unwrap();
    let d = c.delta().unwrap();
    assert!(d.has_tool_fragment());
    let t = &d.tool_calls.0[0];
    assert_eq!((t.index.0, t.id.0.as_deref()), (Some(0), None));
    let f = t.function.0.as_ref().unwrap();
    assert_eq!(
        (f.name.as_str(), f.arguments.0.as_deref()),
        ("get_weather", Some("{\""))
    );
    let j = r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":{"city":"Paris"}}}]}}]}"#;
    let c = decode(j.as_bytes()).unwrap();
    let f = c.delta().unwrap().tool_calls.0[0]
        .function
        .0
        .clone()
        .unwrap();
    assert_eq!(f.arguments.0.as_deref(), Some(r#"{"city":"Paris"}"#));
    let j = r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"type":"function","function":{"arguments":""}}]}}]}"#;
    assert!(!delta_of(j).2);
    let j = r#"{"choices":[{"delta":{"function_call":{"name":"f","arguments":""}}}]}"#;
    assert!(delta_of(j).2);
}

#[test]
fn usage_wherever_it_is() {
    let u = |j: &str| decode(j.as_bytes()).unwrap().usage();
    let top =
        u(r#"{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12}}"#)
            .unwrap();
    assert_eq!(
        (top.prompt_tokens, top.completion_tokens, top.total_tokens),
        (Some(9), Some(3), Some(12))
    );
    // A float that is a whole number is that count; a fraction is no count.
    let floats =
        u(r#"{"usage":{"prompt_tokens":9.0,"completion_tokens":1.5,"total_tokens":1e-30}}"#)
            .unwrap();
    assert_eq!(
        (
            floats.prompt_tokens,
            floats.completion_tokens,
            floats.total_tokens
        ),
        (Some(9), None, None)
    );
    let groq = u(
        r#"{"choices":[{"delta":{},"finish_reason":"stop"}],"x_groq":{"id":"r","usage":{"completion_tokens":4}}}"#,
    );
    assert_eq!(groq.unwrap().completion_tokens, Some(4));
    let moon = u(
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop","usage":{"completion_tokens":5}}]}"#,
    );
    assert_eq!(moon.unwrap().completion_tokens, Some(5));
    let ds = u(r#"{"usage":{"prompt_tokens":15,"completion_tokens":6,"completion_tokens_details":{"reasoning_tokens":3},"prompt_cache_hit_tokens":8}}"#).unwrap();
    assert_eq!((ds.reasoning_tokens, ds.cached_tokens), (Some(3), Some(8)));
    let oa = u(r#"{"usage":{"prompt_tokens":15,"prompt_tokens_details":{"cached_tokens":4},"prompt_cache_hit_tokens":8}}"#).unwrap();
    assert_eq!(oa.cached_tokens, Some(4));
    let alt =
        u(r#"{"usage":{"input_tokens":"7","output_tokens":2.0,"reasoning_tokens":1}}"#).unwrap();
    assert_eq!(
        (
            alt.prompt_tokens,
            alt.completion_tokens,
            alt.reasoning_tokens
        ),
        (Some(7), Some(2), Some(1))
    );
    assert_eq!(u(r#"{"usage":null}"#), None);
    assert_eq!(u(r#"{"usage":{}}"#), None);
    let mut acc = None;
    merge_usage(
        &mut acc,
        Usage {
            completion_tokens: Some(1),
            prompt_tokens: Some(9),
            ..Default::default()
        },
    );
    merge_usage(
        &mut acc,
        Usage {
            completion_tokens: Some(2),
            ..Default::default()
        },
    );
    assert_eq!(
        acc.unwrap(),
        Usage {
            completion_tokens: Some(2),
            prompt_tokens: Some(9),
            ..Default::default()
        }
    );
}

#[test]
fn errors_in_every_shape() {
    let e = ProviderError::from_payload(br#"{"error":{"message":"m","type":"server_error"}}"#);
    assert_eq!(
        (e.kind.as_deref(), e.code, e.message.as_deref()),
        (Some("server_error"), None, Some("m"))
    );
    let e = ProviderError::from_payload(
        br#"{"code":400,"message":"too long","type":"invalid_request_error"}"#,
    );
    assert_eq!(
        (e.kind.as_deref(), e.code.as_deref()),
        (Some("invalid_request_error"), Some("400"))
    );
    let e = ProviderError::from_payload(
        br#"{"object":"error","message":"bad","type":"BadRequestError","code":400}"#,
    );
    assert_eq!(e.kind.as_deref(), Some("BadRequestError"));
    let e = ProviderError::from_payload(b"<html>\n <b>502</b>\n</html>");
    assert_eq!(e.message.as_deref(), Some("<html> <b>502</b> </html>"));
    let e = ProviderError::from_payload(br#"{"error":"overloaded"}"#);
    assert_eq!(e.message.as_deref(), Some("overloaded"));
    let c = decode(br#"{"choices":[{"delta":{"content":"x"}}],"error":null}"#).unwrap();
    assert_eq!(c.error(), None);
    let c = decode(br#"{"object":"chat.completion.chunk","choices":[]}"#).unwrap();
    assert_eq!(c.error(), None);
}

#[test]
fn whole_completion_with_leading_blank_lines() {
    let body = "\n\n\n\n{\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"Four.\",\"reasoning_content\":\"r\",\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},\"finish_reason\":\"stop\"}],\"usage\":{\"completion_tokens\":2}}\n";
    let c = decode(body.as_bytes()).unwrap();
    let m = c.message().unwrap();
    assert_eq!(
        (m.content().as_ref(), m.reasoning().as_ref()),
        ("Four.", "r")
    );
    assert_eq!(m.tool_calls.0[0].id.as_str(), "c1");
    assert_eq!(c.finish_reason(), Some("stop"));
}

#[test]
fn only_the_first_choice_is_measured() {
    let j = r#"{"choices":[{"index":1,"delta":{"content":"b"},"usage":{"completion_tokens":1}},{"index":0,"delta":{"content":"a"}}]}"#;
    let c = decode(j.as_bytes()).unwrap();
    assert_eq!(c.delta().unwrap().content(), "a");
    assert_eq!(c.usage().unwrap().completion_tokens, Some(1));
}

/// A tool call of any kind is read: `function`, a custom tool's `custom.input`, the body
/// the `type` names, else the first other body; `function` wins; odd members are skipped.
#[test]
fn tool_calls_of_every_kind() {
    let call = |entry: &str| {
        let json = format!(r#"{{"choices":[{{"delta":{{"tool_calls":[{entry}]}}}}]}}"#);
        let c = decode(json.as_bytes()).unwrap();
        let d = c.delta().cloned().unwrap();
        let t = d.tool_calls.0.first().cloned().unwrap_or_default();
        let f = t.function.0.unwrap_or_default();
        (
            t.id.as_str().to_string(),
            f.name.as_str().to_string(),
            f.arguments.0.map(Cow::into_owned),
            d.has_tool_fragment(),
        )
    };
    let some = |id: &str, name: &str, args: Option<&str>, frag| {
        (
            id.to_string(),
            name.to_string(),
            args.map(str::to_string),
            frag,
        )
    };
    assert_eq!(
        call(r#"{"id":"c","type":"custom","custom":{"name":"sql","input":"SELECT 1"}}"#),
        some("c", "sql", Some("SELECT 1"), true)
    );
    assert_eq!(
        call(r#"{"index":0,"type":"custom","custom":{"input":" 2"}}"#),
        some("", "", Some(" 2"), true)
    );
    // The body the type names wins over another object; `function` over both.
    assert_eq!(
        call(r#"{"type":"b","a":{"name":"x"},"b":{"name":"y","arguments":"{}"}}"#),
        some("", "y", Some("{}"), true)
    );
    assert_eq!(
        call(r#"{"type":"b","b":{"name":"y"},"function":{"name":"f","arguments":"{}"}}"#),
        some("", "f", Some("{}"), true)
    );
    // A body of an unnamed kind; members that are no call body are not one.
    assert_eq!(
        call(r#"{"id":"c","later":{"input":"go"},"meta":{"x":1},"n":[1]}"#),
        some("c", "", Some("go"), true)
    );
    assert_eq!(
        call(r#"{"index":0,"meta":{"x":1},"type":7}"#),
        some("", "", None, false)
    );
}
