//! Series: a campaign launched with a `[schedule]` runs again and again, each run an ordinary
//! campaign of its own.
//!
//! The [`Scheduler`] runs series over the coordinator's [`State`], through its public API
//! only (the state knows nothing of series). Launching a plan with a schedule
//! ([`Scheduler::launch_request`]) creates a *series* whose id (`<name>-<8 hex digits>`)
//! takes the place of a campaign id; nothing is sent to agents yet. Once a second the
//! coordinator's tick ([`Scheduler::tick_series`]) launches the runs that are due: run `N` is the campaign `<series>-r<N>` (N from 1), the same plan without its schedule
//! and the same budget caps, pushed to the connected agents of its regions like any launch,
//! started at its due time (see [`latmesh_core::schedule`] for when runs are due). Runs never
//! overlap: a run due while the previous one is still going waits until it has finished and
//! then starts after the launch's start delay; the series records the delay as its warning
//! (`latmesh campaign series ID` shows it) and logs it. A run that cannot be launched (no
//! connected agent in a region, an agent busy with another campaign) is retried every second,
//! with the reason as the warning.
//!
//! `campaign cancel SERIES` ends the series: no further run starts, and the running run (if
//! any) is cancelled like any campaign. Cancelling one run (`campaign cancel SERIES-r2`)
//! leaves the series going.
//!
//! With a state directory the series persists in `DIR/series/<id>.json` (at creation, at each
//! run's launch, at the cancel and at its end), so a restarted coordinator continues the
//! schedule ([`Scheduler::restore`], when the coordinator starts serving); a run launched just before a kill, whose campaign exists but which the series
//! record does not list yet, is adopted on restart (runs are numbered, so never launched
//! twice). In ClickHouse runs are ordinary campaigns: find a series' runs by their id prefix,
//! `WHERE startsWith(campaign_id, 'SERIES-r')`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use latmesh_core::plan::Plan;
use latmesh_proto::pb;
use serde::{Deserialize, Serialize};

use crate::budget::Caps;
use crate::state::{LaunchOptions, Launched, State, StateError, now_unix_us};

/// Format version of a series record.
pub const SERIES_FORMAT: u32 = 1;

/// Shortest delay between a run's launch and its round 0, µs (time for the plan to reach the
/// agents when the tick comes late).
pub const MIN_RUN_START_DELAY_US: i64 = 500_000;

/// One run of a series, as launched.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeriesRun {
    /// Its campaign id, `SERIES-rN`.
    pub campaign_id: String,
    /// N, from 1.
    pub run: u32,
    /// When the schedule wanted it to start, coordinator clock, UTC µs.
    pub due_unix_us: i64,
    /// When it started (its round 0), coordinator clock, UTC µs.
    pub start_at_unix_us: i64,
}

/// A series of scheduled runs (persisted as `DIR/series/<id>.json`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Series {
    /// [`SERIES_FORMAT`].
    pub format: u32,
    /// Series id.
    pub series_id: String,
    /// The plan, with its schedule (runs get it without).
    pub plan: Plan,
    /// Budget caps of every run.
    #[serde(default)]
    pub caps: Caps,
    /// Runs launch even when agents lack a provider's API key variable (see [`crate::keys`]).
    #[serde(default)]
    pub allow_missing_keys: bool,
    /// Delay between a run's launch and its round 0 when it is launched late (e.g. after a
    /// delay), µs.
    pub start_delay_us: i64,
    /// When the series was launched, coordinator clock, UTC µs.
    pub created_at_unix_us: i64,
    /// When run 1 was due, UTC µs (`every` schedules count from it).
    pub first_due_unix_us: i64,
    /// When the next run is due, UTC µs; `None`: no further run (`runs` reached, `until`
    /// passed, or cancelled).
    pub next_due_unix_us: Option<i64>,
    /// Runs launched, in order.
    pub runs: Vec<SeriesRun>,
    /// When `campaign cancel SERIES` came, UTC µs.
    #[serde(default)]
    pub cancelled_at_us: Option<i64>,
    /// The latest delay or launch problem (`run 3 delayed: run 2 is still running`); cleared
    /// when a run starts on time.
    #[serde(default)]
    pub warning: Option<String>,
}

impl Series {
    /// The campaign id of run `run`.
    pub fn run_id(&self, run: u32) -> String {
        format!("{}-r{run}", self.series_id)
    }

