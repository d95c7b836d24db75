//! The binary CSR body (`application/vnd.spmv-select.csr`): round trips through
//! /predict, /matrices and inline /spmv equal to the same matrix sent as JSON,
//! and malformed bodies (truncated, lying headers, huge declared sizes in tiny
//! bodies, wrong widths, bad indices, non-finite values) answered with a 4xx
//! naming the problem, never a panic or a 5xx.

use crate::common;

use common::*;
use server::csr_binary::{encode, CONTENT_TYPE, HEADER_BYTES};
use sparse::Csr;

const CT: &str = CONTENT_TYPE;

/// The binary y of a response, in its precision.
fn y_binary(r: &Resp, precision: &str) -> Vec<f64> {
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    server::input::parse_x_binary(&r.body, precision.parse().unwrap()).unwrap()
}

#[tokio::test]
async fn predict_and_upload_give_the_same_matrix_as_json() {
    let (app, _) = test_app(&["--no-device"]).await;
    let a = random_matrix(300, 250, 7);
    let json = send(
        &app,
        post("/predict", "application/json", csr_json(&a).to_string()),
    )
    .await;
    assert_eq!(json.status, 200, "{}", String::from_utf8_lossy(&json.body));
    for (iw, vw) in [(4, 8), (8, 8)] {
        let r = send(&app, post("/predict", CT, encode(&a, iw, vw, None))).await;
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        assert_eq!(r.json()["matrix"], json.json()["matrix"]);
        assert_eq!(r.json()["features"], json.json()["features"]);
        assert_eq!(r.json()["plan"], json.json()["plan"]);
    }
    // The same content gives the same id whatever the format.
    let r = send(&app, post("/matrices", CT, encode(&a, 4, 8, None))).await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["id"], matrix_id(&a));
    // f32 values: the matrix rounded to f32, and its own id.
    let a32 = a.cast::<f32>().cast::<f64>();
    let r = send(&app, post("/matrices", CT, encode(&a, 8, 4, None))).await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["id"], matrix_id(&a32));
}

#[tokio::test]
async fn inline_spmv_with_an_x_section_equals_the_reference() {
    let Some((app, _)) =
        device_app("inline_spmv_with_an_x_section_equals_the_reference", &[]).await
    else {
        return;
    };
    let (a, x) = random_problem(500, 400, 11);
    for (p, vw) in [("f64", 8u8), ("f32", 4u8)] {
        let body = encode(&a, 4, vw, Some(&x));
        let req = axum::http::Request::post(format!("/spmv?precision={p}"))
            .header("content-type", CT)
            .header("accept", "application/octet-stream")
            .body(axum::body::Body::from(body))
            .unwrap();
        let r = send(&app, req).await;
        let y = y_binary(&r, p);
        assert_eq!(r.headers["x-precision"], p);
        // What was sent: values and x rounded to the value width.
        let (a_sent, x_sent) = match vw {
            4 => (
                a.cast::<f32>().cast::<f64>(),
                x.iter().map(|&v| v as f32 as f64).collect(),
            ),
            _ => (a.clone(), x.clone()),
        };
        match p {
            "f32" => check_y::<f32>(&a_sent, &x_sent, &y),
            _ => check_y::<f64>(&a_sent, &x_sent, &y),
        }
    }
    // A multipart form with a binary CSR matrix part and a JSON x part.
    let mut form =
        b"--B\r\nContent-Disposition: form-data; name=\"matrix\"\r\nContent-Type: ".to_vec();
    form.extend_from_slice(CT.as_bytes());
    form.extend_from_slice(b"\r\n\r\n");
    form.extend_from_slice(&encode(&a, 4, 8, None));
    form.extend_from_slice(b"\r\n--B\r\nContent-Disposition: form-data; name=\"x\"\r\n\r\n");
    form.extend_from_slice(serde_json::to_string(&x).unwrap().as_bytes());
    form.extend_from_slice(b"\r\n--B--\r\n");
    let r = send(&app, post("/spmv", "multipart/form-data; boundary=B", form)).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    check_y::<f64>(&a, &x, &y_of(&r.json()));
    // JSON y too, with verify from the query.
    let r = send(
        &app,
        post("/spmv?verify=true", CT, encode(&a, 8, 8, Some(&x))),
    )
    .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["verify"]["ok"], true);
    check_y::<f64>(&a, &x, &y_of(&r.json()));
}

