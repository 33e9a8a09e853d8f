//! A whole latmesh on loopback for end-to-end tests: `latmesh-sim` with given provider
//! profiles, `latmesh serve`, agents in named regions, and `latmesh campaign launch`, all as
//! child processes of the test (killed when dropped), logs in one temporary folder.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use latmesh_results::summary::Summary;
use latmesh_sim::profile::ProviderProfile;

use crate::{Proc, bin, spawn, spawn_until_line};

/// A running simulator and coordinator, and the agents started with [`Stack::agent`].
pub struct Stack {
    /// Logs, spools, campaign files.
    pub dir: tempfile::TempDir,
    /// `host:port` of the simulator (campaign base URLs: `http://{sim}/{provider}/v1`).
    pub sim_addr: String,
    /// `http://host:port` of the coordinator.
    pub coord_url: String,
    procs: Vec<Proc>,
}

impl Stack {
    /// Starts the simulator serving `profiles` and a coordinator.
    ///
    /// # Panics
    /// When either does not say it listens within 20 s.
    pub fn start(profiles: &[ProviderProfile]) -> Stack {
        Stack::start_with(profiles, |_| {})
    }

    /// Starts the simulator serving `profiles` and a coordinator storing into ClickHouse at
    /// `ch_url`, database `db`, through a spool in the stack's folder.
    ///
    /// # Panics
    /// As [`Stack::start`].
    pub fn start_with_clickhouse(profiles: &[ProviderProfile], ch_url: &str, db: &str) -> Stack {
        Stack::start_with(profiles, |coord| {
            coord
                .args(["--clickhouse-url", ch_url, "--clickhouse-db", db])
                .args(["--spool-dir", "coord-spool"]);
        })
    }

    /// Starts the simulator serving `profiles` and a coordinator whose command `configure`
    /// adds to (its current directory is the stack's folder).
    ///
    /// # Panics
    /// As [`Stack::start`].
    pub fn start_with(profiles: &[ProviderProfile], configure: impl FnOnce(&mut Command)) -> Stack {
        Stack::start_scaled(profiles, 1.0, configure)
    }

    /// As [`Stack::start_with`], with the simulator's server-side delays multiplied by
    /// `time_scale` (`latmesh-sim serve --time-scale`; 0.2: five times faster).
    ///
    /// # Panics
    /// As [`Stack::start`].
    pub fn start_scaled(
        profiles: &[ProviderProfile],
        time_scale: f64,
        configure: impl FnOnce(&mut Command),
    ) -> Stack {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("profiles.json");
        std::fs::write(&file, serde_json::to_string(profiles).unwrap()).unwrap();
        let mut sim = Command::new(bin("latmesh-sim"));
        sim.args(["serve", "--listen", "127.0.0.1:0", "--profiles"])
            .arg(&file)
            .args(["--time-scale", &time_scale.to_string()]);
        let (sim, sim_url) = spawn_until_line(
            "latmesh-sim",
            sim,
            "listening on ",
            Duration::from_secs(20),
            &dir.path().join("sim.log"),
        );
        let mut coord = Command::new(bin("latmesh"));
        coord
            .args(["serve", "--listen", "127.0.0.1:0"])
            .current_dir(dir.path());
        configure(&mut coord);
        let (coord, coord_url) = spawn_until_line(
            "latmesh serve",
            coord,
            "listening on ",
            Duration::from_secs(20),
            &dir.path().join("coordinator.log"),
        );
        Stack {
            sim_addr: sim_url.trim_start_matches("http://").to_string(),
            coord_url,
            dir,
            procs: vec![sim, coord],
        }
    }

    /// The command of agent `id` in `region` connecting to `coordinator` (the stack's, or a
    /// proxy in front of it), its spool in the stack's folder; add flags, then
    /// [`Stack::spawn`] it.
    pub fn agent_command(&self, id: &str, region: &str, coordinator: &str) -> Command {
        let mut a = Command::new(bin("latmesh-agent"));
        a.args(["--coordinator", coordinator, "--region", region])
            .args(["--agent-id", id, "--emulate-region"])
            .arg("--spool-dir")
            .arg(self.dir.path().join(format!("spool-{id}")));
        a
    }

    /// Starts `cmd` as `name` (log `NAME.log` in the stack's folder), killed with the stack,
    /// and returns its process id.
    pub fn spawn(&mut self, name: &str, cmd: Command) -> u32 {
        let p = spawn(name, cmd, &self.log(name));
        let id = p.child.id();
        self.procs.push(p);
        id
    }

    /// Starts agent `id` in `region`, exiting after one campaign.
    pub fn agent(&mut self, id: &str, region: &str) {
        let mut a = self.agent_command(id, region, &self.coord_url);
        a.args(["--exit-after", "1"]);
        self.spawn(&format!("agent-{id}"), a);
    }

    /// Writes `toml` (with `{sim}` replaced by the simulator's address) as a campaign file,
    /// launches it with `latmesh campaign launch` and returns its JSON summary once it is
    /// finished, with the command's output.
    ///
    /// # Panics
    /// When the command writes no summary.
    pub fn launch(&self, toml: &str) -> (Summary, String) {
        let file = self.dir.path().join("campaign.toml");
        std::fs::write(&file, toml.replace("{sim}", &self.sim_addr)).unwrap();
        let json = self.dir.path().join("summary.json");
        let out = Command::new(bin("latmesh"))
            .args(["campaign", "launch"])
            .arg(&file)
            .args(["--coordinator", &self.coord_url, "--start-delay-s", "2"])
            .arg("--json")
            .arg(&json)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let summary = std::fs::read_to_string(&json)
            .unwrap_or_else(|e| panic!("no summary at {} ({e}):\n{text}", json.display()));
        (serde_json::from_str(&summary).unwrap(), text)
    }

    /// Path of a log in the stack's folder (`agent-ID`, `coordinator`, `sim`).
    pub fn log(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.log"))
    }
}

/// Starts, in the background, `latmesh campaign launch` of the demo's rounds (two regions,
/// `rounds` rounds, every provider keyed by the variable `key_env`) against the simulator at
/// `sim_addr` and the coordinator at `coord_url`: writes `campaign.toml` in `dir`, output to
/// `launch.out`, the summary to `summary.json`.
pub fn launch_demo_rounds(
    dir: &std::path::Path,
    sim_addr: &str,
    coord_url: &str,
    rounds: u32,
    key_env: &str,
) -> std::process::Child {
    let campaign = latmesh_cli::cmd::demo::demo_rounds_only()
        .replace("{sim}", sim_addr)
        .replace("count = 12 ", &format!("count = {rounds} "))
        .replace(
            "regions = [\"us-east\", \"eu-west\", \"ap-southeast\"]",
            "regions = [\"us-east\", \"eu-west\"]",
        )
        .replace(
            "model_id = \"deepseek-v4-flash\"",
            &format!("model_id = \"deepseek-v4-flash\"\napi_key_env = \"{key_env}\""),
        );
    let file = dir.join("campaign.toml");
    std::fs::write(&file, campaign).unwrap();
    let out = std::fs::File::create(dir.join("launch.out")).unwrap();
    Command::new(bin("latmesh"))
        .args(["campaign", "launch"])
        .arg(&file)
        .args(["--coordinator", coord_url, "--json"])
        .arg(dir.join("summary.json"))
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap()
}
