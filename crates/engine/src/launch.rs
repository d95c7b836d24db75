//! One kernel launch made ready at preparation: an OpenCL kernel object with
//! its arguments set through `ocl::core`, the buffers it refers to kept alive,
//! and its geometry. ocl's `KernelBuilder` asks for every argument's type
//! (`clGetKernelArgInfo`) for every kernel object it builds; our programs are
//! built without `-cl-kernel-arg-info`, so each query fails and ocl formats
//! the error and skips its check: about 6 us a kernel on PoCL for nothing,
//! against 0.4 us for `clCreateKernel` and the arguments. OpenCL checks the
//! size of each scalar argument; the argument count is checked here.
//!
//! Kernel objects come from a [`KernelPool`] per program: made ready when
//! the program is built, one per entry point, taken by a launch and given
//! back when it is dropped, so preparing a plan sets arguments and creates
//! no kernel object (creating and releasing one cost about 0.45 us on PoCL,
//! as much as a whole one-kernel first call's planning). The pool also keeps
//! each entry point's declared argument count, asked once when the program is
//! built: asking the driver at every launch (two calls and a buffer through
//! ocl) was a tenth of preparing a one-kernel plan.

use crate::error::{EngineError, Result};
use crate::shared::Target;
use ocl::core::{self, ArgVal};
use ocl::{Buffer, Event, Program, Queue};
use std::borrow::Cow;
use std::sync::{Arc, Mutex};

/// Free kernel objects of one entry point kept at most (more are released).
const POOL_CAP: usize = 16;

/// Kernel objects of one program, free for launches to take, by entry point.
/// A kernel object taken keeps whatever arguments its last launch set until
/// the new launch sets every one of them ([`LaunchBuilder::build`] checks the
/// count); a launch is only dropped with no command of it in flight, and
/// OpenCL captures arguments at enqueue anyway.
#[derive(Debug)]
pub(crate) struct KernelPool {
    program: core::Program,
    free: Mutex<Vec<Entry>>,
}

/// One entry point of a pool.
#[derive(Debug)]
struct Entry {
    name: Cow<'static, str>,
    /// The arguments the entry point declares (asked when the entry was made).
    args: Option<u32>,
    /// Kernel objects free to take.
    free: Vec<core::Kernel>,
}

/// The arguments `kernel` declares, asked of the driver.
fn declared_args(kernel: &core::Kernel) -> core::Result<u32> {
    match core::get_kernel_info(kernel, core::KernelInfo::NumArgs)? {
        core::KernelInfoResult::NumArgs(n) => Ok(n),
        other => panic!("clGetKernelInfo(NUM_ARGS) answered {other:?}"),
    }
}

