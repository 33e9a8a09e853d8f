//! The Grafana dashboard (`deploy/grafana/dashboards/latmesh.json`) against a real ClickHouse:
//! a small campaign with time windows runs through real processes (simulator, coordinator
//! storing into a fresh database of the test ClickHouse, three agents), then every SQL query of
//! the dashboard — each panel target and each query variable — is interpolated the way Grafana
//! and the ClickHouse data source plugin would (template variables such as
//! `${campaign:singlequote}`, the plugin's macros `$__timeFilter(col)`, `$__fromTime`,
//! `$__toTime`, `$__interval_s`), for every metric × percentile × scenario choice, sent over
//! HTTP to ClickHouse and must return rows. The region × provider panel must equal
//! `latmesh query matrix` to the microsecond, and the peak vs off-peak panel must show both
//! windows. The JSON itself must be a well-formed dashboard (unique panel ids, a data source
//! and targets on every panel, no overlapping panels, every variable used is defined).
//!
//! The server: `LATMESH_CLICKHOUSE_URL` when set (the test command starts one), else
//! `scripts/clickhouse.sh start`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use latmesh_testkit::{bin, spawn, spawn_until_line};
use serde_json::Value;

const PLUGIN: &str = "grafana-clickhouse-datasource";
const REGIONS: [&str; 3] = ["us-east", "eu-west", "ap-southeast"];
const SCENARIOS: [&str; 2] = ["chat-short", "long-input"];

fn dashboard() -> Value {
    let path = latmesh_testkit::repo().join("deploy/grafana/dashboards/latmesh.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn str_of<'a>(v: &'a Value, key: &str, what: &str) -> &'a str {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("{what}: no string {key:?} in {v}"))
}

/// Every panel, nested ones (in collapsed rows) included.
fn panels(d: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().expect("panels array") {
        out.push(p);
        if let Some(inner) = p.get("panels").and_then(Value::as_array) {
            out.extend(inner);
        }
    }
    out
}

fn variables(d: &Value) -> &Vec<Value> {
    d["templating"]["list"]
        .as_array()
        .expect("templating.list array")
}

/// Names of the template variables `sql` refers to (`$name`, `${name}`, `${name:format}`),
/// Grafana's built-ins (`$__…`) left out.
fn referenced_variables(sql: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let b = sql.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'$' {
            let braced = b.get(i + 1) == Some(&b'{');
            let start = if braced { i + 2 } else { i + 1 };
            let mut j = start;
            while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_') {
                j += 1;
            }
            let name = &sql[start..j];
            if !name.is_empty() && !name.starts_with("__") {
                out.insert(name.to_string());
            }
            i = j.max(i + 1);
        } else {
            i += 1;
        }
    }
    out
}

