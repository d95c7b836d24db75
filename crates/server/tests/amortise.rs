//! Amortisation-aware planning through the service: `expected_calls` is
//! validated on every route that takes it, the `planning` field says which
//! candidate was chosen and why, one call skips the feature pass and the
//! binning that many calls pay for (a `quick` plan, y still right), and no
//! request builds a kernel program (they are built at start).

use crate::common;

use common::*;
use serde_json::{json, Value};
use server::{DeviceState, Planner};
use sparse::{Csr, Scheme};

/// Blocks of 10 rows alternating between 1 and 12 nonzeros a row: under
/// U = 10 two bins, which the test model gives two different kernels (serial
/// and vector); over the single bin (mean 6.5) stage 2 picks serial. Short
/// rows keep the bandwidth bound of one SpMV small beside the cost of the
/// row lists, so binning never pays for one call on any plausible device.
fn blocks(rows: usize) -> Csr<f64> {
    let (mut rp, mut ci) = (vec![0u32], Vec::new());
    for r in 0..rows {
        let len = if (r / 10) % 2 == 0 { 1 } else { 12 };
        ci.extend((0..len).map(|j| ((r * 7 + j * 13) % 64) as u32));
        ci[rp[r] as usize..].sort_unstable();
        rp.push(ci.len() as u32);
    }
    let n = ci.len();
    let vals: Vec<f64> = (0..n).map(|i| 1.0 + (i % 5) as f64).collect();
    Csr::try_new(rows, 64, rp, ci, vals).unwrap()
}

/// A model for `device` in both precisions: stage 1 always U = 10, stage 2
/// serial below a mean row length of 8 and vector above, no performance
/// part (the service then weighs by the bandwidth bound). Made from a shipped
/// model file, so that its card carries this build's layouts.
fn test_models(device: &selector::DeviceIdentity) -> Vec<selector::Model> {
    let template = selector::load_models_dir(models_dir())
        .unwrap()
        .into_iter()
        .find_map(|(_, m)| m.ok())
        .expect("a shipped model loads");
    let mut v: Value = serde_json::from_str(&template.to_json_string()).unwrap();
    v["card"]["schemes"] = json!([10]);
    v["card"]["kernels"] = json!(["serial", "vector"]);
    v["stage1"] = json!({"nodes": [{"kind": "leaf", "class": 0}]});
    v["stage2"] = json!({"nodes": [
        {"kind": "split", "feature": selector::STAGE1_FEATURES.len() + 2,
         "cut": selector::vector::spread(8.0), "threshold": 8.0, "left": 1, "right": 2},
        {"kind": "leaf", "class": 0},
        {"kind": "leaf", "class": 1}
    ]});
    v.as_object_mut().unwrap().remove("perf");
    // No quick part: a quick plan takes the label counts' most frequent kernel.
    v.as_object_mut().unwrap().remove("quick");
    v["card"]["metrics"] =
        json!({"labels": {"stage2": {"label_counts": {"serial": 5, "vector": 1}}}});
    ["f32", "f64"]
        .iter()
        .map(|p| {
            let mut m = selector::Model::from_json_str(&v.to_string()).unwrap();
            m.card.precision = p.to_string();
            m.card
                .record_training(device, server::planner::kernel_sources());
            m
        })
        .collect()
}

fn identity() -> selector::DeviceIdentity {
    selector::DeviceIdentity::new("test-device", "TestVendor", "1.0", "cpu")
}

async fn app_without_device() -> axum::Router {
    let planner = Planner::from_models(test_models(&identity()), &identity());
    app_with_planner(config(&[]), DeviceState::none("test"), planner)
        .await
        .0
}

fn assert_calls_refused(r: &Resp, what: &str) {
    let msg = r.error_of(400, "bad_request");
    assert!(
        msg.contains("expected_calls") && msg.contains(">= 1"),
        "{what}: {msg}"
    );
}

