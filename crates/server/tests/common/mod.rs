//! Helpers shared by the server's integration tests: one OpenCL device per test
//! binary (PoCL here), apps with an in-memory database, requests through
//! `oneshot`, and matrices in every body format.
#![allow(dead_code)]

pub mod process;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Request, StatusCode};
use axum::Router;
use clap::Parser;
use serde_json::Value;
use server::{app, AppState, Config, DeviceState, Planner};
use sparse::Csr;
use std::path::PathBuf;
use std::sync::OnceLock;
use store::testing::missing;
use tower::ServiceExt;

/// A PoCL CPU of the shipped CPU models' class (x86-64, AVX-512), from
/// another vendor than theirs.
pub fn xeon() -> selector::DeviceIdentity {
    selector::DeviceIdentity::new(
        "pthread-skylake-avx512-Intel(R) Xeon(R) Processor",
        "GenuineIntel",
        "6.0",
        "cpu",
    )
}

/// Holds the device worker with a job that waits until `release` is sent on
/// (or dropped); returns once the job is in flight, with its handle.
pub async fn hold_worker(
    state: &AppState,
) -> (
    std::sync::mpsc::Sender<()>,
    tokio::task::JoinHandle<Result<Option<()>, server::ApiError>>,
) {
    let (release, wait) = std::sync::mpsc::channel::<()>();
    let s2 = state.clone();
    let busy = tokio::spawn(async move { s2.queue().run(move |_| wait.recv().ok()).await });
    while state.queue().in_flight() == 0 {
        tokio::task::yield_now().await;
    }
    (release, busy)
}

/// The device, opened once per test binary (opening and measuring bandwidth is slow).
pub fn device() -> DeviceState {
    static DEV: OnceLock<DeviceState> = OnceLock::new();
    DEV.get_or_init(|| DeviceState::open(None)).clone()
}

/// Whether device tests can run; prints why not when they cannot. Only a machine
/// without any OpenCL platform skips (CI always has PoCL).
pub fn have_device(test: &str) -> bool {
    let d = device();
    if d.engine.is_none() {
        let reason = d.unavailable.unwrap_or_default();
        assert!(
            reason.contains("no OpenCL platform"),
            "an OpenCL platform exists but no device could be opened: {reason}"
        );
        missing(
            &format!("an OpenCL device for {test} ({reason})"),
            &format!("SKIP {test}: no OpenCL platform ({reason})"),
        );
        return false;
    }
    true
}

/// An app on the shared device ([`test_app`] with `flags`) for the device test
/// `test`, or `None` where there is no OpenCL platform ([`have_device`]: the
/// test then skips with the reason printed, or fails under CI).
pub async fn device_app(test: &str, flags: &[&str]) -> Option<(Router, AppState)> {
    if !have_device(test) {
        return None;
    }
    Some(test_app(flags).await)
}

/// The workspace's models folder.
pub fn models_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models")
}

/// A configuration with the defaults and the given flags.
pub fn config(flags: &[&str]) -> Config {
    let mut args = vec!["server"];
    args.extend_from_slice(flags);
    if !flags.contains(&"--id-secret") {
        args.extend_from_slice(&["--id-secret", TEST_ID_SECRET]);
    }
    Config::parse_from(args)
}

/// The id secret of test apps (unless a test gives its own), so that tests
/// can compute the id an upload without an API key gets.
pub const TEST_ID_SECRET: &str = "0101010101010101010101010101010101010101010101010101010101010101";

/// The id of `a` uploaded without an API key to a test app.
pub fn matrix_id(a: &Csr<f64>) -> String {
    server::auth::matrix_id(&[1u8; 32], "", &a.content_hash())
}

/// An app on the shared device, an in-memory database and the shipped models
/// (the rule baseline where none matches).
/// Flags that configure the engine (`--binary-staging`, `--in-place-min-bytes`,
/// ...) get a device of their own, opened with them; the others share one.
pub async fn test_app(flags: &[&str]) -> (Router, AppState) {
    let engine = config(flags).engine_config();
    let device = if engine == config(&[]).engine_config() {
        device()
    } else {
        tokio::task::spawn_blocking(move || DeviceState::open_with(&engine))
            .await
            .expect("opening the device")
    };
    test_app_with(flags, device).await
}

/// An app on the given device.
pub async fn test_app_with(flags: &[&str], device: DeviceState) -> (Router, AppState) {
    let cfg = config(flags);
    let device = if cfg.no_device {
        DeviceState::none("disabled by --no-device")
    } else {
        device
    };
    let planner = Planner::load(&models_dir(), device.identity().as_ref());
    app_with_planner(cfg, device, planner).await
}

/// An app on the given device and planner, with an in-memory database
/// (none with `--no-database`: uploads then live in the cache only).
pub async fn app_with_planner(
    cfg: Config,
    device: DeviceState,
    planner: Planner,
) -> (Router, AppState) {
    let store = if cfg.no_database {
        None
    } else {
        Some(
            store::Store::open_in_memory()
                .await
                .expect("in-memory database"),
        )
    };
    let state = AppState::new(cfg, device, planner, store);
    (app(state.clone()), state)
}

/// A response, read whole.
pub struct Resp {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Resp {
    /// The body as JSON (panics with the body when it is not).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    /// Asserts a 200 answer (`what` and the body in the failure message); gives
    /// its JSON.
    pub fn json_ok(&self, what: &str) -> Value {
        let body = String::from_utf8_lossy(&self.body);
        assert_eq!(self.status, 200, "{what}: {body}");
        self.json()
    }

