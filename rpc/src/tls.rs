//! TLS set-up the user controls, and what to tell them when a handshake fails: CA files (the
//! coordinator's `--ca-file`, the providers' `--provider-ca-file`) and hints for the three
//! usual mistakes (`https://` to a plain-HTTP server; a certificate no trusted CA signed;
//! `http://` to a TLS coordinator, told by [`PlaintextConnector`] from the server's first
//! bytes).

use std::path::Path;

use anyhow::Context as _;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;

/// The PEM text of the CA file `path`.
///
/// # Errors
/// The file cannot be read, holds no PEM certificate, or a certificate block that does not
/// decode (the message names the file).
pub fn read_ca_file(path: &Path) -> anyhow::Result<Vec<u8>> {
    let pem = std::fs::read(path)
        .with_context(|| format!("cannot read the CA file {}", path.display()))?;
    let mut certificates = 0;
    for (i, c) in CertificateDer::pem_slice_iter(&pem).enumerate() {
        c.map_err(|e| {
            anyhow::anyhow!(
                "the CA file {}: certificate {} does not decode: {e}",
                path.display(),
                i + 1
            )
        })?;
        certificates += 1;
    }
    anyhow::ensure!(
        certificates > 0,
        "the CA file {} holds no PEM certificate",
        path.display()
    );
    Ok(pem)
}

/// What went wrong in a TLS handshake, as far as a user can act on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsProblem {
    /// The server did not answer in TLS (a plain-HTTP server behind an `https://` URL).
    NotTls,
    /// The server's certificate is not signed by a trusted CA (self-signed, a private CA).
    Untrusted,
    /// A plaintext (`http://`) client got a TLS answer ([`PlaintextConnector`]).
    SpeaksTls,
}

impl TlsProblem {
    /// The problem behind `e`, found anywhere in its chain (also inside an `io::Error`, where
    /// tokio-rustls puts rustls' error).
    pub fn of(e: &(dyn std::error::Error + 'static)) -> Option<TlsProblem> {
        let mut cur = Some(e);
        while let Some(err) = cur {
            let tls = err.downcast_ref::<rustls::Error>().or_else(|| {
                err.downcast_ref::<std::io::Error>()
                    .and_then(|io| io.get_ref())
                    .and_then(|inner| inner.downcast_ref::<rustls::Error>())
            });
            let sniffed = err
                .downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .is_some_and(|inner| inner.is::<SpeaksTls>())
                || err.is::<SpeaksTls>();
            if sniffed {
                return Some(TlsProblem::SpeaksTls);
            }
            match tls {
                Some(rustls::Error::InvalidCertificate(_)) => return Some(TlsProblem::Untrusted),
                Some(rustls::Error::InvalidMessage(_)) => return Some(TlsProblem::NotTls),
                _ => {}
            }
            cur = err.source();
        }
        None
    }

    /// The hint, as a parenthesis to append; `ca_flag` says how to trust a private CA.
    pub fn hint(self, ca_flag: &str) -> String {
        match self {
            TlsProblem::NotTls => {
                " (the server did not answer in TLS: is it plain http? then use http://)".into()
            }
            TlsProblem::Untrusted => format!(
                " (the server's certificate is not signed by a trusted CA: for a private CA, \
                 give its PEM with {ca_flag})"
            ),
            TlsProblem::SpeaksTls => format!(" ({SPEAKS_TLS}, with {ca_flag} for a private CA)"),
        }
    }
}

/// What a plaintext (`http://`) connection reports when the server answers in TLS.
pub const SPEAKS_TLS: &str = "the coordinator speaks TLS: use https://";

/// The error of a plaintext connection whose server answered in TLS ([`SPEAKS_TLS`]), inside
/// an `io::Error` of kind `InvalidData`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpeaksTls;

impl std::fmt::Display for SpeaksTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(SPEAKS_TLS)
    }
}

impl std::error::Error for SpeaksTls {}

