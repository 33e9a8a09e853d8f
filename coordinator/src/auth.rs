//! Who may talk to the coordinator, and over what.
//!
//! - **Tokens.** Agents present the *agent token* and the CLI's control calls the *admin
//!   token*, each as `authorization: Bearer <token>` metadata. [`Auth`] checks them (in
//!   constant time) in tonic interceptors, before a handler runs: a missing or wrong token is
//!   refused with `Unauthenticated` and a log line naming the peer address (and, for agents,
//!   the agent id it claims), never the token. A role without a configured token is open
//!   (dev mode, loopback only unless explicitly allowed: see `latmesh serve --help`).
//! - **TLS.** [`crate::tls_listener::server_tls`] loads and checks a PEM certificate chain and key for
//!   `latmesh serve --tls-cert/--tls-key` (rustls with ring); [`crate::tls_listener`] does
//!   the handshakes and logs the failed ones.
//!
//! Tokens are [`Secret`]s: their `Debug` and `Display` are redacted.

use std::net::SocketAddr;
use std::sync::Arc;

use latmesh_rpc::AGENT_ID_METADATA;
pub use latmesh_rpc::Secret;
use subtle::ConstantTimeEq;
use tonic::metadata::MetadataMap;
use tonic::{Request, Status};

/// Environment variable holding the agent token (coordinator and agents).
pub const AGENT_TOKEN_ENV: &str = "LATMESH_AGENT_TOKEN";
/// Environment variable holding the admin token (coordinator and CLI).
pub const ADMIN_TOKEN_ENV: &str = "LATMESH_ADMIN_TOKEN";

/// The tokens a coordinator accepts; a role without one is not authenticated.
#[derive(Clone, Debug, Default)]
pub struct Auth {
    inner: Arc<Tokens>,
}

#[derive(Debug, Default)]
struct Tokens {
    agent: Option<Secret>,
    admin: Option<Secret>,
}

/// Why a call was refused (the client sees the message, the log the reason).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Refusal {
    Missing,
    Malformed,
    Wrong,
}

impl Refusal {
    fn reason(self) -> &'static str {
        match self {
            Refusal::Missing => "no token",
            Refusal::Malformed => "malformed authorization metadata",
            Refusal::Wrong => "wrong token",
        }
    }
}

impl Auth {
    /// Accepts agents presenting `agent` and control calls presenting `admin`; `None` leaves
    /// that role open.
    pub fn new(agent: Option<Secret>, admin: Option<Secret>) -> Self {
        Auth {
            inner: Arc::new(Tokens { agent, admin }),
        }
    }

    /// Whether agents must present a token.
    pub fn agents_authenticated(&self) -> bool {
        self.inner.agent.is_some()
    }

    /// Whether control calls must present a token.
    pub fn control_authenticated(&self) -> bool {
        self.inner.admin.is_some()
    }

    /// Interceptor check for the agent session.
    ///
    /// # Errors
    /// `Unauthenticated` when a token is configured and the request lacks it or has another.
    #[allow(clippy::result_large_err)]
    pub fn check_agent(&self, req: Request<()>) -> Result<Request<()>, Status> {
        let Some(expected) = &self.inner.agent else {
            return Ok(req);
        };
        match check(expected, req.metadata()) {
            Ok(()) => Ok(req),
            Err(r) => {
                let agent = claimed_agent(req.metadata());
                tracing::warn!(
                    peer = %peer(&req),
                    agent = ?agent,
                    "refused agent: {} (agent token)",
                    r.reason()
                );
                Err(Status::unauthenticated(match r {
                    Refusal::Missing => {
                        "this coordinator requires an agent token (authorization: Bearer <token>); none was sent"
                    }
                    Refusal::Malformed => "the authorization metadata must be `Bearer <token>`",
                    Refusal::Wrong => "the agent token is not valid for this coordinator",
                }))
            }
        }
    }

    /// Interceptor check for the control API (the CLI).
    ///
    /// # Errors
    /// `Unauthenticated` when a token is configured and the request lacks it or has another.
    #[allow(clippy::result_large_err)]
    pub fn check_admin(&self, req: Request<()>) -> Result<Request<()>, Status> {
        let Some(expected) = &self.inner.admin else {
            return Ok(req);
        };
        match check(expected, req.metadata()) {
            Ok(()) => Ok(req),
            Err(r) => {
                tracing::warn!(
                    peer = %peer(&req),
                    "refused control call: {} (admin token)",
                    r.reason()
                );
                Err(Status::unauthenticated(match r {
                    Refusal::Missing => {
                        "this coordinator requires an admin token for control calls; none was sent"
                    }
                    Refusal::Malformed => "the authorization metadata must be `Bearer <token>`",
                    Refusal::Wrong => "the admin token is not valid for this coordinator",
                }))
            }
        }
    }
}

