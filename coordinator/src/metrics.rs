//! The coordinator's Prometheus metrics (`latmesh serve --metrics-listen ADDR`).
//!
//! One [`CoordinatorMetrics`] per coordinator (cheap to clone: an `Arc`), held by the
//! [`Coordinator`](crate::service::Coordinator) and the ClickHouse sink. It owns the registry
//! and the counters bumped where things happen (a batch received, stored, acked; rows
//! inserted); the rest is read from the coordinator's state and spool when Prometheus scrapes
//! ([`CoordinatorMetrics::attach`], done by `Coordinator::serve`).
//!
//! | metric | type | what |
//! | --- | --- | --- |
//! | `latmesh_coordinator_agents_connected` | gauge | agents with a live session |
//! | `latmesh_coordinator_campaigns_running` | gauge | campaigns not finished |
//! | `latmesh_coordinator_batches_received_total` | counter | result batches received (resends included) |
//! | `latmesh_coordinator_batches_acked_total` | counter | acks sent (a resend of a stored batch is acked again) |
//! | `latmesh_coordinator_records_received_total{region,provider,outcome}` | counter | records of newly stored batches (each counted once) |
//! | `latmesh_coordinator_spool_bytes` | gauge | bytes in the ClickHouse spool not yet inserted |
//! | `latmesh_coordinator_spool_pending_entries` | gauge | batches in the spool not yet inserted |
//! | `latmesh_coordinator_clickhouse_insert_lag_seconds` | gauge | age of the oldest batch in the spool (0 when empty) |
//! | `latmesh_coordinator_clickhouse_rows_inserted_total{table}` | counter | rows the sink inserted, by table |
//!
//! The spool and ClickHouse metrics are there only with `--clickhouse-url`. The HTTP side
//! (content negotiation, OpenMetrics or Prometheus text) is [`latmesh_exporter::serve`].

use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use latmesh_exporter::{const_gauge, serve as serve_registry};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use crate::spool::Spool;
use crate::state::{CheckedBatch, State};

/// Labels of `latmesh_coordinator_records_received_total`: regions × providers × outcomes,
/// each a short list.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RecordLabels {
    region: String,
    provider: String,
    outcome: &'static str,
}

/// Label of `latmesh_coordinator_clickhouse_rows_inserted_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TableLabel {
    table: &'static str,
}

/// A ClickHouse table the sink writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Table {
    /// `requests`: one row per attempt.
    Requests,
    /// `histograms`: one row per interval histogram.
    Histograms,
    /// `campaigns`.
    Campaigns,
    /// `agents`.
    Agents,
}

impl Table {
    fn name(self) -> &'static str {
        match self {
            Table::Requests => "requests",
            Table::Histograms => "histograms",
            Table::Campaigns => "campaigns",
            Table::Agents => "agents",
        }
    }
}

/// The coordinator's metrics: cheap to clone, every clone updates and serves one registry.
#[derive(Clone)]
pub struct CoordinatorMetrics {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Arc<Registry>,
    batches_received: Counter,
    batches_acked: Counter,
    records: Family<RecordLabels, Counter>,
    rows_inserted: Family<TableLabel, Counter>,
    live: Arc<Live>,
}

impl Default for CoordinatorMetrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let batches_received = Counter::default();
        registry.register(
            "latmesh_coordinator_batches_received",
            "Result batches received from agents (resends included)",
            batches_received.clone(),
        );
        let batches_acked = Counter::default();
        registry.register(
            "latmesh_coordinator_batches_acked",
            "Result batch acks sent to agents (a resend of a stored batch is acked again)",
            batches_acked.clone(),
        );
        let records = Family::<RecordLabels, Counter>::default();
        registry.register(
            "latmesh_coordinator_records_received",
            "Records (attempts) of newly stored result batches, by region, provider and outcome",
            records.clone(),
        );
        let rows_inserted = Family::<TableLabel, Counter>::default();
        registry.register(
            "latmesh_coordinator_clickhouse_rows_inserted",
            "Rows the sink inserted into ClickHouse, by table",
            rows_inserted.clone(),
        );
        let live = Arc::new(Live::default());
        registry.register_collector(Box::new(live.clone()));
        CoordinatorMetrics {
            inner: Arc::new(Inner {
                registry: Arc::new(registry),
                batches_received,
                batches_acked,
                records,
                rows_inserted,
                live,
            }),
        }
    }
}

