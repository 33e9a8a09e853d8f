-- latmesh schema, version 7: what became of an agent's batches besides being stored (README
-- "Failure semantics"), read by `latmesh campaign verify`. Same rules as 0001_init.sql; an ADD
-- COLUMN whose column exists is skipped by the migrator.

-- 1 when the agent's done notice arrived; rows written before version 7 read back as 1 with
-- last_seq 0, so verify checks them as it did then
ALTER TABLE {db}.{table:agents} {on_cluster} ADD COLUMN campaign_done UInt8 DEFAULT 1;
-- seq of the agent's last batch, from its done notice (0: none, or a row before version 7)
ALTER TABLE {db}.{table:agents} {on_cluster} ADD COLUMN last_seq UInt64 DEFAULT 0;
-- batches refused by the coordinator as malformed or quarantined by the agent unsent (none
-- is stored), and the first 16 of them: seqs and reasons (≤ 256 bytes each), same order
ALTER TABLE {db}.{table:agents} {on_cluster} ADD COLUMN batches_rejected UInt64 DEFAULT 0;
ALTER TABLE {db}.{table:agents} {on_cluster} ADD COLUMN rejected_seqs Array(UInt64);
ALTER TABLE {db}.{table:agents} {on_cluster} ADD COLUMN rejected_reasons Array(String);
-- records and histograms the agent quarantined as too large for any batch (never sent)
ALTER TABLE {db}.{table:agents} {on_cluster} ADD COLUMN records_quarantined UInt64 DEFAULT 0;
ALTER TABLE {db}.{table:agents} {on_cluster} ADD COLUMN histograms_quarantined UInt64 DEFAULT 0;
