//! Matrices and prepared plans whose value type is chosen at run time: one
//! [`AnyMatrix`] and [`AnyPlan`] per precision, so callers that only know a
//! [`Precision`] (a flag, a request, a stored row) upload, prepare, execute and
//! time without matching on it. The `match` on the scalar type is here, once.

use crate::engine::{Engine, Timings};
use crate::error::{EngineError, Result};
use crate::host::{HostBytes, LeBytes};
use crate::kernels::{DeviceScalar, Precision};
use crate::matrix::DeviceMatrix;
use crate::prepared::{LaunchInfo, LaunchMode, PreparedPlan};
use crate::timing::{TimeStats, TimingPolicy};
use sparse::{Binning, Csr, KernelId, Plan, Scheme};

/// A matrix uploaded in either precision (made by [`Engine::upload_as`]).
#[derive(Debug)]
pub enum AnyMatrix {
    /// Single precision.
    F32(DeviceMatrix<f32>),
    /// Double precision.
    F64(DeviceMatrix<f64>),
}

/// A plan prepared for an [`AnyMatrix`] (same precision as its matrix).
#[derive(Debug)]
pub enum AnyPlan {
    /// Single precision.
    F32(PreparedPlan<f32>),
    /// Double precision.
    F64(PreparedPlan<f64>),
}

/// y of either precision, borrowed from the matrix's staging buffer.
#[derive(Debug, Clone, Copy)]
pub enum Values<'a> {
    /// Single precision.
    F32(&'a [f32]),
    /// Double precision.
    F64(&'a [f64]),
}

impl Values<'_> {
    /// The values widened to `f64`.
    pub fn to_f64_vec(self) -> Vec<f64> {
        match self {
            Values::F32(v) => v.iter().map(|&x| f64::from(x)).collect(),
            Values::F64(v) => v.to_vec(),
        }
    }

    /// Number of values.
    pub fn len(self) -> usize {
        match self {
            Values::F32(v) => v.len(),
            Values::F64(v) => v.len(),
        }
    }

    /// Whether there are none.
    pub fn is_empty(self) -> bool {
        self.len() == 0
    }
}

/// x in a caller's own encoding, written straight into the pinned staging
/// buffer of a matrix of either precision (`out` holds `ncols` values).
pub trait XSource {
    /// The caller's error (an engine error converts into it).
    type Error: From<EngineError>;
    /// Writes x converted to `T` into `out`; an error stops the call before any device work.
    fn fill<T: DeviceScalar>(&self, out: &mut [T]) -> std::result::Result<(), Self::Error>;
    /// x's little-endian bytes as they came, when they are values `width`
    /// bytes wide ([`Engine::execute_any_le`]), with whether they lie in
    /// pinned host memory; `None` by default.
    fn le_bytes(&self, _width: usize) -> Option<LeBytes<'_>> {
        None
    }
    /// Checks x given as [`XSource::le_bytes`] (run while the device works).
    fn check(&self) -> std::result::Result<(), Self::Error> {
        Ok(())
    }
}

impl XSource for [f64] {
    type Error = EngineError;
    /// Converts each value (`T::from_f64`); a length other than `out`'s is an error.
    fn fill<T: DeviceScalar>(&self, out: &mut [T]) -> Result<()> {
        if self.len() != out.len() {
            return Err(EngineError::XLength {
                expected: out.len(),
                got: self.len(),
            });
        }
        for (o, &v) in out.iter_mut().zip(self) {
            *o = T::from_f64(v);
        }
        Ok(())
    }
}

impl XSource for Vec<f64> {
    type Error = EngineError;
    fn fill<T: DeviceScalar>(&self, out: &mut [T]) -> Result<()> {
        self.as_slice().fill(out)
    }
}

/// Runs `$body` with `$m` bound to the typed matrix of an [`AnyMatrix`].
macro_rules! on_matrix {
    ($any:expr, $m:ident => $body:expr) => {
        match $any {
            AnyMatrix::F32($m) => $body,
            AnyMatrix::F64($m) => $body,
        }
    };
}

