//! The run's collector: receives every record as it is measured, keeps the interval's
//! histograms, and seals numbered batches into the [`Outbox`] every `flush_interval`.

use std::sync::Arc;
use std::time::Duration;

use latmesh_core::hist::HistogramSet;
use latmesh_core::record::{Outcome, ProbeRecord};
use latmesh_core::wire;
use latmesh_proto::pb;
use tokio::sync::mpsc;

use crate::clock::now_unix_us;
use crate::drain::PhaseFlags;
use crate::metrics::AgentMetrics;
use crate::outbox::Outbox;

/// Receives finished probes, stamps each with its phase's flag (`flags`: requests of earlier
/// phases in flight at its phase's start), records histograms, and seals a batch every
/// `flush_interval` (and at the end), numbering batches from `first_seq`. Returns (last seq,
/// probes).
pub(super) async fn collect(
    campaign_id: String,
    mut rx: mpsc::Receiver<(ProbeRecord, Vec<u64>)>,
    outbox: Outbox,
    flush_interval: Duration,
    first_seq: u64,
    metrics: AgentMetrics,
    flags: Arc<PhaseFlags>,
) -> (u64, u64) {
    let mut hists = HistogramSet::new();
    let mut records: Vec<ProbeRecord> = Vec::new();
    let (mut seq, mut probes) = (first_seq - 1, 0u64);
    let mut interval_start = now_unix_us();
    let mut tick = tokio::time::interval(flush_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            got = rx.recv() => match got {
                Some((mut rec, gaps)) => {
                    probes += 1;
                    rec.phase_start_in_flight = flags.get(&rec.scenario, &rec.provider);
                    if rec.outcome() != Outcome::Ok {
                        tracing::debug!(provider = %rec.provider, outcome = %rec.outcome(), "probe not ok");
                    }
                    hists.record_probe(&rec, &gaps);
                    metrics.record(&rec);
                    records.push(rec);
                }
                None => break,
            },
            _ = tick.tick() => seal(&campaign_id, &outbox, &mut hists, &mut records, &mut interval_start, &mut seq).await,
        }
    }
    seal(
        &campaign_id,
        &outbox,
        &mut hists,
        &mut records,
        &mut interval_start,
        &mut seq,
    )
    .await;
    (seq, probes)
}

