-- latmesh schema, version 10: generated prompts, warm-up, TTST, rate steps and SLOs
-- (docs/metrics.md "Generated prompts", "TTST", "SLOs and goodput", "Rate steps and the SLO
-- search"). Same rules as 0001_init.sql; an ADD COLUMN whose column exists is skipped by the
-- migrator. Rows written before version 10 read back as: a prompt-set prompt (0), not a
-- warm-up, no TTST, no step rate, no SLO.

-- a generated prompt: the input tokens asked for (the tier); 0: a prompt of the prompt set
ALTER TABLE {db}.{table:requests} {on_cluster} ADD COLUMN input_tokens UInt32 DEFAULT 0;
-- a warm-up request: stored, left out of every statistic
ALTER TABLE {db}.{table:requests} {on_cluster} ADD COLUMN warmup UInt8 DEFAULT 0;
-- time to second token: the second token-bearing payload, µs from t_send
ALTER TABLE {db}.{table:requests} {on_cluster} ADD COLUMN ttst_us Nullable(UInt64);
-- rate scenarios: the arrival rate of the record's step, requests/s per provider and agent
ALTER TABLE {db}.{table:requests} {on_cluster} ADD COLUMN target_rps Float64 DEFAULT 0;
-- final attempt of a scenario with an SLO: 1 when the request met every per-request bound
ALTER TABLE {db}.{table:requests} {on_cluster} ADD COLUMN slo_met Nullable(UInt8);
