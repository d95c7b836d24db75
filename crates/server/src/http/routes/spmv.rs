//! `POST /spmv`: y = A x on the device, for an uploaded or an inline matrix.

use super::*;
use crate::http::api::Verification;
use crate::http::openapi::{BinaryCsrDoc, BinaryVectorDoc, SpmvFormDoc, SpmvJsonDoc, SpmvParams};

/// Refuses (422, naming the first bad row) a y that JSON cannot carry: an
/// overflow to infinity or a NaN (from infinity times zero) would come out as
/// `null`. Binary y carries such values as they are.
fn check_json_y(y: &YVec) -> Result<(), ApiError> {
    fn first<T: Scalar>(y: &[T]) -> Option<(usize, f64)> {
        y.iter()
            .position(|v| !v.is_finite())
            .map(|i| (i, y[i].to_f64()))
    }
    let bad = match y {
        YVec::F32(y) => first(y),
        YVec::F64(y) => first(y),
        YVec::Bytes(_) => None,
    };
    match bad {
        Some((row, v)) => Err(ApiError::NonFiniteResult {
            row,
            value: format!("{v:?}"),
        }),
        None => Ok(()),
    }
}

/// How y compares with the reference SpMV.
fn verify_y(a: &Csr<f64>, x: &[f64], y: &YVec) -> Result<Verification, ApiError> {
    fn typed<T: Scalar>(a: &Csr<f64>, x: &[f64], y: &[T]) -> Result<Verification, ApiError> {
        let at = a.cast::<T>();
        let xt: Vec<T> = x.iter().map(|&v| T::from_f64(v)).collect();
        let r = spmv_ref(&at, &xt)?;
        let c = compare(&at, &xt, y, &r);
        Ok(Verification {
            ok: c.ok(),
            max_rel_err: c.max_rel_err,
            worst_bound_ratio: c.worst_bound_ratio,
            worst_row: c.worst_row,
            reference: "sparse::spmv::spmv_ref",
        })
    }
    match y {
        YVec::F32(y) => typed::<f32>(a, x, y),
        YVec::F64(y) => typed::<f64>(a, x, y),
        YVec::Bytes(_) => Err(ApiError::internal("y was encoded before verification")),
    }
}

