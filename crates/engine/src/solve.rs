//! Iterative solves on the device: conjugate gradients (optionally with
//! Jacobi preconditioning) whose products run the matrix's prepared plan on
//! vectors that never leave the device, with the vector kernels of
//! `kernels/solve/blas.cl` (deterministic dot products: per-work-group sums
//! added on the host in work-group order).

use crate::engine::{Engine, Redirect};
use crate::error::{EngineError, Result};
use crate::kernels::{DeviceScalar, CSR_ARGS_CL, PRELUDE_CL};
use crate::matrix::DeviceMatrix;
use crate::prepared::PreparedPlan;
use crate::shared::Target;
use ocl::{Buffer, Kernel, Program};
use std::time::Instant;

/// The solver kernels' source (built after the prelude, as a program of its own).
pub const BLAS_CL: &str = include_str!("../../../kernels/solve/blas.cl");
/// The SpMM kernel (built with the solver kernels).
pub const SPMM_CL: &str = include_str!("../../../kernels/solve/spmm.cl");

/// Most vectors one SpMM launch multiplies; wider X goes in chunks of this many columns.
pub const SPMM_MAX_K: usize = 64;

/// The solver and SpMM kernels for precision `p`, built once per engine.
fn blas_program(e: &Engine, p: crate::kernels::Precision) -> Result<Program> {
    let mut built = e
        .solver_programs
        .lock()
        .unwrap_or_else(|err| err.into_inner());
    if let Some(prog) = built.get(&p) {
        return Ok(prog.clone());
    }
    let prog = Program::builder()
        .src(format!("{PRELUDE_CL}\n{CSR_ARGS_CL}\n{BLAS_CL}\n{SPMM_CL}"))
        .devices(e.device())
        .cmplr_opt(e.build_options(p)?)
        .build(e.context())?;
    built.insert(p, prog.clone());
    Ok(prog)
}

/// Most work-groups of a dot product (the partials the host adds).
const DOT_GROUPS: usize = 256;

/// What a solve is asked for.
#[derive(Debug, Clone)]
pub struct SolveOptions {
    /// Stop when ||b - A x|| <= tol * ||b|| (the recurrence's residual).
    pub tol: f64,
    /// Most iterations.
    pub maxiter: usize,
    /// Jacobi (diagonal) preconditioning.
    pub jacobi: bool,
    /// Stop, with what it has, once this instant has passed.
    pub deadline: Option<Instant>,
}

impl Default for SolveOptions {
    fn default() -> Self {
        SolveOptions {
            tol: 1e-8,
            maxiter: 1000,
            jacobi: false,
            deadline: None,
        }
    }
}

/// Why a solve stopped.
#[derive(Debug, Clone, PartialEq)]
pub enum Stop {
    /// The relative residual reached the tolerance.
    Converged,
    /// `maxiter` iterations ran.
    MaxIter,
    /// The method cannot go on (e.g. CG's p'Ap <= 0: the matrix is not
    /// positive definite), at this iteration, and why.
    Breakdown { iteration: usize, why: String },
    /// The deadline passed.
    Deadline,
}

impl Stop {
    /// `converged`, `maxiter`, `breakdown` or `deadline`.
    pub fn name(&self) -> &'static str {
        match self {
            Stop::Converged => "converged",
            Stop::MaxIter => "maxiter",
            Stop::Breakdown { .. } => "breakdown",
            Stop::Deadline => "deadline",
        }
    }
}

/// A solve's answer.
#[derive(Debug, Clone)]
pub struct Solved<T> {
    /// The last iterate.
    pub x: Vec<T>,
    /// Iterations run.
    pub iterations: usize,
    /// ||r|| / ||b|| before the first iteration and after each.
    pub residuals: Vec<f64>,
    /// Why it stopped.
    pub stop: Stop,
    /// Wall time of the solve on the device side (upload to download), ms.
    pub device_ms: f64,
}

/// The device vectors and kernels of one solve.
struct Work<T: DeviceScalar> {
    n: usize,
    wg: usize,
    partials: Buffer<T>,
    dot: Kernel,
    xpby: Kernel,
    scale: Kernel,
    residual: Kernel,
    update: Kernel,
}

fn vector<T: DeviceScalar>(e: &Engine, n: usize) -> Result<Buffer<T>> {
    Ok(Buffer::<T>::builder()
        .queue(e.queue().clone())
        .flags(ocl::flags::MEM_READ_WRITE)
        .len(n.max(1))
        .build()?)
}

