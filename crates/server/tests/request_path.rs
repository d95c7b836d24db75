//! The /spmv request path for binary x by matrix id (issue 11 item 11): x's
//! body is received chunk by chunk straight into a reused buffer, so values
//! split across chunks, wrong lengths, non-finite values, reuse of the x and
//! y buffers and concurrent calls on one matrix are checked here against
//! `sparse::spmv::spmv_ref`, in both precisions; the JSON forms beside them.

use crate::common;

use axum::body::{Body, Bytes};
use axum::http::Request;
use axum::Router;
use common::*;
use serde_json::json;
use sparse::Csr;
use std::convert::Infallible;

/// x as little-endian bytes of `p` ("f32" or "f64").
fn le_bytes(x: &[f64], p: &str) -> Vec<u8> {
    match p {
        "f32" => x.iter().flat_map(|&v| (v as f32).to_le_bytes()).collect(),
        _ => x.iter().flat_map(|&v| v.to_le_bytes()).collect(),
    }
}

/// Splits `bytes` into chunks whose sizes cycle through `sizes`.
fn chunked(bytes: &[u8], sizes: &[usize]) -> Vec<Vec<u8>> {
    let (mut out, mut at, mut i) = (Vec::new(), 0, 0);
    while at < bytes.len() {
        let n = sizes[i % sizes.len()].min(bytes.len() - at);
        out.push(bytes[at..at + n].to_vec());
        at += n;
        i += 1;
    }
    out
}

/// POST /spmv?matrix_id=..&precision=.. with the body streamed in `chunks`
/// (and a Content-Length when `declared`); y as binary when `binary_y`.
fn x_request(
    id: &str,
    p: &str,
    chunks: Vec<Vec<u8>>,
    binary_y: bool,
    declared: bool,
) -> Request<Body> {
    let total: usize = chunks.iter().map(Vec::len).sum();
    let stream = futures_util::stream::iter(
        chunks
            .into_iter()
            .map(|c| Ok::<_, Infallible>(Bytes::from(c))),
    );
    x_request_of(
        id,
        p,
        Body::from_stream(stream),
        total,
        (binary_y, declared),
    )
}

/// The same request with `bytes` in `WIDE_CHUNKS` but the last 1000 bytes
/// sent 100 ms later, as from a network.
fn paced_x_request(
    id: &str,
    p: &str,
    bytes: &[u8],
    binary_y: bool,
    declared: bool,
) -> Request<Body> {
    use futures_util::StreamExt;
    let cut = bytes.len() - 1000;
    let (head, last) = (chunked(&bytes[..cut], &WIDE_CHUNKS), bytes[cut..].to_vec());
    let stream = futures_util::stream::iter(head)
        .chain(futures_util::stream::once(async move {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            last
        }))
        .map(|c| Ok::<_, Infallible>(Bytes::from(c)));
    x_request_of(
        id,
        p,
        Body::from_stream(stream),
        bytes.len(),
        (binary_y, declared),
    )
}

/// POST /spmv?matrix_id=..&precision=.. with `body` of `total` bytes.
fn x_request_of(
    id: &str,
    p: &str,
    body: Body,
    total: usize,
    (binary_y, declared): (bool, bool),
) -> Request<Body> {
    let mut r = Request::post(format!("/spmv?matrix_id={id}&precision={p}"))
        .header("content-type", "application/octet-stream");
    if binary_y {
        r = r.header("accept", "application/octet-stream");
    }
    if declared {
        r = r.header("content-length", total.to_string());
    }
    r.body(body).unwrap()
}

/// y of an answer: binary little-endian of `p`, or JSON.
fn y_from(r: &Resp, p: &str, binary_y: bool) -> Vec<f64> {
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    if !binary_y {
        return y_of(&r.json());
    }
    match p {
        "f32" => r
            .body
            .as_chunks::<4>()
            .0
            .iter()
            .map(|c| f32::from_le_bytes(*c) as f64)
            .collect(),
        _ => r
            .body
            .as_chunks::<8>()
            .0
            .iter()
            .map(|c| f64::from_le_bytes(*c))
            .collect(),
    }
}

/// Checks y against the reference SpMV in precision `p`.
fn check(a: &Csr<f64>, x: &[f64], y: &[f64], p: &str) {
    assert_eq!(y.len(), a.nrows());
    match p {
        "f32" => check_y::<f32>(a, x, y),
        _ => check_y::<f64>(a, x, y),
    }
}