/// y = A x on the device.
///
/// The matrix is inline (JSON {"matrix": "<Matrix Market>" or CSR object, "x":
/// [...]}, top-level CSR fields beside x, binary CSR with x, or multipart/form-data
/// with 'matrix' and 'x' parts) or uploaded (JSON {"matrix_id", "x"}, or
/// application/octet-stream little-endian x with ?matrix_id=). y comes back as
/// JSON, or as little-endian binary with Accept: application/octet-stream (timings
/// then in the x-* headers; the plan kept by tuning in x-tuned).
///
/// A full device queue answers 503 queue_full with Retry-After; a request whose
/// deadline (--request-timeout-s) passes while its device job waits answers 503
/// device_deadline (the job is dropped without running; one already running
/// finishes and its result is discarded); after an OpenCL error (503
/// device_error) the device is rebuilt, and until it is up again device work
/// answers 503 device_recovering with Retry-After (uploaded matrices are kept and
/// re-uploaded on their next use). An uploaded matrix this replica has not
/// cached is read from the shared database; each use of a cached one checks its
/// database row still exists (a delete on any replica answers 404 everywhere); a
/// failing database answers 503 database_unavailable.
#[utoipa::path(
    post,
    path = "/spmv",
    tag = "spmv",
    params(SpmvParams),
    request_body(
        description = "application/vnd.spmv-select.csr: the matrix and x in one binary body (flag bit 0 set, x after the values); precision and verify from the query. application/octet-stream: x as little-endian f32 or f64 (by precision) for ?matrix_id=.",
        content(
            (SpmvJsonDoc = "application/json"),
            (SpmvFormDoc = "multipart/form-data"),
            (BinaryVectorDoc = "application/octet-stream"),
            (BinaryCsrDoc = "application/vnd.spmv-select.csr"),
        ),
    ),
    responses(
        (status = 200, description = "y and how it was computed: JSON, or binary y (Accept: application/octet-stream) with the figures in x-* headers",
            content(
                (api::SpmvResult = "application/json"),
                (BinaryVectorDoc = "application/octet-stream"),
            ),
            headers(
                ("x-matrix-id" = String, description = "Binary y: the matrix id"),
                ("x-precision" = String, description = "Binary y: f32 or f64 (the width of each value of y)"),
                ("x-kernel-ms" = f64, description = "Binary y: device kernel time (OpenCL profiling)"),
                ("x-device-ms" = f64, description = "Binary y: x upload + kernels + y download"),
                ("x-upload-x-ms" = f64, description = "Binary y: x upload (OpenCL profiling)"),
                ("x-upload-x-after-ms" = f64, description = "Binary y: the part of x's upload after its last byte arrived (x is uploaded whole once it has all arrived, so this equals x-upload-x-ms)"),
                ("x-download-y-ms" = f64, description = "Binary y: y download (OpenCL profiling)"),
                ("x-in-place" = bool, description = "Binary y: whether the kernels read x and wrote y where the request and the answer hold them (shared host pools, by default on a CPU device): no copy of either; x-upload-x-ms and x-download-y-ms are then the unmap of x and the map of y"),
                ("x-server-ms" = f64, description = "Binary y: the whole request inside the server"),
                ("x-read-ms" = f64, description = "Binary y: receiving and parsing the request body (binary x by matrix_id on a device: received straight into the buffer x's upload reads, each value checked as it arrives; a first use's set-up not counted)"),
                ("x-gbps" = f64, description = "Binary y: minimum bytes of one SpMV / kernel time"),
                ("x-plan-scheme" = String, description = "Binary y: the plan's scheme (single or U)"),
                ("x-expected-calls" = u64, description = "Binary y: the calls the plan was chosen for"),
                ("x-planning" = String, description = "Binary y: the chosen candidate (planning.chosen)"),
                ("x-model" = String, description = "Binary y: the id of the selector that planned"),
                ("x-model-match" = String, description = "Binary y: exact, same_class, same_type or none"),
                ("x-tuned" = String, description = "Binary y, tuned uploads only: the plan the race kept"),
                ("x-verified" = bool, description = "Binary y with verify=true: whether y matched the reference"),
            )),
        (status = 400, description = "invalid_json, invalid_matrix_market, invalid_binary_csr, or bad_request (an unknown query parameter, a field given twice with different values, binary x of a length that is not a whole number of values)", body = api::ErrorBody),
        (status = 404, description = "matrix_not_found: no uploaded matrix with this id for this caller", body = api::ErrorBody),
        api::BodyErrors,
        (status = 413, description = "too_large: the body, a multipart part or the declared sizes over the limits", body = api::ErrorBody),
        (status = 422, description = "x_length, invalid_matrix, non_finite, unprocessable (such as a missing x), unsupported_precision, or non_finite_result (a y JSON cannot carry; ask for binary y)", body = api::ErrorBody),
        (status = 503, description = "no_device, busy, overloaded, queue_full, device_error, device_recovering, device_deadline (with Retry-After), or database_unavailable", body = api::ErrorBody),
        (status = 507, description = "insufficient_device_memory: the matrix and vectors do not fit the device", body = api::ErrorBody),
    ),
)]
pub async fn spmv(r: SpmvCall) -> Result<Response, ApiError> {
    let SpmvCall {
        caller,
        headers,
        req,
        mut held,
    } = r;
    let Caller { s, who, .. } = &caller;
    let prepared = match &req.source {
        Source::Ready(_, setup) => *setup,
        _ => None,
    };
    // (binary x received for an uploaded matrix: less a first use's set-up)
    let read_ms = caller.ms() - prepared.unwrap_or(0.0);
    let p = req.precision;
    let x = Arc::new(req.x);
    let (m, cached) = spmv_matrix(s, who, req.source, req.expected_calls).await?;
    // x and y, and for a matrix used for this call only its device buffers
    // (host memory on a CPU device), count against the memory budget.
    let once = if cached { 0 } else { device_bytes(&m.host, p) };
    let binary_y = wants_binary(&headers);
    let bytes_y = binary_y && !req.verify;
    held.grow_by(spmv_estimate(m.host.nrows(), m.host.ncols(), binary_y) + once)
        .await?;
    check_x(s, &x, &m, p).await?;
    s.check_device_fit(&m.host, p)?;
    let solve = Solve {
        s,
        m: &m,
        p,
        x: &x,
        bytes_y,
    };
    let (planned, exec, setup_ms) = solve.run(cached).await?;
    let setup_ms = setup_ms.or(prepared);
    let kernel_ms = exec.timings.kernel_ms();
    s.metrics()
        .spmv(p.name(), kernel_ms * 1e-3, exec.timings.wall_ms() * 1e-3);
    let (verify, y) = if req.verify {
        let (v, y) = verify_on_host(&m, p, &x, exec.y).await?;
        (Some(v), y)
    } else {
        (None, exec.y)
    };
    if !binary_y {
        check_json_y(&y)?;
    }
    let server_ms = caller.ms();
    caller.log("/spmv", &m, &planned, p, Some(kernel_ms), server_ms, 200);
    let done = SpmvDone {
        m,
        cached,
        p,
        planned,
        timings: exec.timings,
        launches: exec.launches,
        setup_ms,
        read_ms,
        server_ms,
        verify,
    };
    if binary_y {
        binary_answer(done, y).await
    } else {
        json_answer(done, y).await
    }
}

