//! Planning real SuiteSparse matrices from the shared folder (skipped with a
//! printed reason when the folder is absent): the rule and a model fitted on the
//! cost model give valid plans for every matrix, and explanations serialize.

use crate::common;

use selector::*;
use sparse::mm::{read_path, ReadOptions};
use sparse::testing::shared_dir_or_skip;
use sparse::Features;
use std::path::PathBuf;

fn shared_matrices() -> Option<Vec<PathBuf>> {
    let dir = shared_dir_or_skip("matrices")?;
    Some(sparse::mm::matrix_files(&dir).expect("the shared matrices folder lists"))
}

#[test]
fn real_matrices_get_valid_plans() {
    let Some(paths) = shared_matrices() else {
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
