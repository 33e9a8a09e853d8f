//! Agents as text: the `latmesh agents` table ([`render`]) and an agent's state in a progress
//! line ([`describe_agent`]), with heartbeat ages ([`ago`]).

use latmesh_proto::pb;

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
            ago(a.last_heartbeat_coord_unix_us, now_unix_us)
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
                ago(a.disconnected_since_coord_unix_us, now_unix_us),
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

/// One agent's state in a progress line: its region, the probes it has finished and its state,
/// `us-east 12 done, running (2 in flight, heartbeat 1.0 s ago)`.
pub fn describe_agent(a: &pb::AgentProgress, now_unix_us: i64) -> String {
    let status = agent_status(a);
    let mut s = format!("{} {} done", a.region, a.probes_done);
    if status != "done" {
        s += &format!(", {status}");
    }
    if status == "disconnected" && a.disconnected_since_coord_unix_us > 0 {
        s += &format!(
            " since {}",
            ago(a.disconnected_since_coord_unix_us, now_unix_us)
        );
    } else if matches!(status, "running" | "cancelling") {
        s += &format!(" ({} in flight", a.in_flight);
        if a.last_heartbeat_coord_unix_us > 0 {
            s += &format!(
                ", heartbeat {}",
                ago(a.last_heartbeat_coord_unix_us, now_unix_us)
            );
        }
        s += ")";
    }
    s
}

/// The agent's status word: the coordinator's (`running`, `cancelling`, …), or from an older
/// coordinator without one `done`, `running` or `disconnected`.
pub fn agent_status(a: &pb::AgentProgress) -> &str {
    if a.status.is_empty() {
        if a.done {
            "done"
        } else if a.connected {
            "running"
        } else {
            "disconnected"
        }
    } else {
        a.status.as_str()
    }
}

/// `12.3 s ago` for a coordinator-clock instant.
pub fn ago(unix_us: i64, now_unix_us: i64) -> String {
    format!("{:.1} s ago", (now_unix_us - unix_us).max(0) as f64 / 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(status: &str, connected: bool, done: bool) -> pb::AgentProgress {
        pb::AgentProgress {
            region: "us-east".into(),
            probes_done: 12,
            status: status.into(),
            connected,
            done,
            in_flight: 2,
            last_heartbeat_coord_unix_us: 9_000_000,
            disconnected_since_coord_unix_us: 4_000_000,
            ..Default::default()
        }
    }

    #[test]
    fn an_agent_reads_as_probes_done_then_its_state() {
        let now = 10_000_000;
        assert_eq!(
            describe_agent(&agent("running", true, false), now),
            "us-east 12 done, running (2 in flight, heartbeat 1.0 s ago)"
        );
        assert_eq!(
            describe_agent(&agent("", false, false), now),
            "us-east 12 done, disconnected since 6.0 s ago"
        );
        assert_eq!(
            describe_agent(&agent("", true, true), now),
            "us-east 12 done"
        );
    }
}
