//! Tests of the state's behaviour through its public API (and the helpers other modules'
//! tests use: a plan, a hello, a batch).

use latmesh_core::plan::Plan;
use latmesh_core::record::ProbeRecord;
use latmesh_core::wire;
use latmesh_proto::pb;
use tokio::sync::mpsc;
use tonic::Status;

use super::*;
use crate::persist::StateDir;
use latmesh_core::hist::{HistKey, new_histogram};
use latmesh_core::metrics::Metric;
use latmesh_core::plan::{PlanPrompt, ProviderSpec, RoundsSpec, ScenarioSpec, Timeouts};
use latmesh_core::record::Outcome;
use latmesh_results::summary::Summary;

pub(crate) fn plan() -> Plan {
    Plan {
        name: "t".into(),
        seed: 1,
        metrics_version: 1,
        regions: vec!["us-east".into()],
        rounds: RoundsSpec {
            count: 1,
            interval_ms: 1000,
            gap_ms: 10,
        },
        providers: vec![ProviderSpec {
            name: "p".into(),
            base_url: "http://127.0.0.1:9/v1".into(),
            api_key_env: None,
            model_id: "m".into(),
            expect_model: None,
            pass_reasoning: false,
            limits: Default::default(),
            price: None,
            user_agent: None,
            request: Default::default(),
        }],
        scenarios: vec![ScenarioSpec {
            name: "s".into(),
            stream: true,
            max_tokens: 8,
            temperature: None,
            top_p: None,
            timeouts: Timeouts::default(),
            prompts: vec![PlanPrompt {
                id: "a".into(),
                messages: vec![],
                follow_ups: vec![],
            }],
            policy: Default::default(),
            load: Default::default(),
            failover: None,
            extra_body: Default::default(),
            synth: None,
            output_tokens: None,
            warmup: 0,
            slo: None,
        }],
        prompt_set: "x".into(),
        timezones: Default::default(),
        windows: Vec::new(),
        schedule: None,
        selection: None,
        compat: None,
        quality: None,
        percentiles: latmesh_core::plan::default_percentiles(),
        text_salt: None,
    }
}

pub(crate) fn hello(id: &str, region: &str) -> pb::AgentHello {
    pb::AgentHello {
        agent_id: id.into(),
        region: region.into(),
        version: "t".into(),
        protocol_version: 1,
        ..Default::default()
    }
}

pub(crate) fn batch(campaign: &str, seq: u64, ttft_us: u64) -> pb::ResultBatch {
    let rec = ProbeRecord {
        provider: "p".into(),
        scenario: "s".into(),
        outcome: Some(Outcome::Ok),
        ttft_us: Some(ttft_us),
        attempt: 1,
        final_attempt: true,
        turn: 1,
        ..Default::default()
    };
    let mut h = new_histogram();
    h.record(ttft_us).unwrap();
    let key = HistKey {
        provider: "p".into(),
        scenario: "s".into(),
        metric: Metric::Ttft,
        step: 0,
    };
    pb::ResultBatch {
        campaign_id: campaign.into(),
        seq,
        histograms: vec![wire::histogram_to_pb(&key, &h, 0, 1).unwrap()],
        records: vec![pb::ProbeRecord::from(&rec)],
        clock_offset_us: 0,
    }
}

#[tokio::test]
async fn launch_pushes_the_plan_and_refuses_regions_without_agents() {
    let state = State::default();
    let mut p = plan();
    p.regions.push("eu-west".into());
    let (tx, mut rx) = mpsc::channel(8);
    state.connect(&hello("a1", "us-east"), tx);
    let err = state.launch(&p.to_json(), 0).unwrap_err();
    assert!(err.to_string().contains("\"eu-west\""), "{err}");
    assert!(err.to_string().contains("connected: us-east"), "{err}");
    let l = state.launch(&plan().to_json(), 1_000).unwrap();
    assert_eq!(l.agent_ids, vec!["a1".to_string()]);
    match rx.recv().await.unwrap().unwrap().kind {
        Some(pb::coordinator_message::Kind::Plan(push)) => {
            assert_eq!(push.campaign_id, l.campaign_id);
            assert_eq!(push.plan_hash, plan().hash());
        }
        other => panic!("expected a plan, got {other:?}"),
    }
    assert!(matches!(state.launch("{", 0), Err(StateError::BadPlan(_))));
}

#[tokio::test]
async fn a_launch_to_an_agent_without_a_provider_s_key_variable_is_refused_unless_allowed() {
    let state = State::default();
    let mut p = plan();
    p.providers[0].api_key_env = Some("P_KEY".into());
    let keyed = |id: &str, names: &[&str]| pb::AgentHello {
        key_env_names: names.iter().map(|n| n.to_string()).collect(),
        key_env_reported: true,
        ..hello(id, "us-east")
    };
    let (tx1, mut rx1) = mpsc::channel(8);
    state.connect(&keyed("a1", &["OTHER", "P_KEY"]), tx1);
    let (tx2, mut rx2) = mpsc::channel(8);
    state.connect(&keyed("a2", &["OTHER"]), tx2);
    let err = state.launch(&p.to_json(), 0).unwrap_err().to_string();
    assert!(
        err.starts_with("agent a2 (region us-east) lacks $P_KEY for provider p: "),
        "{err}"
    );
    assert!(err.contains("--allow-missing-keys"), "{err}");
    assert!(
        rx1.try_recv().is_err() && rx2.try_recv().is_err(),
        "nothing sent"
    );
    assert_eq!(state.running_campaigns(), 0);
    // An agent that does not report its variables (older) is not checked.
    let (tx3, _rx3) = mpsc::channel(8);
    state.connect(&hello("a3", "eu-west"), tx3);
    // Allowed: launched, with the same facts as a warning.
    let opts = LaunchOptions {
        allow_missing_keys: true,
        ..Default::default()
    };
    let l = state.launch_with(&p.to_json(), 0, &opts).unwrap();
    assert_eq!(
        l.warnings,
        [
            "agent a2 (region us-east) lacks $P_KEY for provider p: its requests to p go without an API key"
        ]
    );
    assert!(rx2.try_recv().is_ok(), "the plan went to a2");
    // A campaign launched without the allowance is not pushed again to an agent that
    // rejoins without the key.
    let mut q = plan();
    q.name = "q".into();
    q.regions = vec!["eu-west".into()];
    q.providers[0].api_key_env = Some("P_KEY".into());
    let id = state.launch(&q.to_json(), 0).unwrap().campaign_id;
    let (tx3, mut rx3) = mpsc::channel(8);
    state.connect(&keyed("a3", &[]), tx3);
    assert!(rx3.try_recv().is_err(), "no plan for a3 without its key");
    let (tx3, mut rx3) = mpsc::channel(8);
    state.connect(&keyed("a3", &["P_KEY"]), tx3);
    match rx3.try_recv().unwrap().unwrap().kind {
        Some(pb::coordinator_message::Kind::Plan(push)) => assert_eq!(push.campaign_id, id),
        other => panic!("expected the plan, got {other:?}"),
    }
}

