//! What `latmesh compat` stores, against a real ClickHouse: a run's compatibility results and
//! quality samples round-trip (`store::insert_compat_run`, `store::query::compat_report`),
//! inserting a run again adds no row, the latest run of a campaign is the one reported, and
//! a stored campaign's report data carries it.
//!
//! The server: `LATMESH_CLICKHOUSE_URL`, else `scripts/clickhouse.sh start` (see
//! tests/tests/clickhouse.rs). Each test uses a fresh database.

use std::collections::BTreeMap;

use latmesh_core::compat::{CompatCheck, CompatResult, Evidence, SampleTally, Verdict};
use latmesh_core::quality::{QualitySample, answer_hash};
use latmesh_core::record::Outcome;
use latmesh_results::parity::{compat_by_provider, parity};
use latmesh_store::query::{self, RunPart, RunScope};
use latmesh_store::{self as store, CompatRun};

const T: i64 = 1_700_000_000_000_000;

fn run(id: &str, campaign: &str, start: i64) -> CompatRun {
    CompatRun {
        run_id: id.into(),
        campaign_id: campaign.into(),
        campaign_name: "nightly".into(),
        region: "eu-west".into(),
        started_unix_us: start,
        checks_version: latmesh_core::compat::COMPAT_CHECKS_VERSION,
        quality_set: latmesh_core::quality::QUALITY_SET_VERSION.into(),
        apis: BTreeMap::from([
            ("alpha".to_string(), "chat".to_string()),
            ("beta".to_string(), "anthropic".to_string()),
        ]),
    }
}

/// Every check for `provider`: JSON mode not offered (with its evidence), tool calls unstable
/// (1 of 3 samples passed), the rest passed (the checks that can flip on 3 samples).
fn results(provider: &str) -> Vec<CompatResult> {
    CompatCheck::ALL
        .into_iter()
        .map(|check| {
            let (verdict, evidence) = if check == CompatCheck::ToolCall {
                (
                    Verdict::Unstable,
                    Evidence {
                        http_status: Some(200),
                        field: Some("tools".into()),
                        message: "pass 1/3, fail 2/3: no tool call (finish_reason stop)".into(),
                    },
                )
            } else if check == CompatCheck::JsonMode {
                (
                    Verdict::NotOffered,
                    Evidence {
                        http_status: Some(400),
                        field: Some("response_format".into()),
                        message: "unsupported parameter: response_format".into(),
                    },
                )
            } else {
                (Verdict::Pass, Evidence::default())
            };
            let samples = match verdict {
                Verdict::Unstable => SampleTally {
                    pass: 1,
                    fail: 2,
                    ..SampleTally::default()
                },
                Verdict::Pass if check.can_flip() => SampleTally {
                    pass: 3,
                    ..SampleTally::default()
                },
                _ => SampleTally::of(verdict),
            };
            CompatResult {
                provider: provider.into(),
                check,
                verdict,
                evidence,
                samples,
            }
        })
        .collect()
}

/// 4 prompts × 2 samples of `provider`, the first `wrong` prompts answered wrong; one
/// timed-out sample of `beta` (not graded).
fn samples(provider: &str, wrong: u32) -> Vec<QualitySample> {
    let mut out = Vec::new();
    for p in 0..4u32 {
        for sample in 0..2 {
            let answer = if p < wrong {
                "no".into()
            } else {
                format!("{p}")
            };
            out.push(QualitySample {
                provider: provider.into(),
                prompt_id: format!("arith-{p:02}"),
                sample,
                outcome: Outcome::Ok,
                correct: Some(p >= wrong),
                answer_hash: answer_hash(&answer),
                answer,
                output_tokens: 10 + p,
                answered_model: (provider == "alpha").then(|| "m-2024-08-06".into()),
            });
        }
    }
    if provider == "beta" {
        out.push(QualitySample {
            provider: provider.into(),
            prompt_id: "arith-00".into(),
            sample: 2,
            outcome: Outcome::TimeoutTotal,
            correct: None,
            answer: String::new(),
            answer_hash: String::new(),
            output_tokens: 0,
            answered_model: None,
        });
    }
    out
}

