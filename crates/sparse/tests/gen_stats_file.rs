//! The shipped collection statistics (`training-data/uf_stats.csv`): it loads,
//! covers the whole collection, and equals what `derive_stats` makes from the
//! upstream files in `../shared/uf-stats` when those are present.
//!
//! Regenerate the file with
//! `UF_STATS_REGENERATE=1 cargo test -p sparse --test gen_stats_file` (that run
//! only writes; run the test again without the variable to check the file).

use sparse::gen::standin::{
    default_stats_path, derive_stats, load_default_stats, write_stats, KindClass,
};
use sparse::testing::{missing, shared_dir};
use std::path::PathBuf;

fn uf_stats_dir() -> Option<PathBuf> {
    shared_dir("uf-stats").filter(|d| d.join("ginkgo_features.csv").exists())
}

#[test]
fn shipped_file_matches_upstream_derivation() {
    let Some(dir) = uf_stats_dir() else {
        let instead = "SKIP: ../shared/uf-stats not found (set SPMV_SHARED_DIR); cannot compare with upstream";
        return missing("../shared/uf-stats", instead);
    };
    let derived = derive_stats(&dir).expect("derive from upstream files");
    assert_eq!(derived.len(), 2893);
    let path = default_stats_path();
    if std::env::var_os("UF_STATS_REGENERATE").is_some() {
        // The explicit opt-in path: it writes the file and checks nothing (a run
        // that wrote the file cannot also be the proof that the file is right).
        let file = std::fs::File::create(&path).expect("create stats file");
        write_stats(std::io::BufWriter::new(file), &derived).expect("write stats file");
        eprintln!(
            "wrote {}; run the test again without UF_STATS_REGENERATE to check it",
            path.display()
        );
        return;
    }
    // The shipped file, byte for byte, against the derivation written to memory.
    let shipped_bytes = std::fs::read(&path).expect("read shipped stats");
    let mut fresh = Vec::new();
    write_stats(&mut fresh, &derived).expect("write derived stats to memory");
    let shipped = load_default_stats().expect("load shipped stats");
    assert_eq!(shipped.len(), derived.len());
    for (s, d) in shipped.iter().zip(&derived) {
        assert_eq!(
            s,
            d,
            "record {} differs from upstream; regenerate the file",
            d.full_name()
        );
    }
    assert!(
        shipped_bytes == fresh,
        "{} differs from the upstream derivation in its text; regenerate it with \
         UF_STATS_REGENERATE=1",
        path.display()
    );
}

#[test]
fn shipped_file_covers_the_collection() {
    let stats = load_default_stats().expect("load shipped stats");
    assert_eq!(stats.len(), 2893);
    let ids: Vec<u32> = stats.iter().map(|s| s.id).collect();
    assert_eq!(ids, (1..=2893).collect::<Vec<u32>>());
    // 50 matrices have no length statistics upstream; all others do.
    assert_eq!(stats.iter().filter(|s| s.row.is_none()).count(), 50);
    for s in &stats {
        assert!(s.rows > 0 && s.cols > 0 && s.nnz > 0, "{}", s.full_name());
        if let Some(r) = &s.row {
            assert!(
                (r.mean * s.rows as f64 - s.nnz as f64).abs() < 1.0,
                "{}",
                s.full_name()
            );
            // Ginkgo's quartile table reads outside the data for fewer than 4 rows.
            if s.rows < 4 {
                continue;
            }
            assert!(
                r.min <= r.q1 && r.q1 <= r.median && r.median <= r.q3 && r.q3 <= r.max,
                "{}",
                s.full_name()
            );
        }
    }
    let one = stats
        .iter()
        .find(|s| s.group == "HB" && s.name == "nos5")
        .unwrap();
    assert_eq!((one.rows, one.cols, one.nnz), (468, 468, 5172));
    assert_eq!(one.row.unwrap().q3, 12.5);
    assert_eq!(one.kind_class(), KindClass::Discretisation);
    for class in KindClass::ALL {
        assert!(
            stats.iter().any(|s| s.kind_class() == class),
            "no matrix of class {class:?}"
        );
    }
}