/// A device app without a database and a random matrix (rows, cols, seed)
/// uploaded to it, with its id; `None` where the test may skip (no device,
/// outside CI).
async fn with_matrix(test: &str, dims: (usize, usize, u64)) -> Option<(Router, Csr<f64>, String)> {
    with_matrix_on(test, &["--no-database"], dims).await
}

/// As [`with_matrix`], the app started with `flags`.
async fn with_matrix_on(
    test: &str,
    flags: &[&str],
    (rows, cols, seed): (usize, usize, u64),
) -> Option<(Router, Csr<f64>, String)> {
    let (app, _) = device_app(test, flags).await?;
    let a = random_matrix(rows, cols, seed);
    let id = upload(&app, &a).await;
    Some((app, a, id))
}

/// Chunk sizes that split values of both widths at every offset.
const ODD: [usize; 7] = [1, 3, 5, 7, 11, 13, 4099];

/// A call with a good x (from `seed`) in odd chunks, its y checked: the matrix
/// and its reused buffers still serve after what the test sent before.
async fn still_serves(
    app: &Router,
    (a, id): (&Csr<f64>, &str),
    p: &str,
    seed: u64,
    declared: bool,
) {
    let x = random_x(a.ncols(), seed);
    let body = chunked(&le_bytes(&x, p), &ODD);
    let r = send(app, x_request(id, p, body, true, declared)).await;
    check(a, &x, &y_from(&r, p, true), p);
}

#[tokio::test]
async fn binary_x_in_odd_chunks_gives_the_reference_y() {
    let Some((app, a, id)) = with_matrix(
        "binary_x_in_odd_chunks_gives_the_reference_y",
        (300, 1037, 7),
    )
    .await
    else {
        return;
    };
    for p in ["f64", "f32"] {
        // Several calls with different x: the reused buffers must hold
        // nothing of the call before.
        for (k, binary_y) in [(1, true), (2, true), (3, false), (4, true)] {
            let x = random_x(a.ncols(), k);
            let body = chunked(&le_bytes(&x, p), &ODD[(k as usize) % 3..]);
            let r = send(&app, x_request(&id, p, body, binary_y, k % 2 == 0)).await;
            check(&a, &x, &y_from(&r, p, binary_y), p);
        }
    }
}

/// The same with x and y forced through the matrix's pinned buffers (the
/// default on a GPU; PoCL defaults to the direct copies): the reference y,
/// call after call, and a held answer keeps its y.
#[tokio::test]
async fn binary_x_and_y_through_pinned_buffers_give_the_reference_y() {
    let test = "binary_x_and_y_through_pinned_buffers_give_the_reference_y";
    let flags = &["--no-database", "--binary-staging", "pinned"];
    let Some((app, a, id)) = with_matrix_on(test, flags, (300, 1037, 17)).await else {
        return;
    };
    for p in ["f64", "f32"] {
        three_held_calls(&app, (&a, &id), p, 20, false).await;
    }
}

/// Three calls with x from seeds `seed + 1..=3` in odd chunks (the second
/// with no Content-Length when `undeclared_second`), their answers held
/// until all three have run, each y checked; then [`still_serves`].
async fn three_held_calls(
    app: &Router,
    (a, id): (&Csr<f64>, &str),
    p: &str,
    seed: u64,
    undeclared_second: bool,
) {
    let mut held = Vec::new();
    for k in 1..=3 {
        let x = random_x(a.ncols(), seed + k);
        let declared = !(undeclared_second && k == 2);
        let body = chunked(&le_bytes(&x, p), &ODD);
        held.push((x, send(app, x_request(id, p, body, true, declared)).await));
    }
    for (x, r) in &held {
        check(a, x, &y_from(r, p, true), p);
    }
    still_serves(app, (a, id), p, seed + 9, false).await;
}

/// What the matrix `id` says of its binary x's and y's host buffers, per
/// precision: (pinned, shared).
async fn host_buffers(app: &Router, id: &str) -> Vec<(bool, bool)> {
    let r = send(app, get(&format!("/matrices/{id}"))).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    r.json()["uploaded"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| {
            let flag = |k: &str| u[k].as_bool().unwrap();
            (flag("pinned_host_buffers"), flag("shared_host_buffers"))
        })
        .collect()
}