#[tokio::test]
async fn expected_calls_must_be_an_integer_of_at_least_one() {
    let app = app_without_device().await;
    let a = random_matrix(30, 30, 3);
    for bad in [json!(0), json!(-1), json!("abc"), json!(2.5), json!(null)] {
        let mut body = csr_json(&a);
        body["x"] = json!(vec![1.0; 30]);
        body["expected_calls"] = bad.clone();
        let r = send(&app, post("/spmv", "application/json", body.to_string())).await;
        if bad.is_null() {
            // null is "not given": the request goes on (and meets no device).
            assert_eq!(r.status, 503, "{}", String::from_utf8_lossy(&r.body));
            continue;
        }
        assert_calls_refused(&r, &format!("JSON {bad}"));
    }
    for bad in ["0", "-1", "abc", "", "1e3"] {
        for route in ["/predict", "/matrices"] {
            let uri = format!("{route}?expected_calls={bad}");
            let r = send(&app, post(&uri, "text/plain", mm_text(&a))).await;
            assert_calls_refused(&r, &uri);
        }
        let uri = format!("/spmv?expected_calls={bad}");
        let mut body = csr_json(&a);
        body["x"] = json!(vec![1.0; 30]);
        let r = send(&app, post(&uri, "application/json", body.to_string())).await;
        assert_calls_refused(&r, &uri);
    }
    // A multipart part is held to the same rule.
    let boundary = "XbOuNdArY";
    let form = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"matrix\"\r\n\r\n{}\r\n\
         --{boundary}\r\nContent-Disposition: form-data; name=\"x\"\r\n\r\n{}\r\n\
         --{boundary}\r\nContent-Disposition: form-data; name=\"expected_calls\"\r\n\r\nabc\r\n\
         --{boundary}--\r\n",
        mm_text(&a),
        json!(vec![1.0; 30])
    );
    let ct = format!("multipart/form-data; boundary={boundary}");
    let r = send(&app, post("/spmv", &ct, form)).await;
    assert_calls_refused(&r, "multipart part");
    // Query and body must agree when both are given.
    let mut body = csr_json(&a);
    body["x"] = json!(vec![1.0; 30]);
    body["expected_calls"] = json!(3);
    let r = send(
        &app,
        post(
            "/spmv?expected_calls=4",
            "application/json",
            body.to_string(),
        ),
    )
    .await;
    assert_eq!(r.status, 400);
}

async fn predict_for(app: &axum::Router, a: &Csr<f64>, calls: Option<u64>) -> Value {
    let uri = match calls {
        Some(n) => format!("/predict?expected_calls={n}"),
        None => "/predict".into(),
    };
    let r = send(app, post(&uri, "text/plain", mm_text(a))).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    r.json()
}

