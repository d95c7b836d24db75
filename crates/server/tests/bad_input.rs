//! Bad input: every case is a 4xx with a JSON error naming the problem, and the
//! service keeps serving afterwards. No case may panic or answer 500.

use crate::common;

use axum::body::Body;
use axum::http::Request;
use common::*;
use serde_json::json;

const MM: &str = "%%MatrixMarket matrix coordinate real general\n";

struct Case {
    name: &'static str,
    req: Request<Body>,
    status: u16,
    code: &'static str,
    message: &'static str,
}

fn case(
    name: &'static str,
    req: Request<Body>,
    status: u16,
    code: &'static str,
    message: &'static str,
) -> Case {
    Case {
        name,
        req,
        status,
        code,
        message,
    }
}

fn gz(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap()
}

/// Cases that need no device and no uploaded matrix.
fn cases(id: &str) -> Vec<Case> {
    let ok3 = format!("{MM}3 3 3\n1 1 1\n2 2 2\n3 3 3\n");
    vec![
        case(
            "bad banner",
            post(
                "/predict",
                "text/plain",
                "%%MatrixMarket vector coordinate real general\n1 1 1\n1 1 1\n",
            ),
            400,
            "invalid_matrix_market",
            "line 1",
        ),
        case(
            "non-numeric entry",
            post(
                "/predict",
                "text/plain",
                format!("{MM}2 2 2\n1 1 1.0\n2 x 2.0\n"),
            ),
            400,
            "invalid_matrix_market",
            "line 4",
        ),
        case(
            "truncated file",
            post(
                "/predict",
                "text/plain",
                format!("{MM}3 3 3\n1 1 1\n2 2 2\n"),
            ),
            400,
            "invalid_matrix_market",
            "line",
        ),
        case(
            "index out of range",
            post("/matrices", "text/plain", format!("{MM}2 2 1\n3 1 1.0\n")),
            400,
            "invalid_matrix_market",
            "line 3",
        ),
        case(
            "empty body",
            post("/predict", "text/plain", ""),
            400,
            "invalid_matrix_market",
            "empty",
        ),
        case(
            "malformed JSON",
            post("/predict", "application/json", "{\"nrows\": 2, \"ncols\": "),
            400,
            "invalid_json",
            "line 1 column",
        ),
        case(
            "unknown JSON field",
            post_json(
                "/predict",
                json!({"nrows": 1, "ncols": 1, "row_ptr": [0, 0], "col_idx": [], "values": [], "vals": []}),
            ),
            400,
            "invalid_json",
            "unknown field `vals`",
        ),
        case(
            "row_ptr of the wrong length",
            post_json(
                "/predict",
                json!({"nrows": 3, "ncols": 2, "row_ptr": [0, 1], "col_idx": [0], "values": [1.0]}),
            ),
            422,
            "invalid_matrix",
            "row_ptr has 2 entries, expected nrows + 1 = 4",
        ),
        case(
            "column out of range",
            post_json(
                "/matrices",
                json!({"nrows": 1, "ncols": 2, "row_ptr": [0, 1], "col_idx": [5], "values": [1.0]}),
            ),
            422,
            "invalid_matrix",
            "column index 5 in row 0 is out of range",
        ),
        case(
            "col_idx and values disagree",
            post_json(
                "/predict",
                json!({"nrows": 1, "ncols": 3, "row_ptr": [0, 2], "col_idx": [0, 1], "values": [1.0]}),
            ),
            422,
            "invalid_matrix",
            "col_idx has 2 entries but values has 1",
        ),
        case(
            "row_ptr decreasing",
            post_json(
                "/predict",
                json!({"nrows": 2, "ncols": 2, "row_ptr": [0, 2, 1], "col_idx": [0, 1], "values": [1.0, 2.0]}),
            ),
            422,
            "invalid_matrix",
            "row_ptr decreases at row 1",
        ),
        case(
            "NaN in a Matrix Market value",
            post(
                "/predict",
                "text/plain",
                format!("{MM}2 2 2\n1 1 nan\n2 2 1\n"),
            ),
            422,
            "non_finite",
            "NaN and infinities are rejected",
        ),
        case(
            "value overflowing f32",
            post(
                "/matrices?precision=f32",
                "text/plain",
                format!("{MM}1 1 1\n1 1 1e300\n"),
            ),
            422,
            "non_finite",
            "once converted to f32",
        ),
        case(
            "x of the wrong length",
            post_json("/spmv", json!({"matrix": ok3, "x": [1.0, 2.0]})),
            422,
            "x_length",
            "x has 2 entries but the matrix has 3 columns",
        ),
        case(
            "x with a string",
            post_json("/spmv", json!({"matrix": ok3, "x": [1.0, "two", 3.0]})),
            400,
            "invalid_json",
            "invalid type: string",
        ),
        case(
            "x overflowing f32",
            post_json(
                "/spmv",
                json!({"matrix": ok3, "x": [1.0, 1e300, 3.0], "precision": "f32"}),
            ),
            422,
            "non_finite",
            "x[1] = 1e300 is not finite in f32",
        ),
        case(
            "body over the limit",
            post(
                "/predict",
                "text/plain",
                format!("{MM}1 1 1\n1 1 1\n{}", "%".repeat(5000)),
            ),
            413,
            "too_large",
            "request body bytes",
        ),
        case(
            "gzip bomb",
            post("/predict", "text/plain", gz(&vec![b'%'; 1 << 20])),
            413,
            "too_large",
            "decompressed body bytes",
        ),
        case(
            "rows over the limit",
            post(
                "/predict",
                "text/plain",
                format!("{MM}5000000000 3 1\n1 1 1\n"),
            ),
            413,
            "too_large",
            "line 2: rows = 5000000000 does not fit 32-bit device indices",
        ),
        case(
            "nnz over the limit",
            post("/predict", "text/plain", format!("{MM}50 50 3000\n1 1 1\n")),
            413,
            "too_large",
            "line 2: nnz = 3000 is over the limit of 2000",
        ),
        case(
            "cols over the limit",
            post_json(
                "/predict",
                json!({"nrows": 1, "ncols": 5000, "row_ptr": [0, 0], "col_idx": [], "values": []}),
            ),
            413,
            "too_large",
            "cols is 5000, over the limit of 1000",
        ),
        case(
            "unknown matrix id",
            post_json("/spmv", json!({"matrix_id": "feedbeef", "x": [1.0]})),
            404,
            "matrix_not_found",
            "no matrix with id 'feedbeef'",
        ),
        case(
            "unknown matrix id, GET",
            get("/matrices/feedbeef"),
            404,
            "matrix_not_found",
            "feedbeef",
        ),
        case(
            "unsupported precision",
            post("/predict?precision=f16", "text/plain", ok3.clone()),
            422,
            "unsupported_precision",
            "unsupported precision 'f16': use f32 or f64",
        ),
        case(
            "unsupported precision in JSON",
            post_json(
                "/spmv",
                json!({"matrix": ok3, "x": [1, 2, 3], "precision": "half"}),
            ),
            422,
            "unsupported_precision",
            "'half'",
        ),
        case(
            "unsupported content type",
            post("/predict", "image/png", "\u{89}PNG"),
            415,
            "unsupported_media_type",
            "image/png",
        ),
        case(
            "unsupported content encoding",
            Request::post("/predict")
                .header("content-type", "text/plain")
                .header("content-encoding", "br")
                .body(Body::from(ok3.clone()))
                .unwrap(),
            415,
            "unsupported_media_type",
            "only content encoding accepted is gzip",
        ),
        case(
            "corrupt gzip",
            post(
                "/predict",
                "text/plain",
                vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 1, 2, 3],
            ),
            400,
            "bad_request",
            "not valid gzip",
        ),
        case(
            "multipart to /predict",
            post("/predict", "multipart/form-data; boundary=b", "--b--\r\n"),
            415,
            "unsupported_media_type",
            "multipart/form-data",
        ),
        case(
            "unknown query parameter",
            post("/predict?precison=f32", "text/plain", ok3.clone()),
            400,
            "bad_request",
            "unknown query parameter 'precison'",
        ),
        case(
            "bad boolean",
            post("/predict?explain=maybe", "text/plain", ok3.clone()),
            400,
            "bad_request",
            "must be true or false",
        ),
        case(
            "binary x without matrix_id",
            post("/spmv", "application/octet-stream", vec![0u8; 16]),
            400,
            "bad_request",
            "needs ?matrix_id=",
        ),
        case(
            "binary x of a bad length",
            post(
                &format!("/spmv?matrix_id={id}"),
                "application/octet-stream",
                vec![0u8; 13],
            ),
            400,
            "bad_request",
            "not a multiple of 8",
        ),
        case(
            "plain Matrix Market to /spmv",
            post("/spmv", "text/plain", ok3.clone()),
            422,
            "unprocessable",
            "has no x",
        ),
        case(
            "matrix and matrix_id",
            post_json(
                "/spmv",
                json!({"matrix": ok3, "matrix_id": id, "x": [1, 2, 3]}),
            ),
            400,
            "bad_request",
            "not both",
        ),
        case(
            "no x",
            post_json("/spmv", json!({"matrix": ok3})),
            422,
            "unprocessable",
            "no x",
        ),
        case(
            "no matrix",
            post_json("/spmv", json!({"x": [1]})),
            422,
            "unprocessable",
            "no matrix",
        ),
        case(
            "matrix of the wrong JSON kind",
            post_json("/spmv", json!({"matrix": 42, "x": [1]})),
            400,
            "invalid_json",
            "invalid type: integer `42`, expected Matrix Market text (a string) or a CSR object",
        ),
        case(
            "precision given twice",
            post_json(
                "/spmv?precision=f32",
                json!({"matrix": ok3, "x": [1, 2, 3], "precision": "f64"}),
            ),
            400,
            "bad_request",
            "given twice",
        ),
        case(
            "unknown multipart part",
            post(
                "/spmv",
                "multipart/form-data; boundary=b",
                "--b\r\nContent-Disposition: form-data; name=\"y\"\r\n\r\n[1]\r\n--b--\r\n",
            ),
            400,
            "bad_request",
            "unknown multipart part 'y'",
        ),
        case(
            "malformed multipart",
            post(
                "/spmv",
                "multipart/form-data; boundary=b",
                "--b\r\nno headers end",
            ),
            400,
            "bad_request",
            "multipart",
        ),
        case("unknown route", get("/nope"), 404, "no_route", "GET /nope"),
        case(
            "wrong method",
            get("/spmv"),
            405,
            "method_not_allowed",
            "GET /spmv",
        ),
    ]
}

