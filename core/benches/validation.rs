//! Criterion benchmark of campaign validation at the documented maxima: what `latmesh campaign
//! validate` and `launch` compute before anything is sent (the file validated into a plan,
//! its probes per agent, planned duration and budget estimate), for an open-loop scenario at
//! 10 million arrivals per provider (`rps = 100000`, `duration_s = 100`, the most a rate
//! scenario may plan) next to the same plan at 100 arrivals.
//!
//! Target (issue 17): the largest plan validates in about the time of the smallest (no work
//! per planned arrival; it took 7 s with 2 providers and 23 s with 8 in a debug build when
//! every estimate generated the whole arrival sequence).
//!
//! ```sh
//! cargo bench -p latmesh-core --bench validation
//! ```

use std::hint::black_box;
use std::path::Path;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use latmesh_core::campaign::load_toml_str;
use latmesh_core::duration::PlannedDuration;

/// A campaign of one rate scenario at `rps` for 100 s (`arrivals`: constant or poisson),
/// eight providers.
fn campaign(rps: f64, arrivals: &str) -> String {
    let providers: String = (0..8)
        .map(|i| {
            format!(
                "[[providers]]\nname = \"p{i}\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel_id = \"m\"\nprice_input_usd_per_mtok = 1\nprice_output_usd_per_mtok = 2\n"
            )
        })
        .collect();
    format!(
        r#"[campaign]
name = "max"
regions = ["us-east"]

[[scenarios]]
name = "open"
prompt_ids = ["short-qa-en-*"]
max_tokens = 16
[scenarios.rate]
rps = {rps}
arrivals = "{arrivals}"
duration_s = 100

{providers}"#
    )
}

fn validation(c: &mut Criterion) {
    let mut group = c.benchmark_group("validate");
    for arrivals in ["constant", "poisson"] {
        for rps in [1.0, 100_000.0] {
            let text = campaign(rps, arrivals);
            group.bench_with_input(
                BenchmarkId::new(arrivals, format!("{} arrivals", rps * 100.0)),
                &text,
                |b, text| {
                    b.iter(|| {
                        let plan = load_toml_str(black_box(text), Path::new(".")).unwrap();
                        let probes = plan.probes_per_agent();
                        let duration = PlannedDuration::of(&plan);
                        let budget = latmesh_core::budget::estimate(&plan, 3);
                        black_box((probes, duration.total_us, budget))
                    })
                },
            );
        }
    }
    group.finish();
}

criterion_group!(benches, validation);
criterion_main!(benches);
