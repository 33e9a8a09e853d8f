//! What latmesh's agent and coordinator share: the campaign plan and its validation, the
//! measurement record, metric definitions, HDR histogram sets and the sparse decoding of their
//! blobs, clock-offset estimation, named local-time windows, schedules of repeated campaigns,
//! the budget estimate, and conversions to and from the wire types.
//!
//! Pure: no network, no async.

pub mod answered_model;
pub mod api;
pub mod budget;
pub mod campaign;
pub mod clock;
pub mod compat;
pub mod duration;
pub mod error_text;
pub mod hist;
pub mod load;
pub mod log_limit;
pub mod logging;
pub mod metrics;
pub mod output_tokens;
pub mod plan;
pub mod prompts;
pub mod proportion;
pub mod provider_bounds;
pub mod quality;
pub mod record;
pub mod sample_size;
pub mod schedule;
pub mod seeded_rng;
pub mod selection;
pub mod shaping;
pub mod slo;
pub mod suggest;
pub mod synth;
pub mod windows;
pub mod wire;
pub mod yaml_keys;

/// `LATMESH_*` environment overrides of campaign files, at their former path (now
/// [`campaign::env_overrides`]).
pub use campaign::env_overrides;
/// The sparse histogram decoder, at its former path (now [`hist::sparse`]).
pub use hist::sparse as hist_sparse;
