//! The terminal view of a `latmesh compat` run: the provider × check table with the evidence
//! of every verdict that is not a pass and each provider's compatibility score
//! ([`render_compat`]); the quality-parity table ([`render_quality`]).

use std::fmt::Write as _;

use comfy_table::{Cell as TCell, Table, presets};

use latmesh_core::compat::{CompatCheck, Evidence, Verdict};
use latmesh_results::parity::{ProviderCompat, QualityParity};

use super::right;

/// The evidence in words: `HTTP 400, field stream_options: message`.
fn evidence_text(e: &Evidence) -> String {
    let mut parts = Vec::new();
    if let Some(s) = e.http_status {
        parts.push(format!("HTTP {s}"));
    }
    if let Some(f) = &e.field {
        parts.push(format!("field {f}"));
    }
    let head = parts.join(", ");
    match (head.is_empty(), e.message.is_empty()) {
        (true, _) => e.message.clone(),
        (false, true) => head,
        (false, false) => format!("{head}: {}", e.message),
    }
}

/// A table cell: the verdict's short form, with passes / samples for an unstable one
/// (`UNST 1/3`).
fn verdict_cell(r: &latmesh_core::compat::CompatResult) -> String {
    match r.verdict {
        Verdict::Unstable => format!("UNST {}/{}", r.samples.pass, r.samples.taken()),
        Verdict::Pass
        | Verdict::Fail
        | Verdict::NotOffered
        | Verdict::NotApplicable
        | Verdict::Inconclusive => r.verdict.short().to_string(),
    }
}

/// Width evidence lines are wrapped at, characters.
const EVIDENCE_WIDTH: usize = 100;

/// `head` then `text`, wrapped at spaces to `width` characters, the continuation lines
/// indented under the start of `text` (or by 7 when `head` is wider than half the width); a
/// word longer than a line stays whole. Ends with a newline.
fn wrapped(head: &str, text: &str, width: usize) -> String {
    let head_w = head.chars().count();
    let indent = if head_w * 2 > width { 7 } else { head_w };
    let mut out = head.to_string();
    let mut col = head_w;
    let mut first = true;
    for word in text.split(' ') {
        let w = word.chars().count();
        if !first && col + 1 + w > width {
            out.push('\n');
            out.push_str(&" ".repeat(indent));
            col = indent;
        } else if !first {
            out.push(' ');
            col += 1;
        }
        out.push_str(word);
        col += w;
        first = false;
    }
    out.push('\n');
    out
}

/// One evidence line: (verdict rank, check, evidence text) and the providers sharing it.
type Finding<'a> = ((u8, CompatCheck, String), Vec<&'a str>);

