//! How a command reaches a coordinator's control API (`--coordinator`, the admin token, the CA
//! file), shared by `campaign …` and `agents`.

use std::path::PathBuf;

use crate::watch::AdminClient;
use clap::Args;
use latmesh_coordinator::auth::{ADMIN_TOKEN_ENV, Secret};

/// How the CLI reaches the coordinator's control API.
#[derive(Args, Debug, Clone)]
pub struct CoordinatorArg {
    /// Coordinator URL (`host:port` means `http://host:port`; `https://host:port` for a
    /// coordinator serving TLS).
    #[arg(
        long,
        env = "LATMESH_COORDINATOR",
        default_value = "http://127.0.0.1:7700"
    )]
    coordinator: String,
    /// File holding the admin token sent with control calls (without it: the
    /// LATMESH_ADMIN_TOKEN environment variable).
    #[arg(long, env = "LATMESH_ADMIN_TOKEN_FILE")]
    admin_token_file: Option<PathBuf>,
    /// PEM file with the CA certificate(s) to trust for an https:// coordinator (default: the
    /// webpki roots).
    #[arg(long, env = "LATMESH_CA_FILE")]
    ca_file: Option<PathBuf>,
}

impl CoordinatorArg {
    /// Connects to the control API with the admin token and CA file of these arguments.
    ///
    /// # Errors
    /// An unreadable token or CA file, or an unreachable coordinator.
    pub async fn connect(&self) -> anyhow::Result<AdminClient> {
        let token = Secret::from_file_or_env(
            self.admin_token_file.as_deref(),
            ADMIN_TOKEN_ENV,
            "admin token",
        )?;
        let channel =
            latmesh_rpc::connect_channel(&self.coordinator, self.ca_file.as_deref()).await?;
        Ok(latmesh_rpc::control_client(channel, token))
    }

    /// The coordinator URL (`host:port` completed to `http://host:port`).
    pub fn url(&self) -> String {
        latmesh_rpc::coordinator_url(&self.coordinator)
    }
}
