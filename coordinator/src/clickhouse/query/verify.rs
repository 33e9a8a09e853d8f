//! Row counts of a campaign for `latmesh campaign verify` ([`counts`]): per agent, per batch
//! seq, duplicates and attempts measured twice.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::super::rows::AgentRow;
use super::super::{StoreError, check_identifier};
use super::campaign::agents;

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

/// What `campaign verify` found for one agent.
#[derive(Debug, Serialize)]
pub struct VerifyLine {
    /// Agent id.
    pub agent_id: String,
    /// Records the coordinator received from it (and acked).
    pub reported_records: u64,
    /// Distinct `requests` rows in ClickHouse.
    pub stored_records: u64,
    /// Reported but not stored.
    pub lost: u64,
    /// Stored more than once.
    pub duplicated: u64,
    /// Attempts measured twice (stored from two batches of the agent): a resume that ran
    /// again what an earlier process had measured.
    pub measured_twice: u64,
    /// Batch seqs missing in ClickHouse (the first [`crate::seq_gaps::MAX_LISTED`]).
    pub missing_seqs: Vec<u64>,
    /// Whether its delivery is whole, so that `lost` means what it says: no batch refused or
    /// quarantined, its done notice arrived, every batch it announced stored.
    pub verified: bool,
    /// Why not ([`not_verified`]); empty when verified.
    pub not_verified: Vec<String>,
    /// Missing seqs beyond those listed.
    pub missing_seqs_more: u64,
}

impl VerifyLine {
    /// The missing seqs as `campaign verify` prints them: `[3, 7]`, `[1, 2, …] and 5 more`.
    pub fn missing_text(&self) -> String {
        match self.missing_seqs_more {
            0 => format!("{:?}", self.missing_seqs),
            more => format!("{:?} and {more} more", self.missing_seqs),
        }
    }
}

/// Reconciles what the agents of campaign `campaign_id` reported (their `agents` rows) with
/// what ClickHouse holds ([`counts`]); returns (lines, lost, duplicated).
///
/// # Errors
/// ClickHouse errors; a campaign whose agents are not stored (not finished yet).
pub async fn verify(
    client: &clickhouse::Client,
    db: &str,
    campaign_id: &str,
) -> anyhow::Result<(Vec<VerifyLine>, u64, u64)> {
    let agents = agents(client, db, campaign_id).await?;
    anyhow::ensure!(
        !agents.is_empty(),
        "campaign {campaign_id:?} has no agent rows in {db}.agents (unknown, or not finished yet)"
    );
    let counts = counts(client, db, campaign_id).await?;
    let mut lines = Vec::new();
    for a in agents {
        let c = counts
            .agents
            .iter()
            .find(|c| c.agent_id == a.agent_id)
            .cloned()
            .unwrap_or_default();
        let dup_requests: u64 = counts
            .duplicates
            .iter()
            .filter(|d| d.agent_id == a.agent_id && d.table == "requests")
            .map(|d| d.rows - d.distinct)
            .sum();
        let stored = c.request_rows - dup_requests;
        let why = not_verified(&a, c.batches);
        lines.push(VerifyLine {
            verified: why.is_empty(),
            not_verified: why,
            agent_id: a.agent_id.clone(),
            reported_records: a.records,
            stored_records: stored,
            lost: a.records.saturating_sub(stored),
            duplicated: c.duplicate_rows,
            measured_twice: c.measured_twice,
            missing_seqs: c.missing_seqs.clone(),
            missing_seqs_more: c.missing_seqs_more,
        });
    }
    let lost = lines.iter().map(|l| l.lost).sum();
    let duplicated = lines.iter().map(|l| l.duplicated).sum();
    Ok((lines, lost, duplicated))
}

/// Why `campaign verify` cannot vouch for the agent of `row` (empty: nothing against it),
/// given the distinct batch seqs of it stored in ClickHouse (`stored_batches`). An agent is
/// not verified when a batch of it was refused or quarantined, when records or histograms
/// were quarantined, when its done notice never arrived, or when fewer batches are stored
/// than it announced (some still pending in its spool or the coordinator's).
pub fn not_verified(row: &AgentRow, stored_batches: u64) -> Vec<String> {
    let mut why = Vec::new();
    if row.batches_rejected > 0 {
        let listed: Vec<String> = row
            .rejected_seqs
            .iter()
            .zip(&row.rejected_reasons)
            .map(|(seq, reason)| format!("seq {seq} ({reason})"))
            .collect();
        let more = (row.batches_rejected as usize).saturating_sub(listed.len());
        why.push(format!(
            "{} batch(es) refused by the coordinator or quarantined by the agent, not stored: {}{}",
            row.batches_rejected,
            listed.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        ));
    }
    if row.records_quarantined > 0 || row.histograms_quarantined > 0 {
        why.push(format!(
            "{} record(s) and {} histogram(s) quarantined by the agent as too large to send",
            row.records_quarantined, row.histograms_quarantined
        ));
    }
    if row.campaign_done == 0 {
        why.push(
            "no done notice from the agent: its last batches may still be pending in its spool"
                .into(),
        );
    } else {
        let accounted = stored_batches.saturating_add(row.batches_rejected);
        if row.last_seq > accounted {
            why.push(format!(
                "{} of its {} batches not stored: still pending (agent or coordinator spool) or lost",
                row.last_seq - accounted,
                row.last_seq
            ));
        }
    }
    why
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row() -> AgentRow {
        AgentRow {
            campaign_id: "c".into(),
            agent_id: "a1".into(),
            region: "r".into(),
            version: "v".into(),
            clock_offset_us: 0,
            clock_uncertainty_us: 0,
            seen_at: 0,
            seen_at_us: 0,
            records: 10,
            batches: 3,
            skipped: 0,
            complete: true,
            campaign_done: 1,
            last_seq: 3,
            batches_rejected: 0,
            rejected_seqs: Vec::new(),
            rejected_reasons: Vec::new(),
            records_quarantined: 0,
            histograms_quarantined: 0,
        }
    }

    #[test]
    fn an_agent_is_verified_only_when_every_announced_batch_is_stored() {
        assert!(not_verified(&row(), 3).is_empty());
        let why = not_verified(&row(), 2);
        assert_eq!(why.len(), 1);
        assert!(
            why[0].starts_with("1 of its 3 batches not stored"),
            "{why:?}"
        );
        let no_done = AgentRow {
            campaign_done: 0,
            last_seq: 0,
            ..row()
        };
        assert!(not_verified(&no_done, 3)[0].starts_with("no done notice"));
    }

    #[test]
    fn refused_and_quarantined_batches_are_named() {
        let r = AgentRow {
            batches_rejected: 3,
            rejected_seqs: vec![1, 2],
            rejected_reasons: vec!["http_status 799 is not an HTTP status".into(), "x".into()],
            records_quarantined: 1,
            ..row()
        };
        // Seqs 1-3 accounted for with one stored and 3 refused (one of them not listed).
        let why = not_verified(&r, 1);
        assert_eq!(why.len(), 2, "{why:?}");
        assert_eq!(
            why[0],
            "3 batch(es) refused by the coordinator or quarantined by the agent, not stored: seq 1 (http_status 799 is not an HTTP status), seq 2 (x) and 1 more"
        );
        assert!(why[1].starts_with("1 record(s) and 0 histogram(s) quarantined"));
    }
}
