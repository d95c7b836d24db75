//! The model as a file and as a planner: fit -> save -> load gives identical
//! predictions, mismatched or broken files are refused with clear errors,
//! prediction never panics, and the selector falls back to the rule.

use crate::common;

use selector::*;
use sparse::{Binning, Csr, Features, KernelId, Scheme};
use std::sync::OnceLock;

/// One model fitted on the cost model, shared by the tests of this file.
fn model() -> &'static Model {
    static M: OnceLock<Model> = OnceLock::new();
    M.get_or_init(|| {
        let (s1, s2) = common::label_all(&common::synthetic_matrices(11, 40));
        let mut m = fit(&s1, &s2, &TrainParams::new().check().unwrap()).unwrap();
        m.card.device = "Test Device".into();
        m.card.precision = "f64".into();
        m.card.corpus = "synthetic cost model, 40 matrices".into();
        m
    })
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("selector-test-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn fit_save_load_gives_identical_predictions() {
    let m = model();
    let dir = temp_dir("roundtrip");
    let path = dir.join("model.json");
    m.save(&path).unwrap();
    let loaded = Model::load(&path).unwrap();
    assert_eq!(&loaded, m);
    assert_eq!(loaded.id(), m.id());
    let mut checked = 0;
    for (_, a) in common::synthetic_matrices(12, 25)
        .iter()
        .chain(&common::synthetic_matrices(11, 40))
    {
        let f = Features::of(a);
        let p = m.predict_explained(&f, a.row_ptr());
        let q = loaded.predict_explained(&f, a.row_ptr());
        assert_eq!(p, q);
        p.plan.check(&p.binning).unwrap();
        assert_eq!(p.binning, Binning::new(a.row_ptr(), p.plan.scheme));
        assert_eq!(p.plan.kernels.len(), p.binning.nonempty_bins().count());
        checked += 1;
    }
    assert_eq!(checked, 65);
    let card: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    for key in [
        "device",
        "precision",
        "feature_order",
        "corpus",
        "created",
        "hyper_parameters",
        "metrics",
        "schemes",
        "kernels",
        "version",
    ] {
        assert!(card["card"].get(key).is_some(), "card lacks {key}");
    }
    assert_eq!(card["card"]["feature_order"]["stage2"][33], "scheme_u");
    assert!(
        card["card"]["metrics"]["train"]["stage2"]["geomean_ratio"]
            .as_f64()
            .unwrap()
            > 0.5
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn explanation_paths_lead_to_the_plan() {
    let m = model();
    for (_, a) in common::synthetic_matrices(13, 10) {
        let f = Features::of(&a);
        let p = m.predict_explained(&f, a.row_ptr());
        let e = p.explanation.as_ref().unwrap();
        assert_eq!(e.selector, "model");
        assert_eq!(e.stage1.scheme, p.plan.scheme);
        assert_eq!(e.stage2.len(), p.plan.kernels.len());
        for (d, (bin, k)) in e.stage2.iter().zip(&p.plan.kernels) {
            assert_eq!((d.bin, d.kernel), (*bin, *k));
            assert_eq!(d.rows, p.binning.row_count(*bin));
            assert_eq!(d.nnz, p.binning.bin_nnz[*bin]);
            for s in &d.path {
                assert!(STAGE2_FEATURES.contains(&s.feature.as_str()));
                // Thresholds are reported in the feature's own units; away from the
                // cut itself the reported comparison agrees with the direction taken.
                if (s.value - s.threshold).abs() > 1e-9 * s.threshold.abs().max(1.0) {
                    assert_eq!(s.went == Went::Left, s.value < s.threshold, "{s:?}");
                }
            }
        }
        // The plain prediction is the same plan.
        assert_eq!(m.predict(&f, a.row_ptr()).plan, p.plan);
        let json = serde_json::to_value(e).unwrap();
        assert!(json["stage2"][0]["path"].is_array());
    }
}

fn edit(m: &Model, f: impl FnOnce(&mut serde_json::Value)) -> String {
    let mut v: serde_json::Value = serde_json::from_str(&m.to_json_string()).unwrap();
    f(&mut v);
    v.to_string()
}

#[test]
fn mismatched_feature_order_is_refused() {
    let m = model();
    let s = edit(m, |v| {
        v["card"]["feature_order"]["stage2"][35] = "bin_mean_len".into()
    });
    match Model::from_json_str(&s) {
        Err(SelectorError::FeatureOrderMismatch {
            stage: 2,
            position: 35,
            model,
            current,
        }) => {
            assert_eq!(model, "'bin_mean_len'");
            assert_eq!(current, "'bin_mean_row_len'");
        }
        other => panic!("{other:?}"),
    }
    let s = edit(m, |v| {
        v["card"]["feature_order"]["stage1"]
            .as_array_mut()
            .unwrap()
            .pop();
    });
    let e = Model::from_json_str(&s).unwrap_err().to_string();
    assert_says(&e, &["stage-1", "position 32", "nothing", "hist_ge_65536"]);
    let s = edit(m, |v| {
        v["card"]["feature_order"]["stage1"]
            .as_array_mut()
            .unwrap()
            .swap(0, 1)
    });
    let e = Model::from_json_str(&s).unwrap_err().to_string();
    assert_says(&e, &["position 0", "'cols'", "'rows'", "retrain"]);
}

#[test]
fn broken_files_are_refused() {
    let m = model();
    let cases: Vec<(String, &str)> = vec![
        ("{".to_string(), "JSON"),
        ("{}".to_string(), "card"),
        (edit(m, |v| v["card"]["version"] = 99.into()), "version 99"),
        (
            edit(m, |v| v["stage2"]["nodes"] = serde_json::json!([])),
            "no nodes",
        ),
        (
            edit(m, |v| {
                v["stage1"]["nodes"] = serde_json::json!([{"kind": "leaf", "class": 500}])
            }),
            "class 500",
        ),
        (
            edit(m, |v| {
                v["stage2"]["nodes"] = serde_json::json!([
                    {"kind": "split", "feature": 999, "cut": 1.0, "threshold": 1.0, "left": 1, "right": 2},
                    {"kind": "leaf", "class": 0}, {"kind": "leaf", "class": 0}])
            }),
            "feature 999",
        ),
        (
            edit(m, |v| {
                v["card"]["kernels"] = serde_json::json!(["warp_magic"])
            }),
            "warp_magic",
        ),
        (
            edit(m, |v| v["card"]["schemes"] = serde_json::json!([])),
            "no schemes",
        ),
    ];
    for (s, needle) in cases {
        let e = Model::from_json_str(&s).unwrap_err().to_string();
        assert!(e.contains(needle), "expected '{needle}' in: {e}");
    }
    let e = Model::load("/nonexistent/model.json")
        .unwrap_err()
        .to_string();
    assert!(e.contains("/nonexistent/model.json"), "{e}");
}

#[test]
fn prediction_never_panics() {
    let m = model();
    for sel in [Selector::Model(m.clone()), Selector::Rule] {
        // No rows: a plan with no bins. Rows without entries still need a kernel
        // (it writes their zeros).
        for (r, c) in [(0, 0), (5, 0), (0, 5), (7, 3)] {
            let z = Csr::<f64>::zeros(r, c).unwrap();
            let p = sel.plan_explained(&Features::of(&z), z.row_ptr());
            assert_eq!(p.plan.kernels.is_empty(), r == 0, "{r}x{c}: {:?}", p.plan);
            p.plan.check(&p.binning).unwrap();
        }
        // 1x1.
        let one = Csr::<f64>::identity(1).unwrap();
        let p = sel.plan(&Features::of(&one), one.row_ptr());
        assert_eq!(p.plan.kernels.len(), 1);
        p.plan.check(&p.binning).unwrap();
        // One huge row among empty ones, and a very tall matrix.
        for a in [
            common::csr_from_lengths(&[0, 0, 5000, 0]),
            common::csr_from_lengths(&vec![1; 100_000]),
        ] {
            let p = sel.plan(&Features::of(&a), a.row_ptr());
            p.plan.check(&p.binning).unwrap();
        }
        // Hand-made feature vectors: too short, too long, NaN, infinite.
        let a = common::csr_from_lengths(&[3, 1, 4, 1, 5]);
        for values in [
            vec![],
            vec![1.0; 100],
            vec![f64::NAN; 33],
            vec![f64::INFINITY; 33],
        ] {
            let p = sel.plan_explained(&Features { values }, a.row_ptr());
            p.plan.check(&p.binning).unwrap();
            serde_json::to_string(&p.explanation).unwrap();
        }
        // A malformed row pointer is binned as one bin instead of underflowing.
        let p = sel.plan(&Features::of(&a), &[0, 5, 3, 9]);
        p.plan.check(&p.binning).unwrap();
        sel.plan(&Features::of(&a), &[]);
    }
}

fn kernels() -> KernelSources {
    KernelSources::of([("serial.cl", "kernel void serial() {}\n")])
}

/// A model trained on `device` (recorded on its card with the test kernels).
fn trained_on(device: &DeviceIdentity, precision: &str) -> Model {
    let mut m = model().clone();
    m.card.precision = precision.into();
    m.card.record_training(device, kernels());
    m
}

#[test]
fn selector_picks_the_matching_model_or_the_rule() {
    let dev = DeviceIdentity::new(" Test Device ", "Acme", "1.0", "cpu");
    let m = trained_on(&dev, "f64");
    let mut older = m.clone();
    older.card.created = "2000-01-01".into();
    let other = trained_on(&dev, "f32");
    let ks = kernels();
    let target = |precision| Target {
        device: &dev,
        precision,
        kernels: &ks,
    };
    let c = Selector::choose(&[older.clone(), m.clone(), other.clone()], &target("F64"));
    assert_eq!(c.selector, Selector::Model(m.clone()));
    assert_eq!((c.index, c.level), (Some(1), MatchLevel::Exact));
    let info = c.selector.info();
    assert_eq!(info.kind, "model");
    assert_eq!(info.id.as_deref(), Some(m.id().as_str()));
    assert_eq!(info.precision.as_deref(), Some("f64"));
    let c = Selector::choose(std::slice::from_ref(&other), &target("f32"));
    assert_eq!(c.selector, Selector::Model(other));
    let gpu = DeviceIdentity::new("Another GPU", "Acme", "1.0", "gpu");
    let r = Selector::choose(
        std::slice::from_ref(&m),
        &Target {
            device: &gpu,
            precision: "f64",
            kernels: &ks,
        },
    );
    assert_eq!(
        (r.selector.clone(), r.level),
        (Selector::Rule, MatchLevel::None)
    );
    assert!(
        r.reason.contains("rule baseline") && r.reason.contains("gpu"),
        "{}",
        r.reason
    );
    let r = r.selector;
    assert_eq!(r.info().kind, "rule");
    assert!(r.info().id.is_none());
    let a = common::csr_from_lengths(&[2; 50]);
    let f = Features::of(&a);
    assert_eq!(r.plan(&f, a.row_ptr()).plan, rule_plan(&f, a.row_ptr()));
    assert_eq!(
        r.plan_explained(&f, a.row_ptr())
            .explanation
            .unwrap()
            .selector,
        "rule"
    );
}

#[test]
fn models_folder_loads_each_file_separately() {
    let dir = temp_dir("folder");
    model().save(dir.join("b.json")).unwrap();
    std::fs::write(dir.join("a.json"), "not json").unwrap();
    std::fs::write(dir.join("notes.txt"), "ignored").unwrap();
    let got = load_models_dir(&dir).unwrap();
    assert_eq!(got.len(), 2);
    assert!(got[0].0.ends_with("a.json") && got[0].1.is_err());
    assert!(got[1].0.ends_with("b.json") && got[1].1.is_ok());
    assert!(load_models_dir(dir.join("missing")).is_err());
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn stage_predictions_use_the_card_classes() {
    let m = model();
    let a = common::csr_from_lengths(&[40; 300]);
    let f = Features::of(&a);
    let scheme = m.predict_scheme(&stage1_vector(&f));
    assert!(m.card.schemes.contains(&scheme));
    let b = Binning::new(a.row_ptr(), Scheme::Granularity(10));
    let k: KernelId = m.predict_kernel(&stage2_vector(&f, &b, 40));
    assert!(m.card.kernels.contains(&k));
}

/// Asserts that the message `e` names every one of `parts`.
fn assert_says(e: &str, parts: &[&str]) {
    for part in parts {
        assert!(e.contains(part), "{e:?} does not say {part:?}");
    }
}
