//! Test support (always compiled, so that `cargo test` and `cargo build` resolve
//! the same features and share one build of the dependencies): a real PostgreSQL server for tests, and a
//! fresh database of either backend per test, so one test body runs on both.
//!
//! The server is `SPMV_TEST_POSTGRES_URL` when set (a URL whose user may create
//! databases); otherwise one is started for the test process: Debian's
//! `postgresql` binaries (`/usr/lib/postgresql/*/bin`, else `initdb` on the
//! PATH), a cluster in a temporary folder, on a free loopback port, run as the
//! `postgres` user when the tests run as root (initdb refuses root). A watcher
//! process stops it and removes the folder when the test process ends.
//!
//! This module reads the environment itself, unlike the rest of the crate: it
//! serves test binaries only, which have no `main` to read it in.

use crate::{DbLocation, Store};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

/// The variable naming an existing PostgreSQL server for the tests.
pub const TEST_POSTGRES_URL_ENV: &str = "SPMV_TEST_POSTGRES_URL";

/// Whether a test fails rather than skips when PostgreSQL (or a device) is
/// missing, and what it does then: the workspace's one rule.
pub use sparse::testing::{missing, required};

/// The URL of the PostgreSQL server of this test process, started on first
/// use; `Err` says why there is none.
pub fn postgres_server() -> Result<String, String> {
    static SERVER: OnceLock<Result<String, String>> = OnceLock::new();
    SERVER
        .get_or_init(|| match std::env::var(TEST_POSTGRES_URL_ENV) {
            Ok(url) if !url.trim().is_empty() => Ok(url.trim().to_string()),
            _ => start_cluster(),
        })
        .clone()
}

/// A new, empty database on the test server, by URL; `None` (with the reason
/// printed) when there is no server and none is required, a panic when one is
/// (see [`required`]). `test` names the caller in the message.
pub async fn postgres_database(test: &str) -> Option<String> {
    let outcome = match postgres_server() {
        Ok(server) => create_database(&server).await,
        Err(e) => Err(e),
    };
    match outcome {
        Ok(url) => Some(url),
        Err(reason) if required() => {
            panic!("{test}: PostgreSQL is required here (CI) but unavailable: {reason}")
        }
        Err(reason) => {
            eprintln!("{test}: skipped on PostgreSQL: {reason}");
            None
        }
    }
}

/// Creates a uniquely named database on the server at `server` and gives its URL.
async fn create_database(server: &str) -> Result<String, String> {
    use sqlx::Connection;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let name = format!(
        "spmv_test_{}_{}_{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let mut admin = sqlx::PgConnection::connect(server)
        .await
        .map_err(|e| format!("cannot connect to {server}: {e}"))?;
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut admin)
        .await
        .map_err(|e| format!("cannot create a database on {server}: {e}"))?;
    admin.close().await.ok();
    Ok(with_database(server, &name))
}

/// `url` with its database name replaced by `name` (query string kept).
pub fn with_database(url: &str, name: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("postgres", url));
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let query = tail.find('?').map(|q| &tail[q..]).unwrap_or("");
    format!("{scheme}://{authority}/{name}{query}")
}