impl KernelPool {
    /// A pool for `program` with one kernel object made ready for each of
    /// `names` (a name the program lacks is skipped: its launches fail when
    /// they ask for it, as without a pool).
    pub(crate) fn ready(program: &Program, names: &[Cow<'static, str>]) -> Arc<KernelPool> {
        let free = names
            .iter()
            .filter_map(|n| {
                let k = core::create_kernel(program.as_core(), n).ok()?;
                Some(Entry {
                    name: n.clone(),
                    args: declared_args(&k).ok(),
                    free: vec![k],
                })
            })
            .collect();
        Arc::new(KernelPool {
            program: program.as_core().clone(),
            free: Mutex::new(free),
        })
    }

    /// A kernel object for `name` (a free one, else a new one) and the
    /// arguments it declares, when the pool knows them.
    fn take(&self, name: &str) -> core::Result<(core::Kernel, Option<u32>)> {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        let entry = free.iter_mut().find(|e| e.name == name);
        let args = entry.as_ref().and_then(|e| e.args);
        if let Some(k) = entry.and_then(|e| e.free.pop()) {
            return Ok((k, args));
        }
        drop(free);
        Ok((core::create_kernel(&self.program, name)?, args))
    }

    /// Gives `kernel` (of entry point `name`) back.
    fn give(&self, name: &str, kernel: core::Kernel) {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        match free.iter_mut().find(|e| e.name == name) {
            Some(e) if e.free.len() < POOL_CAP => e.free.push(kernel),
            Some(_) => {}
            None => free.push(Entry {
                name: Cow::Owned(name.to_string()),
                args: declared_args(&kernel).ok(),
                free: vec![kernel],
            }),
        }
    }

    /// Free kernel objects of `name` (tests).
    #[cfg(test)]
    pub(crate) fn free_of(&self, name: &str) -> usize {
        let free = self.free.lock().unwrap();
        free.iter()
            .find(|e| e.name == name)
            .map_or(0, |e| e.free.len())
    }
}

/// A launch ready to enqueue: enqueued as is on every call (OpenCL captures
/// the arguments at enqueue, and nothing changes them after preparation).
#[derive(Debug)]
pub(crate) struct Launch {
    /// Always `Some` until dropped (then given back to its pool, if any).
    kernel: Option<core::Kernel>,
    name: Cow<'static, str>,
    pool: Option<Arc<KernelPool>>,
    gws: usize,
    lws: usize,
    /// The index of the argument that is the matrix's x ([`XBuf`]), which
    /// [`Launch::enqueue_with`] can point at another buffer for one enqueue.
    x_arg: Option<u32>,
    /// The same for the matrix's y ([`YBuf`]).
    y_arg: Option<u32>,
    /// The buffers its arguments point to that the plan made (row lists,
    /// blocks, carries): OpenCL does not retain them. The matrix's own
    /// buffers ([`MatrixBuf`]) are not retained: a plan only runs with the
    /// matrix it was prepared for (`Engine::execute` checks its id), which
    /// holds them.
    _keep: Vec<core::Mem>,
    /// Every buffer argument, in order (tests).
    #[cfg(test)]
    mems: Vec<core::Mem>,
}

impl Launch {
    /// Enqueues the launch on `queue`, its event in `ev` when given. An
    /// enqueue that asks for no event costs less on NVIDIA's OpenCL (about
    /// 6 us against 14 us on a profiling queue of an H200,
    /// `bench/opencl_enqueue_probe.c`): only the calls being timed ask.
    pub(crate) fn enqueue(&self, queue: &Queue, ev: Option<&mut Event>) -> Result<()> {
        // SAFETY: every argument was set at preparation (the count checked by
        // `build`), buffers of the sizes the geometry assumes, kept alive by
        // `_keep` as long as the launch.
        unsafe {
            core::enqueue_kernel(
                queue.as_core(),
                self.kernel
                    .as_ref()
                    .expect("a launch keeps its kernel until dropped"),
                1,
                None,
                &[self.gws, 1, 1],
                Some([self.lws, 1, 1]),
                None::<core::Event>,
                ev,
            )
            .map_err(EngineError::from)
        }
    }