/// The provider × check table (`pass`, `FAIL`, `n/o` not offered, `n/a` not applicable,
/// `?` inconclusive; blank: not run), one line per verdict that is not a pass with its
/// evidence, then each provider's compatibility score (passed / counted, and the
/// inconclusive checks left out). Empty when no provider was checked.
pub fn render_compat(providers: &[ProviderCompat]) -> String {
    let mut out = String::new();
    if providers.is_empty() {
        return out;
    }
    let checks: Vec<CompatCheck> = CompatCheck::ALL
        .into_iter()
        .filter(|c| {
            providers
                .iter()
                .any(|p| p.results.iter().any(|r| r.check == *c))
        })
        .collect();
    let mut table = Table::new();
    table.load_preset(presets::ASCII_MARKDOWN);
    let mut header = vec![TCell::new("provider")];
    header.extend(checks.iter().map(|c| TCell::new(c.as_str())));
    table.set_header(header);
    for p in providers {
        let mut row = vec![TCell::new(&p.provider)];
        row.extend(checks.iter().map(|c| {
            let cell = p
                .results
                .iter()
                .find(|r| r.check == *c)
                .map_or(String::new(), verdict_cell);
            TCell::new(cell)
        }));
        table.add_row(row);
    }
    let _ = writeln!(
        out,
        "compatibility checks (v{}): pass, FAIL, n/o not offered, n/a not applicable, ? inconclusive, UNST unstable (passes/samples)",
        latmesh_core::compat::COMPAT_CHECKS_VERSION
    );
    let _ = writeln!(out, "{table}");
    // One line per finding: the providers that share a verdict and its evidence text are
    // listed together, failures first, then inconclusive, not offered, not applicable.
    let rank = |v: Verdict| match v {
        Verdict::Fail => 0,
        Verdict::Unstable => 1,
        Verdict::Inconclusive => 2,
        Verdict::NotOffered => 3,
        Verdict::NotApplicable => 4,
        Verdict::Pass => 5,
    };
    let mut findings: Vec<Finding<'_>> = Vec::new();
    for p in providers {
        for r in p.results.iter().filter(|r| r.verdict != Verdict::Pass) {
            let key = (rank(r.verdict), r.check, evidence_text(&r.evidence));
            match findings.iter_mut().find(|(k, _)| *k == key) {
                Some((_, names)) => names.push(&p.provider),
                None => findings.push((key, vec![&p.provider])),
            }
        }
    }
    findings.sort_by_key(|f| (f.0.0, f.0.1));
    if !findings.is_empty() {
        let _ = writeln!(
            out,
            "\nevidence (providers sharing a finding listed together):"
        );
    }
    let short = |rank: u8| {
        [
            Verdict::Fail,
            Verdict::Unstable,
            Verdict::Inconclusive,
            Verdict::NotOffered,
            Verdict::NotApplicable,
            Verdict::Pass,
        ][usize::from(rank)]
        .short()
    };
    for ((r, check, text), names) in &findings {
        let head = format!(
            "  {:<4} {:<18} {}: ",
            short(*r),
            check.as_str(),
            names.join(", ")
        );
        out.push_str(&wrapped(&head, text, EVIDENCE_WIDTH));
    }
    let width = providers
        .iter()
        .map(|p| p.provider.chars().count())
        .max()
        .unwrap_or(0)
        .max(8);
    let _ = writeln!(
        out,
        "\ncompatibility score (passed / counted; not applicable and inconclusive left out):"
    );
    for p in providers {
        let line = match &p.score {
            Some(s) => format!(
                "{:.2} ({}/{} passed, {} inconclusive)",
                s.score, s.passed, s.counted, s.inconclusive
            ),
            None => "- (no check counted)".to_string(),
        };
        let _ = writeln!(out, "  {:<width$} {line}", p.provider);
    }
    out
}

/// A share 0..=1 as a percentage, `-` when missing.
fn pct(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{:.0}%", v * 100.0))
}