/// A body with a header declaring the given sizes and widths, and `tail` bytes after it.
fn header(nrows: u64, ncols: u64, nnz: u64, iw: u8, vw: u8, flags: u32, tail: usize) -> Vec<u8> {
    let mut b = b"SPMVCSR\0".to_vec();
    b.extend_from_slice(&1u16.to_le_bytes());
    b.extend_from_slice(&[iw, vw]);
    b.extend_from_slice(&flags.to_le_bytes());
    for v in [nrows, ncols, nnz] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    b.resize(HEADER_BYTES + tail, 0);
    b
}

/// Replaces the little-endian u32 at `at`.
fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// One malformed body: name, route, body, status, error code, a fragment of the message.
type Malformed = (
    &'static str,
    &'static str,
    Vec<u8>,
    u16,
    &'static str,
    &'static str,
);

/// Malformed bodies, each with the answer it must get.
fn malformed() -> Vec<Malformed> {
    let a = Csr::try_new(2, 3, vec![0, 2, 3], vec![0, 2, 1], vec![1.5, -2.0, 4.0]).unwrap();
    let good = encode(&a, 4, 8, None);
    let with_x = encode(&a, 4, 8, Some(&[1.0, 1.0, 1.0]));
    let mut bad_magic = good.clone();
    bad_magic[..8].copy_from_slice(b"%%Matrix");
    let mut v2 = good.clone();
    v2[8] = 2;
    let mut iw = good.clone();
    iw[10] = 8; // says 8-byte indices, carries 4-byte ones: the length no longer matches
    let mut iw3 = good.clone();
    iw3[10] = 3;
    let mut vw = good.clone();
    vw[11] = 2;
    let mut col = good.clone();
    put_u32(&mut col, HEADER_BYTES + 12 + 4, 3); // col_idx[1] = 3 = ncols
    let mut ptr = good.clone();
    put_u32(&mut ptr, HEADER_BYTES + 4, 4); // row_ptr[1] = 4 > row_ptr[2] = 3
    let mut ptr_end = good.clone();
    put_u32(&mut ptr_end, HEADER_BYTES + 8, 2); // row_ptr[2] = 2 but nnz = 3
    let mut nan = good.clone();
    let v0 = HEADER_BYTES + 12 + 12;
    nan[v0..v0 + 8].copy_from_slice(&f64::NAN.to_le_bytes());
    let mut big_col = encode(&a, 8, 8, None);
    let c0 = HEADER_BYTES + 24;
    big_col[c0..c0 + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
    vec![
        (
            "truncated",
            "/predict",
            good[..good.len() - 3].to_vec(),
            400,
            "invalid_binary_csr",
            "but the body has",
        ),
        (
            "one byte too many",
            "/matrices",
            [good.clone(), vec![0]].concat(),
            400,
            "invalid_binary_csr",
            "but the body has",
        ),
        (
            "header only, cut",
            "/predict",
            good[..20].to_vec(),
            400,
            "invalid_binary_csr",
            "fewer than the 40-byte header",
        ),
        (
            "empty",
            "/predict",
            Vec::new(),
            400,
            "invalid_binary_csr",
            "fewer than the 40-byte header",
        ),
        (
            "bad magic",
            "/predict",
            bad_magic,
            400,
            "invalid_binary_csr",
            "magic bytes",
        ),
        (
            "version 2",
            "/matrices",
            v2,
            400,
            "invalid_binary_csr",
            "version 2 is not supported",
        ),
        (
            "wrong index width",
            "/predict",
            iw,
            400,
            "invalid_binary_csr",
            "index width 8",
        ),
        (
            "index width 3",
            "/predict",
            iw3,
            400,
            "invalid_binary_csr",
            "index width 3 is not supported",
        ),
        (
            "value width 2",
            "/predict",
            vw,
            400,
            "invalid_binary_csr",
            "value width 2 is not supported",
        ),
        (
            "huge nnz in a tiny body",
            "/predict",
            header(2, 2, 1 << 40, 4, 8, 0, 16),
            413,
            "too_large",
            "nnz",
        ),
        (
            "huge rows in a tiny body",
            "/matrices",
            header(u64::MAX, 2, 1, 8, 8, 0, 8),
            413,
            "too_large",
            "rows",
        ),
        (
            "sizes within limits, body too short",
            "/predict",
            header(1000, 1000, 100_000, 4, 8, 0, 64),
            400,
            "invalid_binary_csr",
            "which take",
        ),
        (
            "unknown flag",
            "/predict",
            header(1, 1, 0, 4, 8, 6, 8),
            400,
            "invalid_binary_csr",
            "unknown flags",
        ),
        (
            "column out of range",
            "/predict",
            col,
            422,
            "invalid_matrix",
            "column",
        ),
        (
            "row_ptr decreasing",
            "/matrices",
            ptr,
            422,
            "invalid_matrix",
            "row_ptr decreases",
        ),
        (
            "row_ptr end",
            "/predict",
            ptr_end,
            422,
            "invalid_matrix",
            "row_ptr",
        ),
        (
            "NaN value",
            "/predict",
            nan,
            422,
            "non_finite",
            "only finite values",
        ),
        (
            "index over 32 bits",
            "/predict",
            big_col,
            422,
            "unprocessable",
            "does not fit 32-bit indices",
        ),
        (
            "x section on /matrices",
            "/matrices",
            with_x.clone(),
            400,
            "invalid_binary_csr",
            "x belongs to POST /spmv",
        ),
        ("no x on /spmv", "/spmv", good, 422, "unprocessable", "no x"),
        (
            "x with an id",
            "/spmv?matrix_id=abc",
            with_x,
            400,
            "bad_request",
            "not both",
        ),
    ]
}

#[tokio::test]
async fn malformed_bodies_are_4xx_naming_the_problem() {
    let (app, _) = test_app(&[
        "--no-device",
        "--max-rows",
        "1000000",
        "--max-nnz",
        "1000000",
    ])
    .await;
    for (name, uri, body, status, code, message) in malformed() {
        let r = send(&app, post(uri, CT, body)).await;
        assert_eq!(
            r.status.as_u16(),
            status,
            "{name}: {}",
            String::from_utf8_lossy(&r.body)
        );
        let (c, m) = r.error();
        assert_eq!(c, code, "{name}: {m}");
        assert!(m.contains(message), "{name}: '{m}' lacks '{message}'");
    }
    // The service still answers afterwards.
    let a = random_matrix(20, 20, 1);
    let r = send(&app, post("/predict", CT, encode(&a, 4, 8, None))).await;
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn a_lying_header_reserves_nothing_for_what_it_declares() {
    // A 2 MiB budget: a header declaring a million entries (about 24 MB to
    // parse) in a 100-byte body must be refused by its length, not by the
    // budget (so neither a 503 nor a 413).
    let (app, state) = test_app(&["--no-device", "--memory-budget-bytes", "2097152"]).await;
    let body = header(1000, 1000, 1_000_000, 8, 8, 0, 60);
    let req = axum::http::Request::post("/predict")
        .header("content-type", CT)
        .header("content-length", body.len())
        .body(axum::body::Body::from(body))
        .unwrap();
    let r = send(&app, req).await;
    assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.error().0, "invalid_binary_csr");
    assert_eq!(state.budget().in_use(), 0);
}
