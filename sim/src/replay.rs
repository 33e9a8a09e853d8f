//! Replay of one recorded response (see `tests/fixtures/sse-cases/README.md`): the raw body of a
//! `NN-name.sse` file, served byte for byte with the status and headers of its sibling
//! `NN-name.expect.json`, cut into separate writes where `delivery.split_after_bytes` says.
//!
//! `delivery.compress` (`gzip` or `deflate`, latmesh's addition) serves the body compressed,
//! as one stream flushed at each cut (each piece decodable when it arrives, as a provider
//! that flushes its compressor per event sends it); the sidecar's `http.headers` says what
//! `content-encoding` is claimed, so a case can also claim one the body is not in.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde::Deserialize;

use crate::provider::openai_error;

/// Pause between two cut pieces of a split body.
pub const SPLIT_PAUSE: Duration = Duration::from_millis(30);

/// One recorded response, ready to serve.
#[derive(Debug, Clone)]
pub struct ReplayCase {
    /// The body, exactly as in the `.sse` file.
    pub body: Bytes,
    /// Status code to answer with.
    pub status: StatusCode,
    /// Headers to answer with (hop-by-hop framing headers are left to the server).
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// Byte offsets at which the body is cut into separate writes (sorted, inside the body).
    pub split_after_bytes: Vec<usize>,
    /// Compression applied to the body on the wire (`delivery.compress`).
    pub compress: Option<Compression>,
}

/// A compression the replay server applies to a body (`delivery.compress`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    /// gzip (RFC 1952).
    Gzip,
    /// zlib-wrapped deflate (RFC 1950), what HTTP's `deflate` names.
    Deflate,
}

#[derive(Deserialize, Default)]
struct Sidecar {
    #[serde(default)]
    http: Option<SidecarHttp>,
    #[serde(default)]
    delivery: Option<SidecarDelivery>,
}

#[derive(Deserialize, Default)]
struct SidecarHttp {
    #[serde(default)]
    status: Option<u16>,
    #[serde(default)]
    headers: serde_json::Map<String, serde_json::Value>,
}

#[derive(Deserialize, Default)]
struct SidecarDelivery {
    #[serde(default)]
    split_after_bytes: Vec<usize>,
    #[serde(default)]
    compress: Option<Compression>,
}

/// `dir/NN-name.sse` → `dir/NN-name.expect.json`.
pub fn sidecar_path(sse_path: &Path) -> PathBuf {
    let stem = sse_path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    sse_path.with_file_name(format!("{stem}.expect.json"))
}