/// The quality-parity table: per provider the graded samples, accuracy with its 95 %
/// interval, agreement with the other providers' majority answers, median output tokens,
/// the length ratio to the others, the answers' fingerprint and the flag. Empty when no
/// provider was sampled.
pub fn render_quality(q: &QualityParity) -> String {
    let mut out = String::new();
    if q.providers.is_empty() {
        return out;
    }
    let mut table = Table::new();
    table.load_preset(presets::ASCII_MARKDOWN);
    table.set_header(
        [
            "provider",
            "graded / sent",
            "accuracy [95% CI]",
            "agreement",
            "median out tok",
            "length ratio",
            "fingerprint",
            "flag",
        ]
        .map(TCell::new),
    );
    for p in &q.providers {
        let accuracy = match (p.accuracy, p.accuracy_ci) {
            (Some(a), Some((lo, hi))) => {
                format!("{:.0}% [{:.0}–{:.0}%]", a * 100.0, lo * 100.0, hi * 100.0)
            }
            (a, _) => pct(a),
        };
        table.add_row(vec![
            TCell::new(&p.provider),
            right(format!("{} / {}", p.graded, p.samples)),
            right(accuracy),
            right(pct(p.agreement)),
            right(
                p.median_output_tokens
                    .map_or("-".into(), |m| format!("{m:.0}")),
            ),
            right(p.length_ratio.map_or("-".into(), |r| format!("{r:.2}"))),
            TCell::new(p.fingerprint.as_deref().unwrap_or("-")),
            TCell::new(if p.flag.is_some() { "FLAGGED" } else { "" }),
        ]);
    }
    let _ = writeln!(
        out,
        "quality parity ({}): temperature 0, graded answers of machine-checkable prompts \
         (the interval counts each prompt once)",
        q.set
    );
    let _ = writeln!(out, "{table}");
    for p in &q.providers {
        if let Some(flag) = &p.flag {
            let _ = writeln!(out, "  FLAGGED {}: {flag}", p.provider);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use latmesh_core::compat::CompatResult;
    use latmesh_results::parity::{ProviderQuality, compat_by_provider};

    fn result(provider: &str, check: CompatCheck, verdict: Verdict, msg: &str) -> CompatResult {
        CompatResult {
            provider: provider.into(),
            check,
            verdict,
            evidence: Evidence {
                http_status: Some(400),
                field: Some("stream_options".into()),
                message: msg.into(),
            },
            samples: latmesh_core::compat::SampleTally::of(verdict),
        }
    }

    #[test]
    fn an_unstable_check_shows_its_passes_and_long_evidence_wraps() {
        let mut r = result(
            "llama",
            CompatCheck::JsonMode,
            Verdict::Unstable,
            &format!(
                "pass 1/3, fail 2/3: content is not a JSON object: \"{}\"",
                "Sure! Here is the JSON you asked for ".repeat(4).trim()
            ),
        );
        r.samples = latmesh_core::compat::SampleTally {
            pass: 1,
            fail: 2,
            ..Default::default()
        };
        let text = render_compat(&compat_by_provider(&[r]));
        assert!(text.contains("| llama    | UNST 1/3  |"), "{text}");
        assert!(
            text.contains("  UNST json_mode          llama: HTTP 400, field stream_options: pass 1/3, fail 2/3: content is"),
            "{text}"
        );
        // Every line within the width; the rest under the evidence's start.
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("Sure!") || l.starts_with("                                 "))
            .collect();
        assert!(lines.len() >= 2, "{text}");
        assert!(
            lines.iter().all(|l| l.chars().count() <= EVIDENCE_WIDTH),
            "{text}"
        );
        assert!(text.contains("0.00 (0/1 passed, 0 inconclusive)"), "{text}");
        assert_eq!(wrapped("ab: ", "c d", 100), "ab: c d\n");
        assert_eq!(wrapped("ab: ", "ccc ddd", 8), "ab: ccc\n    ddd\n");
    }

    #[test]
    fn the_compat_table_shows_verdicts_evidence_and_scores() {
        let rs = [
            result("fast", CompatCheck::Stream, Verdict::Pass, "ok"),
            result("fast", CompatCheck::StreamUsage, Verdict::Fail, "refused"),
            result("fast", CompatCheck::WrongKey, Verdict::NotOffered, "no key"),
            result(
                "slow",
                CompatCheck::Stream,
                Verdict::Inconclusive,
                "HTTP 503",
            ),
            result(
                "slow-provider-with-a-long-name",
                CompatCheck::WrongKey,
                Verdict::NotOffered,
                "no key",
            ),
        ];
        let text = render_compat(&compat_by_provider(&rs));
        assert!(
            text.contains("| provider                       | stream | stream_usage | wrong_key |"),
            "{text}"
        );
        assert!(
            text.contains("| fast                           | pass   | FAIL         | n/o       |"),
            "{text}"
        );
        // Findings: failures first, then inconclusive, then not offered; providers that
        // share one are listed together.
        let fail = text
            .find("  FAIL stream_usage       fast: HTTP 400, field stream_options: refused")
            .expect(&text);
        let unsure = text
            .find("  ?    stream             slow: HTTP 400")
            .expect(&text);
        let shared = text
            .find("  n/o  wrong_key          fast, slow-provider-with-a-long-name: HTTP 400")
            .expect(&text);
        assert!(fail < unsure && unsure < shared, "{text}");
        assert!(!text.contains("stream             fast"), "{text}");
        assert!(
            text.contains("  fast                           0.33 (1/3 passed, 0 inconclusive)"),
            "{text}"
        );
        assert!(
            text.contains("  slow                           - (no check counted)"),
            "{text}"
        );
        assert_eq!(render_compat(&[]), "");
    }

    #[test]
    fn the_quality_table_shows_what_the_struct_holds() {
        let q = QualityParity {
            set: "quality-v1".into(),
            providers: vec![ProviderQuality {
                provider: "quant".into(),
                samples: 12,
                graded: 11,
                correct: 6,
                accuracy: Some(6.0 / 11.0),
                accuracy_ci: Some((0.28, 0.79)),
                agreement: Some(0.5),
                median_output_tokens: Some(40.0),
                length_ratio: Some(0.62),
                fingerprint: Some("0123456789abcdef".into()),
                flag: Some("possible quantization or different model".into()),
            }],
        };
        let text = render_quality(&q);
        assert!(text.starts_with("quality parity (quality-v1)"), "{text}");
        for want in [
            "11 / 12",
            "55% [28–79%]",
            "50%",
            "40",
            "0.62",
            "0123456789abcdef",
            "possible quantization",
        ] {
            assert!(text.contains(want), "{want}: {text}");
        }
        assert_eq!(render_quality(&QualityParity::default()), "");
    }
}
