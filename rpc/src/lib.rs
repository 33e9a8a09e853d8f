//! The client side of a latmesh coordinator, shared by the agent and the CLI.

pub mod tls;