    /// Enqueues the launch with its x and y arguments pointing at other
    /// buffers of the matrix's sizes for this enqueue only (each `(other,
    /// home)`, `None` to keep the matrix's own): OpenCL captures the
    /// arguments at enqueue, and each is set back to `home` before
    /// returning, on every path.
    pub(crate) fn enqueue_with(
        &self,
        queue: &Queue,
        ev: Option<&mut Event>,
        x: Option<(Target<'_>, &core::Mem)>,
        y: Option<(Target<'_>, &core::Mem)>,
    ) -> Result<()> {
        let kernel = self
            .kernel
            .as_ref()
            .expect("a launch keeps its kernel until dropped");
        // (No allocation: this runs for every launch of such a call.)
        let moved = [(self.x_arg, x), (self.y_arg, y)].map(|(i, m)| Some((i?, m?)));
        let mut r = Ok(());
        for &(i, (other, _)) in moved.iter().flatten() {
            r = r.and(other.set(kernel, i));
        }
        if r.is_ok() {
            r = self.enqueue(queue, ev);
        }
        for &(i, (_, home)) in moved.iter().flatten() {
            Target::Mem(home).set(kernel, i)?;
        }
        r
    }

    /// What the launch runs, as far as the plan decides it: its entry point,
    /// geometry and the memory objects of its arguments, in order.
    #[cfg(test)]
    pub(crate) fn shape(&self) -> (String, usize, usize, Vec<core::Mem>) {
        let kernel = self.kernel.as_ref().expect("not dropped");
        let name = core::get_kernel_info(kernel, core::KernelInfo::FunctionName)
            .expect("a kernel object knows its entry point")
            .to_string();
        (name, self.gws, self.lws, self.mems.clone())
    }
}

impl Drop for Launch {
    fn drop(&mut self) {
        if let (Some(pool), Some(k)) = (&self.pool, self.kernel.take()) {
            pool.give(&self.name, k);
        }
    }
}

/// Sets the arguments of one kernel object in order; the first error is kept
/// and returned by [`LaunchBuilder::build`].
pub(crate) struct LaunchBuilder {
    kernel: Option<core::Kernel>,
    /// The arguments the kernel declares, when known without asking.
    declared: Option<u32>,
    name: Cow<'static, str>,
    pool: Option<Arc<KernelPool>>,
    gws: usize,
    lws: usize,
    next: u32,
    x_arg: Option<u32>,
    y_arg: Option<u32>,
    keep: Vec<core::Mem>,
    #[cfg(test)]
    mems: Vec<core::Mem>,
    error: Option<EngineError>,
}

/// Something a kernel argument can be.
pub(crate) trait LaunchArg {
    /// Sets the builder's next argument to it.
    fn set(self, b: &mut LaunchBuilder);
}

impl LaunchArg for u32 {
    fn set(self, b: &mut LaunchBuilder) {
        b.put(ArgVal::scalar(&self), None);
    }
}

impl<P: ocl::OclPrm> LaunchArg for &Buffer<P> {
    fn set(self, b: &mut LaunchBuilder) {
        let mem = self.as_core();
        b.put(ArgVal::mem(mem), Some(mem));
    }
}

/// The matrix's x, set like a [`MatrixBuf`] and remembered as the argument
/// [`Launch::enqueue_with`] may point elsewhere.
pub(crate) struct XBuf<'a, P: ocl::OclPrm>(pub(crate) &'a Buffer<P>);

impl<P: ocl::OclPrm> LaunchArg for XBuf<'_, P> {
    fn set(self, b: &mut LaunchBuilder) {
        b.x_arg = Some(b.next);
        MatrixBuf(self.0).set(b);
    }
}

/// The matrix's y, the same way.
pub(crate) struct YBuf<'a, P: ocl::OclPrm>(pub(crate) &'a Buffer<P>);

impl<P: ocl::OclPrm> LaunchArg for YBuf<'_, P> {
    fn set(self, b: &mut LaunchBuilder) {
        b.y_arg = Some(b.next);
        MatrixBuf(self.0).set(b);
    }
}

/// A buffer of the matrix a plan is prepared for, set without retaining it
/// (see [`Launch`]'s `_keep`): retaining and releasing six buffers was a
/// fifth of preparing a one-kernel plan on PoCL.
pub(crate) struct MatrixBuf<'a, P: ocl::OclPrm>(pub(crate) &'a Buffer<P>);

impl<P: ocl::OclPrm> LaunchArg for MatrixBuf<'_, P> {
    fn set(self, b: &mut LaunchBuilder) {
        let mem = self.0.as_core();
        b.put(ArgVal::mem(mem), None);
        #[cfg(test)]
        b.mems.push(mem.clone());
    }
}

impl LaunchBuilder {
    /// A new kernel object for entry point `name` of `program`, launched over
    /// `(global, local)` work-items.
    pub(crate) fn new(
        program: &Program,
        name: impl Into<Cow<'static, str>>,
        geometry: (usize, usize),
    ) -> LaunchBuilder {
        let name = name.into();
        let kernel = core::create_kernel(program.as_core(), &name).map(|k| (k, None));
        LaunchBuilder::with(kernel, name, None, geometry)
    }

    /// The same with a kernel object from `pool`, given back when the launch
    /// is dropped.
    pub(crate) fn pooled(
        pool: &Arc<KernelPool>,
        name: impl Into<Cow<'static, str>>,
        geometry: (usize, usize),
    ) -> LaunchBuilder {
        let name = name.into();
        let kernel = pool.take(&name);
        LaunchBuilder::with(kernel, name, Some(pool.clone()), geometry)
    }

