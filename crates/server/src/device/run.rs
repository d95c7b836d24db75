//! A matrix on the device and y = A x there (both blocking, run on the device
//! worker): uploading with a prepared plan and host pools, the device bytes it
//! takes, executing with x as the request carried it, y as values or bytes.

use crate::device::pool::VectorPools;
use crate::device::vector::{y_binary, XIn};
use crate::domain::config::PoolKind;
use crate::domain::error::ApiError;
use engine::{AnyMatrix, AnyPlan, Engine, EngineError, LaunchMode, Timings, Values};
use sparse::{Binning, Csr, Plan, Precision, Scalar};

/// A matrix on the device with its prepared plan, in one precision.
pub struct DeviceBuffers {
    /// The matrix's device buffers.
    pub matrix: AnyMatrix,
    /// The prepared plan.
    pub plan: AnyPlan,
    /// Host buffers of x's body and y's answer, reused from call to call.
    pub pools: VectorPools,
}

/// y in the precision it was computed in.
pub enum YVec {
    /// Single precision.
    F32(Vec<f32>),
    /// Double precision.
    F64(Vec<f64>),
    /// Already little-endian bytes of the precision (binary answers that are
    /// not verified): read from the device straight into them, or encoded in
    /// one pass over y. A reused buffer goes back to its pool once sent.
    Bytes(axum::body::Bytes),
}

/// The result of one SpMV.
pub struct Executed {
    /// y.
    pub y: YVec,
    /// Device timings.
    pub timings: Timings,
    /// Kernel launches.
    pub launches: usize,
}

/// Device bytes of an uploaded matrix: CSR arrays, x, y, and the plan's row lists.
pub fn device_bytes(a: &Csr<f64>, p: Precision) -> u64 {
    engine::min_bytes(a.nrows(), a.ncols(), a.nnz(), p.bytes()) + 4 * (a.nrows() as u64 + 1)
}

/// The matrix in precision `T`, refusing values that are not finite there.
pub fn cast_checked<T: Scalar>(a: &Csr<f64>) -> Result<Csr<T>, ApiError> {
    let c = a.cast::<T>();
    c.check_finite().map_err(|e| {
        ApiError::NonFinite(format!(
            "{e} once converted to {} (the value overflows it)",
            T::NAME
        ))
    })?;
    Ok(c)
}

/// Uploads `a` in precision `p` and prepares its `plan` (with its `binning`) (blocking; run on the
/// device worker), its x and y pools seeded with host memory of `pools`
/// (the heap: none seeded, for a matrix used once).
pub fn upload_blocking(
    engine: &Engine,
    a: &Csr<f64>,
    p: Precision,
    binning: &Binning,
    plan: &Plan,
    pools: PoolKind,
) -> Result<DeviceBuffers, ApiError> {
    let matrix = engine.upload_finite_as(a, p).map_err(|e| match e {
        EngineError::NonFinite(why) => ApiError::NonFinite(why),
        e => e.into(),
    })?;
    // Fused on GPUs (one launch for the row-mapped bins), grouped on CPUs.
    let mode = LaunchMode::serving(&engine.info().kind);
    let plan = engine.prepare_binned_any(&matrix, binning, plan, mode)?;
    let w = p.bytes();
    let (x_bytes, y_bytes) = (a.ncols() * w, a.nrows() * w);
    Ok(DeviceBuffers {
        matrix,
        plan,
        pools: match pools {
            PoolKind::Heap => VectorPools::default(),
            PoolKind::Pinned => {
                VectorPools::seeded(pools, x_bytes, y_bytes, |n| engine.pinned_bytes(n))
            }
            PoolKind::Shared => {
                VectorPools::seeded(pools, x_bytes, y_bytes, |n| engine.shared_bytes(n))
            }
        },
    })
}

/// y = A x on the device (blocking; run on the device worker). Binary x with a
/// binary answer (`bytes_y`, nothing to verify) on a little-endian device goes
/// from the body to the device and from the device into the answer's bytes
/// (a buffer of the matrix's y pool, reused from call to call) with no host
/// copy ([`Engine::execute_any_le_into`]); otherwise x is converted straight
/// into the pinned staging buffer and y read straight out of it (as
/// little-endian bytes when `bytes_y`, else as values).
pub fn execute_blocking(
    engine: &Engine,
    b: &DeviceBuffers,
    x: &XIn,
    bytes_y: bool,
) -> Result<Executed, ApiError> {
    if bytes_y {
        let mut y = b
            .pools
            .y
            .take(b.matrix.nrows() * b.matrix.precision().bytes());
        if let Some(timings) = engine.execute_any_le_into(&b.matrix, &b.plan, x, y.host_mut())? {
            return Ok(Executed {
                y: YVec::Bytes(y.into_bytes()),
                timings,
                launches: b.plan.launches().len(),
            });
        }
    }
    let (y, timings) =
        engine.execute_any_with(&b.matrix, &b.plan, x, |y: Values<'_>| match (y, bytes_y) {
            (Values::F32(y), true) => YVec::Bytes(y_binary(y).into()),
            (Values::F64(y), true) => YVec::Bytes(y_binary(y).into()),
            (Values::F32(y), false) => YVec::F32(y.to_vec()),
            (Values::F64(y), false) => YVec::F64(y.to_vec()),
        })?;
    Ok(Executed {
        y,
        timings,
        launches: b.plan.launches().len(),
    })
}
