//! The error of loading and validating a campaign file.

/// A campaign file problem, naming the key (`providers[2].base_url`) or the figment path.
#[derive(Debug, thiserror::Error)]
pub enum CampaignError {
    /// The file could not be parsed or a value has the wrong type (figment's message names
    /// the key and the file).
    #[error("{0}")]
    Parse(String),
    /// A value is present but not acceptable.
    #[error("{key}: {message}")]
    Invalid {
        /// Dotted key path, e.g. `scenarios[1].max_tokens`.
        key: String,
        /// What is wrong and what is accepted.
        message: String,
    },
    /// The prompt set named by `campaign.prompt_set` could not be loaded.
    #[error("campaign.prompt_set: {0}")]
    Prompts(crate::prompts::PromptError),
}

/// A [`CampaignError::Invalid`] of `key`.
pub(super) fn invalid(key: impl Into<String>, message: impl Into<String>) -> CampaignError {
    CampaignError::Invalid {
        key: key.into(),
        message: message.into(),
    }
}