#[test]
fn dashboard_json_is_a_valid_dashboard() {
    let d = dashboard();
    assert!(!str_of(&d, "title", "dashboard").is_empty());
    assert!(!str_of(&d, "uid", "dashboard").is_empty());
    assert!(d["schemaVersion"].as_u64().is_some(), "schemaVersion");
    let vars = variables(&d);
    let names: BTreeSet<&str> = vars.iter().map(|v| str_of(v, "name", "variable")).collect();
    for wanted in ["campaign", "scenario", "metric", "percentile"] {
        assert!(names.contains(wanted), "no variable {wanted}: {names:?}");
    }
    assert_eq!(names.len(), vars.len(), "duplicate variable names");
    for v in vars {
        let name = str_of(v, "name", "variable");
        match str_of(v, "type", name) {
            "query" => {
                assert_eq!(str_of(&v["datasource"], "type", name), PLUGIN);
                assert!(!str_of(v, "query", name).trim().is_empty());
            }
            "custom" => {
                let options = v["options"].as_array().expect("custom options");
                assert!(!options.is_empty(), "{name}: no options");
                assert_eq!(
                    options.len(),
                    str_of(v, "query", name).split(',').count(),
                    "{name}: options and query differ"
                );
            }
            "datasource" => assert_eq!(str_of(v, "query", name), PLUGIN),
            "textbox" | "constant" => {}
            other => panic!("variable {name}: unexpected type {other}"),
        }
    }

    let panels = panels(&d);
    assert!(panels.len() >= 5, "only {} panels", panels.len());
    let mut ids = BTreeSet::new();
    let mut boxes: Vec<(u64, [u64; 4])> = Vec::new();
    for p in &panels {
        let id = p["id"]
            .as_u64()
            .unwrap_or_else(|| panic!("panel without id: {p}"));
        assert!(ids.insert(id), "panel id {id} is used twice");
        let title = str_of(p, "title", "panel");
        let ty = str_of(p, "type", title);
        if ty == "row" {
            continue;
        }
        assert!(
            [
                "table",
                "timeseries",
                "barchart",
                "stat",
                "bargauge",
                "heatmap"
            ]
            .contains(&ty),
            "panel {id} {title:?}: unexpected type {ty}"
        );
        assert_eq!(
            str_of(&p["datasource"], "type", title),
            PLUGIN,
            "panel {title}"
        );
        let g = &p["gridPos"];
        let rect = ["x", "y", "w", "h"].map(|k| {
            g[k].as_u64()
                .unwrap_or_else(|| panic!("panel {title}: gridPos.{k}"))
        });
        assert!(
            rect[0] + rect[2] <= 24 && rect[2] > 0 && rect[3] > 0,
            "panel {title}: gridPos {g}"
        );
        for (other, o) in &boxes {
            let overlap = rect[0] < o[0] + o[2]
                && o[0] < rect[0] + rect[2]
                && rect[1] < o[1] + o[3]
                && o[1] < rect[1] + rect[3];
            assert!(!overlap, "panels {id} and {other} overlap");
        }
        boxes.push((id, rect));
        let targets = p["targets"]
            .as_array()
            .unwrap_or_else(|| panic!("panel {title}: no targets"));
        assert!(!targets.is_empty(), "panel {title}: no targets");
        let mut refs = BTreeSet::new();
        for t in targets {
            assert!(
                refs.insert(str_of(t, "refId", title)),
                "panel {title}: refId twice"
            );
            assert_eq!(str_of(&t["datasource"], "type", title), PLUGIN);
            assert_eq!(str_of(t, "editorType", title), "sql");
            let format = t["format"].as_u64().expect("format");
            let query_type = str_of(t, "queryType", title);
            assert!(
                (format == 0 && query_type == "timeSeries")
                    || (format == 1 && query_type == "table"),
                "panel {title}: format {format} with queryType {query_type}"
            );
            if ty == "timeseries" {
                assert_eq!(
                    format, 0,
                    "panel {title}: a time series panel wants time series"
                );
            }
            let sql = str_of(t, "rawSql", title);
            for name in referenced_variables(sql) {
                assert!(
                    names.contains(name.as_str()),
                    "panel {title}: ${name} is no variable"
                );
            }
        }
    }
    for v in vars {
        if let Some(q) = v.get("query").and_then(Value::as_str) {
            for name in referenced_variables(q) {
                assert!(names.contains(name.as_str()), "variable query uses ${name}");
            }
        }
    }
}

// ---- interpolation, as Grafana and the plugin do it -------------------------------------------

/// A template variable's current value(s) and display text.
#[derive(Clone, Debug)]
struct Var {
    values: Vec<String>,
    text: String,
}

impl Var {
    fn one(value: &str, text: &str) -> Var {
        Var {
            values: vec![value.to_string()],
            text: text.to_string(),
        }
    }
}

/// What the time picker and the panel width give: the range (UTC s) and `$__interval_s`.
struct Range {
    from_s: u64,
    to_s: u64,
    interval_s: u64,
}

