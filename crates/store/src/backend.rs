//! The two backends (SQLite embedded, PostgreSQL shared): their pools, their
//! migration sets, and the few places where their SQL differs.
//!
//! The table modules write each statement once, in SQLite's form with `?` and
//! `?N` placeholders, and run it through [`Store::sql`], which rewrites the
//! placeholders as `$N` for PostgreSQL. What else differs (the current time,
//! idle seconds, a newline, how a write transaction starts) comes from
//! [`Backend`]. Every column type is chosen so that both decode into the same
//! Rust type: BIGINT and INTEGER into `i64`, DOUBLE PRECISION and REAL into
//! `f64`, BOOLEAN and 0/1 into `bool`, timestamps as ISO-8601 text.

use crate::{Store, StoreError};
use sqlx::migrate::Migrator;
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::sqlite::SqlitePool;
use sqlx::{AssertSqlSafe, Postgres, Sqlite, Transaction};
use std::time::Duration;

/// SQLite's migrations: the files directly in `migrations/` (sqlx skips folders,
/// so `migrations/postgres/` is not part of this set).
pub(crate) static SQLITE_MIGRATOR: Migrator = sqlx::migrate!("../../migrations");

/// PostgreSQL's migrations: `migrations/postgres/`, one twin per SQLite file,
/// with the same number and description.
pub(crate) static POSTGRES_MIGRATOR: Migrator = sqlx::migrate!("../../migrations/postgres");

/// Which database engine a store talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// A SQLite file or in-memory database (the embedded default).
    Sqlite,
    /// A PostgreSQL server (the shared database of several machines).
    Postgres,
}

impl Backend {
    /// The SQL expression of the current time as stored (ISO-8601 UTC text).
    pub(crate) fn now(self) -> &'static str {
        match self {
            Backend::Sqlite => "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')",
            // Defined by migrations/postgres/0001_initial.sql.
            Backend::Postgres => "spmv_now()",
        }
    }

    /// The SQL expression of the seconds elapsed since the stored time `column`.
    pub(crate) fn seconds_since(self, column: &str) -> String {
        match self {
            Backend::Sqlite => format!("((julianday('now') - julianday({column})) * 86400.0)"),
            Backend::Postgres => format!(
                "(EXTRACT(EPOCH FROM (clock_timestamp() - ({column})::timestamptz))::DOUBLE PRECISION)"
            ),
        }
    }

    /// The SQL expression of a newline character.
    pub(crate) fn newline(self) -> &'static str {
        match self {
            Backend::Sqlite => "char(10)",
            Backend::Postgres => "chr(10)",
        }
    }

    /// The migrations of this backend.
    pub(crate) fn migrator(self) -> &'static Migrator {
        match self {
            Backend::Sqlite => &SQLITE_MIGRATOR,
            Backend::Postgres => &POSTGRES_MIGRATOR,
        }
    }

    /// The backend's name, as in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }
}

/// The connection pool of a store: one of the two backends.
#[derive(Debug, Clone)]
pub(crate) enum Pool {
    /// SQLite.
    Sqlite(SqlitePool),
    /// PostgreSQL.
    Postgres(PgPool),
}

impl Pool {
    /// Which backend this pool talks to.
    pub(crate) fn backend(&self) -> Backend {
        match self {
            Pool::Sqlite(_) => Backend::Sqlite,
            Pool::Postgres(_) => Backend::Postgres,
        }
    }
}

/// Runs `$body` with `$pool` bound to the store's pool, whichever backend it is.
/// The body is compiled once per backend, so the same query text gets each
/// backend's types.
macro_rules! on_pool {
    ($store:expr, |$pool:ident| $body:expr) => {
        match &$store.pool {
            $crate::backend::Pool::Sqlite($pool) => $body,
            $crate::backend::Pool::Postgres($pool) => $body,
        }
    };
}

/// Runs one statement on the store's pool: `$query` (a `sqlx::query*` call on
/// the statement), each `$arg` bound in order, then `$run` (`fetch_all`,
/// `fetch_optional`, `fetch_one` or `execute`) awaited. The statement keeps its
/// own line in the caller; this only spares the repeated bind-and-fetch chain.
macro_rules! run_query {
    ($store:expr, $query:expr, [$($arg:expr),* $(,)?], $run:ident) => {
        on_pool!($store, |pool| $query$(.bind($arg))*.$run(pool).await)
    };
}

/// Runs one statement that changes rows (`sqlx::query` on `$sql`, each `$arg`
/// bound in order) and gives how many rows it changed.
macro_rules! rows_changed {
    ($store:expr, $sql:expr, [$($arg:expr),* $(,)?]) => {
        on_pool!($store, |pool| sqlx::query($sql)$(.bind($arg))*
            .execute(pool)
            .await
            .map(|d| d.rows_affected()))
    };
}

