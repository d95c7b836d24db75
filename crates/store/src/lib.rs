//! The results database: SQLite (embedded, the default) or PostgreSQL (shared
//! by several machines) through sqlx, with each backend's schema embedded at
//! build time (`migrations/` for SQLite, `migrations/postgres/` for PostgreSQL)
//! and applied at connect.
//!
//! Only this crate knows SQL. Everything else calls the typed async functions of
//! [`Store`]: devices, matrices, measurements (the trainer's labels), plans, models,
//! training runs, the labelling queue, and the HTTP service's uploaded matrices
//! (shared by its replicas) and request log.
//! The backend is chosen by the URL alone (see [`DbLocation::parse`]); callers
//! see the same API and the same values on both.
//!
//! A SQLite database runs in WAL mode with foreign keys on and a busy timeout, so
//! several processes (a trainer and a server, say) and several tasks of one
//! process can write to it at once; writers wait for each other instead of failing.
//!
//! Durability: every `insert_*`, `upsert_*` and `log_request` call is its own
//! transaction and is committed when it returns, so a trainer killed at any moment
//! loses at most the measurement it was timing. [`Store::insert_measurements`]
//! writes a batch in one transaction: all of it or none.

#[macro_use]
mod backend;
mod contexts;
mod devices;
mod error;
mod location;
mod matrices;
mod measurements;
mod models;
mod plans;
mod queue;
mod requests;
mod rows;
mod runs;
pub mod testing;
mod types;
mod uploads;

pub use backend::Backend;
pub use error::StoreError;
pub use location::{DbLocation, DATABASE_URL_ENV, DEFAULT_DATABASE_FILE};
pub use queue::{LabelClaim, QueueEntry, QueueId, QueueStatus};
pub use types::{
    canonical_plan_json, ContextId, Device, DeviceId, DeviceRecord, FeatureVector, Matrix,
    MatrixId, MatrixRecord, Measurement, MeasurementContext, MeasurementId, MeasurementKey, Model,
    ModelId, ModelRecord, NewMeasurement, PlanId, PlanRecord, Precision, Request, RequestId,
    RequestRecord, RunId, RunOwner, RunRecord, RunStatus, StoredContext, StoredPlan, Target,
    TrainingRun, LEGACY_CONTEXT,
};
pub use uploads::{Upload, UploadMeta};

use backend::Pool;
use error::QueryContext;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use std::time::Duration;

/// How long a writer waits for another writer's lock before failing.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// Connections kept by the pool of a file database.
const MAX_CONNECTIONS: u32 = 8;

/// How many times opening a file that another process is setting up is tried.
const CONNECT_ATTEMPTS: u32 = 10;

/// Whether an error is SQLite's SQLITE_BUSY (primary code 5, any extended code).
fn is_busy(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|d| d.code())
        .and_then(|c| c.parse::<i32>().ok())
        .is_some_and(|c| c & 0xff == 5)
}

/// How many times a failed migration is retried; see [`run_migrations`].
const MIGRATION_ATTEMPTS: u32 = 6;

/// Applies the pending migrations of the pool's backend.
///
/// sqlx takes no lock around SQLite migrations: two processes opening a new
/// database at once (a server and a trainer started together) both see
/// migration 1 pending, and the second fails with "table already exists" once
/// the first commits. Each migration runs in a transaction, so retrying after a
/// short wait sees it applied and goes on; errors that retrying cannot fix
/// (edited or unknown migrations) are returned at once. (On PostgreSQL sqlx
/// holds an advisory lock while migrating, so there the retry never fires.)
async fn run_migrations(pool: &Pool) -> Result<(), StoreError> {
    use sqlx::migrate::MigrateError;
    let migrator = pool.backend().migrator();
    let transient = |e: &MigrateError| {
        matches!(
            e,
            MigrateError::Execute(_) | MigrateError::ExecuteMigration(..)
        )
    };
    backend::retrying(MIGRATION_ATTEMPTS, 20, transient, || async {
        match pool {
            Pool::Sqlite(p) => migrator.run(p).await,
            Pool::Postgres(p) => migrator.run(p).await,
        }
    })
    .await
    .map_err(StoreError::from)
}

/// A handle on the results database. Cheap to clone (clones share one pool).
#[derive(Debug, Clone)]
pub struct Store {
    pool: Pool,
    location: DbLocation,
}

/// A migration recorded as applied in the database.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct AppliedMigration {
    /// The number at the start of its file name.
    pub version: i64,
    /// The rest of its file name.
    pub description: String,
    /// Whether it completed.
    pub success: bool,
}

impl Store {
    /// Opens the database and applies every pending migration.
    ///
    /// The location is `url` when given, else the `DATABASE_URL` environment
    /// variable, else `spmv.db` in the working directory (see [`DbLocation::parse`]
    /// for the accepted forms). A missing SQLite file, and its folder, are
    /// created; a PostgreSQL database must exist (its tables are created).
    pub async fn connect(url: Option<&str>) -> Result<Store, StoreError> {
        Store::open(DbLocation::resolve(url)?).await
    }

    /// A fresh private in-memory database with the schema applied, for tests.
    pub async fn open_in_memory() -> Result<Store, StoreError> {
        Store::open(DbLocation::Memory).await
    }