    fn with(
        kernel: core::Result<(core::Kernel, Option<u32>)>,
        name: Cow<'static, str>,
        pool: Option<Arc<KernelPool>>,
        (gws, lws): (usize, usize),
    ) -> LaunchBuilder {
        let (kernel, declared, error) = match kernel {
            Ok((k, n)) => (Some(k), n, None),
            Err(e) => (None, None, Some(EngineError::from(e))),
        };
        LaunchBuilder {
            kernel,
            declared,
            name,
            pool,
            gws,
            lws,
            next: 0,
            x_arg: None,
            y_arg: None,
            keep: Vec::new(),
            #[cfg(test)]
            mems: Vec::new(),
            error,
        }
    }

    /// Sets the next argument.
    pub(crate) fn arg(&mut self, a: impl LaunchArg) -> &mut Self {
        a.set(self);
        self
    }

    fn put(&mut self, val: ArgVal, keep: Option<&core::Mem>) {
        if let (Some(k), None) = (&self.kernel, &self.error) {
            if let Err(e) = core::set_kernel_arg(k, self.next, val) {
                self.error = Some(self.wrong(format!("argument {}: {e}", self.next)));
            }
        }
        if let Some(mem) = keep {
            self.keep.push(mem.clone());
            #[cfg(test)]
            self.mems.push(mem.clone());
        }
        self.next += 1;
    }

    fn wrong(&self, what: String) -> EngineError {
        EngineError::InvalidPlan(format!("kernel {}: {what}", self.name))
    }