/// Kernel `name` with placeholders of its argument kinds, one letter each:
/// `u` a uint, `t` a `value_t`, `b` a buffer of `value_t` (ocl checks an
/// argument's kind where the driver reports it, as NVIDIA's does).
fn kernel<T: DeviceScalar>(e: &Engine, prog: &Program, name: &str, kinds: &str) -> Result<Kernel> {
    let mut b = Kernel::builder();
    b.program(prog).name(name).queue(e.queue().clone());
    for k in kinds.chars() {
        match k {
            'u' => b.arg(0u32),
            't' => b.arg(T::zero()),
            _ => b.arg(None::<&Buffer<T>>),
        };
    }
    Ok(b.build()?)
}

impl<T: DeviceScalar> Work<T> {
    fn new(e: &Engine, n: usize) -> Result<Work<T>> {
        let p = T::PRECISION;
        let prog = blas_program(e, p)?;
        let wg = e.params(p).wg_size;
        let w = Work {
            n,
            wg,
            partials: vector(e, DOT_GROUPS)?,
            dot: kernel::<T>(e, &prog, "solve_dot", "ubbb")?,
            xpby: kernel::<T>(e, &prog, "solve_xpby", "ubtb")?,
            scale: kernel::<T>(e, &prog, "solve_scale", "ubbb")?,
            residual: kernel::<T>(e, &prog, "solve_residual", "ubb")?,
            update: kernel::<T>(e, &prog, "solve_cg_update", "utbbbbb")?,
        };
        w.dot.set_arg(3, &w.partials)?;
        w.update.set_arg(6, &w.partials)?;
        for k in [&w.dot, &w.xpby, &w.scale, &w.residual, &w.update] {
            k.set_arg(0, n as u32)?;
        }
        Ok(w)
    }

    fn elementwise(&self, k: &Kernel) -> Result<()> {
        if self.n == 0 {
            return Ok(());
        }
        let gws = self.n.div_ceil(self.wg) * self.wg;
        // SAFETY: every argument is set (n, scalars and vectors of n values).
        unsafe { k.cmd().global_work_size(gws).enq()? };
        Ok(())
    }

    /// a . b, summed per work-group on the device and then on the host in
    /// work-group order (the same bits every time).
    fn dot(&self, a: &Buffer<T>, b: &Buffer<T>) -> Result<f64> {
        self.dot.set_arg(1, a)?;
        self.dot.set_arg(2, b)?;
        self.reduce(&self.dot)
    }

    /// Runs `k`, a kernel that leaves one partial sum per work-group in
    /// `partials`, and adds them on the host in work-group order.
    fn reduce(&self, k: &Kernel) -> Result<f64> {
        if self.n == 0 {
            return Ok(0.0);
        }
        let groups = self.n.div_ceil(self.wg).min(DOT_GROUPS);
        // SAFETY: arguments set; `partials` holds DOT_GROUPS values.
        unsafe {
            k.cmd()
                .global_work_size(groups * self.wg)
                .local_work_size(self.wg)
                .enq()?
        };
        let mut host = vec![T::zero(); groups];
        self.partials.read(&mut host).enq()?;
        Ok(host.iter().map(|v| v.to_f64()).sum())
    }

    /// x += alpha p, r -= alpha ap in one pass; returns r . r.
    fn cg_update(
        &self,
        alpha: f64,
        (p, ap): (&Buffer<T>, &Buffer<T>),
        (x, r): (&Buffer<T>, &Buffer<T>),
    ) -> Result<f64> {
        self.update.set_arg(1, T::from_f64(alpha))?;
        self.update.set_arg(2, p)?;
        self.update.set_arg(3, ap)?;
        self.update.set_arg(4, x)?;
        self.update.set_arg(5, r)?;
        self.reduce(&self.update)
    }

    /// y = x + beta y
    fn xpby(&self, x: &Buffer<T>, beta: f64, y: &Buffer<T>) -> Result<()> {
        self.xpby.set_arg(1, x)?;
        self.xpby.set_arg(2, T::from_f64(beta))?;
        self.xpby.set_arg(3, y)?;
        self.elementwise(&self.xpby)
    }

    /// z = d .* r
    fn scale(&self, d: &Buffer<T>, r: &Buffer<T>, z: &Buffer<T>) -> Result<()> {
        self.scale.set_arg(1, d)?;
        self.scale.set_arg(2, r)?;
        self.scale.set_arg(3, z)?;
        self.elementwise(&self.scale)
    }
}