/// Whether `first` (the first bytes a server sent) begins a TLS record: an alert or a
/// handshake (content type 21 or 22) of protocol version 3.x. An HTTP/2 server begins with a
/// SETTINGS frame, whose 24-bit length starts with a zero byte.
pub fn looks_like_tls(first: &[u8]) -> bool {
    matches!(first, [0x15 | 0x16, 0x03, ..] | [0x15 | 0x16])
}

/// Longest wait for a plaintext server's first bytes before the connection is handed over
/// unchecked.
const PREFLIGHT_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// The HTTP/2 client connection preface (RFC 9113 §3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// A plaintext connection whose HTTP/2 preface was already sent and whose server's first
/// bytes were already read ([`PlaintextConnector`]): the first bytes are replayed to the
/// reader, and the preface the HTTP/2 client writes is skipped (it was sent).
#[derive(Debug)]
pub struct Preflighted<T> {
    inner: T,
    /// The server's first bytes, from `replayed` on still to be read.
    first: Vec<u8>,
    replayed: usize,
    /// Bytes of the client's own preface still to skip.
    skip: usize,
}

impl<T: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Preflighted<T> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        if self.replayed < self.first.len() {
            let n = buf.remaining().min(self.first.len() - self.replayed);
            let from = self.replayed;
            buf.put_slice(&self.first[from..from + n]);
            self.replayed += n;
            return std::task::Poll::Ready(Ok(()));
        }
        std::pin::Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Preflighted<T> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        if self.skip > 0 && !buf.is_empty() {
            let n = self.skip.min(buf.len());
            self.skip -= n;
            return std::task::Poll::Ready(Ok(n));
        }
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The connector of plaintext (`http://`) coordinator channels: TCP (no delay) to the URI's
/// host and port (80 when absent), then the HTTP/2 preface, and the server's first bytes
/// read before the connection is handed over: a TLS record there (a TLS coordinator's alert)
/// fails the connection with [`SpeaksTls`], which HTTP/2 would only report as a broken frame
/// or a cancelled call. One round trip per connection (a server silent for 2 s is handed
/// over unchecked).
#[derive(Clone, Copy, Debug, Default)]
pub struct PlaintextConnector;

impl tonic::codegen::Service<http::Uri> for PlaintextConnector {
    type Response = hyper_util::rt::TokioIo<Preflighted<tokio::net::TcpStream>>;
    type Error = std::io::Error;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        Box::pin(async move {
            let host = uri
                .host()
                .ok_or_else(|| std::io::Error::other(format!("{uri}: no host")))?;
            // `[::1]` in a URI, `::1` for a socket address.
            let host = host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string();
            let mut tcp =
                tokio::net::TcpStream::connect((host, uri.port_u16().unwrap_or(80))).await?;
            tcp.set_nodelay(true)?;
            tcp.write_all(H2_PREFACE).await?;
            let mut first = vec![0u8; 256];
            // A server that says nothing until it has the client's SETTINGS is not waited for
            // (the read is cancel-safe: nothing is lost).
            let n = tokio::time::timeout(PREFLIGHT_WAIT, tcp.read(&mut first))
                .await
                .unwrap_or(Ok(0))?;
            first.truncate(n);
            if looks_like_tls(&first) {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    SpeaksTls,
                ));
            }
            Ok(hyper_util::rt::TokioIo::new(Preflighted {
                inner: tcp,
                first,
                replayed: 0,
                skip: H2_PREFACE.len(),
            }))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-connection server on loopback: reads the 24-byte preface, answers `answer`,
    /// then returns everything else the client wrote until it closed.
    async fn server(answer: &'static [u8]) -> (http::Uri, tokio::task::JoinHandle<Vec<u8>>) {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let uri = format!("http://{}", listener.local_addr().unwrap())
            .parse()
            .unwrap();
        let task = tokio::spawn(async move {
            let (mut tcp, _) = listener.accept().await.unwrap();
            let mut preface = [0u8; 24];
            tcp.read_exact(&mut preface).await.unwrap();
            assert_eq!(&preface, H2_PREFACE);
            tcp.write_all(answer).await.unwrap();
            let mut rest = Vec::new();
            let _ = tcp.read_to_end(&mut rest).await;
            rest
        });
        (uri, task)
    }