/// `${name:format}` of a value list, as Grafana formats it (only the formats the dashboard may
/// use; anything else fails the test).
fn format_var(name: &str, var: &Var, format: Option<&str>) -> String {
    match format {
        None | Some("raw") | Some("csv") => var.values.join(","),
        Some("singlequote") => var
            .values
            .iter()
            .map(|v| format!("'{}'", v.replace('\\', "\\\\").replace('\'', "\\'")))
            .collect::<Vec<_>>()
            .join(","),
        Some("text") => var.text.clone(),
        Some(other) => panic!("${{{name}:{other}}}: format not handled by this test"),
    }
}

/// `sql` with the plugin's macros and the template variables replaced by concrete values.
/// Panics on an unknown macro or variable, and when a `$` is left.
fn interpolate(sql: &str, vars: &BTreeMap<String, Var>, range: &Range) -> String {
    let mut out = String::new();
    let mut rest = sql;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        if let Some(after) = rest.strip_prefix("$__") {
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            let name = &after[..end];
            let mut tail = &after[end..];
            let mut args = None;
            if let Some(a) = tail.strip_prefix('(') {
                let close = a.find(')').expect("macro argument list closed");
                args = Some(a[..close].trim().to_string());
                tail = &a[close + 1..];
            }
            let from = format!("toDateTime({})", range.from_s);
            let to = format!("toDateTime({})", range.to_s);
            let expanded = match (name, args) {
                ("timeFilter", Some(col)) => format!("{col} >= {from} AND {col} <= {to}"),
                ("fromTime", None) => from,
                ("toTime", None) => to,
                ("interval_s", None) => range.interval_s.to_string(),
                (other, args) => panic!("macro $__{other}({args:?}) not handled by this test"),
            };
            out.push_str(&expanded);
            rest = tail;
            continue;
        }
        let (name, format, tail) = if let Some(braced) = rest.strip_prefix("${") {
            let close = braced.find('}').expect("${ closed");
            let inner = &braced[..close];
            let (name, format) = match inner.split_once(':') {
                Some((n, f)) => (n, Some(f)),
                None => (inner, None),
            };
            (name, format, &braced[close + 1..])
        } else {
            let after = &rest[1..];
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            (&after[..end], None, &after[end..])
        };
        let var = vars
            .get(name)
            .unwrap_or_else(|| panic!("variable ${name} has no value in this test"));
        out.push_str(&format_var(name, var, format));
        rest = tail;
    }
    out.push_str(rest);
    assert!(!out.contains('$'), "left uninterpolated:\n{out}");
    out
}

#[test]
fn interpolation_matches_grafana_and_the_plugin() {
    let vars: BTreeMap<String, Var> = [
        ("db".to_string(), Var::one("latmesh", "latmesh")),
        (
            "scenario".to_string(),
            Var {
                values: vec!["a".into(), "it's".into()],
                text: "All".into(),
            },
        ),
        ("metric".to_string(), Var::one("ttft", "TTFT")),
    ]
    .into();
    let range = Range {
        from_s: 100,
        to_s: 200,
        interval_s: 5,
    };
    assert_eq!(
        interpolate(
            "SELECT ${metric}_us FROM $db.t WHERE s IN (${scenario:singlequote}) AND $__timeFilter(send_time) AND x = $__interval_s -- ${metric:text}",
            &vars,
            &range
        ),
        "SELECT ttft_us FROM latmesh.t WHERE s IN ('a','it\\'s') AND send_time >= toDateTime(100) AND send_time <= toDateTime(200) AND x = 5 -- TTFT"
    );
    assert_eq!(
        referenced_variables("${a} $b ${c:text} $__timeFilter(t) $__interval_s"),
        ["a", "b", "c"].map(String::from).into()
    );
}

// ---- ClickHouse over plain HTTP ---------------------------------------------------------------

