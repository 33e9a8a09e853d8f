//! The "what answered" lines of the campaign summary: providers that answered with another
//! model than asked, or whose model or `system_fingerprint` changed.

use std::fmt::Write as _;

use latmesh_results::model_stats::ModelRow;

/// The terminal lines of the flagged rows (empty when nothing is flagged).
pub fn render(rows: &[ModelRow]) -> String {
    let mut out = String::new();
    let flagged: Vec<&ModelRow> = rows.iter().filter(|r| !r.flags().is_empty()).collect();
    if flagged.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "\nwhat answered (attempts, all regions and scenarios):"
    );
    for r in flagged {
        for f in r.flags() {
            let _ = writeln!(out, "  {:<20} {f}", r.provider);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use latmesh_results::fixtures::{spec, swapped};
    use latmesh_results::model_stats::model_rows;

    #[test]
    fn flagged_rows_are_listed_under_what_answered() {
        let providers = [spec("openai", "gpt-4o", None)];
        let rows = model_rows(&providers, &swapped());
        let text = render(&rows);
        assert!(text.contains("what answered"), "{text}");
        assert!(
            text.contains("openai               answered with another model"),
            "{text}"
        );
        assert_eq!(render(&rows[..0]), "");
    }
}
