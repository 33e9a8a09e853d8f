//! The gRPC clients of a coordinator's two services, with latmesh's message size limits.

use latmesh_proto::pb::agent_session_client::AgentSessionClient;
use latmesh_proto::pb::control_client::ControlClient;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

use crate::secret::Secret;
use crate::token::BearerToken;

/// A control API client that sends the admin token (when there is one) with every call.
pub type AdminClient = ControlClient<InterceptedService<Channel, BearerToken>>;

/// The control API client on `channel`, sending `admin_token` (when there is one) with every
/// call and accepting messages up to `latmesh_core::wire::MAX_MESSAGE_BYTES` both ways.
pub fn control_client(channel: Channel, admin_token: Option<Secret>) -> AdminClient {
    ControlClient::with_interceptor(channel, BearerToken(admin_token))
        .max_decoding_message_size(latmesh_core::wire::MAX_MESSAGE_BYTES)
        .max_encoding_message_size(latmesh_core::wire::MAX_MESSAGE_BYTES)
}

/// The agent session client on `channel`, accepting messages up to
/// `latmesh_core::wire::MAX_MESSAGE_BYTES` both ways (the token goes on the session request:
/// [`crate::authorize`]).
pub fn session_client(channel: Channel) -> AgentSessionClient<Channel> {
    AgentSessionClient::new(channel)
        .max_decoding_message_size(latmesh_core::wire::MAX_MESSAGE_BYTES)
        .max_encoding_message_size(latmesh_core::wire::MAX_MESSAGE_BYTES)
}
