//! `trainer worker` processes over PostgreSQL: three of them label the same
//! keys as one, and a worker killed mid-matrix (SIGKILL) loses nothing: its
//! claim lapses after the lease and another worker labels that matrix.

use crate::common;

use common::{device_or_skip, keys, ok, still_waiting, trainer};
use std::process::{Child, Command};
use std::time::{Duration, Instant};
use store::testing::postgres_database;
use store::{QueueEntry, QueueStatus, RunStatus, Store};

/// Matrices of the corpus (bundled fixtures).
const MATRICES: usize = 4;

/// `trainer worker` on the fixtures with a lease of `lease_s` seconds.
fn worker(url: &str, reps: usize, lease_s: f64) -> Command {
    let mut c = trainer(url, "worker", MATRICES, reps);
    c.args([
        "--lease-seconds",
        &lease_s.to_string(),
        "--poll-seconds",
        "0.2",
    ]);
    c
}

/// The queue's rows.
async fn queue(s: &Store) -> Vec<QueueEntry> {
    s.label_queue("default", Duration::from_secs(3600))
        .await
        .unwrap()
}

/// Waits for a child and checks it succeeded.
fn success(mut c: Child, what: &str) {
    let status = c.wait().unwrap();
    assert!(status.success(), "{what}: {status}");
}

/// The device and two fresh PostgreSQL databases for `test` (the one under
/// test, then a reference), or `None` when the test skips for want of either
/// (outside CI).
async fn device_and_databases(test: &str) -> Option<(String, String)> {
    if !device_or_skip() {
        return None;
    }
    let (a, b) = (
        format!("{test} (under test)"),
        format!("{test} (reference)"),
    );
    Some((postgres_database(&a).await?, postgres_database(&b).await?))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_workers_label_what_one_worker_labels() {
    let Some((three, one)) = device_and_databases("three_workers").await else {
        return;
    };
    ok(trainer(&three, "enqueue", MATRICES, 2), "trainer enqueue");
    let workers: Vec<Child> = (0..3)
        .map(|_| worker(&three, 2, 30.0).spawn().unwrap())
        .collect();
    for w in workers {
        success(w, "a worker of three");
    }
    let mut single = worker(&one, 2, 30.0);
    single.arg("--enqueue");
    ok(single, "the single worker");

    let (by_three, by_one) = (keys(&three).await, keys(&one).await);
    assert!(by_one.len() > 50, "only {} keys", by_one.len());
    assert_eq!(by_three, by_one);
    let s = Store::connect(Some(&three)).await.unwrap();
    let q = queue(&s).await;
    assert_eq!(q.len(), MATRICES);
    assert!(
        q.iter()
            .all(|e| e.status == QueueStatus::Done && e.attempts == 1),
        "{q:?}"
    );
    let runs = s.list_runs().await.unwrap();
    assert_eq!(runs.len(), 3);
    assert!(
        runs.iter().all(|r| r.status == RunStatus::Finished),
        "{runs:?}"
    );
    let owners: std::collections::BTreeSet<_> = q.iter().map(|e| e.worker.clone()).collect();
    eprintln!(
        "{} matrices labelled by {} of the 3 workers",
        q.len(),
        owners.len()
    );
}

/// Starts a worker and SIGKILLs it while it holds a claim and has written
/// measurements under it; the name of the matrix it held, or `None` when it
/// had just moved on when the signal landed.
async fn kill_mid_matrix(s: &Store, url: &str, lease_s: f64) -> Option<String> {
    let mut a = worker(url, 40, lease_s).spawn().unwrap();
    let tag = format!(":{}:", a.id());
    let held_by_a = |q: &[QueueEntry]| {
        q.iter()
            .find(|e| {
                e.status == QueueStatus::Claimed
                    && e.worker.as_ref().is_some_and(|w| w.contains(&tag))
            })
            .map(|e| e.name.clone())
    };
    let start = Instant::now();
    let mut since: Option<u64> = None;
    loop {
        let deadline = start + Duration::from_secs(180);
        still_waiting(
            &mut a,
            deadline,
            "the worker to hold a matrix half-labelled",
        );
        let n = s.measurement_count().await.unwrap();
        match (held_by_a(&queue(s).await), since) {
            (Some(_), None) => since = Some(n),
            (Some(_), Some(at_claim)) if n >= at_claim + 5 => break,
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    a.kill().unwrap(); // SIGKILL: no clean-up runs
    a.wait().unwrap();
    held_by_a(&queue(s).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_matrix_loses_nothing() {
    let Some((url, reference)) = device_and_databases("killed_worker").await else {
        return;
    };
    let lease = 2.0;
    ok(trainer(&url, "enqueue", MATRICES, 40), "trainer enqueue");
    let s = Store::connect(Some(&url)).await.unwrap();
    let mut victim = None;
    for _ in 0..3 {
        victim = kill_mid_matrix(&s, &url, lease).await;
        if victim.is_some() {
            break;
        }
    }
    let victim = victim.expect("the worker was never killed while holding a claim");
    let before = s.measurement_count().await.unwrap();

    // Another worker waits for the lease to run out, then takes the matrix over.
    ok(worker(&url, 40, lease), "the second worker");
    let q = queue(&s).await;
    assert!(q.iter().all(|e| e.status == QueueStatus::Done), "{q:?}");
    let taken_over = q.iter().find(|e| e.name == victim).unwrap();
    assert!(taken_over.attempts >= 2, "{taken_over:?}");
    assert!(s.measurement_count().await.unwrap() > before);

    // The same keys as one worker that was never killed.
    let mut single = worker(&reference, 40, lease);
    single.arg("--enqueue");
    ok(single, "the reference worker");
    assert_eq!(keys(&url).await, keys(&reference).await);
    let runs = s.list_runs().await.unwrap();
    assert!(
        runs.iter().any(|r| r.status == RunStatus::Finished),
        "{runs:?}"
    );
}
