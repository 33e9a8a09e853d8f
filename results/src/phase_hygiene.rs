//! Phase hygiene in the summary (docs/metrics.md "Phase hygiene"): the cells whose phase
//! started while their provider still had the agents' requests of earlier phases in flight
//! (the drain allowance before the phase ended first), each described in one line. The
//! terminal and the HTML report show the same lines.

use crate::matrix::{ALL_REGIONS, MatrixCell};

/// One line per region cell (the `ALL` rows repeat them) whose phase started loaded, in the
/// cells' order: `budget in us-east, ctx.1k: its phase started with 12 of its requests of
/// earlier phases still in flight (on one agent); its figures may carry that load`.
pub fn loaded_starts(cells: &[MatrixCell]) -> Vec<String> {
    cells
        .iter()
        .filter(|c| c.region != ALL_REGIONS && c.phase_start_in_flight > 0)
        .map(|c| {
            format!(
                "{} in {}, {}: its phase started with {} of its requests of earlier phases still in flight (on one agent); its figures may carry that load",
                c.provider, c.region, c.scenario, c.phase_start_in_flight
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_region_cells_that_started_loaded_are_listed() {
        let mut a = crate::fixtures::cell("us-east", "budget", &[], &[]);
        a.phase_start_in_flight = 12;
        let mut all = a.clone();
        all.region = ALL_REGIONS.into();
        let idle = crate::fixtures::cell("us-east", "steady", &[], &[]);
        assert_eq!(
            loaded_starts(&[a, all, idle]),
            [
                "budget in us-east, s: its phase started with 12 of its requests of earlier phases still in flight (on one agent); its figures may carry that load"
            ]
        );
    }
}