    /// Asserts an error answer with `status` and error code `code` (the body
    /// in the failure message); gives the error message.
    pub fn error_of(&self, status: u16, code: &str) -> String {
        let body = String::from_utf8_lossy(&self.body);
        assert_eq!(self.status.as_u16(), status, "{body}");
        let (c, message) = self.error();
        assert_eq!(c, code, "{body}");
        message
    }

    /// The error code and message of an error body.
    pub fn error(&self) -> (String, String) {
        let v = self.json();
        (
            v["error"]["code"]
                .as_str()
                .unwrap_or_else(|| panic!("no error code in {v}"))
                .to_string(),
            v["error"]["message"]
                .as_str()
                .unwrap_or_else(|| panic!("no error message in {v}"))
                .to_string(),
        )
    }
}

/// Waits until the device queue holds no job, failing with `stuck` after `within`.
pub async fn queue_empties(state: &AppState, within: std::time::Duration, stuck: &str) {
    let t = std::time::Instant::now();
    while state.queue().in_flight() != 0 {
        assert!(t.elapsed() < within, "{stuck}");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// Sends a request through the app without a socket.
pub async fn send(app: &Router, req: Request<Body>) -> Resp {
    let resp = app
        .clone()
        .oneshot(req)
        .await
        .expect("the router never fails");
    let status = resp.status();
    let headers = resp.headers().clone();
    let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .expect("body");
    Resp {
        status,
        headers,
        body,
    }
}

/// `POST uri` with a content type and body.
pub fn post(uri: &str, content_type: &str, body: impl Into<Body>) -> Request<Body> {
    Request::post(uri)
        .header("content-type", content_type)
        .body(body.into())
        .unwrap()
}

/// A POST of a JSON body.
pub fn post_json(uri: &str, v: Value) -> Request<Body> {
    post(uri, "application/json", v.to_string())
}

/// `GET uri`.
pub fn get(uri: &str) -> Request<Body> {
    Request::get(uri).body(Body::empty()).unwrap()
}

/// A seeded random matrix with some empty rows and some long rows.
pub fn random_matrix(nrows: usize, ncols: usize, seed: u64) -> Csr<f64> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let (mut r, mut c, mut v) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..nrows {
        let len = match rng.gen_range(0..10) {
            0 => 0,
            1 => rng.gen_range(20..ncols.clamp(21, 200)),
            _ => rng.gen_range(1..6),
        };
        for _ in 0..len {
            r.push(i as u32);
            c.push(rng.gen_range(0..ncols) as u32);
            v.push(rng.gen_range(-1.0..1.0));
        }
    }
    Csr::from_triplets(nrows, ncols, &r, &c, &v).unwrap()
}

/// A seeded x.
pub fn random_x(n: usize, seed: u64) -> Vec<f64> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0x5eed);
    (0..n).map(|_| rng.gen_range(-2.0..2.0)).collect()
}

/// A random `nrows` x `ncols` matrix and an x of its width, from one seed.
pub fn random_problem(nrows: usize, ncols: usize, seed: u64) -> (Csr<f64>, Vec<f64>) {
    (random_matrix(nrows, ncols, seed), random_x(ncols, seed))
}

/// The matrix as Matrix Market text.
pub fn mm_text(a: &Csr<f64>) -> String {
    let mut out = Vec::new();
    sparse::mm::write(a, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

/// The matrix as gzip-compressed Matrix Market.
pub fn mm_gzip(a: &Csr<f64>) -> Vec<u8> {
    use std::io::Write;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(mm_text(a).as_bytes()).unwrap();
    enc.finish().unwrap()
}

/// The matrix as a JSON CSR object.
pub fn csr_json(a: &Csr<f64>) -> Value {
    serde_json::json!({
        "nrows": a.nrows(),
        "ncols": a.ncols(),
        "row_ptr": a.row_ptr(),
        "col_idx": a.col_idx(),
        "values": a.values(),
    })
}

/// Checks y against the reference SpMV in precision `T` (tolerance scaled by
/// row length and precision).
pub fn check_y<T: sparse::Scalar>(a: &Csr<f64>, x: &[f64], y: &[f64]) {
    let at = a.cast::<T>();
    let xt: Vec<T> = x.iter().map(|&v| T::from_f64(v)).collect();
    let yt: Vec<T> = y.iter().map(|&v| T::from_f64(v)).collect();
    let r = sparse::spmv::spmv_ref(&at, &xt).unwrap();
    let c = sparse::spmv::compare(&at, &xt, &yt, &r);
    assert!(c.ok(), "y differs from the reference in {}: {c:?}", T::NAME);
}

/// y from a JSON /spmv answer.
pub fn y_of(v: &Value) -> Vec<f64> {
    v["y"]
        .as_array()
        .unwrap_or_else(|| panic!("no y in {v}"))
        .iter()
        .map(|e| e.as_f64().unwrap())
        .collect()
}

/// Uploads `a` as Matrix Market text (201) and returns its id.
pub async fn upload(app: &Router, a: &Csr<f64>) -> String {
    let r = send(app, post("/matrices", "text/plain", mm_text(a))).await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    r.json()["id"].as_str().unwrap().to_string()
}