/// Compares the bearer token in `metadata` with `expected`, in constant time.
fn check(expected: &Secret, metadata: &MetadataMap) -> Result<(), Refusal> {
    let Some(value) = metadata.get("authorization") else {
        return Err(Refusal::Missing);
    };
    let value = value.as_bytes();
    let Some(presented) = value
        .get(..7)
        .filter(|scheme| scheme.eq_ignore_ascii_case(b"bearer "))
        .map(|_| value[7..].trim_ascii())
    else {
        return Err(Refusal::Malformed);
    };
    if bool::from(presented.ct_eq(expected.expose().as_bytes())) {
        Ok(())
    } else {
        Err(Refusal::Wrong)
    }
}

/// The agent id a refused agent claims (metadata set by `latmesh-agent`), cut to 64
/// characters; `"?"` when absent.
fn claimed_agent(metadata: &MetadataMap) -> String {
    metadata
        .get(AGENT_ID_METADATA)
        .and_then(|v| v.to_str().ok())
        .map(|s| s.chars().take(64).collect())
        .unwrap_or_else(|| "?".into())
}

fn peer<T>(req: &Request<T>) -> String {
    req.remote_addr()
        .map(|a: SocketAddr| a.to_string())
        .unwrap_or_else(|| "unknown peer".into())
}

/// Whether every address `listen` resolves to is a loopback address (127.0.0.0/8, ::1, or
/// an IPv4-mapped loopback). Unresolvable addresses count as not loopback.
pub async fn is_loopback(listen: &str) -> bool {
    match tokio::net::lookup_host(listen).await {
        Ok(addrs) => {
            let addrs: Vec<SocketAddr> = addrs.collect();
            !addrs.is_empty() && addrs.iter().all(|a| a.ip().to_canonical().is_loopback())
        }
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn md(value: Option<&str>) -> MetadataMap {
        let mut m = MetadataMap::new();
        if let Some(v) = value {
            m.insert("authorization", v.parse().unwrap());
        }
        m
    }

    #[test]
    fn bearer_tokens_are_checked() {
        let s = Secret::new("s3cret-token\n").unwrap();
        assert_eq!(check(&s, &md(Some("Bearer s3cret-token"))), Ok(()));
        assert_eq!(check(&s, &md(Some("bearer s3cret-token"))), Ok(()));
        assert_eq!(check(&s, &md(None)), Err(Refusal::Missing));
        assert_eq!(
            check(&s, &md(Some("s3cret-token"))),
            Err(Refusal::Malformed)
        );
        assert_eq!(
            check(&s, &md(Some("Basic s3cret-token"))),
            Err(Refusal::Malformed)
        );
        assert_eq!(
            check(&s, &md(Some("Bearer s3cret-toke"))),
            Err(Refusal::Wrong)
        );
        assert_eq!(
            check(&s, &md(Some("Bearer s3cret-tokenX"))),
            Err(Refusal::Wrong)
        );
        assert_eq!(check(&s, &md(Some("Bearer "))), Err(Refusal::Wrong));
    }

    #[test]
    fn open_roles_pass_and_closed_roles_refuse() {
        let auth = Auth::new(Some(Secret::new("agent-t").unwrap()), None);
        assert!(auth.check_admin(Request::new(())).is_ok());
        let refused = auth.check_agent(Request::new(())).unwrap_err();
        assert_eq!(refused.code(), tonic::Code::Unauthenticated);
        let mut ok = Request::new(());
        ok.metadata_mut()
            .insert("authorization", "Bearer agent-t".parse().unwrap());
        assert!(auth.check_agent(ok).is_ok());
    }

    #[test]
    fn secrets_never_print() {
        let s = Secret::new("do-not-print-me").unwrap();
        let auth = Auth::new(Some(s.clone()), Some(s.clone()));
        for text in [format!("{s:?}"), format!("{s}"), format!("{auth:?}")] {
            assert!(!text.contains("do-not-print-me"), "{text}");
        }
        assert!(Secret::new("  ").is_err());
        assert!(Secret::new("has space").is_err());
    }

    #[tokio::test]
    async fn loopback_addresses() {
        assert!(is_loopback("127.0.0.1:0").await);
        assert!(is_loopback("[::1]:0").await);
        assert!(!is_loopback("0.0.0.0:0").await);
        assert!(!is_loopback("[::]:7700").await);
        assert!(!is_loopback("10.1.2.3:7700").await);
    }
}
