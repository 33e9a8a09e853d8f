//! The floor of the peers bench (`scripts/bench-peers.sh`, tool `floor`): a minimal raw
//! client that does as little as any client can and still stream every request and stamp
//! every token frame as it arrives, so the peers table can show what reading frame by frame
//! costs on the machine itself (the kernel's `recv` of each frame, the ACK it sends back,
//! `epoll`), next to latmesh's, GuideLLM's and AIPerf's client CPU per token.
//!
//! ```sh
//! cargo bench -p latmesh-agent --bench peers_floor --no-run   # bench-peers.sh runs it
//! peers_floor --url http://127.0.0.1:PORT/peer/v1 --model peer-model \
//!     --prompt-file prompts.jsonl --max-tokens 256 --requests 2000 \
//!     (--concurrency C | --rate R) [--json OUT]
//! ```
//!
//! What it does:
//! * the client is the accuracy bench's floor, `raw::RawClient` (`benches/accuracy/raw.rs`):
//!   tokio `TcpStream`, the prober's request bytes written by hand in one `write` (here with
//!   `stream: true`, `stream_options.include_usage`, no probe id, as latmesh's campaigns
//!   send it), keep-alive connections reused as latmesh reuses them, one `read` per wake-up
//!   into an 8 KiB buffer stamped with `Instant::now()`, token frames found by their marker
//!   bytes, the chunked framing followed so the connection can be reused;
//! * a current-thread tokio runtime (the agent's default: one thread);
//! * `--concurrency C`: a closed loop, C workers each sending the next request when its
//!   previous one ended, until `--requests` were sent; `--rate R`: an open loop, one arrival
//!   every 1/R s from a start instant, each its own task spawned at its instant (a late
//!   arrival is sent at once, its instant is not moved: no coordinated omission);
//! * `--json OUT`: `{"ok", "failed", "ttft_us": {"p50", "p90", "p99"}, "token_frames", …}`
//!   (TTFT = `t_send` → the first read holding a token frame, nearest-rank percentiles).
//!
//! What it deliberately does not do: parse SSE or JSON (no content, no usage, no finish
//! reason), decode or count tokens beyond the frame markers, keep per-frame timestamps or
//! histograms, time out, retry, apply a queue limit, talk to a coordinator or write
//! results anywhere but the one summary. No TLS, HTTP/1.1 only. It is not a tool: it is the
//! lower bound of what a frame-by-frame client costs.
//!
//! Run by `cargo bench` with no arguments (`--bench`), it does nothing and exits 0.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use latmesh_agent::probe::ProbeRequest;
use latmesh_core::plan::Timeouts;
use latmesh_core::prompts::Message;

#[path = "accuracy/raw.rs"]
#[allow(dead_code)] // the accuracy bench's ITL gaps and reuse flags go unread here
mod raw;
use raw::{RawClient, RawResult};

// Nearest-rank percentiles: the load bench's.
#[path = "load/stats.rs"]
#[allow(dead_code)]
mod stats;

const USAGE: &str = "peers_floor --url http://HOST:PORT/BASE --model M --prompt-file FILE.jsonl \
--max-tokens N --requests N (--concurrency C | --rate R) [--json OUT]";

/// Closed or open loop.
#[derive(Clone, Copy, Debug)]
enum Load {
    Concurrency(usize),
    Rate(f64),
}

#[derive(Debug)]
struct Args {
    url: String,
    model: String,
    prompt_file: String,
    max_tokens: u32,
    requests: usize,
    load: Load,
    json: Option<String>,
}

/// `None`: nothing asked (run by `cargo bench`).
fn args() -> Result<Option<Args>, String> {
    let mut url = None;
    let mut model = None;
    let mut prompt_file = None;
    let mut max_tokens = None;
    let mut requests = None;
    let mut concurrency = None;
    let mut rate = None;
    let mut json = None;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let (name, inline) = match a.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n.to_string(), Some(v.to_string())),
            _ => (a.clone(), None),
        };
        if name == "--bench" {
            continue;
        }
        let mut value = || {
            inline
                .clone()
                .or_else(|| it.next())
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match name.as_str() {
            "--url" => url = Some(value()?),
            "--model" => model = Some(value()?),
            "--prompt-file" => prompt_file = Some(value()?),
            "--max-tokens" => max_tokens = Some(num::<u32>(&name, &value()?)?),
            "--requests" => requests = Some(num::<usize>(&name, &value()?)?),
            "--concurrency" => concurrency = Some(num::<usize>(&name, &value()?)?),
            "--rate" => rate = Some(num::<f64>(&name, &value()?)?),
            "--json" => json = Some(value()?),
            "-h" | "--help" => {
                println!(
                    "{USAGE}\n\n--max-tokens defaults to 256; see the doc comment of agent/benches/peers_floor.rs"
                );
                std::process::exit(0);
            }
            _ => return Err(format!("unknown argument {a:?}\n{USAGE}")),
        }
    }
    let given = [&model, &prompt_file, &json].iter().any(|o| o.is_some())
        || [
            max_tokens.is_some(),
            requests.is_some(),
            concurrency.is_some(),
            rate.is_some(),
        ]
        .contains(&true);
    let url = match url {
        Some(u) => u,
        // `cargo bench` runs every bench binary with only `--bench`: nothing to do then.
        None if !given => return Ok(None),
        None => return Err(format!("--url is required\n{USAGE}")),
    };
    let load = match (concurrency, rate) {
        (Some(c), None) if c > 0 => Load::Concurrency(c),
        // At most one arrival per second every ~68 years: the schedule's instants fit.
        (None, Some(r)) if r >= 1e-9 && r.is_finite() => Load::Rate(r),
        _ => return Err(format!("one of --concurrency C > 0, --rate R > 0\n{USAGE}")),
    };
    Ok(Some(Args {
        url,
        model: model.ok_or("--model is required")?,
        prompt_file: prompt_file.ok_or("--prompt-file is required")?,
        max_tokens: max_tokens.unwrap_or(256),
        requests: requests
            .filter(|&n| n > 0)
            .ok_or("--requests N > 0 is required")?,
        load,
        json,
    }))
}