#[tokio::test]
async fn resent_batches_count_once_and_the_campaign_finishes_when_all_seqs_arrived() {
    let state = State::default();
    let (tx, _rx) = mpsc::channel(8);
    state.connect(&hello("a1", "us-east"), tx);
    let id = state.launch(&plan().to_json(), 0).unwrap().campaign_id;
    assert!(state.batch("a1", batch(&id, 2, 2_000)).unwrap());
    assert!(
        !state.batch("a1", batch(&id, 2, 2_000)).unwrap(),
        "a resent batch is not merged twice"
    );
    state
        .done(
            "a1",
            &pb::CampaignDone {
                campaign_id: id.clone(),
                skipped: 0,
                last_seq: 2,
                probes: 2,
                ..Default::default()
            },
        )
        .unwrap();
    assert!(state.summary(&id).is_none(), "seq 1 is still missing");
    let running = state.watch(&id).unwrap().borrow().clone();
    assert!(!running.finished);
    // Live cells: the region's, then the provider's (as of launch: they are recomputed at
    // most once a second).
    let live = |p: &pb::Progress| {
        p.live
            .iter()
            .map(|c| (c.region.clone(), c.provider.clone(), c.done, c.p50_ms))
            .collect::<Vec<_>>()
    };
    let keys: Vec<_> = live(&running).into_iter().map(|c| (c.0, c.1)).collect();
    assert_eq!(
        keys,
        [
            ("us-east".into(), String::new()),
            (String::new(), "p".into())
        ]
    );
    assert!(state.batch("a1", batch(&id, 1, 1_000)).unwrap());
    let s = state.summary(&id).expect("finished");
    let cell = s.cell("us-east", "p", "s").unwrap();
    assert_eq!((cell.attempts, cell.samples), (2, 2));
    assert_eq!(s.agents[0].batches, 2);
    let progress = state.watch(&id).unwrap().borrow().clone();
    assert!(progress.finished);
    assert_eq!(progress.probes_done, 2);
    assert!(!progress.summary_json.is_empty());
    // The last message has fresh live cells, however recent the previous ones were.
    assert_eq!(
        live(&progress),
        [
            ("us-east".into(), String::new(), 2, 0.0),
            (String::new(), "p".into(), 2, 1.0)
        ]
    );
}

#[tokio::test]
async fn bad_batches_are_rejected_whole() {
    let state = State::default();
    let (tx, _rx) = mpsc::channel(8);
    state.connect(&hello("a1", "us-east"), tx);
    let id = state.launch(&plan().to_json(), 0).unwrap().campaign_id;
    let mut b = batch(&id, 1, 1_000);
    b.histograms[0].hist_v2 = vec![1, 2, 3];
    assert!(matches!(
        state.batch("a1", b),
        Err(StateError::BadBatch { seq: 1, .. })
    ));
    assert!(matches!(
        state.batch("a2", batch(&id, 1, 1)),
        Err(StateError::BadBatch { .. })
    ));
    assert!(matches!(
        state.batch("a1", batch("nope", 1, 1)),
        Err(StateError::UnknownCampaign(_))
    ));
    // Nothing of the rejected batch was counted: seq 1 is still accepted.
    assert!(state.batch("a1", batch(&id, 1, 1_000)).unwrap());
}

#[tokio::test]
async fn hostile_seqs_and_histograms_are_refused_before_decoding_and_the_campaign_completes() {
    let state = State::default();
    let (tx, _rx) = mpsc::channel(8);
    state.connect(&hello("a1", "us-east"), tx);
    let id = state.launch(&plan().to_json(), 0).unwrap().campaign_id;
    let bad_message = |r| match r {
        Err(StateError::BadBatch { message, .. }) => message,
        other => panic!("expected BadBatch, got {other:?}"),
    };
    // seq u64::MAX: refused (before, it was stored and the reconnect's next_seq overflowed).
    let e = bad_message(state.batch("a1", batch(&id, u64::MAX, 1_000)));
    assert!(
        e.starts_with("seq 18446744073709551615 is more than"),
        "{e}"
    );
    // A histogram with foreign bounds (a ~60 ms dense decode): refused by its header.
    let mut foreign = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 1 << 40, 5).unwrap();
    foreign.record(1_000).unwrap();
    let mut b = batch(&id, 1, 1_000);
    b.histograms[0].hist_v2 = latmesh_core::hist::encode_v2(&foreign).unwrap();
    let e = bad_message(state.batch("a1", b));
    assert!(e.contains("are not latmesh's"), "{e}");
    // A done notice claiming u64::MAX batches is ignored (verifying it would have walked
    // 1..=u64::MAX).
    let done = |last_seq| pb::CampaignDone {
        campaign_id: id.clone(),
        last_seq,
        ..Default::default()
    };
    let e = bad_message(state.done("a1", &done(u64::MAX)).map(|()| true));
    assert!(
        e.starts_with("CampaignDone.last_seq 18446744073709551615"),
        "{e}"
    );
    assert!(state.summary(&id).is_none());
    // The agent's own batches still go through and complete the campaign.
    assert!(state.batch("a1", batch(&id, 1, 1_000)).unwrap());
    let (tx2, mut rx2) = mpsc::channel(8);
    state.connect(&hello("a1", "us-east"), tx2);
    assert_eq!(plan_of(rx2.recv().await).next_seq, 2);
    state.done("a1", &done(1)).unwrap();
    let s = state.summary(&id).expect("complete");
    assert_eq!((s.agents[0].records, s.agents[0].complete), (1, true));
}

