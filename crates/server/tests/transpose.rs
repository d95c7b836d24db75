//! `/spmv?transpose=true`: y = Aᵀ x for an uploaded matrix, by JSON and by
//! binary x, equal to the reference on a rectangular matrix in both
//! precisions; the transpose is built once (the second call has no set-up);
//! deleting A forgets it; an inline matrix with transpose=true is a 422.
//! `POST /matrices/{id}/spmm` on the same matrix, k vectors of A and of Aᵀ.

use crate::common;
use common::*;
use serde_json::json;

fn transposed_ref(a: &sparse::Csr<f64>, x: &[f64]) -> Vec<f64> {
    sparse::spmv::spmv_ref(&a.transpose(), x).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transposed_products_equal_the_reference() {
    let Some((app, _state)) = device_app("transposed_products", &[]).await else {
        return;
    };
    // Rectangular: 300 x 170.
    let a = random_problem(300, 170, 61).0;
    let id = upload(&app, &a).await;
    let x: Vec<f64> = (0..a.nrows()).map(|i| (i % 9) as f64 - 4.0).collect();
    let want = transposed_ref(&a, &x);
    let at = a.transpose();
    for precision in ["f64", "f32"] {
        let body = json!({"matrix_id": id, "x": x, "precision": precision}).to_string();
        let uri = "/spmv?transpose=true&verify=true";
        let first = send(&app, post(uri, "application/json", body.clone())).await;
        assert_eq!(
            first.status,
            200,
            "{}",
            String::from_utf8_lossy(&first.body)
        );
        let v = first.json();
        assert_eq!(v["verify"]["ok"], true, "{v}");
        let y = y_of(&v);
        assert_eq!(y.len(), a.ncols());
        if precision == "f64" {
            check_y::<f64>(&at, &x, &y);
        } else {
            check_y::<f32>(&at, &x, &y);
        }
        // Built once: the second call has no set-up.
        let again = send(&app, post(uri, "application/json", body)).await.json();
        assert!(again["timings_ms"]["setup"].is_null(), "{again}");
    }
    // Binary x by matrix_id.
    let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let r = send(
        &app,
        post(
            &format!("/spmv?matrix_id={id}&transpose=true"),
            "application/octet-stream",
            bytes,
        ),
    )
    .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let y = y_of(&r.json());
    for (g, w) in y.iter().zip(&want) {
        assert!((g - w).abs() <= 1e-9 * (1.0 + w.abs()), "{g} vs {w}");
    }
    // x must have one entry per row of A.
    let short = json!({"matrix_id": id, "x": vec![1.0; a.ncols()]}).to_string();
    let r = send(
        &app,
        post("/spmv?transpose=true", "application/json", short),
    )
    .await;
    assert_eq!(r.status, 422);
    // Inline matrices are refused with transpose=true.
    let inline = json!({"matrix": mm_text(&a), "x": x}).to_string();
    let r = send(
        &app,
        post("/spmv?transpose=true", "application/json", inline),
    )
    .await;
    assert_eq!(r.status, 422, "{}", String::from_utf8_lossy(&r.body));
    assert!(r.error().1.contains("uploaded"), "{:?}", r.error());
    spmm_equals_one_product_per_vector(&app, &a, &id).await;
    // Deleting A forgets its transpose too.
    let del = axum::http::Request::builder()
        .method("DELETE")
        .uri(format!("/matrices/{id}"))
        .body(axum::body::Body::empty())
        .unwrap();
    assert_eq!(send(&app, del).await.status, 204);
    let body = json!({"matrix_id": id, "x": x}).to_string();
    let r = send(&app, post("/spmv?transpose=true", "application/json", body)).await;
    assert_eq!(r.status, 404);
}

/// `POST /matrices/{id}/spmm`: k vectors in one request equal k products,
/// of A and of Aᵀ, in both precisions; bad vectors are 422.
async fn spmm_equals_one_product_per_vector(app: &axum::Router, a: &sparse::Csr<f64>, id: &str) {
    let uri = format!("/matrices/{id}/spmm");
    for (transpose, n, m) in [(false, a.ncols(), a), (true, a.nrows(), &a.transpose())] {
        for (precision, k) in [("f64", 1usize), ("f64", 16), ("f32", 70)] {
            let x: Vec<Vec<f64>> = (0..k)
                .map(|j| (0..n).map(|i| ((i * 3 + j) % 7) as f64 - 3.0).collect())
                .collect();
            let body = json!({"x": x, "precision": precision, "transpose": transpose});
            let r = send(app, post(&uri, "application/json", body.to_string())).await;
            assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
            let v = r.json();
            let ys = v["y"].as_array().unwrap();
            assert_eq!(ys.len(), k);
            for (xj, yj) in x.iter().zip(ys) {
                let y: Vec<f64> = yj
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|e| e.as_f64().unwrap())
                    .collect();
                if precision == "f64" {
                    check_y::<f64>(m, xj, &y);
                } else {
                    check_y::<f32>(m, xj, &y);
                }
            }
        }
    }
    for (body, says) in [
        (json!({"x": []}), "0 vectors"),
        (json!({"x": [vec![1.0; 3]]}), "has 3 entries"),
    ] {
        let r = send(app, post(&uri, "application/json", body.to_string())).await;
        assert_eq!(r.status, 422, "{body}");
        assert!(r.error().1.contains(says), "{:?}", r.error());
    }
}
