//! [`ProviderContext`]: what the checks and the quality set need to call one provider: the
//! prober, the provider's plan entry, its credentials read on this machine, its caps.

use latmesh_core::api::{RequestShape, StreamUsage};
use latmesh_core::plan::ProviderSpec;

use crate::limits::{Limiters, Permit};
use crate::probe::Prober;
use crate::probe::outcome::Scrubber;
use crate::probe::request::{SecretHeader, api_key_from_env, secret_headers, unset_or_empty};

/// One provider, ready to be called: the [`Prober`], its [`ProviderSpec`] (from the plan),
/// its API key and secret header values read on this machine (never logged: the `Debug`
/// output leaves them out), and its politeness caps (`limits`, this machine's share as one
/// agent).
pub struct ProviderContext<'a> {
    /// Sends the requests.
    pub prober: &'a Prober,
    /// The provider's plan entry.
    pub provider: &'a ProviderSpec,
    /// Its API key (from `api_key_env`), when it has one.
    api_key: Option<String>,
    /// Its secret headers with their values.
    secret_headers: Vec<SecretHeader>,
    /// Its caps: provider index 0.
    limiters: Limiters,
}

impl std::fmt::Debug for ProviderContext<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderContext")
            .field("provider", &self.provider.name)
            .field("api_key", &self.api_key.as_ref().map(|_| "[redacted]"))
            .field("secret_headers", &self.secret_headers)
            .finish()
    }
}

impl<'a> ProviderContext<'a> {
    /// A context with these credentials (`api_key` is sent as the provider's `auth` says).
    pub fn new(
        prober: &'a Prober,
        provider: &'a ProviderSpec,
        api_key: Option<String>,
        secret_headers: Vec<SecretHeader>,
    ) -> ProviderContext<'a> {
        ProviderContext {
            prober,
            provider,
            api_key,
            secret_headers,
            limiters: Limiters::from_limits(std::iter::once(&provider.limits), 1),
        }
    }

    /// A context whose credentials are read from this machine's environment, as an agent
    /// reads them ([`api_key_from_env`], [`secret_headers`]).
    ///
    /// # Errors
    /// The provider names an `api_key_env` that is unset, empty or unusable, or a secret
    /// header's variable is: the message names the provider and the variable, never a value.
    pub fn from_env(
        prober: &'a Prober,
        provider: &'a ProviderSpec,
    ) -> Result<ProviderContext<'a>, String> {
        let name = &provider.name;
        let api_key = match &provider.api_key_env {
            None => None,
            Some(var) => match api_key_from_env(var) {
                Ok(Some(k)) => Some(k),
                Ok(None) => {
                    return Err(format!(
                        "provider {name}: its API key variable ${var} {}",
                        unset_or_empty(var)
                    ));
                }
                Err(e) => return Err(format!("provider {name}: {e}")),
            },
        };
        let (secrets, problems) = secret_headers(&provider.request);
        if !problems.is_empty() {
            return Err(format!("provider {name}: {}", problems.join("; ")));
        }
        Ok(ProviderContext::new(prober, provider, api_key, secrets))
    }

    /// The API key, when the provider has one.
    pub fn api_key(&self) -> Option<&str> {
        self.api_key.as_deref()
    }

    /// The secret headers with their values.
    pub fn secret_headers(&self) -> &[SecretHeader] {
        &self.secret_headers
    }

    /// Waits for the provider's caps to let a request of about `tokens` tokens go; hold
    /// the permit while it is in flight.
    pub(crate) async fn acquire(&self, tokens: u32) -> Option<Permit> {
        self.limiters.acquire(0, tokens, None).await
    }

    /// No request starts before `until` (a Retry-After, for providers with caps).
    pub(crate) fn pause(&self, until: std::time::Instant) {
        self.limiters.pause(0, until);
    }

    /// `text` with the API key and the secret header values (whole, or any run of
    /// [`crate::probe::outcome::KEY_FRAGMENT_BYTES`] of their bytes) redacted.
    pub fn redact(&self, text: &str) -> String {
        Scrubber {
            api_key: self.api_key(),
            secrets: &self.secret_headers,
            prompt: &[],
        }
        .redact(text)
    }

    /// [`ProviderContext::redact`], then cut to `max_bytes` (`…` included).
    pub fn redact_to(&self, text: &str, max_bytes: usize) -> String {
        Scrubber {
            api_key: self.api_key(),
            secrets: &self.secret_headers,
            prompt: &[],
        }
        .clean_to(text, max_bytes)
    }

    /// The provider's request shape with `features` added to the body under its own
    /// `extra_body` (whose keys keep winning) and chat streams asking for usage as
    /// `stream_usage` says.
    pub(crate) fn shape_with(
        &self,
        features: serde_json::Map<String, serde_json::Value>,
        stream_usage: StreamUsage,
    ) -> RequestShape {
        let mut shape = self.provider.request.clone();
        let mut body = features;
        for (k, v) in &self.provider.request.extra_body {
            body.insert(k.clone(), v.clone());
        }
        shape.extra_body = body;
        shape.stream_usage = stream_usage;
        shape
    }
}

/// A provider `p` of a one-provider campaign, with `extra` TOML keys (unit tests).
#[cfg(test)]
pub(crate) fn test_provider(extra: &str) -> ProviderSpec {
    let text = format!(
        "[campaign]\nname = \"t\"\nregions = [\"r\"]\n[rounds]\ncount = 1\ninterval_s = 1\ngap_ms = 1\n\
         [[scenarios]]\nname = \"s\"\nprompt_ids = [\"short-qa-en-*\"]\nmax_tokens = 4\n\
         [[providers]]\nname = \"p\"\nbase_url = \"http://h/v1\"\nmodel_id = \"m\"\n{extra}\n"
    );
    latmesh_core::campaign::load_toml_str(&text, std::path::Path::new("."))
        .expect("the test campaign loads")
        .providers
        .remove(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn features_go_under_the_providers_extra_body() {
        let p = test_provider("extra_body = { tools = \"mine\", top_k = 5 }");
        let prober = Prober::new(None).unwrap();
        let ctx = ProviderContext::new(&prober, &p, Some("sk-secret-key-123".into()), vec![]);
        let mut f = serde_json::Map::new();
        f.insert("tools".into(), serde_json::json!([1]));
        f.insert("stop".into(), serde_json::json!(["7"]));
        let s = ctx.shape_with(f, StreamUsage::Never);
        assert_eq!(s.extra_body["tools"], "mine");
        assert_eq!(s.extra_body["stop"], serde_json::json!(["7"]));
        assert_eq!(s.extra_body["top_k"], 5);
        assert_eq!(s.stream_usage, StreamUsage::Never);
        assert_eq!(ctx.redact("echo sk-secret-key-123!"), "echo [redacted]!");
        assert!(!format!("{ctx:?}").contains("key-123"));
    }

    #[test]
    fn a_missing_key_names_provider_and_variable() {
        let p = test_provider("api_key_env = \"LATMESH_TEST_COMPAT_UNSET_KEY\"");
        let prober = Prober::new(None).unwrap();
        let e = ProviderContext::from_env(&prober, &p).unwrap_err();
        assert_eq!(
            e,
            "provider p: its API key variable $LATMESH_TEST_COMPAT_UNSET_KEY is not set"
        );
    }
}