impl Engine {
    /// Solves A x = b by conjugate gradients on the device (A symmetric
    /// positive definite; Jacobi-preconditioned with `opts.jacobi`), every
    /// product by the prepared plan `pp` of `m` on vectors that stay on the
    /// device; x0 = 0 unless given. Wrong lengths, a non-square matrix, a
    /// plan of another matrix or an incomplete plan, non-finite b or x0, and
    /// (with Jacobi) a zero diagonal entry are errors; a breakdown is a
    /// [`Stop::Breakdown`] answer.
    pub fn solve_cg<T: DeviceScalar>(
        &self,
        m: &DeviceMatrix<T>,
        pp: &PreparedPlan<T>,
        b: &[T],
        x0: Option<&[T]>,
        opts: &SolveOptions,
    ) -> Result<Solved<T>> {
        let n = m.nrows;
        check_solve_input(m, pp, b, x0)?;
        let _serial = m.staging.lock().unwrap_or_else(|e| e.into_inner());
        let steps = pp.steps.lock().unwrap_or_else(|e| e.into_inner());
        let t0 = Instant::now();
        let w = Work::<T>::new(self, n)?;
        let (x, r, p, ap) = (
            vector::<T>(self, n)?,
            vector::<T>(self, n)?,
            vector::<T>(self, n)?,
            vector::<T>(self, n)?,
        );
        let bb = crate::engine::read_only_copy(self.queue(), b)?;
        let home = (m.x.as_core(), m.y.as_core());
        // y = A v, into `out`, by the plan, on device vectors.
        let product = |v: &Buffer<T>, out: &Buffer<T>| -> Result<()> {
            let to = Redirect {
                x: Some(Target::Mem(v.as_core())),
                y: Some(Target::Mem(out.as_core())),
            };
            self.enqueue_all_with(&steps, to, Some(home), false)?;
            Ok(())
        };
        // r = b - A x0, or b.
        match x0 {
            Some(x0) if n > 0 => {
                x.write(x0).enq()?;
                product(&x, &r)?;
                w.residual.set_arg(1, &bb)?;
                w.residual.set_arg(2, &r)?;
                w.elementwise(&w.residual)?;
            }
            _ => {
                if n > 0 {
                    x.cmd().fill(T::zero(), None).enq()?;
                    bb.copy(&r, None, None).enq()?;
                }
            }
        }
        let dinv = if opts.jacobi {
            Some(self.jacobi_diagonal(m, n)?)
        } else {
            None
        };
        let z = match &dinv {
            Some(_) => vector::<T>(self, n)?,
            None => r.clone(),
        };
        let precondition = |r: &Buffer<T>, z: &Buffer<T>| -> Result<()> {
            match &dinv {
                Some(d) => w.scale(d, r, z),
                None => Ok(()),
            }
        };
        let norm_b = w.dot(&bb, &bb)?.sqrt();
        let scale = if norm_b > 0.0 { norm_b } else { 1.0 };
        let mut rr = w.dot(&r, &r)?;
        let mut residuals = vec![rr.sqrt() / scale];
        precondition(&r, &z)?;
        if n > 0 {
            z.copy(&p, None, None).enq()?;
        }
        let mut rz = if dinv.is_some() { w.dot(&r, &z)? } else { rr };
        let mut it = 0;
        let stop = loop {
            if !residuals[it].is_finite() {
                break Stop::Breakdown {
                    iteration: it,
                    why: "the residual is not finite".into(),
                };
            }
            if residuals[it] <= opts.tol {
                break Stop::Converged;
            }
            if it == opts.maxiter {
                break Stop::MaxIter;
            }
            if opts.deadline.is_some_and(|d| Instant::now() >= d) {
                break Stop::Deadline;
            }
            product(&p, &ap)?;
            let pap = w.dot(&p, &ap)?;
            if pap.is_nan() || pap <= 0.0 || !pap.is_finite() {
                break Stop::Breakdown {
                    iteration: it + 1,
                    why: format!("p'Ap = {pap:e}: the matrix is not symmetric positive definite"),
                };
            }
            let alpha = rz / pap;
            rr = w.cg_update(alpha, (&p, &ap), (&x, &r))?;
            residuals.push(rr.sqrt() / scale);
            precondition(&r, &z)?;
            // Without a preconditioner z is r: r . z is r . r.
            let rz_new = if dinv.is_some() { w.dot(&r, &z)? } else { rr };
            let beta = if rz != 0.0 { rz_new / rz } else { 0.0 };
            rz = rz_new;
            w.xpby(&z, beta, &p)?;
            it += 1;
        };
        let mut xs = vec![T::zero(); n];
        if n > 0 {
            x.read(&mut xs).enq()?;
        }
        self.queue().finish()?;
        Ok(Solved {
            x: xs,
            iterations: it,
            residuals,
            stop,
            device_ms: t0.elapsed().as_secs_f64() * 1e3,
        })
    }