    /// The number of the next run.
    fn next_run(&self) -> u32 {
        self.runs.len() as u32 + 1
    }

    /// The plan each run gets: without its schedule.
    pub fn run_plan_json(&self) -> String {
        let mut p = self.plan.clone();
        p.schedule = None;
        p.to_json()
    }

    /// Notes run `run` launched at `start_at_unix_us` (due at `due`), and when the next is
    /// due.
    fn push_run(&mut self, run: SeriesRun) {
        let due = run.due_unix_us;
        self.runs.push(run);
        self.next_due_unix_us = self
            .plan
            .schedule
            .as_ref()
            .and_then(|s| s.due_us(&self.plan, self.next_run(), self.first_due_unix_us, due));
    }
}

/// What a control call's cancel did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cancelled {
    /// Agents the cancel was pushed to.
    pub agent_ids: Vec<String>,
    /// The id named a series.
    pub series: bool,
    /// The series' run that was running and was cancelled (`None`: none).
    pub run_id: Option<String>,
}

/// Writes the series' record when campaigns persist (errors are logged: the series stays in
/// memory and is written with its next change).
fn save(state: &State, s: &Series) {
    if let Err(e) = state.save_series(&s.series_id, s) {
        tracing::error!(series = %s.series_id, error = format!("{e:#}"), "cannot persist the series");
    }
}

/// The series of scheduled campaigns of a coordinator, launching their runs on its [`State`]
/// (a handle: clones share the series).
///
/// Its lock (the series book) may be held while calling the state (which takes its own
/// locks), never the other way round: the state never calls the scheduler.
#[derive(Clone, Debug, Default)]
pub struct Scheduler {
    state: State,
    book: Arc<Mutex<BTreeMap<String, Series>>>,
}

impl Scheduler {
    /// A scheduler with no series, launching runs on `state`.
    pub fn new(state: State) -> Self {
        Scheduler {
            state,
            book: Arc::default(),
        }
    }

    /// The state it launches runs on.
    pub fn state(&self) -> &State {
        &self.state
    }

    /// The series, by id (a poisoned lock is taken over).
    fn book(&self) -> MutexGuard<'_, BTreeMap<String, Series>> {
        self.book.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The control API's launch: a plan with a schedule starts a series
    /// ([`Scheduler::start_series`]), any other plan is launched at once
    /// ([`State::launch_with`]).
    ///
    /// # Errors
    /// As [`State::launch_with`] and [`Scheduler::start_series`].
    pub fn launch_request(
        &self,
        plan_json: &str,
        start_delay_us: i64,
        opts: LaunchOptions,
    ) -> Result<Launched, StateError> {
        let plan: Plan =
            serde_json::from_str(plan_json).map_err(|e| StateError::BadPlan(e.to_string()))?;
        if plan.schedule.is_some() {
            return self.start_series(plan, start_delay_us, opts);
        }
        self.state.launch_with(plan_json, start_delay_us, &opts)
    }

