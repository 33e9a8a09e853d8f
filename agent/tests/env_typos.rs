//! The agent refuses to start with a mistyped `LATMESH_` variable (it would otherwise be
//! ignored in silence, e.g. region emulation left off), naming the nearest real one.

use std::process::Command;

#[test]
fn a_mistyped_latmesh_variable_stops_the_agent_before_it_connects() {
    let out = Command::new(env!("CARGO_BIN_EXE_latmesh-agent"))
        .args(["--region", "us-east", "--coordinator", "http://127.0.0.1:1"])
        .env("LATMESH_AGENT_EMULATE_REGIONS", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with(
            "error: environment variable LATMESH_AGENT_EMULATE_REGIONS: not a campaign override \
             nor a latmesh setting (did you mean LATMESH_AGENT_EMULATE_REGION?"
        ),
        "{stderr}"
    );
}