#[tokio::test]
async fn every_bad_input_is_a_precise_4xx_and_the_service_keeps_serving() {
    let (app, _) = test_app(&[
        "--no-device",
        "--max-body-bytes",
        "4096",
        "--max-decompressed-bytes",
        "4096",
        "--max-rows",
        "1000",
        "--max-cols",
        "1000",
        "--max-nnz",
        "2000",
    ])
    .await;
    // An uploaded 3x3 matrix, for the cases that reference one.
    let r = send(
        &app,
        post(
            "/matrices",
            "text/plain",
            format!("{MM}3 3 3\n1 1 1\n2 2 2\n3 3 3\n"),
        ),
    )
    .await;
    assert_eq!(r.status, 201);
    let id = r.json()["id"].as_str().unwrap().to_string();
    let cases = cases(&id);
    assert!(cases.len() >= 20);
    for c in cases {
        let r = send(&app, c.req).await;
        let body = String::from_utf8_lossy(&r.body).to_string();
        assert_eq!(r.status.as_u16(), c.status, "{}: {body}", c.name);
        let (code, message) = r.error();
        assert_eq!(code, c.code, "{}: {body}", c.name);
        assert!(
            message.contains(c.message),
            "{}: message {message:?} lacks {:?}",
            c.name,
            c.message
        );
        assert!(r.status.is_client_error(), "{}", c.name);
        // Still serving.
        assert_eq!(
            send(&app, get("/healthz")).await.status,
            200,
            "after {}",
            c.name
        );
    }
}

