//! The floor of the accuracy bench: a minimal HTTP/1.1 streaming client that does as little
//! as a client can and still measure TTFT, so the bench can show what the machine itself
//! costs (loopback, wake-ups of halted vCPUs, the simulator's timer ticks) next to what
//! latmesh's probe engine measures. The peers bench's floor (`benches/peers_floor.rs`) drives
//! the same client.
//!
//! What it does, and nothing more:
//! * the same request bytes as the prober: the JSON body of `latmesh_agent::probe::request::
//!   body` and the same headers (`host`, `user-agent`, `content-type`, `accept`,
//!   `x-latmesh-probe-id`, `content-length`), written by hand in one `write`;
//! * the same connection reuse: idle keep-alive connections kept per client, the most
//!   recently returned one reused first, at most [`MAX_IDLE`] kept (latmesh's
//!   `MAX_IDLE_PER_ORIGIN`), `TCP_NODELAY` set on new ones; a pooled connection that fails
//!   before any response byte is replaced by a new one, as latmesh does;
//! * `t_send` right before a connection is taken from the pool or opened (as latmesh);
//! * reads with `tokio::net::TcpStream::read` into a reused 8 KiB buffer (hyper's initial
//!   read buffer size); every read is stamped with `Instant::now()` before anything else;
//! * the response head is only checked for status 200 and chunked transfer encoding; the
//!   body's chunk framing is followed (hex sizes only) so the connection can be reused;
//! * a token frame is found by its API's marker bytes followed by anything but `"` (see
//!   [`mark`]); no SSE or JSON parsing. A read that contains the first marker gives TTFT;
//!   every marker is a token payload stamped with its read (several in one read are 0 µs
//!   apart, as in latmesh's ITL).
//!
//! No timers, no deadlines, no per-frame allocation.

use std::sync::{LazyLock, Mutex};
use std::time::Instant;

use latmesh_agent::probe::{PROBE_ID_HEADER, ProbeRequest, request};
use latmesh_core::api::{Api, RequestShape};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

/// Idle connections kept (latmesh's `transport::pool::MAX_IDLE_PER_ORIGIN`).
pub const MAX_IDLE: usize = 32;

/// Read buffer per connection (hyper starts its read buffer at 8 KiB).
const READ_BUF: usize = 8 * 1024;

/// What starts a token payload of `api`'s stream, followed by any byte but `"` (the token's
/// first character), in the JSON of any key order:
/// * `chat`: `"content":"` (a role chunk carries `"content":""`);
/// * `anthropic`: `"text":"` of a `text_delta` (`content_block_start` carries `"text":""`);
/// * `responses`: `"delta":"` of a `response.output_text.delta` (the `.done` events and
///   `response.completed` carry the whole text under `"text"`).
///
/// Tokens only (no reasoning): the benches' simulator profiles stream none.
pub fn mark(api: Api) -> &'static [u8] {
    match api {
        Api::Chat => b"\"content\":\"",
        Api::Anthropic => b"\"text\":\"",
        Api::Responses => b"\"delta\":\"",
    }
}

/// The longest [`mark`].
const MAX_MARK: usize = 11;

/// The index of `api` in [`Api::ALL`].
fn api_index(api: Api) -> usize {
    Api::ALL
        .iter()
        .position(|a| *a == api)
        .expect("every API is in Api::ALL")
}

