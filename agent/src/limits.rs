//! Politeness per provider, enforced in each agent: most requests in flight, requests and
//! tokens per minute (this agent's share of the campaign's caps), the least gap between two
//! sends, and Retry-After pauses. See `latmesh_core::load::ProviderLimits`.
//!
//! STUB (being written): every acquire succeeds at once.

use std::time::Instant;

use latmesh_core::plan::Plan;

/// The limiters of one campaign run, one per provider of its plan.
#[derive(Debug, Default)]
pub struct Limiters {}

/// Held while a request is in flight; dropping it frees the provider's in-flight slot.
#[derive(Debug)]
pub struct Permit {}

impl Limiters {
    /// Limiters for `plan`'s providers, this agent's share when `agents` agents run it.
    pub fn new(plan: &Plan, agents: u32) -> Limiters {
        let _ = (plan, agents);
        Limiters {}
    }

    /// Waits until provider `provider` may send a request of about `tokens` tokens (a free
    /// in-flight slot, requests/min and tokens/min budget, its least gap since the last send,
    /// no Retry-After pause). `None` when `deadline` comes first (nothing is taken then).
    pub async fn acquire(
        &self,
        provider: usize,
        tokens: u32,
        deadline: Option<Instant>,
    ) -> Option<Permit> {
        let _ = (provider, tokens, deadline);
        Some(Permit {})
    }

    /// A throttled answer's Retry-After: no request to `provider` starts before `until`
    /// (only for providers with caps configured: politeness is opt-in).
    pub fn pause(&self, provider: usize, until: Instant) {
        let _ = (provider, until);
    }

    /// Whether `provider` has any cap configured.
    pub fn is_limited(&self, provider: usize) -> bool {
        let _ = provider;
        false
    }
}
