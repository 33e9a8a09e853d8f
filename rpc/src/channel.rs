//! Channels to a coordinator: plaintext or TLS by the URL's scheme, with hints for the usual
//! TLS mistakes.

use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

use crate::tls::{PlaintextConnector, TlsProblem, read_ca_file};
use crate::url::{check_port, coordinator_url};

/// A gRPC channel to the coordinator at `url` (`host:port` means `http://host:port`), over TLS
/// for `https://` URLs: trusting the CA certificates in `ca_file` when given, else the webpki
/// roots.
///
/// # Errors
/// A malformed URL, an unreadable CA file, `ca_file` with a plaintext URL, or the connection
/// (or TLS handshake) failing.
pub async fn connect_channel(url: &str, ca_file: Option<&Path>) -> anyhow::Result<Channel> {
    let url = coordinator_url(url);
    check_port(&url)?;
    let mut endpoint = Endpoint::from_shared(url.clone())
        .with_context(|| format!("bad coordinator URL {url:?}"))?
        .connect_timeout(Duration::from_secs(10));
    if url.starts_with("https://") {
        let tls = match ca_file {
            Some(path) => {
                ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read_ca_file(path)?))
            }
            None => ClientTlsConfig::new().with_webpki_roots(),
        };
        endpoint = endpoint
            .tls_config(tls)
            .context("TLS configuration for the coordinator")?;
    } else if let Some(path) = ca_file {
        anyhow::bail!(
            "--ca-file {} is given but the coordinator URL {url} is plaintext: use https://",
            path.display()
        );
    } else {
        // Plaintext: a TLS coordinator's answer fails the call with "speaks TLS: use https://"
        // (whichever call meets it first), not with a broken HTTP/2 frame.
        return endpoint
            .connect_with_connector(PlaintextConnector)
            .await
            .with_context(|| format!("cannot reach the coordinator at {url}"));
    }
    endpoint.connect().await.map_err(|e| {
        let context = format!("cannot reach the coordinator at {url}");
        match TlsProblem::of(&e) {
            // The hint after the cause it explains.
            Some(p) => anyhow::anyhow!(
                "{context}: {}{}",
                latmesh_core::error_text::chain(&e),
                match ca_file {
                    Some(f) => p.hint(&format!(
                        "--ca-file (is {} the CA that signed the coordinator's certificate?)",
                        f.display()
                    )),
                    None => p.hint("--ca-file"),
                }
            ),
            None => anyhow::Error::new(e).context(context),
        }
    })
}
