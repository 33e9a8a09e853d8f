-- latmesh schema, version 6: provider input bounds (docs/metrics.md, "Provider input bounds").
-- Same rules as 0001_init.sql; an ADD COLUMN whose column exists is skipped by the migrator.

-- the provider values that were cut, scrubbed, clamped or dropped on their way into the row,
-- by field name (finish_reason, error_message, usage.prompt_tokens, retry_after_s, ...); empty
-- when every value was kept as sent (and for rows written before version 6)
ALTER TABLE {db}.{table:requests} {on_cluster} ADD COLUMN cut_fields Array(String);
