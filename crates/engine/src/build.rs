//! Building the kernel program of one precision for the engine's device: the
//! reduction path chosen for the device, the binary loaded from the on-disk
//! cache when a valid one exists, else compiled from source and stored.

use crate::cache::{Lookup, ProgramCache};
use crate::config::{choose_reduction, ReductionPath, WarpShuffle};
use crate::device::DeviceInfo;
use crate::error::{EngineError, Result};
use crate::kernels::{plan_entry_points, program_source, KernelParams, Precision};
use crate::launch::KernelPool;
use ocl::enums::{KernelWorkGroupInfo, KernelWorkGroupInfoResult, ProgramInfo, ProgramInfoResult};
use ocl::{Context, Device, Program};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// How the engine's programs were obtained (for logs and tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProgramStats {
    /// Programs compiled from source.
    pub source_builds: usize,
    /// Programs loaded from the binary cache.
    pub cache_loads: usize,
    /// Cache entries ignored: damaged files, or binaries the driver refused.
    pub cache_rejects: usize,
    /// Binaries written to the cache.
    pub cache_stores: usize,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    source_builds: AtomicUsize,
    cache_loads: AtomicUsize,
    cache_rejects: AtomicUsize,
    cache_stores: AtomicUsize,
}

impl Counters {
    pub(crate) fn snapshot(&self) -> ProgramStats {
        let g = |a: &AtomicUsize| a.load(Ordering::Relaxed);
        ProgramStats {
            source_builds: g(&self.source_builds),
            cache_loads: g(&self.cache_loads),
            cache_rejects: g(&self.cache_rejects),
            cache_stores: g(&self.cache_stores),
        }
    }

    fn bump(a: &AtomicUsize) {
        a.fetch_add(1, Ordering::Relaxed);
    }
}

/// A built program and what it was built with.
#[derive(Debug, Clone)]
pub(crate) struct Built {
    pub(crate) program: Program,
    /// Its kernel objects, made ready here (see [`KernelPool`]).
    pub(crate) kernels: Arc<KernelPool>,
    pub(crate) path: ReductionPath,
    /// `CL_KERNEL_PREFERRED_WORK_GROUP_SIZE_MULTIPLE` of the row kernels.
    pub(crate) preferred_multiple: usize,
}

/// What a program build needs from the engine.
pub(crate) struct BuildCtx<'a> {
    pub(crate) context: &'a Context,
    pub(crate) device: Device,
    pub(crate) info: &'a DeviceInfo,
    pub(crate) cache: Option<&'a ProgramCache>,
    pub(crate) counters: &'a Counters,
    pub(crate) setting: WarpShuffle,
}

impl BuildCtx<'_> {
    /// The program for precision `p` with `params`. Under `WarpShuffle::Auto` a
    /// shuffle program the driver does not compile falls back to the portable path.
    pub(crate) fn build(&self, p: Precision, params: &KernelParams) -> Result<Built> {
        let path = choose_reduction(self.setting, self.info, &params.work_group_sizes())?;
        match self.build_path(p, params, path) {
            Err(EngineError::BuildFailed { .. })
                if self.setting == WarpShuffle::Auto && path == ReductionPath::WarpShuffle =>
            {
                self.build_path(p, params, ReductionPath::Portable)
            }
            r => r,
        }
    }

    fn build_path(
        &self,
        p: Precision,
        params: &KernelParams,
        path: ReductionPath,
    ) -> Result<Built> {
        let src = program_source();
        let opts = params.build_options(p, path);
        let i = self.info;
        let key = ProgramCache::key(
            &[&i.platform, &i.name, &i.vendor, &i.driver, &i.version],
            &src,
            &opts,
        );
        if let Some(prog) = self.load_cached(&key, &opts) {
            return self.finish(prog, path);
        }
        let prog = Program::builder()
            .src(src)
            .devices(self.device)
            .cmplr_opt(opts)
            .build(self.context)
            .map_err(|e| EngineError::BuildFailed {
                device: i.name.clone(),
                precision: p.name(),
                log: e.to_string(),
            })?;
        Counters::bump(&self.counters.source_builds);
        if let (Some(cache), Some(bin)) = (self.cache, binary_of(&prog)) {
            // A cache that cannot be written only costs the next start a compile.
            if cache.store(&key, &bin).is_ok() {
                Counters::bump(&self.counters.cache_stores);
            }
        }
        self.finish(prog, path)
    }

    fn load_cached(&self, key: &str, opts: &str) -> Option<Program> {
        let cache = self.cache?;
        let bin = match cache.load(key) {
            Lookup::Found(b) => b,
            Lookup::Missing => return None,
            Lookup::Damaged => {
                Counters::bump(&self.counters.cache_rejects);
                return None;
            }
        };
        let built = Program::builder()
            .binaries(&[&bin])
            .devices(self.device)
            .cmplr_opt(opts)
            .build(self.context);
        match built {
            Ok(prog) if ocl::core::create_kernel(prog.as_core(), "spmv_serial").is_ok() => {
                Counters::bump(&self.counters.cache_loads);
                Some(prog)
            }
            _ => {
                cache.remove(key);
                Counters::bump(&self.counters.cache_rejects);
                None
            }
        }
    }

    fn finish(&self, program: Program, path: ReductionPath) -> Result<Built> {
        let k = ocl::core::create_kernel(program.as_core(), "spmv_serial")?;
        let preferred_multiple = match ocl::core::get_kernel_work_group_info(
            &k,
            self.device,
            KernelWorkGroupInfo::PreferredWorkGroupSizeMultiple,
        ) {
            Ok(KernelWorkGroupInfoResult::PreferredWorkGroupSizeMultiple(m)) => m.max(1),
            _ => 1,
        };
        Ok(Built {
            kernels: KernelPool::ready(&program, &plan_entry_points()),
            program,
            path,
            preferred_multiple,
        })
    }
}

/// The device binary of a program built for one device.
fn binary_of(prog: &Program) -> Option<Vec<u8>> {
    match prog.info(ProgramInfo::Binaries) {
        Ok(ProgramInfoResult::Binaries(mut v)) if v.len() == 1 && !v[0].is_empty() => v.pop(),
        _ => None,
    }
}
