//! What a slot shares with its campaign run ([`SlotEnv`]), and the in-flight count of its
//! attempts ([`InFlight`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::limits::Limiters;
use crate::shaping::Shaping;

use super::cancel::Cancel;
use super::synth::SynthPrompts;

/// What a slot shares with its campaign run: the cancel switch, the grace after it, and the
/// agent's in-flight counter.
#[derive(Clone, Debug, Default)]
pub struct SlotEnv {
    /// The campaign's cancel switch.
    pub cancel: Cancel,
    /// How long attempts in flight may run on after a cancel.
    pub cancel_grace: Duration,
    /// Attempts in flight (incremented while an attempt runs).
    pub in_flight: Arc<AtomicU32>,
    /// Politeness caps per provider (none by default).
    pub limits: Arc<Limiters>,
    /// Secret headers and `stream_options` refusals per provider (none by default:
    /// secrets are then read per slot).
    pub shaping: Arc<Shaping>,
    /// The agent's region: part of every generated prompt's request key
    /// ([`latmesh_core::synth::RequestKey`]). Empty by default.
    pub region: Arc<str>,
    /// The run's generated prompts, built once per tier ([`SynthPrompts`]).
    pub synth: Arc<SynthPrompts>,
}

/// Decrements the in-flight counter when the attempt ends (or is dropped).
pub(super) struct InFlight<'a>(&'a AtomicU32);

impl<'a> InFlight<'a> {
    pub(super) fn start(n: &'a AtomicU32) -> Self {
        n.fetch_add(1, Ordering::SeqCst);
        InFlight(n)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}