    #[tokio::test]
    async fn a_tls_answer_to_the_preface_fails_the_connection_and_http2_passes_through() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        use tonic::codegen::Service as _;
        // A TLS server's alert (what rustls answers to "PRI * HTTP/2.0").
        let (uri, _) = server(&[0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x32]).await;
        let e = PlaintextConnector.call(uri).await.err().unwrap();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        assert_eq!(TlsProblem::of(&e), Some(TlsProblem::SpeaksTls));
        // An HTTP/2 server's SETTINGS: replayed to the client, whose own preface is not sent
        // twice.
        let settings: &[u8] = &[0, 0, 0, 4, 0, 0, 0, 0, 0];
        let (uri, written) = server(settings).await;
        let mut io = PlaintextConnector.call(uri).await.unwrap().into_inner();
        let mut first = [0u8; 9];
        io.read_exact(&mut first).await.unwrap();
        assert_eq!(first, settings);
        io.write_all(H2_PREFACE).await.unwrap();
        io.write_all(b"frames").await.unwrap();
        io.shutdown().await.unwrap();
        drop(io);
        assert_eq!(written.await.unwrap(), b"frames");
    }

    #[test]
    fn tls_records_are_told_from_http2_frames() {
        // A TLS alert (decode_error), a ServerHello record, the start of either.
        assert!(looks_like_tls(&[0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x32]));
        assert!(looks_like_tls(&[0x16, 0x03, 0x01]));
        assert!(looks_like_tls(&[0x15]));
        // An HTTP/2 SETTINGS frame, an HTTP/1 answer, an unrelated byte pair.
        assert!(!looks_like_tls(&[0x00, 0x00, 0x12, 0x04, 0x00]));
        assert!(!looks_like_tls(b"HTTP/1.1 400 Bad Request"));
        assert!(!looks_like_tls(&[0x15, 0x00]));
        assert!(!looks_like_tls(&[]));
    }

    #[test]
    fn a_ca_file_must_hold_a_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not a certificate\n").unwrap();
        let e = read_ca_file(&junk).unwrap_err().to_string();
        assert!(e.ends_with("junk.pem holds no PEM certificate"), "{e}");
        let e = read_ca_file(&dir.path().join("gone.pem")).unwrap_err();
        assert!(
            format!("{e:#}").contains("cannot read the CA file"),
            "{e:#}"
        );
        let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        let garbled = dir.path().join("garbled.pem");
        std::fs::write(
            &garbled,
            "-----BEGIN CERTIFICATE-----\nnot base64 at all!\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let e = read_ca_file(&garbled).unwrap_err().to_string();
        assert!(
            e.contains("garbled.pem: certificate 1 does not decode"),
            "{e}"
        );
        let good = dir.path().join("ca.pem");
        std::fs::write(&good, ck.cert.pem()).unwrap();
        assert_eq!(read_ca_file(&good).unwrap(), ck.cert.pem().into_bytes());
    }

    #[test]
    fn the_problem_is_found_inside_an_io_error_anywhere_in_the_chain() {
        let io = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
        );
        let wrapped = anyhow::Error::new(io).context("transport error");
        assert_eq!(
            TlsProblem::of(wrapped.as_ref()),
            Some(TlsProblem::Untrusted)
        );
        let plain = rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType);
        assert_eq!(TlsProblem::of(&plain), Some(TlsProblem::NotTls));
        assert_eq!(TlsProblem::of(&std::io::Error::other("x")), None);
        let sniffed = std::io::Error::new(std::io::ErrorKind::InvalidData, SpeaksTls);
        let wrapped = anyhow::Error::new(sniffed).context("h2 protocol error");
        assert_eq!(
            TlsProblem::of(wrapped.as_ref()),
            Some(TlsProblem::SpeaksTls)
        );
        assert_eq!(
            TlsProblem::SpeaksTls.hint("--ca-file"),
            " (the coordinator speaks TLS: use https://, with --ca-file for a private CA)"
        );
    }
}