#[tokio::test]
async fn x_of_the_wrong_length_by_id_and_nan_binary_x() {
    let (app, _) = test_app(&["--no-device"]).await;
    let r = send(
        &app,
        post(
            "/matrices",
            "text/plain",
            format!("{MM}2 3 2\n1 1 1\n2 3 2\n"),
        ),
    )
    .await;
    let id = r.json()["id"].as_str().unwrap().to_string();
    let r = send(
        &app,
        post_json("/spmv", json!({"matrix_id": id, "x": [1.0]})),
    )
    .await;
    assert_eq!(r.status, 422);
    assert_eq!(
        r.error(),
        (
            "x_length".into(),
            "x has 1 entries but the matrix has 3 columns".into()
        )
    );
    let xb: Vec<u8> = [1.0f64, f64::NAN, 2.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let r = send(
        &app,
        post(
            &format!("/spmv?matrix_id={id}"),
            "application/octet-stream",
            xb,
        ),
    )
    .await;
    let msg = r.error_of(422, "non_finite");
    assert!(msg.contains("x[1] = NaN"), "{msg}");
}

#[tokio::test]
async fn too_big_for_the_device_is_507_with_the_sizes() {
    let Some((app, _)) =
        device_app("too_big_for_the_device", &["--device-memory-bytes", "1000"]).await
    else {
        return;
    };
    let a = random_matrix(100, 100, 11);
    for uri in ["/matrices", "/matrices?precision=f32"] {
        let r = send(&app, post(uri, "text/plain", mm_text(&a))).await;
        let msg = r.error_of(507, "insufficient_device_memory");
        assert!(
            msg.contains("needs") && msg.contains("allows 1000 bytes"),
            "{msg}"
        );
    }
    // Not kept: the id is unknown.
    let r = send(&app, get(&format!("/matrices/{}", matrix_id(&a)))).await;
    assert_eq!(r.status, 404);
    let inline = json!({"matrix": csr_json(&a), "x": random_x(100, 1)});
    let r = send(&app, post_json("/spmv", inline)).await;
    assert_eq!(r.status, 507);
}

#[tokio::test]
async fn a_matrix_bigger_than_the_cache_is_413() {
    let (app, _) = test_app(&["--no-device", "--cache-bytes", "100"]).await;
    let a = random_matrix(100, 100, 12);
    let r = send(&app, post("/matrices", "text/plain", mm_text(&a))).await;
    let msg = r.error_of(413, "too_large");
    assert!(msg.contains("over the limit of 100"), "{msg}");
}

#[tokio::test]
async fn no_device_predict_works_and_spmv_is_503() {
    let (app, _) = test_app_with(
        &[],
        server::DeviceState::none("no OpenCL platform found: test"),
    )
    .await;
    let a = random_matrix(60, 60, 13);
    let r = send(&app, post("/predict", "text/plain", mm_text(&a))).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["model"]["kind"], "rule");
    let inline = json!({"matrix": mm_text(&a), "x": random_x(60, 2)});
    let r = send(&app, post_json("/spmv", inline)).await;
    let msg = r.error_of(503, "no_device");
    assert!(
        msg.contains("no OpenCL device is available") && msg.contains("/predict still works"),
        "{msg}"
    );
    let r = send(&app, get("/device")).await;
    assert_eq!(r.json()["available"], false);
    // Bad input is still a 4xx, not a 503.
    let r = send(
        &app,
        post_json("/spmv", json!({"matrix": mm_text(&a), "x": [1.0]})),
    )
    .await;
    assert_eq!(r.status, 422);
}
