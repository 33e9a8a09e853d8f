//! latmesh's ClickHouse store: the client, schema migrations, row types, batch inserts, and
//! every SQL query of the project (`latmesh query …`, `latmesh campaign verify`, reports,
//! `latmesh check` baselines, window ranks). Used by the coordinator (its sink writes here)
//! and the CLI; it depends on neither, only on `latmesh-results` for the summary types it
//! rebuilds from stored rows. Nothing here renders for a terminal.
//!
//! Everything talks HTTP to a real ClickHouse through the `clickhouse` crate, with row
//! validation off ([`client`]): the 18.16 server that Debian ships (and the tests use) knows
//! neither `RowBinaryWithNamesAndTypes` nor the settings the crate sends for validation. So every
//! row type is positional `RowBinary` and is round-tripped against the real server in
//! `tests/tests/clickhouse.rs`. The schema and every query run on 18.16 and on current
//! ClickHouse (see `deploy/clickhouse/README.md`).
//!
//! - [`migrate`](mod@migrate): versioned DDL from `store/migrations/` (this crate's folder), single node
//!   or cluster.
//! - [`rows`]: one `Row` type per table and the conversions from latmesh's domain types.
//! - [`insert`]: [`insert::insert_batches`] / [`insert::insert_batch`] (idempotent per
//!   (campaign, agent, seq)),
//!   [`insert::insert_campaign`], [`insert::insert_agents`].
//! - [`compat`](mod@compat): what a `latmesh compat` run measured ([`insert_compat_run`],
//!   idempotent per run id).
//! - [`fence`]: query ids that keep a timed-out insert from being stored twice.
//! - [`query`]: one file per question: the region × provider matrix with exact merged
//!   percentiles, the outcome mix, sweeps, peak vs off-peak windows, trends, row counts for
//!   verification, a stored campaign's summary and report data, window ranks.
//!
//! Errors are [`StoreError`]; [`StoreError::is_retryable`] tells a sink whether to try again
//! (server down, timeouts, overload) or to set the batch aside (data or schema rejected).

pub mod batch_key;
pub mod check_queries;
pub mod compat;
pub mod fence;
pub mod insert;
pub mod migrate;
pub mod query;
pub mod rows;

pub use compat::{CompatRun, insert_compat_run};
pub use insert::{
    BatchInput, BatchKey, InsertOutcome, IntervalHistogram, WindowLabel, insert_agents,
    insert_batch, insert_batches, insert_campaign, insert_rows,
};
pub use migrate::{MIGRATIONS, Migration, migrate, migrate_within, render_migration};
pub use query::{
    AgentCounts, BatchDuplicates, CampaignCounts, ErrorRow, MatrixRow, QueryFilter, agents,
    campaign, counts, errors, matrix, matrix_filtered,
};
pub use rows::{
    AgentRow, CampaignRow, CompatResultRow, HistogramRow, QualitySampleRow, RequestRow,
};

use std::time::Duration;