#[tokio::test]
async fn the_agents_kept_are_bounded_and_the_longest_disconnected_is_forgotten_first() {
    let state = State::default();
    let max = crate::intake::MAX_KNOWN_AGENTS;
    let mut sessions = Vec::new();
    for i in 0..max {
        let h = hello(&format!("a{i:05}"), "us-east");
        state.admit(&h).unwrap();
        let (tx, rx) = mpsc::channel(8);
        sessions.push((state.connect(&h, tx), rx));
    }
    let newcomer = hello("new", "us-east");
    let e = state.admit(&newcomer).unwrap_err();
    assert!(e.contains(&format!("knows {max} agents")), "{e}");
    // Two leave; the first to leave is forgotten for the newcomer.
    state.disconnect("a00007", sessions[7].0);
    let left = now_unix_us();
    while now_unix_us() == left {
        std::hint::spin_loop(); // a later µs for the second one
    }
    state.disconnect("a00003", sessions[3].0);
    state.admit(&newcomer).unwrap();
    let (tx, _rx) = mpsc::channel(8);
    state.connect(&newcomer, tx);
    let ids: Vec<String> = state.agents().into_iter().map(|a| a.agent_id).collect();
    assert_eq!(ids.len(), max);
    assert!(!ids.contains(&"a00007".to_string()));
    assert!(ids.contains(&"a00003".to_string()) && ids.contains(&"new".to_string()));
}

/// Launches [`plan`] to the connected agent `a1`, which delivers one batch and is done:
/// the campaign's id, finished.
fn finish_one_batch_campaign(state: &State) -> String {
    let id = state.launch(&plan().to_json(), 0).unwrap().campaign_id;
    assert!(state.batch("a1", batch(&id, 1, 1_000)).unwrap());
    let done = pb::CampaignDone {
        campaign_id: id.clone(),
        last_seq: 1,
        ..Default::default()
    };
    state.done("a1", &done).unwrap();
    assert!(state.summary(&id).is_some());
    id
}

#[tokio::test]
async fn late_resends_of_a_campaign_finished_earlier_are_checked_like_live_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let id = {
        let state = State::default();
        state
            .with_state_dir(StateDir::open(tmp.path()).unwrap())
            .unwrap();
        state.connect(&hello("a1", "us-east"), mpsc::channel(8).0);
        finish_one_batch_campaign(&state)
    };
    let state = State::default();
    state
        .with_state_dir(StateDir::open(tmp.path()).unwrap())
        .unwrap();
    assert!(state.finished_earlier(&id, "a1").is_some());
    state.check_late("a1", &mut batch(&id, 1, 1_000)).unwrap();
    let bad_message = |r: Result<(), StateError>| match r {
        Err(StateError::BadBatch { message, .. }) => message,
        other => panic!("expected BadBatch, got {other:?}"),
    };
    let e = bad_message(state.check_late("a1", &mut batch(&id, u64::MAX, 1)));
    assert!(
        e.starts_with("seq 18446744073709551615 is more than"),
        "{e}"
    );
    let mut b = batch(&id, 1, 1_000);
    b.records[0].provider = "evil".into();
    let e = bad_message(state.check_late("a1", &mut b));
    assert!(
        e.contains("provider \"evil\" is not a provider of the plan"),
        "{e}"
    );
    let e = bad_message(state.check_late("a2", &mut batch(&id, 1, 1)));
    assert!(e.contains("not part of this campaign"), "{e}");
}

/// The `agents` rows queued (campaign, agent row as the sink writes it).
fn agent_rows(state: &State) -> Vec<latmesh_store::AgentRow> {
    state
        .drain_store_events()
        .into_iter()
        .filter_map(|ev| match ev {
            StoreEvent::Finished {
                campaign_id,
                agents,
            } => Some(
                agents
                    .into_iter()
                    .map(move |(a, v)| {
                        latmesh_store::AgentRow::from_summary(&campaign_id, &a, &v, 1)
                    })
                    .collect::<Vec<_>>(),
            ),
            StoreEvent::Launched { .. } => None,
        })
        .flatten()
        .collect()
}

