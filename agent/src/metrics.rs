//! The agent's Prometheus metrics (`latmesh-agent --metrics-listen ADDR`), and the small HTTP
//! exporter that the coordinator's `/metrics` uses too.
//!
//! One [`AgentMetrics`] per process (cheap to clone: an `Arc`) travels in
//! [`RunnerConfig::metrics`](crate::runner::RunnerConfig::metrics). It owns the registry and
//! the few handles updated as things happen (a record collected, the session up or down);
//! everything else is read from the agent's own state when Prometheus scrapes
//! ([`AgentMetrics::attach`]: the outbox and its spool, the clock estimate, the in-flight
//! counter), so nothing is counted twice and nothing drifts.
//!
//! | metric | type | what |
//! | --- | --- | --- |
//! | `latmesh_agent_requests_total{provider,scenario,outcome}` | counter | attempts measured (one record each) |
//! | `latmesh_agent_in_flight` | gauge | attempts in flight, every campaign |
//! | `latmesh_agent_batches_spooled_total` | counter | result batches sealed (on disk first with a spool directory) |
//! | `latmesh_agent_batches_acked_total` | counter | batches the coordinator acked |
//! | `latmesh_agent_batches_memory_only_total` | counter | batches the spool could not take (memory only) |
//! | `latmesh_agent_batches_quarantined_total` | counter | batches refused by the coordinator or too large, quarantined (never sent again) |
//! | `latmesh_agent_spool_pending_batches` | gauge | batches waiting for an ack |
//! | `latmesh_agent_spool_bytes` | gauge | bytes of batch files in the spool directory |
//! | `latmesh_agent_clock_offset_us` | gauge | coordinator clock − agent clock (absent before the first estimate) |
//! | `latmesh_agent_clock_uncertainty_us` | gauge | ± bound of that offset |
//! | `latmesh_agent_connected` | gauge | 1 while a session with the coordinator is up |
//!
//! `GET /metrics` answers in the OpenMetrics text format when the scraper asks for it
//! (`Accept: application/openmetrics-text`, as Prometheus does), else in the Prometheus text
//! format 0.0.4.

use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use latmesh_core::clock::ClockEstimate;
use latmesh_core::record::ProbeRecord;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::watch;

pub use latmesh_exporter::{Format, const_counter, const_gauge, encode, serve};

use crate::outbox::Outbox;

/// Labels of `latmesh_agent_requests_total`: a handful of providers × scenarios × outcomes.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    provider: String,
    scenario: String,
    outcome: &'static str,
}

/// The agent's metrics: cheap to clone, every clone updates and serves the same registry.
#[derive(Clone)]
pub struct AgentMetrics {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Arc<Registry>,
    requests: Family<RequestLabels, Counter>,
    warmup: Family<RequestLabels, Counter>,
    connected: Gauge,
    live: Arc<Live>,
}

impl Default for AgentMetrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "latmesh_agent_requests",
            "Attempts measured (one record each), by provider, scenario and outcome",
            requests.clone(),
        );
        let warmup = Family::<RequestLabels, Counter>::default();
        registry.register(
            "latmesh_agent_warmup_requests",
            "Warm-up attempts measured (left out of latmesh_agent_requests and of every statistic), by provider, scenario and outcome",
            warmup.clone(),
        );
        let connected = Gauge::default();
        registry.register(
            "latmesh_agent_connected",
            "1 while the session with the coordinator is up, else 0",
            connected.clone(),
        );
        let live = Arc::new(Live::default());
        registry.register_collector(Box::new(live.clone()));
        AgentMetrics {
            inner: Arc::new(Inner {
                registry: Arc::new(registry),
                requests,
                warmup,
                connected,
                live,
            }),
        }
    }
}

impl fmt::Debug for AgentMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentMetrics")
            .field("connected", &self.inner.connected.get())
            .finish_non_exhaustive()
    }
}

impl AgentMetrics {
    /// Counts one collected record (called for every record a campaign run collects).
    /// A warm-up record counts in `latmesh_agent_warmup_requests` only (never as a request or
    /// an error).
    pub fn record(&self, rec: &ProbeRecord) {
        let family = if rec.warmup {
            &self.inner.warmup
        } else {
            &self.inner.requests
        };
        family
            .get_or_create(&RequestLabels {
                provider: rec.provider.clone(),
                scenario: rec.scenario.clone(),
                outcome: rec.outcome().as_str(),
            })
            .inc();
    }