/// Seals what was collected since `interval_start` as batches `seq + 1`, `seq + 2`, … into the
/// outbox (nothing when nothing was collected): as many as keep each under
/// [`wire::MAX_BATCH_BYTES`] encoded ([`crate::batches`]); a record or histogram larger than
/// that alone is quarantined, not sent. Encoding the interval histograms (V2 + DEFLATE, tens
/// of ms for a busy interval) runs on a blocking thread, so the schedulers on this runtime
/// keep sending on time; batches still enter the outbox in `seq` order (the collector awaits
/// each seal).
async fn seal(
    campaign_id: &str,
    outbox: &Outbox,
    hists: &mut HistogramSet,
    records: &mut Vec<ProbeRecord>,
    interval_start: &mut i64,
    seq: &mut u64,
) {
    if records.is_empty() && hists.is_empty() {
        return;
    }
    // Never before the interval's start: a wall clock stepped back (an NTP step) during the
    // interval must not make it end before it starts (the coordinator refuses such a batch).
    let end = now_unix_us().max(*interval_start);
    let (start, drained, recs) = (*interval_start, hists.drain(), std::mem::take(records));
    let (campaign, first_seq) = (campaign_id.to_string(), *seq + 1);
    let build = move || {
        crate::batches::split(
            &campaign,
            first_seq,
            drained
                .iter()
                .filter_map(|(k, h)| wire::histogram_to_pb(k, h, start, end).ok())
                .collect(),
            recs.iter().map(pb::ProbeRecord::from).collect(),
            wire::MAX_BATCH_BYTES,
        )
    };
    let split = match tokio::task::spawn_blocking(build).await {
        Ok(split) => split,
        Err(e) => {
            tracing::error!(error = %e, seq = first_seq, "sealing a batch failed");
            return;
        }
    };
    if let Some(oversized) = split.oversized {
        outbox.quarantine_oversized(oversized);
    }
    for batch in split.batches {
        *seq = batch.seq;
        outbox.push(batch);
    }
    *interval_start = end;
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    /// The attack: one record with a 3 MB finish_reason among ordinary ones. Sealed,
    /// no batch passes the budget; the huge record is quarantined and reported, the others
    /// are sent.
    #[tokio::test]
    async fn a_huge_record_is_quarantined_and_the_interval_still_sent_within_the_budget() {
        let record = |slot: u32, finish: usize| ProbeRecord {
            provider: "p".into(),
            scenario: "s".into(),
            outcome: Some(Outcome::Ok),
            slot,
            finish_reason: Some("x".repeat(finish)),
            ..Default::default()
        };
        let mut records: Vec<ProbeRecord> = (0..2000).map(|i| record(i, 1000)).collect();
        records.insert(7, record(9999, 3 << 20));
        let outbox = Outbox::default();
        let (mut hists, mut start, mut seq) = (HistogramSet::new(), 0i64, 4u64);
        seal("c", &outbox, &mut hists, &mut records, &mut start, &mut seq).await;
        let sent = outbox.take_pending().batches;
        assert!(sent.len() >= 2, "{} batches", sent.len());
        assert_eq!(
            sent.iter().map(|b| b.seq).collect::<Vec<_>>(),
            (5..=seq).collect::<Vec<_>>(),
            "consecutive seqs from the next one"
        );
        for b in &sent {
            use prost::Message;
            assert!(b.encoded_len() <= wire::MAX_BATCH_BYTES, "seq {}", b.seq);
        }
        let slots: Vec<u32> = sent
            .iter()
            .flat_map(|b| b.records.iter().map(|r| r.slot))
            .collect();
        assert_eq!(slots, (0..2000).collect::<Vec<_>>());
        let q = outbox.quarantined("c");
        assert_eq!((q.records, q.histograms, q.seqs.len()), (1, 0, 0));
    }

    /// A wall clock stepped back during an interval (its start is later than now) seals an
    /// interval that ends where it starts, never before (the coordinator refuses those).
    #[tokio::test]
    async fn an_interval_never_ends_before_it_starts_when_the_clock_steps_back() {
        use latmesh_core::hist::HistKey;
        use latmesh_core::metrics::Metric;
        let mut hists = HistogramSet::new();
        let key = HistKey {
            provider: "p".into(),
            scenario: "s".into(),
            metric: Metric::Ttft,
            step: 0,
        };
        hists.record(key, 40_000);
        let outbox = Outbox::default();
        let ahead = now_unix_us() + 3_600_000_000;
        let (mut start, mut seq) = (ahead, 0u64);
        seal(
            "c",
            &outbox,
            &mut hists,
            &mut Vec::new(),
            &mut start,
            &mut seq,
        )
        .await;
        let sent = outbox.take_pending().batches;
        let h = &sent[0].histograms[0];
        assert_eq!((h.start_agent_unix_us, h.end_agent_unix_us), (ahead, ahead));
        assert_eq!(
            start, ahead,
            "the next interval starts where this one ended"
        );
    }

    /// Sealing a busy interval (hundreds of histograms to encode) must not hold up the other
    /// tasks of the runtime: on a single-threaded runtime, a timer task keeps firing on time
    /// while the collector seals.
    #[tokio::test(flavor = "current_thread")]
    async fn sealing_a_batch_does_not_block_the_schedulers() {
        use latmesh_core::hist::HistKey;
        use latmesh_core::metrics::Metric;
        let mut hists = HistogramSet::new();
        for p in 0..40 {
            for metric in Metric::ALL {
                for v in 0..2_000u64 {
                    let key = HistKey {
                        provider: format!("p{p}"),
                        scenario: "s".into(),
                        metric,
                        step: 0,
                    };
                    hists.record(key, 1 + v * v * 997);
                }
            }
        }
        // What encoding alone costs on this thread.
        let t = Instant::now();
        let copy = hists.clone().drain();
        for (k, h) in &copy {
            wire::histogram_to_pb(k, h, 0, 1).unwrap();
        }
        let encode = t.elapsed();
        // Meanwhile, a 1 ms ticker measures how late it gets to run.
        let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
        let ticker = tokio::spawn(async move {
            let mut worst = Duration::ZERO;
            let mut next = Instant::now();
            loop {
                next += Duration::from_millis(1);
                tokio::time::sleep_until(next.into()).await;
                worst = worst.max(Instant::now().saturating_duration_since(next));
                if stop_rx.try_recv().is_ok() {
                    return worst;
                }
            }
        });
        tokio::task::yield_now().await;
        let outbox = Outbox::default();
        let (mut records, mut start, mut seq) = (Vec::new(), 0i64, 0u64);
        seal("c", &outbox, &mut hists, &mut records, &mut start, &mut seq).await;
        let _ = stop_tx.send(());
        let worst = ticker.await.unwrap();
        assert_eq!(seq, 1);
        assert_eq!(
            outbox.take_pending().batches[0].histograms.len(),
            40 * Metric::ALL.len()
        );
        assert!(
            worst < encode / 2,
            "a task waited {worst:?} while the batch was sealed (encoding takes {encode:?})"
        );
    }
}
