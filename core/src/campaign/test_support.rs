//! What the campaign file tests share: a small valid file and its errors as text.

use std::path::Path;

/// A valid campaign: two regions, one rounds scenario, one provider.
pub(crate) const GOOD: &str = r#"
[campaign]
name = "t"
seed = 5
regions = ["us-east", "eu-west"]

[rounds]
count = 3
interval_s = 2.0
gap_ms = 100

[[scenarios]]
name = "chat"
prompt_ids = ["short-qa-en-*"]
stream = true
max_tokens = 32

[[providers]]
name = "a"
base_url = "http://127.0.0.1:9/v1/"
model_id = "m"
api_key_env = "A_KEY"
"#;

/// The error `text` is refused with.
pub(crate) fn err_of(text: &str) -> String {
    super::load_toml_str(text, Path::new("."))
        .unwrap_err()
        .to_string()
}