    /// Creates a series for `plan` (which has a schedule): persisted, its first run due at
    /// the schedule's first time from now + `start_delay_us`. Runs are launched by
    /// [`Scheduler::tick_series`] with `opts`' caps and `allow_missing_keys` (its campaign id is
    /// not used: runs are `SERIES-rN`).
    ///
    /// # Errors
    /// [`StateError::BadPlan`] when the plan has no schedule, the caps do not fit it, or no
    /// run would be due (e.g. `until` has passed); [`StateError::Storage`] when the state
    /// directory cannot take the series.
    pub fn start_series(
        &self,
        plan: Plan,
        start_delay_us: i64,
        opts: LaunchOptions,
    ) -> Result<Launched, StateError> {
        let LaunchOptions {
            caps,
            allow_missing_keys,
            ..
        } = opts;
        let schedule = plan
            .schedule
            .clone()
            .ok_or_else(|| StateError::BadPlan("the plan has no schedule".into()))?;
        caps.check(&plan).map_err(StateError::BadPlan)?;
        let now = now_unix_us();
        let first_due = schedule
            .first_due_us(&plan, now + start_delay_us)
            .ok_or_else(|| {
                StateError::BadPlan(format!(
                    "schedule ({}): no run would be due (until has passed, or no window starts within 8 days)",
                    schedule.describe(&plan)
                ))
            })?;
        let series_id = format!(
            "{}-{}",
            plan.name,
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let plan_hash = plan.hash();
        let series = Series {
            format: SERIES_FORMAT,
            series_id: series_id.clone(),
            plan,
            caps,
            allow_missing_keys,
            start_delay_us: start_delay_us.max(MIN_RUN_START_DELAY_US),
            created_at_unix_us: now,
            first_due_unix_us: first_due,
            next_due_unix_us: Some(first_due),
            runs: Vec::new(),
            cancelled_at_us: None,
            warning: None,
        };
        {
            let mut book = self.book();
            self.state
                .save_series(&series_id, &series)
                .map_err(|e| StateError::Storage(format!("{e:#}")))?;
            tracing::info!(series = %series_id, schedule = %schedule.describe(&series.plan),
                first_due = %latmesh_core::schedule::rfc3339(first_due), "series created");
            book.insert(series_id.clone(), series);
        }
        Ok(Launched {
            campaign_id: series_id,
            plan_hash,
            start_at_unix_us: first_due,
            agent_ids: Vec::new(),
            series: true,
            warnings: Vec::new(),
        })
    }

    /// Launches every run that is due at `now_unix_us` (within its series' start delay),
    /// unless its series' previous run is still going (then the run is delayed, with a
    /// warning). Returns the campaign ids launched. Called once a second by the coordinator.
    pub fn tick_series(&self, now_unix_us: i64) -> Vec<String> {
        struct Due {
            series_id: String,
            run: u32,
            run_id: String,
            due: i64,
            previous: Option<String>,
            delay_us: i64,
            plan_json: String,
            caps: Caps,
            allow_missing_keys: bool,
        }
        let candidates: Vec<Due> = {
            let book = self.book();
            book.values()
                .filter(|s| s.cancelled_at_us.is_none())
                .filter_map(|s| {
                    let due = s.next_due_unix_us?;
                    (now_unix_us + s.start_delay_us >= due).then(|| Due {
                        series_id: s.series_id.clone(),
                        run: s.next_run(),
                        run_id: s.run_id(s.next_run()),
                        due,
                        previous: s.runs.last().map(|r| r.campaign_id.clone()),
                        delay_us: s.start_delay_us,
                        plan_json: s.run_plan_json(),
                        caps: s.caps.clone(),
                        allow_missing_keys: s.allow_missing_keys,
                    })
                })
                .collect()
        };
        let mut launched = Vec::new();
        for d in candidates {
            if let Some(prev) = &d.previous
                && self.state.campaign_brief(prev).is_some_and(|b| !b.finished)
            {
                if now_unix_us >= d.due {
                    self.series_warning(
                        &d.series_id,
                        format!(
                            "run {} delayed: run {} ({prev}) is still running (runs never overlap; it starts when that one has finished)",
                            d.run,
                            d.run - 1
                        ),
                    );
                }
                continue;
            }
            // On time: round 0 at the due time; late: the start delay from now.
            let delay_us = if now_unix_us + MIN_RUN_START_DELAY_US <= d.due {
                d.due - now_unix_us
            } else if now_unix_us > d.due {
                d.delay_us
            } else {
                MIN_RUN_START_DELAY_US
            };
            let opts = LaunchOptions {
                caps: d.caps.clone(),
                campaign_id: Some(d.run_id.clone()),
                allow_missing_keys: d.allow_missing_keys,
            };
            match self.state.launch_with(&d.plan_json, delay_us, &opts) {
                Ok(l) => {
                    let late_s = (l.start_at_unix_us - d.due) as f64 / 1e6;
                    tracing::info!(series = %d.series_id, run = d.run, campaign = %l.campaign_id,
                        agents = l.agent_ids.len(), late_s, "series run launched");
                    {
                        let mut book = self.book();
                        if let Some(s) = book.get_mut(&d.series_id) {
                            if late_s < 1.0 {
                                s.warning = None;
                            }
                            s.push_run(SeriesRun {
                                campaign_id: l.campaign_id.clone(),
                                run: d.run,
                                due_unix_us: d.due,
                                start_at_unix_us: l.start_at_unix_us,
                            });
                            if s.next_due_unix_us.is_none() {
                                tracing::info!(series = %s.series_id, runs = s.runs.len(), "series: last run launched");
                            }
                            save(&self.state, s);
                        }
                    }
                    launched.push(l.campaign_id);
                }
                Err(e) => {
                    self.series_warning(
                        &d.series_id,
                        format!("run {} not launched yet (retried every second): {e}", d.run),
                    );
                }
            }
        }
        launched
    }

    /// Sets a series' warning, logging it when it changed.
    fn series_warning(&self, series_id: &str, warning: String) {
        if let Some(s) = self.book().get_mut(series_id)
            && s.warning.as_deref() != Some(warning.as_str())
        {
            tracing::warn!(series = %series_id, "{warning}");
            s.warning = Some(warning);
        }
    }

    /// Whether `id` names a series.
    pub fn is_series(&self, id: &str) -> bool {
        self.book().contains_key(id)
    }

    /// A series and its runs (`None`: no such series).
    pub fn series_status(&self, series_id: &str) -> Option<pb::SeriesReply> {
        let s = self.book().get(series_id).cloned()?;
        let runs: Vec<pb::SeriesRun> = s
            .runs
            .iter()
            .map(|r| {
                let brief = self.state.campaign_brief(&r.campaign_id);
                pb::SeriesRun {
                    campaign_id: r.campaign_id.clone(),
                    run: r.run,
                    due_coord_unix_us: r.due_unix_us,
                    start_at_coord_unix_us: r.start_at_unix_us,
                    state: brief.as_ref().map_or("unknown", |b| b.state()).into(),
                    finished: brief.as_ref().is_none_or(|b| b.finished),
                    complete: brief.as_ref().is_some_and(|b| b.complete),
                }
            })
            .collect();
        let all_finished = runs.iter().all(|r| r.finished);
        let no_more = s.cancelled_at_us.is_some() || s.next_due_unix_us.is_none();
        let state = if s.cancelled_at_us.is_some() && all_finished {
            "cancelled"
        } else if s.cancelled_at_us.is_some() {
            "cancelling"
        } else if no_more && all_finished {
            "finished"
        } else if !all_finished {
            "running"
        } else {
            "waiting"
        };
        Some(pb::SeriesReply {
            series_id: s.series_id.clone(),
            name: s.plan.name.clone(),
            schedule: s
                .plan
                .schedule
                .as_ref()
                .map(|sch| sch.describe(&s.plan))
                .unwrap_or_default(),
            runs_planned: s.plan.schedule.as_ref().map_or(0, |sch| sch.runs),
            state: state.into(),
            next_due_coord_unix_us: if s.cancelled_at_us.is_some() {
                0
            } else {
                s.next_due_unix_us.unwrap_or(0)
            },
            runs,
            warning: s.warning.clone().unwrap_or_default(),
            finished: no_more && all_finished,
        })
    }

    /// The control API's cancel: a series id ends its series (no further run; its running
    /// run is cancelled), any other id cancels that campaign ([`State::cancel`]).
    ///
    /// # Errors
    /// [`StateError::Finished`] for a series already ended or cancelled, else as
    /// [`State::cancel`].
    pub fn cancel_request(&self, id: &str) -> Result<Cancelled, StateError> {
        let last = self.book().get(id).map(|s| {
            (
                s.cancelled_at_us,
                s.next_due_unix_us,
                s.runs.last().cloned(),
            )
        });
        let Some((cancelled_at, next_due, last_run)) = last else {
            return Ok(Cancelled {
                agent_ids: self.state.cancel(id)?,
                series: false,
                run_id: None,
            });
        };
        let running = last_run
            .filter(|r| {
                self.state
                    .campaign_brief(&r.campaign_id)
                    .is_some_and(|b| !b.finished)
            })
            .map(|r| r.campaign_id);
        if cancelled_at.is_some() || (next_due.is_none() && running.is_none()) {
            return Err(StateError::Finished {
                campaign: id.to_string(),
                how: if cancelled_at.is_some() {
                    "series cancelled"
                } else {
                    "series finished"
                }
                .into(),
            });
        }
        if let Some(s) = self.book().get_mut(id) {
            s.cancelled_at_us = Some(now_unix_us());
            s.next_due_unix_us = None;
            save(&self.state, s);
        }
        let agent_ids = match &running {
            Some(run) => match self.state.cancel(run) {
                Ok(a) => a,
                Err(StateError::Finished { .. }) => Vec::new(),
                Err(e) => return Err(e),
            },
            None => Vec::new(),
        };
        tracing::warn!(series = %id, running = ?running, "series cancelled: no further run starts");
        Ok(Cancelled {
            agent_ids,
            series: true,
            run_id: running,
        })
    }

    /// Loads the series of the state's directory (the coordinator does when it starts
    /// serving, after [`State::with_state_dir`]), adopting runs launched just before a kill
    /// that the series record does not list yet. A series already known is left as it is.
    pub fn restore(&self) {
        let records: Vec<Series> = self.state.series_records();
        for mut s in records {
            if self.is_series(&s.series_id) {
                continue;
            }
            if s.format != SERIES_FORMAT {
                tracing::error!(series = %s.series_id, format = s.format, "series record of another format skipped");
                continue;
            }
            let mut adopted = false;
            while s.cancelled_at_us.is_none()
                && let Some(due) = s.next_due_unix_us
                && let Some(b) = self.state.campaign_brief(&s.run_id(s.next_run()))
            {
                tracing::info!(series = %s.series_id, run = s.next_run(), "series: adopting a run launched before the restart");
                s.push_run(SeriesRun {
                    campaign_id: s.run_id(s.next_run()),
                    run: s.next_run(),
                    due_unix_us: due,
                    start_at_unix_us: b.start_at_unix_us,
                });
                adopted = true;
            }
            if s.cancelled_at_us.is_none() && s.next_due_unix_us.is_some() {
                tracing::info!(series = %s.series_id, runs = s.runs.len(),
                    next_due = %latmesh_core::schedule::rfc3339(s.next_due_unix_us.unwrap_or(0)),
                    "series loaded from the state directory: its schedule continues");
            }
            let mut book = self.book();
            if adopted {
                save(&self.state, &s);
            }
            book.insert(s.series_id.clone(), s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc;

    const SECOND: i64 = 1_000_000;

    fn plan(schedule: &str) -> Plan {
        let text = format!(
            r#"
[campaign]
name = "patrol"
regions = ["us-east"]
[rounds]
count = 1
interval_s = 1.0
gap_ms = 10
[[scenarios]]
name = "chat"
prompt_ids = ["short-qa-en-001"]
max_tokens = 8
[[providers]]
name = "p"
base_url = "http://127.0.0.1:9/v1"
model_id = "m"
[schedule]
{schedule}
"#
        );
        latmesh_core::campaign::load_toml_str(&text, std::path::Path::new(".")).unwrap()
    }

    fn agent(state: &State) -> mpsc::Receiver<Result<pb::CoordinatorMessage, tonic::Status>> {
        let (tx, rx) = mpsc::channel(64);
        state.connect(
            &pb::AgentHello {
                agent_id: "a1".into(),
                region: "us-east".into(),
                version: "t".into(),
                protocol_version: 1,
                ..Default::default()
            },
            tx,
        );
        rx
    }

    /// The agent delivers an empty batch and says it is done: the run finishes, complete.
    fn finish(state: &State, campaign_id: &str) {
        state
            .batch(
                "a1",
                pb::ResultBatch {
                    campaign_id: campaign_id.into(),
                    seq: 1,
                    ..Default::default()
                },
            )
            .unwrap();
        state
            .done(
                "a1",
                &pb::CampaignDone {
                    campaign_id: campaign_id.into(),
                    last_seq: 1,
                    ..Default::default()
                },
            )
            .unwrap();
        assert!(state.campaign_brief(campaign_id).unwrap().finished);
    }

    fn pushed_plans(
        rx: &mut mpsc::Receiver<Result<pb::CoordinatorMessage, tonic::Status>>,
    ) -> Vec<pb::PlanPush> {
        let mut out = Vec::new();
        while let Ok(Ok(m)) = rx.try_recv() {
            if let Some(pb::coordinator_message::Kind::Plan(p)) = m.kind {
                out.push(p);
            }
        }
        out
    }

    #[tokio::test]
    async fn runs_are_launched_when_due_and_never_overlap() {
        let sched = Scheduler::default();
        let state = sched.state().clone();
        let mut rx = agent(&state);
        let p = plan("every = \"3s\"\nruns = 2");
        let l = sched
            .launch_request(&p.to_json(), SECOND, LaunchOptions::default())
            .unwrap();
        assert!(l.series && l.agent_ids.is_empty());
        let id = l.campaign_id.clone();
        assert!(id.starts_with("patrol-") && sched.is_series(&id));
        let first = l.start_at_unix_us;
        // Nothing is pushed before the tick; the tick launches run 1 for its due time.
        assert!(pushed_plans(&mut rx).is_empty());
        assert_eq!(sched.tick_series(now_unix_us()), [format!("{id}-r1")]);
        let pushed = pushed_plans(&mut rx);
        assert_eq!(pushed.len(), 1);
        assert_eq!(pushed[0].campaign_id, format!("{id}-r1"));
        // The run's plan has no schedule (and the hash of the plain plan).
        let run_plan: Plan = serde_json::from_str(&pushed[0].plan_json).unwrap();
        assert!(run_plan.schedule.is_none());
        let mut plain = p.clone();
        plain.schedule = None;
        assert_eq!(pushed[0].plan_hash, plain.hash());
        assert!((pushed[0].start_at_coord_unix_us - first).abs() < SECOND);
        // Run 2 is due at first + 3 s; run 1 is still going: delayed, with a warning.
        assert!(sched.tick_series(first + 3 * SECOND).is_empty());
        let s = sched.series_status(&id).unwrap();
        assert_eq!((s.state.as_str(), s.runs.len()), ("running", 1));
        assert!(s.warning.contains("run 2 delayed: run 1"), "{}", s.warning);
        assert_eq!(s.next_due_coord_unix_us, first + 3 * SECOND);
        // Run 1 finishes: run 2 starts (late, after the start delay).
        finish(&state, &format!("{id}-r1"));
        let t = now_unix_us().max(first + 4 * SECOND);
        assert_eq!(sched.tick_series(t), [format!("{id}-r2")]);
        let s = sched.series_status(&id).unwrap();
        assert_eq!(s.runs.len(), 2);
        assert_eq!(s.runs[1].due_coord_unix_us, first + 3 * SECOND);
        assert_eq!((s.next_due_coord_unix_us, s.finished), (0, false));
        // No third run; the series finishes with its last run.
        assert!(sched.tick_series(first + 60 * SECOND).is_empty());
        finish(&state, &format!("{id}-r2"));
        let s = sched.series_status(&id).unwrap();
        assert_eq!((s.state.as_str(), s.finished), ("finished", true));
        assert!(s.runs.iter().all(|r| r.complete && r.state == "complete"));
        // What its table shows (the CLI's `ui::series` tests).
        assert!(
            s.runs.iter().any(|r| r.campaign_id == format!("{id}-r2"))
                && s.schedule.contains("every 3s, 2 runs"),
            "{s:?}"
        );
        // A finished series cannot be cancelled; a run can be watched, the series cannot.
        assert!(matches!(
            sched.cancel_request(&id),
            Err(StateError::Finished { .. })
        ));
        assert!(state.watch(&format!("{id}-r1")).is_ok());
    }

    #[tokio::test]
    async fn a_run_waits_for_agents_and_cancel_stops_the_series() {
        let sched = Scheduler::default();
        let state = sched.state().clone();
        let p = plan("every = \"1h\"\nruns = 5");
        let id = sched
            .launch_request(&p.to_json(), SECOND, LaunchOptions::default())
            .unwrap()
            .campaign_id;
        // No agent yet: not launched, the reason is the warning; retried on the next tick.
        assert!(sched.tick_series(now_unix_us()).is_empty());
        let s = sched.series_status(&id).unwrap();
        assert!(s.warning.contains("no connected agent"), "{}", s.warning);
        let mut rx = agent(&state);
        assert_eq!(sched.tick_series(now_unix_us()).len(), 1);
        assert_eq!(pushed_plans(&mut rx).len(), 1);
        // Cancelling the series cancels its running run and starts no further one.
        let c = sched.cancel_request(&id).unwrap();
        assert_eq!(c.run_id.as_deref(), Some(format!("{id}-r1").as_str()));
        assert_eq!(
            (c.series, c.agent_ids.as_slice()),
            (true, &["a1".to_string()][..])
        );
        assert!(state.is_cancelled(&format!("{id}-r1")));
        assert!(sched.tick_series(now_unix_us() + 3_600 * SECOND).is_empty());
        let s = sched.series_status(&id).unwrap();
        assert_eq!(
            (s.state.as_str(), s.next_due_coord_unix_us),
            ("cancelling", 0)
        );
        assert!(matches!(
            sched.cancel_request(&id),
            Err(StateError::Finished { .. })
        ));
        // An ordinary campaign id still cancels that campaign.
        assert!(matches!(
            sched.cancel_request("nope"),
            Err(StateError::UnknownCampaign(_))
        ));
    }

    #[tokio::test]
    async fn a_run_to_an_agent_without_a_provider_s_key_waits_unless_the_series_allows_it() {
        let sched = Scheduler::default();
        let state = sched.state().clone();
        let mut p = plan("every = \"1h\"\nruns = 2");
        p.providers[0].api_key_env = Some("P_KEY".into());
        let (tx, mut rx) = mpsc::channel(64);
        state.connect(
            &pb::AgentHello {
                agent_id: "a1".into(),
                region: "us-east".into(),
                protocol_version: 1,
                key_env_names: vec!["OTHER".into()],
                key_env_reported: true,
                ..Default::default()
            },
            tx,
        );
        let id = sched
            .launch_request(&p.to_json(), SECOND, LaunchOptions::default())
            .unwrap()
            .campaign_id;
        assert!(sched.tick_series(now_unix_us()).is_empty());
        let s = sched.series_status(&id).unwrap();
        assert!(
            s.warning
                .contains("run 1 not launched yet (retried every second): agent a1 (region us-east) lacks $P_KEY for provider p"),
            "{}",
            s.warning
        );
        assert!(pushed_plans(&mut rx).is_empty());
        // A series launched with --allow-missing-keys runs anyway.
        let opts = LaunchOptions {
            allow_missing_keys: true,
            ..Default::default()
        };
        let allowed = sched
            .launch_request(&p.to_json(), SECOND, opts)
            .unwrap()
            .campaign_id;
        let launched = sched.tick_series(now_unix_us());
        assert_eq!(launched, [format!("{allowed}-r1")]);
    }

    #[tokio::test]
    async fn a_restarted_coordinator_continues_the_schedule() {
        let dir = tempfile::tempdir().unwrap();
        let p = plan("every = \"1h\"\nruns = 3");
        let (id, first) = {
            let sched = Scheduler::default();
            let state = sched.state().clone();
            state
                .with_state_dir(crate::persist::StateDir::open(dir.path()).unwrap())
                .unwrap();
            let _rx = agent(&state);
            let l = sched
                .launch_request(&p.to_json(), SECOND, LaunchOptions::default())
                .unwrap();
            assert_eq!(sched.tick_series(now_unix_us()).len(), 1);
            finish(&state, &format!("{}-r1", l.campaign_id));
            // Run 2 launched, then the coordinator dies before the series record lists it:
            // simulated by launching the run's campaign directly.
            state
                .launch_with(
                    &p.to_json(),
                    SECOND,
                    &LaunchOptions {
                        caps: Caps::default(),
                        campaign_id: Some(format!("{}-r2", l.campaign_id)),
                        ..Default::default()
                    },
                )
                .unwrap();
            (l.campaign_id, l.start_at_unix_us)
        };
        let sched = Scheduler::default();
        let state = sched.state().clone();
        state
            .with_state_dir(crate::persist::StateDir::open(dir.path()).unwrap())
            .unwrap();
        // What the coordinator does when it starts serving.
        sched.restore();
        let s = sched.series_status(&id).unwrap();
        // Run 2 adopted (not launched twice), run 3 due on the grid.
        assert_eq!(s.runs.len(), 2);
        assert_eq!(s.runs[1].campaign_id, format!("{id}-r2"));
        assert_eq!(s.next_due_coord_unix_us, first + 2 * 3_600 * SECOND);
        let _rx = agent(&state);
        assert!(sched.tick_series(now_unix_us()).is_empty(), "not due yet");
        finish(&state, &format!("{id}-r2"));
        assert_eq!(
            sched.tick_series(first + 2 * 3_600 * SECOND),
            [format!("{id}-r3")]
        );
        assert_eq!(sched.series_status(&id).unwrap().next_due_coord_unix_us, 0);
    }

    #[test]
    fn launches_without_a_schedule_are_plain_campaigns_and_bad_caps_are_refused() {
        let sched = Scheduler::default();
        let mut p = plan("every = \"1h\"\nruns = 1");
        let e = sched
            .launch_request(
                &p.to_json(),
                SECOND,
                LaunchOptions {
                    caps: Caps::from_request(1.0, 0),
                    ..Default::default()
                },
            )
            .unwrap_err();
        assert!(e.to_string().contains("--max-cost needs prices"), "{e}");
        p.schedule = None;
        // A plain plan goes to State::launch_with (and needs agents).
        let e = sched
            .launch_request(&p.to_json(), SECOND, LaunchOptions::default())
            .unwrap_err();
        assert!(matches!(e, StateError::NoAgent { .. }), "{e}");
    }
}