async fn rows(client: &clickhouse::Client, db: &str, table: &str) -> u64 {
    client
        .query(&format!("SELECT count() FROM {db}.{table}"))
        .fetch_one::<u64>()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compat_store_round_trips_a_run_once_and_reports_the_latest() {
    let (client, db) = latmesh_testkit::fresh_db("compat_store");
    store::migrate(&client, &db, None).await.unwrap();
    // Nothing stored: an empty report.
    let empty = query::compat_report(&client, &db, "c1").await.unwrap();
    assert!(empty.is_empty() && empty.run_id.is_empty());

    let mut res = results("alpha");
    res.extend(results("beta"));
    let mut smp = samples("alpha", 0);
    smp.extend(samples("beta", 1));
    let r1 = run("run-1", "c1", T);
    store::insert_compat_run(&client, &db, &r1, &res, &smp)
        .await
        .unwrap();
    let got = query::compat_report(&client, &db, "c1").await.unwrap();
    assert_eq!(got.run_id, "run-1");
    assert_eq!(got.compat, compat_by_provider(&res));
    let score = got.compat[0].score.unwrap();
    assert_eq!((score.passed, score.counted), (10, 12));
    let q = got.quality.as_ref().unwrap();
    assert_eq!(q, &parity(&smp));
    let beta = q.providers.iter().find(|p| p.provider == "beta").unwrap();
    assert_eq!((beta.samples, beta.graded, beta.correct), (9, 8, 6));
    // The stored rows carry the run's stamp and the provider's API.
    let apis: Vec<(String, String, Option<u16>, Option<String>)> = client
        .query(&format!(
            "SELECT provider, api, http_status, field FROM {db}.compat_results \
             WHERE `check` = 'json_mode' ORDER BY provider"
        ))
        .fetch_all()
        .await
        .unwrap();
    assert_eq!(
        apis,
        vec![
            (
                "alpha".into(),
                "chat".into(),
                Some(400),
                Some("response_format".into())
            ),
            (
                "beta".into(),
                "anthropic".into(),
                Some(400),
                Some("response_format".into())
            ),
        ]
    );
    let by_region = query::run_samples(&client, &db, "run-1").await.unwrap();
    assert_eq!(by_region.len(), smp.len());
    assert!(by_region.iter().all(|(r, _)| r == "eu-west"));
    assert!(
        by_region
            .iter()
            .any(|(_, s)| s.answered_model.as_deref() == Some("m-2024-08-06"))
    );

    // Inserting the same run again adds no row.
    let (n_res, n_smp) = (
        rows(&client, &db, "compat_results").await,
        rows(&client, &db, "quality_samples").await,
    );
    assert_eq!((n_res, n_smp), (26, 17));
    store::insert_compat_run(&client, &db, &r1, &res, &smp)
        .await
        .unwrap();
    assert_eq!(rows(&client, &db, "compat_results").await, n_res);
    assert_eq!(rows(&client, &db, "quality_samples").await, n_smp);

    // A later run of the campaign that ran the quality set only replaces the quality part;
    // the check results stay those of the latest run that ran checks (run-1); another
    // campaign's run is not reported.
    let r2 = run("run-2", "c1", T + 3_600_000_000);
    store::insert_compat_run(&client, &db, &r2, &[], &samples("alpha", 4))
        .await
        .unwrap();
    store::insert_compat_run(
        &client,
        &db,
        &run("run-3", "c2", T + 7_200_000_000),
        &res,
        &[],
    )
    .await
    .unwrap();
    let got = query::compat_report(&client, &db, "c1").await.unwrap();
    assert_eq!(got.run_id, "run-1+run-2");
    assert_eq!(got.compat.len(), 2, "{got:?}");
    assert_eq!(
        got.compat.iter().map(|c| c.results.len()).sum::<usize>(),
        26
    );
    assert_eq!(got.quality.unwrap().providers[0].accuracy, Some(0.0));
    let latest =
        |part| query::latest_run(&client, &db, &RunScope::Range(T, T + 3_600_000_001), part);
    let quality = latest(RunPart::Quality).await.unwrap().unwrap();
    assert_eq!(
        (quality.run_id.as_str(), quality.campaign_id.as_str()),
        ("run-2", "c1")
    );
    let checks = latest(RunPart::Checks).await.unwrap().unwrap();
    assert_eq!(checks.run_id, "run-1");
    latmesh_testkit::drop_db(&client, &db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compat_store_report_data_carries_the_campaign_s_run() {
    let (client, db) = latmesh_testkit::fresh_db("compat_store_report");
    store::migrate(&client, &db, None).await.unwrap();
    let plan = crate::check::plan("nightly");
    let cell = crate::check::Cell {
        region: "eu-west",
        provider: "alpha",
        ttft_ms: vec![100.0, 120.0],
        failures: 0,
    };
    crate::check::store_run(&client, &db, &plan, "c1", T, &[cell]).await;
    let data = query::report_data(&client, &db, "c1").await.unwrap();
    assert!(data.compat.is_empty());
    store::insert_compat_run(
        &client,
        &db,
        &run("run-1", "c1", T),
        &results("alpha"),
        &samples("alpha", 1),
    )
    .await
    .unwrap();
    let data = query::report_data(&client, &db, "c1").await.unwrap();
    assert_eq!(data.compat.run_id, "run-1");
    let m = data.compat.measured();
    assert_eq!(m["alpha"].quality, Some(0.75));
    // 10 of 12 counted checks passed: json_mode not offered, tool_call unstable.
    assert!((m["alpha"].compatibility.unwrap() - 10.0 / 12.0).abs() < 1e-12);
    latmesh_testkit::drop_db(&client, &db).await;
}