#[tokio::test]
async fn binary_x_and_y_in_pinned_or_shared_host_pools_give_the_reference_y() {
    // x received into and y answered from the matrix's pinned pools
    // (straight to and from the device) or shared ones (the kernels read x
    // and write y in place: these x and y are under the default bound, so
    // it is lowered to 0), with answers held so that later calls find the
    // pools' buffers out and take heap ones; then the heap pools for
    // comparison.
    let test = "binary_x_and_y_in_pinned_or_shared_host_pools_give_the_reference_y";
    for (k, pools) in ["pinned", "shared", "heap"].into_iter().enumerate() {
        let flags = &[
            "--no-database",
            "--host-pools",
            pools,
            "--in-place-min-bytes",
            "0",
        ];
        let dims = (300 + 50 * k, 1037, 40 + k as u64);
        let Some((app, a, id)) = with_matrix_on(&format!("{test}_{k}"), flags, dims).await else {
            return;
        };
        for p in ["f64", "f32"] {
            three_held_calls(&app, (&a, &id), p, 50, true).await;
            // One call alone: x and y in the pools' buffers, used in place
            // when they are shared.
            let x = random_x(a.ncols(), 70);
            let body = chunked(&le_bytes(&x, p), &ODD);
            let r = send(&app, x_request(&id, p, body, true, true)).await;
            check(&a, &x, &y_from(&r, p, true), p);
            let in_place = r.headers["x-in-place"].to_str().unwrap();
            let want = pools == "shared";
            assert_eq!(in_place, want.to_string(), "{pools}, {p}");
        }
        let kinds = host_buffers(&app, &id).await;
        let want = (pools == "pinned", pools == "shared");
        assert_eq!(kinds, vec![want; 2], "{pools}");
    }
}

#[tokio::test]
async fn a_held_answer_keeps_its_y_while_later_calls_run() {
    let Some((app, a, id)) = with_matrix(
        "a_held_answer_keeps_its_y_while_later_calls_run",
        (400, 400, 8),
    )
    .await
    else {
        return;
    };
    let x1 = random_x(a.ncols(), 10);
    let first = send(
        &app,
        x_request(&id, "f64", vec![le_bytes(&x1, "f64")], true, true),
    )
    .await;
    let y1 = first.body.clone();
    for k in 11..14 {
        let x = random_x(a.ncols(), k);
        let r = send(
            &app,
            x_request(&id, "f64", chunked(&le_bytes(&x, "f64"), &ODD), true, false),
        )
        .await;
        check(&a, &x, &y_from(&r, "f64", true), "f64");
    }
    assert_eq!(first.body, y1);
    check(&a, &x1, &y_from(&first, "f64", true), "f64");
}

#[tokio::test]
async fn wrong_lengths_are_refused_with_both_sizes_and_the_matrix_still_works() {
    let Some((app, a, id)) = with_matrix(
        "wrong_lengths_are_refused_with_both_sizes_and_the_matrix_still_works",
        (120, 97, 9),
    )
    .await
    else {
        return;
    };
    for p in ["f64", "f32"] {
        let w = if p == "f32" { 4 } else { 8 };
        let good = le_bytes(&random_x(a.ncols(), 20), p);
        let short = good[..good.len() - w].to_vec();
        let mut long = good.clone();
        long.extend_from_slice(&good[..3 * w]);
        for declared in [false, true] {
            for (body, found) in [
                (short.clone(), a.ncols() - 1),
                (long.clone(), a.ncols() + 3),
            ] {
                let r = send(
                    &app,
                    x_request(&id, p, chunked(&body, &ODD), true, declared),
                )
                .await;
                let msg = r.error_of(422, "x_length");
                assert!(msg.contains(&format!("x has {found} entries")), "{msg}");
                assert!(msg.contains(&format!("{} columns", a.ncols())), "{msg}");
            }
            let mut ragged = good.clone();
            ragged.push(0);
            let r = send(
                &app,
                x_request(&id, p, chunked(&ragged, &ODD), true, declared),
            )
            .await;
            let msg = r.error_of(400, "bad_request");
            assert!(
                msg.contains(&format!("{} bytes, not a multiple of {w}", good.len() + 1)),
                "{msg}"
            );
            assert!(
                msg.contains(&format!("{} bytes expected", good.len())),
                "{msg}"
            );
            still_serves(&app, (&a, &id), p, 21, declared).await;
        }
    }
}

