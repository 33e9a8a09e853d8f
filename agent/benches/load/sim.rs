//! The simulator side: `latmesh_sim::providers_router` served in a child process of its own
//! (this executable re-run with `LATMESH_LOAD_ROLE=sim`, pinned to core 1 with `taskset`
//! when it can be), on a single-threaded runtime, with two additions for the bench:
//!
//! * a middleware that notes every chat request's arrival (wall clock, UTC µs, taken before
//!   the handler's `received` stamp) and gives a request without an `x-latmesh-probe-id`
//!   one of its own, `{provider}.{k}` (the k-th request of that provider), so the ground
//!   truth records every request, including the agent's scheduler's, which sends no id;
//! * `GET /_bench/dump`: one line per noted request, `id provider arrival_unix_us
//!   first_token_handed_us status` (`-` when unknown), the handed stamp read from the
//!   simulator's truth log in-process (µs after the handler's `received`).
//!
//! The listener's backlog is 4,096 (tokio's default is 1,024: 10,000 connections opened
//! within two seconds overflow it and the kernel drops SYNs, which costs a second each).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write as _};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::routing::get;
use axum::serve::ListenerExt as _;
use http::HeaderValue;
use latmesh_sim::{PROBE_ID_HEADER, ProviderProfile, SimConfig, TruthLog};

use crate::sys;

/// Names the role of a child process.
pub const ROLE_ENV: &str = "LATMESH_LOAD_ROLE";

/// What the simulator serves.
#[derive(Clone, Debug)]
pub struct SimSpec {
    /// Provider names (each a copy of the same profile).
    pub providers: Vec<String>,
    /// Median TTFT, µs.
    pub ttft_us: u64,
    /// Median ITL, µs.
    pub itl_us: u64,
    /// Tokens per answer (one per SSE frame).
    pub tokens: u32,
}

impl SimSpec {
    fn to_env(&self, cmd: &mut Command) {
        cmd.env("LATMESH_LOAD_SIM_PROVIDERS", self.providers.join(","))
            .env("LATMESH_LOAD_SIM_TTFT_US", self.ttft_us.to_string())
            .env("LATMESH_LOAD_SIM_ITL_US", self.itl_us.to_string())
            .env("LATMESH_LOAD_SIM_TOKENS", self.tokens.to_string());
    }

    fn from_env() -> SimSpec {
        let v = |k: &str| std::env::var(k).unwrap_or_default();
        SimSpec {
            providers: v("LATMESH_LOAD_SIM_PROVIDERS")
                .split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect(),
            ttft_us: v("LATMESH_LOAD_SIM_TTFT_US").parse().expect("ttft"),
            itl_us: v("LATMESH_LOAD_SIM_ITL_US").parse().expect("itl"),
            tokens: v("LATMESH_LOAD_SIM_TOKENS").parse().expect("tokens"),
        }
    }

    /// Fixed medians with some jitter (streams do not tick in lockstep), exactly `tokens`
    /// tokens, one per frame, no faults, unlimited serving capacity.
    fn profiles(&self) -> Vec<ProviderProfile> {
        self.providers
            .iter()
            .map(|name| ProviderProfile {
                ttft_jitter_sigma: 0.1,
                itl_sigma: 0.15,
                output_tokens_min: self.tokens,
                output_tokens_max: self.tokens,
                ..ProviderProfile::fixed(name, self.ttft_us, self.itl_us)
            })
            .collect()
    }
}

/// Requests noted by the middleware.
#[derive(Default)]
struct Arrivals {
    per_provider: HashMap<String, u64>,
    /// (probe id, provider, arrival UTC µs).
    list: Vec<(String, String, i64)>,
}

type Shared = Arc<Mutex<Arrivals>>;

async fn note(State(log): State<Shared>, mut req: Request) -> Request {
    let path = req.uri().path();
    let Some(provider) = latmesh_core::api::Api::ALL
        .iter()
        .find_map(|api| path.strip_suffix(api.path())?.strip_suffix("/v1"))
        .map(|p| p.trim_start_matches('/').to_string())
    else {
        return req;
    };
    let at = sys::unix_us();
    let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
    let id = match req
        .headers()
        .get(PROBE_ID_HEADER)
        .and_then(|v| v.to_str().ok())
    {
        Some(id) => id.to_string(),
        None => {
            let k = log.per_provider.entry(provider.clone()).or_insert(0);
            let id = format!("{provider}.{k}");
            *k += 1;
            if let Ok(v) = HeaderValue::from_str(&id) {
                req.headers_mut().insert(PROBE_ID_HEADER, v);
            }
            id
        }
    };
    log.list.push((id, provider, at));
    req
}

