-- latmesh schema, version 8: request shaping (README "Request shaping", docs/metrics.md
-- "Output tokens"). Same rules as 0001_init.sql; an ADD COLUMN whose column exists is
-- skipped by the migrator.

-- 1: the request asked for usage, or its API reports usage unasked (every API but a Chat
-- Completions stream); 0: a Chat Completions stream sent without
-- stream_options.include_usage (stream_usage = "never", or "auto" after the provider refused
-- the field), whose output_tokens then come from counting payloads unless the provider sent
-- usage anyway. Rows written before version 8 read back as 1: latmesh always asked.
ALTER TABLE {db}.{table:requests} {on_cluster} ADD COLUMN usage_requested UInt8 DEFAULT 1;
