//! Models fitted before the features appended to `sparse::FEATURE_NAMES` keep
//! planning and predicting exactly as they did: they read only the features
//! they were trained on, whatever the appended ones say. The fixture is the
//! H100 f32 model shipped until the appended features (and before merge_tile),
//! its performance model cut to 12 trees; the PoCL models ship unchanged.

use selector::*;
use sparse::{Binning, Features, Scheme, FEATURES_V1_LEN, FEATURE_NAMES};
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn fixture() -> Model {
    let p =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/h100-f32-before-merge-tile.json");
    Model::load(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn pocl(precision: &str) -> Model {
    let p = repo().join(format!(
        "models/pthread-skylake-avx512-amd-epyc-{precision}.json"
    ));
    Model::load(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn matrix(name: &str) -> sparse::Csr<f64> {
    let p = repo().join("crates/sparse/tests/data").join(name);
    sparse::mm::read_path(&p, &Default::default())
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The features with every appended one replaced by `v`.
fn with_appended(f: &Features, v: f64) -> Features {
    let mut g = f.clone();
    for x in &mut g.values[FEATURES_V1_LEN..] {
        *x = v;
    }
    g
}

#[test]
fn old_models_record_the_first_features_only() {
    for m in [fixture(), pocl("f32"), pocl("f64")] {
        assert_eq!(
            m.card.feature_order.stage1,
            FEATURE_NAMES[..FEATURES_V1_LEN].to_vec(),
            "{}",
            m.card.device
        );
        assert!(!m.reads_current_layout());
    }
    assert!(FEATURE_NAMES.len() > FEATURES_V1_LEN);
}

/// Plans of the pre-change build (`spmv predict --model M --json` at commit
/// 482f27d) on the fixture matrices: (file, fixture's kernel, PoCL's kernel).
const GOLDEN: [(&str, &str, &str); 5] = [
    ("Bai__rdb200.mtx.gz", "subvector2", "serial"),
    ("HB__abb313.mtx.gz", "subvector2", "serial"),
    ("HB__can_229.mtx.gz", "subvector16", "serial"),
    (
        "JGD_Trefethen__Trefethen_150.mtx.gz",
        "subvector16",
        "serial",
    ),
    ("Pothen__mesh3em5.mtx.gz", "subvector16", "serial"),
];

#[test]
fn old_models_plan_as_the_build_before_the_appended_features() {
    let (h100, cpu32, cpu64) = (fixture(), pocl("f32"), pocl("f64"));
    for (file, k_h100, k_cpu) in GOLDEN {
        let a = matrix(file);
        let f = Features::of(&a);
        for (m, k) in [(&h100, k_h100), (&cpu32, k_cpu), (&cpu64, k_cpu)] {
            let p = m.predict(&f, a.row_ptr()).plan;
            assert_eq!(p.scheme, Scheme::Single, "{file}");
            assert_eq!(p.kernels.len(), 1, "{file}");
            assert_eq!(p.kernels[0].1.name(), k, "{file} {}", m.card.device);
        }
        // The fixture's performance model gave 0.008415322062350893 ms for
        // each of these small matrices, plan and best single kernel alike.
        let b = Binning::new(a.row_ptr(), Scheme::Single);
        let plan = h100.predict(&f, a.row_ptr()).plan;
        let t = h100.predict_time(&f, &plan, &b).unwrap();
        assert_eq!(t.plan.ms, 0.008415322062350893, "{file}");
        assert_eq!(t.best_single_kernel, "serial");
    }
}

#[test]
fn appended_features_change_nothing_an_old_model_does() {
    let models = [fixture(), pocl("f32"), pocl("f64")];
    let mut gens: Vec<sparse::Csr<f64>> = GOLDEN.iter().map(|g| matrix(g.0)).collect();
    gens.push(sparse::gen::stencil_2d(60, 50).unwrap());
    let mut distinct_plans = std::collections::HashSet::new();
    for a in &gens {
        let f = Features::of(a);
        for m in &models {
            let p = m.predict_explained(&f, a.row_ptr());
            for v in [0.0, -1.0, 1e9] {
                let g = with_appended(&f, v);
                let q = m.predict_explained(&g, a.row_ptr());
                assert_eq!(p.plan, q.plan, "{}", m.card.device);
                assert_eq!(p.explanation, q.explanation);
                if let Some(perf) = m.perf() {
                    for k in perf.kernels() {
                        let x = single_vector(&f, k);
                        let y = single_vector(&g, k);
                        assert_eq!(perf.predict_ms(&x), perf.predict_ms(&y), "{k}");
                    }
                }
            }
            // The decision paths name only features the model was trained on.
            let e = p.explanation.unwrap();
            for s in e
                .stage1
                .path
                .iter()
                .chain(e.stage2.iter().flat_map(|b| &b.path))
            {
                let at = STAGE2_FEATURES
                    .iter()
                    .position(|n| *n == s.feature)
                    .unwrap();
                assert!(
                    at < FEATURES_V1_LEN || at >= STAGE1_FEATURES.len(),
                    "{}",
                    s.feature
                );
            }
            distinct_plans.insert(format!("{:?}", p.plan));
        }
    }
    assert!(distinct_plans.len() >= 3, "{distinct_plans:?}");
}
