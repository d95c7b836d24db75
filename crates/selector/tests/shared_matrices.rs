//! Planning real SuiteSparse matrices from the shared folder (skipped with a
//! printed reason when the folder is absent): the rule and a model fitted on the
//! cost model give valid plans for every matrix, and explanations serialize.

mod common;

use selector::*;
use sparse::mm::{read_path, ReadOptions};
use sparse::Features;
use std::path::PathBuf;

fn shared_matrices() -> Option<Vec<PathBuf>> {
    let dir = std::env::var_os("SPMV_SHARED_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared"))
        .join("matrices");
    sparse::mm::matrix_files(&dir).ok()
}

#[test]
fn real_matrices_get_valid_plans() {
    let Some(paths) = shared_matrices() else {
        must_not_skip("../shared/matrices");
        eprintln!("SKIP: no shared matrices folder (set SPMV_SHARED_DIR)");
        return;
    };
    let (s1, s2) = common::label_all(&common::synthetic_matrices(21, 30));
    let model = fit(&s1, &s2, &TrainParams::new().check().unwrap()).unwrap();
    let mut planned = 0;
    // Small files first keeps the test quick; 25 matrices cover many shapes.
    let mut sized: Vec<(u64, PathBuf)> = paths
        .into_iter()
        .map(|p| (std::fs::metadata(&p).map_or(u64::MAX, |m| m.len()), p))
        .collect();
    sized.sort();
    for (_, path) in sized.into_iter().take(25) {
        let a = match read_path::<f64>(&path, &ReadOptions::default()) {
            Ok(a) => a,
            Err(e) => {
                eprintln!("skipping {}: {e}", path.display());
                continue;
            }
        };
        let f = Features::of(&a);
        let r = rule_prediction(&f, a.row_ptr(), true);
        r.plan.check(&r.binning).unwrap();
        let p = model.predict_explained(&f, a.row_ptr());
        p.plan.check(&p.binning).unwrap();
        assert_eq!(p.plan.kernels.len(), p.binning.nonempty_bins().count());
        serde_json::to_string(&p.explanation).unwrap();
        planned += 1;
    }
    eprintln!("planned {planned} shared matrices");
    assert!(planned > 0);
}

/// Under CI (`CI=true`) or with `SPMV_REQUIRE_DEVICE=1`, a missing device or
/// data folder fails the test instead of skipping it.
fn must_not_skip(what: &str) {
    let set = |k: &str| std::env::var(k).is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"));
    if set("CI") || set("SPMV_REQUIRE_DEVICE") {
        panic!("{what} is required under CI / SPMV_REQUIRE_DEVICE=1, and it is missing");
    }
}
