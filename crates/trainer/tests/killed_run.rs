//! A trainer killed mid-labelling (SIGKILL, so no clean-up runs) leaves its run
//! `running`; the next trainer marks it interrupted and resumes, and the
//! database ends with every measurement an uninterrupted run would have taken:
//! the same (matrix, scheme, bin, kernel) keys, none lost, none twice.

use crate::common;

use common::still_waiting;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use store::testing::missing;
use store::{Precision, RunStatus, Store, Target};

fn data_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../sparse/tests/data")
}

/// `trainer label` on the bundled fixtures, in f64, into the database at `db`.
fn trainer(db: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_trainer"))
        .env("DATABASE_URL", format!("sqlite://{}", db.display()))
        .args([
            "label",
            "--standins",
            "0",
            "--generators",
            "",
            "--precision",
            "f64",
        ])
        .args(["--min-reps", "20", "--max-reps", "20", "--matrices"])
        .arg(data_dir())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("starting the trainer")
}

/// Bin keys as (content hash, scheme code, bin, kernel) -> measurement count,
/// and the (content hash, scheme code) pairs with a whole-plan timing.
type Keys = (
    BTreeMap<(String, u32, u32, String), usize>,
    BTreeSet<(String, u32)>,
);

async fn keys(s: &Store) -> Keys {
    let hash: BTreeMap<_, _> = s
        .list_matrices(None)
        .await
        .unwrap()
        .into_iter()
        .map(|m| (m.id, m.record.content_hash))
        .collect();
    let (mut bins, mut plans) = (BTreeMap::new(), BTreeSet::new());
    for d in s.list_devices().await.unwrap() {
        for m in s.all_measurements(d.id, Precision::F64).await.unwrap() {
            let (h, code) = (hash[&m.data.key.matrix].clone(), m.data.key.scheme.code());
            match m.data.key.target {
                Target::Bin { bin, kernel } => {
                    *bins.entry((h, code, bin, kernel.name())).or_insert(0) += 1
                }
                Target::Plan(_) => {
                    plans.insert((h, code));
                }
            }
        }
    }
    (bins, plans)
}

#[tokio::test(flavor = "current_thread")]
async fn a_killed_run_is_marked_interrupted_and_the_next_one_loses_nothing() {
    if let Err(e) = engine::Engine::new(None) {
        missing(
            &format!("an OpenCL device ({e})"),
            &format!("SKIP: no OpenCL device ({e})"),
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("killed.db");

    // First run: killed once a good number of measurements are committed.
    let mut child = trainer(&db);
    let start = Instant::now();
    while !db.exists() {
        still_waiting(&mut child, start + Duration::from_secs(120), "the database");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let s = Store::connect(Some(db.to_str().unwrap())).await.unwrap();
    while s.measurement_count().await.unwrap() < 200 {
        // Exiting here means the trainer finished before it could be killed.
        let deadline = start + Duration::from_secs(300);
        still_waiting(&mut child, deadline, "200 measurements");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let killed_pid = child.id();
    let runs = s.list_runs().await.unwrap();
    assert_eq!(runs.len(), 1);
    let first = runs[0].clone();
    assert_eq!(first.status, RunStatus::Running, "{first:?}");
    assert_eq!(first.owner.as_ref().map(|o| o.pid), Some(killed_pid));
    let before = s
        .all_measurements(first.record.device.unwrap(), Precision::F64)
        .await
        .unwrap();
    assert!(before.len() >= 200);

    // Second run: resumes to the end.
    let status = trainer(&db).wait().unwrap();
    assert!(status.success(), "resumed trainer: {status}");
    let runs = s.list_runs().await.unwrap();
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!(runs[0].status, RunStatus::Interrupted, "{:?}", runs[0]);
    assert!(runs[0].finished_at.is_some());
    assert!(
        runs[0]
            .record
            .notes
            .contains(&format!("process {killed_pid} ")),
        "{}",
        runs[0].record.notes
    );
    assert_eq!(runs[1].status, RunStatus::Finished, "{:?}", runs[1]);

    // Nothing the killed run committed was lost or re-timed.
    let after = s
        .all_measurements(first.record.device.unwrap(), Precision::F64)
        .await
        .unwrap();
    let after_ids: BTreeMap<_, _> = after.iter().map(|m| (m.id, m)).collect();
    for m in &before {
        assert_eq!(
            after_ids.get(&m.id).copied(),
            Some(m),
            "lost or changed: {m:?}"
        );
        assert_eq!(m.data.run, Some(first.id));
    }

    // The same keys as an uninterrupted run on a fresh database.
    let ref_db = dir.path().join("reference.db");
    assert!(trainer(&ref_db).wait().unwrap().success());
    let r = Store::connect(Some(ref_db.to_str().unwrap()))
        .await
        .unwrap();
    let (ref_bins, ref_plans) = keys(&r).await;
    let (bins, plans) = keys(&s).await;
    assert!(!ref_bins.is_empty());
    assert!(bins.values().all(|&n| n == 1), "a key stored twice");
    assert_eq!(
        bins.keys().collect::<Vec<_>>(),
        ref_bins.keys().collect::<Vec<_>>(),
        "bin keys differ from an uninterrupted run's"
    );
    assert_eq!(plans, ref_plans, "schemes with a whole-plan timing differ");
    s.close().await;
    r.close().await;
}
