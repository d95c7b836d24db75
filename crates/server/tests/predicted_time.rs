//! /predict carries `predicted_ms` (the chosen plan's and the best single
//! kernel's predicted time, with the model's held-out band) when the model in use
//! has a performance part, and `null` when it has none or the rule plans.

use crate::common;

use common::*;
use selector::{ErrorBand, Model, PerfParams, PerfSample};
use serde_json::Value;
use server::{DeviceState, Planner};
use sparse::{Binning, Features, KernelId, Plan, Scheme};

/// Made-up timings of single kernels and single-bin plans on random matrices:
/// a launch cost plus a per-nonzero cost that differs by kernel.
fn perf_samples() -> Vec<PerfSample> {
    let mut out = Vec::new();
    for seed in 0..30u64 {
        let n = 40 + 37 * seed as usize;
        let a = random_matrix(n, n, 100 + seed);
        let f = Features::of(&a);
        for (i, k) in KernelId::all().into_iter().enumerate() {
            let ms = 0.005 + a.nnz() as f64 * 1e-6 * (1.0 + i as f64 / 4.0);
            let x = selector::single_vector(&f, k);
            out.push(PerfSample {
                matrix: format!("m{seed}"),
                x,
                ms,
            });
        }
        let b = Binning::new(a.row_ptr(), Scheme::Granularity(10));
        let plan = Plan {
            scheme: b.scheme,
            kernels: b
                .nonempty_bins()
                .map(|bin| (bin, KernelId::Serial))
                .collect(),
        };
        if let Some(x) = selector::plan_vector(&f, &plan, &b) {
            out.push(PerfSample {
                matrix: format!("m{seed}"),
                x,
                ms: 0.006 + a.nnz() as f64 * 1e-6,
            });
        }
    }
    out
}

/// The shipped CPU models (f32 and f64), their performance part replaced by `perf`.
fn cpu_models_with(perf: Option<selector::PerfModel>) -> Vec<Model> {
    selector::load_models_dir(models_dir())
        .unwrap()
        .into_iter()
        .filter_map(|(_, m)| m.ok())
        .filter(|m| m.card.device.starts_with("pthread"))
        .map(|mut m| {
            m.set_perf(perf.clone());
            m
        })
        .collect()
}

/// The shipped CPU models with a performance part attached.
fn models_with_perf() -> Vec<Model> {
    let params = PerfParams {
        rounds: 50,
        ..PerfParams::default()
    };
    let mut perf = selector::fit_perf(&perf_samples(), params).unwrap();
    perf.band = Some(ErrorBand {
        low: 0.9,
        high: 1.2,
        mdape: 6.5,
        samples: 123,
        source: "test split".into(),
    });
    cpu_models_with(Some(perf))
}

async fn predict(planner: Planner, p: &str, a: &sparse::Csr<f64>) -> Value {
    let (app, _) = app_with_planner(config(&[]), DeviceState::none("test"), planner).await;
    let r = send(
        &app,
        post(&format!("/predict?precision={p}"), "text/plain", mm_text(a)),
    )
    .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    r.json()
}

#[tokio::test]
async fn predict_carries_the_predicted_time_of_the_plan_and_the_best_single_kernel() {
    let models = models_with_perf();
    assert_eq!(models.len(), 2, "the shipped CPU models in f32 and f64");
    let a = random_matrix(400, 400, 31);
    for p in ["f32", "f64"] {
        let planner = Planner::from_models(models.clone(), &xeon());
        let v = predict(planner, p, &a).await;
        assert_eq!(v["model"]["kind"], "model", "{v}");
        let t = &v["predicted_ms"];
        // The same numbers as the model gives for the plan the response shows.
        let m = models.iter().find(|m| m.card.precision == p).unwrap();
        let f = Features::of(&a);
        // The plan is the one the amortised planning chose (for the default
        // calls of an upload): the model's own, or one kernel alone.
        let (plan, binning) = match v["planning"]["chosen"].as_str().unwrap() {
            "model" => {
                let p = m.predict(&f, a.row_ptr());
                (p.plan, p.binning)
            }
            single => {
                let k: KernelId = single.strip_prefix("single:").unwrap().parse().unwrap();
                (Plan::single(k), Binning::new(a.row_ptr(), Scheme::Single))
            }
        };
        assert_eq!(v["planning"]["method"], "perf_model", "{v}");
        assert_eq!(t["used_by_planner"], true, "{t}");
        let want = m.predict_time(&f, &plan, &binning).unwrap();
        assert_eq!(v["plan"]["scheme"], plan.scheme.to_string(), "{v}");
        assert_eq!(t["plan"]["ms"].as_f64(), Some(want.plan.ms), "{t}");
        assert_eq!(
            t["best_single"]["ms"].as_f64(),
            Some(want.best_single.ms),
            "{t}"
        );
        let ms = want.plan.ms;
        assert!(ms.is_finite() && ms > 0.0, "{t}");
        assert_eq!(t["plan"]["low_ms"].as_f64(), Some(ms * 0.9), "{t}");
        assert_eq!(t["plan"]["high_ms"].as_f64(), Some(ms * 1.2), "{t}");
        let k = t["best_single_kernel"].as_str().unwrap();
        assert!(k.parse::<KernelId>().is_ok(), "{t}");
        assert!(t["band"].as_str().unwrap().contains("test split"), "{t}");
    }
}