    /// Marks the session up until the returned guard is dropped.
    pub fn connected(&self) -> Connected {
        self.inner.connected.set(1);
        Connected(self.inner.connected.clone())
    }

    /// The state read at scrape time: the outbox (batches, spool), the clock estimate and the
    /// attempts in flight. A later call replaces an earlier one.
    pub fn attach(
        &self,
        outbox: &Outbox,
        clock: watch::Receiver<Option<ClockEstimate>>,
        in_flight: Arc<AtomicU32>,
    ) {
        *lock(&self.inner.live.0) = Some(Sources {
            outbox: outbox.clone(),
            clock,
            in_flight,
        });
    }

    /// The registry (what [`serve`] exports).
    pub fn registry(&self) -> Arc<Registry> {
        self.inner.registry.clone()
    }
}

/// Keeps `latmesh_agent_connected` at 1 while alive; 0 once dropped.
#[derive(Debug)]
pub struct Connected(Gauge);

impl Drop for Connected {
    fn drop(&mut self) {
        self.0.set(0);
    }
}

#[derive(Debug)]
struct Sources {
    outbox: Outbox,
    clock: watch::Receiver<Option<ClockEstimate>>,
    in_flight: Arc<AtomicU32>,
}

/// Reads the attached [`Sources`] on every scrape; before [`AgentMetrics::attach`] it shows
/// nothing.
#[derive(Debug, Default)]
struct Live(Mutex<Option<Sources>>);

impl Collector for Live {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), fmt::Error> {
        let guard = lock(&self.0);
        let Some(s) = guard.as_ref() else {
            return Ok(());
        };
        let stats = s.outbox.stats();
        let in_flight = s.in_flight.load(Ordering::SeqCst);
        let estimate = *s.clock.borrow();
        drop(guard);
        const_gauge(
            &mut enc,
            "latmesh_agent_in_flight",
            "Attempts in flight now, over every campaign.",
            i64::from(in_flight),
        )?;
        const_counter(
            &mut enc,
            "latmesh_agent_batches_spooled",
            "Result batches sealed by this process (written to the spool directory first when there is one).",
            stats.spooled_total,
        )?;
        const_counter(
            &mut enc,
            "latmesh_agent_batches_acked",
            "Result batches the coordinator acked.",
            stats.acked_total,
        )?;
        const_counter(
            &mut enc,
            "latmesh_agent_batches_memory_only",
            "Result batches the spool could not take (full or failing), kept in memory only.",
            stats.memory_only_total,
        )?;
        const_counter(
            &mut enc,
            "latmesh_agent_batches_quarantined",
            "Result batches refused by the coordinator as malformed or too large to send, moved to the spool's quarantine (never sent again).",
            stats.quarantined_batches_total,
        )?;
        const_gauge(
            &mut enc,
            "latmesh_agent_spool_pending_batches",
            "Result batches waiting for the coordinator's ack.",
            stats.unacked,
        )?;
        const_gauge(
            &mut enc,
            "latmesh_agent_spool_bytes",
            "Bytes of batch files in the spool directory.",
            stats.spool_bytes,
        )?;
        if let Some(est) = estimate {
            const_gauge(
                &mut enc,
                "latmesh_agent_clock_offset_us",
                "Estimated coordinator clock minus agent clock, microseconds.",
                est.offset_us,
            )?;
            const_gauge(
                &mut enc,
                "latmesh_agent_clock_uncertainty_us",
                "Uncertainty of the clock offset (half the best ping's round trip), microseconds.",
                est.uncertainty_us,
            )?;
        }
        Ok(())
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use latmesh_core::record::Outcome;
    use latmesh_proto::pb;

    fn record(provider: &str, outcome: Outcome) -> ProbeRecord {
        ProbeRecord {
            provider: provider.into(),
            scenario: "chat".into(),
            outcome: Some(outcome),
            ..ProbeRecord::default()
        }
    }

