//! The coordinator's TLS listener: TLS handshakes are done here, each in its own task with a
//! timeout, instead of inside tonic (which logs a failed one at debug level without the
//! peer), so that every failed handshake is a WARN naming the peer address and the reason,
//! with a hint when the peer spoke plaintext (an agent or CLI given `http://` for a TLS
//! coordinator). Connections whose handshake succeeded are handed to tonic in the order they
//! complete; a slow or silent peer holds up no other.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::ReceiverStream;

/// A checked server TLS configuration ([`server_tls`]): rustls offering HTTP/2
/// by ALPN, and how long a handshake may take.
#[derive(Clone, Debug)]
pub struct ServerTls {
    /// The rustls configuration (certificate chain and key, ALPN `h2`).
    pub config: Arc<rustls::ServerConfig>,
    /// A handshake not finished after this long is abandoned (and logged).
    pub handshake_timeout: Duration,
}

/// Handshakes that finished and wait for tonic to take them.
const READY_QUEUE: usize = 64;

/// The TLS connections of `listener`: an accept loop (ended when the returned stream is
/// dropped) spawns one handshake per TCP connection; a failed or timed-out one is logged as
/// a WARN (`peer`, `reason`) and its connection closed.
pub fn incoming(
    listener: TcpListener,
    tls: ServerTls,
) -> ReceiverStream<Result<TlsStream<TcpStream>, std::io::Error>> {
    let (tx, rx) = mpsc::channel(READY_QUEUE);
    let acceptor = tokio_rustls::TlsAcceptor::from(tls.config);
    tokio::spawn(async move {
        loop {
            let (tcp, peer) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // Out of file descriptors and the like: say so, and let it pass.
                        tracing::warn!(error = %e, "cannot accept a connection");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
                _ = tx.closed() => return,
            };
            let _ = tcp.set_nodelay(true);
            let (acceptor, tx) = (acceptor.clone(), tx.clone());
            let timeout = tls.handshake_timeout;
            tokio::spawn(async move {
                match tokio::time::timeout(timeout, acceptor.accept(tcp)).await {
                    Ok(Ok(stream)) => {
                        let _ = tx.send(Ok(stream)).await;
                    }
                    Ok(Err(e)) => warn_failed(peer, &handshake_reason(&e)),
                    Err(_) => warn_failed(
                        peer,
                        &format!("no handshake within {} s", timeout.as_secs_f64()),
                    ),
                }
            });
        }
    });
    ReceiverStream::new(rx)
}

/// Failed handshakes logged: at most 20 a minute, the rest counted in the next line (any
/// peer can open connections that fail).
static HANDSHAKE_WARNINGS: latmesh_core::log_limit::LogLimit =
    latmesh_core::log_limit::LogLimit::new(20, std::time::Duration::from_secs(60));

fn warn_failed(peer: SocketAddr, reason: &str) {
    if let Some(suppressed) = HANDSHAKE_WARNINGS.allow() {
        tracing::warn!(%peer, reason, suppressed, "TLS handshake failed");
    }
}

/// Why a handshake failed, in a user's terms: rustls' error, and when the peer did not speak
/// TLS at all, that it probably used `http://`.
pub fn handshake_reason(e: &std::io::Error) -> String {
    let plaintext = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .is_some_and(|r| matches!(r, rustls::Error::InvalidMessage(_)));
    if plaintext {
        format!("{e} (the peer did not speak TLS: a client given http:// instead of https://?)")
    } else {
        e.to_string()
    }
}

