//! The "Compatibility" and "Quality parity" sections of the HTML report: what `latmesh
//! compat` measured ([`CompatReport`]), placed right after the region × provider matrix.
//!
//! - [`compat`]: a provider × check table, one cell per verdict with a class per verdict
//!   (`v-pass`, `v-fail`, `v-not_offered`, `v-not_applicable`, `v-inconclusive`), the legend,
//!   each provider's score (`passed/counted`, inconclusive checks apart), and the evidence of
//!   every cell that did not pass as a numbered list under the table, failures first, one
//!   line per finding with the providers that share it (each such cell links to its line:
//!   nothing needs hovering).
//! - [`quality`]: per provider the graded samples, accuracy with its 95 % interval, agreement
//!   with the other providers' majority answer, median output tokens and their ratio to the
//!   others', the answers' fingerprint, and the flag "possible quantization or different
//!   model" in a warning style with its evidence.
//!
//! Both read the model's [`CompatReport`] only; the page adds [`CSS`] to its style when the
//! report has one, so a report without it is unchanged.

use maud::{Markup, html};

use latmesh_core::compat::{COMPAT_CHECKS_VERSION, CompatCheck, CompatResult, Evidence, Verdict};
use latmesh_results::parity::{CompatReport, ProviderCompat, QualityParity};