/// Runs `$body` with the typed matrix and plan of a pair, or fails with
/// [`EngineError::WrongMatrix`] when their precisions differ.
macro_rules! on_pair {
    ($any_m:expr, $any_p:expr, ($m:ident, $p:ident) => $body:expr) => {
        match ($any_m, $any_p) {
            (AnyMatrix::F32($m), AnyPlan::F32($p)) => $body,
            (AnyMatrix::F64($m), AnyPlan::F64($p)) => $body,
            _ => Err(EngineError::WrongMatrix.into()),
        }
    };
}

impl AnyMatrix {
    /// The precision it was uploaded in.
    pub fn precision(&self) -> Precision {
        match self {
            AnyMatrix::F32(_) => Precision::F32,
            AnyMatrix::F64(_) => Precision::F64,
        }
    }

    /// Rows.
    pub fn nrows(&self) -> usize {
        on_matrix!(self, m => m.nrows())
    }

    /// Columns.
    pub fn ncols(&self) -> usize {
        on_matrix!(self, m => m.ncols())
    }

    /// Stored nonzeros.
    pub fn nnz(&self) -> usize {
        on_matrix!(self, m => m.nnz())
    }

    /// The row pointers (host copy).
    pub fn row_ptr(&self) -> &[u32] {
        on_matrix!(self, m => m.row_ptr())
    }

    /// Bytes of one SpMV under the minimum-bytes model.
    pub fn min_bytes(&self) -> u64 {
        on_matrix!(self, m => m.min_bytes())
    }
}

impl<T: DeviceScalar> From<DeviceMatrix<T>> for AnyMatrix {
    fn from(m: DeviceMatrix<T>) -> AnyMatrix {
        T::any_matrix(m)
    }
}

impl<T: DeviceScalar> From<PreparedPlan<T>> for AnyPlan {
    fn from(p: PreparedPlan<T>) -> AnyPlan {
        T::any_plan(p)
    }
}

/// Runs `$body` with `$p` bound to the typed plan of an [`AnyPlan`].
macro_rules! on_plan {
    ($any:expr, $p:ident => $body:expr) => {
        match $any {
            AnyPlan::F32($p) => $body,
            AnyPlan::F64($p) => $body,
        }
    };
}

impl AnyPlan {
    /// The precision of its matrix.
    pub fn precision(&self) -> Precision {
        match self {
            AnyPlan::F32(_) => Precision::F32,
            AnyPlan::F64(_) => Precision::F64,
        }
    }

    /// The launches, in order.
    pub fn launches(&self) -> &[LaunchInfo] {
        on_plan!(self, p => p.launches())
    }

    /// The binning scheme.
    pub fn scheme(&self) -> Scheme {
        on_plan!(self, p => p.scheme())
    }

    /// The launch mode.
    pub fn mode(&self) -> LaunchMode {
        on_plan!(self, p => p.mode())
    }

    /// Whether every row of the matrix is computed by this plan.
    pub fn is_complete(&self) -> bool {
        on_plan!(self, p => p.is_complete())
    }
}

/// The typed matrix's `Engine` method, its result wrapped into an [`AnyPlan`].
macro_rules! prepared {
    ($any:expr, $m:ident => $call:expr) => {
        on_matrix!($any, $m => $call.map(AnyPlan::from))
    };
}

impl Engine {
    /// Uploads `a` in precision `p` (values rounded to `p` as [`Csr::cast`] does).
    pub fn upload_as(&self, a: &Csr<f64>, p: Precision) -> Result<AnyMatrix> {
        match p {
            Precision::F32 => self.upload(&a.cast::<f32>()).map(AnyMatrix::from),
            Precision::F64 => self.upload(a).map(AnyMatrix::from),
        }
    }

    /// As [`Engine::upload_as`], but a value that is not finite once rounded
    /// to `p` (it overflows `f32`) is refused with [`EngineError::NonFinite`].
    pub fn upload_finite_as(&self, a: &Csr<f64>, p: Precision) -> Result<AnyMatrix> {
        match p {
            Precision::F32 => {
                let c = a.cast::<f32>();
                c.check_finite().map_err(|e| {
                    EngineError::NonFinite(format!(
                        "{e} once converted to {} (the value overflows it)",
                        p.name()
                    ))
                })?;
                self.upload(&c).map(AnyMatrix::from)
            }
            Precision::F64 => self.upload(a).map(AnyMatrix::from),
        }
    }