/// The error of every storage operation.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A database, cluster or table name that is not a plain identifier
    /// (`[A-Za-z_][A-Za-z0-9_]*`). Not retryable.
    #[error(
        "invalid ClickHouse name {0:?}: use letters, digits and '_' (not starting with a digit)"
    )]
    InvalidName(String),
    /// ClickHouse could not be reached or did not answer in time (connection refused or reset,
    /// timeout, HTTP error without a ClickHouse exception). Retryable.
    #[error("ClickHouse unavailable: {0}")]
    Unavailable(String),
    /// ClickHouse accepted the request but did not answer within its bound ([`Timeouts`]):
    /// a stalled or overloaded server. Retryable. An insert that timed out may still be
    /// executed by the server later (see [`fence`]).
    #[error(
        "ClickHouse did not answer within {} s while {what}",
        after.as_secs_f64()
    )]
    TimedOut {
        /// What latmesh was doing (`"checking which rows of 3 batches are stored"`, …).
        what: String,
        /// The bound that elapsed.
        after: Duration,
    },
    /// ClickHouse refused the data or the statement: a type mismatch (`Code: 53`), incorrect
    /// or unparseable data (`Code: 117`, `27`, `32`, …), an unknown table or column (schema not
    /// migrated), a syntax error, or a row type that does not match its table. Retrying the
    /// same request cannot succeed. `code` is the ClickHouse exception code when there is one.
    #[error("ClickHouse rejected the request{}: {message}", code.map(|c| format!(" (code {c})")).unwrap_or_default())]
    Rejected {
        /// ClickHouse exception code, `None` for client-side failures (serialization).
        code: Option<u32>,
        /// The server's (or client's) message.
        message: String,
    },
    /// Any other ClickHouse exception (overload, too many parts, memory limit, replica or
    /// keeper trouble, …). Retryable.
    #[error("ClickHouse error (code {code}): {message}")]
    Server {
        /// ClickHouse exception code.
        code: u32,
        /// The server's message.
        message: String,
    },
    /// A histogram could not be encoded or decoded. Not retryable.
    #[error(transparent)]
    Histogram(#[from] latmesh_core::hist::HistError),
    /// A migration could not be applied; `source` says why.
    #[error("migration {migration}: {source}")]
    Migration {
        /// Migration name, e.g. `0001_init`.
        migration: String,
        /// What failed.
        source: Box<StoreError>,
    },
}

/// ClickHouse exception codes meaning "this request can never succeed as sent": bad data,
/// bad types, unknown schema objects, bad SQL.
const NON_RETRYABLE_CODES: &[u32] = &[
    6,   // CANNOT_PARSE_TEXT
    8,   // THERE_IS_NO_COLUMN
    10,  // NOT_FOUND_COLUMN_IN_BLOCK
    16,  // NO_SUCH_COLUMN_IN_TABLE
    20,  // NUMBER_OF_COLUMNS_DOESNT_MATCH
    26,  // CANNOT_PARSE_QUOTED_STRING
    27,  // CANNOT_PARSE_INPUT_ASSERTION_FAILED
    32,  // ATTEMPT_TO_READ_AFTER_EOF (RowBinary shorter than the columns)
    33,  // CANNOT_READ_ALL_DATA
    36,  // BAD_ARGUMENTS
    41,  // CANNOT_PARSE_DATETIME
    42,  // NUMBER_OF_ARGUMENTS_DOESNT_MATCH
    43,  // ILLEGAL_TYPE_OF_ARGUMENT
    44,  // ILLEGAL_COLUMN
    46,  // UNKNOWN_FUNCTION
    47,  // UNKNOWN_IDENTIFIER
    48,  // NOT_IMPLEMENTED
    50,  // UNKNOWN_TYPE
    53,  // TYPE_MISMATCH
    57,  // TABLE_ALREADY_EXISTS
    60,  // UNKNOWN_TABLE
    62,  // SYNTAX_ERROR
    69,  // ARGUMENT_OUT_OF_BOUND
    70,  // CANNOT_CONVERT_TYPE
    72,  // CANNOT_PARSE_NUMBER
    73,  // UNKNOWN_FORMAT
    81,  // UNKNOWN_DATABASE
    115, // UNKNOWN_SETTING
    117, // INCORRECT_DATA
    130, // CANNOT_READ_ARRAY_FROM_TEXT
    131, // TOO_LARGE_STRING_SIZE
    190, // SIZES_OF_ARRAYS_DOESNT_MATCH
    194, // REQUIRED_PASSWORD
    192, // UNKNOWN_USER
    193, // WRONG_PASSWORD
    497, // ACCESS_DENIED
    516, // AUTHENTICATION_FAILED
];

