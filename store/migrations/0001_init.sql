-- latmesh schema, version 1: campaigns, agents, requests (one row per attempt) and
-- histograms (one row per interval histogram).
--
-- Applied by `latmesh db migrate` (coordinator/src/clickhouse/migrate.rs), which embeds this
-- file. Rules for every migration file (see ../README.md):
--   * plain SQL, one statement per `;`, `--` comments only;
--   * must run on ClickHouse 18.16 (Debian's package, used by the tests) AND on current
--     ClickHouse: no DateTime64, Map, TTL, CODEC, Bool, LowCardinality, `IF NOT EXISTS` on
--     columns; only the `ENGINE = X() [PARTITION BY ...] ORDER BY ...` form;
--   * placeholders, filled by the migrator:
--       {db}               the database name
--       {on_cluster}       empty, or `ON CLUSTER name` in cluster mode
--       {table:NAME}       NAME, or NAME_local in cluster mode (a Distributed table NAME is
--                          then created in front of it)
--       {engine:E(args)}   E(args), or ReplicatedE('/clickhouse/tables/{shard}/DB/NAME_local',
--                          '{replica}', args) in cluster mode
--       {shard_by:EXPR}    nothing; in cluster mode the sharding key of the Distributed table
--                          (deterministic, so a re-sent batch lands on the shard that already
--                          has it and ReplacingMergeTree collapses it there).
--
-- De-duplication: a row of `requests`/`histograms` is identified by
-- (campaign_id, agent_id, seq, row_index); its partition is a function of the row itself
-- (agent-clock time), so copies of one row always share partition and sorting key and
-- ReplacingMergeTree collapses them at merge time. The inserter also skips rows already present.

CREATE TABLE IF NOT EXISTS {db}.{table:campaigns} {on_cluster}
(
    campaign_id String,
    name String,
    -- latmesh_core::plan::Plan as JSON, and its hex SHA-256
    plan_json String,
    plan_hash String,
    metrics_version UInt32,
    seed UInt64,
    -- copied from the plan, so SQL needs no JSON functions (18.16 has no JSONExtract)
    regions Array(String),
    providers Array(String),
    scenarios Array(String),
    -- when the coordinator launched it (coordinator clock)
    launched_at DateTime,
    launched_at_us UInt64,
    -- when round 0 starts (coordinator clock), UTC µs
    start_at_us UInt64,
    created_by String
)
ENGINE = {engine:ReplacingMergeTree(launched_at_us)}
ORDER BY campaign_id
{shard_by:cityHash64(campaign_id)};

CREATE TABLE IF NOT EXISTS {db}.{table:agents} {on_cluster}
(
    campaign_id String,
    agent_id String,
    region String,
    -- latmesh-agent version
    version String,
    -- coordinator clock minus agent clock, µs, and its uncertainty (±µs)
    clock_offset_us Int64,
    clock_uncertainty_us UInt64,
    -- when this state was written (coordinator clock); the latest row per agent wins
    seen_at DateTime,
    seen_at_us UInt64,
    -- what the agent reported: records received, batches received, probes skipped,
    -- whether it delivered everything (for `latmesh campaign verify`)
    records UInt64,
    batches UInt64,
    skipped UInt64,
    complete UInt8
)
ENGINE = {engine:ReplacingMergeTree(seen_at_us)}
ORDER BY (campaign_id, agent_id)
{shard_by:cityHash64(campaign_id, agent_id)};

CREATE TABLE IF NOT EXISTS {db}.{table:requests} {on_cluster}
(
    campaign_id String,
    agent_id String,
    region String,
    -- the ResultBatch this row came in, and its index in the batch's records
    seq UInt64,
    row_index UInt32,
    round UInt32,
    slot UInt32,
    provider String,
    scenario String,
    prompt_id String,
    attempt UInt32,
    stream UInt8,
    -- wall clock at t_send: agent clock (seconds, and UTC µs), and corrected to the
    -- coordinator's clock with the batch's clock offset
    send_time DateTime,
    send_unix_us UInt64,
    send_coord_unix_us UInt64,
    clock_offset_us Int64,
    sched_lag_us Int64,
    -- ok, http_4xx, throttled, http_5xx, timeout_*, truncated, stream_error, ...
    outcome String,
    http_status Nullable(UInt16),
    -- durations in µs from t_send (DESIGN.md metric definitions, metrics_version 1)
    ttfb_us Nullable(UInt64),
    ttft_us Nullable(UInt64),
    ttfc_us Nullable(UInt64),
    e2e_us Nullable(UInt64),
    tpot_us Nullable(UInt64),
    -- tokens per second
    decode_tps Nullable(Float64),
    output_tokens UInt32,
    tokens_from_usage UInt8,
    content_chunks UInt32,
    reasoning_chunks UInt32,
    tool_call_chunks UInt32,
    prompt_tokens Nullable(UInt32),
    completion_tokens Nullable(UInt32),
    total_tokens Nullable(UInt32),
    reasoning_tokens Nullable(UInt32),
    cached_tokens Nullable(UInt32),
    finish_reason Nullable(String),
    saw_done UInt8,
    retry_after_s Nullable(Float64),
    error_type Nullable(String),
    error_message Nullable(String),
    itl_max_us Nullable(UInt64),
    comment_lines UInt32,
    response_bytes UInt64,
    -- named time window (e.g. peak / off-peak); '' when none
    `window` String DEFAULT ''
)
ENGINE = {engine:ReplacingMergeTree()}
PARTITION BY toYYYYMMDD(send_time)
ORDER BY (campaign_id, agent_id, seq, row_index)
{shard_by:cityHash64(campaign_id, agent_id)};

CREATE TABLE IF NOT EXISTS {db}.{table:histograms} {on_cluster}
(
    campaign_id String,
    agent_id String,
    region String,
    -- the ResultBatch this row came in, and its index in the batch's histograms
    seq UInt64,
    row_index UInt32,
    provider String,
    scenario String,
    -- ttfb, ttft, ttfc, e2e, tpot, itl (values in µs)
    metric String,
    -- the interval, agent clock (seconds, and UTC µs); coordinator clock = + clock_offset_us
    interval_start DateTime,
    start_unix_us UInt64,
    interval_end DateTime,
    end_unix_us UInt64,
    clock_offset_us Int64,
    -- values recorded in the interval
    `count` UInt64,
    -- one entry per non-empty HDR bucket, ascending: the bucket's highest equivalent value
    -- (what HdrHistogram's value_at_quantile reports) and its count; percentiles over any
    -- grouping: quantilesExactWeighted(0.5, 0.9, 0.99)(value, weight) with
    -- ARRAY JOIN `values` AS value, `counts` AS weight
    `values` Array(UInt64),
    `counts` Array(UInt64),
    -- the same histogram, HdrHistogram V2 + DEFLATE encoded
    hist_v2 String,
    `window` String DEFAULT ''
)
ENGINE = {engine:ReplacingMergeTree()}
PARTITION BY toYYYYMMDD(interval_start)
ORDER BY (campaign_id, agent_id, seq, row_index)
{shard_by:cityHash64(campaign_id, agent_id)};
