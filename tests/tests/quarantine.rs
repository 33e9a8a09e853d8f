//! A batch the coordinator refuses as malformed (issue 17) does not block the agent's spool:
//! with real processes on loopback (`latmesh-sim`, a coordinator storing into the test
//! ClickHouse, one agent with an on-disk spool, the CLI) and a provider whose first answer
//! carries an HTTP status the coordinator refuses (799: not an HTTP status), that answer's
//! batch is refused and quarantined on the agent (kept on disk, with its reason), the
//! agent's later batches and its next campaign are stored, and `latmesh campaign verify`
//! says the agent is *not verified*, naming the refused batch, instead of "0 lost".

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use latmesh_coordinator::summary::Summary;
use latmesh_sim::profile::{DEFAULT_MODEL_ID, ProviderProfile};
use latmesh_tests::stack::Stack;
use latmesh_tests::verify;

/// A provider on loopback answering its first request with status 799 and every later one
/// with 503 (a valid failed attempt); returns its `host:port` and its request count.
fn odd_provider() -> (String, Arc<AtomicU32>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let served = Arc::new(AtomicU32::new(0));
    let count = served.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let count = count.clone();
            std::thread::spawn(move || {
                // The request head and body (small JSON): read until the client waits.
                conn.set_read_timeout(Some(Duration::from_millis(200))).ok();
                let mut buf = [0u8; 65536];
                let mut got = Vec::new();
                while let Ok(n) = conn.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    got.extend_from_slice(&buf[..n]);
                    if request_complete(&got) {
                        break;
                    }
                }
                let head = if count.fetch_add(1, Ordering::SeqCst) == 0 {
                    "HTTP/1.1 799 Odd"
                } else {
                    "HTTP/1.1 503 Service Unavailable"
                };
                let body = r#"{"error":{"message":"busy","type":"server_error"}}"#;
                let _ = write!(
                    conn,
                    "{head}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    (addr, served)
}

/// Whether `got` holds a whole HTTP request (head and `content-length` bytes of body).
fn request_complete(got: &[u8]) -> bool {
    let text = String::from_utf8_lossy(got);
    let Some(end) = text.find("\r\n\r\n") else {
        return false;
    };
    let length = text[..end]
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    got.len() >= end + 4 + length
}

fn campaign(name: &str, odd: Option<&str>) -> String {
    let odd = odd
        .map(|addr| {
            format!(
                "[[providers]]\nname = \"odd\"\nbase_url = \"http://{addr}/v1\"\nmodel_id = \"{DEFAULT_MODEL_ID}\"\n"
            )
        })
        .unwrap_or_default();
    format!(
        r#"
[campaign]
name = "{name}"
regions = ["us-east"]
[rounds]
count = 4
interval_s = 1.5
gap_ms = 100
[[scenarios]]
name = "chat"
prompt_ids = ["short-qa-en-*"]
max_tokens = 16
timeout_total_s = 10
[[providers]]
name = "good"
base_url = "http://{{sim}}/good/v1"
model_id = "{DEFAULT_MODEL_ID}"
{odd}"#
    )
}

#[test]
fn a_refused_batch_is_quarantined_and_the_agent_goes_on_but_is_not_verified() {
    let (client, db) = latmesh_tests::fresh_db("quarantine");
    let ch_url = latmesh_tests::clickhouse_url().to_string();
    let (odd, odd_requests) = odd_provider();
    let mut stack = Stack::start_with_clickhouse(
        &[ProviderProfile::fixed("good", 20_000, 1_000)],
        &ch_url,
        &db,
    );
    let mut agent = stack.agent_command("a1", "us-east", &stack.coord_url);
    agent
        .args(["--exit-after", "2"])
        .env("LATMESH_AGENT_HEARTBEAT_S", "1");
    stack.spawn("agent-a1", agent);

    let started = Instant::now();
    let (first, out): (Summary, String) = stack.launch(&campaign("refused", Some(&odd)));
    // Finished with what arrived, without waiting for the refused batch until the deadline.
    assert!(
        started.elapsed() < Duration::from_secs(40),
        "took {:?}:\n{out}",
        started.elapsed()
    );
    assert_eq!(
        odd_requests.load(Ordering::SeqCst),
        4,
        "one request a round"
    );
    let a = &first.agents[0];
    assert!(!a.complete, "{a:?}");
    assert_eq!(a.delivery.batches_rejected, 1, "{a:?}");
    let refused = &a.delivery.rejected[0];
    assert!(
        refused
            .reason
            .contains("http_status 799 is not an HTTP status"),
        "{refused:?}"
    );
    assert!(a.batches >= 1, "later batches were stored: {a:?}");

    // The agent kept the refused batch, with the 799 record, in its quarantine.
    let spool = stack.dir.path().join("spool-a1");
    let quarantined: Vec<_> = latmesh_agent::spool::read_quarantine(&spool)
        .unwrap()
        .into_iter()
        .map(|r| r.expect("a whole batch file").1)
        .collect();
    assert_eq!(quarantined.len(), 1, "{quarantined:?}");
    assert_eq!(quarantined[0].seq, refused.seq);
    assert!(
        quarantined[0]
            .records
            .iter()
            .any(|r| r.provider == "odd" && r.http_status == Some(799))
    );
    let log = std::fs::read_to_string(stack.log("agent-a1")).unwrap();
    assert!(log.contains("quarantined"), "{log}");
    let coord_log = std::fs::read_to_string(stack.log("coordinator")).unwrap();
    assert!(
        coord_log.contains("batch refused as malformed"),
        "{coord_log}"
    );

    // The next campaign on the same agent is whole: its spool is not blocked.
    let (second, out) = stack.launch(&campaign("after", None));
    assert!(second.agents[0].complete, "{out}");
    let text = latmesh_tests::verify_until_clean(&ch_url, &db, &second.campaign_id);
    assert!(text.contains("a1"), "{text}");
    // Its heartbeats (every second, through the second campaign) reported the quarantine.
    let listing = std::process::Command::new(latmesh_tests::bin("latmesh"))
        .args(["agents", "--coordinator", &stack.coord_url])
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&listing.stdout);
    assert!(listing.contains("a1 quarantined 1 batch(es)"), "{listing}");

    // The first: every batch that arrived is stored, but the agent is not verified, and the
    // refused batch is named; never "0 lost" for it.
    let deadline = Instant::now() + Duration::from_secs(60);
    let text = loop {
        let (ok, text) = verify(&ch_url, &db, &first.campaign_id);
        assert!(!ok, "verify passed:\n{text}");
        if !text.contains("not stored: still pending") || Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(text.contains("NOT VERIFIED"), "{text}");
    let refused_seq = format!("seq {} (", refused.seq);
    assert!(text.contains(&refused_seq), "{text}");
    assert!(text.contains("http_status 799"), "{text}");
    assert!(!text.contains(": 0 lost"), "{text}");
    assert!(!text.contains("not stored: still pending"), "{text}");

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(latmesh_tests::drop_db(&client, &db));
}