/// Exception codes that say the tables do not have the shape the rows need (a missing column,
/// table or database), whatever the rows hold.
const SCHEMA_CODES: &[u32] = &[
    8,  // THERE_IS_NO_COLUMN
    10, // NOT_FOUND_COLUMN_IN_BLOCK
    16, // NO_SUCH_COLUMN_IN_TABLE
    20, // NUMBER_OF_COLUMNS_DOESNT_MATCH
    47, // UNKNOWN_IDENTIFIER
    60, // UNKNOWN_TABLE
    81, // UNKNOWN_DATABASE
];

impl StoreError {
    /// Whether the server refused because its tables lack what latmesh's rows need (a column,
    /// a table, the database): the schema is behind or was changed by hand, not the data bad.
    /// Writers must keep such rows (`latmesh db migrate`, or fixing the table, lets them in).
    pub fn is_schema_mismatch(&self) -> bool {
        self.code().is_some_and(|c| SCHEMA_CODES.contains(&c))
    }

    /// Whether the same request may succeed later (server down or overloaded, timeouts).
    /// `false` for data or schema the server refused, invalid names and histogram codec
    /// failures: retrying those cannot help.
    pub fn is_retryable(&self) -> bool {
        match self {
            StoreError::Unavailable(_)
            | StoreError::TimedOut { .. }
            | StoreError::Server { .. } => true,
            StoreError::InvalidName(_) | StoreError::Rejected { .. } | StoreError::Histogram(_) => {
                false
            }
            StoreError::Migration { source, .. } => source.is_retryable(),
        }
    }

    /// The ClickHouse exception code, when the server sent one.
    pub fn code(&self) -> Option<u32> {
        match self {
            StoreError::Rejected { code, .. } => *code,
            StoreError::Server { code, .. } => Some(*code),
            StoreError::Migration { source, .. } => source.code(),
            _ => None,
        }
    }

    /// Classifies a server exception text (`Code: 53. DB::Exception: …` on current servers,
    /// `Code: 53, e.displayText() = DB::Exception: …` on 18.16).
    pub fn from_server_message(message: &str) -> StoreError {
        let message = message.trim().to_string();
        match exception_code(&message) {
            Some(code) if NON_RETRYABLE_CODES.contains(&code) => StoreError::Rejected {
                code: Some(code),
                message,
            },
            Some(code) => StoreError::Server { code, message },
            None => StoreError::Unavailable(message),
        }
    }
}

