//! The report's phase hygiene section: the cells whose phase started with their provider still
//! loaded by earlier phases' requests ([`latmesh_results::phase_hygiene::loaded_starts`]).

use maud::{Markup, html};

use crate::model::ReportModel;

/// The section's body: one item per cell that started loaded.
pub fn loaded_starts(m: &ReportModel) -> Markup {
    html! {
        p class="small" {
            "Each phase waits for the requests of earlier phases up to its planned start (the drain allowance); these started before they all ended:"
        }
        ul {
            @for line in latmesh_results::phase_hygiene::loaded_starts(&m.matrix) {
                li { (line) }
            }
        }
    }
}