/// Runs `sql` on the ClickHouse at `url` (`http://host:port`) over HTTP and returns the JSON
/// result (`meta`, `data`, `rows`), or the server's error text.
fn ch_json(url: &str, sql: &str) -> Result<Value, String> {
    let authority = url
        .strip_prefix("http://")
        .expect("an http:// ClickHouse URL")
        .trim_end_matches('/');
    let mut s = std::net::TcpStream::connect(authority).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(60))).ok();
    let body = sql.as_bytes();
    let head = format!(
        "POST /?default_format=JSON HTTP/1.0\r\nHost: {authority}\r\nContent-Type: text/plain; charset=UTF-8\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).map_err(|e| e.to_string())?;
    s.write_all(body).map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&raw);
    let (headers, payload) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no HTTP header end in {text:?}"))?;
    let status: u16 = headers
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("no status in {headers:?}"))?;
    let payload = if headers
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(payload)
    } else {
        payload.to_string()
    };
    if status != 200 {
        return Err(format!("HTTP {status}: {payload}"));
    }
    if payload.trim().is_empty() {
        // Statements without a result (DROP, CREATE).
        return Ok(Value::Null);
    }
    serde_json::from_str(&payload).map_err(|e| format!("{e}: {payload}"))
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

fn rows(result: &Value) -> &Vec<Value> {
    result["data"].as_array().expect("JSON data array")
}

fn num(v: &Value) -> f64 {
    match v {
        Value::Number(n) => n.as_f64().unwrap(),
        // 64-bit integers come quoted.
        Value::String(s) => s.parse().unwrap_or_else(|_| panic!("not a number: {s}")),
        other => panic!("not a number: {other}"),
    }
}

// ---- the campaign ---------------------------------------------------------------------------

/// Providers of the campaign (simulator profiles): a fast one, a steady one, one that throttles
/// (429) and one that cuts streams, so the outcome mix has more than `ok`.
const PROVIDERS: [&str; 4] = ["fast-lane", "steady", "throttler", "flaky"];
const ROUNDS: usize = 2;

/// A campaign of its own (not the demo's, which changes with the project): 2 rounds of two
/// streaming scenarios over [`PROVIDERS`], with per-region zones and a `peak` window around the
/// current UTC hour: us-east and ap-southeast (UTC) are in it, eu-west (UTC+12) is not, so the
/// stored rows carry both `peak` and `off-peak`.
fn campaign_toml(sim_addr: &str) -> String {
    let now_s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let hour = (now_s / 3600) % 24;
    let mut text = format!(
        r#"[campaign]
name = "grafana"
seed = 11
regions = ["us-east", "eu-west", "ap-southeast"]

[campaign.timezones]
us-east = "UTC"
eu-west = "+12:00"
ap-southeast = "UTC"

[windows]
peak = "{:02}:00-{:02}:00"

[rounds]
count = {ROUNDS}
interval_s = 2
gap_ms = 100

[[scenarios]]
name = "chat-short"
prompt_ids = ["short-qa-*"]
stream = true
max_tokens = 24
temperature = 0.0

[[scenarios]]
name = "long-input"
prompt_ids = ["long-in-*"]
stream = true
max_tokens = 16
temperature = 0.0
"#,
        (hour + 23) % 24,
        (hour + 2) % 24
    );
    for p in PROVIDERS {
        text.push_str(&format!(
            "\n[[providers]]\nname = \"{p}\"\nbase_url = \"http://{sim_addr}/{p}/v1\"\nmodel_id = \"deepseek-v4-flash\"\n"
        ));
    }
    text
}

