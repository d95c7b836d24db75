//! On-disk cache of built program binaries, keyed by device, driver, program
//! source and build options, so a restart loads the kernels instead of
//! compiling them. A damaged entry is detected (length and checksum) and ignored.

use std::io::Write;
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"SPMVBIN1";
const HEADER: usize = 8 + 8 + 8;

/// FNV-1a, 64 bits: a stable hash (unlike std's `DefaultHasher`, the same in
/// every Rust version), good enough to name and check cache entries.
pub(crate) fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for &b in *p {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        // Separator, so ("ab", "c") and ("a", "bc") differ.
        h ^= 0xff;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// What a cache lookup found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// No entry.
    Missing,
    /// An entry that failed its length or checksum test (now removed).
    Damaged,
    /// The stored binary.
    Found(Vec<u8>),
}

/// A folder of program binaries.
#[derive(Debug, Clone)]
pub(crate) struct ProgramCache {
    dir: PathBuf,
}

impl ProgramCache {
    pub(crate) fn new(dir: &Path) -> ProgramCache {
        ProgramCache {
            dir: dir.to_path_buf(),
        }
    }

    /// The entry name for a program: every input that changes the binary.
    pub(crate) fn key(identity: &[&str], source: &str, options: &str) -> String {
        let mut parts: Vec<&[u8]> = identity.iter().map(|s| s.as_bytes()).collect();
        parts.push(source.as_bytes());
        parts.push(options.as_bytes());
        format!("{:016x}", fnv1a(&parts))
    }

    pub(crate) fn path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.clbin"))
    }

    /// The stored binary; a damaged file is removed and reported as such.
    pub(crate) fn load(&self, key: &str) -> Lookup {
        let path = self.path(key);
        let Ok(bytes) = std::fs::read(&path) else {
            return Lookup::Missing;
        };
        match decode(&bytes) {
            Some(b) => Lookup::Found(b.to_vec()),
            None => {
                let _ = std::fs::remove_file(&path);
                Lookup::Damaged
            }
        }
    }

    /// Stores a binary (written to a temporary file, then renamed, so a reader
    /// never sees half a file).
    pub(crate) fn store(&self, key: &str, binary: &[u8]) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let tmp = self.dir.join(format!(".{key}.{}.tmp", std::process::id()));
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(MAGIC)?;
        f.write_all(&(binary.len() as u64).to_le_bytes())?;
        f.write_all(&fnv1a(&[binary]).to_le_bytes())?;
        f.write_all(binary)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, self.path(key))
    }

    /// Removes an entry (e.g. one the driver refused).
    pub(crate) fn remove(&self, key: &str) {
        let _ = std::fs::remove_file(self.path(key));
    }
}

fn decode(bytes: &[u8]) -> Option<&[u8]> {
    if bytes.len() < HEADER || &bytes[..8] != MAGIC {
        return None;
    }
    let len = u64::from_le_bytes(bytes[8..16].try_into().ok()?) as usize;
    let sum = u64::from_le_bytes(bytes[16..24].try_into().ok()?);
    let body = &bytes[HEADER..];
    (body.len() == len && len > 0 && fnv1a(&[body]) == sum).then_some(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp_dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("spmv-cache-unit-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn round_trip_and_damage_detection() {
        let dir = tmp_dir("rt");
        let c = ProgramCache::new(&dir);
        let k = ProgramCache::key(&["dev", "drv"], "src", "-DX=1");
        assert_eq!(c.load(&k), Lookup::Missing);
        c.store(&k, b"binary bytes").unwrap();
        assert_eq!(c.load(&k), Lookup::Found(b"binary bytes".to_vec()));
        // Flip one payload byte: rejected and removed.
        let p = c.path(&k);
        let mut raw = std::fs::read(&p).unwrap();
        let last = raw.len() - 1;
        raw[last] ^= 1;
        std::fs::write(&p, &raw).unwrap();
        assert_eq!(c.load(&k), Lookup::Damaged);
        assert!(!p.exists());
        // Truncated and garbage files are rejected too.
        c.store(&k, b"binary bytes").unwrap();
        let raw = std::fs::read(&p).unwrap();
        std::fs::write(&p, &raw[..raw.len() - 3]).unwrap();
        assert_eq!(c.load(&k), Lookup::Damaged);
        std::fs::write(&p, b"nonsense").unwrap();
        assert_eq!(c.load(&k), Lookup::Damaged);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn keys_change_with_every_input() {
        let base = ProgramCache::key(&["dev", "drv 1"], "src", "-DA");
        assert_eq!(base, ProgramCache::key(&["dev", "drv 1"], "src", "-DA"));
        assert_ne!(base, ProgramCache::key(&["dev", "drv 2"], "src", "-DA"));
        assert_ne!(base, ProgramCache::key(&["dev", "drv 1"], "src2", "-DA"));
        assert_ne!(base, ProgramCache::key(&["dev", "drv 1"], "src", "-DB"));
        assert_ne!(base, ProgramCache::key(&["devd", "rv 1"], "src", "-DA"));
    }
}