/// The number after the first `Code: ` in a ClickHouse exception text.
fn exception_code(message: &str) -> Option<u32> {
    let rest = &message[message.find("Code: ")? + "Code: ".len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

impl From<clickhouse::error::Error> for StoreError {
    fn from(e: clickhouse::error::Error) -> Self {
        use clickhouse::error::Error as E;
        match e {
            E::Network(_) | E::TimedOut => StoreError::Unavailable(e.to_string()),
            E::BadResponse(msg) => StoreError::from_server_message(&msg),
            // Decompression/format trouble of a response can be a truncated body (a dropped
            // connection); let the caller try again.
            E::Decompression(_) => StoreError::Unavailable(e.to_string()),
            other => StoreError::Rejected {
                code: None,
                message: other.to_string(),
            },
        }
    }
}

/// A client for the ClickHouse HTTP endpoint `url` (e.g. `http://127.0.0.1:18123`) with row
/// validation off, as the 18.16 server requires (see the module docs). Add credentials, if
/// any, with [`clickhouse::Client::with_user`] / `with_password`.
///
/// Its connections set `TCP_NODELAY` (the crate's default connector does not): with Nagle's
/// algorithm, a request whose body goes out in several writes can wait ~40 ms for the server's
/// delayed ACK (measured here: a 100-row insert took 31 ms, 4.5 ms with `TCP_NODELAY`).
pub fn client(url: &str) -> clickhouse::Client {
    client_with(url, &Timeouts::default())
}

/// [`client`] whose TCP connects give up after `timeouts.connect` (the other bounds of
/// [`Timeouts`] apply per operation: [`bounded`], the inserts, [`migrate::migrate_within`]).
pub fn client_with(url: &str, timeouts: &Timeouts) -> clickhouse::Client {
    let mut connector = hyper_util::client::legacy::connect::HttpConnector::new();
    connector.set_connect_timeout(Some(timeouts.connect));
    connector.set_nodelay(true);
    connector.set_keepalive(Some(Duration::from_secs(60)));
    let http = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        // Below the server's keep-alive timeout (3 s on 18.16, 10 s on current servers), so
        // the pool never reuses a connection the server is closing.
        .pool_idle_timeout(Duration::from_secs(2))
        .build(connector);
    // `host:port` means `http://host:port`, as for the coordinator address.
    let url = if url.contains("://") {
        url.to_string()
    } else {
        format!("http://{url}")
    };
    let client = clickhouse::Client::with_http_client(http).with_validation(false);
    let client = if is_loopback_url(&url) {
        // Same host: nothing to save on the wire, and the coordinator's LZ4 plus the server's
        // decompression cost CPU the two share (about 16 % of the sink's CPU at 2,000
        // records per batch; see BENCHMARKS.md, "Sink throughput").
        client.with_compression(clickhouse::Compression::None)
    } else {
        client
    };
    client.with_url(url)
}

/// Whether `url` (`scheme://host[:port]/…`) names a loopback host: `localhost`, 127.0.0.0/8
/// or `[::1]`.
fn is_loopback_url(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if let Some(v6) = host.strip_prefix('[') {
        v6.split(']').next().unwrap_or("")
    } else {
        host.split(':').next().unwrap_or("")
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// How long latmesh waits for ClickHouse. Every operation has a bound, so a server that
/// accepts TCP connections but never answers (stopped, overloaded, a hung proxy) makes the
/// operation fail with [`StoreError::TimedOut`] instead of waiting forever.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// Establishing a TCP connection (default 5 s).
    pub connect: Duration,
    /// One query, migration statement or presence check, from sending it to the last byte of
    /// its answer; the base of an insert's bound (default 60 s).
    pub query: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(5),
            query: Duration::from_secs(60),
        }
    }
}

/// Rows an insert may add to its bound per extra second (see [`Timeouts::insert`]).
pub const INSERT_ROWS_PER_S: u64 = 10_000;

impl Timeouts {
    /// The bound of an `INSERT` of `rows` rows, from its last byte sent to the server's
    /// acknowledgement: [`Timeouts::query`] plus 1 s per [`INSERT_ROWS_PER_S`] rows (a
    /// 256-batch round of 2,000-record batches, 512,000 rows, gets 60 + 51 s by default).
    pub fn insert(&self, rows: usize) -> Duration {
        let extra = u64::try_from(rows).unwrap_or(u64::MAX) / INSERT_ROWS_PER_S;
        self.query.saturating_add(Duration::from_secs(extra))
    }
}

/// Runs `op` (a ClickHouse call) for at most `timeout`; `what` says what it does, for the
/// error (`"reading the campaign's windows"`).
///
/// # Errors
/// [`StoreError::TimedOut`] when `timeout` elapses first (the call is dropped); `op`'s own
/// error otherwise.
pub async fn bounded<T, E>(
    timeout: Duration,
    what: impl FnOnce() -> String,
    op: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, StoreError>
where
    StoreError: From<E>,
{
    match tokio::time::timeout(timeout, op).await {
        Ok(r) => r.map_err(StoreError::from),
        Err(_) => Err(StoreError::TimedOut {
            what: what(),
            after: timeout,
        }),
    }
}

/// Health check: `SELECT 1`, bounded by `timeout`.
///
/// # Errors
/// [`StoreError::Unavailable`] when the server does not answer in time or cannot be reached;
/// the server's error otherwise.
pub async fn ping(client: &clickhouse::Client, timeout: Duration) -> Result<(), StoreError> {
    match tokio::time::timeout(timeout, client.query("SELECT toUInt8(1)").fetch_one::<u8>()).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.into()),
        Err(_) => Err(StoreError::Unavailable(format!(
            "no answer to SELECT 1 within {} ms",
            timeout.as_millis()
        ))),
    }
}