#[tokio::test]
async fn predict_reports_the_planning_and_one_call_gets_the_single_bin_plan() {
    let app = app_without_device().await;
    let a = blocks(2000);
    // No performance model and no device bandwidth: a threshold of calls.
    let one = predict_for(&app, &a, Some(1)).await;
    let pl = &one["planning"];
    assert_eq!(pl["expected_calls"], 1, "{pl}");
    assert_eq!(pl["method"], "calls_threshold", "{pl}");
    assert_eq!(pl["stage1_scheme"], "10", "{pl}");
    assert_eq!(pl["chosen"], "single:serial", "{pl}");
    assert_eq!(one["plan"]["scheme"], "single", "{one}");
    let binned = &pl["candidates"][0];
    assert_eq!(binned["name"], "model", "{pl}");
    assert_eq!(binned["analysed"], false, "binned for one call: {pl}");
    assert!(binned["analysis_ms"].as_f64().unwrap() > 0.0, "{pl}");
    // The default for /predict is an upload's (1000 calls): the binned plan.
    let many = predict_for(&app, &a, None).await;
    let pl = &many["planning"];
    assert_eq!(pl["expected_calls"], 1000, "{pl}");
    assert_eq!(pl["chosen"], "model", "{pl}");
    assert_eq!(many["plan"]["scheme"], "10", "{many}");
    let kernels: Vec<&str> = many["plan"]["bins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["kernel"].as_str().unwrap())
        .collect();
    assert!(
        kernels.contains(&"serial") && kernels.contains(&"vector"),
        "{many}"
    );
    assert_eq!(pl["candidates"][0]["analysed"], true, "{pl}");
}

/// An app on a device opened for this test alone, planning with the test
/// model for that device, and the engine (to read its build counters).
async fn app_on_fresh_device() -> Option<(axum::Router, std::sync::Arc<engine::Engine>)> {
    if !have_device("amortise_fresh_device") {
        return None;
    }
    let dev = DeviceState::open(None);
    let engine = dev
        .engine
        .clone()
        .expect("the device opened once opens again");
    let id = dev.identity().unwrap();
    let planner = Planner::from_models(test_models(&id), &id);
    let (app, _) = app_with_planner(config(&[]), dev, planner).await;
    Some((app, engine))
}

async fn spmv_inline(
    app: &axum::Router,
    a: &Csr<f64>,
    x: &[f64],
    p: &str,
    calls: Option<u64>,
) -> Value {
    let mut body = csr_json(a);
    body["x"] = json!(x);
    body["precision"] = json!(p);
    if let Some(n) = calls {
        body["expected_calls"] = json!(n);
    }
    let r = send(app, post("/spmv", "application/json", body.to_string())).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    r.json()
}

#[tokio::test]
async fn inline_spmv_plans_for_its_calls_and_never_builds_a_program() {
    let Some((app, engine)) = app_on_fresh_device().await else {
        return;
    };
    // Programs were built (or loaded) when the device opened, before any request.
    let at_start = engine.program_stats();
    let programs = 1 + usize::from(engine.info().fp64);
    assert!(
        at_start.source_builds + at_start.cache_loads >= programs,
        "{at_start:?}"
    );
    let a = blocks(2000);
    let x = random_x(a.ncols(), 5);
    let precisions: &[&str] = if engine.info().fp64 {
        &["f64", "f32"]
    } else {
        &["f32"]
    };
    // A matrix so small that its feature pass (the calibrated fixed part
    // alone) outweighs what any plan could save on one call.
    let small = blocks(40);
    let xs = random_x(small.ncols(), 6);
    for &p in precisions {
        // One call: the feature pass cannot pay; a quick plan without it.
        let one = spmv_inline(&app, &small, &xs, p, None).await;
        let pl = &one["planning"];
        assert_eq!(pl["expected_calls"], 1, "{pl}");
        assert_eq!(pl["method"], "quick", "{pl}");
        assert_eq!(pl["features_computed"], false, "{pl}");
        assert!(pl["features_estimate_ms"].as_f64().unwrap() > 0.0, "{pl}");
        assert_eq!(pl["chosen"], "single:serial", "{pl}");
        assert_eq!(one["plan"]["scheme"], "single", "{one}");
        assert_eq!(one["launches"], 1, "{one}");
        check_with(p, &small, &xs, &one);
        let small_pay = pl["break_even_calls"].as_u64().unwrap();
        assert!(small_pay > 1, "features pay at once on this device? {pl}");
        // The larger matrix's feature pass may pay at once (it is cheap
        // against its SpMV): its one-call planning says from when.
        let first = spmv_inline(&app, &a, &x, p, None).await;
        check_with(p, &a, &x, &first);
        let pl = &first["planning"];
        let features_pay = if pl["method"] == "quick" {
            pl["break_even_calls"].as_u64().unwrap()
        } else {
            assert_eq!(pl["features_computed"], true, "{pl}");
            1
        };
        // From then on the features are computed and binning is weighed.
        let one = spmv_inline(&app, &a, &x, p, Some(features_pay)).await;
        let pl = &one["planning"];
        assert_eq!(pl["features_computed"], true, "{pl}");
        assert_eq!(pl["method"], "bandwidth_bound", "{pl}");
        check_with(p, &a, &x, &one);
        // The device's per-launch cost was measured when it opened.
        let launch = pl["costs"]["launch_ms"].as_f64().unwrap();
        assert!(launch > 0.0 && launch < 1000.0, "{pl}");
        assert!(
            pl["costs"]["source"]
                .as_str()
                .unwrap()
                .contains("measured on the device"),
            "{pl}"
        );
        let be = pl["break_even_calls"].as_u64().unwrap();
        assert!(be > 1, "binning pays at once on this device? {pl}");
        if be > features_pay {
            assert_eq!(pl["chosen"], "single:serial", "{pl}");
            assert_eq!(one["plan"]["scheme"], "single", "{one}");
            assert_eq!(pl["candidates"][0]["analysed"], false, "{pl}");
            assert_eq!(one["launches"], 1, "{one}");
        }
        let many = spmv_inline(&app, &a, &x, p, Some(be.max(features_pay))).await;
        let pl = &many["planning"];
        assert_eq!(pl["expected_calls"], be.max(features_pay), "{pl}");
        assert_eq!(pl["chosen"], "model", "{pl}");
        assert_eq!(many["plan"]["scheme"], Scheme::Granularity(10).to_string());
        assert_eq!(many["launches"], 2, "{many}");
        check_with(p, &a, &x, &many);
    }
    assert_eq!(
        engine.program_stats(),
        at_start,
        "a request built or loaded a kernel program"
    );
}

fn check_with(p: &str, a: &Csr<f64>, x: &[f64], v: &Value) {
    match p {
        "f32" => check_y::<f32>(a, x, &y_of(v)),
        _ => check_y::<f64>(a, x, &y_of(v)),
    }
}

#[tokio::test]
async fn an_upload_plans_for_many_calls_unless_told() {
    let Some((app, _)) = app_on_fresh_device().await else {
        return;
    };
    let a = blocks(2000);
    for (q, calls) in [("", 1000u64), ("&expected_calls=1", 1)] {
        let uri = format!("/matrices?precision=f32{q}");
        let r = send(&app, post(&uri, "text/plain", mm_text(&a))).await;
        assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
        let v = r.json();
        assert_eq!(v["planning"]["expected_calls"], calls, "{v}");
        let id = v["id"].as_str().unwrap().to_string();
        let r = send(&app, get(&format!("/matrices/{id}"))).await;
        assert_eq!(r.json()["uploaded"][0]["planning"]["expected_calls"], calls);
        let r = send(
            &app,
            axum::http::Request::delete(format!("/matrices/{id}"))
                .body(axum::body::Body::empty())
                .unwrap(),
        )
        .await;
        assert_eq!(r.status, 204);
    }
}