impl fmt::Debug for CoordinatorMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CoordinatorMetrics")
            .field("batches_received", &self.inner.batches_received.get())
            .field("batches_acked", &self.inner.batches_acked.get())
            .finish_non_exhaustive()
    }
}

/// Records of a checked batch by label, counted once the batch is merged
/// ([`CoordinatorMetrics::records_received`]).
#[derive(Debug, Default)]
pub struct RecordTally(Vec<(RecordLabels, u64)>);

impl RecordTally {
    /// The records of `b` by (region, provider, outcome).
    pub fn of(b: &CheckedBatch) -> RecordTally {
        let mut counts: std::collections::BTreeMap<(&str, &'static str), u64> = Default::default();
        for r in &b.records {
            *counts
                .entry((r.provider.as_str(), r.outcome().as_str()))
                .or_default() += 1;
        }
        RecordTally(
            counts
                .into_iter()
                .map(|((provider, outcome), n)| {
                    let labels = RecordLabels {
                        region: b.region.clone(),
                        provider: provider.to_string(),
                        outcome,
                    };
                    (labels, n)
                })
                .collect(),
        )
    }
}

impl CoordinatorMetrics {
    /// A result batch arrived.
    pub fn batch_received(&self) {
        self.inner.batches_received.inc();
    }

    /// An ack was sent.
    pub fn batch_acked(&self) {
        self.inner.batches_acked.inc();
    }

    /// The records of a batch just merged (new, counted once).
    pub fn records_received(&self, tally: RecordTally) {
        for (labels, n) in tally.0 {
            self.inner.records.get_or_create(&labels).inc_by(n);
        }
    }

    /// The sink inserted `rows` rows into `table`.
    pub fn rows_inserted(&self, table: Table, rows: u64) {
        if rows > 0 {
            self.inner
                .rows_inserted
                .get_or_create(&TableLabel {
                    table: table.name(),
                })
                .inc_by(rows);
        }
    }

    /// The state read at scrape time: agents and campaigns of `state`, and the ClickHouse
    /// `spool` when there is one. A later call replaces an earlier one.
    pub fn attach(&self, state: &State, spool: Option<&Arc<Spool>>) {
        *lock(&self.inner.live.0) = Some(Sources {
            state: state.clone(),
            spool: spool.cloned(),
        });
    }

    /// The registry.
    pub fn registry(&self) -> Arc<Registry> {
        self.inner.registry.clone()
    }