/// Checks that `name` is a plain identifier (`[A-Za-z_][A-Za-z0-9_]*`, at most 128 bytes), so it
/// can be spliced into SQL unquoted.
///
/// # Errors
/// [`StoreError::InvalidName`] otherwise.
pub fn check_identifier(name: &str) -> Result<(), StoreError> {
    let mut chars = name.chars();
    let ok = name.len() <= 128
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(StoreError::InvalidName(name.to_string()))
    }
}

/// Seconds of a UTC µs timestamp for a `DateTime` column, clamped into its range
/// (1970 … 2106).
pub(crate) fn datetime_secs(unix_us: i64) -> u32 {
    u32::try_from(unix_us.div_euclid(1_000_000).max(0)).unwrap_or(u32::MAX)
}

/// A UTC µs timestamp for a `UInt64` column: negative values (before 1970, never from a
/// sane clock) clamp to 0.
pub(crate) fn unsigned_us(unix_us: i64) -> u64 {
    u64::try_from(unix_us).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_server_messages() {
        let old =
            "Code: 53, e.displayText() = DB::Exception: Type mismatch in IN or VALUES section";
        let new = "Code: 117. DB::Exception: Incorrect data: … (INCORRECT_DATA) (version 24.8.1)";
        for m in [old, new] {
            let e = StoreError::from_server_message(m);
            assert!(!e.is_retryable(), "{e}");
            assert!(matches!(e, StoreError::Rejected { code: Some(_), .. }));
        }
        let schema = StoreError::from_server_message(
            "Code: 16, e.displayText() = DB::Exception: No such column failover in table latmesh.requests",
        );
        assert!(
            schema.is_schema_mismatch() && !schema.is_retryable(),
            "{schema}"
        );
        assert!(!StoreError::from_server_message(old).is_schema_mismatch());
        let busy = StoreError::from_server_message("Code: 252. DB::Exception: Too many parts");
        assert!(busy.is_retryable());
        assert_eq!(busy.code(), Some(252));
        let proxy = StoreError::from_server_message("503 Service Unavailable");
        assert!(proxy.is_retryable());
        assert_eq!(proxy.code(), None);
    }

    #[test]
    fn identifiers() {
        for ok in ["latmesh", "_x1", "A_b_9"] {
            check_identifier(ok).unwrap();
        }
        for bad in ["", "1db", "a-b", "a.b", "a b", "a`b", "ä"] {
            assert!(check_identifier(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn loopback_urls_are_recognised() {
        for yes in [
            "http://127.0.0.1:18123",
            "http://127.0.0.2:8123/",
            "https://localhost",
            "LOCALHOST:8123",
            "http://user:pw@127.0.0.1:8123/?x=1",
            "http://[::1]:8123",
            "127.0.0.1:9",
        ] {
            assert!(is_loopback_url(yes), "{yes}");
        }
        for no in [
            "http://10.0.0.5:8123",
            "https://clickhouse.internal:8443",
            "http://[2001:db8::1]:8123",
            "http://127.0.0.1.example.com",
            "http://localhost.evil@10.0.0.1",
            "",
        ] {
            assert!(!is_loopback_url(no), "{no}");
        }
    }

    #[test]
    fn time_conversions_clamp() {
        assert_eq!(datetime_secs(1_700_000_000_999_999), 1_700_000_000);
        assert_eq!(datetime_secs(-5), 0);
        assert_eq!(unsigned_us(-1), 0);
        assert_eq!(unsigned_us(42), 42);
    }
}
