//! Row counts of a campaign for `latmesh campaign verify` ([`counts`]): per agent, per batch
//! seq, duplicates and attempts measured twice.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::super::{StoreError, check_identifier};

/// Rows of one agent in ClickHouse.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentCounts {
    /// Agent id.
    pub agent_id: String,
    /// Its region.
    pub region: String,
    /// Distinct batch seqs with at least one row in either table.
    pub batches: u64,
    /// Highest seq seen.
    pub max_seq: u64,
    /// Seqs in `1..=max_seq` without any row: lost batches — or batches that carried nothing
    /// (the first [`crate::seq_gaps::MAX_LISTED`]).
    pub missing_seqs: Vec<u64>,
    /// Missing seqs beyond those `missing_seqs` lists.
    #[serde(default)]
    pub missing_seqs_more: u64,
    /// `requests` rows.
    pub request_rows: u64,
    /// `requests` rows with outcome `ok`.
    pub ok_requests: u64,
    /// `histograms` rows.
    pub histogram_rows: u64,
    /// Values in its histograms (sum of `count`), all metrics.
    pub histogram_values: u64,
    /// Rows present more than once (same seq and row index), both tables.
    pub duplicate_rows: u64,
    /// `requests` rows of an attempt already stored from another batch of this agent: the
    /// same (load, scenario, provider, round, slot, step, turn, attempt) measured twice, as a
    /// restarted agent that ran again what it had measured would.
    pub measured_twice: u64,
}

/// A batch with duplicate rows still visible (not yet merged away).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchDuplicates {
    /// Agent id.
    pub agent_id: String,
    /// Batch seq.
    pub seq: u64,
    /// `requests` or `histograms`.
    pub table: String,
    /// Rows of the batch in the table.
    pub rows: u64,
    /// Distinct row indexes among them.
    pub distinct: u64,
}

/// What ClickHouse holds for one campaign, for `latmesh campaign verify`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CampaignCounts {
    /// `requests` rows.
    pub request_rows: u64,
    /// `histograms` rows.
    pub histogram_rows: u64,
    /// `requests` rows beyond the first of their (agent, seq, row index).
    pub duplicate_request_rows: u64,
    /// `histograms` rows beyond the first of their (agent, seq, row index).
    pub duplicate_histogram_rows: u64,
    /// Per agent, by agent id.
    pub agents: Vec<AgentCounts>,
    /// Every (agent, seq, table) with duplicates, in order.
    pub duplicates: Vec<BatchDuplicates>,
}

#[derive(clickhouse::Row, Deserialize)]
struct SeqCount {
    agent_id: String,
    region: String,
    seq: u64,
    rows: u64,
    distinct: u64,
    extra: u64,
}

/// Row counts of campaign `campaign_id`: totals, per agent, and every (agent, seq) whose rows
/// are duplicated. Reads without `FINAL`, i.e. what queries see.
///
/// # Errors
/// [`StoreError::InvalidName`] for a bad `db`; the server's or connection's error otherwise.
pub async fn counts(
    client: &clickhouse::Client,
    db: &str,
    campaign_id: &str,
) -> Result<CampaignCounts, StoreError> {
    check_identifier(db)?;
    let per_seq = |table: &str, extra: &str| {
        format!(
            "SELECT agent_id, any(region) AS agent_region, seq, count() AS n, \
             uniqExact(row_index) AS distinct_rows, {extra} AS extra \
             FROM {db}.{table} WHERE campaign_id = ? GROUP BY agent_id, seq \
             ORDER BY agent_id, seq"
        )
    };
    let requests: Vec<SeqCount> = client
        .query(&per_seq("requests", "countIf(outcome = 'ok')"))
        .bind(campaign_id)
        .fetch_all()
        .await?;
    let histograms: Vec<SeqCount> = client
        .query(&per_seq("histograms", "sum(`count`)"))
        .bind(campaign_id)
        .fetch_all()
        .await?;
    let twice: Vec<(String, u64)> = client
        .query(&format!(
            "SELECT agent_id, sum(batches - 1) FROM (\
             SELECT agent_id, uniqExact(seq) AS batches FROM {db}.requests \
             WHERE campaign_id = ? \
             GROUP BY agent_id, load, scenario, provider, round, slot, step, turn, attempt \
             HAVING batches > 1) GROUP BY agent_id"
        ))
        .bind(campaign_id)
        .fetch_all()
        .await?;

    let mut out = CampaignCounts::default();
    let mut agents: BTreeMap<String, (AgentCounts, BTreeSet<u64>)> = BTreeMap::new();
    for (table, rows) in [("requests", &requests), ("histograms", &histograms)] {
        for r in rows {
            let (a, seqs) = agents.entry(r.agent_id.clone()).or_insert_with(|| {
                (
                    AgentCounts {
                        agent_id: r.agent_id.clone(),
                        region: r.region.clone(),
                        ..Default::default()
                    },
                    BTreeSet::new(),
                )
            });
            seqs.insert(r.seq);
            let dup = r.rows - r.distinct;
            a.duplicate_rows += dup;
            if table == "requests" {
                a.request_rows += r.rows;
                a.ok_requests += r.extra;
                out.request_rows += r.rows;
                out.duplicate_request_rows += dup;
            } else {
                a.histogram_rows += r.rows;
                a.histogram_values += r.extra;
                out.histogram_rows += r.rows;
                out.duplicate_histogram_rows += dup;
            }
            if dup > 0 {
                out.duplicates.push(BatchDuplicates {
                    agent_id: r.agent_id.clone(),
                    seq: r.seq,
                    table: table.to_string(),
                    rows: r.rows,
                    distinct: r.distinct,
                });
            }
        }
    }
    for (_, (mut a, seqs)) in agents {
        a.measured_twice = twice
            .iter()
            .find(|(id, _)| *id == a.agent_id)
            .map_or(0, |t| t.1);
        a.batches = seqs.len() as u64;
        a.max_seq = seqs.last().copied().unwrap_or(0);
        let missing = crate::seq_gaps::missing(&seqs);
        (a.missing_seqs, a.missing_seqs_more) = (missing.listed, missing.more);
        out.agents.push(a);
    }
    out.duplicates
        .sort_by(|a, b| (&a.agent_id, a.seq, &a.table).cmp(&(&b.agent_id, b.seq, &b.table)));
    Ok(out)
}
