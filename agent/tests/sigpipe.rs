//! A probe never raises SIGPIPE: a process that set SIGPIPE back to its default action (as
//! command-line tools do for `| head`) survives writing to a provider that hung up. A
//! process of its own: it changes the process-wide SIGPIPE disposition.

#![cfg(target_os = "linux")]

use latmesh_agent::probe::{ProbeRequest, Prober};
use latmesh_core::plan::Timeouts;
use latmesh_core::prompts::Message;
use latmesh_core::record::Outcome;
use tokio::net::TcpListener;

/// `https://` to the plain-HTTP simulator: it answers the ClientHello with an HTTP 400 and
/// hangs up, and rustls then writes an alert (a vectored write) to the closed connection.
#[tokio::test(flavor = "current_thread")]
async fn a_tls_alert_to_a_server_that_hung_up_is_an_error_not_a_signal() {
    // SAFETY: this test binary has no other test, and no thread writes to a pipe here.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(latmesh_sim::serve_providers(
        listener,
        latmesh_sim::SimConfig::default(),
    ));
    let base = format!("https://{addr}/fast/v1");
    let messages = [Message::new("user", "Say hi.")];
    let timeouts = Timeouts::default();
    let prober = Prober::new(None).unwrap();
    for _ in 0..20 {
        let req = ProbeRequest {
            base_url: &base,
            model_id: latmesh_sim::DEFAULT_MODEL_ID,
            api_key: None,
            messages: &messages,
            stream: true,
            max_tokens: 4,
            temperature: None,
            top_p: None,
            timeouts: &timeouts,
            probe_id: None,
            user_agent: None,
            shape: latmesh_core::api::RequestShape::chat_default(),
            secret_headers: &[],
        };
        let r = prober.probe(&req, false).await;
        assert_eq!(
            r.record.outcome,
            Some(Outcome::ConnectionError),
            "{:?}",
            r.record
        );
        let msg = r.record.error_message.unwrap_or_default();
        assert!(msg.contains("plain http"), "{msg}");
    }
}
