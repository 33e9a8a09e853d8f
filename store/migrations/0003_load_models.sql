-- latmesh schema, version 3 (metrics_version 3): load models (docs/metrics.md, "Load models").
-- Requests carry the load model that scheduled them and, for closed-loop sweeps, the
-- concurrency step; histograms are kept per sweep step. Same rules as 0001_init.sql; an ADD
-- COLUMN whose column exists is skipped by the migrator.

-- rounds | sweep | rate (rows written before version 3 read back as rounds)
ALTER TABLE {db}.{table:requests} {on_cluster} ADD COLUMN load String DEFAULT 'rounds';
-- sweep: index of the concurrency step (0-based) and its target concurrency; 0 otherwise
ALTER TABLE {db}.{table:requests} {on_cluster} ADD COLUMN step UInt32 DEFAULT 0;
ALTER TABLE {db}.{table:requests} {on_cluster} ADD COLUMN concurrency UInt32 DEFAULT 0;
-- 1: the attempt is part of a client request through a failover chain (a scenario's failover)
ALTER TABLE {db}.{table:requests} {on_cluster} ADD COLUMN failover UInt8 DEFAULT 0;
ALTER TABLE {db}.{table:histograms} {on_cluster} ADD COLUMN step UInt32 DEFAULT 0;