/// The markers' searchers, built once, in [`Api::ALL`]'s order.
static FINDERS: LazyLock<[memchr::memmem::Finder<'static>; 3]> =
    LazyLock::new(|| Api::ALL.map(|a| memchr::memmem::Finder::new(mark(a))));

/// The API a bench speaks: environment variable `var`, `chat` (also when unset or empty),
/// `anthropic` or `responses`.
///
/// # Panics
/// On any other value, with the variable's name and the accepted ones.
#[allow(dead_code)]
pub fn api_from_env(var: &str) -> Api {
    match std::env::var(var) {
        Ok(v) if !v.trim().is_empty() => {
            Api::parse(v.trim()).unwrap_or_else(|e| panic!("{var}: {e}"))
        }
        _ => Api::Chat,
    }
}

/// The default request shape of `api` ([`RequestShape::for_api`]), for the whole run.
#[allow(dead_code)]
pub fn shape(api: Api) -> &'static RequestShape {
    static SHAPES: LazyLock<[RequestShape; 3]> =
        LazyLock::new(|| Api::ALL.map(RequestShape::for_api));
    &SHAPES[api_index(api)]
}

struct Conn {
    stream: TcpStream,
    buf: Box<[u8]>,
}

/// What one raw request measured.
#[derive(Debug, Default)]
pub struct RawResult {
    /// Status 200, a complete chunked body, at least one token frame.
    pub ok: bool,
    /// The connection came from the idle list.
    pub reused: bool,
    /// `t_send`.
    pub t_send: Option<Instant>,
    /// First read holding a token marker − `t_send`, µs (floored).
    pub ttft_us: Option<u64>,
    /// Gaps between consecutive token payloads, µs.
    pub itl_gaps_us: Vec<u64>,
    /// Token payloads seen.
    pub frames: u32,
    /// Why it is not ok.
    pub error: Option<String>,
}

/// The client: where to connect, the API whose token frames it counts, and the idle
/// connections.
pub struct RawClient {
    addr: String,
    api: Api,
    idle: Mutex<Vec<Conn>>,
}

