//! The budget guard at work in the state: passing a cap cancels the campaign through the
//! cancel path, and a restarted coordinator rebuilds the sums from its batch logs.

use latmesh_core::record::{Outcome, ProbeRecord};

use crate::budget::tests::{plan, rec};
use crate::budget::{BudgetSummary, Caps, STOPPED_BY_BUDGET};
use latmesh_core::load::Price;

fn batch(campaign: &str, seq: u64, records: &[ProbeRecord]) -> latmesh_proto::pb::ResultBatch {
    latmesh_proto::pb::ResultBatch {
        campaign_id: campaign.into(),
        seq,
        records: records
            .iter()
            .map(latmesh_proto::pb::ProbeRecord::from)
            .collect(),
        ..Default::default()
    }
}

fn connect(
    state: &crate::state::State,
) -> tokio::sync::mpsc::Receiver<Result<latmesh_proto::pb::CoordinatorMessage, tonic::Status>> {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    state.connect(
        &latmesh_proto::pb::AgentHello {
            agent_id: "a1".into(),
            region: "us-east".into(),
            version: "t".into(),
            protocol_version: 1,
            ..Default::default()
        },
        tx,
    );
    rx
}

#[tokio::test]
async fn passing_a_cap_cancels_through_the_cancel_path_and_keeps_the_records() {
    use crate::state::{LaunchOptions, State};
    use latmesh_proto::pb::coordinator_message::Kind;
    let state = State::default();
    let mut rx = connect(&state);
    let p = plan();
    let opts = LaunchOptions {
        caps: Caps::from_request(0.0, 1_000),
        campaign_id: None,
        ..Default::default()
    };
    let id = state
        .launch_with(&p.to_json(), 0, &opts)
        .unwrap()
        .campaign_id;
    let used = rec("priced", Outcome::Ok, Some((300, 200)), 200);
    assert!(
        state
            .batch("a1", batch(&id, 1, std::slice::from_ref(&used)))
            .unwrap()
    );
    assert!(!state.is_cancelled(&id), "500 tokens: within the cap");
    assert!(
        state
            .batch("a1", batch(&id, 2, &[used.clone(), used]))
            .unwrap()
    );
    assert!(state.is_cancelled(&id), "1500 tokens passed 1000");
    // The agent got the cancel, with the guard's reason.
    let mut reason = None;
    while let Ok(Ok(m)) = rx.try_recv() {
        if let Some(Kind::Cancel(c)) = m.kind {
            reason = Some(c.reason);
        }
    }
    assert_eq!(
        reason.as_deref(),
        Some("budget: measured tokens 1500 passed --max-tokens 1000")
    );
    // The agent reports what it measured (a late batch counts too) and stops.
    let late = rec("priced", Outcome::Cancelled, None, 0);
    assert!(state.batch("a1", batch(&id, 3, &[late])).unwrap());
    state
        .done(
            "a1",
            &latmesh_proto::pb::CampaignDone {
                campaign_id: id.clone(),
                last_seq: 3,
                skipped: 4,
                ..Default::default()
            },
        )
        .unwrap();
    let s = state.summary(&id).unwrap();
    assert!(s.cancelled && !s.complete);
    assert_eq!(s.guard.stopped_by.as_deref(), Some(STOPPED_BY_BUDGET));
    let spent = s.guard.spent.as_ref().unwrap();
    assert_eq!((spent.prompt_tokens, spent.completion_tokens), (900, 600));
    assert_eq!(s.agents[0].records, 4, "every record kept");
    // Its matrix says STOPPED BY BUDGET (with this reason), not CANCELLED: the CLI's
    // `ui::matrix` tests.
    assert!(
        s.guard
            .stop_reason
            .as_deref()
            .is_some_and(|r| r.starts_with("budget: measured tokens 1500")),
        "{s:?}"
    );
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["stopped_by"], "budget");
    assert_eq!(json["spent"]["completion_tokens"], 600);
    assert_eq!(json["caps"]["max_tokens"], 1_000);
    // A summary written before the budget fields existed still parses.
    let mut old = json.clone();
    for k in ["stopped_by", "stop_reason", "caps", "spent"] {
        old.as_object_mut().unwrap().remove(k);
    }
    let back: latmesh_results::summary::Summary = serde_json::from_value(old).unwrap();
    assert_eq!(back.guard, BudgetSummary::default());
}

#[tokio::test]
async fn a_restarted_coordinator_rebuilds_the_sums_and_keeps_enforcing() {
    use crate::persist::StateDir;
    use crate::state::{LaunchOptions, State};
    let dir = tempfile::tempdir().unwrap();
    let mut p = plan();
    p.providers[1].price = Some(Price::default());
    let used = rec("priced", Outcome::Ok, Some((100_000, 100_000)), 5);
    let id = {
        let state = State::default();
        state
            .with_state_dir(StateDir::open(dir.path()).unwrap())
            .unwrap();
        let _rx = connect(&state);
        let opts = LaunchOptions {
            caps: Caps::from_request(0.5, 0),
            campaign_id: None,
            ..Default::default()
        };
        let id = state
            .launch_with(&p.to_json(), 0, &opts)
            .unwrap()
            .campaign_id;
        // $0.40: within the cap. Then a batch reaches the log but the coordinator dies
        // before merging it (written to the log directly).
        // What the service's store does: the log first, then the merge.
        let log = state.batch_log(&id).unwrap();
        log.append("a1", "us-east", &batch(&id, 1, std::slice::from_ref(&used)))
            .unwrap();
        state
            .batch("a1", batch(&id, 1, std::slice::from_ref(&used)))
            .unwrap();
        state
            .batch_log(&id)
            .unwrap()
            .append("a1", "us-east", &batch(&id, 2, std::slice::from_ref(&used)))
            .unwrap();
        assert!(!state.is_cancelled(&id));
        id
    };
    let state = State::default();
    state
        .with_state_dir(StateDir::open(dir.path()).unwrap())
        .unwrap();
    // Replayed: $0.80 passed $0.50, so the restarted coordinator cancels it.
    assert!(state.is_cancelled(&id));
    let _rx = connect(&state);
    state
        .done(
            "a1",
            &latmesh_proto::pb::CampaignDone {
                campaign_id: id.clone(),
                last_seq: 2,
                ..Default::default()
            },
        )
        .unwrap();
    let s = state.summary(&id).unwrap();
    let spent = s.guard.spent.as_ref().unwrap();
    assert_eq!(
        spent.tokens(),
        400_000,
        "rebuilt from the batch log, not doubled"
    );
    assert!((spent.cost_usd - 0.8).abs() < 1e-9);
    assert_eq!(
        s.guard.stop_reason.as_deref(),
        Some("budget: measured cost $0.8000 passed --max-cost $0.5000")
    );
}
