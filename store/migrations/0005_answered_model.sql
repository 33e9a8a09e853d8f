-- latmesh schema, version 5: what answered, and where a request's output token count came
-- from (docs/metrics.md, "Output tokens" and "What answered"). Same rules as 0001_init.sql;
-- an ADD COLUMN whose column exists is skipped by the migrator.

-- usage | usage_plus_reasoning | payloads | payloads_over_usage; rows written before version
-- 5 read as usage or payloads by tokens_from_usage (usage always won then)
ALTER TABLE {db}.{table:requests} {on_cluster} ADD COLUMN output_tokens_source String DEFAULT if(tokens_from_usage = 1, 'usage', 'payloads');
-- the first non-empty `model` and `system_fingerprint` of the response (≤ 128 bytes, scrubbed);
-- NULL when the provider sent none (and for rows written before version 5)
ALTER TABLE {db}.{table:requests} {on_cluster} ADD COLUMN answered_model Nullable(String);
ALTER TABLE {db}.{table:requests} {on_cluster} ADD COLUMN system_fingerprint Nullable(String);