#[tokio::test]
async fn a_done_notice_after_the_campaign_finished_updates_the_agent_s_delivery_facts() {
    let tmp = tempfile::tempdir().unwrap();
    let open = || StateDir::open(tmp.path()).unwrap();
    let done = |id: &str, last_seq, skipped| pb::CampaignDone {
        campaign_id: id.into(),
        last_seq,
        skipped,
        ..Default::default()
    };
    let id = {
        let state = State::with_store_events();
        state.with_state_dir(open()).unwrap();
        state.connect(&hello("a1", "us-east"), mpsc::channel(8).0);
        let id = state.launch(&plan().to_json(), 0).unwrap().campaign_id;
        assert!(state.batch("a1", batch(&id, 1, 1_000)).unwrap());
        // The deadline passes before the agent is done: finished incomplete, no notice.
        assert_eq!(state.expire(i64::MAX), vec![id.clone()]);
        let rows = agent_rows(&state);
        assert_eq!(rows.len(), 1);
        assert_eq!((rows[0].campaign_done, rows[0].records), (0, 1));
        assert!(!latmesh_store::query::not_verified(&rows[0], 1).is_empty());
        // Its last batch (stored, counted in its row only once its done notice came), then
        // the notice: a new version of its row, which verify finds whole.
        assert!(state.batch("a1", batch(&id, 2, 2_000)).unwrap());
        assert!(agent_rows(&state).is_empty());
        assert!(matches!(
            state.done("a1", &done(&id, u64::MAX, 0)),
            Err(StateError::BadBatch { .. })
        ));
        state.done("a1", &done(&id, 2, 0)).unwrap();
        let rows = agent_rows(&state);
        assert_eq!(rows.len(), 1, "{rows:?}");
        let r = &rows[0];
        assert_eq!(
            (r.campaign_done, r.last_seq, r.records, r.batches),
            (1, 2, 2, 2)
        );
        assert_eq!((r.version.as_str(), r.complete), ("t", false));
        assert!(latmesh_store::query::not_verified(r, 2).is_empty());
        // The same notice again changes nothing; the summary stays final.
        state.done("a1", &done(&id, 2, 0)).unwrap();
        assert!(agent_rows(&state).is_empty());
        let s = state.summary(&id).unwrap();
        assert!(!s.complete && !s.agents[0].complete);
        assert_eq!(
            (s.agents[0].records, s.agents[0].delivery.last_seq),
            (1, None)
        );
        id
    };
    let rec = open().record(&id).unwrap();
    assert_eq!(rec.agents["a1"].last_seq, Some(2));
    assert!(!rec.summary.as_ref().unwrap().complete);

    // A campaign an earlier process finished: the notice updates its record and row too.
    let state = State::with_store_events();
    state.with_state_dir(open()).unwrap();
    state.connect(&hello("a1", "us-east"), mpsc::channel(8).0);
    assert!(matches!(
        state.done("a1", &done(&id, u64::MAX, 0)),
        Err(StateError::BadBatch { .. })
    ));
    assert!(matches!(
        state.done("a9", &done(&id, 2, 0)),
        Err(StateError::BadBatch { .. })
    ));
    assert!(matches!(
        state.done("a1", &done("nope", 2, 0)),
        Err(StateError::UnknownCampaign(_))
    ));
    state.done("a1", &done(&id, 2, 0)).unwrap();
    assert!(agent_rows(&state).is_empty(), "nothing new");
    state.done("a1", &done(&id, 2, 3)).unwrap();
    let rows = agent_rows(&state);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        (rows[0].campaign_done, rows[0].last_seq, rows[0].skipped),
        (1, 2, 3)
    );
    drop(state);
    let rec = open().record(&id).unwrap();
    assert_eq!(rec.agents["a1"].skipped, 3);
    assert!(!rec.summary.unwrap().complete);
}

#[tokio::test]
async fn a_disconnect_republishes_only_the_agent_s_unfinished_campaigns() {
    let state = State::default();
    let s1 = state.connect(&hello("a1", "us-east"), mpsc::channel(8).0);
    let id = finish_one_batch_campaign(&state);
    let mut finished = state.watch(&id).unwrap();
    finished.borrow_and_update();
    let s2 = state.connect(&hello("a2", "eu-west"), mpsc::channel(8).0);
    state.disconnect("a2", s2);
    state.disconnect("a1", s1);
    assert!(
        !finished.has_changed().unwrap(),
        "a finished campaign stays as it was"
    );
}

#[tokio::test]
async fn a_stale_session_does_not_disconnect_the_new_one() {
    let state = State::default();
    let (tx1, _rx1) = mpsc::channel(8);
    let (tx2, _rx2) = mpsc::channel(8);
    let s1 = state.connect(&hello("a1", "us-east"), tx1);
    let _s2 = state.connect(&hello("a1", "us-east"), tx2);
    state.disconnect("a1", s1);
    assert!(state.agents()[0].connected);
}

#[tokio::test]
async fn a_campaign_past_its_deadline_finishes_with_what_arrived() {
    let state = State::default();
    let (tx1, _rx1) = mpsc::channel(8);
    let (tx2, _rx2) = mpsc::channel(8);
    state.connect(&hello("a1", "us-east"), tx1);
    state.connect(&hello("a2", "us-east"), tx2);
    let l = state.launch(&plan().to_json(), 0).unwrap();
    assert!(state.batch("a1", batch(&l.campaign_id, 1, 1_000)).unwrap());
    state
        .done(
            "a1",
            &pb::CampaignDone {
                campaign_id: l.campaign_id.clone(),
                skipped: 0,
                last_seq: 1,
                probes: 1,
                ..Default::default()
            },
        )
        .unwrap();
    // a2 died without a word: nothing happens before the deadline…
    assert!(state.expire(l.start_at_unix_us + 1_000_000).is_empty());
    assert!(state.summary(&l.campaign_id).is_none());
    // …and after it the campaign finishes, marked incomplete.
    let deadline = l.start_at_unix_us + plan().span_us() as i64 + 120_000_000 + DEADLINE_GRACE_US;
    assert_eq!(state.expire(deadline + 1), vec![l.campaign_id.clone()]);
    let s = state.summary(&l.campaign_id).unwrap();
    assert!(!s.complete);
    assert!(
        s.agents
            .iter()
            .any(|a| a.agent_id == "a2" && !a.complete && a.records == 0)
    );
    assert_eq!(s.cell("us-east", "p", "s").unwrap().samples, 1);
    // Its matrix says INCOMPLETE: the CLI's `ui::matrix` tests.
    assert!(!s.complete);
    assert!(state.watch(&l.campaign_id).unwrap().borrow().finished);
}

fn plan_of(msg: Option<Result<pb::CoordinatorMessage, Status>>) -> pb::PlanPush {
    match msg.expect("a message").expect("ok").kind {
        Some(pb::coordinator_message::Kind::Plan(p)) => p,
        other => panic!("expected a plan, got {other:?}"),
    }
}

