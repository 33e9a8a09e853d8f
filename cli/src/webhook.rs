//! The webhook of `latmesh check`: its report POSTed as JSON to an `http://` or `https://`
//! URL (webpki roots), on hyper's client (hyper-util's pooled client over a rustls
//! connector).

use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail};
use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// How long the webhook may take to answer.
pub const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(10);

/// `url` without its path and query (webhook URLs often carry their secret there).
pub fn redact_url(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let host = rest.split(['/', '?']).next().unwrap_or_default();
            format!("{scheme}://{host}/…")
        }
        None => "(invalid URL)".into(),
    }
}

/// POSTs `body` as `application/json` to `url` (`http://` or `https://`, webpki roots), with
/// `Connection: close`, and returns the response status; errors on a non-2xx status or when
/// the whole exchange takes longer than `timeout`.
///
/// # Errors
/// A bad URL, a connection or TLS failure, a timeout, a non-2xx status.
pub async fn post_json(url: &str, body: &[u8], timeout: Duration) -> anyhow::Result<u16> {
    tokio::time::timeout(timeout, post_json_inner(url, body))
        .await
        .map_err(|_| anyhow!("no answer within {} s", timeout.as_secs_f64()))?
}

async fn post_json_inner(url: &str, body: &[u8]) -> anyhow::Result<u16> {
    if !(url.starts_with("https://") || url.starts_with("http://")) {
        bail!("the webhook URL must start with http:// or https://");
    }
    // The error names neither the path nor the query: they may hold the webhook's secret.
    let uri: http::Uri = url
        .parse()
        .map_err(|e| anyhow!("not a valid webhook URL ({e})"))?;
    if uri.host().is_none_or(str::is_empty) {
        bail!("the webhook URL has no host");
    }
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(tcp);
    let client = Client::builder(TokioExecutor::new()).build::<_, Full<Bytes>>(connector);
    let request = http::Request::post(uri)
        .header(
            http::header::USER_AGENT,
            concat!("latmesh/", env!("CARGO_PKG_VERSION")),
        )
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::CONNECTION, "close")
        .body(Full::new(Bytes::copy_from_slice(body)))?;
    let response = client.request(request).await.map_err(|e| {
        let hint = latmesh_agent::tls::TlsProblem::of(&e).map_or(String::new(), |p| {
            p.hint("a CA the webhook's host is signed by")
        });
        anyhow!("{}{hint}", latmesh_core::error_text::chain(&e))
    })?;
    let status = response.status().as_u16();
    if !(200..300).contains(&status) {
        bail!("answered HTTP {status}");
    }
    Ok(status)
}
