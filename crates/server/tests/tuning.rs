//! Tuning at upload: an uploaded matrix's plan is raced against every single
//! kernel on the device and the fastest kept; inline requests are not tuned;
//! `--tune-uploads false` turns it off; y stays right whichever plan wins.

use crate::common;

use common::*;
use serde_json::{json, Value};
use sparse::KernelId;

async fn upload(app: &axum::Router, a: &sparse::Csr<f64>, p: &str) -> Value {
    let r = send(
        app,
        post(
            &format!("/matrices?precision={p}"),
            "text/plain",
            mm_text(a),
        ),
    )
    .await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    r.json()
}

fn ms(c: &Value) -> Option<f64> {
    c["kernel_ms"].as_f64()
}

#[tokio::test]
async fn an_uploaded_matrix_keeps_the_fastest_of_the_model_plan_and_every_single_kernel() {
    // A generous budget so that every candidate is timed.
    let flags = ["--tune-budget-ms", "60000"];
    let Some((app, _)) = device_app("tuning_keeps_the_fastest", &flags).await else {
        return;
    };
    let (a, x) = random_problem(3000, 2500, 11);
    for p in ["f32", "f64"] {
        let v = upload(&app, &a, p).await;
        let t = &v["tuning"];
        assert!(t.is_object(), "no tuning in {v}");
        assert_eq!(t["complete"], true, "{t}");
        let cands = t["candidates"].as_array().unwrap();
        assert_eq!(cands[0]["plan"], "model");
        let model_ms = ms(&cands[0]).expect("the model's plan is always timed");
        // The model's plan plus every kernel of the pool (less the model's own
        // kernel when its plan is one single kernel), each once.
        let all = KernelId::all().len();
        assert!(cands.len() == all || cands.len() == all + 1, "{t}");
        let mut names: Vec<&str> = cands[1..]
            .iter()
            .map(|c| c["plan"].as_str().unwrap())
            .collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), cands.len() - 1, "{t}");
        assert!(names.iter().all(|n| n.parse::<KernelId>().is_ok()), "{t}");
        let (best_name, best_ms) = cands[1..]
            .iter()
            .filter_map(|c| ms(c).map(|m| (c["plan"].as_str().unwrap().to_string(), m)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap();
        if best_ms < model_ms * (1.0 - server::tune::SWITCH_MARGIN) {
            assert_eq!(t["chosen"], best_name.as_str(), "{t}");
            assert_eq!(v["plan"]["scheme"], "single", "{v}");
            let speedup = t["speedup_vs_model"].as_f64().unwrap();
            assert!((speedup - model_ms / best_ms).abs() < 1e-9, "{t}");
        } else {
            assert_eq!(t["chosen"], "model", "{t}");
            assert_eq!(t["speedup_vs_model"], 1.0);
        }
        // Whatever won computes the right y, and the answer says which plan ran.
        let body = json!({"matrix_id": v["id"], "x": x, "precision": p, "verify": true});
        let r = send(&app, post("/spmv", "application/json", body.to_string())).await;
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        let s = r.json();
        assert_eq!(s["verify"]["ok"], true, "{}", s["verify"]);
        assert_eq!(s["tuning"], *t);
        assert_eq!(s["plan"], v["plan"]);
        match p {
            "f32" => check_y::<f32>(&a, &x, &y_of(&s)),
            _ => check_y::<f64>(&a, &x, &y_of(&s)),
        }
    }
}

#[tokio::test]
async fn inline_requests_and_a_disabled_race_are_not_tuned() {
    let Some((app, _)) = device_app("tuning_inline_and_off", &[]).await else {
        return;
    };
    let (a, x) = random_problem(400, 300, 5);
    let body = json!({"matrix": mm_text(&a), "x": x, "precision": "f64"});
    let r = send(&app, post("/spmv", "application/json", body.to_string())).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert!(r.json()["tuning"].is_null(), "inline /spmv must not race");

    let (off, _) = test_app(&["--tune-uploads", "false"]).await;
    let v = upload(&off, &a, "f64").await;
    assert!(v["tuning"].is_null(), "{v}");
    assert_eq!(v["on_device"], true);
}

#[tokio::test]
async fn a_zero_budget_times_the_model_plan_only_and_keeps_it() {
    let Some((app, _)) = device_app("tuning_zero_budget", &["--tune-budget-ms", "0"]).await else {
        return;
    };
    let a = random_matrix(800, 800, 9);
    let v = upload(&app, &a, "f32").await;
    let t = &v["tuning"];
    assert_eq!(t["complete"], false, "{t}");
    assert_eq!(t["chosen"], "model");
    let cands = t["candidates"].as_array().unwrap();
    assert!(ms(&cands[0]).is_some());
    assert!(cands[1..].iter().all(|c| c["kernel_ms"].is_null()), "{t}");
}
