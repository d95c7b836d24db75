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
    path = "/matrices/{id}/spmm",
    tag = "spmv",
    params(("id" = String, Path, description = "The id returned by POST /matrices")),
    request_body(content = api::SpmmRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The k products", body = api::SpmmAnswer),
        (status = 400, description = "malformed JSON", body = api::ErrorBody),
        (status = 404, description = "matrix_not_found", body = api::ErrorBody),
        (status = 422, description = "no vectors, too many, one of the wrong length, or non-finite values", body = api::ErrorBody),
        (status = 503, description = "no device, busy, recovering, or past the deadline (Retry-After)", body = api::ErrorBody),
    ),
)]
pub async fn spmm(
    State(s): State<AppState>,
    Extension(who): Extension<Principal>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<Json<api::SpmmAnswer>, ApiError> {
    let req: api::SpmmRequest =
        serde_json::from_slice(&body).map_err(|e| ApiError::Json(e.to_string()))?;
    let found = if req.transpose {
        s.resolve_transposed(&id, &who).await?
    } else {
        s.resolve(&id, &who, true).await?
    };
    let m = found.ok_or_else(|| ApiError::NotFound(id.clone()))?;
    let (n, k) = (m.host.ncols(), req.x.len());
    if k == 0 || k > MAX_K {
        return Err(ApiError::Unprocessable(format!(
            "x holds {k} vectors: give 1 to {MAX_K}"
        )));
    }
    let mut rowmajor = vec![0.0; n * k];
    for (j, v) in req.x.iter().enumerate() {
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
            rowmajor[i * k + j] = e;
        }
    }
    let p = req.precision.unwrap_or(Precision::DEFAULT);
    let (ready, _) = s.ensure_ready(&m, p).await?;
    let r2 = ready.clone();
    let (y, device_ms) = s
        .on_device_at(Some(ready.generation), move |e, _| {
            let t = Instant::now();
            let y = e.spmm_any(&r2.buffers.matrix, &rowmajor, k)?;
            Ok((y, ms(t)))
        })
        .await?;
    let rows = m.host.nrows();
    let y = (0..k)
        .map(|j| (0..rows).map(|i| y[i * k + j]).collect())
        .collect();
    Ok(Json(api::SpmmAnswer {
        matrix_id: m.id.clone(),
        precision: p,
        y,
        device_ms,
    }))
}
