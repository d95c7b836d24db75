//! `--keep-matrices`: copies of served matrices for the trainer, written
//! through a safe temporary file and held under a byte quota for the folder.

use sparse::Csr;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The folder, its quota, and how many matrices the quota turned away.
#[derive(Debug)]
pub struct Keeper {
    dir: PathBuf,
    quota_bytes: u64,
    /// Held across "measure the folder, add the file" so that concurrent keeps
    /// cannot both pass the quota check.
    lock: Mutex<()>,
    skipped: AtomicU64,
}

/// What one keep did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    /// Written as `<dir>/<id>.mtx`.
    Written,
    /// Already there from an earlier request.
    AlreadyThere,
    /// Not written: the folder would have gone past its quota.
    OverQuota,
}

impl Keeper {
    /// A keeper for `dir` holding at most `quota_bytes` of `.mtx` files.
    pub fn new(dir: PathBuf, quota_bytes: u64) -> Arc<Keeper> {
        Arc::new(Keeper {
            dir,
            quota_bytes,
            lock: Mutex::new(()),
            skipped: AtomicU64::new(0),
        })
    }

    /// Matrices not kept because of the quota since the start.
    pub fn skipped(&self) -> u64 {
        self.skipped.load(Ordering::Relaxed)
    }

    /// Writes `a` as `<dir>/<id>.mtx` unless it is there already or the folder
    /// would exceed its quota. Blocking: call it off the runtime's workers.
    pub fn keep(&self, id: &str, a: &Csr<f64>) -> std::io::Result<Kept> {
        let path = self.dir.join(format!("{id}.mtx"));
        let _guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        if path.exists() {
            return Ok(Kept::AlreadyThere);
        }
        std::fs::create_dir_all(&self.dir)?;
        // The temporary file is created with a random name and O_EXCL in the same
        // folder (so the rename is atomic) and removed if anything below fails.
        let mut tmp = tempfile::NamedTempFile::new_in(&self.dir)?;
        {
            let mut w = std::io::BufWriter::new(tmp.as_file_mut());
            sparse::mm::write(a, &mut w)?;
            w.flush()?;
        }
        let size = tmp.as_file().metadata()?.len();
        let used = folder_bytes(&self.dir)?;
        if used.saturating_add(size) > self.quota_bytes {
            let n = self.skipped.fetch_add(1, Ordering::Relaxed) + 1;
            tracing::warn!(
                %id, size, used, quota = self.quota_bytes, skipped_total = n,
                "not keeping the served matrix: --keep-matrices-bytes quota reached"
            );
            return Ok(Kept::OverQuota);
        }
        tmp.persist(&path).map_err(|e| e.error)?;
        Ok(Kept::Written)
    }
}

/// Bytes of the kept matrices (`*.mtx`) in `dir`.
fn folder_bytes(dir: &Path) -> std::io::Result<u64> {
    let mut total = 0u64;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let is_mtx = entry.path().extension().is_some_and(|e| e == "mtx");
        if is_mtx && entry.file_type()?.is_file() {
            total = total.saturating_add(entry.metadata()?.len());
        }
    }
    Ok(total)
}