/// The sections' style, added to the page's when the report has compatibility or quality
/// results.
pub const CSS: &str = r#"
table.compat th.check { white-space: normal; max-width: 6.5em; text-align: center; font-size: 11.5px; }
table.compat td.v { text-align: center; font-weight: 600; }
.v-pass { background: #d3ecd0; color: #1e5a2c; }
.v-fail { background: #f6c4b8; color: #7a1f10; }
.v-not_offered { background: #fbe5ad; color: #5e4400; }
.v-not_applicable { background: #eef0f2; color: #6b7580; font-weight: 400 !important; }
.v-inconclusive { background: #dbe6f4; color: #23446e; }
.v-unstable { background: #f3d0e8; color: #6a1650; }
td.v sup a { color: inherit; font-weight: 400; margin-left: 2px; }
ul.verdicts { list-style: none; padding: 0; margin: 6px 0; font-size: 12.5px; }
ul.verdicts li { display: inline-block; margin: 0 14px 4px 0; }
ul.verdicts span, ol.evidence span.v { display: inline-block; min-width: 2.6em; text-align: center; padding: 0 4px; border-radius: 3px; font-weight: 600; }
ol.evidence { font-size: 12.5px; padding-left: 2.2em; }
ol.evidence li { margin: 2px 0; }
table.quality td.flag { white-space: normal; text-align: left; max-width: 36em; }
tr.flagged td { background: #fff1e0; }
.warn { color: #8a2c00; font-weight: 600; }
p.warn { background: #fff1e0; border: 1px solid #f0b27a; padding: 6px 10px; border-radius: 4px; font-size: 13px; }
"#;

/// `v` (0..=1) as a percentage with one decimal: `93.8%`.
fn pct(v: f64) -> String {
    format!("{:.1}%", v * 100.0)
}

/// What a verdict rests on, in words: `HTTP 400 · field response_format · the message`;
/// `no detail recorded` when the evidence is empty.
pub fn evidence_text(e: &Evidence) -> String {
    let mut parts = Vec::new();
    if let Some(s) = e.http_status {
        parts.push(format!("HTTP {s}"));
    }
    if let Some(f) = &e.field {
        parts.push(format!("field {f}"));
    }
    if !e.message.is_empty() {
        parts.push(e.message.clone());
    }
    if parts.is_empty() {
        "no detail recorded".into()
    } else {
        parts.join(" · ")
    }
}

/// What each verdict means, for the legend.
fn verdict_meaning(v: Verdict) -> &'static str {
    match v {
        Verdict::Pass => "the provider did what the check asks",
        Verdict::Fail => "it answered, not as the check asks",
        Verdict::NotOffered => {
            "not offered: the feature is refused or absent (counts as not passing)"
        }
        Verdict::NotApplicable => {
            "not applicable: the provider's API has no such feature (left out of the score)"
        }
        Verdict::Inconclusive => {
            "inconclusive: throttled, 5xx, timeout or connection error, nothing said about the \
             feature (left out of the score, counted apart)"
        }
        Verdict::Unstable => {
            "unstable: the samples of a check that judges generated text disagreed (passes / \
             samples shown; counts as not passing)"
        }
    }
}

/// The checks any provider has a result for, in [`CompatCheck::ALL`] order.
fn checks_run(providers: &[ProviderCompat]) -> Vec<CompatCheck> {
    CompatCheck::ALL
        .into_iter()
        .filter(|c| {
            providers
                .iter()
                .any(|p| p.results.iter().any(|r| r.check == *c))
        })
        .collect()
}

/// Whether a result goes into the evidence list: every verdict but `pass`, and the
/// informational checks (weight 0: their evidence is what they found) whatever the verdict.
fn listed(r: &CompatResult) -> bool {
    r.verdict != Verdict::Pass || r.check.weight() <= 0.0
}

/// One line of the evidence list: a check, a verdict and what it rests on, shared by the
/// providers listed (the same finding on several providers is one line).
struct Finding<'a> {
    check: CompatCheck,
    verdict: Verdict,
    text: String,
    providers: Vec<&'a str>,
}

/// Where a verdict's findings come in the evidence list: fail, inconclusive, not offered,
/// not applicable, then what informational checks found.
fn severity(v: Verdict) -> u8 {
    match v {
        Verdict::Fail | Verdict::Unstable => 0,
        Verdict::Inconclusive => 1,
        Verdict::NotOffered => 2,
        Verdict::NotApplicable => 3,
        Verdict::Pass => 4,
    }
}

/// The evidence list of `providers` over `checks`: one [`Finding`] per (check, verdict,
/// evidence) that some provider got and did not pass (or an informational check found), the
/// most serious verdicts first, then in check order.
fn findings<'a>(providers: &'a [ProviderCompat], checks: &[CompatCheck]) -> Vec<Finding<'a>> {
    let mut out: Vec<Finding<'a>> = Vec::new();
    for c in checks {
        for p in providers {
            let Some(r) = p
                .results
                .iter()
                .find(|r| r.check == *c)
                .filter(|r| listed(r))
            else {
                continue;
            };
            let text = evidence_text(&r.evidence);
            match out
                .iter_mut()
                .find(|f| f.check == r.check && f.verdict == r.verdict && f.text == text)
            {
                Some(f) => f.providers.push(&p.provider),
                None => out.push(Finding {
                    check: r.check,
                    verdict: r.verdict,
                    text,
                    providers: vec![&p.provider],
                }),
            }
        }
    }
    // Stable: check order within a verdict.
    out.sort_by_key(|f| severity(f.verdict));
    out
}

/// A check's name with line-break opportunities after its underscores.
fn check_head(c: CompatCheck) -> Markup {
    let name = c.as_str();
    html! {
        @for (i, part) in name.split('_').enumerate() {
            @if i > 0 { "_" wbr; }
            (part)
        }
    }
}

/// The "Compatibility" section of `report` (its `compat` results).
pub fn compat(report: &CompatReport) -> Markup {
    let providers = &report.compat;
    let checks = checks_run(providers);
    let findings = findings(providers, &checks);
    // The number of the evidence line of `provider`'s result of `check`.
    let number = |provider: &str, check: CompatCheck| {
        findings
            .iter()
            .position(|f| f.check == check && f.providers.contains(&provider))
            .map(|i| i + 1)
    };
    html! {
        p class="small" {
            "Compatibility checks v" (COMPAT_CHECKS_VERSION)
            @if !report.run_id.is_empty() { " (run " (report.run_id) ")" }
            ": small fixed requests per provider, each judged by the rule of docs/metrics.md, \
             \"Compatibility checks\". Score = checks passed / checks counted (pass, fail, \
             not offered and unstable; a check that judges generated text is sampled several \
             times; "
            code { "reasoning_field" } " is informational and not counted); it is the \
             selection matrix's compatibility score where no score was typed in."
        }
        ul class="verdicts" {
            @for v in Verdict::ALL {
                li { span class={ "v-" (v.as_str()) } { (v.short()) } " " (verdict_meaning(v)) }
            }
        }
        "\n"
        table class="compat" {
            thead {
                tr {
                    th class="row" { "provider" }
                    @for c in &checks { th class="check" { (check_head(*c)) } }
                    th { "score" }
                    th { "inconclusive" }
                }
            }
            tbody {
                @for p in providers {
                    tr {
                        td class="row" { (p.provider) }
                        @for c in &checks {
                            @match p.results.iter().find(|r| r.check == *c) {
                                None => { td class="empty" { "–" } }
                                Some(r) => {
                                    td class={ "v v-" (r.verdict.as_str()) }
                                        title=[(r.evidence != Evidence::default()).then(|| evidence_text(&r.evidence))] {
                                        (r.verdict.short())
                                        @if r.verdict == Verdict::Unstable {
                                            " " (r.samples.pass) "/" (r.samples.taken())
                                        }
                                        @if let Some(n) = number(&p.provider, *c) {
                                            sup { a href={ "#ev-" (n) } { (n) } }
                                        }
                                    }
                                }
                            }
                        }
                        @match p.score {
                            None => { td { "–" } td { "–" } }
                            Some(s) => {
                                td { (s.passed) "/" (s.counted) " (" (format!("{:.0}%", s.score * 100.0)) ")" }
                                td { (s.inconclusive) }
                            }
                        }
                    }
                }
            }
        }
        "\n"
        @if !findings.is_empty() {
            h3 { "Evidence: every check that did not pass, and what the informational ones found" }
            ol class="evidence" {
                @for (i, f) in findings.iter().enumerate() {
                    li id={ "ev-" (i + 1) } {
                        span class={ "v v-" (f.verdict.as_str()) } { (f.verdict.short()) }
                        " " strong { (f.check.as_str()) }
                        @if f.check.weight() <= 0.0 { " (informational)" }
                        " · " (f.providers.join(", ")) ": " (f.text)
                    }
                }
            }
            "\n"
        }
    }
}

/// The quality table's numeric columns, between the provider and the fingerprint.
const QUALITY_NUMBERS: [&str; 6] = [
    "graded / sent",
    "correct",
    "accuracy [95% CI]",
    "agreement",
    "median output tokens",
    "length vs others",
];

/// The "Quality parity" section of `q`.
pub fn quality(q: &QualityParity) -> Markup {
    let flagged: Vec<&str> = q
        .providers
        .iter()
        .filter(|p| p.flag.is_some())
        .map(|p| p.provider.as_str())
        .collect();
    html! {
        p class="small" {
            "Prompt set " code { (q.set) } ": prompts whose answers a machine can check \
             (arithmetic, facts, extraction into JSON, short code), sent to every provider at \
             temperature 0, several samples each (docs/metrics.md, \"Quality parity\"). \
             Accuracy: correct / graded answers, with its 95 % Wilson interval counting each \
             prompt once (samples of one prompt at temperature 0 are near-copies, not \
             independent trials). Agreement: the share of graded answers equal to the majority \
             answer of the other providers. \
             Length: the median output tokens, and its ratio to the other providers' medians (a \
             provider that answers shorter looks faster). Accuracy is the selection matrix's \
             quality score where no score was typed in."
        }
        @if !flagged.is_empty() {
            p class="warn" {
                "Possible quantization or different model: " (flagged.join(", "))
                " (the evidence is in the flag column)."
            }
        }
        "\n"
        table class="quality" {
            thead {
                tr {
                    th class="row" { "provider" }
                    @for h in QUALITY_NUMBERS { th { (h) } }
                    th class="row" { "answers fingerprint" }
                    th class="row" { "flag" }
                }
            }
            tbody {
                @for p in &q.providers {
                    tr class=[p.flag.is_some().then_some("flagged")] {
                        td class="row" { (p.provider) }
                        td { (p.graded) " / " (p.samples) }
                        td { (p.correct) }
                        td {
                            (p.accuracy.map_or("–".into(), pct))
                            @if let Some((lo, hi)) = p.accuracy_ci {
                                " [" (format!("{:.1}", lo * 100.0)) "–" (format!("{:.1}", hi * 100.0)) "]"
                            }
                        }
                        td { (p.agreement.map_or("–".into(), pct)) }
                        td { (p.median_output_tokens.map_or("–".into(), |v| format!("{v:.0}"))) }
                        td { (p.length_ratio.map_or("–".into(), |v| format!("{v:.2}×"))) }
                        td class="row" {
                            @match &p.fingerprint {
                                Some(f) => { code { (f) } }
                                None => { "–" }
                            }
                        }
                        td class="flag" {
                            @match &p.flag {
                                Some(f) => { span class="warn" { "⚠ " (f) } }
                                None => { "none" }
                            }
                        }
                    }
                }
            }
        }
        "\n"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use latmesh_results::parity::ProviderQuality;

    fn result(check: CompatCheck, verdict: Verdict, evidence: Evidence) -> CompatResult {
        CompatResult {
            provider: "p<1>".into(),
            check,
            verdict,
            evidence,
            samples: latmesh_core::compat::SampleTally::of(verdict),
        }
    }

    #[test]
    fn evidence_in_words() {
        assert_eq!(evidence_text(&Evidence::default()), "no detail recorded");
        let e = Evidence {
            http_status: Some(400),
            field: Some("response_format".into()),
            message: "unknown field".into(),
        };
        assert_eq!(
            evidence_text(&e),
            "HTTP 400 · field response_format · unknown field"
        );
    }

    #[test]
    fn non_pass_cells_link_to_their_shared_evidence_failures_first() {
        let json_no = Evidence {
            http_status: Some(400),
            field: Some("response_format".into()),
            message: "<b>no</b>".into(),
        };
        let mut results = Vec::new();
        for provider in ["p<1>", "q"] {
            let at = |check, verdict, evidence| {
                let mut r = result(check, verdict, evidence);
                r.provider = provider.into();
                r
            };
            results.push(at(CompatCheck::Stream, Verdict::Pass, Evidence::default()));
            results.push(at(
                CompatCheck::JsonMode,
                Verdict::NotOffered,
                json_no.clone(),
            ));
            results.push(at(
                CompatCheck::ReasoningField,
                Verdict::Pass,
                Evidence {
                    field: Some("reasoning_content".into()),
                    ..Evidence::default()
                },
            ));
        }
        // q also fails the stop check: listed first.
        results.push(CompatResult {
            provider: "q".into(),
            ..result(CompatCheck::Stop, Verdict::Fail, Evidence::default())
        });
        let report = CompatReport {
            run_id: "r1".into(),
            compat: latmesh_results::parity::compat_by_provider(&results),
            quality: None,
        };
        let html = compat(&report).into_string();
        // Four checks ran: four columns; `p<1>` has no `stop` result.
        assert_eq!(html.matches("<th class=\"check\">").count(), 4);
        assert_eq!(html.matches("<td class=\"empty\">–</td>").count(), 1);
        // Three findings: q's stop failure, json_mode not offered on both, the reasoning
        // field both found (informational, though it passed).
        assert_eq!(html.matches("<li id=\"ev-").count(), 3);
        assert!(html.contains(
            "<li id=\"ev-1\"><span class=\"v v-fail\">FAIL</span> <strong>stop</strong> · q: no detail recorded</li>"
        ));
        assert!(html.contains(
            "<li id=\"ev-2\"><span class=\"v v-not_offered\">n/o</span> <strong>json_mode</strong> · p&lt;1&gt;, q: HTTP 400 · field response_format · &lt;b&gt;no&lt;/b&gt;</li>"
        ));
        assert!(html.contains("(informational) · p&lt;1&gt;, q: field reasoning_content"));
        assert_eq!(html.matches("href=\"#ev-2\"").count(), 2);
        assert_eq!(html.matches("href=\"#ev-3\"").count(), 2);
        // 1 passed of 2 counted (stream, json_mode; reasoning_field weighs 0); q: 1 of 3.
        assert!(html.contains("<td>1/2 (50%)</td><td>0</td>"), "{html}");
        assert!(html.contains("<td>1/3 (33%)</td><td>0</td>"), "{html}");
    }

    #[test]
    fn a_flag_is_shown_as_a_warning() {
        let row = |name: &str, flag: Option<&str>| ProviderQuality {
            provider: name.into(),
            samples: 64,
            graded: 64,
            correct: 40,
            accuracy: Some(0.625),
            accuracy_ci: Some((0.5, 0.735)),
            agreement: Some(0.6),
            median_output_tokens: Some(21.0),
            length_ratio: Some(0.55),
            fingerprint: Some("00112233aabbccdd".into()),
            flag: flag.map(str::to_string),
        };
        let q = QualityParity {
            set: "quality-v1".into(),
            providers: vec![row("a", None), row("b", Some("possible quantization"))],
        };
        let html = quality(&q).into_string();
        assert!(html.contains("<p class=\"warn\">Possible quantization or different model: b"));
        assert_eq!(html.matches("<tr class=\"flagged\">").count(), 1);
        assert!(html.contains("<span class=\"warn\">⚠ possible quantization</span>"));
        assert!(html.contains("<td>62.5% [50.0–73.5]</td>"), "{html}");
        assert!(html.contains("<td>0.55×</td>"));
    }
}