/// Runs one statement that changes rows once per item of `$items`, all in one
/// write transaction (after a crash, all of them or none), and gives how many
/// rows changed in all. `$sql` is the statement in this backend's form
/// ([`Store::sql`]); `$query` builds it from `$text` (that statement) with the
/// arguments of `$item` bound.
macro_rules! rows_changed_each {
    ($store:expr, $sql:expr, $items:expr, |$text:ident, $item:pat_param| $query:expr) => {{
        let sql: String = $sql.0;
        on_pool!($store, |pool| async {
            let mut tx = $crate::backend::BeginWrite::begin_write(pool).await?;
            let mut changed = 0;
            for $item in $items {
                let $text = sqlx::AssertSqlSafe(sql.clone());
                changed += $query.execute(&mut *tx).await?.rows_affected();
            }
            tx.commit().await?;
            Ok::<_, sqlx::Error>(changed)
        }
        .await)
    }};
}

/// Starting a transaction that writes.
pub(crate) trait BeginWrite {
    /// The database of the transaction.
    type Db: sqlx::Database;
    /// Begins a transaction that will write.
    fn begin_write(
        &self,
    ) -> impl std::future::Future<Output = Result<Transaction<'static, Self::Db>, sqlx::Error>> + Send;
}

impl BeginWrite for SqlitePool {
    type Db = Sqlite;
    /// IMMEDIATE takes the write lock up front (waiting up to the busy timeout),
    /// so concurrent writers queue instead of failing on a lock upgrade.
    async fn begin_write(&self) -> Result<Transaction<'static, Sqlite>, sqlx::Error> {
        self.begin_with("BEGIN IMMEDIATE").await
    }
}

impl BeginWrite for PgPool {
    type Db = Postgres;
    /// PostgreSQL locks rows as they are written; a plain transaction.
    async fn begin_write(&self) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
        self.begin().await
    }
}

/// Rewrites SQLite placeholders (`?`, numbered in order, and `?N`) as
/// PostgreSQL's `$N`, leaving quoted text and identifiers alone.
pub(crate) fn postgres_placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 16);
    let mut next = 0u32;
    let mut quote: Option<char> = None;
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => {
                quote = None;
                out.push(c);
            }
            (Some(_), c) => out.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                out.push(c);
            }
            (None, '?') => {
                let mut digits = String::new();
                while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                    digits.push(*d);
                    chars.next();
                }
                out.push('$');
                if digits.is_empty() {
                    next += 1;
                    out.push_str(&next.to_string());
                } else {
                    out.push_str(&digits);
                }
            }
            (None, c) => out.push(c),
        }
    }
    out
}

impl Store {
    /// Which backend this store talks to.
    pub fn backend(&self) -> Backend {
        self.pool.backend()
    }

    /// A statement written in SQLite's form, in this backend's form.
    pub(crate) fn sql(&self, text: &str) -> AssertSqlSafe<String> {
        match self.backend() {
            Backend::Sqlite => AssertSqlSafe(text.to_string()),
            Backend::Postgres => AssertSqlSafe(postgres_placeholders(text)),
        }
    }
}

/// Connections kept by the pool of a PostgreSQL database.
const POSTGRES_MAX_CONNECTIONS: u32 = 8;

/// How many times connecting to a PostgreSQL server that refuses is tried (a
/// server and its database started together: the database may not be up yet).
const POSTGRES_CONNECT_ATTEMPTS: u32 = 10;

/// Opens a pool on the PostgreSQL database at `url`.
pub(crate) async fn connect_postgres(url: &str, shown: &str) -> Result<PgPool, StoreError> {
    let refused = |e: &sqlx::Error| matches!(e, sqlx::Error::Io(_));
    retrying(POSTGRES_CONNECT_ATTEMPTS, 100, refused, || {
        PgPoolOptions::new()
            .max_connections(POSTGRES_MAX_CONNECTIONS)
            .acquire_timeout(crate::BUSY_TIMEOUT)
            .connect(url)
    })
    .await
    .map_err(|source| StoreError::Connect {
        location: shown.to_string(),
        source,
    })
}

/// Runs `attempt` up to `attempts` times while it fails with an error that
/// `transient` accepts, waiting `step_ms` times the number of tries so far
/// after each; gives the first success or the last error.
pub(crate) async fn retrying<T, E, F>(
    attempts: u32,
    step_ms: u64,
    transient: impl Fn(&E) -> bool,
    mut attempt: impl FnMut() -> F,
) -> Result<T, E>
where
    F: std::future::Future<Output = Result<T, E>>,
{
    let mut tries = 1;
    loop {
        match attempt().await {
            Err(e) if transient(&e) && tries < attempts => {
                tokio::time::sleep(Duration::from_millis(step_ms * u64::from(tries))).await;
                tries += 1;
            }
            outcome => return outcome,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::postgres_placeholders as pg;

    #[test]
    fn placeholders_are_numbered_outside_quotes() {
        assert_eq!(
            pg("SELECT a FROM t WHERE b = ? AND c = ?"),
            "SELECT a FROM t WHERE b = $1 AND c = $2"
        );
        assert_eq!(pg("x = ?1 OR y = ?1 || ?2"), "x = $1 OR y = $1 || $2");
        assert_eq!(
            pg("strftime('%Y?', 'now') = ? AND \"we?rd\" = ?"),
            "strftime('%Y?', 'now') = $1 AND \"we?rd\" = $2"
        );
        assert_eq!(pg("a = 'it''s ?' AND b = ?"), "a = 'it''s ?' AND b = $1");
    }
}
