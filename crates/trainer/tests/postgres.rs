//! `trainer label` with a `postgres://` DATABASE_URL writes its run and its
//! measurements into PostgreSQL, the same keys as into SQLite.

use crate::common;

use common::{device_or_skip, keys, ok, trainer};
use store::testing::postgres_database;
use store::{RunStatus, Store};

/// The one run of the database at `url` finished.
async fn one_finished_run(url: &str) {
    let s = Store::connect(Some(url)).await.unwrap();
    let runs = s.list_runs().await.unwrap();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0].status, RunStatus::Finished, "{:?}", runs[0]);
    s.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn label_writes_into_postgres_the_keys_it_writes_into_sqlite() {
    if !device_or_skip() {
        return;
    }
    let Some(pg) = postgres_database("label_writes_into_postgres").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let sqlite = format!("sqlite://{}", dir.path().join("ref.db").display());
    ok(trainer(&pg, "label", 2, 2), "trainer label into PostgreSQL");
    ok(trainer(&sqlite, "label", 2, 2), "trainer label into SQLite");
    one_finished_run(&pg).await;
    one_finished_run(&sqlite).await;
    let (on_pg, on_sqlite) = (keys(&pg).await, keys(&sqlite).await);
    assert!(on_pg.len() > 50, "only {} measurements", on_pg.len());
    assert_eq!(on_pg, on_sqlite);
}