#[tokio::test]
async fn a_restarted_agent_gets_the_plan_again_numbering_past_what_arrived() {
    let state = State::default();
    let (tx, mut rx) = mpsc::channel(8);
    state.connect(&hello("a1", "us-east"), tx);
    let id = state.launch(&plan().to_json(), 0).unwrap().campaign_id;
    assert_eq!(plan_of(rx.recv().await).next_seq, 1);
    assert!(state.batch("a1", batch(&id, 1, 1_000)).unwrap());
    assert!(state.batch("a1", batch(&id, 2, 1_000)).unwrap());
    // A second process with the same id while the first is alive is refused, in the same
    // region or another.
    let e = state.admit(&hello("a1", "us-east")).unwrap_err();
    assert!(e.contains("in use by a live agent"), "{e}");
    let e = state.admit(&hello("a1", "eu-west")).unwrap_err();
    assert!(e.contains("region \"us-east\""), "{e}");
    // The process restarts while its old session looks open but has gone silent (no RST):
    // its new session gets the plan with next_seq 3, and the old session is told it was
    // replaced.
    state
        .core()
        .agents
        .by_id
        .get_mut("a1")
        .unwrap()
        .info
        .last_seen_coord_unix_us -= 60_000_000;
    assert_eq!(state.admit(&hello("a1", "us-east")), Ok(()));
    let (tx2, mut rx2) = mpsc::channel(8);
    state.connect(&hello("a1", "us-east"), tx2);
    match rx.recv().await.unwrap().unwrap().kind {
        Some(pb::coordinator_message::Kind::Refused(r)) => {
            assert!(r.reason.contains("replaced"))
        }
        other => panic!("expected refused, got {other:?}"),
    }
    let again = plan_of(rx2.recv().await);
    assert_eq!(
        (again.campaign_id.as_str(), again.next_seq),
        (id.as_str(), 3)
    );
    // It skipped the rounds that had passed: finished, but not complete.
    assert!(state.batch("a1", batch(&id, 3, 1_000)).unwrap());
    state
        .done(
            "a1",
            &pb::CampaignDone {
                campaign_id: id.clone(),
                last_seq: 3,
                probes: 1,
                skipped: 4,
                ..Default::default()
            },
        )
        .unwrap();
    let s = state.summary(&id).unwrap();
    assert!(!s.complete);
    assert_eq!((s.agents[0].records, s.agents[0].skipped), (3, 4));
}

#[tokio::test]
async fn a_killed_agent_resending_its_spool_and_numbering_past_it_completes() {
    let state = State::default();
    let (tx, mut rx) = mpsc::channel(8);
    state.connect(&hello("a1", "us-east"), tx);
    let id = state.launch(&plan().to_json(), 0).unwrap().campaign_id;
    let _ = rx.recv().await;
    // Batches 1-2 arrived; 3 arrived but its ack was lost; 4 never arrived. The agent is
    // killed with 3 and 4 in its spool.
    for seq in 1..=3 {
        assert!(state.batch("a1", batch(&id, seq, 1_000)).unwrap());
    }
    let (tx2, mut rx2) = mpsc::channel(8);
    state.connect(&hello("a1", "us-east"), tx2);
    assert_eq!(plan_of(rx2.recv().await).next_seq, 4);
    // The restarted agent resends 3 and 4 and numbers new batches after its spool
    // (max(next_seq 4, spooled 4 + 1) = 5).
    assert!(
        !state.batch("a1", batch(&id, 3, 1_000)).unwrap(),
        "counted once"
    );
    assert!(state.batch("a1", batch(&id, 4, 1_000)).unwrap());
    assert!(state.batch("a1", batch(&id, 5, 1_000)).unwrap());
    state
        .done(
            "a1",
            &pb::CampaignDone {
                campaign_id: id.clone(),
                last_seq: 5,
                probes: 1,
                skipped: 0,
                ..Default::default()
            },
        )
        .unwrap();
    let s = state
        .summary(&id)
        .expect("every seq 1..=5 arrived: finished");
    assert!(s.complete);
    assert_eq!((s.agents[0].records, s.agents[0].batches), (5, 5));
}

/// What the batch path of `service.rs` does: append to the campaign's batch log, then
/// count.
fn logged_batch(state: &State, agent: &str, mut b: pb::ResultBatch) -> bool {
    if state.check(agent, &mut b).unwrap().is_some() {
        let log = state.batch_log(&b.campaign_id).expect("a batch log");
        log.append(agent, "us-east", &b).unwrap();
    }
    state.batch(agent, b).unwrap()
}

/// A refused batch is never resent (the agent quarantined it): a coordinator restarted
/// from its state directory must still count it as accounted for, or the campaign would
/// wait for it until its deadline.
#[tokio::test]
async fn refused_batches_survive_a_restart_and_do_not_hold_up_the_campaign() {
    let tmp = tempfile::tempdir().unwrap();
    let open = || StateDir::open(tmp.path()).unwrap();
    let id = {
        let state = State::default();
        state.with_state_dir(open()).unwrap();
        state.connect(&hello("a1", "us-east"), mpsc::channel(8).0);
        let id = state.launch(&plan().to_json(), 0).unwrap().campaign_id;
        assert_eq!(state.reject("a1", &id, 1, "http_status 799"), 1);
        id
        // Killed here.
    };
    let state = State::default();
    assert_eq!(state.with_state_dir(open()).unwrap(), vec![id.clone()]);
    state.connect(&hello("a1", "us-east"), mpsc::channel(8).0);
    assert!(logged_batch(&state, "a1", batch(&id, 2, 2_000)));
    state
        .done(
            "a1",
            &pb::CampaignDone {
                campaign_id: id.clone(),
                last_seq: 2,
                ..Default::default()
            },
        )
        .unwrap();
    let s = state.summary(&id).expect("finished: seq 1 was refused");
    let d = &s.agents[0].delivery;
    assert!(!s.agents[0].complete);
    assert_eq!((d.batches_rejected, d.rejected[0].seq), (1, 1));
    assert_eq!(d.rejected[0].reason, "http_status 799");
}

