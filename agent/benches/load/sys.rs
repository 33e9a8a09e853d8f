//! Process and machine facts from procfs and libc: open-file limit, CPU time, resident
//! memory, socket counts, load average, pinning.

use std::process::{Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

/// Raises the soft open-file limit to the hard one (10,000 streams need 10,000+ sockets on
/// each side). Returns (soft, hard) after the change. Children inherit it.
#[cfg(target_os = "linux")]
pub fn raise_nofile() -> Option<(u64, u64)> {
    #[repr(C)]
    struct RLimit {
        cur: u64,
        max: u64,
    }
    unsafe extern "C" {
        fn getrlimit(resource: i32, rlim: *mut RLimit) -> i32;
        fn setrlimit(resource: i32, rlim: *const RLimit) -> i32;
    }
    const RLIMIT_NOFILE: i32 = 7;
    let mut r = RLimit { cur: 0, max: 0 };
    // SAFETY: plain libc calls with a valid, properly laid out struct.
    unsafe {
        if getrlimit(RLIMIT_NOFILE, &mut r) != 0 {
            return None;
        }
        if r.cur < r.max {
            let want = RLimit {
                cur: r.max,
                max: r.max,
            };
            if setrlimit(RLIMIT_NOFILE, &want) == 0 {
                r.cur = r.max;
            }
        }
    }
    Some((r.cur, r.max))
}

#[cfg(not(target_os = "linux"))]
pub fn raise_nofile() -> Option<(u64, u64)> {
    None
}

/// What `getrusage(RUSAGE_SELF)` says about this process so far (every thread).
#[derive(Clone, Copy, Debug, Default)]
pub struct Usage {
    pub user_s: f64,
    pub sys_s: f64,
    /// Minor page faults.
    pub minflt: i64,
    /// Involuntary context switches: the process was preempted (by another process, or its
    /// time slice ended) while it could have run.
    pub nivcsw: i64,
}

#[cfg(target_os = "linux")]
pub fn usage() -> Usage {
    #[repr(C)]
    struct TimeVal {
        sec: i64,
        usec: i64,
    }
    #[repr(C)]
    struct RUsage {
        utime: TimeVal,
        stime: TimeVal,
        /// maxrss, ixrss, idrss, isrss, minflt, majflt, nswap, inblock, oublock, msgsnd,
        /// msgrcv, nsignals, nvcsw, nivcsw.
        rest: [i64; 14],
    }
    unsafe extern "C" {
        fn getrusage(who: i32, usage: *mut RUsage) -> i32;
    }
    let mut u = RUsage {
        utime: TimeVal { sec: 0, usec: 0 },
        stime: TimeVal { sec: 0, usec: 0 },
        rest: [0; 14],
    };
    // SAFETY: RUSAGE_SELF (0) with a struct of the kernel's layout on 64-bit Linux.
    if unsafe { getrusage(0, &mut u) } != 0 {
        return Usage::default();
    }
    let s = |t: &TimeVal| t.sec as f64 + t.usec as f64 / 1e6;
    Usage {
        user_s: s(&u.utime),
        sys_s: s(&u.stime),
        minflt: u.rest[4],
        nivcsw: u.rest[13],
    }
}

#[cfg(not(target_os = "linux"))]
pub fn usage() -> Usage {
    Usage::default()
}

/// User and system CPU seconds of this process so far.
pub fn cpu_self() -> (f64, f64) {
    let u = usage();
    (u.user_s, u.sys_s)
}

/// Ticks (USER_HZ) the hypervisor took from CPU `cpu` so far (`steal` of `/proc/stat`).
pub fn steal_ticks(cpu: usize) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/stat").ok()?;
    let name = format!("cpu{cpu} ");
    let line = s.lines().find(|l| l.starts_with(&name))?;
    line.split_whitespace().nth(8)?.parse().ok()
}

/// A `kB` field of `/proc/self/status` (`VmRSS`, `VmHWM`), KiB.
pub fn status_kib(field: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines()
        .find(|l| l.starts_with(field) && l[field.len()..].starts_with(':'))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// `TCP: inuse N … mem M` of `/proc/net/sockstat` (machine-wide: both sides of loopback):
/// sockets in use and pages of socket buffers.
pub fn tcp_sockstat() -> Option<(u64, u64)> {
    let s = std::fs::read_to_string("/proc/net/sockstat").ok()?;
    let line = s.lines().find(|l| l.starts_with("TCP:"))?;
    let f: Vec<&str> = line.split_whitespace().collect();
    let get = |name: &str| {
        f.iter()
            .position(|x| *x == name)
            .and_then(|i| f.get(i + 1))
            .and_then(|v| v.parse().ok())
    };
    Some((get("inuse")?, get("mem")?))
}

/// The 1-, 5- and 15-minute load averages.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// The 1-minute load average.
pub fn load1() -> String {
    loadavg()
        .split_whitespace()
        .next()
        .unwrap_or("?")
        .to_string()
}

pub fn have_taskset() -> bool {
    Command::new("taskset")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

pub fn nproc() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".to_string())
}

pub fn mem_total_gib() -> f64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))?
                .split_whitespace()
                .nth(1)?
                .parse::<f64>()
                .ok()
        })
        .map_or(0.0, |kib| kib / 1024.0 / 1024.0)
}

pub fn kernel() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

pub fn utc_now() -> String {
    Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| format!("unix {}", unix_us() / 1_000_000))
}

/// Wall clock, UTC µs (the clock `send_agent_unix_us` is taken with).
pub fn unix_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

pub fn rustc_version() -> String {
    Command::new("rustc")
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

pub fn git_rev() -> String {
    let rev = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let dirty = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .output()
        .ok()
        .is_some_and(|o| !o.stdout.is_empty());
    if dirty {
        format!("{rev} + uncommitted changes")
    } else {
        rev
    }
}

/// CPU seconds (user + system) used so far by process `pid`, from `/proc/PID/stat`
/// (10 ms ticks).
pub fn cpu_of_pid(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may contain spaces) start at field 3.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    // USER_HZ is 100 on every Linux this runs on.
    Some(ticks / 100.0)
}

/// This executable as a child: `[nice -n N] [taskset -c CORE] EXE`, with `N` from
/// `LATMESH_LOAD_NICE` (unset: no `nice`).
pub fn child_command(core: Option<usize>) -> std::io::Result<Command> {
    let exe = std::env::current_exe()?;
    let mut argv: Vec<std::ffi::OsString> = Vec::new();
    if let Ok(n) = std::env::var("LATMESH_LOAD_NICE")
        && !n.trim().is_empty()
    {
        argv.extend(["nice".into(), "-n".into(), n.trim().into()]);
    }
    if let Some(c) = core {
        argv.extend(["taskset".into(), "-c".into(), c.to_string().into()]);
    }
    argv.push(exe.into_os_string());
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]);
    Ok(cmd)
}

/// Seconds this thread has waited on a run queue so far: runnable, not running (the second
/// field of `/proc/thread-self/schedstat`). The clients' runtimes are single-threaded on
/// the main thread, so for them this is the process's.
pub fn runqueue_wait_s() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: f64 = s.split_whitespace().nth(1)?.parse().ok()?;
    Some(ns / 1e9)
}
