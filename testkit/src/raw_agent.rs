//! A raw agent session for tests: a gRPC client of the agent protocol that sends exactly the
//! messages a test builds (hostile ones included) and reads what the coordinator answers,
//! without the agent's own checks in between.

use std::time::{Duration, Instant};

use latmesh_proto::pb;
use latmesh_proto::pb::agent_message::Kind as In;
use latmesh_proto::pb::coordinator_message::Kind as Out;
use tokio::sync::mpsc;

/// A raw agent session: what it sends, and what the coordinator answers.
pub struct RawAgent {
    tx: mpsc::Sender<pb::AgentMessage>,
    rx: tonic::Streaming<pb::CoordinatorMessage>,
}

impl RawAgent {
    /// Opens a session at `url` (`http://host:port`) and sends `hello`.
    ///
    /// # Errors
    /// The coordinator's refusal of the session.
    ///
    /// # Panics
    /// When the coordinator cannot be reached.
    pub async fn connect(url: &str, hello: pb::AgentHello) -> Result<RawAgent, tonic::Status> {
        let mut client = pb::agent_session_client::AgentSessionClient::connect(url.to_string())
            .await
            .unwrap();
        let (tx, out) = mpsc::channel(4096);
        tx.send(msg(In::Hello(hello))).await.unwrap();
        let rx = client
            .session(tokio_stream::wrappers::ReceiverStream::new(out))
            .await?
            .into_inner();
        Ok(RawAgent { tx, rx })
    }

    /// Sends one message of kind `kind`.
    ///
    /// # Panics
    /// When the session is closed.
    pub async fn send(&self, kind: In) {
        self.tx.send(msg(kind)).await.unwrap();
    }

    /// The next message for which `want` gives `Some` (the others are pushed to `seen`),
    /// within 60 s.
    ///
    /// # Panics
    /// When none comes within 60 s, or the session ends.
    pub async fn until<T>(&mut self, seen: &mut Vec<Out>, want: impl Fn(&Out) -> Option<T>) -> T {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let m = tokio::time::timeout_at(deadline.into(), self.rx.message())
                .await
                .expect("the coordinator answers within 60 s")
                .expect("the session stays up")
                .expect("the session stays open");
            let kind = m.kind.unwrap();
            if let Some(t) = want(&kind) {
                return t;
            }
            seen.push(kind);
        }
    }
}

/// Waits until the coordinator at `url` lists `n` connected agents.
///
/// # Panics
/// When it does not within 30 s (naming the agents it lists).
pub async fn wait_connected(url: &str, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut c = latmesh_cli::watch::connect(url).await.unwrap();
        let agents = c
            .list_agents(pb::ListAgentsRequest {})
            .await
            .unwrap()
            .into_inner()
            .agents;
        if agents.iter().filter(|a| a.connected).count() == n {
            return;
        }
        assert!(Instant::now() < deadline, "agents: {agents:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// An agent message of kind `kind`.
pub fn msg(kind: In) -> pb::AgentMessage {
    pb::AgentMessage { kind: Some(kind) }
}

/// A hello of agent `agent_id` in `region`, speaking this build's protocol.
pub fn hello(agent_id: &str, region: &str) -> pb::AgentHello {
    pb::AgentHello {
        agent_id: agent_id.into(),
        region: region.into(),
        version: "raw".into(),
        protocol_version: latmesh_proto::PROTOCOL_VERSION,
        ..Default::default()
    }
}

/// A batch `seq` of campaign `campaign_id` carrying `records`.
pub fn batch(campaign_id: &str, seq: u64, records: Vec<pb::ProbeRecord>) -> pb::ResultBatch {
    pb::ResultBatch {
        campaign_id: campaign_id.into(),
        seq,
        records,
        ..Default::default()
    }
}
