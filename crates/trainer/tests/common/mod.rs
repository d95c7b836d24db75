//! What the trainer's PostgreSQL and worker tests share: the trainer binary on
//! the bundled fixtures, and the set of measured keys of a database.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Child, Command};
use std::time::Instant;
use store::{Precision, Store, Target};

/// (content hash, scheme code, bin or -1, kernel name or "plan").
pub type Key = (String, u32, i64, String);

/// Asserts, while a test waits on `child` for `what`, that the child is still
/// running and that `deadline` has not passed.
pub fn still_waiting(child: &mut Child, deadline: Instant, what: &str) {
    assert!(
        child.try_wait().unwrap().is_none(),
        "the process exited while waiting for {what}"
    );
    assert!(Instant::now() < deadline, "timed out waiting for {what}");
}

/// `trainer SUBCOMMAND` on the bundled fixtures (the first `limit`), in f64
/// with `reps` timed repetitions, into the database at `url`.
pub fn trainer(url: &str, subcommand: &str, limit: usize, reps: usize) -> Command {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sparse/tests/data");
    let mut c = Command::new(env!("CARGO_BIN_EXE_trainer"));
    c.env("DATABASE_URL", url)
        .args([subcommand, "--standins", "0", "--generators", ""])
        .args(["--precision", "f64", "--limit", &limit.to_string()])
        .args([
            "--min-reps",
            &reps.to_string(),
            "--max-reps",
            &reps.to_string(),
        ])
        .arg("--matrices")
        .arg(data)
        .stdout(std::process::Stdio::null());
    c
}

/// Runs a command to success.
pub fn ok(mut c: Command, what: &str) {
    let status = c.status().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(status.success(), "{what}: {status}");
}

/// Every measured key of the database at `url`.
pub async fn keys(url: &str) -> BTreeSet<Key> {
    let s = Store::connect(Some(url)).await.unwrap();
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

/// Whether an OpenCL device is there; panics under CI when it is not. The
/// device is probed once per test binary: two test threads opening PoCL at the
/// same moment were seen to find no platform (and to crash), so they share one probe.
pub fn device_or_skip() -> bool {
    static PROBE: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    let probe = PROBE.get_or_init(|| {
        engine::Engine::new(None)
            .map(|_| ())
            .map_err(|e| e.to_string())
    });
    match probe {
        Ok(()) => true,
        Err(e) => {
            assert!(
                !store::testing::required(),
                "an OpenCL device is required here: {e}"
            );
            eprintln!("SKIP: no OpenCL device ({e})");
            false
        }
    }
}
