//! A batch the coordinator refuses as malformed (issue 17) neither blocks the campaign nor
//! passes verification as "0 lost": with real processes on loopback (`latmesh-sim`, a
//! coordinator storing into the test ClickHouse, a real agent in `us-east`) and a raw agent
//! session in `eu-west` (`latmesh_testkit::raw_agent`, because a real agent sends nothing the
//! coordinator refuses) that sends one batch naming a provider the plan does not have: the
//! coordinator answers `BatchRejected` with the reason, stores the raw agent's other batch,
//! finishes the campaign without waiting for the refused one, and `latmesh campaign verify`
//! reports the raw agent *not verified*, naming the refused batch, while the real agent's
//! records verify. What the agent does with a `BatchRejected` (the batch quarantined on
//! disk with its reason, the spool going on with the next batch, the count in its
//! heartbeats) is tested in `latmesh-agent` (`outbox`, `runner`). Also: a done notice arriving
//! after its campaign finished by its deadline is still recorded, so verify vouches for the
//! agent's late-but-stored batches.

use std::sync::Arc;
use std::time::{Duration, Instant};

use latmesh_proto::pb;
use latmesh_proto::pb::agent_message::Kind as In;
use latmesh_proto::pb::coordinator_message::Kind as Out;
use latmesh_sim::profile::{DEFAULT_MODEL_ID, ProviderProfile};
use latmesh_testkit::raw_agent::{self, RawAgent, batch};
use latmesh_testkit::stack::Stack;
use latmesh_testkit::verify;

fn campaign() -> String {
    format!(
        r#"
[campaign]
name = "refused"
regions = ["us-east", "eu-west"]
[rounds]
count = 3
interval_s = 1.0
gap_ms = 100
[[scenarios]]
name = "chat"
prompt_ids = ["short-qa-en-*"]
max_tokens = 16
[[providers]]
name = "good"
base_url = "http://{{sim}}/good/v1"
model_id = "{DEFAULT_MODEL_ID}"
"#
    )
}

/// A record of round `round` for provider `provider` (in the plan or not).
fn record(provider: &str, round: u32) -> pb::ProbeRecord {
    pb::ProbeRecord::from(&latmesh_core::record::ProbeRecord {
        round,
        provider: provider.into(),
        scenario: "chat".into(),
        prompt_id: "short-qa-en-001".into(),
        outcome: Some(latmesh_core::record::Outcome::Ok),
        ttft_us: Some(40_000),
        e2e_us: Some(90_000),
        attempt: 1,
        final_attempt: true,
        turn: 1,
        ..Default::default()
    })
}

