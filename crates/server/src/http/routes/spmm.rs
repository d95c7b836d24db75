//! `POST /matrices/{id}/spmm`: Y = A X for k vectors in one request, each
//! matrix entry read once per chunk of 64 vectors on the device.

use super::*;

/// The most vectors one request may carry.
const MAX_K: usize = 4096;

/// Multiply an uploaded matrix by k vectors at once.
///
/// The k vectors go to the device together and one SpMM kernel multiplies
/// them (chunks of 64 vectors per launch; each matrix entry is read once per
/// chunk), instead of k separate products. `transpose: true` multiplies by
/// Aᵀ (built once and cached, as `/spmv?transpose=true`). Vectors of the
/// wrong length, none, more than 4096 or non-finite values are 422.
#[utoipa::path(
    post,
    tag = "spmv",
    path = "/matrices/{id}/spmm",
    request_body(content = api::SpmmRequest, content_type = "application/json"),
    params(("id" = String, Path, description = "The id returned by POST /matrices (the products are of its transpose with transpose: true)")),
    responses(
        (status = 200, description = "The k products", body = api::SpmmAnswer),
        (status = 422, description = "no vectors, too many, one of the wrong length, or non-finite values", body = api::ErrorBody),
        (status = 404, description = "matrix_not_found: no uploaded matrix with this id for this caller", body = api::ErrorBody),
        api::BodyErrors,
        (status = 400, description = "invalid_json: the body is not {\"x\": [[...], ...]} with optional precision and transpose", body = api::ErrorBody),
        (status = 503, description = "no_device, busy, queue_full, device_error, device_recovering or device_deadline (Retry-After)", body = api::ErrorBody),
    ),
)]
pub async fn spmm(c: UploadedCall<api::SpmmRequest>) -> Result<Json<api::SpmmAnswer>, ApiError> {
    let (s, m) = (&c.caller.s, &c.m);
    let req = c.body;
    let (n, k, rows) = (m.host.ncols(), req.x.len(), m.host.nrows());
    if k == 0 || k > MAX_K {
        return Err(ApiError::Unprocessable(format!(
            "x holds {k} vectors: give 1 to {MAX_K}"
        )));
    }
    let p = req.precision.unwrap_or(Precision::DEFAULT);
    // Checking and interleaving X is O(n k): off the async threads.
    let rowmajor = blocking(move || row_major(&req.x, n)).await?;
    let (ready, _) = s.ensure_ready(m, p).await?;
    let r2 = ready.clone();
    let (y, device_ms) = s
        .on_device_at(Some(ready.generation), move |e, _| {
            let t = Instant::now();
            let y = e.spmm_any(&r2.buffers.matrix, &rowmajor, k)?;
            let device_ms = ms(t);
            let y = (0..k)
                .map(|j| (0..rows).map(|i| y[i * k + j]).collect())
                .collect();
            Ok((y, device_ms))
        })
        .await?;
    Ok(Json(api::SpmmAnswer {
        matrix_id: m.id.clone(),
        precision: p,
        y,
        device_ms,
    }))
}

/// The k vectors of `x` as one `n x k` row-major array, or a 422 naming the
/// first vector of the wrong length or the first non-finite value.
fn row_major(x: &[Vec<f64>], n: usize) -> Result<Vec<f64>, ApiError> {
    let k = x.len();
    let mut out = vec![0.0; n * k];
    for (j, v) in x.iter().enumerate() {
        if v.len() != n {
            return Err(ApiError::Unprocessable(format!(
                "vector {j} has {} entries but the matrix has {n} columns",
                v.len()
            )));
        }
        if let Some(i) = v.iter().position(|e| !e.is_finite()) {
            return Err(ApiError::NonFinite(format!("x[{j}][{i}] is not finite")));
        }
        for (i, &e) in v.iter().enumerate() {
            out[i * k + j] = e;
        }
    }
    Ok(out)
}
