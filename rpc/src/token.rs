//! Bearer tokens on the wire: the `authorization` metadata of agent sessions and control
//! calls (checked by the coordinator's `auth` module), and the agent id sent next to it.

use tonic::metadata::{AsciiMetadataValue, MetadataMap};

use crate::secret::Secret;

/// Metadata key of the agent id, sent next to the token so that a coordinator refusing the
/// session can name the agent in its log.
pub const AGENT_ID_METADATA: &str = "latmesh-agent-id";

/// Adds `authorization: Bearer <token>` to `metadata` (marked sensitive: HPACK never indexes
/// it and `Debug` of the metadata does not show it).
pub fn authorize(metadata: &mut MetadataMap, token: &Secret) {
    let value = AsciiMetadataValue::try_from(format!("Bearer {}", token.expose()));
    if let Ok(mut value) = value {
        value.set_sensitive(true);
        metadata.insert("authorization", value);
    }
}

/// A tonic interceptor adding the token (when there is one) to every call, as [`authorize`]
/// does: the CLI's admin token on control calls.
#[derive(Clone, Debug)]
pub struct BearerToken(pub Option<Secret>);

impl tonic::service::Interceptor for BearerToken {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(token) = &self.0 {
            authorize(req.metadata_mut(), token);
        }
        Ok(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::service::Interceptor as _;

    #[test]
    fn the_token_travels_as_sensitive_bearer_metadata() {
        let token = Secret::new("s3cret\n").unwrap();
        let req = BearerToken(Some(token))
            .call(tonic::Request::new(()))
            .unwrap();
        let value = req.metadata().get("authorization").unwrap();
        assert_eq!(value.to_str().unwrap(), "Bearer s3cret");
        assert!(value.is_sensitive());
        assert!(!format!("{:?}", req.metadata()).contains("s3cret"));
        let req = BearerToken(None).call(tonic::Request::new(())).unwrap();
        assert!(req.metadata().get("authorization").is_none());
    }
}
