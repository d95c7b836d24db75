//! `trainer label` with a `postgres://` DATABASE_URL writes its run and its
//! measurements into PostgreSQL, the same keys as into SQLite.

use std::collections::BTreeSet;
use std::path::Path;
use store::testing::{postgres_database, required};
use store::{Precision, RunStatus, Store, Target};

/// (content hash, scheme code, bin or -1, kernel name or "plan").
type Key = (String, u32, i64, String);

/// `trainer label` on the first two bundled fixtures, in f64, into `url`.
fn label(url: &str) {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sparse/tests/data");
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_trainer"))
        .env("DATABASE_URL", url)
        .args(["label", "--standins", "0", "--generators", ""])
        .args(["--precision", "f64", "--limit", "2"])
        .args(["--min-reps", "2", "--max-reps", "2", "--matrices"])
        .arg(data)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("starting the trainer");
    assert!(status.success(), "trainer label into {url}: {status}");
}

/// Every measured key of the database, and checks that its runs finished.
async fn keys(url: &str) -> BTreeSet<Key> {
    let s = Store::connect(Some(url)).await.unwrap();
    let runs = s.list_runs().await.unwrap();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0].status, RunStatus::Finished, "{:?}", runs[0]);
    let mut out = BTreeSet::new();
    for d in s.list_devices().await.unwrap() {
        for m in s.all_measurements(d.id, Precision::F64).await.unwrap() {
            let hash = s.matrix(m.data.key.matrix).await.unwrap().unwrap();
            let (bin, kernel) = match m.data.key.target {
                Target::Bin { bin, kernel } => (i64::from(bin), kernel.name()),
                Target::Plan(_) => (-1, "plan".to_string()),
            };
            out.insert((
                hash.record.content_hash,
                m.data.key.scheme.code(),
                bin,
                kernel,
            ));
        }
    }
    s.close().await;
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn label_writes_into_postgres_the_keys_it_writes_into_sqlite() {
    if let Err(e) = engine::Engine::new(None) {
        assert!(!required(), "an OpenCL device is required here: {e}");
        eprintln!("SKIP: no OpenCL device ({e})");
        return;
    }
    let Some(pg) = postgres_database("label_writes_into_postgres").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let sqlite = format!("sqlite://{}", dir.path().join("ref.db").display());
    label(&pg);
    label(&sqlite);
    let (on_pg, on_sqlite) = (keys(&pg).await, keys(&sqlite).await);
    assert!(on_pg.len() > 50, "only {} measurements", on_pg.len());
    assert_eq!(on_pg, on_sqlite);
}
