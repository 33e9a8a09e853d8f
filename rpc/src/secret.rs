//! Secrets (bearer tokens) that never reach a log line.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;

/// A secret such as a bearer token: `Debug` and `Display` never show it, so it cannot reach a
/// log line or an error message by accident. [`Secret::expose`] is the only way to read it.
#[derive(Clone)]
pub struct Secret(Arc<str>);

impl Secret {
    /// A secret from `text` with surrounding whitespace (a file's final newline) trimmed.
    ///
    /// # Errors
    /// When it is empty or holds anything but visible ASCII (it travels in an HTTP/2 header);
    /// the message never contains the text.
    pub fn new(text: &str) -> Result<Secret, String> {
        let t = text.trim();
        if t.is_empty() {
            return Err("it is empty".into());
        }
        if !t.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("it may only contain visible ASCII characters (no spaces)".into());
        }
        Ok(Secret(t.into()))
    }

    /// The secret itself.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// A secret from the file `file` when given, else from the environment variable `env`
    /// (unset or empty: `None`). `what` names it in errors, e.g. "agent token".
    ///
    /// # Errors
    /// The file cannot be read, or the secret is malformed (see [`Secret::new`]).
    pub fn from_file_or_env(
        file: Option<&Path>,
        env: &str,
        what: &str,
    ) -> anyhow::Result<Option<Secret>> {
        if let Some(path) = file {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read the {what} from {}", path.display()))?;
            return Secret::new(&text).map(Some).map_err(|m| {
                anyhow::anyhow!("the {what} in {} is not usable: {m}", path.display())
            });
        }
        match std::env::var(env) {
            Ok(text) if !text.trim().is_empty() => Secret::new(&text)
                .map(Some)
                .map_err(|m| anyhow::anyhow!("the {what} in ${env} is not usable: {m}")),
            _ => Ok(None),
        }
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}
