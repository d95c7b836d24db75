//! `POST /matrices/{id}/solve`: an iterative solve of A x = b on the device,
//! every product by the matrix's plan, the vectors kept on the device.

use super::*;
use engine::solve::{SolveOptions, Stop};

/// The largest `maxiter` a request may ask for.
const MAX_ITER: usize = 100_000;

/// Solve A x = b on the device for an uploaded matrix.
///
/// Conjugate gradients (`method: cg`, for symmetric positive definite
/// matrices), optionally with Jacobi preconditioning. The vectors stay on the
/// device; every product runs the matrix's plan (uploaded first when it is not
/// on the device). The request's deadline (--request-timeout-s) stops the
/// iterations with what they have (`stop: deadline`). A non-square matrix, b
/// or x0 of the wrong length or with non-finite values, an unknown method or
/// preconditioner, a zero diagonal with Jacobi, and a breakdown (CG on a
/// matrix that is not positive definite: the message says at which
/// iteration) are 422.
#[utoipa::path(
    post,
    path = "/matrices/{id}/solve",
    tag = "matrices",
    params(("id" = String, Path, description = "The id returned by POST /matrices")),
    request_body(content = api::SolveRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The solve", body = api::SolveAnswer),
        (status = 400, description = "invalid_json: a missing or unknown field, or a value of the wrong kind", body = api::ErrorBody),
        (status = 404, description = "matrix_not_found: never uploaded, deleted, evicted, or another API key's", body = api::ErrorBody),
        (status = 422, description = "not square, wrong lengths, non-finite values, unknown method or preconditioner, a zero diagonal with Jacobi, or a breakdown (with its iteration)", body = api::ErrorBody),
        (status = 503, description = "no_device, busy, queue_full, device_error, device_recovering or device_deadline (Retry-After); the iterations themselves stop before the deadline with stop: deadline", body = api::ErrorBody),
        api::BodyErrors,
    ),
)]
pub async fn solve(c: UploadedCall<api::SolveRequest>) -> Result<Json<api::SolveAnswer>, ApiError> {
    let (s, m, req) = (&c.caller.s, c.m, c.body);
    let id = m.id.clone();
    let (opts, jacobi) = check_solve(&req, &m.host)?;
    let p = req.precision.unwrap_or(Precision::DEFAULT);
    // The iterations stop a little before the request's deadline, so the
    // answer (with what they have) still reaches the client.
    let secs = s.config().request_timeout_s as f64 * 0.9;
    let deadline =
        (secs > 0.0).then(|| std::time::Instant::now() + std::time::Duration::from_secs_f64(secs));
    let opts = SolveOptions { deadline, ..opts };
    let (ready, created) = s.ensure_ready(&m, p).await?;
    let (r2, b, x0) = (ready.clone(), req.b, req.x0);
    let solved = s
        .on_device_at(Some(ready.generation), move |e, _| {
            let bufs = &r2.buffers;
            e.solve_cg_any(&bufs.matrix, &bufs.plan, &b, x0.as_deref(), &opts)
                .map_err(|err| match err {
                    engine::EngineError::InvalidPlan(why) => ApiError::Unprocessable(why),
                    other => other.into(),
                })
        })
        .await?;
    s.metrics().solve(solved.iterations, solved.stop.name());
    if let Stop::Breakdown { iteration, why } = &solved.stop {
        return Err(ApiError::Unprocessable(format!(
            "{} broke down at iteration {iteration}: {why}",
            req.method
        )));
    }
    Ok(Json(api::SolveAnswer {
        matrix_id: id,
        method: req.method,
        preconditioner: if jacobi { "jacobi" } else { "none" }.into(),
        precision: p,
        converged: solved.stop == Stop::Converged,
        stop: solved.stop.name().into(),
        x: solved.x,
        iterations: solved.iterations,
        residuals: solved.residuals,
        device_ms: solved.device_ms,
        setup_ms: created.then_some(ready.setup_ms),
    }))
}

/// The request's options, or a 422 saying what is wrong with it.
fn check_solve(req: &api::SolveRequest, a: &Csr<f64>) -> Result<(SolveOptions, bool), ApiError> {
    let bad = |why: String| Err(ApiError::Unprocessable(why));
    if req.method != "cg" {
        return bad(format!("unknown method '{}': use cg", req.method));
    }
    if a.nrows() != a.ncols() {
        return bad(format!(
            "a solve needs a square matrix; this one is {}x{}",
            a.nrows(),
            a.ncols()
        ));
    }
    for (what, v) in [("b", Some(&req.b)), ("x0", req.x0.as_ref())] {
        let Some(v) = v else { continue };
        if v.len() != a.nrows() {
            return bad(format!(
                "{what} has {} entries but the matrix has {} rows",
                v.len(),
                a.nrows()
            ));
        }
        if let Some(i) = v.iter().position(|e| !e.is_finite()) {
            return Err(ApiError::NonFinite(format!("{what}[{i}] is not finite")));
        }
    }
    let tol = req.tol.unwrap_or(1e-8);
    if !(tol > 0.0 && tol.is_finite()) {
        return bad(format!("tol must be a finite number above 0, not {tol}"));
    }
    let maxiter = req.maxiter.unwrap_or(1000);
    if maxiter > MAX_ITER {
        return bad(format!(
            "maxiter is {maxiter}, over the limit of {MAX_ITER}"
        ));
    }
    let jacobi = match req.preconditioner.as_deref().unwrap_or("none") {
        "none" => false,
        "jacobi" => true,
        other => {
            return bad(format!(
                "unknown preconditioner '{other}': use none or jacobi"
            ))
        }
    };
    Ok((
        SolveOptions {
            tol,
            maxiter,
            jacobi,
            deadline: None,
        },
        jacobi,
    ))
}
