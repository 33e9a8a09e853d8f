//! The latmesh wire protocol (package `latmesh.v1`), generated from `proto/latmesh.proto`.
//!
//! No logic lives here: conversions to and from the domain types are in `latmesh_core::wire`.

#![allow(clippy::all, missing_docs)]

/// Generated messages, clients and servers of `latmesh.v1`.
pub mod pb {
    tonic::include_proto!("latmesh.v1");
}

/// Version of the agent↔coordinator protocol; the coordinator refuses an agent whose
/// `AgentHello.protocol_version` differs.
///
/// 2: Poisson arrivals of rate scenarios are drawn as a Poisson count then uniform instants
/// (`latmesh_core::load::RateSpec`), so agents of version 1 would send a different schedule
/// than their peers; batches may be answered with `BatchRejected`.
pub const PROTOCOL_VERSION: u32 = 2;
