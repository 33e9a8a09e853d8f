//! The `latmesh agents` table.

use latmesh_proto::pb;

use crate::watch;

/// The `latmesh agents` table: state (`connected`, or `disconnected since … (why)`), what
/// the agent does (`idle` or `running CAMPAIGN`), attempts in flight and heartbeat age (from
/// the last heartbeat), clock offset.
pub fn render(agents: &[pb::AgentInfo], now_unix_us: i64) -> String {
    use std::fmt::Write as _;
    if agents.is_empty() {
        return "no agents\n".into();
    }
    let mut out = format!(
        "{:<20} {:<14} {:<8} {:<12} {:<28} {:>9} {:>13}  clock offset to the coordinator\n",
        "AGENT", "REGION", "VERSION", "STATE", "ACTIVITY", "IN-FLIGHT", "HEARTBEAT"
    );
    for a in agents {
        let activity = if a.campaign_id.is_empty() {
            "idle".to_string()
        } else {
            format!("running {}", a.campaign_id)
        };
        let heartbeat = if a.last_heartbeat_coord_unix_us > 0 {
            watch::ago(a.last_heartbeat_coord_unix_us, now_unix_us)
        } else {
            "none yet".into()
        };
        // Both 0 only before the agent's first clock report (a measured offset has a
        // non-zero uncertainty: half a round trip).
        let clock = if a.clock_offset_us == 0 && a.clock_uncertainty_us == 0 {
            "not measured yet".to_string()
        } else {
            format!("{:+} µs ± {} µs", a.clock_offset_us, a.clock_uncertainty_us)
        };
        let _ = writeln!(
            out,
            "{:<20} {:<14} {:<8} {:<12} {:<28} {:>9} {:>13}  {clock}",
            a.agent_id,
            a.region,
            a.version,
            if a.connected {
                "connected"
            } else {
                "disconnected"
            },
            activity,
            a.in_flight,
            heartbeat,
        );
        if !a.connected && a.disconnected_since_coord_unix_us > 0 {
            let _ = writeln!(
                out,
                "  {} disconnected since {} ({}; {} in flight at its last heartbeat)",
                a.agent_id,
                watch::ago(a.disconnected_since_coord_unix_us, now_unix_us),
                if a.disconnect_reason.is_empty() {
                    "session closed"
                } else {
                    a.disconnect_reason.as_str()
                },
                a.in_flight
            );
        }
        if a.batches_quarantined > 0 {
            let _ = writeln!(
                out,
                "  {} quarantined {} batch(es) (refused by the coordinator or too large to send): kept in quarantine/ of its spool directory, never sent again",
                a.agent_id, a.batches_quarantined
            );
        }
    }
    out
}
