-- latmesh schema, version 2 (metrics_version 2): the measurement-truth fields of a request
-- (docs/metrics.md): retries and the logical request, multi-turn index, cache nonce,
-- connection phases, first body byte, reasoning time, usage-vs-chunk discrepancy, error code.
-- Same rules as 0001_init.sql; an ADD COLUMN whose column exists is skipped by the migrator.

ALTER TABLE {db}.{table:requests} {on_cluster} ADD COLUMN final_attempt UInt8 DEFAULT 1;
ALTER TABLE {db}.{table:requests} {on_cluster} ADD COLUMN request_latency_us Nullable(UInt64);
ALTER TABLE {db}.{table:requests} {on_cluster} ADD COLUMN turn UInt32 DEFAULT 1;
ALTER TABLE {db}.{table:requests} {on_cluster} ADD COLUMN cache_nonce UInt8 DEFAULT 0;
ALTER TABLE {db}.{table:requests} {on_cluster} ADD COLUMN conn_reused UInt8 DEFAULT 0;
-- connection phases of a new connection, µs (NULL when the connection was reused)
ALTER TABLE {db}.{table:requests} {on_cluster} ADD COLUMN dns_us Nullable(UInt64);
ALTER TABLE {db}.{table:requests} {on_cluster} ADD COLUMN connect_us Nullable(UInt64);
ALTER TABLE {db}.{table:requests} {on_cluster} ADD COLUMN tls_us Nullable(UInt64);
-- µs from t_send
ALTER TABLE {db}.{table:requests} {on_cluster} ADD COLUMN first_byte_us Nullable(UInt64);
ALTER TABLE {db}.{table:requests} {on_cluster} ADD COLUMN first_nonblank_us Nullable(UInt64);
-- ttfc - ttft when reasoning came first, µs
ALTER TABLE {db}.{table:requests} {on_cluster} ADD COLUMN reasoning_us Nullable(UInt64);
ALTER TABLE {db}.{table:requests} {on_cluster} ADD COLUMN token_payloads UInt32 DEFAULT 0;
-- usage.completion_tokens - token_payloads
ALTER TABLE {db}.{table:requests} {on_cluster} ADD COLUMN usage_chunk_delta Nullable(Int64);
ALTER TABLE {db}.{table:requests} {on_cluster} ADD COLUMN error_code Nullable(String);