    /// [`Engine::prepare`] for a matrix of either precision.
    pub fn prepare_any(&self, m: &AnyMatrix, plan: &Plan, mode: LaunchMode) -> Result<AnyPlan> {
        prepared!(m, m => self.prepare(m, plan, mode))
    }

    /// [`Engine::prepare_binned`] for a matrix of either precision.
    pub fn prepare_binned_any(
        &self,
        m: &AnyMatrix,
        binning: &Binning,
        plan: &Plan,
        mode: LaunchMode,
    ) -> Result<AnyPlan> {
        prepared!(m, m => self.prepare_binned(m, binning, plan, mode))
    }

    /// [`Engine::prepare_bins`] for a matrix of either precision.
    pub fn prepare_bins_any(
        &self,
        m: &AnyMatrix,
        binning: &Binning,
        assign: &[(usize, KernelId)],
        mode: LaunchMode,
    ) -> Result<AnyPlan> {
        prepared!(m, m => self.prepare_bins(m, binning, assign, mode))
    }

    /// y = A x for a matrix of either precision: x converted from `f64`, y
    /// widened to `f64` (each in one pass through the pinned staging buffers).
    pub fn execute_any(
        &self,
        m: &AnyMatrix,
        pp: &AnyPlan,
        x: &[f64],
    ) -> Result<(Vec<f64>, Timings)> {
        self.execute_any_with(m, pp, x, |y| y.to_f64_vec())
    }