/// Runs the campaign through a simulator, a coordinator storing into `db` and three agents;
/// returns its id once `campaign verify` finds everything stored.
fn run_campaign(ch_url: &str, db: &str, dir: &std::path::Path) -> String {
    let log = |name: &str| dir.join(format!("{name}.log"));
    let mut sim = Command::new(bin("latmesh-sim"));
    sim.args(["serve", "--listen", "127.0.0.1:0"]);
    let (_sim, sim_url) = spawn_until_line(
        "sim",
        sim,
        "listening on ",
        Duration::from_secs(20),
        &log("sim"),
    );
    let mut coord = Command::new(bin("latmesh"));
    coord
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--clickhouse-url",
            ch_url,
        ])
        .args(["--clickhouse-db", db, "--spool-dir"])
        .arg(dir.join("spool"));
    let (_coord, coord_url) = spawn_until_line(
        "coordinator",
        coord,
        "listening on ",
        Duration::from_secs(30),
        &log("coordinator"),
    );
    let _agents: Vec<_> = REGIONS
        .iter()
        .map(|region| {
            let mut a = Command::new(bin("latmesh-agent"));
            a.args(["--coordinator", &coord_url, "--region", region])
                .arg("--emulate-region")
                .args([
                    "--agent-id",
                    &format!("grafana-{region}"),
                    "--exit-after",
                    "1",
                ])
                .arg("--spool-dir")
                .arg(dir.join(format!("agent-{region}")));
            spawn(region, a, &log(region))
        })
        .collect();
    let file = dir.join("campaign.toml");
    std::fs::write(&file, campaign_toml(sim_url.trim_start_matches("http://"))).unwrap();
    let json = dir.join("summary.json");
    let out = Command::new(bin("latmesh"))
        .args(["campaign", "launch"])
        .arg(&file)
        .args(["--coordinator", &coord_url, "--json"])
        .arg(&json)
        .env_remove("LATMESH_CLICKHOUSE_URL")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "campaign launch failed: {}\nsee {}",
        String::from_utf8_lossy(&out.stderr),
        log("coordinator").display()
    );
    let summary: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let id = summary["campaign_id"].as_str().unwrap().to_string();
    latmesh_testkit::verify_until_clean(ch_url, db, &id);
    id
}

/// `latmesh query matrix --json` of one scenario: (region, provider) → cell.
fn cli_matrix(
    ch_url: &str,
    db: &str,
    id: &str,
    scenario: &str,
) -> BTreeMap<(String, String), Value> {
    let out = Command::new(bin("latmesh"))
        .args([
            "query",
            "matrix",
            "--campaign",
            id,
            "--scenario",
            scenario,
            "--json",
        ])
        .args(["--clickhouse-url", ch_url, "--clickhouse-db", db])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "query matrix: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["cells"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                (
                    c["region"].as_str().unwrap().to_string(),
                    c["provider"].as_str().unwrap().to_string(),
                ),
                c.clone(),
            )
        })
        .collect()
}