fn us(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Follows chunked transfer encoding until its last chunk and the empty line after it.
#[derive(Clone, Copy, Debug)]
enum Chunked {
    Size { v: u64, ext: bool },
    Data(u64),
    DataEnd,
    Trailer { line: u32 },
    Done,
}

impl Chunked {
    /// Consumes `b`; whether the body is complete.
    fn feed(&mut self, b: &[u8]) -> bool {
        let mut i = 0;
        while i < b.len() {
            match self {
                Chunked::Size { v, ext } => {
                    let c = b[i];
                    i += 1;
                    match c {
                        b'\n' => {
                            *self = if *v == 0 {
                                Chunked::Trailer { line: 0 }
                            } else {
                                Chunked::Data(*v)
                            }
                        }
                        b'\r' => {}
                        b';' => *ext = true,
                        _ if *ext => {}
                        _ => {
                            let d = (c as char).to_digit(16).unwrap_or(0);
                            *v = *v * 16 + u64::from(d);
                        }
                    }
                }
                Chunked::Data(n) => {
                    let take = (*n).min((b.len() - i) as u64);
                    i += take as usize;
                    *n -= take;
                    if *n == 0 {
                        *self = Chunked::DataEnd;
                    }
                }
                Chunked::DataEnd => {
                    let c = b[i];
                    i += 1;
                    if c == b'\n' {
                        *self = Chunked::Size { v: 0, ext: false };
                    }
                }
                Chunked::Trailer { line } => {
                    let c = b[i];
                    i += 1;
                    if c == b'\n' {
                        if *line == 0 {
                            *self = Chunked::Done;
                            return true;
                        }
                        *line = 0;
                    } else if c != b'\r' {
                        *line += 1;
                    }
                }
                Chunked::Done => return true,
            }
        }
        matches!(self, Chunked::Done)
    }
}

/// Counts token markers in a read, including one cut across the previous read (`carry`
/// holds that read's last `mark.len()` bytes).
struct Markers {
    mark: &'static [u8],
    finder: &'static memchr::memmem::Finder<'static>,
    carry: [u8; MAX_MARK],
    carry_len: usize,
}

impl Markers {
    fn new(api: Api) -> Self {
        assert!(
            mark(api).len() <= MAX_MARK,
            "MAX_MARK is the longest marker"
        );
        Markers {
            mark: mark(api),
            finder: &FINDERS[api_index(api)],
            carry: [0; MAX_MARK],
            carry_len: 0,
        }
    }

    fn count(&mut self, b: &[u8]) -> u32 {
        let mark_len = self.mark.len();
        let need = mark_len + 1;
        let mut n = 0;
        if self.carry_len > 0 {
            // Markers that start in the carry and end in this read.
            let mut j = [0u8; 2 * MAX_MARK + 1];
            let head = b.len().min(need);
            j[..self.carry_len].copy_from_slice(&self.carry[..self.carry_len]);
            j[self.carry_len..self.carry_len + head].copy_from_slice(&b[..head]);
            let j = &j[..self.carry_len + head];
            for m in self.finder.find_iter(j) {
                if m < self.carry_len && m + need <= j.len() && j[m + mark_len] != b'"' {
                    n += 1;
                }
            }
        }
        for m in self.finder.find_iter(b) {
            if m + need <= b.len() && b[m + mark_len] != b'"' {
                n += 1;
            }
        }
        // Keep the last mark_len bytes (of the carry and this read).
        let keep = mark_len;
        if b.len() >= keep {
            self.carry[..keep].copy_from_slice(&b[b.len() - keep..]);
            self.carry_len = keep;
        } else {
            let mut all = [0u8; 2 * MAX_MARK];
            all[..self.carry_len].copy_from_slice(&self.carry[..self.carry_len]);
            all[self.carry_len..self.carry_len + b.len()].copy_from_slice(b);
            let total = self.carry_len + b.len();
            let from = total.saturating_sub(keep);
            self.carry_len = total - from;
            self.carry[..self.carry_len].copy_from_slice(&all[from..total]);
        }
        n
    }
}

impl RawClient {
    /// A client of the server at `addr` (`host:port`) that counts `api`'s token frames.
    pub fn new(addr: &str, api: Api) -> Self {
        RawClient {
            addr: addr.to_string(),
            api,
            idle: Mutex::new(Vec::new()),
        }
    }

    fn take(&self) -> Option<Conn> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop()
    }

    fn put(&self, c: Conn) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() >= MAX_IDLE {
            idle.remove(0);
        }
        idle.push(c);
    }

    async fn connect(&self) -> std::io::Result<Conn> {
        let stream = TcpStream::connect(&self.addr).await?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream,
            buf: vec![0; READ_BUF].into_boxed_slice(),
        })
    }

    /// Sends `request` (head and body, built beforehand) and reads the streamed answer.
    pub async fn probe(&self, request: &[u8]) -> RawResult {
        // t_send: right before a connection is taken from the pool or opened.
        let t_send = Instant::now();
        let mut pooled = self.take();
        loop {
            let reused = pooled.is_some();
            let mut conn = match pooled.take() {
                Some(c) => c,
                None => match self.connect().await {
                    Ok(c) => c,
                    Err(e) => return RawResult::failed(false, format!("connect: {e}")),
                },
            };
            match self.exchange(&mut conn, request, t_send).await {
                Ok(mut r) => {
                    r.reused = reused;
                    r.t_send = Some(t_send);
                    if r.ok {
                        self.put(conn);
                    }
                    return r;
                }
                // A pooled connection closed by the server before it answered: another one.
                Err(e) if reused => {
                    let _ = e;
                    continue;
                }
                Err(e) => return RawResult::failed(reused, e),
            }
        }
    }

    /// One request on `conn`. `Err` only when the connection failed before any response
    /// byte (the request may go on another connection).
    async fn exchange(
        &self,
        conn: &mut Conn,
        request: &[u8],
        t_send: Instant,
    ) -> Result<RawResult, String> {
        if let Err(e) = conn.stream.write_all(request).await {
            return Err(format!("write: {e}"));
        }
        let mut r = RawResult::default();
        let mut head: Vec<u8> = Vec::new();
        let mut in_body = false;
        let mut chunked = Chunked::Size { v: 0, ext: false };
        let mut markers = Markers::new(self.api);
        let mut last: Option<Instant> = None;
        let mut any = false;
        loop {
            let n = match conn.stream.read(&mut conn.buf).await {
                Ok(n) => n,
                Err(e) if !any => return Err(format!("read: {e}")),
                Err(e) => {
                    r.error = Some(format!("read: {e}"));
                    return Ok(r);
                }
            };
            // Stamped before anything else.
            let at = Instant::now();
            if n == 0 {
                if !any {
                    return Err("closed before the response".to_string());
                }
                r.error = Some("closed before the end of the body".to_string());
                return Ok(r);
            }
            any = true;
            let mut bytes = &conn.buf[..n];
            if !in_body {
                let from = head.len().saturating_sub(3);
                head.extend_from_slice(bytes);
                let Some(p) = memchr::memmem::find(&head[from..], b"\r\n\r\n") else {
                    continue;
                };
                let end = from + p + 4;
                if !head.starts_with(b"HTTP/1.1 200") {
                    r.error = Some("status is not 200".to_string());
                    return Ok(r);
                }
                let lower = head[..end].to_ascii_lowercase();
                if memchr::memmem::find(&lower, b"transfer-encoding: chunked").is_none() {
                    r.error = Some("body is not chunked".to_string());
                    return Ok(r);
                }
                in_body = true;
                // The body bytes of this read: after the head.
                let body_from = n - (head.len() - end);
                bytes = &conn.buf[body_from..n];
            }
            let k = markers.count(bytes);
            for _ in 0..k {
                if let Some(l) = last {
                    r.itl_gaps_us.push(us(at.saturating_duration_since(l)));
                } else {
                    r.ttft_us = Some(us(at.saturating_duration_since(t_send)));
                }
                last = Some(at);
            }
            r.frames += k;
            if chunked.feed(bytes) {
                r.ok = r.frames > 0;
                if !r.ok {
                    r.error = Some("no token frame".to_string());
                }
                return Ok(r);
            }
        }
    }
}

