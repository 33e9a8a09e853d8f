//! Logging of the latmesh binaries: `tracing` to stderr, filtered by `LATMESH_LOG`.

/// The environment variable that sets the log filter, in `tracing-subscriber`'s `EnvFilter`
/// syntax: a level (`debug`) or per-target directives (`latmesh_agent=debug,info`).
pub const LOG_ENV: &str = "LATMESH_LOG";

/// Installs the process's log subscriber: stderr (colours only on a terminal), filtered by
/// `LATMESH_LOG`, or by `default_filter` when it is unset or empty. A `LATMESH_LOG` that
/// does not parse is not fatal: `default_filter` is used and the first log line says why.
///
/// # Panics
/// When a global subscriber is already installed (call once, first thing in `main`).
pub fn init(default_filter: &str) {
    let set = std::env::var(LOG_ENV).ok().filter(|v| !v.trim().is_empty());
    let (filter, bad) = match set.as_deref().map(tracing_subscriber::EnvFilter::try_new) {
        Some(Ok(f)) => (f, None),
        Some(Err(e)) => (
            tracing_subscriber::EnvFilter::new(default_filter),
            Some(e.to_string()),
        ),
        None => (tracing_subscriber::EnvFilter::new(default_filter), None),
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
    if let Some(e) = bad {
        tracing::warn!(
            "{LOG_ENV}={:?} is not a log filter ({e}); using {default_filter:?}",
            set.unwrap_or_default()
        );
    }
}