    /// The launch, once every argument the kernel declares is set.
    pub(crate) fn build(&mut self) -> Result<Launch> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        let kernel = self
            .kernel
            .take()
            .ok_or_else(|| self.wrong("built twice".into()))?;
        let declared = match self.declared {
            Some(n) => n,
            None => declared_args(&kernel)?,
        };
        if declared != self.next {
            return Err(self.wrong(format!("{} arguments set, {declared} declared", self.next)));
        }
        Ok(Launch {
            kernel: Some(kernel),
            name: std::mem::take(&mut self.name),
            pool: self.pool.take(),
            gws: self.gws,
            lws: self.lws,
            x_arg: self.x_arg,
            y_arg: self.y_arg,
            _keep: std::mem::take(&mut self.keep),
            #[cfg(test)]
            mems: std::mem::take(&mut self.mems),
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The engine of these tests; `None` (the test skips) without a platform,
    /// except under `CI=true` or `SPMV_REQUIRE_DEVICE=1`, where that fails.
    pub(crate) fn engine() -> Option<crate::Engine> {
        // One opening at a time: PoCL's platform query, run from several
        // test threads at once, sometimes reports no device.
        static OPEN: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let opened = {
            let _one = OPEN.lock().unwrap_or_else(|e| e.into_inner());
            crate::Engine::new(None)
        };
        match opened {
            Ok(e) => Some(e),
            Err(EngineError::NoPlatform(why)) => {
                let set = |k: &str| {
                    std::env::var(k).is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"))
                };
                assert!(
                    !set("CI") && !set("SPMV_REQUIRE_DEVICE"),
                    "an OpenCL platform is required under CI / SPMV_REQUIRE_DEVICE=1 ({why})"
                );
                eprintln!("SKIP: no OpenCL platform ({why})");
                None
            }
            Err(e) => panic!("an OpenCL platform exists but the engine failed to start: {e}"),
        }
    }

    /// A plan's kernel objects come from the program's pool and go back when
    /// it is dropped; a kernel object reused with another matrix's arguments,
    /// and two plans of one kernel alive at once, still compute y right.
    #[test]
    fn kernel_objects_are_taken_from_the_pool_and_given_back() {
        let Some(e) = engine() else { return };
        let a = sparse::gen::power_law(500, 6.0, 1).unwrap();
        let b = sparse::gen::stencil_2d(30, 20).unwrap();
        let (ma, mb) = (e.upload(&a).unwrap(), e.upload(&b).unwrap());
        let serial = sparse::KernelId::Serial;
        let name = "spmv_serial";
        let before = ma.kernels.free_of(name);
        assert_eq!(before, 1, "one made ready when the program was built");
        let pa = e.prepare_kernel(&ma, serial).unwrap();
        assert_eq!(ma.kernels.free_of(name), before - 1);
        let pb = e.prepare_kernel(&mb, serial).unwrap();
        drop(pa);
        // The kernel object that ran a is now bound to b's buffers.
        let pb2 = e.prepare_kernel(&mb, serial).unwrap();
        for (m, pp, csr) in [(&mb, &pb, &b), (&mb, &pb2, &b)] {
            let x: Vec<f64> = (0..csr.ncols()).map(|i| 1.0 + (i % 7) as f64).collect();
            let (y, _) = e.execute(m, pp, &x).unwrap();
            let want = sparse::spmv::spmv_ref(csr, &x).unwrap();
            assert!(sparse::spmv::compare(csr, &x, &y, &want).ok());
        }
        drop((pb, pb2));
        assert_eq!(ma.kernels.free_of(name), before + 1);
        let pa = e.prepare_kernel(&ma, serial).unwrap();
        let x = vec![1.0; a.ncols()];
        let (y, _) = e.execute(&ma, &pa, &x).unwrap();
        assert!(sparse::spmv::compare(&a, &x, &y, &sparse::spmv::spmv_ref(&a, &x).unwrap()).ok());
    }

    /// A pooled launch checks its argument count against the count the pool
    /// asked when the program was built, without asking again: too few are
    /// refused, the right number builds, and a kernel object made when the
    /// pool had none free knows its count too.
    #[test]
    fn pooled_launches_check_the_argument_count_the_pool_knows() {
        let Some(e) = engine() else { return };
        let a = sparse::gen::stencil_2d(8, 8).unwrap();
        let m = e.upload(&a).unwrap();
        let pool = &m.kernels;
        let name = "spmv_serial";
        let known = {
            let free = pool.free.lock().unwrap();
            free.iter().find(|e| e.name == name).and_then(|e| e.args)
        };
        assert_eq!(known, Some(9), "asked once when the program was built");
        let mut short = LaunchBuilder::pooled(pool, name, (64, 64));
        short.arg(1u32).arg(0u32);
        let err = short.build().unwrap_err().to_string();
        assert!(err.contains("2 arguments set, 9 declared"), "{err}");
        // Every free kernel object taken: the next is made, its count known.
        let held: Vec<_> = (0..3)
            .map(|_| e.prepare_kernel(&m, sparse::KernelId::Serial).unwrap())
            .collect();
        assert_eq!(pool.free_of(name), 0);
        let (_, args) = pool.take(name).unwrap();
        assert_eq!(args, Some(9));
        drop(held);
    }

    /// A launch with too few or too many arguments, a scalar of the wrong
    /// size or an unknown entry point is an error at preparation, not a launch.
    #[test]
    fn wrong_arguments_are_refused_at_build() {
        let Some(e) = engine() else { return };
        let prog = e.program(crate::Precision::F32).unwrap();
        let buf = Buffer::<f32>::builder()
            .queue(e.queue().clone())
            .len(64)
            .build()
            .unwrap();
        let geometry = (256, 256);
        let err = |b: &mut LaunchBuilder| b.build().unwrap_err().to_string();
        let short = err(LaunchBuilder::new(&prog, "copy_float4", geometry).arg(16u32));
        assert!(short.contains("1 arguments set, 3 declared"), "{short}");
        let long = err(LaunchBuilder::new(&prog, "copy_float4", geometry)
            .arg(16u32)
            .arg(&buf)
            .arg(&buf)
            .arg(1u32));
        assert!(long.contains("argument 3"), "{long}");
        let scalar_for_buffer = err(LaunchBuilder::new(&prog, "copy_float4", geometry)
            .arg(16u32)
            .arg(16u32));
        assert!(
            scalar_for_buffer.contains("argument 1"),
            "{scalar_for_buffer}"
        );
        assert!(LaunchBuilder::new(&prog, "no_such_kernel", geometry)
            .arg(1u32)
            .build()
            .is_err());
        let ok = LaunchBuilder::new(&prog, "copy_float4", geometry)
            .arg(16u32)
            .arg(&buf)
            .arg(&buf)
            .build();
        assert!(ok.is_ok(), "{ok:?}");
    }
}
