//! A loopback stand-in provider that keeps every request it receives: the bytes of each body
//! with the region the agent emulated (`x-latmesh-region`), for tests that assert on what
//! agents actually send (generated prompts byte-identical across agents and runs). It answers
//! every `POST` with a short OpenAI Chat Completions stream whose `usage.prompt_tokens` is the
//! number of words of the last message plus [`TEMPLATE_TOKENS`], as a server whose tokenizer
//! counts one token per generated word would.
//!
//! Plain blocking sockets on a thread per connection: the agents under test are child
//! processes, and the server must not share a runtime with the test.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Tokens the stand-in adds to a request's word count in `usage.prompt_tokens` (its "chat
/// template").
pub const TEMPLATE_TOKENS: u32 = 7;

/// Content tokens of every answer (one per SSE chunk).
pub const ANSWER_TOKENS: u32 = 4;

/// One request the server received.
#[derive(Clone, Debug)]
pub struct Captured {
    /// The request path (`/cap/v1/chat/completions`).
    pub path: String,
    /// The `x-latmesh-region` header (agents started with `--emulate-region`).
    pub region: Option<String>,
    /// The body, as received.
    pub body: Vec<u8>,
}

impl Captured {
    /// The text of the body's last message (`messages[-1].content` as a string), if any.
    pub fn last_message(&self) -> Option<String> {
        let v: serde_json::Value = serde_json::from_slice(&self.body).ok()?;
        let last = v.get("messages")?.as_array()?.last()?;
        last.get("content")?.as_str().map(str::to_string)
    }
}

/// The running stand-in; stops accepting when dropped.
pub struct CaptureServer {
    addr: std::net::SocketAddr,
    received: Arc<Mutex<Vec<Captured>>>,
    stop: Arc<AtomicBool>,
}

impl CaptureServer {
    /// Binds `127.0.0.1:0` and serves until dropped.
    ///
    /// # Panics
    /// When no loopback port can be bound.
    pub fn start() -> CaptureServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let addr = listener.local_addr().unwrap();
        let received = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (rx, st) = (received.clone(), stop.clone());
        std::thread::Builder::new()
            .name("capture-accept".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if st.load(Ordering::Relaxed) {
                        break;
                    }
                    let Ok(conn) = conn else { continue };
                    let rx = rx.clone();
                    std::thread::spawn(move || {
                        let _ = serve(conn, &rx);
                    });
                }
            })
            .expect("a thread for the capture server");
        CaptureServer {
            addr,
            received,
            stop,
        }
    }

    /// `host:port` (campaign base URLs: `http://{addr}/NAME/v1`).
    pub fn addr(&self) -> String {
        self.addr.to_string()
    }

    /// Every request received so far, in arrival order, leaving none behind.
    pub fn take(&self) -> Vec<Captured> {
        std::mem::take(&mut *self.received.lock().unwrap())
    }
}

impl Drop for CaptureServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
    }
}

/// Serves the requests of one connection (keep-alive until the peer closes).
fn serve(conn: TcpStream, received: &Mutex<Vec<Captured>>) -> std::io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut writer = conn.try_clone()?;
    let mut reader = BufReader::new(conn);
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line)? == 0 {
            return Ok(());
        }
        let path = request_line
            .split_whitespace()
            .nth(1)
            .unwrap_or("")
            .to_string();
        let (mut length, mut region) = (0usize, None);
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line)? == 0 {
                return Ok(());
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
                match name.as_str() {
                    "content-length" => length = value.parse().unwrap_or(0),
                    "x-latmesh-region" => region = Some(value.to_string()),
                    _ => {}
                }
            }
        }
        let mut body = vec![0u8; length];
        reader.read_exact(&mut body)?;
        let captured = Captured { path, region, body };
        let words = captured
            .last_message()
            .map_or(0, |m| m.split_whitespace().count() as u32);
        received.lock().unwrap().push(captured);
        writer.write_all(&answer(words + TEMPLATE_TOKENS))?;
        writer.flush()?;
    }
}

/// The HTTP response: a Chat Completions stream of [`ANSWER_TOKENS`] one-word chunks, then
/// usage and `[DONE]`.
fn answer(prompt_tokens: u32) -> Vec<u8> {
    let mut body = String::new();
    for i in 0..ANSWER_TOKENS {
        body.push_str(&format!(
            "data: {{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"w{i} \"}},\"finish_reason\":null}}]}}\n\n"
        ));
    }
    body.push_str(&format!(
        "data: {{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"length\"}}]}}\n\n\
         data: {{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[],\"usage\":{{\"prompt_tokens\":{prompt_tokens},\"completion_tokens\":{ANSWER_TOKENS},\"total_tokens\":{}}}}}\n\n\
         data: [DONE]\n\n",
        prompt_tokens + ANSWER_TOKENS
    ));
    let mut out = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}