#[tokio::test]
async fn non_finite_x_is_named_even_when_split_across_chunks() {
    let Some((app, a, id)) = with_matrix(
        "non_finite_x_is_named_even_when_split_across_chunks",
        (150, 211, 10),
    )
    .await
    else {
        return;
    };
    for p in ["f64", "f32"] {
        let w = if p == "f32" { 4 } else { 8 };
        for (at, bad) in [(0, f64::NAN), (77, f64::INFINITY), (210, f64::NEG_INFINITY)] {
            let mut x = random_x(a.ncols(), 30);
            x[at] = bad;
            let bytes = le_bytes(&x, p);
            // Split inside the bad value itself.
            let cut = at * w + w / 2;
            let body = vec![bytes[..cut].to_vec(), bytes[cut..].to_vec()];
            let r = send(&app, x_request(&id, p, body, true, false)).await;
            let msg = r.error_of(422, "non_finite");
            assert!(msg.contains(&format!("x[{at}] = ")), "{msg}");
            assert!(msg.contains(&format!("not finite in {p}")), "{msg}");
        }
        // The buffer that held the refused values serves the next call.
        still_serves(&app, (&a, &id), p, 31, false).await;
    }
}

#[tokio::test]
async fn json_forms_are_unchanged_and_f32_overflow_is_refused() {
    let Some((app, a, id)) = with_matrix(
        "json_forms_are_unchanged_and_f32_overflow_is_refused",
        (200, 180, 11),
    )
    .await
    else {
        return;
    };
    for p in ["f64", "f32"] {
        let x = random_x(a.ncols(), 40);
        let r = send(
            &app,
            post_json("/spmv", json!({"matrix_id": id, "x": x, "precision": p})),
        )
        .await;
        check(&a, &x, &y_from(&r, p, false), p);
        let r = send(
            &app,
            post_json(
                "/spmv",
                json!({"matrix": csr_json(&a), "x": x, "precision": p}),
            ),
        )
        .await;
        check(&a, &x, &y_from(&r, p, false), p);
    }
    // 1e300 is finite in f64 but overflows f32.
    let mut x = random_x(a.ncols(), 41);
    x[5] = 1e300;
    let r = send(
        &app,
        post_json(
            "/spmv",
            json!({"matrix_id": id, "x": x, "precision": "f32"}),
        ),
    )
    .await;
    let msg = r.error_of(422, "non_finite");
    assert!(msg.contains("x[5] = 1e300 is not finite in f32"), "{msg}");
    let r = send(
        &app,
        post_json(
            "/spmv",
            json!({"matrix_id": id, "x": x, "precision": "f64"}),
        ),
    )
    .await;
    check(&a, &x, &y_from(&r, "f64", false), "f64");
}

#[tokio::test]
async fn a_slow_body_does_not_hold_up_another_call_on_the_same_matrix() {
    let test = "a_slow_body_does_not_hold_up_another_call_on_the_same_matrix";
    slow_body_beside_a_quick_one(test, &["--no-database"]).await;
}

#[tokio::test]
async fn a_slow_body_in_the_pinned_x_buffer_leaves_a_heap_one_to_another_call() {
    let test = "a_slow_body_in_the_pinned_x_buffer_leaves_a_heap_one_to_another_call";
    slow_body_beside_a_quick_one(test, &["--no-database", "--host-pools", "pinned"]).await;
}

/// Shared host pools, used in place whatever the size of x and y.
const SHARED_IN_PLACE: &[&str] = &[
    "--no-database",
    "--host-pools",
    "shared",
    "--in-place-min-bytes",
    "0",
];

#[tokio::test]
async fn a_slow_body_in_the_shared_x_buffer_leaves_a_heap_one_to_another_call() {
    let test = "a_slow_body_in_the_shared_x_buffer_leaves_a_heap_one_to_another_call";
    let flags = SHARED_IN_PLACE;
    slow_body_beside_a_quick_one(test, flags).await;
}

