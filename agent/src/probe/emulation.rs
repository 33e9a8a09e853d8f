//! The headers only the simulator understands, and the rule that keeps them off real
//! providers: a request carries them only to a peer whose address is loopback, whatever the
//! prober was asked to send (they would tell a provider that the request is a probe, and
//! from where). See README, "What a provider receives".

use std::net::IpAddr;

use http::header::{HeaderMap, HeaderName, HeaderValue};

/// Header carrying the agent's region (the simulator keys its network delay on it): sent
/// only by a prober made with an emulated region (`latmesh-agent --emulate-region`).
pub const REGION_HEADER: &str = "x-latmesh-region";

/// Header naming the attempt for a test server's ground-truth log
/// ([`ProbeRequest::probe_id`](super::ProbeRequest::probe_id)).
pub const PROBE_ID_HEADER: &str = "x-latmesh-probe-id";

/// The emulation headers a request to `peer` carries: the emulated `region`
/// ([`REGION_HEADER`]) and the `probe_id` ([`PROBE_ID_HEADER`]), each when given, and only
/// when `peer` is a loopback address (127.0.0.0/8, `::1`, or either mapped in IPv6); none
/// for any other peer.
pub fn emulation_headers(
    peer: IpAddr,
    region: Option<&HeaderValue>,
    probe_id: Option<&HeaderValue>,
) -> HeaderMap {
    let mut h = HeaderMap::new();
    if !peer.to_canonical().is_loopback() {
        return h;
    }
    if let Some(v) = region {
        h.insert(HeaderName::from_static(REGION_HEADER), v.clone());
    }
    if let Some(v) = probe_id {
        h.insert(HeaderName::from_static(PROBE_ID_HEADER), v.clone());
    }
    h
}

/// The emulation headers one request may carry; put on it for the connection it goes on.
#[derive(Clone, Debug, Default)]
pub(super) struct Emulation {
    /// The prober's emulated region.
    pub region: Option<HeaderValue>,
    /// The request's probe id.
    pub probe_id: Option<HeaderValue>,
}

impl Emulation {
    /// Sets `headers`' emulation headers to those `peer` may receive (removing any set for
    /// another connection).
    pub fn apply(&self, headers: &mut HeaderMap, peer: IpAddr) {
        headers.remove(REGION_HEADER);
        headers.remove(PROBE_ID_HEADER);
        headers.extend(emulation_headers(
            peer,
            self.region.as_ref(),
            self.probe_id.as_ref(),
        ));
    }
}
