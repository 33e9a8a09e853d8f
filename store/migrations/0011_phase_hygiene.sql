-- latmesh schema, version 12: phase hygiene (docs/metrics.md "Phase hygiene"). Same rules as
-- 0001_init.sql; an ADD COLUMN whose column exists is skipped by the migrator. Rows written
-- before version 12 read back as a phase that started with its provider idle (0).

-- requests of this provider from earlier phases still in flight on the agent when the
-- record's phase started (the drain allowance ended first); 0: it started idle
ALTER TABLE {db}.{table:requests} {on_cluster} ADD COLUMN phase_start_in_flight UInt32 DEFAULT 0;
