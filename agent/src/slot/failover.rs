//! Where the next attempt of a logical request goes: the same target after the scenario's
//! retry wait ([`Again::Retry`]), or along the failover chain ([`Again::Failover`]).

use std::time::Duration;

use latmesh_core::plan::{FailoverSpec, RetryPolicy};
use latmesh_core::record::Outcome;

use crate::probe::ProbeRequest;

/// Where an attempt of a logical request goes.
pub(super) struct Target<'a> {
    /// Index into the plan's providers.
    pub(super) provider: usize,
    /// Its name (the record's `provider`).
    pub(super) name: &'a str,
    /// The request.
    pub(super) req: ProbeRequest<'a>,
}

/// What follows an attempt that did not end the logical request.
#[derive(Clone, Copy)]
pub(super) enum Again<'a> {
    /// The scenario's retries: the same target, after the policy's wait.
    Retry(Option<&'a RetryPolicy>),
    /// Failover: the same target while it has attempts left, then the next one, at once.
    Failover(&'a FailoverSpec),
}

impl Again<'_> {
    /// After attempt `attempt` (the `tries`-th at target `pos` of `targets`) ended with
    /// `outcome`: the next target and the wait before it, or `None` (the attempt is final).
    pub(super) fn next(
        self,
        attempt: u32,
        tries: u32,
        pos: usize,
        targets: usize,
        outcome: Outcome,
        retry_after_s: Option<f64>,
    ) -> Option<(usize, Duration)> {
        match self {
            Again::Retry(retry) => retry.filter(|p| p.retries(attempt, outcome)).map(|p| {
                (
                    pos,
                    Duration::from_millis(p.wait_ms(attempt, retry_after_s)),
                )
            }),
            Again::Failover(f) if f.on.contains(&outcome) => {
                if tries < f.attempts {
                    Some((pos, Duration::ZERO))
                } else if pos + 1 < targets {
                    Some((pos + 1, Duration::ZERO))
                } else {
                    None
                }
            }
            Again::Failover(_) => None,
        }
    }
}