/// A TLS configuration for the server from a PEM certificate chain (leaf first) and a PEM
/// private key, checked now (both parse, the key matches the certificate) so that a mistake
/// fails `latmesh serve` at startup with the file named.
///
/// # Errors
/// A file cannot be read, holds no certificate or key, or the key does not fit.
pub fn server_tls(cert: &Path, key: &Path) -> anyhow::Result<ServerTls> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    let cert_pem = std::fs::read(cert)
        .with_context(|| format!("cannot read the TLS certificate {}", cert.display()))?;
    let key_pem =
        std::fs::read(key).with_context(|| format!("cannot read the TLS key {}", key.display()))?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow::anyhow!("{}: not a PEM certificate chain: {e}", cert.display()))?;
    anyhow::ensure!(
        !chain.is_empty(),
        "{}: no PEM certificate (-----BEGIN CERTIFICATE-----) in it",
        cert.display()
    );
    let private = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|e| anyhow::anyhow!("{}: no usable PEM private key: {e}", key.display()))?;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .and_then(|b| b.with_no_client_auth().with_single_cert(chain, private))
    .map_err(|e| {
        anyhow::anyhow!(
            "TLS certificate {} with key {}: {e}",
            cert.display(),
            key.display()
        )
    })?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(ServerTls {
        config: Arc::new(config),
        handshake_timeout: std::time::Duration::from_secs(10),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_files_are_checked_at_startup() {
        let dir = tempfile::tempdir().unwrap();
        let a = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        let b = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        let (cert, key, other_key) = (
            dir.path().join("cert.pem"),
            dir.path().join("key.pem"),
            dir.path().join("other-key.pem"),
        );
        std::fs::write(&cert, a.cert.pem()).unwrap();
        std::fs::write(&key, a.signing_key.serialize_pem()).unwrap();
        std::fs::write(&other_key, b.signing_key.serialize_pem()).unwrap();
        server_tls(&cert, &key).unwrap();
        let e = server_tls(&cert, &other_key).unwrap_err().to_string();
        assert!(e.contains("other-key.pem"), "{e}");
        let e = server_tls(&key, &key).unwrap_err().to_string();
        assert!(e.contains("no PEM certificate"), "{e}");
        let e = server_tls(&dir.path().join("missing.pem"), &key)
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing.pem"), "{e}");
    }

    /// Handshakes run side by side: a peer that connects and says nothing (its handshake
    /// waits for the 10-minute timeout here) does not hold up the next client.
    #[tokio::test]
    async fn a_silent_peer_holds_up_no_other_handshake() {
        use tokio_stream::StreamExt as _;
        let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
        std::fs::write(&cert, ck.cert.pem()).unwrap();
        std::fs::write(&key, ck.signing_key.serialize_pem()).unwrap();
        let tls = ServerTls {
            handshake_timeout: Duration::from_secs(600),
            ..server_tls(&cert, &key).unwrap()
        };
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut incoming = incoming(listener, tls);
        let silent = TcpStream::connect(addr).await.unwrap();

        let mut roots = rustls::RootCertStore::empty();
        roots.add(ck.cert.der().clone()).unwrap();
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        let client = tokio::spawn(async move {
            let tcp = TcpStream::connect(addr).await.unwrap();
            let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
            tokio_rustls::TlsConnector::from(Arc::new(config))
                .connect(name, tcp)
                .await
        });
        // (A guard, not a measurement: without it a serial acceptor would hang the test.)
        let accepted = tokio::time::timeout(Duration::from_secs(60), incoming.next())
            .await
            .expect("the client's handshake waited for the silent peer's")
            .unwrap()
            .unwrap();
        let client = client.await.unwrap().unwrap();
        let (tcp, _) = accepted.get_ref();
        assert_eq!(
            tcp.peer_addr().unwrap(),
            client.get_ref().0.local_addr().unwrap()
        );
        drop(silent);
    }

    #[test]
    fn a_plaintext_peer_is_named_as_such() {
        let plain = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType),
        );
        assert_eq!(
            handshake_reason(&plain),
            "received corrupt message of type InvalidContentType (the peer did not speak TLS: a client given http:// instead of https://?)"
        );
        let closed = std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "tls handshake eof");
        assert_eq!(handshake_reason(&closed), "tls handshake eof");
    }
}