/// The folder of PostgreSQL's server binaries: the newest Debian version, else
/// wherever `initdb` is on the PATH.
fn postgres_bin_dir() -> Result<PathBuf, String> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((v, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Ok(bin);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .find(|d| d.join("initdb").exists() && d.join("pg_ctl").exists())
        .ok_or_else(|| {
            "no PostgreSQL server binaries (apt-get install postgresql, or set SPMV_TEST_POSTGRES_URL)"
                .to_string()
        })
}

/// Whether this process runs as root.
fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// A command running `program` as the `postgres` user when we are root.
fn as_server_user(program: &Path) -> Command {
    if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

/// Runs `cmd` to completion, its output captured; `Err` with that output.
fn run(mut cmd: Command, what: &str) -> Result<(), String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {what}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{what} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// A loopback port nobody listens on now.
fn free_port() -> Result<u16, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    l.local_addr().map(|a| a.port()).map_err(|e| e.to_string())
}

/// Starts a throw-away cluster and gives the URL of its `postgres` database.
fn start_cluster() -> Result<String, String> {
    let bin = postgres_bin_dir()?;
    let dir = tempfile::Builder::new()
        .prefix("spmv-pg-")
        .tempdir()
        .map_err(|e| format!("cannot create a folder for the cluster: {e}"))?
        .keep();
    if is_root() {
        let mut chown = Command::new("chown");
        chown.arg("postgres:").arg(&dir);
        run(chown, "chown")?;
    }
    let data = dir.join("data");
    let mut initdb = as_server_user(&bin.join("initdb"));
    initdb
        .arg("-D")
        .arg(&data)
        .args(["-U", "spmv", "--auth=trust", "-E", "UTF8", "--no-sync"]);
    run(initdb, "initdb")?;
    let mut last = String::new();
    for _ in 0..3 {
        let port = free_port()?;
        let options = format!(
            "-p {port} -k {} -c listen_addresses=127.0.0.1 -c max_connections=300 \
             -c fsync=off -c synchronous_commit=off -c full_page_writes=off",
            dir.display()
        );
        let mut pg_ctl = as_server_user(&bin.join("pg_ctl"));
        pg_ctl
            .arg("-D")
            .arg(&data)
            .args(["-o", &options, "-l"])
            .arg(dir.join("server.log"))
            .args(["-w", "-t", "60", "start"]);
        match run(pg_ctl, "pg_ctl start") {
            Ok(()) => {
                stop_when_gone(&bin, &dir, &data)?;
                return Ok(format!("postgres://spmv@127.0.0.1:{port}/postgres"));
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Leaves a watcher that stops the cluster and removes its folder once this
/// process has ended (however it ends).
fn stop_when_gone(bin: &Path, dir: &Path, data: &Path) -> Result<(), String> {
    let pg_ctl = bin.join("pg_ctl");
    let stop = if is_root() {
        format!(
            "runuser -u postgres -- '{}' -D '{}' -m immediate stop",
            pg_ctl.display(),
            data.display()
        )
    } else {
        format!(
            "'{}' -D '{}' -m immediate stop",
            pg_ctl.display(),
            data.display()
        )
    };
    let script = format!(
        "while kill -0 {} 2>/dev/null; do sleep 1; done; {stop} >/dev/null 2>&1; rm -rf '{}'",
        std::process::id(),
        dir.display()
    );
    Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map(|_| ())
        .map_err(|e| format!("cannot start the cluster's watcher: {e}"))
}

/// A fresh database of one backend for one test; [`TestDb::open`] gives as
/// many stores on it as the test wants (as several processes would have).
pub enum TestDb {
    /// A SQLite file in a temporary folder (removed when dropped).
    Sqlite(tempfile::TempDir),
    /// A new database on the test PostgreSQL server.
    Postgres(String),
}

impl TestDb {
    /// A SQLite database in a new temporary folder.
    pub fn sqlite() -> TestDb {
        TestDb::Sqlite(tempfile::tempdir().expect("temporary folder"))
    }

    /// A new PostgreSQL database, or `None` (printed) when there is no server
    /// and none is required; panics when one is required and missing.
    pub async fn postgres(test: &str) -> Option<TestDb> {
        postgres_database(test).await.map(TestDb::Postgres)
    }

    /// The database's URL, as `DATABASE_URL` would hold it.
    pub fn url(&self) -> String {
        match self {
            TestDb::Sqlite(dir) => format!("sqlite://{}", dir.path().join("results.db").display()),
            TestDb::Postgres(url) => url.clone(),
        }
    }

    /// A new store (its own pool) on this database, migrated.
    pub async fn open(&self) -> Store {
        Store::open(DbLocation::parse(&self.url()).expect("test URL"))
            .await
            .expect("open the test database")
    }

    /// Runs one statement behind the store's back (as another program might),
    /// to damage rows in tests.
    pub async fn execute(&self, sql: &str) {
        use sqlx::Connection;
        let sql = sqlx::AssertSqlSafe(sql.to_string());
        match self {
            TestDb::Sqlite(_) => {
                let mut c = sqlx::SqliteConnection::connect(&self.url()).await.unwrap();
                sqlx::query(sql).execute(&mut c).await.unwrap();
                c.close().await.unwrap();
            }
            TestDb::Postgres(url) => {
                let mut c = sqlx::PgConnection::connect(url).await.unwrap();
                sqlx::query(sql).execute(&mut c).await.unwrap();
                c.close().await.unwrap();
            }
        }
    }
}

/// Declares each `async fn name(db: TestDb) { ... }` as two tests, `name::sqlite`
/// and `name::postgres`, running the same body on a fresh database of each
/// backend (the PostgreSQL one skipped, or failed under CI, without a server).
#[macro_export]
macro_rules! test_on_both_backends {
    ($(async fn $name:ident($db:ident: TestDb) $body:block)*) => {
        $(
            mod $name {
                #[allow(unused_imports)]
                use super::*;
                async fn body($db: $crate::testing::TestDb) $body

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    body($crate::testing::TestDb::sqlite()).await
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    let test = concat!(module_path!(), "::postgres");
                    if let Some(db) = $crate::testing::TestDb::postgres(test).await {
                        body(db).await
                    }
                }
            }
        )*
    };
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn database_name_is_replaced() {
        assert_eq!(
            with_database("postgres://u@h:5/postgres", "t1"),
            "postgres://u@h:5/t1"
        );
        assert_eq!(
            with_database("postgres://u:p@h/x?sslmode=disable", "t2"),
            "postgres://u:p@h/t2?sslmode=disable"
        );
        assert_eq!(with_database("postgresql://h", "t3"), "postgresql://h/t3");
    }
}
