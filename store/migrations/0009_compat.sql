-- latmesh schema, version 9: what `latmesh compat` measured (docs/metrics.md, "Compatibility
-- checks", "Quality parity figures and the flag"): one row per check and provider, and one
-- row per quality sample, keyed by the run and the campaign they belong to. Same rules as
-- 0001_init.sql.
--
-- De-duplication: a run is written once (store::compat::insert_compat_run looks for its
-- run_id first and fences its inserts like a result batch's); a copy that still got in has
-- the same sorting key and partition as its twin (every row of a run carries the run's start
-- time) and ReplacingMergeTree drops it at the next merge.

CREATE TABLE IF NOT EXISTS {db}.{table:compat_results} {on_cluster}
(
    run_id String,
    campaign_id String,
    campaign_name String,
    -- where the checks ran from (the region label of `latmesh compat`)
    region String,
    provider String,
    -- chat | anthropic | responses
    api String,
    -- latmesh_core::compat::CompatCheck (snake_case) and Verdict
    `check` String,
    verdict String,
    -- the evidence: HTTP status of the deciding response, the field seen or missing, and a
    -- message (≤ 256 bytes, scrubbed of the key)
    http_status Nullable(UInt16),
    field Nullable(String),
    message String,
    checks_version UInt32,
    -- the run's start: UTC seconds and µs
    time DateTime,
    time_us UInt64
)
ENGINE = {engine:ReplacingMergeTree()}
PARTITION BY toYYYYMM(time)
ORDER BY (campaign_id, run_id, provider, region, `check`)
{shard_by:cityHash64(run_id)};

CREATE TABLE IF NOT EXISTS {db}.{table:quality_samples} {on_cluster}
(
    run_id String,
    campaign_id String,
    provider String,
    region String,
    -- the quality set's prompt id and the 0-based sample index
    prompt_id String,
    sample UInt32,
    -- ok, timeout_*, http_4xx, ... (only ok samples are graded)
    outcome String,
    -- 1 right, 0 wrong, NULL not graded
    correct Nullable(UInt8),
    -- the normalized final answer (≤ 64 bytes, scrubbed) and the hash of the whole of it
    answer String,
    answer_hash String,
    output_tokens UInt32,
    -- the `model` the provider answered with, when sent
    answered_model Nullable(String),
    -- latmesh_core::quality::QUALITY_SET_VERSION
    quality_set String,
    -- the run's start: UTC seconds and µs
    time DateTime,
    time_us UInt64
)
ENGINE = {engine:ReplacingMergeTree()}
PARTITION BY toYYYYMM(time)
ORDER BY (campaign_id, run_id, provider, region, prompt_id, sample)
{shard_by:cityHash64(run_id)};