/// The matrix of an /spmv request: an uploaded one, an inline one already
/// uploaded (same content hash), or an inline one for this call only
/// (expected to be multiplied `calls` times, once by default); and whether
/// it is in the cache.
async fn spmv_matrix(
    s: &AppState,
    who: &Principal,
    source: Source,
    calls: Option<u64>,
) -> Result<(Arc<StoredMatrix>, bool), ApiError> {
    Ok(match source {
        Source::Ready(m, _) => (m, true),
        Source::Id(id) => match s.resolve(&id, who, true).await? {
            Some(m) => (m, true),
            None => return Err(ApiError::NotFound(id)),
        },
        Source::Transposed(id) => match s.resolve_transposed(&id, who).await? {
            Some(m) => (m, true),
            None => return Err(ApiError::NotFound(id)),
        },
        Source::Inline(a) => {
            let (s2, who2) = (s.clone(), who.clone());
            let (m, _) = blocking(move || stored_from(&s2, &who2, *a, 0.0, false)).await?;
            let m = m.with_expected_calls(calls.unwrap_or(1));
            // A cached copy only if its upload still exists; never loaded
            // from the database, since the request carries the matrix.
            match s.resolve(&m.id, who, false).await? {
                Some(c) => (c, true),
                None => (Arc::new(m), false),
            }
        }
    })
}

/// x's length, and without a device its values too (a 4xx rather than the 503
/// that follows); with one, the conversion on the device worker checks the
/// values once, on the way into the staging buffer.
async fn check_x(
    s: &AppState,
    x: &Arc<XIn>,
    m: &StoredMatrix,
    p: Precision,
) -> Result<(), ApiError> {
    let ncols = m.host.ncols();
    if x.len() != ncols {
        return Err(ApiError::XLength {
            expected: ncols,
            found: x.len(),
        });
    }
    if s.device().available() {
        return Ok(());
    }
    let x2 = x.clone();
    blocking(move || match p {
        Precision::F32 => x2.fill(&mut vec![0f32; ncols]),
        Precision::F64 => x2.fill(&mut vec![0f64; ncols]),
    })
    .await?;
    let why = s.device().unavailable.clone().unwrap_or_default();
    Err(ApiError::NoDevice(why))
}

/// Compares y with the reference SpMV on the host (off the runtime).
async fn verify_on_host(
    m: &Arc<StoredMatrix>,
    p: Precision,
    x: &Arc<XIn>,
    y: YVec,
) -> Result<(Verification, YVec), ApiError> {
    let (m2, x2) = (m.clone(), x.clone());
    let (v, y) = blocking(move || {
        let v = verify_y(&m2.host, &x2.to_values(), &y)?;
        Ok((v, y))
    })
    .await?;
    if !v.ok {
        tracing::error!(id = %m.id, precision = %p, report = ?v, "device y differs from the reference SpMV");
    }
    Ok((v, y))
}

