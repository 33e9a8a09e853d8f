//! Queries: the region × provider matrix ([`matrix`]), the outcome mix ([`errors`]), peak vs
//! off-peak ([`windows`]), a provider's trend ([`trend`]), a campaign's concurrency sweeps
//! step by step ([`sweep`]), stored campaigns and agents, and row counts for
//! `latmesh campaign verify` ([`counts`]).
//!
//! Percentiles are exact over any grouping. The matrix and the sweeps rebuild each group's
//! merged histogram ([`merged_histograms`]: every stored bucket summed per value in SQL,
//! recorded into an HdrHistogram of the agents' bounds; a stored value is its bucket's highest
//! equivalent, so the buckets and counts are the coordinator's) and take their percentiles,
//! sample counts and intervals from it exactly as the coordinator's summary does
//! ([`Percentiles::of_list`](latmesh_results::summary::Percentiles::of_list)) — never an average of percentiles. Counts are summed in Rust
//! from one `GROUP BY region, provider, scenario, outcome`, so the `ALL` rows are exact sums.
//! No query needs `FINAL` (see the de-duplication guarantee in [`super::insert`]).
//!
//! Time windows ([`windows`]) and trends ([`trend`]) use `quantileExactWeighted(q)(value,
//! weight)` over `ARRAY JOIN values AS value, counts AS weight` (which equals HdrHistogram's
//! `value_at_quantile` of the merged histograms), grouped by the stored `window` label or by a
//! time bucket on the coordinator's clock. Local hours
//! are computed in SQL from each region's zone ([`local_hour_sql`]); there is no local-hour
//! column.
//!
//! One file per question: [`filter`](QueryFilter) (which rows, and the SQL pieces built from
//! it), `histograms` (merged histograms), `matrix`, `errors` (outcome mix), `campaign`
//! (stored campaign, plan and agents), `verify` (row counts), `sweep`, `grouped` (the engine
//! of `windows` and `trend`), `percentile`, `windows`, `trend`, `summary` (a stored
//! campaign's summary), `report_data` (a stored campaign's report data and what only
//! ClickHouse keeps), `window_ranks` (provider ranks per region and time window), `compat`
//! (what `latmesh compat` stored for a campaign), `answered` (the models and fingerprints
//! answered, with the time each was first seen).

mod answered;
mod campaign;
mod compat;
mod errors;
mod filter;
mod grouped;
mod histograms;
mod matrix;
mod percentile;
mod report_data;
mod slo;
mod summary;
mod sweep;
mod tiers;
mod trend;
mod verify;
mod window_ranks;
mod windows;

pub use answered::{AnsweredName, NameColumn, answered_names};
pub use campaign::{agents, campaign, stored_plan, stored_window_spec};
pub use compat::{RunPart, RunScope, StoredRun, compat_report, latest_run, run_samples};
pub use errors::{ErrorRow, errors};
pub use filter::QueryFilter;
pub use grouped::GroupStat;
pub use histograms::{HistGroup, merged_histograms};
pub use matrix::{MatrixRow, matrix, matrix_filtered, matrix_percentiles};
pub use percentile::Percentile;
pub use report_data::{Extras, TimePoint, TimeSeries, extras, report_data};
pub use slo::{rate_steps, searches};
pub use summary::stored_summary;
pub use sweep::sweep;
pub use tiers::{tiers, token_counts};
pub use trend::{TrendBucket, TrendReport, TrendRow, local_hour_sql, trend};
pub use verify::{
    AgentCounts, BatchDuplicates, CampaignCounts, VerifyLine, counts, not_verified, verify,
};
pub use window_ranks::{add_window_ranks, from_windows_report, window_ranks};
pub use windows::{WindowStat, WindowsReport, WindowsRow, windows};
