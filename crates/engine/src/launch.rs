//! One kernel launch made ready at preparation: an OpenCL kernel object with
//! its arguments set through `ocl::core`, the buffers it refers to kept alive,
//! and its geometry. ocl's `KernelBuilder` asks for every argument's type
//! (`clGetKernelArgInfo`) for every kernel object it builds; our programs are
//! built without `-cl-kernel-arg-info`, so each query fails and ocl formats
//! the error and skips its check: about 6 us a kernel on PoCL for nothing,
//! against 0.4 us for `clCreateKernel` and the arguments. OpenCL checks the
//! size of each scalar argument; the argument count is checked here.

use crate::error::{EngineError, Result};
use ocl::core::{self, ArgVal};
use ocl::{Buffer, Event, Program, Queue};

/// A launch ready to enqueue: enqueued as is on every call (OpenCL captures
/// the arguments at enqueue, and nothing changes them after preparation).
#[derive(Debug)]
pub(crate) struct Launch {
    kernel: core::Kernel,
    gws: usize,
    lws: usize,
    /// The buffers its arguments point to: OpenCL does not retain them.
    _keep: Vec<core::Mem>,
}

impl Launch {
    /// Enqueues the launch on `queue`, its event in `ev`.
    pub(crate) fn enqueue(&self, queue: &Queue, ev: &mut Event) -> Result<()> {
        // SAFETY: every argument was set at preparation (the count checked by
        // `build`), buffers of the sizes the geometry assumes, kept alive by
        // `_keep` as long as the launch.
        unsafe {
            core::enqueue_kernel(
                queue.as_core(),
                &self.kernel,
                1,
                None,
                &[self.gws, 1, 1],
                Some([self.lws, 1, 1]),
                None::<core::Event>,
                Some(ev),
            )
            .map_err(EngineError::from)
        }
    }

    /// What the launch runs, as far as the plan decides it: its entry point,
    /// geometry and the memory objects of its arguments, in order.
    #[cfg(test)]
    pub(crate) fn shape(&self) -> (String, usize, usize, Vec<core::Mem>) {
        let name = core::get_kernel_info(&self.kernel, core::KernelInfo::FunctionName)
            .expect("a kernel object knows its entry point")
            .to_string();
        (name, self.gws, self.lws, self._keep.clone())
    }
}

/// Sets the arguments of one kernel object in order; the first error is kept
/// and returned by [`LaunchBuilder::build`].
pub(crate) struct LaunchBuilder {
    kernel: Option<core::Kernel>,
    name: String,
    gws: usize,
    lws: usize,
    next: u32,
    keep: Vec<core::Mem>,
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
        b.put(ArgVal::mem(mem), Some(mem.clone()));
    }
}

impl LaunchBuilder {
    /// A kernel object for entry point `name` of `program`, launched over
    /// `(global, local)` work-items.
    pub(crate) fn new(
        program: &Program,
        name: impl Into<String>,
        (gws, lws): (usize, usize),
    ) -> LaunchBuilder {
        let name = name.into();
        let (kernel, error) = match core::create_kernel(program.as_core(), &name) {
            Ok(k) => (Some(k), None),
            Err(e) => (None, Some(EngineError::from(e))),
        };
        LaunchBuilder {
            kernel,
            name,
            gws,
            lws,
            next: 0,
            keep: Vec::with_capacity(12),
            error,
        }
    }

    /// Sets the next argument.
    pub(crate) fn arg(&mut self, a: impl LaunchArg) -> &mut Self {
        a.set(self);
        self
    }

    fn put(&mut self, val: ArgVal, mem: Option<core::Mem>) {
        if let (Some(k), None) = (&self.kernel, &self.error) {
            if let Err(e) = core::set_kernel_arg(k, self.next, val) {
                self.error = Some(self.wrong(format!("argument {}: {e}", self.next)));
            }
        }
        self.keep.extend(mem);
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
        match core::get_kernel_info(&kernel, core::KernelInfo::NumArgs)? {
            core::KernelInfoResult::NumArgs(n) if n == self.next => {}
            other => {
                return Err(self.wrong(format!("{} arguments set, {other} declared", self.next)))
            }
        }
        Ok(Launch {
            kernel,
            gws: self.gws,
            lws: self.lws,
            _keep: std::mem::take(&mut self.keep),
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The engine of these tests; `None` (the test skips) without a platform,
    /// except under `CI=true` or `SPMV_REQUIRE_DEVICE=1`, where that fails.
    pub(crate) fn engine() -> Option<crate::Engine> {
        match crate::Engine::new(None) {
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