/// What an /spmv answer reports besides y.
struct SpmvDone {
    m: Arc<StoredMatrix>,
    cached: bool,
    p: Precision,
    planned: Arc<Planned>,
    timings: engine::Timings,
    launches: usize,
    setup_ms: Option<f64>,
    read_ms: f64,
    server_ms: f64,
    verify: Option<Verification>,
}

impl SpmvDone {
    fn min_bytes(&self) -> u64 {
        let h = &self.m.host;
        engine::min_bytes(h.nrows(), h.ncols(), h.nnz(), self.p.bytes())
    }

    fn gbps(&self) -> f64 {
        if self.timings.kernel_ns > 0 {
            self.min_bytes() as f64 / self.timings.kernel_ns as f64
        } else {
            0.0
        }
    }
}

/// y as little-endian bytes, the rest in `x-*` headers.
async fn binary_answer(d: SpmvDone, y: YVec) -> Result<Response, ApiError> {
    let bytes = match y {
        YVec::Bytes(b) => b,
        YVec::F32(y) => blocking(move || Ok(y_binary(&y))).await?.into(),
        YVec::F64(y) => blocking(move || Ok(y_binary(&y))).await?.into(),
    };
    let mut resp = (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        )],
        bytes,
    )
        .into_response();
    let h = resp.headers_mut();
    let mut put = |k: &'static str, v: String| {
        if let Ok(v) = HeaderValue::from_str(&v) {
            h.insert(k, v);
        }
    };
    let t = &d.timings;
    put("x-matrix-id", d.m.id.clone());
    put("x-precision", d.p.name().into());
    put("x-kernel-ms", t.kernel_ms().to_string());
    put("x-device-ms", t.wall_ms().to_string());
    put("x-upload-x-ms", t.upload_x_ms().to_string());
    put("x-upload-x-after-ms", t.upload_x_after_ms().to_string());
    put("x-download-y-ms", t.download_y_ms().to_string());
    put("x-in-place", t.in_place.to_string());
    put("x-server-ms", d.server_ms.to_string());
    put("x-read-ms", d.read_ms.to_string());
    put("x-gbps", d.gbps().to_string());
    put("x-plan-scheme", d.planned.plan.scheme.to_string());
    put(
        "x-expected-calls",
        d.planned.planning.expected_calls.to_string(),
    );
    put("x-planning", d.planned.planning.chosen.to_string());
    put("x-model", d.planned.model.id.clone());
    if let Some(t) = &d.planned.tuning {
        put("x-tuned", t.chosen.clone());
    }
    put("x-model-match", d.planned.model.match_level.as_str().into());
    if let Some(v) = &d.verify {
        put("x-verified", v.ok.to_string());
    }
    Ok(resp)
}

/// The JSON answer, built off the runtime (y can be large): y is written
/// straight from its array, with no JSON value per element.
async fn json_answer(d: SpmvDone, y: YVec) -> Result<Response, ApiError> {
    let body = blocking(move || {
        let y = match &y {
            YVec::F32(y) => api::YJson::F32(y),
            YVec::F64(y) => api::YJson::F64(y),
            YVec::Bytes(_) => {
                return Err(ApiError::internal(
                    "y was encoded as bytes for a JSON answer",
                ))
            }
        };
        let t = &d.timings;
        let plan = PlanView::of(&d.planned.plan, &d.planned.binning);
        let answer = api::SpmvResult {
            matrix_id: &d.m.id,
            matrix: MatrixSummary::of(&d.m),
            precision: d.p,
            uploaded: d.cached,
            plan: &plan,
            model: &d.planned.model,
            planning: &d.planned.planning,
            tuning: d.planned.tuning.as_ref(),
            launches: d.launches,
            timings_ms: api::SpmvTimings {
                kernel: t.kernel_ms(),
                upload_x: t.upload_x_ms(),
                upload_x_after: t.upload_x_after_ms(),
                download_y: t.download_y_ms(),
                device: t.wall_ms(),
                setup: d.setup_ms,
                read: d.read_ms,
                server: d.server_ms,
            },
            gbps: d.gbps(),
            min_bytes: d.min_bytes(),
            verify: d.verify.clone(),
            y,
        };
        serde_json::to_vec(&answer).map_err(ApiError::internal)
    })
    .await?;
    Ok((
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response())
}