    /// 1 / diag(A) on the device; an error naming the first row whose
    /// diagonal is zero or absent.
    fn jacobi_diagonal<T: DeviceScalar>(&self, m: &DeviceMatrix<T>, n: usize) -> Result<Buffer<T>> {
        let d = vector::<T>(self, n)?;
        if n == 0 {
            return Ok(d);
        }
        let prog = blas_program(self, T::PRECISION)?;
        let wg = self.params(T::PRECISION).wg_size;
        let k = Kernel::builder()
            .program(&prog)
            .name("solve_diag_inv")
            .queue(self.queue().clone())
            .global_work_size(n.div_ceil(wg) * wg)
            .arg(n as u32)
            .arg(&m.row_ptr)
            .arg(&m.col_idx)
            .arg(&m.vals)
            .arg(&d)
            .build()?;
        // SAFETY: the matrix's arrays and d (n values).
        unsafe { k.enq()? };
        let mut host = vec![T::zero(); n];
        d.read(&mut host).enq()?;
        if let Some(i) = host.iter().position(|v| v.to_f64() == 0.0) {
            return Err(EngineError::InvalidPlan(format!(
                "Jacobi preconditioning needs a nonzero diagonal: row {i} has none"
            )));
        }
        Ok(d)
    }
}

impl Engine {
    /// Y = A X for the `k` vectors of `x` (`ncols x k`, row-major: x[i * k + j]
    /// is entry i of vector j), answered `nrows x k` row-major, each matrix
    /// entry read once per chunk of up to [`SPMM_MAX_K`] vectors. Waits for
    /// calls on the matrix in progress.
    pub fn spmm<T: DeviceScalar>(&self, m: &DeviceMatrix<T>, x: &[T], k: usize) -> Result<Vec<T>> {
        if k == 0 || x.len() != m.ncols * k {
            return Err(EngineError::XLength {
                expected: m.ncols * k.max(1),
                got: x.len(),
            });
        }
        let mut y = vec![T::zero(); m.nrows * k];
        if m.nrows == 0 {
            return Ok(y);
        }
        let _serial = m.staging.lock().unwrap_or_else(|e| e.into_inner());
        let prog = blas_program(self, T::PRECISION)?;
        let wg = self.params(T::PRECISION).wg_size;
        for j0 in (0..k).step_by(SPMM_MAX_K) {
            let kc = SPMM_MAX_K.min(k - j0);
            // This chunk's columns of X, row-major.
            let xc: std::borrow::Cow<'_, [T]> = if kc == k {
                x.into()
            } else {
                (0..m.ncols)
                    .flat_map(|i| x[i * k + j0..i * k + j0 + kc].iter().copied())
                    .collect::<Vec<T>>()
                    .into()
            };
            let xb = crate::engine::read_only_copy(self.queue(), &xc)?;
            let yb = vector::<T>(self, m.nrows * kc)?;
            let kp_log2 = kc.next_power_of_two().trailing_zeros();
            let items = m.nrows << kp_log2;
            let kern = Kernel::builder()
                .program(&prog)
                .name("spmm_rowmajor")
                .queue(self.queue().clone())
                .global_work_size(items.div_ceil(wg) * wg)
                .arg(m.nrows as u32)
                .arg(kc as u32)
                .arg(kp_log2)
                .arg(&m.row_ptr)
                .arg(&m.col_idx)
                .arg(&m.vals)
                .arg(&xb)
                .arg(&yb)
                .build()?;
            // SAFETY: x holds ncols * kc values, y nrows * kc.
            unsafe { kern.enq()? };
            let mut yc = vec![T::zero(); m.nrows * kc];
            yb.read(&mut yc).enq()?;
            for i in 0..m.nrows {
                y[i * k + j0..i * k + j0 + kc].copy_from_slice(&yc[i * kc..(i + 1) * kc]);
            }
        }
        self.queue().finish()?;
        Ok(y)
    }
}

fn check_solve_input<T: DeviceScalar>(
    m: &DeviceMatrix<T>,
    pp: &PreparedPlan<T>,
    b: &[T],
    x0: Option<&[T]>,
) -> Result<()> {
    if pp.matrix_id != m.id {
        return Err(EngineError::WrongMatrix);
    }
    if !pp.complete {
        return Err(EngineError::InvalidPlan(
            "a solve needs a plan that computes every row".into(),
        ));
    }
    if m.nrows != m.ncols {
        return Err(EngineError::InvalidPlan(format!(
            "a solve needs a square matrix, not {}x{}",
            m.nrows, m.ncols
        )));
    }
    for (what, v) in [("b", Some(b)), ("x0", x0)] {
        let Some(v) = v else { continue };
        if v.len() != m.nrows {
            return Err(EngineError::XLength {
                expected: m.nrows,
                got: v.len(),
            });
        }
        if let Some(i) = v.iter().position(|e| !e.to_f64().is_finite()) {
            return Err(EngineError::InvalidPlan(format!(
                "{what}[{i}] is not finite"
            )));
        }
    }
    Ok(())
}
