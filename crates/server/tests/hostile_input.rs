//! Hostile input: bodies built to make the service allocate far more than they
//! weigh (gzip bombs, gzip inside gzip, headers declaring huge sizes in a few
//! bytes, whitespace meant to slip past a pre-check, oversized JSON, many large
//! requests at once) and results JSON cannot carry. Each is answered with a
//! precise status and message before anything large is allocated.

use crate::common;

use axum::body::Body;
use axum::http::Request;
use common::*;
use serde_json::json;

fn gz(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap()
}

/// The 100-byte body of the report: 50 million rows, one entry.
const TINY_HUGE: &str = "%%MatrixMarket matrix coordinate real general\n50000000 1 1\n1 1 1.0\n";

/// The answer a hostile request must get: the status, the error code and a
/// piece of the message.
type Refusal<'a> = (u16, &'a str, &'a str);

/// The refusal of a body, or of what it declares, over a limit.
fn too_large(msg: &str) -> Refusal<'_> {
    (413, "too_large", msg)
}

/// Sends each request (named for the failure message) and checks its refusal.
async fn refuses(app: &axum::Router, cases: Vec<(&str, Request<Body>, Refusal<'_>)>) {
    for (name, req, (status, code, msg)) in cases {
        let r = send(app, req).await;
        let body = String::from_utf8_lossy(&r.body).to_string();
        assert_eq!(r.status.as_u16(), status, "{name}: {body}");
        let (c, m) = r.error();
        assert_eq!(c, code, "{name}: {body}");
        assert!(m.contains(msg), "{name}: message {m:?} lacks {msg:?}");
    }
}

fn multipart(parts: &[(&str, &[u8])]) -> Request<Body> {
    let mut body = Vec::new();
    for (name, data) in parts {
        body.extend_from_slice(
            format!("--B\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n").as_bytes(),
        );
        body.extend_from_slice(data);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(b"--B--\r\n");
    post("/spmv", "multipart/form-data; boundary=B", body)
}

#[tokio::test]
async fn gzip_is_decoded_once_and_capped() {
    let (app, _) = test_app(&["--no-device", "--max-decompressed-bytes", "1000000"]).await;
    let ok = "%%MatrixMarket matrix coordinate real general\n2 2 2\n1 1 1\n2 2 2\n";
    let r = send(&app, post("/predict", "text/plain", gz(ok.as_bytes()))).await;
    assert_eq!(r.status, 200, "one layer of gzip is fine");
    // 2.5 KB of gzip inside gzip that would expand to 2 GiB if decoded twice.
    let inner = gz(&vec![b' '; 64 << 20]);
    let nested = gz(&inner);
    assert!(nested.len() < 8 << 10, "{}", nested.len());
    let nested_gzip = (415, "nested_gzip", "only one layer of gzip");
    let encoded = Request::post("/matrices")
        .header("content-type", "text/plain")
        .header("content-encoding", "gzip")
        .body(Body::from(nested.clone()))
        .unwrap();
    let cases = vec![
        (
            "nested gzip",
            post("/predict", "text/plain", nested.clone()),
            nested_gzip,
        ),
        ("nested gzip with Content-Encoding", encoded, nested_gzip),
        (
            "nested gzip as a multipart part",
            multipart(&[("matrix", &nested), ("x", b"[1]")]),
            nested_gzip,
        ),
        // One layer past the cap: 413, having decoded at most the cap.
        (
            "gzip bomb",
            post("/predict", "text/plain", inner),
            too_large("decompressed body bytes is 1000001, over the limit of 1000000"),
        ),
    ];
    refuses(&app, cases).await;
}

#[tokio::test]
async fn whitespace_in_the_header_does_not_slip_past_the_limits() {
    let (app, _) = test_app(&["--no-device", "--max-rows", "1000", "--max-nnz", "5000"]).await;
    let cases = [
        (
            "tabs in the banner and size line",
            "%%MatrixMarket\tmatrix\tcoordinate\treal\tgeneral\n2000\t3\t1\n1 1 1\n",
            "rows = 2000 is over the limit of 1000",
        ),
        (
            "several spaces",
            "%%MatrixMarket   matrix  coordinate    real general\n3    3      900000\n1 1 1\n",
            "nnz = 900000 is over the limit of 5000",
        ),
        (
            "CRLF line ends",
            "%%MatrixMarket matrix coordinate real general\r\n% comment\r\n1001 3 1\r\n1 1 1\r\n",
            "rows = 1001 is over the limit of 1000",
        ),
        (
            "array with tabs",
            "%%MatrixMarket matrix\tarray real general\r\n100\t\t100\r\n1\r\n",
            "nnz = 10000 is over the limit of 5000",
        ),
        (
            "mixed tabs, spaces and CRLF",
            "%%MatrixMarket matrix coordinate real general\r\n\t10 \t 10\t\t900000\t\r\n1 1 1\r\n",
            "nnz = 900000 is over the limit of 5000",
        ),
    ];
    for (name, text, msg) in cases {
        let each_route = ["/predict", "/matrices"].map(|route| {
            let req = post(route, "text/plain", text);
            (name, req, too_large(msg))
        });
        refuses(&app, each_route.into()).await;
    }
}

#[tokio::test]
async fn a_tiny_body_cannot_declare_fifty_million_rows() {
    // Default limits: 50 million rows is within --max-rows, so only the rule
    // relating declared sizes to the body's bytes refuses it.
    let (app, _) = test_app(&["--no-device"]).await;
    assert!(TINY_HUGE.len() <= 100, "{}", TINY_HUGE.len());
    let msg = "rows + cols = 50000001 is more than a 67-byte text may declare";
    // The same refusal on every route that reads a matrix.
    let mut cases: Vec<_> = [
        ("/predict", post("/predict", "text/plain", TINY_HUGE)),
        ("/matrices", post("/matrices", "text/plain", TINY_HUGE)),
        (
            "inline /spmv (JSON)",
            post_json("/spmv", json!({"matrix": TINY_HUGE, "x": [1.0]})),
        ),
        (
            "inline /spmv (multipart)",
            multipart(&[("matrix", TINY_HUGE.as_bytes()), ("x", b"[1.0]")]),
        ),
    ]
    .into_iter()
    .map(|(name, req)| (name, req, too_large(msg)))
    .collect();
    // Huge entry counts in a few bytes.
    let many = "%%MatrixMarket matrix coordinate real general\n10 10 40000000\n1 1 1.0\n";
    let refusal = too_large("40000000 entries are declared");
    cases.push((
        "40M entries in 70 bytes",
        post("/predict", "text/plain", many),
        refusal,
    ));
    refuses(&app, cases).await;
}

#[tokio::test]
async fn oversized_json_and_multipart_parts_are_refused() {
    let (app, _) = test_app(&["--no-device", "--max-body-bytes", "100000"]).await;
    let big = json!({"nrows": 1, "ncols": 1, "row_ptr": [0, 1], "col_idx": [0], "values": vec![1.0; 30000]});
    let cases = vec![
        (
            "JSON over the body limit",
            post("/predict", "application/json", big.to_string()),
            too_large("request body bytes"),
        ),
        (
            "multipart over the body limit",
            multipart(&[("matrix", &vec![b'%'; 200_000]), ("x", b"[1]")]),
            too_large("request body bytes is 100001, over the limit of 100000"),
        ),
        (
            "oversized small part",
            multipart(&[("precision", &vec![b'f'; 1000])]),
            too_large("multipart part 'precision' bytes"),
        ),
        (
            "unknown part, refused by name",
            multipart(&[("evil", &vec![b'x'; 50_000])]),
            (400, "bad_request", "unknown multipart part 'evil'"),
        ),
    ];
    refuses(&app, cases).await;
}

#[tokio::test]
async fn the_memory_budget_refuses_or_queues_large_requests() {
    let (app, state) = test_app(&[
        "--no-device",
        "--memory-budget-bytes",
        "4000000",
        "--memory-wait-ms",
        "200",
        "--retry-after",
        "3",
    ])
    .await;
    // More than the whole budget: 413 at once (JSON parse estimate is 8x the body).
    let a = random_matrix(2000, 2000, 7);
    let body = csr_json(&a).to_string();
    assert!(body.len() > 500_000, "{}", body.len());
    let over = post("/predict", "application/json", body);
    let refusal = too_large("estimated memory of the request");
    refuses(&app, vec![("over the whole budget", over, refusal)]).await;
    // While other requests hold the whole budget: 503 with Retry-After,
    // and the same request succeeds once it is released.
    let small = "%%MatrixMarket matrix coordinate real general\n2 2 2\n1 1 1\n2 2 2\n";
    let hold = state
        .budget()
        .reserve(state.budget().total())
        .await
        .unwrap();
    let r = send(&app, post("/predict", "text/plain", small)).await;
    assert_eq!(r.status, 503, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.headers["retry-after"], "3");
    assert_eq!(r.error().0, "busy");
    drop(hold);
    let r = send(&app, post("/predict", "text/plain", small)).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        state.budget().in_use(),
        0,
        "every reservation is given back"
    );
}

#[tokio::test]
async fn results_json_cannot_carry_are_422_naming_the_row() {
    let test = "results_json_cannot_carry_are_422_naming_the_row";
    let Some((app, _)) = device_app(test, &[]).await else {
        return;
    };
    // Row 0 is fine, row 1 overflows to inf, row 2 is inf - inf = NaN.
    let csr = json!({"nrows": 3, "ncols": 2, "row_ptr": [0, 1, 2, 4], "col_idx": [0, 0, 0, 1],
                     "values": [1.0, 1e300, 1e308, -1e308]});
    let mut body = csr.clone();
    body["x"] = json!([1e10, 10.0]);
    let mut nan = json!({"nrows": 1, "ncols": 2, "row_ptr": [0, 2], "col_idx": [0, 1], "values": [1e308, -1e308]});
    nan["x"] = json!([10.0, 10.0]);
    let cases = vec![
        (
            "overflow",
            post("/spmv", "application/json", body.to_string()),
            (422, "non_finite_result", "y[1] = inf"),
        ),
        // inf - inf is NaN when a kernel adds partial sums, inf when it folds the
        // products with fused multiply-adds: either way row 0 is not finite.
        (
            "NaN",
            post("/spmv", "application/json", nan.to_string()),
            (422, "non_finite_result", "y[0] = "),
        ),
    ];
    refuses(&app, cases).await;
    // The binary format carries them.
    let req = Request::post("/spmv")
        .header("content-type", "application/json")
        .header("accept", "application/octet-stream")
        .body(Body::from(body.to_string()))
        .unwrap();
    let r = send(&app, req).await;
    assert_eq!(r.status, 200);
    let y = server::input::parse_x_binary(&r.body, server::input::Precision::F64).unwrap();
    assert_eq!(y[0], 1e10);
    assert_eq!(y[1], f64::INFINITY);
    assert!(y[2].is_infinite() || y[2].is_nan(), "{}", y[2]);
}