fn num<T: std::str::FromStr>(name: &str, v: &str) -> Result<T, String> {
    v.trim()
        .parse()
        .map_err(|_| format!("{name}: not a number: {v:?}"))
}

/// The first prompt's `messages` of a prompt set (JSON lines).
fn messages(path: &str) -> Result<Vec<Message>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    let line = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .ok_or_else(|| format!("{path}: empty"))?;
    #[derive(serde::Deserialize)]
    struct Prompt {
        messages: Vec<Message>,
    }
    let p: Prompt = serde_json::from_str(line).map_err(|e| format!("{path}: {e}"))?;
    Ok(p.messages)
}

async fn run(args: &Args, addr: String, request: Vec<u8>) -> Vec<RawResult> {
    // The peers speak Chat Completions only.
    let client = Arc::new(RawClient::new(&addr, latmesh_core::api::Api::Chat));
    let request: Arc<[u8]> = request.into();
    let n = args.requests;
    let mut tasks = Vec::new();
    match args.load {
        Load::Concurrency(c) => {
            let next = Arc::new(AtomicUsize::new(0));
            for _ in 0..c.min(n) {
                let (client, request, next) = (client.clone(), request.clone(), next.clone());
                tasks.push(tokio::spawn(async move {
                    let mut out = Vec::new();
                    while next.fetch_add(1, Ordering::Relaxed) < n {
                        out.push(client.probe(&request).await);
                    }
                    out
                }));
            }
        }
        Load::Rate(rate) => {
            let start = tokio::time::Instant::now();
            for i in 0..n {
                // The i-th instant from the start, whatever the previous ones cost.
                let at = start + Duration::from_secs_f64(i as f64 / rate);
                if at > tokio::time::Instant::now() {
                    tokio::time::sleep_until(at).await;
                }
                let (client, request) = (client.clone(), request.clone());
                tasks.push(tokio::spawn(
                    async move { vec![client.probe(&request).await] },
                ));
            }
        }
    }
    let mut out = Vec::with_capacity(n);
    for t in tasks {
        out.extend(t.await.expect("request task"));
    }
    out
}

fn main() {
    let args = match args() {
        Ok(Some(a)) => a,
        Ok(None) => {
            eprintln!("peers_floor: nothing to do without --url (run by scripts/bench-peers.sh)");
            return;
        }
        Err(e) => {
            eprintln!("peers_floor: {e}");
            std::process::exit(2);
        }
    };
    let msgs = messages(&args.prompt_file).unwrap_or_else(|e| {
        eprintln!("peers_floor: {e}");
        std::process::exit(2)
    });
    let timeouts = Timeouts::default();
    let req = ProbeRequest {
        base_url: &args.url,
        model_id: &args.model,
        api_key: None,
        messages: &msgs,
        stream: true,
        max_tokens: args.max_tokens,
        temperature: None,
        top_p: None,
        timeouts: &timeouts,
        probe_id: None,
        user_agent: None,
        shape: latmesh_core::api::RequestShape::chat_default(),
        secret_headers: &[],
    };
    let (addr, request) = raw::http_request(&req).unwrap_or_else(|e| {
        eprintln!("peers_floor: --url {e}");
        std::process::exit(2)
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let t0 = std::time::Instant::now();
    let outcomes = rt.block_on(run(&args, addr, request));
    let wall_s = t0.elapsed().as_secs_f64();

    let mut ttft: Vec<i64> = outcomes
        .iter()
        .filter(|o| o.ok)
        .filter_map(|o| o.ttft_us.and_then(|t| i64::try_from(t).ok()))
        .collect();
    ttft.sort_unstable();
    let pct = |p| (!ttft.is_empty()).then(|| stats::pct(&ttft, p));
    let ok = outcomes.iter().filter(|o| o.ok).count();
    let frames: u64 = outcomes.iter().map(|o| u64::from(o.frames)).sum();
    let first_error = outcomes.iter().find_map(|o| o.error.clone());
    let summary = serde_json::json!({
        "ok": ok,
        "failed": outcomes.len() - ok,
        "ttft_us": {"p50": pct(50.0), "p90": pct(90.0), "p99": pct(99.0)},
        "token_frames": frames,
        "requests": args.requests,
        "load": match args.load {
            Load::Concurrency(c) => format!("concurrency {c}"),
            Load::Rate(r) => format!("rate {r}/s"),
        },
        "wall_s": wall_s,
        "first_error": first_error,
    });
    println!("{summary}");
    if let Some(path) = &args.json {
        std::fs::write(path, format!("{summary}\n")).unwrap_or_else(|e| {
            eprintln!("peers_floor: {path}: {e}");
            std::process::exit(1)
        });
    }
    if ok < outcomes.len() {
        std::process::exit(1);
    }
}