    fn lines(m: &AgentMetrics, format: Format) -> Vec<String> {
        encode(&m.registry(), format)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn records_are_counted_by_provider_scenario_and_outcome() {
        let m = AgentMetrics::default();
        for _ in 0..3 {
            m.record(&record("fast", Outcome::Ok));
        }
        m.record(&record("fast", Outcome::Throttled));
        m.clone().record(&record("slow", Outcome::Ok));
        // A warm-up error counts apart, never as a request.
        m.record(&ProbeRecord {
            warmup: true,
            ..record("slow", Outcome::Http5xx)
        });
        let text = lines(&m, Format::Prometheus);
        assert!(
            !text
                .iter()
                .any(|l| l.starts_with("latmesh_agent_requests_total") && l.contains("http_5xx")),
            "{text:#?}"
        );
        for want in [
            r#"latmesh_agent_requests_total{provider="fast",scenario="chat",outcome="ok"} 3"#,
            r#"latmesh_agent_requests_total{provider="fast",scenario="chat",outcome="throttled"} 1"#,
            r#"latmesh_agent_requests_total{provider="slow",scenario="chat",outcome="ok"} 1"#,
            r#"latmesh_agent_warmup_requests_total{provider="slow",scenario="chat",outcome="http_5xx"} 1"#,
            "# TYPE latmesh_agent_requests_total counter",
            "latmesh_agent_connected 0",
        ] {
            assert!(text.iter().any(|l| l == want), "{want} not in {text:#?}");
        }
        // Nothing attached yet: no outbox or clock metrics.
        assert!(
            !text
                .iter()
                .any(|l| l.starts_with("latmesh_agent_in_flight"))
        );
        // OpenMetrics: the family is named without `_total` and the page ends with # EOF.
        let om = lines(&m, Format::OpenMetrics);
        assert!(
            om.iter()
                .any(|l| l == "# TYPE latmesh_agent_requests counter"),
            "{om:#?}"
        );
        assert_eq!(om.last().map(String::as_str), Some("# EOF"));
    }

    #[test]
    fn attached_state_is_read_at_scrape_time() {
        let m = AgentMetrics::default();
        let outbox = Outbox::default();
        let (clock_tx, clock_rx) = watch::channel(None);
        let in_flight = Arc::new(AtomicU32::new(0));
        m.attach(&outbox, clock_rx, in_flight.clone());
        let text = lines(&m, Format::Prometheus);
        assert!(
            text.iter().any(|l| l == "latmesh_agent_in_flight 0"),
            "{text:#?}"
        );
        assert!(
            !text
                .iter()
                .any(|l| l.starts_with("latmesh_agent_clock_offset_us")),
            "no estimate yet: no offset"
        );

        in_flight.store(7, Ordering::SeqCst);
        clock_tx.send_replace(Some(ClockEstimate {
            offset_us: -1234,
            uncertainty_us: 56,
            samples: 8,
        }));
        for seq in 1..=3 {
            outbox.push(pb::ResultBatch {
                campaign_id: "c".into(),
                seq,
                ..Default::default()
            });
        }
        outbox.ack("c", 1);
        outbox.reject("c", 3, "malformed");
        let connected = m.connected();
        let text = lines(&m, Format::Prometheus);
        for want in [
            "latmesh_agent_in_flight 7",
            "latmesh_agent_clock_offset_us -1234",
            "latmesh_agent_clock_uncertainty_us 56",
            "latmesh_agent_batches_spooled_total 3",
            "latmesh_agent_batches_acked_total 1",
            "latmesh_agent_batches_quarantined_total 1",
            "latmesh_agent_spool_pending_batches 1",
            "latmesh_agent_spool_bytes 0",
            "latmesh_agent_connected 1",
        ] {
            assert!(text.iter().any(|l| l == want), "{want} not in {text:#?}");
        }
        drop(connected);
        assert!(lines(&m, Format::Prometheus).contains(&"latmesh_agent_connected 0".into()));
    }

    #[tokio::test]
    async fn serves_get_metrics_over_http() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let m = AgentMetrics::default();
        m.record(&record("p", Outcome::Ok));
        let addr = serve("127.0.0.1:0", m.registry()).await.unwrap();
        let get = |path: &'static str, accept: &'static str| async move {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            let req = format!(
                "GET {path} HTTP/1.1\r\nhost: x\r\naccept: {accept}\r\nconnection: close\r\n\r\n"
            );
            s.write_all(req.as_bytes()).await.unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).await.unwrap();
            out
        };
        let page = get("/metrics", "text/plain").await;
        assert!(page.starts_with("HTTP/1.1 200"), "{page}");
        assert!(page.contains("text/plain; version=0.0.4"), "{page}");
        assert!(page.contains(
            r#"latmesh_agent_requests_total{provider="p",scenario="chat",outcome="ok"} 1"#
        ));
        let om = get("/metrics", "application/openmetrics-text").await;
        assert!(om.contains("application/openmetrics-text"), "{om}");
        assert!(om.trim_end().ends_with("# EOF"), "{om}");
        assert!(get("/other", "*/*").await.starts_with("HTTP/1.1 404"));
    }
}
