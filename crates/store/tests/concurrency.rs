//! Concurrent writers: tasks sharing one store, and two stores (as two processes
//! would) on the same database, wait for each other's locks instead of failing;
//! on SQLite and on PostgreSQL.

use crate::common;

use common::{dev_and_matrix, matrix, nth_key, run_on, timing};
use serde_json::json;
use store::testing::TestDb;
use store::{Precision, RequestId, RequestRecord, Store};

const TASKS: u32 = 8;
const PER_TASK: u32 = 40;

store::test_on_both_backends! {
async fn many_tasks_and_two_pools_write_at_once(db: TestDb) {
    let a = db.open().await;
    // A second, independent pool on the same database: another process's view.
    let b = db.open().await;
    let (d, m) = dev_and_matrix(&a, "shared").await;

    let mut handles = Vec::new();
    for t in 0..TASKS {
        let s = if t % 2 == 0 { a.clone() } else { b.clone() };
        handles.push(tokio::spawn(async move {
            let run = s
                .start_run(&run_on(d, Precision::F64, json!({"task": t})))
                .await?;
            for i in 0..PER_TASK {
                // Every task writes its own keys, plus some keys another task writes too.
                let own = nth_key(t * PER_TASK + i, m, d);
                if i % 4 == 0 {
                    let shared = nth_key(TASKS * PER_TASK + i, m, d);
                    s.insert_measurements(&[
                        timing(own, 1.0, Some(run)),
                        timing(shared, 2.0, Some(run)),
                    ])
                    .await?;
                } else {
                    s.insert_measurement(&timing(own, 1.0, Some(run))).await?;
                }
                s.log_request(&RequestRecord {
                    route: "/spmv".into(),
                    matrix_hash: Some("shared".into()),
                    features: None,
                    plan: None,
                    precision: Some(Precision::F32),
                    device: None,
                    model: None,
                    kernel_ms: Some(0.1),
                    e2e_ms: Some(0.2),
                    status: 200,
                })
                .await?;
                // Upserts of the same rows from many tasks at once.
                s.upsert_matrix(&matrix("shared", "suitesparse", 0.0))
                    .await?;
            }
            s.finish_run(run, store::RunStatus::Finished, "").await?;
            Ok::<_, store::StoreError>(())
        }));
    }
    for h in handles {
        h.await.unwrap().expect("a concurrent writer failed");
    }

    let keys = a.measured_keys(m, d, Precision::F64).await.unwrap();
    assert_eq!(keys.len() as u32, TASKS * PER_TASK + PER_TASK.div_ceil(4));
    let requests = b.requests_since(RequestId(0), 10_000).await.unwrap();
    assert_eq!(requests.len() as u32, TASKS * PER_TASK);
    assert_eq!(a.list_matrices(None).await.unwrap().len(), 1);
    assert!(a.unfinished_runs().await.unwrap().is_empty());
    assert_eq!(b.list_runs().await.unwrap().len() as u32, TASKS);
}
}

#[tokio::test]
async fn in_memory_store_serves_concurrent_tasks() {
    let s = Store::open_in_memory().await.unwrap();
    let (d, m) = dev_and_matrix(&s, "mem").await;
    let handles: Vec<_> = (0..4u32)
        .map(|t| {
            let s = s.clone();
            tokio::spawn(async move {
                for i in 0..25 {
                    s.insert_measurement(&timing(nth_key(t * 25 + i, m, d), 1.0, None))
                        .await?;
                }
                Ok::<_, store::StoreError>(())
            })
        })
        .collect();
    for h in handles {
        h.await.unwrap().unwrap();
    }
    assert_eq!(
        s.measured_keys(m, d, Precision::F64).await.unwrap().len(),
        100
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stores_opening_a_fresh_file_at_once_all_migrate() {
    // A server and a trainer started together on a new database (docker compose)
    // race to apply the migrations; every one must come up.
    for round in 0..5 {
        let db = TestDb::sqlite();
        opening_at_once_all_migrate(&db.url(), round).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stores_opening_a_fresh_postgres_database_at_once_all_migrate() {
    for round in 0..3 {
        let Some(db) = TestDb::postgres("stores_opening_a_fresh_postgres_database_at_once").await
        else {
            return;
        };
        opening_at_once_all_migrate(&db.url(), round).await;
    }
}

/// Six stores connect to the new database at `url` at once; all must come up
/// with every migration applied.
async fn opening_at_once_all_migrate(url: &str, round: u32) {
    let handles: Vec<_> = (0..6)
        .map(|_| {
            let url = url.to_string();
            tokio::spawn(async move { Store::connect(Some(&url)).await })
        })
        .collect();
    for h in handles {
        let s = h
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert_eq!(
            s.applied_migrations().await.unwrap().len(),
            Store::embedded_migrations(s.backend()).len()
        );
    }
}