    /// [`Engine::execute_with`] for a matrix of either precision: `x` writes
    /// itself into the staging buffer ([`XSource`]), `read_y` reads y out of it.
    pub fn execute_any_with<X, R>(
        &self,
        m: &AnyMatrix,
        pp: &AnyPlan,
        x: &X,
        read_y: impl FnOnce(Values<'_>) -> R,
    ) -> std::result::Result<(R, Timings), X::Error>
    where
        X: XSource + ?Sized,
    {
        on_pair!(m, pp, (m, pp) => self.execute_with(
            m,
            pp,
            |staged| x.fill(staged),
            |y| read_y(DeviceScalar::values(y)),
        ))
    }

    /// [`Engine::execute_le`] for a matrix of either precision: x's bytes
    /// ([`XSource::le_bytes`] in the matrix's width) go to the device and y
    /// comes back as little-endian bytes with no host copy, while
    /// [`XSource::check`] runs. `None` when x offers no such bytes or the
    /// device is not little-endian: the caller then takes
    /// [`Engine::execute_any_with`].
    pub fn execute_any_le<X>(
        &self,
        m: &AnyMatrix,
        pp: &AnyPlan,
        x: &X,
    ) -> std::result::Result<Option<(Vec<u8>, Timings)>, X::Error>
    where
        X: XSource + ?Sized,
    {
        let Some(x_le) = x.le_bytes(m.precision().bytes()) else {
            return Ok(None);
        };
        on_pair!(m, pp, (m, pp) => self.execute_le(m, pp, x_le.bytes, || x.check()))
    }

    /// [`Engine::execute_any_le`] with y read into the caller's buffer
    /// ([`Engine::execute_le_into`]: made y's length, so a reused buffer
    /// costs no allocation; x and y both pinned go straight).
    pub fn execute_any_le_into<X>(
        &self,
        m: &AnyMatrix,
        pp: &AnyPlan,
        x: &X,
        y: &mut HostBytes,
    ) -> std::result::Result<Option<Timings>, X::Error>
    where
        X: XSource + ?Sized,
    {
        let Some(x_le) = x.le_bytes(m.precision().bytes()) else {
            return Ok(None);
        };
        on_pair!(m, pp, (m, pp) => self.execute_le_into(m, pp, x_le, y, || x.check()))
    }

    /// [`Engine::time`] for a matrix of either precision (x converted from `f64`).
    pub fn time_any(
        &self,
        m: &AnyMatrix,
        pp: &AnyPlan,
        x: &[f64],
        warmup: usize,
        reps: usize,
    ) -> Result<TimeStats> {
        on_pair!(m, pp, (m, pp) => self.time_from(m, pp, x, warmup, reps))
    }

    /// [`Engine::measure`] for a matrix of either precision (x converted from
    /// `f64`): the one timing routine, under `policy`.
    pub fn measure_any(
        &self,
        m: &AnyMatrix,
        pp: &AnyPlan,
        x: &[f64],
        policy: &TimingPolicy,
        estimate_ms: f64,
    ) -> Result<TimeStats> {
        on_pair!(m, pp, (m, pp) => self.measure_from(m, pp, x, policy, estimate_ms))
    }

    /// [`Engine::spmm`] for a matrix of either precision: X (`ncols x k`,
    /// row-major) converted from `f64`, Y answered in `f64`.
    pub fn spmm_any(&self, m: &AnyMatrix, x: &[f64], k: usize) -> Result<Vec<f64>> {
        match m {
            AnyMatrix::F32(m) => {
                let xs: Vec<f32> = x.iter().map(|&v| v as f32).collect();
                Ok(self.spmm(m, &xs, k)?.into_iter().map(f64::from).collect())
            }
            AnyMatrix::F64(m) => self.spmm(m, x, k),
        }
    }

    /// [`Engine::solve_cg`] for a matrix of either precision: b and x0
    /// converted from `f64`, x answered in `f64`.
    pub fn solve_cg_any(
        &self,
        m: &AnyMatrix,
        pp: &AnyPlan,
        b: &[f64],
        x0: Option<&[f64]>,
        opts: &crate::solve::SolveOptions,
    ) -> Result<crate::solve::Solved<f64>> {
        on_pair!(m, pp, (m, pp) => self.solve_cg_from(m, pp, b, x0, opts))
    }

    fn solve_cg_from<T: DeviceScalar>(
        &self,
        m: &DeviceMatrix<T>,
        pp: &PreparedPlan<T>,
        b: &[f64],
        x0: Option<&[f64]>,
        opts: &crate::solve::SolveOptions,
    ) -> Result<crate::solve::Solved<f64>> {
        let conv = |v: &[f64]| -> Vec<T> { v.iter().map(|&e| T::from_f64(e)).collect() };
        let x0 = x0.map(conv);
        let s = self.solve_cg(m, pp, &conv(b), x0.as_deref(), opts)?;
        Ok(crate::solve::Solved {
            x: s.x.iter().map(|v| v.to_f64()).collect(),
            iterations: s.iterations,
            residuals: s.residuals,
            stop: s.stop,
            device_ms: s.device_ms,
        })
    }

    /// Bins a matrix of either precision under `scheme` (host side).
    pub fn binning_any(&self, m: &AnyMatrix, scheme: Scheme) -> Binning {
        Binning::new(m.row_ptr(), scheme)
    }
}

impl Engine {
    /// [`Engine::time`] with x converted from `f64` into the staging buffer.
    fn time_from<T: DeviceScalar>(
        &self,
        m: &DeviceMatrix<T>,
        pp: &PreparedPlan<T>,
        x: &[f64],
        warmup: usize,
        reps: usize,
    ) -> Result<TimeStats> {
        let policy = TimingPolicy::fixed(warmup);
        self.timed(m, pp, |s| x.fill(s), &policy, warmup, reps)
    }

    /// [`Engine::measure`] with x converted from `f64` into the staging buffer.
    fn measure_from<T: DeviceScalar>(
        &self,
        m: &DeviceMatrix<T>,
        pp: &PreparedPlan<T>,
        x: &[f64],
        policy: &TimingPolicy,
        estimate_ms: f64,
    ) -> Result<TimeStats> {
        let (warmup, first) = (policy.warmup_for(estimate_ms), policy.reps_for(estimate_ms));
        self.timed(m, pp, |s| x.fill(s), policy, warmup, first)
    }
}
