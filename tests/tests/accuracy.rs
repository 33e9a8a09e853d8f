//! The probe engine against the simulator's ground truth, in one process on loopback: every
//! TTFT, TTFC, ITL and E2E the client measures must be consistent with when the simulator
//! received the request and handed each token frame to hyper (`latmesh_sim::truth`).
//!
//! Only causal relations are asserted, no timing bounds: the client's `t_send` is before the
//! server's receipt and a frame cannot be read before it is handed over. Client and server
//! share one process and one monotonic clock, so this is checked on exact instants: the
//! prober's `t_send` ([`ProbeResult::t_send`]) is not after the server's `received`, and the
//! read instant of every token-bearing payload ([`ProbeResult::token_read_at`], asked for
//! with [`ProbeOptions::keep_timestamps`]) is not before the server's `handed` stamp of that
//! frame. The record's µs durations must be those instants, floored (TTFT, ITL gaps), and
//! each client duration from `t_send` is at least the server's duration from its receipt.
//! The `handed` stamps are used (not `written`, taken after `write(2)` returned, which a
//! reader on the other core may beat by a few µs).

use std::time::{Duration, Instant};

use latmesh_agent::probe::{ProbeOptions, ProbeRequest, ProbeResult, Prober};
use latmesh_core::plan::Timeouts;
use latmesh_core::prompts::Message;
use latmesh_core::record::Outcome;
use latmesh_sim::truth::{FrameTruth, ProbeTruth};
use latmesh_sim::{ProviderProfile, SimConfig, TruthLog};

fn floor_us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap()
}

async fn start(profiles: Vec<ProviderProfile>) -> (String, TruthLog) {
    let cfg = SimConfig {
        profiles,
        ..SimConfig::default()
    };
    let truth = cfg.truth.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(latmesh_sim::serve_providers(listener, cfg));
    (format!("http://{addr}"), truth)
}

async fn probe(prober: &Prober, base: &str, provider: &str, probe_id: &str) -> ProbeResult {
    let messages = vec![Message::new("user", "How far is the moon?")];
    let timeouts = Timeouts {
        connect_s: 5.0,
        ttft_s: 10.0,
        idle_s: 10.0,
        total_s: 30.0,
    };
    let base_url = format!("{base}/{provider}/v1");
    let req = ProbeRequest {
        base_url: &base_url,
        model_id: "deepseek-v4-flash",
        api_key: None,
        messages: &messages,
        stream: true,
        max_tokens: 64,
        temperature: None,
        top_p: None,
        timeouts: &timeouts,
        probe_id: Some(probe_id),
        user_agent: None,
        shape: latmesh_core::api::RequestShape::chat_default(),
        secret_headers: &[],
    };
    let opts = ProbeOptions {
        keep_timestamps: true,
        ..ProbeOptions::default()
    };
    prober.probe_with(&req, opts).await
}

