//! "Did you mean …?": the nearest valid name to a mistyped key, variable or value, for error
//! messages about files and settings (the campaign file's unknown keys and values, `LATMESH_*`
//! variables, any serde error naming an unknown field or variant: [`annotate_serde`]).

/// Levenshtein distance between `a` and `b`, case-insensitive (single-byte edits over ASCII
/// lower case; the names compared here are ASCII).
pub fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.to_ascii_lowercase(), b.to_ascii_lowercase());
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The candidate nearest to `name` by [`edit_distance`] (the first of equals), whatever the
/// distance; `None` when there are no candidates.
pub fn closest<'a, I>(name: &str, candidates: I) -> Option<&'a str>
where
    I: IntoIterator<Item = &'a str>,
{
    candidates
        .into_iter()
        .min_by_key(|c| edit_distance(name, c))
}

/// The candidate `name` was most likely meant to be, or `None` when none is near enough — a
/// suggestion that shares nothing with what was typed helps nobody. A candidate is near when
/// the whole candidate, or one of its `_`-separated words of 3 or more letters, is within a
/// third of the longer of the two names' lengths (at least 1, at most 3 edits) of `name`
/// (`sed` → `seed`, `limt` → `limit_ms`, `model` → `model_id`); the nearest wins, then the
/// shorter candidate, then the first.
pub fn did_you_mean<'a, I>(name: &str, candidates: I) -> Option<&'a str>
where
    I: IntoIterator<Item = &'a str>,
{
    let near = |target: &str| {
        let d = edit_distance(name, target);
        let bound = (name.len().max(target.len()) / 3).clamp(1, 3);
        (d <= bound).then_some(d)
    };
    candidates
        .into_iter()
        .enumerate()
        .filter_map(|(i, c)| {
            let whole = near(c);
            let word = c
                .split('_')
                .filter(|w| w.len() >= 3 && w.len() < c.len())
                .filter_map(near)
                .min();
            let d = whole.into_iter().chain(word).min()?;
            Some((d, c.len(), i, c))
        })
        .min()
        .map(|(_, _, _, c)| c)
}

/// ` (did you mean "NAME"?)` for the [`did_you_mean`] candidate, or an empty string: to
/// append to a message that rejects `name` ("\"jsonmod\" is not a check (did you mean
/// \"json_mode\"?)").
pub fn hint<'a, I>(name: &str, candidates: I) -> String
where
    I: IntoIterator<Item = &'a str>,
{
    did_you_mean(name, candidates)
        .map(|near| format!(" (did you mean {near:?}?)"))
        .unwrap_or_default()
}

/// `message` with a "did you mean" added where it is serde's standard unknown-field or
/// unknown-variant text (``unknown field `limt`, expected one of `limit_ms`, `metric` ``, as
/// serde's derive writes it for toml, serde_json and serde_yaml): the nearest expected name by
/// [`did_you_mean`], inserted after the unknown name. Any other message is returned as it is.
pub fn annotate_serde(message: &str) -> String {
    for what in ["unknown field `", "unknown variant `"] {
        let Some(at) = message.find(what) else {
            continue;
        };
        let name_start = at + what.len();
        let Some(name_len) = message[name_start..].find('`') else {
            continue;
        };
        let name = &message[name_start..name_start + name_len];
        let rest = &message[name_start + name_len + 1..];
        let Some(list) = rest.strip_prefix(", expected ") else {
            continue;
        };
        // The expected names are the backquoted words up to the end of the line.
        let list = list.lines().next().unwrap_or_default();
        let expected: Vec<&str> = list.split('`').skip(1).step_by(2).collect();
        if let Some(near) = did_you_mean(name, expected.iter().copied()) {
            let cut = name_start + name_len + 1;
            return format!(
                "{} (did you mean `{near}`?){}",
                &message[..cut],
                &message[cut..]
            );
        }
    }
    message.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distance_counts_edits_case_insensitively() {
        assert_eq!(edit_distance("seed", "sed"), 1);
        assert_eq!(edit_distance("max_tokens", "max_tokns"), 1);
        assert_eq!(edit_distance("ROUNDS", "rounds"), 0);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn a_near_miss_is_suggested_and_a_far_one_is_not() {
        let keys = ["name", "seed", "regions", "prompt_set"];
        assert_eq!(did_you_mean("sed", keys), Some("seed"));
        assert_eq!(did_you_mean("region", keys), Some("regions"));
        assert_eq!(did_you_mean("promt_set", keys), Some("prompt_set"));
        assert_eq!(did_you_mean("model", keys), None);
        assert_eq!(
            did_you_mean("model", ["expect_model", "model_id", "name"]),
            Some("model_id")
        );
        assert_eq!(did_you_mean("set", keys), Some("prompt_set"));
        assert_eq!(
            did_you_mean("limt", ["kind", "limit_ms", "metric"]),
            Some("limit_ms")
        );
        assert_eq!(did_you_mean("x", ["y"]), Some("y"));
        assert_eq!(did_you_mean("anything", [] as [&str; 0]), None);
        assert_eq!(closest("model", keys), Some("name"));
    }

    #[test]
    fn serde_unknown_names_get_a_suggestion() {
        assert_eq!(
            annotate_serde(
                "unknown field `limt`, expected one of `kind`, `limit_ms`, `metric` at line 4"
            ),
            "unknown field `limt` (did you mean `limit_ms`?), expected one of `kind`, `limit_ms`, `metric` at line 4"
        );
        assert_eq!(
            annotate_serde("unknown variant `fastr`, expected `faster` or `slower`"),
            "unknown variant `fastr` (did you mean `faster`?), expected `faster` or `slower`"
        );
        // Nothing near: unchanged; not serde's text: unchanged.
        let far = "unknown field `zzzzzz`, expected `kind` or `metric`";
        assert_eq!(annotate_serde(far), far);
        assert_eq!(
            annotate_serde("invalid type: string"),
            "invalid type: string"
        );
        assert_eq!(
            annotate_serde("unknown field `x`, there are no fields"),
            "unknown field `x`, there are no fields"
        );
    }
}
