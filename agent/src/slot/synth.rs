//! The generated prompts of a run's tier scenarios ([`SynthPrompts`]): each tier's prefix and
//! body built once per run (`latmesh_core::synth`), so a request costs one copy of its text,
//! never a regeneration.

use std::sync::{Arc, Mutex};

use latmesh_core::plan::Plan;
use latmesh_core::synth::{SynthPrompt, SynthSpec};

/// Built [`SynthPrompt`]s, by text seed ([`Plan::text_seed`]: the plan's seed and the run's
/// salt) and tier spec. The runner builds every tier of its
/// plan before the campaign starts ([`SynthPrompts::prepare`]); a tier asked for that was not
/// prepared (a slot run on its own, in tests) is built on first use and kept.
#[derive(Debug, Default)]
pub struct SynthPrompts {
    built: Mutex<Vec<(u64, Arc<SynthPrompt>)>>,
}

impl SynthPrompts {
    /// Builds every tier scenario's prompt of `plan` (O(its input tokens) each).
    pub fn prepare(&self, plan: &Plan) {
        for s in &plan.scenarios {
            if let Some(spec) = &s.synth {
                self.get(plan.text_seed(spec), spec);
            }
        }
    }

    /// The built prompt of `spec` under text seed `seed` ([`Plan::text_seed`]; built now if it
    /// was not yet).
    pub fn get(&self, seed: u64, spec: &SynthSpec) -> Arc<SynthPrompt> {
        let mut built = self.built.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, p)) = built.iter().find(|(s, p)| *s == seed && p.spec() == spec) {
            return p.clone();
        }
        let p = Arc::new(SynthPrompt::build(seed, spec));
        built.push((seed, p.clone()));
        p
    }

    /// How many tiers are built.
    pub fn len(&self) -> usize {
        self.built.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether none is built.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