#[test]
fn every_dashboard_query_runs_on_clickhouse_and_returns_rows() {
    let d = dashboard();
    let ch_url = latmesh_testkit::clickhouse_url();
    let (_client, db) = latmesh_testkit::fresh_db("grafana");
    let dir = tempfile::tempdir().unwrap();
    let campaign_id = run_campaign(ch_url, &db, dir.path());

    let now_s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let range = Range {
        from_s: now_s - 3600,
        to_s: now_s + 3600,
        interval_s: 2,
    };
    let run = |what: &str, sql: &str| -> Value {
        ch_json(ch_url, sql).unwrap_or_else(|e| panic!("{what}: {e}\n--- SQL:\n{sql}"))
    };

    // The variables' own queries, with the database as the only choice made so far.
    let mut vars: BTreeMap<String, Var> = BTreeMap::new();
    vars.insert("db".into(), Var::one(&db, &db));
    let var_def = |name: &str| -> &Value {
        variables(&d)
            .iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no variable {name}"))
    };
    let var_values = |result: &Value| -> Vec<String> {
        rows(result)
            .iter()
            .map(|r| {
                r.as_object()
                    .and_then(|o| o.values().next())
                    .and_then(Value::as_str)
                    .unwrap()
                    .to_string()
            })
            .collect()
    };
    let campaigns = var_values(&run(
        "variable campaign",
        &interpolate(
            str_of(var_def("campaign"), "query", "campaign"),
            &vars,
            &range,
        ),
    ));
    assert_eq!(campaigns, std::slice::from_ref(&campaign_id));
    vars.insert("campaign".into(), Var::one(&campaign_id, &campaign_id));
    let scenarios = var_values(&run(
        "variable scenario",
        &interpolate(
            str_of(var_def("scenario"), "query", "scenario"),
            &vars,
            &range,
        ),
    ));
    assert_eq!(scenarios, SCENARIOS);

    let custom = |name: &str| -> Vec<(String, String)> {
        var_def(name)["options"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| {
                (
                    o["value"].as_str().unwrap().to_string(),
                    o["text"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    let metrics = custom("metric");
    let percentiles = custom("percentile");
    assert!(metrics.iter().any(|(v, _)| v == "ttft"), "{metrics:?}");
    assert_eq!(
        percentiles
            .iter()
            .map(|(v, _)| v.as_str())
            .collect::<Vec<_>>(),
        ["0.5", "0.9", "0.95", "0.99"]
    );
    // Each scenario alone, and all of them selected together (a multi-value).
    let mut scenario_choices = vec![Var {
        values: scenarios.clone(),
        text: "All".into(),
    }];
    scenario_choices.extend(scenarios.iter().map(|s| Var::one(s, s)));

    let panels = panels(&d);
    let mut queries = 0;
    // (panel id, metric, percentile, scenario text) → result
    let mut results: BTreeMap<(u64, String, String, String), Value> = BTreeMap::new();
    for (metric, metric_text) in &metrics {
        for (percentile, percentile_text) in &percentiles {
            for scenario in &scenario_choices {
                vars.insert("metric".into(), Var::one(metric, metric_text));
                vars.insert("percentile".into(), Var::one(percentile, percentile_text));
                vars.insert("scenario".into(), scenario.clone());
                for p in &panels {
                    let Some(targets) = p.get("targets").and_then(Value::as_array) else {
                        continue;
                    };
                    let title = interpolate(str_of(p, "title", "panel"), &vars, &range);
                    for t in targets {
                        let sql = interpolate(str_of(t, "rawSql", &title), &vars, &range);
                        let what = format!(
                            "panel {title:?} target {} ({metric}, {percentile}, scenario {})",
                            t["refId"], scenario.text
                        );
                        let result = run(&what, &sql);
                        queries += 1;
                        assert!(!rows(&result).is_empty(), "{what}: no rows\n{sql}");
                        if t["format"] == 0 {
                            // A time series needs a DateTime time column.
                            let meta = result["meta"].as_array().unwrap();
                            assert!(
                                meta.iter().any(|c| c["type"] == "DateTime"),
                                "{what}: no DateTime column: {meta:?}"
                            );
                        }
                        results.insert(
                            (
                                p["id"].as_u64().unwrap(),
                                metric.clone(),
                                percentile.clone(),
                                scenario.text.clone(),
                            ),
                            result,
                        );
                    }
                }
            }
        }
    }
    eprintln!("{queries} dashboard queries ran, each with rows");

    // The region × provider panel equals `latmesh query matrix`, to the microsecond.
    let matrix_panel = panels
        .iter()
        .find(|p| str_of(p, "title", "panel").starts_with("Region × provider"))
        .expect("the region × provider panel");
    let matrix_id = matrix_panel["id"].as_u64().unwrap();
    for scenario in SCENARIOS {
        let cli = cli_matrix(ch_url, &db, &campaign_id, scenario);
        for (metric, json_key) in [("ttft", "ttft"), ("ttfc", "ttfc"), ("e2e", "e2e")] {
            for (percentile, key) in [
                ("0.5", "p50_ms"),
                ("0.9", "p90_ms"),
                ("0.95", "p95_ms"),
                ("0.99", "p99_ms"),
            ] {
                let result = &results[&(
                    matrix_id,
                    metric.to_string(),
                    percentile.to_string(),
                    scenario.to_string(),
                )];
                let panel_rows = rows(result);
                let expected: Vec<_> = cli
                    .iter()
                    .filter(|(_, c)| c[json_key].is_object())
                    .collect();
                assert_eq!(
                    panel_rows.len(),
                    expected.len(),
                    "{scenario} {metric} {percentile}: cells"
                );
                for r in panel_rows {
                    let k = (
                        r["region"].as_str().unwrap().to_string(),
                        r["provider"].as_str().unwrap().to_string(),
                    );
                    let cell = cli
                        .get(&k)
                        .unwrap_or_else(|| panic!("{k:?} not in the CLI matrix"));
                    let want = cell[json_key][key].as_f64().unwrap();
                    let got = num(&r["value_ms"]);
                    assert!(
                        (got - want).abs() < 1e-6,
                        "{scenario} {metric} {percentile} {k:?}: panel {got} ms, query matrix {want} ms"
                    );
                }
            }
        }
        // TPOT: the matrix carries its P50.
        let result = &results[&(
            matrix_id,
            "tpot".to_string(),
            "0.5".to_string(),
            scenario.to_string(),
        )];
        for r in rows(result) {
            let k = (
                r["region"].as_str().unwrap().to_string(),
                r["provider"].as_str().unwrap().to_string(),
            );
            let want = cli[&k]["tpot_p50_ms"].as_f64().unwrap();
            assert!((num(&r["value_ms"]) - want).abs() < 1e-6, "tpot {k:?}");
        }
    }
    let regions_seen: BTreeSet<String> = rows(
        &results[&(
            matrix_id,
            "ttft".to_string(),
            "0.5".to_string(),
            "All".to_string(),
        )],
    )
    .iter()
    .map(|r| r["region"].as_str().unwrap().to_string())
    .collect();
    assert_eq!(
        regions_seen,
        ["ALL", "ap-southeast", "eu-west", "us-east"]
            .map(String::from)
            .into()
    );

    // Peak vs off-peak shows both windows; attempts add up to every stored request.
    for p in &panels {
        let sql = p["targets"][0]["rawSql"].as_str().unwrap_or_default();
        if !sql.contains("time_window") {
            continue;
        }
        let result = &results[&(
            p["id"].as_u64().unwrap(),
            "ttft".to_string(),
            "0.5".to_string(),
            "All".to_string(),
        )];
        let windows: BTreeSet<&str> = rows(result)
            .iter()
            .map(|r| r["time_window"].as_str().unwrap())
            .collect();
        assert_eq!(windows, ["off-peak", "peak"].into(), "panel {}", p["title"]);
    }
    let stored = run(
        "request count",
        &format!("SELECT count() AS n FROM {db}.requests WHERE campaign_id = '{campaign_id}'"),
    );
    let stored_n = num(&rows(&stored)[0]["n"]);
    let outcome_panel = panels
        .iter()
        .find(|p| str_of(p, "title", "panel").starts_with("Outcome mix"))
        .expect("the outcome panel");
    let outcome_rows = &results[&(
        outcome_panel["id"].as_u64().unwrap(),
        "ttft".to_string(),
        "0.5".to_string(),
        "All".to_string(),
    )];
    let attempts: f64 = rows(outcome_rows).iter().map(|r| num(&r["attempts"])).sum();
    assert_eq!(
        attempts, stored_n,
        "outcome mix attempts vs stored requests"
    );
    assert_eq!(
        stored_n,
        (REGIONS.len() * ROUNDS * PROVIDERS.len() * SCENARIOS.len()) as f64,
        "regions × rounds × providers × scenarios, one attempt each"
    );

    ch_json(ch_url, &format!("DROP DATABASE IF EXISTS {db}")).expect("drop database");
}