#[tokio::test]
async fn a_restarted_coordinator_replays_its_campaigns_and_counts_resends_once() {
    let tmp = tempfile::tempdir().unwrap();
    let open = || StateDir::open(tmp.path()).unwrap();
    let mut p = plan();
    p.rounds.count = 3;
    let (id, before) = {
        let state = State::default();
        assert!(state.with_state_dir(open()).unwrap().is_empty());
        let (tx, _rx) = mpsc::channel(8);
        state.connect(&hello("a1", "us-east"), tx);
        state.connect(&hello("a2", "us-east"), mpsc::channel(8).0);
        let l = state.launch(&p.to_json(), 0).unwrap();
        assert!(logged_batch(&state, "a1", batch(&l.campaign_id, 1, 1_000)));
        assert!(logged_batch(&state, "a1", batch(&l.campaign_id, 2, 2_000)));
        assert!(logged_batch(&state, "a2", batch(&l.campaign_id, 1, 3_000)));
        let done = |last_seq| pb::CampaignDone {
            campaign_id: l.campaign_id.clone(),
            last_seq,
            probes: 1,
            skipped: 0,
            started_coord_unix_us: 1_700_000_000_000_420,
            clock_offset_us: -31,
            clock_uncertainty_us: 50,
            ..Default::default()
        };
        state.done("a2", &done(1)).unwrap();
        let before = state.watch(&l.campaign_id).unwrap().borrow().clone();
        (l.campaign_id, before)
        // Killed here: nothing but the state directory survives.
    };
    let state = State::default();
    assert_eq!(state.with_state_dir(open()).unwrap(), vec![id.clone()]);
    let after = state.watch(&id).unwrap().borrow().clone();
    assert_eq!(
        (after.probes_done, after.agents.len(), after.finished),
        (before.probes_done, 2, false)
    );
    let (tx, mut rx) = mpsc::channel(8);
    state.connect(&hello("a1", "us-east"), tx);
    assert_eq!(
        plan_of(rx.recv().await).next_seq,
        3,
        "past every seq replayed"
    );
    let (tx2, mut rx2) = mpsc::channel(8);
    state.connect(&hello("a2", "us-east"), tx2);
    assert!(rx2.try_recv().is_err(), "a2 is done: no plan again");
    assert!(
        !logged_batch(&state, "a1", batch(&id, 2, 2_000)),
        "a resend counts once"
    );
    assert!(logged_batch(&state, "a1", batch(&id, 3, 4_000)));
    state
        .done(
            "a1",
            &pb::CampaignDone {
                campaign_id: id.clone(),
                last_seq: 3,
                probes: 3,
                skipped: 0,
                started_coord_unix_us: 1_700_000_000_000_000,
                clock_offset_us: 12,
                clock_uncertainty_us: 20,
                ..Default::default()
            },
        )
        .unwrap();
    let s = state.summary(&id).expect("finished after the restart");
    assert!(s.complete, "{s:?}");
    // a2's start facts came before the restart: kept in the state directory.
    let start = &s.start;
    assert_eq!(start.skew_us, Some(420));
    assert_eq!(start.clock_uncertainty_us, Some(70)); // 50 + 20: the two largest
    let a2 = &start.agents[1];
    assert_eq!(a2.agent_id, "a2");
    assert_eq!(a2.started_coord_unix_us, 1_700_000_000_000_420);
    assert_eq!(a2.clock_offset_us, -31);
    let cell = s.cell("us-east", "p", "s").unwrap();
    assert_eq!((cell.attempts, cell.samples), (4, 4));
    let ttft = cell.ttft.unwrap();
    assert!((ttft.p99_ms - 4.0).abs() < 0.01, "{ttft:?}");
    drop(state);

    // Another restart: the finished campaign is not loaded, but watch has its summary.
    let state = State::default();
    assert!(state.with_state_dir(open()).unwrap().is_empty());
    let p = state.watch(&id).unwrap().borrow().clone();
    assert!(p.finished);
    let again: Summary = serde_json::from_str(&p.summary_json).unwrap();
    assert_eq!(again, s);
    // Progress in slots, as the live campaign counted them (each test record is a
    // finished first turn): a1 3, a2 1.
    assert_eq!((p.probes_done, p.cancelled), (4, false));
    let slots: Vec<(String, u64)> = p
        .agents
        .iter()
        .map(|a| (a.agent_id.clone(), a.probes_done))
        .collect();
    assert_eq!(slots, vec![("a1".into(), 3), ("a2".into(), 1)]);
    // A late resend of it is recognised (stored and acked by the service), for its agents
    // only.
    assert_eq!(
        state.finished_earlier(&id, "a1").as_deref(),
        Some("us-east")
    );
    assert_eq!(state.finished_earlier(&id, "a9"), None);
    assert_eq!(state.finished_earlier("nope", "a1"), None);
    assert!(matches!(
        state.watch("nope"),
        Err(StateError::UnknownCampaign(_))
    ));
    // And a new launch is not refused as busy.
    state.connect(&hello("a1", "us-east"), mpsc::channel(8).0);
    assert!(state.launch(&plan().to_json(), 0).is_ok());
}

#[tokio::test]
async fn cancel_pushes_to_agents_and_the_summary_says_cancelled() {
    let state = State::default();
    let (tx, mut rx) = mpsc::channel(8);
    state.connect(&hello("a1", "us-east"), tx);
    assert!(matches!(
        state.cancel("nope"),
        Err(StateError::UnknownCampaign(_))
    ));
    let id = state.launch(&plan().to_json(), 0).unwrap().campaign_id;
    let _ = plan_of(rx.recv().await);
    assert!(state.batch("a1", batch(&id, 1, 1_000)).unwrap());
    assert_eq!(state.cancel(&id).unwrap(), vec!["a1".to_string()]);
    match rx.recv().await.unwrap().unwrap().kind {
        Some(pb::coordinator_message::Kind::Cancel(c)) => assert_eq!(c.campaign_id, id),
        other => panic!("expected a cancel, got {other:?}"),
    }
    let p = state.watch(&id).unwrap().borrow().clone();
    assert!(p.cancelled && !p.finished);
    assert_eq!(p.agents[0].status, "cancelling");
    // A reconnecting agent gets the plan, then the cancel.
    let (tx2, mut rx2) = mpsc::channel(8);
    state.connect(&hello("a1", "us-east"), tx2);
    let _ = plan_of(rx2.recv().await);
    assert!(matches!(
        rx2.recv().await.unwrap().unwrap().kind,
        Some(pb::coordinator_message::Kind::Cancel(_))
    ));
    state
        .done(
            "a1",
            &pb::CampaignDone {
                campaign_id: id.clone(),
                last_seq: 1,
                probes: 1,
                skipped: 0,
                ..Default::default()
            },
        )
        .unwrap();
    let p = state.watch(&id).unwrap().borrow().clone();
    assert!(p.finished && p.cancelled);
    assert_eq!(p.agents[0].status, "cancelled");
    let v: serde_json::Value = serde_json::from_str(&p.summary_json).unwrap();
    assert_eq!(v["cancelled"], serde_json::Value::Bool(true));
    assert_eq!(state.summary(&id).unwrap().agents[0].records, 1);
    let err = state.cancel(&id).unwrap_err();
    assert!(matches!(err, StateError::Finished { .. }), "{err}");
    assert!(
        err.to_string().contains("already finished (cancelled)"),
        "{err}"
    );
}

