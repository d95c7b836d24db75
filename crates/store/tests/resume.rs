//! Resuming after an interrupted trainer: a child process that writes
//! measurements is killed with SIGKILL, and the database must hold exactly the
//! measurements it reported committed (plus at most the one in flight), with
//! batches all-or-nothing and the run still unfinished. On SQLite and on PostgreSQL.

use crate::common;

use common::{dev_and_matrix, device, nth_key, run_on, timing};
use serde_json::json;
use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use store::{MeasurementKey, Precision, RunStatus, Store};

/// Environment variable giving the child writer its database URL.
const CHILD_DB_ENV: &str = "STORE_RESUME_CHILD_DB";
/// Every how many keys the child writes a batch of `BATCH` keys in one transaction.
const BATCH_EVERY: u32 = 7;
const BATCH: u32 = 5;

/// The writer run in a child process by `killed_writer_loses_nothing_committed`
/// (ignored, so that it only runs when that test starts it). It writes keys
/// `nth_key(0)`, `nth_key(1)`, ... forever, printing `COMMITTED n` once keys
/// `0..n` are committed.
#[tokio::test]
#[ignore = "helper process of killed_writer_loses_nothing_committed"]
async fn child_writer() {
    let Ok(path) = std::env::var(CHILD_DB_ENV) else {
        eprintln!("child_writer is a helper process; it needs {CHILD_DB_ENV}");
        return;
    };
    let s = Store::connect(Some(&path)).await.unwrap();
    let (d, m) = dev_and_matrix(&s, "resume").await;
    let run = s
        .start_run(&run_on(d, Precision::F64, json!({"child": true})))
        .await
        .unwrap();
    println!("RUN {}", run.0);
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut i = 0u32;
    while Instant::now() < deadline {
        if i.is_multiple_of(BATCH_EVERY) {
            let batch: Vec<_> = (i..i + BATCH)
                .map(|j| timing(nth_key(j, m, d), 1.0 + j as f64, Some(run)))
                .collect();
            s.insert_measurements(&batch).await.unwrap();
            i += BATCH;
        } else {
            s.insert_measurement(&timing(nth_key(i, m, d), 1.0 + i as f64, Some(run)))
                .await
                .unwrap();
            i += 1;
        }
        println!("COMMITTED {i}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Kills the child if the test fails before doing so itself.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

store::test_on_both_backends! {
async fn killed_writer_loses_nothing_committed(db: TestDb) {
    let url = db.url();
    let mut child = KillOnDrop(
        Command::new(std::env::current_exe().unwrap())
            .args([
                "resume::child_writer",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_DB_ENV, &url)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn the child writer"),
    );
    let child = &mut child.0;
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut run_id = None;
    let mut reported = 0u32;
    while reported < 60 {
        let line = lines.next().expect("child output ended early").unwrap();
        // libtest may print "test child_writer ... " on the same line first.
        if let Some(pos) = line.find("RUN ") {
            run_id = Some(store::RunId(line[pos + 4..].trim().parse().unwrap()));
        } else if let Some(pos) = line.find("COMMITTED ") {
            reported = line[pos + 10..].trim().parse().unwrap();
        }
    }
    child.kill().expect("kill the child writer");
    let status = child.wait().unwrap();
    assert!(
        !status.success(),
        "the child was killed, not finished: {status:?}"
    );
    let run_id = run_id.expect("the child reported its run");

    let s = db.open().await;
    let d = s.upsert_device(&device("dev")).await.unwrap();
    let m = s
        .matrix_by_hash("resume")
        .await
        .unwrap()
        .expect("matrix committed")
        .id;
    let keys = s.measured_keys(m, d, Precision::F64).await.unwrap();
    let n = keys.len() as u32;
    // Everything reported is there; beyond it at most what was in flight (one
    // measurement, or one batch, which is all or nothing).
    assert!(
        n >= reported,
        "{n} keys stored but {reported} were reported committed"
    );
    assert!(
        n <= reported + BATCH,
        "{n} keys stored, only {reported} reported"
    );
    let expected: HashSet<MeasurementKey> = (0..n).map(|i| nth_key(i, m, d)).collect();
    assert_eq!(
        keys, expected,
        "the stored keys are exactly a prefix of the writing order"
    );
    for meas in s.measurements_for(m, d, Precision::F64).await.unwrap() {
        assert_eq!(meas.data.run, Some(run_id));
        assert_eq!(meas.data.repetitions, 25);
    }

    let run = s.run(run_id).await.unwrap().unwrap();
    assert!(run.is_unfinished());
    assert_eq!(run.status, RunStatus::Running);
    assert_eq!(
        s.unfinished_runs()
            .await
            .unwrap()
            .iter()
            .map(|r| r.id)
            .collect::<Vec<_>>(),
        [run_id]
    );

    // Resume: time only what is missing, then finish the old run.
    let total = n + 20;
    let todo: Vec<_> = (0..total)
        .map(|i| nth_key(i, m, d))
        .filter(|k| !keys.contains(k))
        .map(|k| timing(k, 1000.0, Some(run_id)))
        .collect();
    assert_eq!(todo.len(), 20);
    assert_eq!(s.insert_measurements(&todo).await.unwrap(), 20);
    s.finish_run(run_id, RunStatus::Finished, "resumed")
        .await
        .unwrap();
    assert_eq!(
        s.measured_keys(m, d, Precision::F64).await.unwrap().len() as u32,
        total
    );
    assert!(s.unfinished_runs().await.unwrap().is_empty());
}

async fn dropped_store_keeps_committed_work_and_the_run_unfinished(db: TestDb) {
    let (m, d, run, committed) = {
        let s = db.open().await;
        let (d, m) = dev_and_matrix(&s, "drop").await;
        let run = s
            .start_run(&run_on(d, Precision::F64, json!({})))
            .await
            .unwrap();
        let mut committed = HashSet::new();
        for i in 0..12 {
            let k = nth_key(i, m, d);
            s.insert_measurement(&timing(k.clone(), 1.0, Some(run)))
                .await
                .unwrap();
            committed.insert(k);
        }
        // Dropped here without close() and without finish_run.
        (m, d, run, committed)
    };
    let s = db.open().await;
    assert_eq!(
        s.measured_keys(m, d, Precision::F64).await.unwrap(),
        committed
    );
    assert!(s.run(run).await.unwrap().unwrap().is_unfinished());
}
}
