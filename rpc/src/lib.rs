//! The client side of a latmesh coordinator, shared by the agent (its session) and the CLI
//! (control calls): what both need to reach a coordinator. The server side (token checks, the
//! TLS listener) is in the coordinator crate.
//!
//! - [`connect_channel`] (`channel`): a gRPC channel to a coordinator URL: plaintext for
//!   `http://` (with a first-bytes check that names a TLS server), TLS for `https://` trusting
//!   `--ca-file` or the webpki roots; failures carry a hint ([`tls::TlsProblem`]).
//! - [`coordinator_url`] (`url`): `host:port` → `http://host:port`.
//! - [`Secret`] (`secret`): a token that never reaches a log line.
//! - [`authorize`], [`BearerToken`], [`AGENT_ID_METADATA`] (`token`): the token on the wire.
//! - [`control_client`], [`session_client`] (`client`): the two services' clients with
//!   latmesh's message size limits.
//! - [`tls`]: CA files and TLS handshake hints (also used for providers by the agent's probe).

mod channel;
mod client;
mod secret;
pub mod tls;
mod token;
mod url;

pub use channel::connect_channel;
pub use client::{AdminClient, control_client, session_client};
pub use secret::Secret;
pub use token::{AGENT_ID_METADATA, BearerToken, authorize};
pub use url::coordinator_url;
