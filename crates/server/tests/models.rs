//! Model choice as the service reports it: on a PoCL CPU whose name differs from
//! the shipped models' device but is of the same class, /predict and /spmv say
//! which model planned and that the match is `same_class`, with no fallback;
//! /models names files without folders and shows a refused model's reason (a
//! recorded kernel file changed), and a model trained before a kernel file was
//! added is still used, its reason saying so.

use crate::common;

use common::*;
use serde_json::{json, Value};
use server::{DeviceState, Planner};

const PRECISIONS: [&str; 2] = ["f32", "f64"];

fn assert_same_class(model: &Value) {
    assert_eq!(model["kind"], "model", "{model}");
    assert_eq!(model["match"], "same_class", "{model}");
    assert_eq!(model["fallback"], false, "{model}");
    assert!(model["reason"].is_null(), "{model}");
    let file = model["file"]
        .as_str()
        .unwrap_or_else(|| panic!("no file in {model}"));
    assert!(file.ends_with(".json") && !file.contains('/'), "{model}");
    assert!(
        model["match_reason"]
            .as_str()
            .is_some_and(|r| r.contains("same class")),
        "{model}"
    );
}

#[tokio::test]
async fn predict_on_a_same_class_cpu_uses_the_shipped_model() {
    let planner = Planner::load(&models_dir(), Some(&xeon()));
    let (app, _) = app_with_planner(config(&[]), DeviceState::none("test"), planner).await;
    let a = random_matrix(120, 120, 21);
    for p in PRECISIONS {
        let uri = format!("/predict?precision={p}");
        let r = send(&app, post(&uri, "text/plain", mm_text(&a))).await;
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        let v = r.json();
        assert_same_class(&v["model"]);
        assert_eq!(v["model"]["precision"], p);
    }
    let v = send(&app, get("/models")).await.json();
    for p in PRECISIONS {
        assert_same_class(&v["in_use"][p]);
    }
}

#[tokio::test]
async fn spmv_on_a_same_class_cpu_reports_the_model_in_json_and_headers() {
    if !have_device("spmv_on_a_same_class_cpu") {
        return;
    }
    // The real device runs the plan; models are matched as if it were the Xeon.
    let planner = Planner::load(&models_dir(), Some(&xeon()));
    let (app, _) = app_with_planner(config(&[]), device(), planner).await;
    let (a, x) = random_problem(300, 200, 22);
    for p in PRECISIONS {
        let body = json!({"matrix": csr_json(&a), "x": x, "precision": p});
        let r = send(&app, post("/spmv", "application/json", body.to_string())).await;
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        assert_same_class(&r.json()["model"]);
    }
    let r = send(&app, post("/matrices", "text/plain", mm_text(&a))).await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let id = r.json()["id"].as_str().unwrap().to_string();
    let xb: Vec<u8> = x.iter().flat_map(|&v| v.to_le_bytes()).collect();
    let req = axum::http::Request::post(format!("/spmv?matrix_id={id}&precision=f64"))
        .header("content-type", "application/octet-stream")
        .header("accept", "application/octet-stream")
        .body(axum::body::Body::from(xb))
        .unwrap();
    let r = send(&app, req).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.headers["x-model-match"], "same_class");
}

async fn model_for(name: &str, vendor: &str) -> Value {
    let gpu = selector::DeviceIdentity::new(name, vendor, "550", "gpu");
    let planner = Planner::load(&models_dir(), Some(&gpu));
    let (app, _) = app_with_planner(config(&[]), DeviceState::none("test"), planner).await;
    let a = random_matrix(50, 50, 23);
    let v = send(&app, post("/predict", "text/plain", mm_text(&a)))
        .await
        .json();
    v["model"].clone()
}

