//! The Prometheus `/metrics` page that the agent (`latmesh-agent --metrics-listen`) and the
//! coordinator (`latmesh serve --metrics-listen`) both serve: encoding a registry in the
//! OpenMetrics or Prometheus text format (chosen from the scraper's `Accept` header, as
//! Prometheus asks), constant gauges and counters for scrape-time collectors, and the small HTTP
//! server (axum) of `GET /metrics`. Each binary's own metrics are in its crate
//! (`agent/src/metrics.rs`, `coordinator/src/metrics.rs`).

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, EncodeMetric as _,
};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

/// Encodes a gauge of value `v` from a [`Collector`].
///
/// # Errors
/// Only the writer's.
pub fn const_gauge(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    v: impl EncodeGaugeValue,
) -> Result<(), fmt::Error> {
    let g = ConstGauge::new(v);
    g.encode(enc.encode_descriptor(name, help, None, g.metric_type())?)
}

/// Encodes a counter of value `v` from a [`Collector`] (`name` without `_total`: the encoder
/// adds it).
///
/// # Errors
/// Only the writer's.
pub fn const_counter(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    v: impl EncodeCounterValue,
) -> Result<(), fmt::Error> {
    let c = ConstCounter::new(v);
    c.encode(enc.encode_descriptor(name, help, None, c.metric_type())?)
}

/// A text exposition format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0 text (ends with `# EOF`).
    OpenMetrics,
    /// Prometheus text format 0.0.4.
    Prometheus,
}

impl Format {
    /// OpenMetrics when an `Accept` header value asks for it, else the Prometheus format.
    pub fn from_accept(accept: Option<&str>) -> Format {
        if accept.is_some_and(|a| a.contains("application/openmetrics-text")) {
            Format::OpenMetrics
        } else {
            Format::Prometheus
        }
    }

    /// Its `Content-Type`.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Prometheus => prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
        }
    }
}

/// `registry` in `format`.
///
/// # Errors
/// Only the writer's (never, into a `String`).
pub fn encode(registry: &Registry, format: Format) -> Result<String, fmt::Error> {
    let mut out = String::new();
    match format {
        Format::OpenMetrics => prometheus_client::encoding::text::encode(&mut out, registry)?,
        Format::Prometheus => {
            prometheus_client::encoding::prometheus_text::encode(&mut out, registry)?;
        }
    }
    Ok(out)
}

/// Serves `GET /metrics` of `registry` on `listen` (e.g. `127.0.0.1:9464`; port 0 picks a
/// free one) in a background task; returns the address bound.
///
/// # Errors
/// The address cannot be bound.
pub async fn serve(listen: &str, registry: Arc<Registry>) -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen} for /metrics"))?;
    let addr = listener.local_addr()?;
    let app = axum::Router::new()
        .route("/metrics", axum::routing::get(scrape))
        .with_state(registry);
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(%addr, error = %e, "the /metrics server stopped");
        }
    });
    Ok(addr)
}

async fn scrape(
    axum::extract::State(registry): axum::extract::State<Arc<Registry>>,
    headers: axum::http::HeaderMap,
) -> axum::response::Response {
    use axum::http::{StatusCode, header};
    use axum::response::IntoResponse as _;
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let format = Format::from_accept(accept);
    match encode(&registry, format) {
        Ok(body) => ([(header::CONTENT_TYPE, format.content_type())], body).into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_header_picks_the_format() {
        assert_eq!(
            Format::from_accept(Some(
                "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
            )),
            Format::OpenMetrics
        );
        assert_eq!(Format::from_accept(Some("*/*")), Format::Prometheus);
        assert_eq!(Format::from_accept(None), Format::Prometheus);
    }
}