#[tokio::test]
async fn a_cancelled_campaign_finishes_soon_even_without_its_agents() {
    let state = State::default();
    let (tx, _rx) = mpsc::channel(8);
    state.connect(&hello("a1", "us-east"), tx);
    let mut p = plan();
    p.rounds.count = 1000;
    let id = state.launch(&p.to_json(), 0).unwrap().campaign_id;
    state.cancel(&id).unwrap();
    assert!(
        state
            .expire(now_unix_us() + CANCEL_DEADLINE_US / 2)
            .is_empty()
    );
    assert_eq!(
        state.expire(now_unix_us() + CANCEL_DEADLINE_US + 1_000_000),
        vec![id.clone()]
    );
    assert!(state.watch(&id).unwrap().borrow().cancelled);
}

#[tokio::test]
async fn a_cancel_survives_a_coordinator_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let open = || StateDir::open(tmp.path()).unwrap();
    let mut p = plan();
    p.rounds.count = 1000;
    let id = {
        let state = State::default();
        state.with_state_dir(open()).unwrap();
        state.connect(&hello("a1", "us-east"), mpsc::channel(8).0);
        let id = state.launch(&p.to_json(), 0).unwrap().campaign_id;
        state.cancel(&id).unwrap();
        id
        // Killed here.
    };
    let state = State::default();
    assert_eq!(state.with_state_dir(open()).unwrap(), vec![id.clone()]);
    assert!(state.is_cancelled(&id));
    // The reconnecting agent gets the plan, then the cancel.
    let (tx, mut rx) = mpsc::channel(8);
    state.connect(&hello("a1", "us-east"), tx);
    let kinds: Vec<_> = std::iter::from_fn(|| rx.try_recv().ok())
        .map(|m| m.unwrap().kind)
        .collect();
    assert!(matches!(
        kinds.as_slice(),
        [
            Some(pb::coordinator_message::Kind::Plan(_)),
            Some(pb::coordinator_message::Kind::Cancel(_))
        ]
    ));
    state.expire(now_unix_us() + CANCEL_DEADLINE_US + 1_000_000);
    let s = state.summary(&id).expect("finished by the cancel deadline");
    assert!(s.cancelled && !s.complete);
    // Its matrix says CANCELLED: the CLI's `ui::matrix` tests.
}

#[tokio::test]
async fn silent_agents_are_marked_disconnected_and_revive_when_heard() {
    let state = State::default();
    let (tx, _rx) = mpsc::channel(8);
    let s = state.connect(&hello("a1", "us-east"), tx);
    state.heartbeat(
        "a1",
        s,
        &pb::Heartbeat {
            in_flight: 3,
            interval_ms: 1_000,
            ..Default::default()
        },
    );
    let a = &state.agents()[0];
    assert_eq!((a.in_flight, a.heartbeat_interval_ms), (3, 1_000));
    assert!(a.last_heartbeat_coord_unix_us > 0 && a.connected);
    let now = now_unix_us();
    assert!(state.check_liveness(now + 2_500_000).is_empty());
    assert_eq!(
        state.check_liveness(now + 3_500_000),
        vec!["a1".to_string()]
    );
    let a = &state.agents()[0];
    assert!(!a.connected);
    assert!(a.disconnect_reason.contains("no heartbeat"), "{a:?}");
    assert!(a.disconnected_since_coord_unix_us > 0);
    assert_eq!(a.in_flight, 3, "the last count reported stays visible");
    // A stale session's word changes nothing; the current session's revives it.
    state.seen("a1", s + 7);
    assert!(!state.agents()[0].connected);
    state.seen("a1", s);
    assert!(state.agents()[0].connected);
    // A closed session says so.
    state.disconnect("a1", s);
    let a = &state.agents()[0];
    assert_eq!(a.disconnect_reason, "session closed");
}

#[tokio::test]
async fn an_agent_runs_one_campaign_at_a_time() {
    let state = State::default();
    let (tx, _rx) = mpsc::channel(8);
    state.connect(&hello("a1", "us-east"), tx);
    let first = state.launch(&plan().to_json(), 0).unwrap().campaign_id;
    let err = state.launch(&plan().to_json(), 0).unwrap_err();
    assert!(
        matches!(&err, StateError::Busy { agent, campaign } if agent == "a1" && *campaign == first),
        "{err}"
    );
    state
        .done(
            "a1",
            &pb::CampaignDone {
                campaign_id: first,
                last_seq: 0,
                probes: 0,
                skipped: 0,
                ..Default::default()
            },
        )
        .unwrap();
    assert!(state.launch(&plan().to_json(), 0).is_ok());
}