impl ReplayCase {
    /// Read a `.sse` body and its sidecar. Without a sidecar the body is served as
    /// `200 text/event-stream` in one write.
    ///
    /// # Errors
    /// The body cannot be read, or the sidecar is not valid JSON or names a bad status/header.
    pub fn load(sse_path: &Path) -> anyhow::Result<Self> {
        let body =
            std::fs::read(sse_path).with_context(|| format!("reading {}", sse_path.display()))?;
        let side_path = sidecar_path(sse_path);
        let sidecar: Sidecar = match std::fs::read(&side_path) {
            Ok(raw) => serde_json::from_slice(&raw)
                .with_context(|| format!("parsing {}", side_path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                tracing::warn!("no {}: serving 200 text/event-stream", side_path.display());
                Sidecar::default()
            }
            Err(e) => return Err(e).with_context(|| format!("reading {}", side_path.display())),
        };
        let http = sidecar.http.unwrap_or_default();
        let status = StatusCode::from_u16(http.status.unwrap_or(200))
            .with_context(|| format!("{}: bad http.status", side_path.display()))?;
        let mut headers = Vec::new();
        for (name, value) in &http.headers {
            let lname = name.to_ascii_lowercase();
            if matches!(
                lname.as_str(),
                "content-length" | "transfer-encoding" | "connection"
            ) {
                continue;
            }
            let text = match value {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let hn = HeaderName::from_bytes(lname.as_bytes())
                .with_context(|| format!("bad header name {name:?}"))?;
            let hv =
                HeaderValue::from_str(&text).with_context(|| format!("bad value for {name}"))?;
            headers.push((hn, hv));
        }
        if headers.is_empty() && http.status.is_none() {
            headers.push((
                HeaderName::from_static("content-type"),
                HeaderValue::from_static("text/event-stream"),
            ));
        }
        let delivery = sidecar.delivery.unwrap_or_default();
        let compress = delivery.compress;
        let mut split_after_bytes = delivery.split_after_bytes;
        split_after_bytes.sort_unstable();
        split_after_bytes.dedup();
        if let Some(bad) = split_after_bytes.iter().find(|&&o| o > body.len()) {
            bail!(
                "{}: split offset {bad} is past the end of the {}-byte body",
                side_path.display(),
                body.len()
            );
        }
        split_after_bytes.retain(|&o| o > 0 && o < body.len());
        Ok(ReplayCase {
            body: Bytes::from(body),
            status,
            headers,
            split_after_bytes,
            compress,
        })
    }

    /// The body as written: cut at `split_after_bytes` (one piece when there is no split),
    /// each piece compressed and flushed when `compress` says (the stream's end goes with
    /// the last piece).
    pub fn pieces(&self) -> Vec<Bytes> {
        let mut out = Vec::new();
        let mut start = 0;
        for &cut in &self.split_after_bytes {
            out.push(self.body.slice(start..cut));
            start = cut;
        }
        if start < self.body.len() {
            out.push(self.body.slice(start..));
        }
        match self.compress {
            None => out,
            Some(c) => compressed(c, &out),
        }
    }

    fn respond(&self) -> Response {
        let pieces = self.pieces();
        let stream =
            futures::stream::iter(pieces.into_iter().enumerate()).then(|(i, piece)| async move {
                if i > 0 {
                    tokio::time::sleep(SPLIT_PAUSE).await;
                }
                Ok::<Bytes, std::convert::Infallible>(piece)
            });
        let mut resp = Response::new(Body::from_stream(stream));
        *resp.status_mut() = self.status;
        for (n, v) in &self.headers {
            resp.headers_mut().append(n.clone(), v.clone());
        }
        resp
    }
}

/// `pieces` as one compressed stream, flushed after each piece.
fn compressed(c: Compression, pieces: &[Bytes]) -> Vec<Bytes> {
    use std::io::Write as _;
    let level = flate2::Compression::default();
    let mut enc: Box<dyn FlushTake> = match c {
        Compression::Gzip => Box::new(flate2::write::GzEncoder::new(Vec::new(), level)),
        Compression::Deflate => Box::new(flate2::write::ZlibEncoder::new(Vec::new(), level)),
    };
    let mut out = Vec::new();
    for (i, p) in pieces.iter().enumerate() {
        // Writes and flushes into a Vec cannot fail.
        let _ = enc.write_all(p).and_then(|()| enc.flush());
        if i + 1 == pieces.len() {
            enc.end();
        }
        out.push(Bytes::from(enc.take()));
    }
    if pieces.is_empty() {
        enc.end();
        out.push(Bytes::from(enc.take()));
    }
    out
}

/// A compressor writing into a buffer that can be emptied and ended.
trait FlushTake: std::io::Write {
    /// Ends the stream (its trailer goes into the buffer).
    fn end(&mut self);
    /// The compressed bytes so far, leaving the buffer empty.
    fn take(&mut self) -> Vec<u8>;
}

impl FlushTake for flate2::write::GzEncoder<Vec<u8>> {
    fn end(&mut self) {
        let _ = self.try_finish();
    }
    fn take(&mut self) -> Vec<u8> {
        std::mem::take(self.get_mut())
    }
}

impl FlushTake for flate2::write::ZlibEncoder<Vec<u8>> {
    fn end(&mut self) {
        let _ = self.try_finish();
    }
    fn take(&mut self) -> Vec<u8> {
        std::mem::take(self.get_mut())
    }
}

/// A router serving `case` to every POST whose path ends in an API's path
/// (`/chat/completions`, `/messages`, `/responses`: the corpus holds bodies of every API),
/// plus `GET /healthz`.
pub fn replay_router(case: ReplayCase) -> Router {
    let case = Arc::new(case);
    Router::new().fallback(move |req: Request| {
        let case = Arc::clone(&case);
        async move {
            let path = req.uri().path();
            let api_path = ["/chat/completions", "/messages", "/responses"]
                .iter()
                .any(|p| path.ends_with(p));
            if req.method() == Method::POST && api_path {
                case.respond()
            } else if req.method() == Method::GET && path == "/healthz" {
                "ok\n".into_response()
            } else {
                openai_error(
                    StatusCode::NOT_FOUND,
                    "no such route",
                    "invalid_request_error",
                    "not_found",
                )
            }
        }
    })
}