/// `req` as the prober sends it to a loopback peer, written out by hand: `POST {path}`, the
/// prober's body and headers, `host: {addr}` and `user-agent` as the prober sets them, the
/// probe id in `x-latmesh-probe-id` (the prober's emulation header on loopback: the
/// simulator's ground truth is keyed on it), `content-length` as hyper adds it.
pub fn request_bytes(addr: &str, path: &str, req: &ProbeRequest<'_>) -> Vec<u8> {
    let body = request::body(req);
    let user_agent = req.user_agent.unwrap_or(request::DEFAULT_USER_AGENT);
    let mut head = format!("POST {path} HTTP/1.1\r\nhost: {addr}\r\nuser-agent: {user_agent}\r\n");
    for (name, value) in &request::headers(req) {
        head.push_str(name.as_str());
        head.push_str(": ");
        head.push_str(value.to_str().unwrap_or_default());
        head.push_str("\r\n");
    }
    if let Some(id) = req.probe_id {
        head.push_str(&format!("{PROBE_ID_HEADER}: {id}\r\n"));
    }
    head.push_str(&format!("content-length: {}\r\n\r\n", body.len()));
    let mut out = head.into_bytes();
    out.extend_from_slice(&body);
    out
}

/// [`request_bytes`] for `{base_url}{API path}` of an `http://host:port[/path]` base URL:
/// the `host:port` to connect to and the request's bytes. (The peers bench's.)
#[allow(dead_code)]
pub fn http_request(req: &ProbeRequest<'_>) -> Result<(String, Vec<u8>), String> {
    let url = request::target_url(req);
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("{url}: only http:// URLs"))?;
    let (addr, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    Ok((addr.to_string(), request_bytes(addr, path, req)))
}

impl RawResult {
    fn failed(reused: bool, e: String) -> RawResult {
        RawResult {
            reused,
            error: Some(e),
            ..RawResult::default()
        }
    }
}
