//! Warnings for peers whose messages the transport refuses: a gRPC message longer than the
//! limit tonic decodes (4 MiB) or one that does not decode never reaches a handler, so
//! nothing would say who sent it. [`WarnBadMessages`] wraps every service and logs a warning
//! naming the peer and the method when a call ends with such a status; agent sessions log
//! theirs where the stream breaks (`service.rs`).

use std::task::{Context, Poll};

use futures::future::BoxFuture;
use tonic::Status;
use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};

/// Whether `status` is the transport's refusal of the peer's message itself: longer than the
/// limit (`OutOfRange`, `ResourceExhausted`) or not decodable (`Internal` from the codec).
pub fn is_bad_message(status: &Status) -> bool {
    matches!(
        status.code(),
        tonic::Code::OutOfRange | tonic::Code::ResourceExhausted | tonic::Code::Internal
    ) || status.message().contains("decode")
}

/// The peer of a request as `ip:port` (`unknown` when the connection does not say).
pub fn peer_of<B>(req: &http::Request<B>) -> String {
    let ext = req.extensions();
    ext.get::<TcpConnectInfo>()
        .and_then(TcpConnectInfo::remote_addr)
        .or_else(|| {
            ext.get::<TlsConnectInfo<TcpConnectInfo>>()
                .and_then(|i| i.get_ref().remote_addr())
        })
        .map_or_else(|| "unknown".to_string(), |a| a.to_string())
}

/// A tower layer logging a warning for every call the transport refused as
/// [`is_bad_message`] (`Server::builder().layer(WarnBadMessages)`).
#[derive(Clone, Copy, Debug, Default)]
pub struct WarnBadMessages;

impl<S> tower_layer::Layer<S> for WarnBadMessages {
    type Service = WarnBadMessagesService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        WarnBadMessagesService { inner }
    }
}

/// The service [`WarnBadMessages`] wraps around `S`.
#[derive(Clone, Debug)]
pub struct WarnBadMessagesService<S> {
    inner: S,
}

impl<S, B, R> tower_service::Service<http::Request<B>> for WarnBadMessagesService<S>
where
    S: tower_service::Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    R: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let (peer, method) = (peer_of(&req), req.uri().path().to_string());
        let call = self.inner.call(req);
        Box::pin(async move {
            let res = call.await?;
            // A refused message ends the call at once: its status is in the headers.
            if let Some(status) = Status::from_header_map(res.headers())
                && is_bad_message(&status)
                && let Some(suppressed) = BAD_MESSAGE_WARNINGS.allow()
            {
                tracing::warn!(%peer, %method, code = ?status.code(), error = %status.message(), suppressed, "a peer sent an oversized or undecodable message");
            }
            Ok(res)
        })
    }
}

/// Refused messages logged: at most 20 a minute, the rest counted in the next line.
static BAD_MESSAGE_WARNINGS: latmesh_core::log_limit::LogLimit =
    latmesh_core::log_limit::LogLimit::new(20, std::time::Duration::from_secs(60));