#[tokio::test]
async fn absurd_heartbeat_values_are_ignored_and_a_disconnected_agent_keeps_no_key_names() {
    let state = State::default();
    let (tx, _rx) = mpsc::channel(8);
    let names: Vec<String> = (0..crate::intake::MAX_KEY_ENV_NAMES)
        .map(|i| format!("{i:0>128}"))
        .collect();
    let s = state.connect(
        &pb::AgentHello {
            key_env_names: names,
            key_env_reported: true,
            ..hello("a1", "us-east")
        },
        tx,
    );
    let sane = pb::Heartbeat {
        clock_offset_us: -40_000,
        clock_uncertainty_us: 300,
        in_flight: 3,
        batches_quarantined: 1,
        ..Default::default()
    };
    state.heartbeat("a1", s, &sane);
    state.heartbeat(
        "a1",
        s,
        &pb::Heartbeat {
            clock_offset_us: 1 << 62,
            clock_uncertainty_us: u64::MAX,
            in_flight: u32::MAX,
            batches_quarantined: u64::MAX,
            ..Default::default()
        },
    );
    let a = &state.agents()[0];
    assert_eq!(
        (
            a.clock_offset_us,
            a.clock_uncertainty_us,
            a.in_flight,
            a.batches_quarantined
        ),
        (-40_000, 300, 3, 1),
        "the last sane values stay shown"
    );
    assert!(state.core().agents.by_id["a1"].key_env.is_some());
    state.disconnect("a1", s);
    assert!(
        state.core().agents.by_id["a1"].key_env.is_none(),
        "its hello's key names go with its session"
    );
}

#[tokio::test]
async fn a_done_notice_with_absurd_quarantine_counts_is_refused() {
    let state = State::default();
    let (tx, _rx) = mpsc::channel(8);
    state.connect(&hello("a1", "us-east"), tx);
    let id = state.launch(&plan().to_json(), 0).unwrap().campaign_id;
    assert!(state.batch("a1", batch(&id, 1, 1_000)).unwrap());
    for done in [
        pb::CampaignDone {
            records_quarantined: u64::MAX,
            ..Default::default()
        },
        pb::CampaignDone {
            histograms_quarantined: u64::MAX,
            ..Default::default()
        },
        pb::CampaignDone {
            quarantined_seqs: (1..5_000).collect(),
            ..Default::default()
        },
    ] {
        let done = pb::CampaignDone {
            campaign_id: id.clone(),
            last_seq: 1,
            ..done
        };
        let err = state.done("a1", &done).unwrap_err();
        assert!(matches!(err, StateError::BadBatch { .. }), "{err}");
        assert!(state.summary(&id).is_none(), "the notice is ignored");
    }
    let summary_of = |done: pb::CampaignDone| {
        state.done("a1", &done).unwrap();
        state.summary(&id).unwrap()
    };
    let s = summary_of(pb::CampaignDone {
        campaign_id: id.clone(),
        last_seq: 1,
        ..Default::default()
    });
    assert!(s.complete, "{s:?}");
}

/// The summary of a finishing campaign is built with no lock of the state held: meanwhile
/// another campaign's batch goes through intake, and a late batch of the finishing campaign
/// gets its agent's row queued once the summary is installed (the summary stays final).
#[tokio::test]
async fn a_summary_is_built_without_the_lock_and_intake_goes_on_meanwhile() {
    use std::sync::{Arc, Mutex};
    let state = State::with_store_events();
    state.connect(&hello("a1", "us-east"), mpsc::channel(8).0);
    state.connect(&hello("a2", "eu-west"), mpsc::channel(8).0);
    let first = state.launch(&plan().to_json(), 0).unwrap().campaign_id;
    let mut q = plan();
    q.name = "q".into();
    q.regions = vec!["eu-west".into()];
    let other = state.launch(&q.to_json(), 0).unwrap().campaign_id;
    assert!(state.batch("a1", batch(&first, 1, 1_000)).unwrap());
    assert_eq!(state.drain_store_events().len(), 2, "the two launches");
    let builds = Arc::new(Mutex::new(0));
    let _hook = publish::tests::on_building({
        let (state, first, other, builds) =
            (state.clone(), first.clone(), other.clone(), builds.clone());
        move || {
            *builds.lock().unwrap() += 1;
            let inner = &state.inner;
            assert!(inner.core.try_lock().is_ok(), "core is not held");
            assert!(inner.dir.try_lock().is_ok(), "dir is not held");
            assert!(inner.events.try_lock().is_ok(), "events is not held");
            // Intake of another campaign proceeds.
            assert!(state.batch("a2", batch(&other, 1, 2_000)).unwrap());
            // The finishing campaign counts as finished, without a summary yet.
            assert_eq!(state.running_campaigns(), 1);
            assert!(state.summary(&first).is_none());
            assert!(matches!(
                state.cancel(&first),
                Err(StateError::Finished { .. })
            ));
            // A late batch of its agent, done already.
            assert!(state.batch("a1", batch(&first, 2, 3_000)).unwrap());
        }
    });
    let done = pb::CampaignDone {
        campaign_id: first.clone(),
        last_seq: 1,
        ..Default::default()
    };
    state.done("a1", &done).unwrap();
    assert_eq!(
        *builds.lock().unwrap(),
        1,
        "built once, after the lock was released"
    );
    // Installed when `done` returned: the final progress carries it.
    let s = state.summary(&first).expect("installed");
    assert_eq!((s.agents[0].records, s.agents[0].batches), (1, 1), "final");
    let p = state.watch(&first).unwrap().borrow().clone();
    assert!(p.finished);
    assert_eq!(serde_json::from_str::<Summary>(&p.summary_json).unwrap(), s);
    assert_eq!(state.watch(&other).unwrap().borrow().probes_done, 1);
    // The agents' rows: the summary's, then the late batch's new version.
    let rows: Vec<(String, u64, u64)> = state
        .drain_store_events()
        .into_iter()
        .flat_map(|ev| match ev {
            StoreEvent::Finished {
                campaign_id,
                agents,
            } => agents
                .into_iter()
                .map(|(a, _)| (campaign_id.clone(), a.records, a.batches))
                .collect(),
            StoreEvent::Launched { .. } => Vec::new(),
        })
        .collect();
    assert_eq!(rows, [(first.clone(), 1, 1), (first.clone(), 2, 2)]);
}
