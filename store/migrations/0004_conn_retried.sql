-- latmesh schema, version 4: connection retries (docs/metrics.md, "Outcomes"). Same rules as
-- 0001_init.sql; an ADD COLUMN whose column exists is skipped by the migrator.

-- 1: the attempt was first sent on a pooled connection that failed before any byte of its
-- response arrived, and was sent again at once on a new connection (rows written before
-- version 4 read back as 0)
ALTER TABLE {db}.{table:requests} {on_cluster} ADD COLUMN conn_retried UInt8 DEFAULT 0;