#[tokio::test]
async fn gpus_get_the_shipped_h100_model_by_how_close_they_are() {
    // The H100 the campaign trained on: its own model.
    let m = model_for("NVIDIA H100 80GB HBM3", "NVIDIA Corporation").await;
    assert_eq!(
        (m["kind"].as_str(), m["match"].as_str()),
        (Some("model"), Some("exact")),
        "{m}"
    );
    assert_eq!(m["file"], "nvidia-h100-80gb-hbm3-f64.json", "{m}");
    assert_eq!(m["fallback"], false);
    // Another Hopper: the same architecture class.
    let m = model_for("NVIDIA H200", "NVIDIA Corporation").await;
    assert_eq!(m["match"], "same_class", "{m}");
    assert_eq!(m["file"], "nvidia-h100-80gb-hbm3-f64.json", "{m}");
    // Any other GPU: the GPU model is closer than the CPU ones, and says so.
    let m = model_for("gfx90a:sramecc+:xnack-", "Advanced Micro Devices, Inc.").await;
    assert_eq!(m["match"], "same_type", "{m}");
    assert_eq!(m["file"], "nvidia-h100-80gb-hbm3-f64.json", "{m}");
    assert!(!m["match_reason"].as_str().unwrap().is_empty(), "{m}");
}

/// A temporary models folder with a shipped model under two names, one of them
/// with a recorded kernel file (serial.cl) that differs from the one this build runs.
fn folder_with_a_refused_model() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let shipped = std::fs::read_dir(models_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            name.starts_with("pthread-") && name.ends_with("-f64.json")
        })
        .expect("a shipped PoCL f64 model (trained before merge_tile.cl existed)");
    let text = std::fs::read_to_string(&shipped).unwrap();
    std::fs::write(dir.join("good-f64.json"), &text).unwrap();
    let mut v: Value = serde_json::from_str(&text).unwrap();
    v["card"]["kernel_sources"]["hash"] = json!("0".repeat(64));
    v["card"]["kernel_sources"]["files"]["serial.cl"] = json!("0".repeat(64));
    v["card"]["created"] = json!("2099-01-01");
    std::fs::write(dir.join("stale-f64.json"), v.to_string()).unwrap();
    std::fs::write(dir.join("broken.json"), "{").unwrap();
    tmp
}

#[tokio::test]
async fn models_shows_refusals_and_no_absolute_paths() {
    let tmp = folder_with_a_refused_model();
    let dir = tmp.path();
    let own = selector::DeviceIdentity::new(
        "pthread-skylake-avx512-AMD EPYC",
        "AuthenticAMD",
        "3.1+debian",
        "cpu",
    );
    let planner = Planner::load(dir, Some(&own));
    let (app, _) = app_with_planner(config(&[]), DeviceState::none("test"), planner).await;
    let r = send(&app, get("/models")).await;
    let text = String::from_utf8(r.body.to_vec()).unwrap();
    let root = dir.parent().unwrap().to_string_lossy().to_string();
    assert!(!text.contains(&root), "an absolute path in /models: {text}");
    let v = r.json();
    let files = v["files"].as_array().unwrap();
    let by_name = |n: &str| {
        files
            .iter()
            .find(|f| f["file"] == n)
            .unwrap_or_else(|| panic!("no {n} in {v}"))
    };
    // A listed file's refusal and the reason it gives.
    let refused = |f: &Value, says: &str| {
        let reason = f["match_reason"].as_str().unwrap();
        assert!(reason.contains(says), "{f}");
        f["refused"].as_bool().unwrap()
    };
    let stale = by_name("stale-f64.json");
    assert!(refused(stale, "serial.cl"), "{stale}");
    assert_eq!(stale["in_use"], false, "{stale}");
    let good = by_name("good-f64.json");
    assert_eq!(
        (good["in_use"].as_bool(), good["match"].as_str()),
        (Some(true), Some("exact")),
        "{good}"
    );
    // Trained before kernels/merge_tile.cl (and the later files) existed:
    // usable, and it says so.
    assert!(!refused(good, "trained before"), "{good}");
    assert!(!refused(good, "merge_tile.cl"), "{good}");
    assert!(by_name("broken.json")["error"].is_string());
    // The newer but refused model is not used: the older exact one is.
    assert_eq!(v["in_use"]["f64"]["file"], "good-f64.json");
    assert_eq!(v["in_use"]["f64"]["match"], "exact");
    // No f32 model in this folder: the rule, and the reason says so.
    assert_eq!(v["in_use"]["f32"]["match"], "none");
    assert!(
        v["in_use"]["f32"]["reason"]
            .as_str()
            .unwrap()
            .contains("none of the 2 models loaded is for f32"),
        "{v}"
    );
}