#[tokio::test]
async fn concurrent_calls_on_shared_pools_each_get_their_own_y() {
    // Calls at once on one matrix with shared pools used in place: the ones
    // that find the shared x or y out copy through heap buffers, each y is
    // its own; then a lone call finds both back and goes in place.
    let test = "concurrent_calls_on_shared_pools_each_get_their_own_y";
    let flags = SHARED_IN_PLACE;
    let Some((app, a, id)) = with_matrix_on(test, flags, (700, 900, 13)).await else {
        return;
    };
    for p in ["f64", "f32"] {
        let calls: Vec<_> = (0..6)
            .map(|k| {
                let (app, id, a) = (app.clone(), id.clone(), a.clone());
                let p = p.to_string();
                tokio::spawn(async move {
                    let x = random_x(a.ncols(), 100 + k);
                    let body = chunked(&le_bytes(&x, &p), &ODD);
                    let r = send(&app, x_request(&id, &p, body, true, k % 2 == 0)).await;
                    check(&a, &x, &y_from(&r, &p, true), &p);
                })
            })
            .collect();
        for c in calls {
            c.await.unwrap();
        }
        let x = random_x(a.ncols(), 120);
        let r = send(
            &app,
            x_request(&id, p, chunked(&le_bytes(&x, p), &ODD), true, true),
        )
        .await;
        check(&a, &x, &y_from(&r, p, true), p);
        assert_eq!(r.headers["x-in-place"], "true", "{p}");
    }
}

/// A body half sent holds the matrix's x buffer while another whole call
/// on the same matrix runs (with a buffer of its own) and answers; then
/// the slow one finishes; both y checked.
async fn slow_body_beside_a_quick_one(test: &str, flags: &[&str]) {
    let Some((app, a, id)) = with_matrix_on(test, flags, (256, 300, 12)).await else {
        return;
    };
    let (slow_x, quick_x) = (random_x(a.ncols(), 50), random_x(a.ncols(), 51));
    let bytes = le_bytes(&slow_x, "f64");
    let (tx, rx) = tokio::sync::mpsc::channel::<Vec<u8>>(4);
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|c| (Ok::<_, Infallible>(Bytes::from(c)), rx))
    });
    let slow = Request::post(format!("/spmv?matrix_id={id}&precision=f64"))
        .header("content-type", "application/octet-stream")
        .header("accept", "application/octet-stream")
        .body(Body::from_stream(stream))
        .unwrap();
    let app2 = app.clone();
    let slow = tokio::spawn(async move { send(&app2, slow).await });
    // Half of x (cut inside a value), then another whole call on the same matrix.
    tx.send(bytes[..1203].to_vec()).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let r = send(
        &app,
        x_request(
            &id,
            "f64",
            chunked(&le_bytes(&quick_x, "f64"), &ODD),
            true,
            false,
        ),
    )
    .await;
    check(&a, &quick_x, &y_from(&r, "f64", true), "f64");
    tx.send(bytes[1203..].to_vec()).await.unwrap();
    drop(tx);
    let r = slow.await.unwrap();
    check(&a, &slow_x, &y_from(&r, "f64", true), "f64");
}

/// A matrix wide enough that x comes in many chunks in both precisions
/// (f32: 1.2 MB, f64: 2.4 MB).
const WIDE: (usize, usize) = (300, 300_000);

/// Chunk sizes for a wide x: values split across chunks.
const WIDE_CHUNKS: [usize; 5] = [1, 100_003, 7, 262_147, 5];

/// (the part of x's upload after its last byte, all of it) from a binary answer.
fn upload_split(r: &Resp) -> (f64, f64) {
    let h = |k: &str| -> f64 {
        r.headers
            .get(k)
            .unwrap_or_else(|| panic!("no {k}"))
            .to_str()
            .unwrap()
            .parse()
            .unwrap()
    };
    (h("x-upload-x-after-ms"), h("x-upload-x-ms"))
}

#[tokio::test]
async fn a_wide_x_is_uploaded_whole_after_its_last_byte() {
    let test = "a_wide_x_is_uploaded_whole_after_its_last_byte";
    let flags = &["--no-database"];
    let Some((app, a, id)) = with_matrix_on(test, flags, (WIDE.0, WIDE.1, 65)).await else {
        return;
    };
    for p in ["f64", "f32"] {
        let x = random_x(a.ncols(), 66);
        let r = send(&app, paced_x_request(&id, p, &le_bytes(&x, p), true, true)).await;
        check(&a, &x, &y_from(&r, p, true), p);
        let (after, all) = upload_split(&r);
        assert_eq!(after, all, "{p}: all of x's upload comes after it arrived");
    }
}