    /// Opens the database at `location` and applies every pending migration.
    pub async fn open(location: DbLocation) -> Result<Store, StoreError> {
        let pool = match &location {
            DbLocation::File(path) => Pool::Sqlite(open_sqlite_file(path, &location).await?),
            DbLocation::Memory => Pool::Sqlite(open_sqlite_memory(&location).await?),
            DbLocation::Postgres(url) => {
                Pool::Postgres(backend::connect_postgres(url, &location.to_string()).await?)
            }
        };
        run_migrations(&pool).await?;
        Ok(Store { pool, location })
    }

    /// Where the database is.
    pub fn location(&self) -> &DbLocation {
        &self.location
    }

    /// Waits for running queries and closes every connection. Dropping the store
    /// without closing is safe too: committed work is never lost.
    pub async fn close(&self) {
        on_pool!(self, |pool| pool.close().await)
    }

    /// Applies pending migrations again (a no-op when the schema is current).
    /// [`Store::connect`] already does this.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        run_migrations(&self.pool).await
    }

    /// The `(version, description)` of every migration of `backend` embedded in
    /// this build.
    pub fn embedded_migrations(backend: Backend) -> Vec<(i64, String)> {
        backend
            .migrator()
            .iter()
            .map(|m| (m.version, m.description.to_string()))
            .collect()
    }

    /// The migrations recorded as applied in the database, by version.
    pub async fn applied_migrations(&self) -> Result<Vec<AppliedMigration>, StoreError> {
        on_pool!(self, |pool| sqlx::query_as(
            "SELECT version, description, success FROM _sqlx_migrations ORDER BY version",
        )
        .fetch_all(pool)
        .await)
        .op("applied_migrations")
    }

    /// The names of the tables of the schema (the engine's and sqlx's own excluded).
    pub async fn table_names(&self) -> Result<Vec<String>, StoreError> {
        let sql = match self.backend() {
            Backend::Sqlite => {
                "SELECT name FROM sqlite_master WHERE type = 'table' \
                 AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '\\_sqlx%' ESCAPE '\\' ORDER BY name"
            }
            Backend::Postgres => {
                "SELECT tablename::TEXT FROM pg_catalog.pg_tables WHERE schemaname = current_schema() \
                 AND tablename NOT LIKE '\\_sqlx%' ESCAPE '\\' ORDER BY tablename"
            }
        };
        run_query!(self, sqlx::query_scalar(sql), [], fetch_all).op("table_names")
    }

    /// SQLite's journal mode for this database (`wal` for files, `memory` for
    /// in-memory databases); [`StoreError::Unsupported`] on PostgreSQL.
    pub async fn journal_mode(&self) -> Result<String, StoreError> {
        match &self.pool {
            Pool::Sqlite(pool) => sqlx::query_scalar("PRAGMA journal_mode")
                .fetch_one(pool)
                .await
                .op("journal_mode"),
            Pool::Postgres(_) => Err(StoreError::Unsupported {
                operation: "journal_mode",
                backend: Backend::Postgres.as_str(),
            }),
        }
    }

    /// Whether foreign keys are enforced on the connections of this store
    /// (always on PostgreSQL; a connection setting on SQLite, which the store turns on).
    pub async fn foreign_keys_enabled(&self) -> Result<bool, StoreError> {
        match &self.pool {
            Pool::Sqlite(pool) => {
                let on: i64 = sqlx::query_scalar("PRAGMA foreign_keys")
                    .fetch_one(pool)
                    .await
                    .op("foreign_keys_enabled")?;
                Ok(on == 1)
            }
            Pool::Postgres(_) => Ok(true),
        }
    }
}

/// The options every SQLite connection gets.
fn sqlite_base() -> SqliteConnectOptions {
    SqliteConnectOptions::new()
        .foreign_keys(true)
        .busy_timeout(BUSY_TIMEOUT)
}

/// Opens (creating when missing) the SQLite file at `path`, in WAL mode.
async fn open_sqlite_file(
    path: &std::path::Path,
    location: &DbLocation,
) -> Result<SqlitePool, StoreError> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|source| StoreError::Io {
            path: parent.to_path_buf(),
            source,
        })?;
    }
    let options = sqlite_base()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        // In WAL mode NORMAL loses nothing when the process is killed
        // (only on power loss), and commits are much cheaper than FULL.
        .synchronous(SqliteSynchronous::Normal)
        .row_buffer_size(4096);
    // Switching a new file to WAL can answer "database is locked" without
    // waiting on the busy handler while another process does the same; such an
    // error is retried after a short wait.
    backend::retrying(CONNECT_ATTEMPTS, 20, is_busy, || {
        SqlitePoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .connect_with(options.clone())
    })
    .await
    .map_err(|source| StoreError::Connect {
        location: location.to_string(),
        source,
    })
}

/// Opens a private in-memory SQLite database.
async fn open_sqlite_memory(location: &DbLocation) -> Result<SqlitePool, StoreError> {
    // Every connection to ":memory:" is a separate database, so the pool holds
    // exactly one connection that never expires.
    SqlitePoolOptions::new()
        .max_connections(1)
        .min_connections(1)
        .idle_timeout(None)
        .max_lifetime(None)
        .connect_with(sqlite_base().in_memory(true))
        .await
        .map_err(|source| StoreError::Connect {
            location: location.to_string(),
            source,
        })
}
