//! The readiness SpMV: a tiny matrix run on the device and checked against the
//! reference, used by `/readyz` and to check a rebuilt engine before it serves.

use crate::domain::error::ApiError;
use engine::Engine;
use sparse::spmv::{compare, spmv_ref};
use sparse::{Csr, KernelId};
use std::time::Instant;

/// A 3x3 matrix with an empty row and a cancellation, on the serial kernel;
/// also how a rebuilt engine is checked before it serves.
pub fn probe(engine: &Engine) -> Result<f64, ApiError> {
    let t = Instant::now();
    let a = Csr::<f64>::from_triplets(3, 3, &[0, 0, 2, 2], &[0, 2, 1, 2], &[2.0, -1.0, 3.0, 0.5])
        .map_err(ApiError::internal)?;
    let x = [1.0, 2.0, 4.0];
    let y_ref = spmv_ref(&a, &x).map_err(ApiError::internal)?;
    let m = engine.upload(&a)?;
    let pp = engine.prepare_kernel(&m, KernelId::Serial)?;
    let (y, _) = engine.execute(&m, &pp, &x)?;
    let c = compare(&a, &x, &y, &y_ref);
    if !c.ok() {
        return Err(ApiError::DeviceFault(format!(
            "the readiness SpMV gave {y:?} instead of {y_ref:?}"
        )));
    }
    Ok(t.elapsed().as_secs_f64() * 1e3)
}