#[tokio::test]
async fn predict_says_null_without_a_performance_model() {
    let a = random_matrix(100, 100, 32);
    // The shipped CPU models with their performance part taken off.
    let bare = cpu_models_with(None);
    assert_eq!(bare.len(), 2);
    let v = predict(Planner::from_models(bare, &xeon()), "f64", &a).await;
    assert_eq!(v["model"]["kind"], "model", "{v}");
    assert!(v["predicted_ms"].is_null(), "{v}");
    let v = predict(Planner::rule_only(None), "f64", &a).await;
    assert_eq!(v["model"]["kind"], "rule", "{v}");
    assert!(v["predicted_ms"].is_null(), "{v}");
}

/// The shipped CPU models carry a performance part that predicts only: /predict
/// gives its times (saying the planner did not use them), and the plans are
/// those the same models make without it (the bandwidth rule of amortised
/// planning, not the performance model's prices).
#[tokio::test]
async fn the_shipped_cpu_models_predict_times_the_planner_does_not_use() {
    let a = random_matrix(400, 400, 33);
    for p in ["f32", "f64"] {
        let v = predict(Planner::load(&models_dir(), Some(&xeon())), p, &a).await;
        assert_eq!(v["model"]["kind"], "model", "{v}");
        let t = &v["predicted_ms"];
        assert!(t["plan"]["ms"].as_f64().is_some_and(|ms| ms > 0.0), "{t}");
        assert!(
            t["best_single"]["ms"].as_f64().is_some_and(|ms| ms > 0.0),
            "{t}"
        );
        assert_eq!(t["used_by_planner"], false, "{t}");
        assert_ne!(v["planning"]["method"], "perf_model", "{v}");
        // The same plan and planning as the models without the performance part.
        for m in cpu_models_with(None) {
            let shipped = Model::load(models_dir().join(format!(
                "pthread-skylake-avx512-amd-epyc-{}.json",
                m.card.precision
            )))
            .unwrap();
            assert!(
                shipped.perf().is_some_and(|x| x.predict_only),
                "{}",
                m.card.precision
            );
        }
        let bare = cpu_models_with(None);
        let w = predict(Planner::from_models(bare, &xeon()), p, &a).await;
        assert_eq!(v["plan"], w["plan"], "{p}");
        assert_eq!(v["planning"]["method"], w["planning"]["method"], "{p}");
        assert_eq!(v["planning"]["chosen"], w["planning"]["chosen"], "{p}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn predictions_are_scaled_by_what_the_device_has_measured() {
    let test = "predictions_are_scaled_by_what_the_device_has_measured";
    if !have_device(test) {
        return;
    }
    let dev = device();
    let planner = Planner::from_models(models_with_perf(), &dev.identity().unwrap());
    let (app, _) = app_with_planner(config(&["--no-database"]), dev, planner).await;
    let predict = |a: &sparse::Csr<f64>| {
        let body = mm_text(a);
        let app = app.clone();
        async move {
            send(&app, post("/predict?precision=f64", "text/plain", body))
                .await
                .json_ok("/predict")["predicted_ms"]
                .clone()
        }
    };
    let a = random_matrix(400, 400, 31);
    // Nothing measured yet: the model's own times.
    let before = predict(&a).await;
    assert!(before["calibration"].is_null(), "{before}");
    let raw = before["plan"]["ms"].as_f64().unwrap();

    // An upload's tuning race times the model's plan and each kernel alone;
    // each /spmv on it times the plan kept again (one observation, replaced).
    let up = send(
        &app,
        post("/matrices?precision=f64", "text/plain", mm_text(&a)),
    )
    .await;
    assert_eq!(up.status, 201, "{}", String::from_utf8_lossy(&up.body));
    let id = up.json()["id"].as_str().unwrap().to_string();
    for _ in 0..3 {
        let x = random_x(400, 5);
        let body = serde_json::json!({"matrix_id": id, "x": x});
        send(&app, post_json("/spmv?precision=f64", body))
            .await
            .json_ok("/spmv");
    }

    let after = predict(&a).await;
    let c = &after["calibration"];
    assert!(c.is_object(), "{after}");
    assert_eq!(c["uncalibrated_plan_ms"].as_f64(), Some(raw), "{after}");
    let factor = c["factor"].as_f64().unwrap();
    assert!((0.25..=4.0).contains(&factor), "{after}");
    let ms = after["plan"]["ms"].as_f64().unwrap();
    assert!((ms - raw * factor).abs() <= 1e-12 * raw.max(1.0), "{after}");
    assert!(
        (after["plan"]["low_ms"].as_f64().unwrap() - ms * 0.9).abs() < 1e-12,
        "{after}"
    );
    let kept = c["kept"].as_u64().unwrap();
    // Every kernel the model knows raced (the tuning budget is ample for a
    // 400-row matrix), and the model's plan; /spmv added none of its own.
    assert!(kept >= 3, "{after}");
    assert!(c["observations"].as_u64().unwrap() <= kept, "{after}");
    // The made-up model is not this device: its times moved.
    assert_ne!(factor, 1.0, "{after}");
}