fn dump(log: &Shared, truth: &TruthLog) -> String {
    let list = std::mem::take(&mut log.lock().unwrap_or_else(|e| e.into_inner()).list);
    let mut out = String::with_capacity(list.len() * 48);
    for (id, provider, at) in list {
        let t = truth.get(&id);
        let handed = t
            .as_ref()
            .and_then(|t| t.frames.first().map(|f| t.since_received(f.stamp.handed)))
            .map_or("-".to_string(), |d| d.as_micros().to_string());
        let status = t
            .and_then(|t| t.status)
            .map_or("-".to_string(), |s| s.to_string());
        out.push_str(&format!("{id} {provider} {at} {handed} {status}\n"));
    }
    out
}

/// The child: serve, print the address, exit when stdin closes (the parent is done or gone).
pub fn child_main() {
    let spec = SimSpec::from_env();
    sys::raise_nofile();
    let truth = TruthLog::new(200_000);
    let cfg = SimConfig {
        profiles: spec.profiles(),
        truth: truth.clone(),
        ..SimConfig::default()
    };
    std::thread::spawn(|| {
        let mut sink = Vec::new();
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
        std::process::exit(0);
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket.set_reuseaddr(true).expect("reuseaddr");
        socket
            .bind("127.0.0.1:0".parse().expect("addr"))
            .expect("bind");
        let listener = socket.listen(4096).expect("listen");
        println!("{}", listener.local_addr().expect("addr"));
        let _ = std::io::stdout().flush();
        let log: Shared = Arc::default();
        let router = latmesh_sim::providers_router(cfg)
            .expect("simulator config")
            .route(
                "/_bench/dump",
                get({
                    let log = log.clone();
                    move || {
                        let (log, truth) = (log.clone(), truth.clone());
                        async move { dump(&log, &truth) }
                    }
                }),
            )
            .layer(axum::middleware::map_request_with_state(log, note));
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        if let Err(e) = axum::serve(listener, router).await {
            eprintln!("simulator: {e}");
        }
    });
}

/// A running simulator child; killed on drop.
pub struct Sim {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
}

impl Sim {
    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts a simulator child serving `spec`, pinned to `core` when given.
pub fn start(spec: &SimSpec, core: Option<usize>) -> std::io::Result<Sim> {
    let mut cmd = sys::child_command(core)?;
    cmd.env(ROLE_ENV, "sim");
    spec.to_env(&mut cmd);
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line)?;
    let addr = line.trim().to_string();
    if addr.is_empty() {
        let _ = child.kill();
        let _ = child.wait();
        return Err(std::io::Error::other(
            "the simulator child printed no address",
        ));
    }
    Ok(Sim { child, addr })
}

/// One noted request, from `GET /_bench/dump`.
#[derive(Clone, Debug)]
pub struct Arrival {
    pub id: String,
    pub provider: String,
    pub at_unix_us: i64,
    /// First token frame handed to hyper, µs after the handler's `received`.
    pub first_handed_us: Option<u64>,
}

/// Reads (and empties) the simulator's list of requests.
pub async fn fetch_dump(addr: &str) -> std::io::Result<Vec<Arrival>> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(
        format!("GET /_bench/dump HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n")
            .as_bytes(),
    )
    .await?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("no HTTP head in the dump"))?;
    if !head.starts_with("HTTP/1.1 200") {
        return Err(std::io::Error::other(format!(
            "dump: {}",
            head.lines().next().unwrap_or("")
        )));
    }
    Ok(body
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some(Arrival {
                id: f.first()?.to_string(),
                provider: f.get(1)?.to_string(),
                at_unix_us: f.get(2)?.parse().ok()?,
                first_handed_us: f.get(3).and_then(|v| v.parse().ok()),
            })
        })
        .collect())
}