/// Launches `toml` on `stack` in the background (`campaign launch` returning the summary and
/// its output); `raw` sends batch 1 (one record of round 0) once its plan came. The launch and
/// the campaign id.
async fn launch_with_a_first_batch(
    stack: &Arc<Stack>,
    toml: String,
    raw: &mut RawAgent,
    seen: &mut Vec<Out>,
) -> (
    tokio::task::JoinHandle<(latmesh_results::summary::Summary, String)>,
    String,
) {
    let launch = {
        let stack = stack.clone();
        tokio::task::spawn_blocking(move || stack.launch(&toml))
    };
    let id = raw
        .until(seen, |m| match m {
            Out::Plan(p) => Some(p.campaign_id.clone()),
            _ => None,
        })
        .await;
    raw.send(In::Batch(batch(&id, 1, vec![record("good", 0)])))
        .await;
    (launch, id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_batch_leaves_its_agent_not_verified_and_holds_up_nothing() {
    let (client, db) = latmesh_testkit::fresh_db("quarantine");
    let ch_url = latmesh_testkit::clickhouse_url().to_string();
    let mut stack = Stack::start_with_clickhouse(
        &[ProviderProfile::fixed("good", 20_000, 1_000)],
        &ch_url,
        &db,
    );
    stack.agent("a1", "us-east");
    let url = stack.coord_url.clone();
    let mut raw = RawAgent::connect(&url, raw_agent::hello("raw", "eu-west"))
        .await
        .unwrap();
    raw_agent::wait_connected(&url, 2).await;
    let stack = Arc::new(stack);
    let started = Instant::now();
    let mut seen = Vec::new();
    let (launch, id) = launch_with_a_first_batch(&stack, campaign(), &mut raw, &mut seen).await;
    raw.send(In::Batch(batch(&id, 2, vec![record("ghost", 1)])))
        .await;
    let (seq, reason) = raw
        .until(&mut seen, |m| match m {
            Out::Rejected(r) => Some((r.seq, r.reason.clone())),
            _ => None,
        })
        .await;
    assert_eq!(seq, 2);
    assert!(reason.contains("ghost"), "{reason}");
    // The agent quarantined it, and says so in its done notice.
    raw.send(In::Done(pb::CampaignDone {
        campaign_id: id.clone(),
        last_seq: 2,
        probes: 2,
        skipped: 1,
        quarantined_seqs: vec![2],
        ..Default::default()
    }))
    .await;

    let (summary, text) = launch.await.unwrap();
    // Finished with what arrived, without waiting for the refused batch until the deadline.
    assert!(
        started.elapsed() < Duration::from_secs(40),
        "took {:?}:\n{text}",
        started.elapsed()
    );
    let agents: Vec<(&str, u64, bool, u64)> = summary
        .agents
        .iter()
        .map(|a| {
            (
                a.agent_id.as_str(),
                a.records,
                a.complete,
                a.delivery.batches_rejected,
            )
        })
        .collect();
    assert_eq!(
        agents,
        vec![("a1", 3, true, 0), ("raw", 1, false, 1)],
        "{text}"
    );
    let refused = &summary.agents[1].delivery.rejected[0];
    assert_eq!(refused.seq, 2);
    assert!(refused.reason.contains("ghost"), "{refused:?}");
    let coord_log = std::fs::read_to_string(stack.log("coordinator")).unwrap();
    assert!(
        coord_log.contains("batch refused as malformed"),
        "{coord_log}"
    );

    // verify: every batch that arrived is stored, but the raw agent is not verified and its
    // refused batch is named; never "0 lost" for it. The real agent's line is whole.
    let deadline = Instant::now() + Duration::from_secs(60);
    let text = loop {
        let (ok, text) = verify(&ch_url, &db, &summary.campaign_id);
        assert!(!ok, "verify passed:\n{text}");
        if !text.contains("not stored: still pending") || Instant::now() > deadline {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert!(text.contains("NOT VERIFIED"), "{text}");
    assert!(text.contains("seq 2 ("), "{text}");
    assert!(text.contains("ghost"), "{text}");
    let raw_line = text
        .lines()
        .find(|l| l.starts_with("raw "))
        .unwrap_or_else(|| panic!("no raw line:\n{text}"));
    let lost = raw_line.split_whitespace().nth(3);
    assert_eq!(lost, Some("?"), "LOST of an unverified agent: {raw_line}");
    assert!(
        text.contains("NOT VERIFIED: 1 agent(s) did not deliver everything (raw:"),
        "{text}"
    );
    let a1 = text
        .lines()
        .find(|l| l.starts_with("a1 "))
        .unwrap_or_else(|| panic!("no a1 line:\n{text}"));
    assert!(!a1.contains("NOT VERIFIED"), "{a1}");
    latmesh_testkit::drop_db(&client, &db).await;
}

/// A campaign whose deadline passes before its agent is done finishes incomplete; the agent's
/// late batch is still stored and its done notice, arriving after the finish, still recorded
/// (a new version of its `agents` row): `campaign verify` then counts the late batch's
/// records as reported and finds everything stored, while the summary stays final.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_done_notice_after_the_deadline_lets_verify_vouch_for_what_was_delivered() {
    let (client, db) = latmesh_testkit::fresh_db("late_done");
    let ch_url = latmesh_testkit::clickhouse_url().to_string();
    let stack = Stack::start_with_clickhouse(
        &[ProviderProfile::fixed("good", 20_000, 1_000)],
        &ch_url,
        &db,
    );
    let url = stack.coord_url.clone();
    let mut raw = RawAgent::connect(&url, raw_agent::hello("raw", "eu-west"))
        .await
        .unwrap();
    // Short timeouts and no retries: the deadline comes about 35 s after the start.
    let toml = campaign()
        .replace(r#"regions = ["us-east", "eu-west"]"#, r#"regions = ["eu-west"]"#)
        .replace("count = 3", "count = 2")
        .replace(
            "max_tokens = 16",
            "max_tokens = 16\ntimeout_connect_s = 1\ntimeout_ttft_s = 1\ntimeout_idle_s = 1\ntimeout_total_s = 1\nretry = { max_retries = 0 }",
        );
    let stack = Arc::new(stack);
    let mut seen = Vec::new();
    let (launch, id) = launch_with_a_first_batch(&stack, toml, &mut raw, &mut seen).await;
    let (summary, text) = launch.await.unwrap();
    assert!(!summary.complete, "{text}");
    assert_eq!(summary.agents[0].delivery.last_seq, None, "{text}");
    // Its row (written by the sink a moment later) says no done notice arrived.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (ok, text) = latmesh_testkit::verify(&ch_url, &db, &id);
        assert!(!ok, "{text}");
        if text.contains("no done notice") {
            break;
        }
        assert!(Instant::now() < deadline, "{text}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // Late: the agent's last batch, then its done notice.
    raw.send(In::Batch(batch(&id, 2, vec![record("good", 1)])))
        .await;
    raw.until(&mut seen, |m| match m {
        Out::Ack(a) if a.seq == 2 => Some(()),
        _ => None,
    })
    .await;
    raw.send(In::Done(pb::CampaignDone {
        campaign_id: id.clone(),
        last_seq: 2,
        probes: 2,
        ..Default::default()
    }))
    .await;
    let text = latmesh_testkit::verify_until_clean(&ch_url, &db, &id);
    let line = text
        .lines()
        .find(|l| l.starts_with("raw "))
        .unwrap_or_else(|| panic!("no raw line:\n{text}"));
    let cols: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(&cols[1..4], ["2", "2", "0"], "REPORTED STORED LOST: {line}");
    let log = std::fs::read_to_string(stack.log("coordinator")).unwrap();
    assert!(
        log.contains(&format!(
            "late done notice of finished campaign {id} from agent raw: delivery facts updated"
        )),
        "{log}"
    );
    latmesh_testkit::drop_db(&client, &db).await;
}
