//! `POST /matrices/{id}/solve`: conjugate gradients on the device through
//! HTTP. The answer solves the system (checked on the host), with and without
//! Jacobi and in both precisions; bad requests are 4xx that say what is wrong,
//! and a breakdown is a 422 naming the iteration.

use crate::common;
use common::*;
use serde_json::json;
use sparse::Csr;

fn residual(a: &Csr<f64>, x: &[f64], b: &[f64]) -> f64 {
    let ax = sparse::spmv::spmv_ref(a, x).unwrap();
    let num: f64 = ax.iter().zip(b).map(|(p, q)| (q - p).powi(2)).sum();
    let den: f64 = b.iter().map(|q| q * q).sum();
    (num / den).sqrt()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cg_solves_a_laplacian_through_http() {
    let Some((app, _state)) = device_app("cg_solves_a_laplacian", &[]).await else {
        return;
    };
    let a = sparse::gen::stencil_2d(30, 25).unwrap();
    let n = a.nrows();
    let b: Vec<f64> = (0..n).map(|i| 1.0 + (i % 5) as f64).collect();
    let id = upload(&app, &a).await;
    let uri = format!("/matrices/{id}/solve");
    for (pre, precision, tol) in [
        ("none", "f64", 1e-10),
        ("jacobi", "f64", 1e-10),
        ("none", "f32", 1e-4),
    ] {
        let body = json!({"method": "cg", "b": b, "tol": tol, "preconditioner": pre, "precision": precision});
        let r = send(&app, post(&uri, "application/json", body.to_string())).await;
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        let v = r.json();
        assert_eq!(v["stop"], "converged", "{v}");
        assert_eq!(v["converged"], true);
        assert_eq!(v["preconditioner"], pre);
        let iters = v["iterations"].as_u64().unwrap() as usize;
        assert_eq!(v["residuals"].as_array().unwrap().len(), iters + 1);
        let x: Vec<f64> = v["x"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e.as_f64().unwrap())
            .collect();
        let res = residual(&a, &x, &b);
        assert!(res <= tol * 20.0, "{pre} {precision}: residual {res}");
    }
    // maxiter stops it with what it has.
    let body = json!({"b": b, "tol": 1e-30, "maxiter": 2});
    let v = send(&app, post(&uri, "application/json", body.to_string()))
        .await
        .json();
    assert_eq!(
        (v["stop"].as_str(), v["iterations"].as_u64()),
        (Some("maxiter"), Some(2))
    );
    let text = String::from_utf8(send(&app, get("/metrics")).await.body.to_vec()).unwrap();
    assert!(
        text.contains("spmv_solves_total{stop=\"converged\"} 3"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_solves_are_4xx_that_say_what_is_wrong() {
    let Some((app, _state)) = device_app("bad_solves", &[]).await else {
        return;
    };
    // diag(1, -1, 2): CG breaks down at once for b = (0, 1, 0).
    let d = Csr::try_new(3, 3, vec![0, 1, 2, 3], vec![0, 1, 2], vec![1.0, -1.0, 2.0]).unwrap();
    let id = upload(&app, &d).await;
    let uri = format!("/matrices/{id}/solve");
    let cases = [
        (json!({"b": [0.0, 1.0, 0.0]}), 422, "iteration 1"),
        (json!({"b": [1.0, 1.0]}), 422, "has 2 entries"),
        (
            json!({"b": [1.0, 1.0, 1.0], "x0": [0.0]}),
            422,
            "x0 has 1 entries",
        ),
        (
            json!({"b": [1.0, 1.0, 1.0], "method": "lu"}),
            422,
            "unknown method",
        ),
        (
            json!({"b": [1.0, 1.0, 1.0], "preconditioner": "ilu"}),
            422,
            "unknown preconditioner",
        ),
        (json!({"b": [1.0, 1.0, 1.0], "tol": 0.0}), 422, "tol"),
        (
            json!({"b": [1.0, 1.0, 1.0], "maxiter": 10_000_000}),
            422,
            "maxiter",
        ),
        (
            json!({"b": [1.0, 1.0, 1.0], "extra": 1}),
            400,
            "unknown field",
        ),
        (json!({"x0": [1.0]}), 400, "missing field"),
    ];
    for (body, status, says) in cases {
        let r = send(&app, post(&uri, "application/json", body.to_string())).await;
        assert_eq!(
            r.status,
            status,
            "{body}: {}",
            String::from_utf8_lossy(&r.body)
        );
        let (_, msg) = r.error();
        assert!(msg.contains(says), "{body}: {msg}");
    }
    // Not square.
    let rect = Csr::try_new(1, 2, vec![0, 1], vec![1], vec![1.0]).unwrap();
    let rid = upload(&app, &rect).await;
    let r = send(
        &app,
        post(
            &format!("/matrices/{rid}/solve"),
            "application/json",
            json!({"b": [1.0]}).to_string(),
        ),
    )
    .await;
    assert_eq!(r.status, 422);
    assert!(r.error().1.contains("square"), "{:?}", r.error());
    // A zero diagonal refuses Jacobi.
    let z = Csr::try_new(2, 2, vec![0, 1, 2], vec![1, 0], vec![1.0, 1.0]).unwrap();
    let zid = upload(&app, &z).await;
    let body = json!({"b": [1.0, 1.0], "preconditioner": "jacobi"}).to_string();
    let r = send(
        &app,
        post(&format!("/matrices/{zid}/solve"), "application/json", body),
    )
    .await;
    assert_eq!(r.status, 422);
    assert!(r.error().1.contains("diagonal"), "{:?}", r.error());
    // Unknown matrix.
    let r = send(
        &app,
        post(
            "/matrices/nosuch/solve",
            "application/json",
            json!({"b": [1.0]}).to_string(),
        ),
    )
    .await;
    assert_eq!(r.status, 404);
}