    /// Serves `GET /metrics` on `listen` in a background task; returns the address bound.
    ///
    /// # Errors
    /// The address cannot be bound.
    pub async fn serve(&self, listen: &str) -> anyhow::Result<SocketAddr> {
        serve_registry(listen, self.registry()).await
    }
}

#[derive(Debug)]
struct Sources {
    state: State,
    spool: Option<Arc<Spool>>,
}

/// Reads the attached [`Sources`] on every scrape.
#[derive(Debug, Default)]
struct Live(Mutex<Option<Sources>>);

impl Collector for Live {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), fmt::Error> {
        let Some((state, spool)) = lock(&self.0)
            .as_ref()
            .map(|s| (s.state.clone(), s.spool.clone()))
        else {
            return Ok(());
        };
        let connected = state.agents().iter().filter(|a| a.connected).count();
        const_gauge(
            &mut enc,
            "latmesh_coordinator_agents_connected",
            "Agents with a live session.",
            connected as u64,
        )?;
        const_gauge(
            &mut enc,
            "latmesh_coordinator_campaigns_running",
            "Campaigns launched and not finished.",
            state.running_campaigns() as u64,
        )?;
        if let Some(spool) = spool {
            const_gauge(
                &mut enc,
                "latmesh_coordinator_spool_bytes",
                "Bytes of result batches in the spool, not yet inserted into ClickHouse.",
                spool.pending_bytes(),
            )?;
            const_gauge(
                &mut enc,
                "latmesh_coordinator_spool_pending_entries",
                "Result batches in the spool, not yet inserted into ClickHouse.",
                spool.pending_entries(),
            )?;
            const_gauge(
                &mut enc,
                "latmesh_coordinator_clickhouse_insert_lag_seconds",
                "Age of the oldest result batch in the spool not yet inserted into ClickHouse (0 when none waits).",
                spool.oldest_pending_age().map_or(0.0, |d| d.as_secs_f64()),
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
    use latmesh_core::record::{Outcome, ProbeRecord};
    use latmesh_exporter::{Format, encode};

    fn lines(m: &CoordinatorMetrics) -> Vec<String> {
        encode(&m.registry(), Format::Prometheus)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    }

    fn has(text: &[String], want: &str) {
        assert!(text.iter().any(|l| l == want), "{want} not in {text:#?}");
    }

    fn checked(region: &str, records: &[(&str, Outcome)]) -> CheckedBatch {
        CheckedBatch {
            campaign_id: "c".into(),
            agent_id: "a".into(),
            region: region.into(),
            seq: 1,
            records: records
                .iter()
                .map(|(p, o)| ProbeRecord {
                    provider: (*p).into(),
                    outcome: Some(*o),
                    ..ProbeRecord::default()
                })
                .collect(),
            histograms: Vec::new(),
        }
    }

    #[test]
    fn counters_and_families_encode() {
        let m = CoordinatorMetrics::default();
        m.batch_received();
        m.batch_received();
        m.batch_acked();
        let b = checked(
            "us-east",
            &[
                ("fast", Outcome::Ok),
                ("fast", Outcome::Ok),
                ("slow", Outcome::TimeoutTtft),
            ],
        );
        m.records_received(RecordTally::of(&b));
        m.clone().records_received(RecordTally::of(&checked(
            "eu-west",
            &[("fast", Outcome::Ok)],
        )));
        m.rows_inserted(Table::Requests, 4);
        m.rows_inserted(Table::Requests, 1);
        m.rows_inserted(Table::Campaigns, 0);
        let text = lines(&m);
        has(&text, "latmesh_coordinator_batches_received_total 2");
        has(&text, "latmesh_coordinator_batches_acked_total 1");
        has(
            &text,
            r#"latmesh_coordinator_records_received_total{region="us-east",provider="fast",outcome="ok"} 2"#,
        );
        has(
            &text,
            r#"latmesh_coordinator_records_received_total{region="us-east",provider="slow",outcome="timeout_ttft"} 1"#,
        );
        has(
            &text,
            r#"latmesh_coordinator_records_received_total{region="eu-west",provider="fast",outcome="ok"} 1"#,
        );
        has(
            &text,
            r#"latmesh_coordinator_clickhouse_rows_inserted_total{table="requests"} 5"#,
        );
        assert!(
            !text.iter().any(|l| l.contains(r#"table="campaigns""#)),
            "no rows, no series"
        );
        // Nothing attached: no state gauges.
        assert!(!text.iter().any(|l| l.contains("agents_connected")));
    }

    #[test]
    fn state_and_spool_are_read_at_scrape_time() {
        let m = CoordinatorMetrics::default();
        let state = State::default();
        m.attach(&state, None);
        let text = lines(&m);
        has(&text, "latmesh_coordinator_agents_connected 0");
        has(&text, "latmesh_coordinator_campaigns_running 0");
        assert!(
            !text.iter().any(|l| l.contains("spool")),
            "no ClickHouse spool, no spool metrics: {text:#?}"
        );

        let dir = tempfile::tempdir().unwrap();
        let spool =
            Arc::new(Spool::open(crate::spool::SpoolConfig::new(dir.path(), 1 << 20)).unwrap());
        m.attach(&state, Some(&spool));
        let text = lines(&m);
        has(&text, "latmesh_coordinator_spool_pending_entries 0");
        has(&text, "latmesh_coordinator_spool_bytes 0");
        has(
            &text,
            "latmesh_coordinator_clickhouse_insert_lag_seconds 0.0",
        );
        let batch = latmesh_proto::pb::ResultBatch {
            campaign_id: "c".into(),
            seq: 1,
            ..Default::default()
        };
        let id = spool.append("a", "r", &batch).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let text = lines(&m);
        has(&text, "latmesh_coordinator_spool_pending_entries 1");
        let lag: f64 = text
            .iter()
            .find_map(|l| l.strip_prefix("latmesh_coordinator_clickhouse_insert_lag_seconds "))
            .unwrap()
            .parse()
            .unwrap();
        assert!(lag >= 0.02, "{lag}");
        spool.commit(id).unwrap();
        has(
            &lines(&m),
            "latmesh_coordinator_clickhouse_insert_lag_seconds 0.0",
        );
    }
}
