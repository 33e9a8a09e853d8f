//! `latmesh agents`: the agents a coordinator knows, as a table ([`crate::ui::agents`]).

use clap::Args;
use latmesh_proto::pb;

use super::coordinator_arg::CoordinatorArg;
use crate::watch;

/// Arguments of `latmesh agents`.
#[derive(Args, Debug)]
pub struct AgentsArgs {
    #[command(flatten)]
    coord: CoordinatorArg,
}

/// Prints the agents table.
///
/// # Errors
/// Whatever the command fails with.
pub async fn run(args: AgentsArgs) -> anyhow::Result<()> {
    let AgentsArgs { coord } = args;
    let mut client = coord.connect().await?;
    let agents = client
        .list_agents(pb::ListAgentsRequest {})
        .await
        .map_err(|s| watch::control_error(&coord.url(), s))?
        .into_inner()
        .agents;
    print!(
        "{}",
        crate::ui::agents::render(&agents, latmesh_coordinator::state::now_unix_us())
    );
    Ok(())
}
