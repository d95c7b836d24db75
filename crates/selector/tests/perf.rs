//! The performance model: fitted on the cost model's plan times it predicts
//! plans of matrices it never saw; it survives the model file; model files
//! written before it existed (the shipped ones) still load, without it.

use crate::common;

use selector::*;
use sparse::{Binning, Csr, Features, KernelId, Plan, Scheme};
use std::path::Path;

/// The timed plans of one matrix as the trainer makes them: each scheme's best
/// plan (best kernel per bin) and every kernel alone over the whole matrix.
fn samples(name: &str, a: &Csr<f64>) -> Vec<(Plan, PerfSample)> {
    let f = Features::of(a);
    let mut out = Vec::new();
    for scheme in Scheme::all() {
        let b = Binning::new(a.row_ptr(), scheme);
        let kernels: Vec<(usize, KernelId)> = b
            .nonempty_bins()
            .map(|bin| {
                let best = common::kernels()
                    .into_iter()
                    .min_by(|x, y| {
                        let t = |k| common::kernel_time(k, b.row_count(bin), b.bin_nnz[bin]);
                        t(*x).total_cmp(&t(*y))
                    })
                    .unwrap();
                (bin, best)
            })
            .collect();
        let plan = Plan { scheme, kernels };
        if let Some(x) = plan_vector(&f, &plan, &b) {
            let ms = common::plan_time(&plan, a);
            out.push((
                plan,
                PerfSample {
                    matrix: name.into(),
                    x,
                    ms,
                },
            ));
        }
    }
    for k in KernelId::all() {
        let plan = Plan::single(k);
        let ms = common::plan_time(&plan, a);
        let x = single_vector(&f, k);
        out.push((
            plan,
            PerfSample {
                matrix: name.into(),
                x,
                ms,
            },
        ));
    }
    out
}

fn fitted_model() -> (Model, Vec<(String, Csr<f64>)>) {
    let train = common::synthetic_matrices(5, 60);
    let test = common::synthetic_matrices(77, 20);
    let (s1, s2) = common::label_all(&train);
    let mut m = fit(&s1, &s2, &TrainParams::new().check().unwrap()).unwrap();
    m.card.device = "Test Device".into();
    m.card.precision = "f64".into();
    let ps: Vec<PerfSample> = train
        .iter()
        .flat_map(|(n, a)| samples(n, a))
        .map(|s| s.1)
        .collect();
    m.set_perf(Some(fit_perf(&ps, PerfParams::default()).unwrap()));
    (m, test)
}

#[test]
fn predicts_unseen_matrices_and_survives_the_file() {
    let (m, test) = fitted_model();
    let perf = m.perf().unwrap();
    let mut errors = Vec::new();
    for (n, a) in &test {
        for (_, s) in samples(n, a) {
            errors.push((perf.predict_ms(&s.x) / s.ms - 1.0).abs());
        }
    }
    errors.sort_by(f64::total_cmp);
    let median = errors[errors.len() / 2];
    assert!(
        median < 0.10,
        "median absolute error {median} on unseen matrices"
    );

    // Through JSON: identical predictions, and the model's plan gets a time.
    let back = Model::from_json_str(&m.to_json_string()).unwrap();
    assert_eq!(back, m);
    let (_, a) = &test[0];
    let f = Features::of(a);
    let pred = back.predict(&f, a.row_ptr());
    let t = back.predict_time(&f, &pred.plan, &pred.binning).unwrap();
    let x = plan_vector(&f, &pred.plan, &pred.binning).unwrap();
    assert_eq!(t.plan.ms, perf.predict_ms(&x));
    assert!(
        t.plan.low_ms.is_none(),
        "no band before the trainer sets one"
    );
    let single = KernelId::all()
        .into_iter()
        .map(|k| perf.predict_ms(&single_vector(&f, k)))
        .fold(f64::INFINITY, f64::min);
    assert_eq!(t.best_single.ms, single);

    // A band scales the estimate.
    let mut banded = m.clone();
    let mut p = banded.perf().unwrap().clone();
    p.band = Some(ErrorBand {
        low: 0.8,
        high: 1.25,
        mdape: 7.0,
        samples: 100,
        source: "test".into(),
    });
    banded.set_perf(Some(p));
    let t = banded.predict_time(&f, &pred.plan, &pred.binning).unwrap();
    assert_eq!(t.plan.low_ms, Some(t.plan.ms * 0.8));
    assert_eq!(t.best_single.high_ms, Some(t.best_single.ms * 1.25));
    assert!(t.band.contains("7.0%"), "{}", t.band);
}

#[test]
fn fitting_is_deterministic() {
    let train = common::synthetic_matrices(9, 15);
    let ps: Vec<PerfSample> = train
        .iter()
        .flat_map(|(n, a)| samples(n, a))
        .map(|s| s.1)
        .collect();
    let p = PerfParams {
        rounds: 60,
        ..PerfParams::default()
    };
    assert_eq!(fit_perf(&ps, p).unwrap(), fit_perf(&ps, p).unwrap());
}

#[test]
fn a_perf_layout_of_another_build_is_refused() {
    let (m, _) = fitted_model();
    let mut v: serde_json::Value = serde_json::from_str(&m.to_json_string()).unwrap();
    v["perf"]["features"][3] = serde_json::json!("something_else");
    let e = Model::from_json_str(&v.to_string())
        .unwrap_err()
        .to_string();
    assert!(e.contains("stage-3") && e.contains("something_else"), "{e}");
    let mut v: serde_json::Value = serde_json::from_str(&m.to_json_string()).unwrap();
    // A tree splitting on a feature the layout does not have, and a garbled tree.
    v["perf"]["model"]["trees"][0] = serde_json::json!("s9999:1.0:1:2;l0.5:1;l0.25:1");
    let e = Model::from_json_str(&v.to_string())
        .unwrap_err()
        .to_string();
    assert!(e.contains("feature 9999"), "{e}");
    v["perf"]["model"]["trees"][0] = serde_json::json!("s1:1.0:1");
    assert!(Model::from_json_str(&v.to_string()).is_err());
}

#[test]
fn model_files_without_a_performance_part_still_load() {
    // The shipped models predate the performance model.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models");
    let mut n = 0;
    for (path, m) in load_models_dir(&dir).unwrap() {
        let m = m.unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let json = std::fs::read_to_string(&path).unwrap();
        if !json.contains("\"perf\"") {
            assert!(m.perf().is_none());
            let a = common::csr_from_lengths(&[1, 5, 0, 9]);
            let f = Features::of(&a);
            let p = m.predict(&f, a.row_ptr());
            assert!(m.predict_time(&f, &p.plan, &p.binning).is_none());
            n += 1;
        }
    }
    // And a file of this build with the part removed.
    let (m, _) = fitted_model();
    let mut v: serde_json::Value = serde_json::from_str(&m.to_json_string()).unwrap();
    v.as_object_mut().unwrap().remove("perf");
    let old = Model::from_json_str(&v.to_string()).unwrap();
    assert!(old.perf().is_none());
    eprintln!("{n} shipped model files without a performance part loaded");
}