/// Checks one probe against its ground truth; `one_token_per_frame` for providers that send
/// one token per SSE chunk.
fn check(ctx: &str, r: &ProbeResult, t: &ProbeTruth, one_token_per_frame: bool) {
    let rec = &r.record;
    assert_eq!(rec.outcome(), Outcome::Ok, "{ctx}: {rec:?}");
    assert_eq!(t.status, Some(200), "{ctx}");
    assert!(t.stream && !t.truncated && t.end.is_some(), "{ctx}: {t:?}");

    // Every token frame the server sent is one token-bearing payload for the client.
    let frames = t.frames.len();
    assert!(frames > 1, "{ctx}");
    let token_payloads = rec.content_chunks + rec.reasoning_chunks;
    assert_eq!(token_payloads as usize, frames, "{ctx}");
    assert_eq!(
        r.itl_gaps_us.len(),
        frames - 1,
        "{ctx}: one gap per pair of frames"
    );
    let tokens: u32 = t.frames.iter().map(|f| f.tokens).sum();
    assert_eq!(rec.output_tokens, tokens, "{ctx}");
    if one_token_per_frame {
        assert!(t.frames.iter().all(|f| f.tokens == 1), "{ctx}");
        assert_eq!(r.itl_gaps_us.len() as u32, tokens - 1, "{ctx}");
    }

    // TTFT / TTFC / E2E: client (from t_send) ≥ server (from its receipt).
    let server = |f: &FrameTruth| floor_us(t.since_received(f.stamp.handed));
    let ttft = rec.ttft_us.expect("ttft");
    assert!(ttft >= server(&t.frames[0]), "{ctx}: ttft {ttft} µs");
    let first_content = t.first_content_frame().expect("content");
    assert_eq!(
        r.first_content_payload_index.is_some(),
        rec.ttfc_us.is_some(),
        "{ctx}"
    );
    let ttfc = rec.ttfc_us.expect("ttfc");
    assert!(ttfc >= server(&t.frames[first_content]), "{ctx}: ttfc");
    assert!(ttfc >= ttft, "{ctx}");
    let end = t.end.unwrap();
    assert!(
        rec.e2e_us.unwrap() >= floor_us(t.since_received(end.handed)),
        "{ctx}: e2e"
    );

    // Exact instants (one clock): the request was sent before the server received it, and
    // every token-bearing payload was read no earlier than the server handed its frame over.
    let t_send = r.t_send.expect("t_send");
    assert!(
        t_send <= t.received,
        "{ctx}: t_send after the server's receipt"
    );
    assert_eq!(
        r.token_read_at.len(),
        frames,
        "{ctx}: one read instant per frame"
    );
    for (i, (read, f)) in r.token_read_at.iter().zip(&t.frames).enumerate() {
        assert!(
            *read >= f.stamp.handed,
            "{ctx}: frame {i} read {:?} before the server handed it over",
            f.stamp.handed - *read
        );
        assert!(*read >= t_send, "{ctx}: frame {i} read before t_send");
    }
    assert!(r.token_read_at.is_sorted(), "{ctx}: read instants in order");
    // The record's durations are those instants, floored to µs.
    assert_eq!(ttft, floor_us(r.token_read_at[0] - t_send), "{ctx}: ttft");
    let gaps: Vec<u64> = r
        .token_read_at
        .windows(2)
        .map(|w| floor_us(w[1] - w[0]))
        .collect();
    assert_eq!(gaps, r.itl_gaps_us, "{ctx}: itl gaps");
    // E2E ends at an instant no earlier than the server's hand-over of the last frame.
    let e2e = Duration::from_micros(rec.e2e_us.unwrap() + 1);
    assert!(
        t_send + e2e > end.handed,
        "{ctx}: e2e before the server's end"
    );

    // Every token's client stamp (ttft + the gaps before it) is not earlier than the
    // server's hand-over of that frame (µs, floored: 1 µs allowance per summed value).
    let mut client_off = ttft;
    for (i, f) in t.frames.iter().enumerate() {
        if i > 0 {
            client_off += r.itl_gaps_us[i - 1];
        }
        assert!(
            client_off + i as u64 + 1 >= server(f),
            "{ctx}: frame {i}: client {client_off} µs < server {} µs",
            server(f)
        );
        if let Some(w) = f.stamp.written {
            assert!(w >= f.stamp.handed, "{ctx}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_timings_are_consistent_with_the_server_writes() {
    let n = |name: &str, ttft_us, itl_us| ProviderProfile {
        output_tokens_min: 24,
        output_tokens_max: 24,
        ..ProviderProfile::fixed(name, ttft_us, itl_us)
    };
    let profiles = vec![
        // One token per frame, sub-ms gaps (frames often share a read: gaps of 0 µs).
        n("one", 3_000, 300),
        ProviderProfile {
            itl_sigma: 0.3,
            ttft_jitter_sigma: 0.2,
            ..n("jitter", 8_000, 2_000)
        },
        ProviderProfile {
            reasoning_tokens_min: 5,
            reasoning_tokens_max: 5,
            ..n("reason", 5_000, 1_000)
        },
        ProviderProfile {
            tokens_per_chunk_min: 3,
            tokens_per_chunk_max: 5,
            ..n("bulk", 4_000, 500)
        },
        ProviderProfile {
            early_role_chunk: true,
            keepalive_interval_us: 2_000,
            ..n("early", 12_000, 1_000)
        },
    ];
    let (base, truth) = start(profiles.clone()).await;
    let prober = Prober::new(Some("us-east")).unwrap();

    // Sequential probes, then 40 at once over all providers.
    for p in &profiles {
        let id = format!("seq-{}", p.name);
        let before = Instant::now();
        let r = probe(&prober, &base, &p.name, &id).await;
        let after = Instant::now();
        let t = truth.get(&id).expect("recorded");
        assert!(before <= t.received && t.end.unwrap().handed <= after);
        assert!(t.write_tracked);
        check(&id, &r, &t, p.tokens_per_chunk_max == 1);
    }
    let prober = std::sync::Arc::new(prober);
    let mut set = tokio::task::JoinSet::new();
    for i in 0..40 {
        let p = profiles[i % profiles.len()].clone();
        let id = format!("par-{i}-{}", p.name);
        let (prober, base) = (prober.clone(), base.clone());
        set.spawn(async move {
            let r = probe(&prober, &base, &p.name, &id).await;
            (id, p, r)
        });
    }
    while let Some(joined) = set.join_next().await {
        let (id, p, r) = joined.unwrap();
        let t = truth.get(&id).expect("recorded");
        check(&id, &r, &t, p.tokens_per_chunk_max == 1);
    }
}

/// A busy client does not add to what it measures. The prober runs on one thread, and that
/// thread is blocked (as by a long poll of some other task) from before the first token frame
/// arrives until long after; the frame waits in the socket. TTFT is still the frame's arrival
/// (the kernel's receive time, on Linux), not the moment the thread got back to it: within
/// 5 ms of the server's hand-over, while the thread was stuck for 60 ms after it.
#[cfg(target_os = "linux")]
#[test]
fn a_blocked_client_thread_does_not_delay_the_stamps() {
    // The simulator on its own runtime and thread: blocking the client must not block it.
    let (tx, rx) = std::sync::mpsc::channel();
    let profile = ProviderProfile {
        output_tokens_min: 3,
        output_tokens_max: 3,
        ..ProviderProfile::fixed("slow", 30_000, 150_000)
    };
    std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async move {
            tx.send(start(vec![profile]).await).unwrap();
            std::future::pending::<()>().await;
        });
    });
    let (base, truth) = rx.recv().unwrap();

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let prober = Prober::new(Some("us-east")).unwrap();
        // Warm the connection pool: the measured probe's request then goes out at once.
        let warm = probe(&prober, &base, "slow", "warm").await;
        assert_eq!(warm.record.outcome(), Outcome::Ok);

        let blocked = Duration::from_millis(60);
        let blocker = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let from = Instant::now();
            std::thread::sleep(blocked); // the runtime's only thread
            from
        });
        let r = probe(&prober, &base, "slow", "blocked").await;
        let block_from = blocker.await.unwrap();
        let t = truth.get("blocked").expect("recorded");
        check("blocked", &r, &t, true);

        let first = &t.frames[0];
        assert!(
            block_from < first.stamp.handed && first.stamp.handed < block_from + blocked,
            "the first frame must arrive while the thread is blocked"
        );
        let read = r.token_read_at[0];
        assert!(
            read < first.stamp.handed + Duration::from_millis(5),
            "first token stamped {:?} after the server handed it over (the thread was \
             blocked until {:?} after)",
            read - first.stamp.handed,
            (block_from + blocked).saturating_duration_since(first.stamp.handed)
        );
    });
}
