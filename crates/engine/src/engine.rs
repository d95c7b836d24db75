//! The engine: one OpenCL device, its context and profiling queue, the kernel
//! programs (built once per precision, or loaded from the binary cache),
//! uploads, plan preparation, execution and timing.

use crate::build::{BuildCtx, Built, Counters, ProgramStats};
use crate::cache::ProgramCache;
use crate::config::{EngineConfig, ReductionPath, WarpShuffle};
use crate::device::{self, DeviceInfo};
use crate::error::{EngineError, Result};
use crate::host::{HostBytes, LeBytes};
use crate::kernels::{DeviceScalar, KernelParams, Precision};
use crate::launch::{Launch, LaunchBuilder};
use crate::matrix::{DeviceMatrix, Staging};
use crate::prepared::{build_steps, group_rows, launch_groups, LaunchMode, PreparedPlan, RowSet};
use crate::shared::Target;
use ocl::enums::ProfilingInfo;
use ocl::{Buffer, Context, Device, Event, Program, Queue};
use sparse::{Binning, Csr, KernelId, Plan, Scheme};
use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

pub use crate::timing::{BackToBack, TimeStats, TimingPolicy};

/// Buffers one call's launches use in place of the matrix's own x and y
/// (`None`: the matrix's own), each of the matrix's size.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Redirect<'a> {
    pub(crate) x: Option<Target<'a>>,
    pub(crate) y: Option<Target<'a>>,
}

/// Kernel, transfer and end-to-end time of one SpMV.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Timings {
    /// Sum of the kernels' OpenCL profiling times (end - start), nanoseconds:
    /// device time of the SpMV kernels only, no transfer and no host overhead.
    pub kernel_ns: u64,
    /// Profiled time of the x upload (pinned host memory to device), nanoseconds.
    pub upload_x_ns: u64,
    /// Of which the part that ran once the call had all of x, nanoseconds.
    /// Every path uploads x whole once it is all there, so this equals
    /// `upload_x_ns`; the server still reports it (`upload_x_after`).
    pub upload_x_after_ns: u64,
    /// Profiled time of the y download (device to pinned host memory), nanoseconds.
    pub download_y_ns: u64,
    /// Wall clock of x upload + kernels + y download, nanoseconds.
    pub wall_ns: u64,
    /// Kernel enqueues.
    pub enqueues: usize,
    /// Whether the kernels were enqueued with profiling events: `kernel_ns`
    /// is their time when true, 0 when false (a call the engine did not
    /// sample, [`Engine::with_profile_every`]).
    pub profiled: bool,
    /// Whether the kernels used x and y where the caller had them (shared
    /// host memory, [`Engine::shared_bytes`]): no copy, and `upload_x_ns`
    /// and `download_y_ns` are the unmap of x and the map of y.
    pub in_place: bool,
}

impl Timings {
    /// Kernel time in milliseconds (0 when the call was not profiled).
    pub fn kernel_ms(&self) -> f64 {
        self.kernel_ns as f64 * 1e-6
    }

    /// Kernel time in milliseconds when the call was profiled.
    pub fn kernel_ms_profiled(&self) -> Option<f64> {
        self.profiled.then(|| self.kernel_ms())
    }

    /// x upload time in milliseconds.
    pub fn upload_x_ms(&self) -> f64 {
        self.upload_x_ns as f64 * 1e-6
    }

    /// The part of x's upload after x was all there, in milliseconds.
    pub fn upload_x_after_ms(&self) -> f64 {
        self.upload_x_after_ns as f64 * 1e-6
    }

    /// y download time in milliseconds.
    pub fn download_y_ms(&self) -> f64 {
        self.download_y_ns as f64 * 1e-6
    }

    /// End-to-end time in milliseconds.
    pub fn wall_ms(&self) -> f64 {
        self.wall_ns as f64 * 1e-6
    }
}

/// Measured copy bandwidth of the device (the bound SpMV is compared with).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CopyBandwidth {
    /// Bytes read plus bytes written per copy.
    pub bytes: u64,
    /// Median kernel time, ms.
    pub median_ms: f64,
    /// `bytes / median time`, GB/s (1e9 bytes per second).
    pub gbps: f64,
    /// Fastest repetition, ms.
    pub min_ms: f64,
    /// `bytes / fastest time`, GB/s: what the device can move when nothing
    /// else holds it. Other work only ever slows a copy, so this is the
    /// steadiest estimate of the bound on a loaded machine, and the one the
    /// planner's SpMV-time bound uses.
    pub peak_gbps: f64,
}

/// What planning for a number of calls weighs about the device, measured
/// once ([`Engine::planning_figures`]): the same figures wherever a plan is
/// made (the service at start, `spmv predict --calls`, the trainer's
/// first-call evaluation).
#[derive(Debug)]
pub struct PlanningFigures {
    /// Host time of preparing one launch ([`Engine::launch_prepare_ms`]).
    pub launch_ms: Result<f64>,
    /// The copy bandwidth, 64 MiB each way, 5 repetitions ([`Engine::copy_bandwidth`]).
    pub copy: Result<CopyBandwidth>,
}

impl PlanningFigures {
    /// The per-launch cost, when measured.
    pub fn launch(&self) -> Option<f64> {
        self.launch_ms.as_ref().ok().copied()
    }

    /// The copy bandwidth the planner's SpMV-time bound uses (the fastest
    /// repetition's), when measured.
    pub fn copy_gbps(&self) -> Option<f64> {
        self.copy.as_ref().ok().map(|c| c.peak_gbps)
    }
}

/// One OpenCL device with its kernel pool.
///
/// `Engine` is `Send + Sync`: share it (e.g. in an `Arc` or a `OnceLock`) and call it
/// from any thread. OpenCL calls block, so async code should call it from a
/// blocking task. Calls on the same [`DeviceMatrix`] are serialised by the matrix.
#[derive(Debug)]
pub struct Engine {
    info: DeviceInfo,
    device: Device,
    context: Context,
    queue: Queue,
    programs: Mutex<HashMap<Precision, Built>>,
    params: [KernelParams; 2],
    warp_shuffle: WarpShuffle,
    cache: Option<ProgramCache>,
    counters: Counters,
    next_id: AtomicU64,
    /// Whether the device stores values little-endian (asked once at open:
    /// [`Engine::execute_le`] needs it on every call).
    little_endian: bool,
    /// How binary x and y reach the device ([`EngineConfig::binary_staging`]).
    binary_staging: crate::config::BinaryStaging,
    /// [`EngineConfig::in_place_min_bytes`], resolved.
    pub(crate) in_place_min_bytes: usize,
    /// Whether shared memory ([`Engine::shared_bytes`]) is fine-grained
    /// SVM: the device offers it and [`EngineConfig::shared_memory`] allows.
    pub(crate) svm: bool,
    /// The solver kernels' programs (`solve::blas_program`), built on first use.
    pub(crate) solver_programs: Mutex<HashMap<Precision, Program>>,
    /// Calls of a plan whose kernels are profiled: the first
    /// [`PROFILED_FIRST`], then one in `profile_every` (1: every call).
    profile_every: u64,
}

/// The first calls of every plan that [`Engine::execute`] and its siblings
/// profile whatever [`Engine::with_profile_every`] says.
pub const PROFILED_FIRST: u64 = 3;

/// A read-only device copy of `data`; an empty slice gets a one-element buffer,
/// since OpenCL has no zero-sized buffers (kernels never read it then).
pub(crate) fn read_only_copy<P: ocl::OclPrm>(q: &Queue, data: &[P]) -> Result<Buffer<P>> {
    let b = Buffer::<P>::builder()
        .queue(q.clone())
        .flags(ocl::flags::MEM_READ_ONLY)
        .len(data.len().max(1));
    Ok(if data.is_empty() {
        b.build()?
    } else {
        b.copy_host_slice(data).build()?
    })
}

/// Fills the staging buffer with a copy of `x` (its length already checked).
fn copy_into<T: DeviceScalar>(x: &[T]) -> impl FnOnce(&mut [T]) -> Result<()> + '_ {
    move |staged| {
        staged.copy_from_slice(x);
        Ok(())
    }
}

fn event_ns(ev: &Event) -> Result<u64> {
    let s = ev.profiling_info(ProfilingInfo::Start)?.time()?;
    let e = ev.profiling_info(ProfilingInfo::End)?.time()?;
    Ok(e.saturating_sub(s))
}

impl Engine {
    /// Opens a device with the default configuration: the first matching
    /// `selector` (a case-insensitive substring of "platform / device" name), else
    /// the best available (GPU, then accelerator, then CPU). See [`Engine::with_config`].
    pub fn new(selector: Option<&str>) -> Result<Engine> {
        Engine::with_config(&EngineConfig {
            device: selector.map(str::to_string),
            ..EngineConfig::default()
        })
    }

    /// Opens the device `cfg.device` selects (the best one when `None`). Kernel
    /// parameters are those of [`KernelParams::for_device`] with
    /// `cfg.kernel_params` applied and the merge tile shrunk to fit the
    /// device's local memory; programs are built with the reduction path
    /// `cfg.warp_shuffle` allows and cached in `cfg.cache_dir`.
    pub fn with_config(cfg: &EngineConfig) -> Result<Engine> {
        let (platform, device, info) = device::select(cfg.device.as_deref())?;
        let context = Context::builder()
            .platform(platform)
            .devices(device)
            .build()?;
        let queue = Queue::new(&context, device, Some(ocl::flags::QUEUE_PROFILING_ENABLE))?;
        let mut params = [Precision::F32, Precision::F64]
            .map(|p| KernelParams::for_device(p, &info.kind, info.max_work_group_size));
        if let Some(spec) = &cfg.kernel_params {
            for p in params.iter_mut() {
                *p = p
                    .with_overrides(spec)
                    .map_err(|e| EngineError::Config(format!("kernel parameters: {e}")))?;
            }
        }
        for (p, k) in [Precision::F32, Precision::F64]
            .into_iter()
            .zip(params.iter_mut())
        {
            *k = k.fit_local_memory(p, info.local_mem_bytes);
        }
        let little_endian = matches!(
            device.info(ocl::enums::DeviceInfo::EndianLittle),
            Ok(ocl::enums::DeviceInfoResult::EndianLittle(true))
        );
        let svm = cfg.shared_memory == crate::config::SharedMemory::Auto
            && crate::shared::fine_grain_svm(&device);
        Ok(Engine {
            little_endian,
            binary_staging: cfg.binary_staging,
            in_place_min_bytes: cfg.in_place_min_bytes.unwrap_or(if svm {
                crate::shared::IN_PLACE_MIN_BYTES_SVM
            } else {
                crate::shared::IN_PLACE_MIN_BYTES
            }),
            svm,
            info,
            device,
            context,
            queue,
            programs: Mutex::new(HashMap::new()),
            params,
            warp_shuffle: cfg.warp_shuffle,
            cache: cfg.cache_dir.as_deref().map(ProgramCache::new),
            counters: Counters::default(),
            next_id: AtomicU64::new(1),
            profile_every: 1,
            solver_programs: Mutex::new(HashMap::new()),
        })
    }

    /// Profiles the kernels of the first [`PROFILED_FIRST`] calls of each
    /// plan and then of one call in `every` (0 or 1: every call, the
    /// default). A call without events enqueues faster on NVIDIA's OpenCL;
    /// its [`Timings::profiled`] is false and its kernel time 0. Timing
    /// loops ([`Engine::measure`], [`Engine::time`]) always profile, and
    /// [`Engine::back_to_back`] never does.
    pub fn with_profile_every(mut self, every: u64) -> Engine {
        self.profile_every = every.max(1);
        self
    }

    /// Replaces the kernel parameters of one precision (programs are rebuilt on
    /// next use; matrices uploaded before keep the old program). The merge tile
    /// is shrunk to fit the device's local memory, as in [`Engine::with_config`].
    pub fn with_params(mut self, p: Precision, params: KernelParams) -> Result<Engine> {
        params.with_overrides("").map_err(EngineError::Config)?;
        self.params[p as usize] = params.fit_local_memory(p, self.info.local_mem_bytes);
        self.programs
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&p);
        Ok(self)
    }

    /// The OpenCL context.
    pub(crate) fn context(&self) -> &Context {
        &self.context
    }

    /// The OpenCL device.
    pub(crate) fn device(&self) -> Device {
        self.device
    }

    /// The profiling queue every command goes to.
    pub(crate) fn queue(&self) -> &Queue {
        &self.queue
    }

    /// The device.
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// Kernel parameters used for a precision.
    pub fn params(&self, p: Precision) -> KernelParams {
        self.params[p as usize]
    }

    /// The kernel program for a precision, built (or loaded from the binary
    /// cache) on first use and kept.
    pub fn program(&self, p: Precision) -> Result<Program> {
        Ok(self.built(p)?.program)
    }

    /// The reduction path of the program for a precision (builds it if needed).
    pub fn reduction_path(&self, p: Precision) -> Result<ReductionPath> {
        Ok(self.built(p)?.path)
    }

    /// The OpenCL build options of the program for a precision on this device
    /// (builds it if needed): part of the context a timing was taken in.
    pub fn build_options(&self, p: Precision) -> Result<String> {
        Ok(self.params(p).build_options(p, self.reduction_path(p)?))
    }

    /// The device's preferred work-group size multiple for the row kernels
    /// (`CL_KERNEL_PREFERRED_WORK_GROUP_SIZE_MULTIPLE`; 32 on NVIDIA GPUs).
    pub fn preferred_work_group_multiple(&self, p: Precision) -> Result<usize> {
        Ok(self.built(p)?.preferred_multiple)
    }

    /// How this engine's programs were obtained: compiled, or loaded from the cache.
    pub fn program_stats(&self) -> ProgramStats {
        self.counters.snapshot()
    }

    fn built(&self, p: Precision) -> Result<Built> {
        if p == Precision::F64 && !self.info.fp64 {
            return Err(EngineError::UnsupportedPrecision {
                device: self.info.name.clone(),
                precision: p.name(),
            });
        }
        let mut programs = self.programs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(b) = programs.get(&p) {
            return Ok(b.clone());
        }
        let ctx = BuildCtx {
            context: &self.context,
            device: self.device,
            info: &self.info,
            cache: self.cache.as_ref(),
            counters: &self.counters,
            setting: self.warp_shuffle,
        };
        let b = ctx.build(p, &self.params(p))?;
        programs.insert(p, b.clone());
        Ok(b)
    }

    fn check_alloc(&self, what: &str, bytes: u64) -> Result<()> {
        if bytes > self.info.max_alloc_bytes {
            return Err(EngineError::TooBig {
                what: what.into(),
                bytes,
                limit: self.info.max_alloc_bytes,
                device: self.info.name.clone(),
            });
        }
        Ok(())
    }

    /// Uploads a matrix (and room for x and y) once; reuse it for every call.
    pub fn upload<T: DeviceScalar>(&self, a: &Csr<T>) -> Result<DeviceMatrix<T>> {
        let kernels = self.built(T::PRECISION)?.kernels;
        let (m, n, z, v) = (
            a.nrows() as u64,
            a.ncols() as u64,
            a.nnz() as u64,
            T::BYTES as u64,
        );
        self.check_alloc("row_ptr", (m + 1) * 4)?;
        self.check_alloc("col_idx", z * 4)?;
        self.check_alloc("values", z * v)?;
        self.check_alloc("x", n * v)?;
        self.check_alloc("y", m * v)?;
        let total = (m + 1) * 4 + z * (4 + v) + n * v + m * v;
        if total > self.info.global_mem_bytes {
            return Err(EngineError::TooBig {
                what: "matrix and vectors".into(),
                bytes: total,
                limit: self.info.global_mem_bytes,
                device: self.info.name.clone(),
            });
        }
        let q = &self.queue;
        let ro = ocl::flags::MEM_READ_ONLY;
        let row_ptr = read_only_copy(q, a.row_ptr())?;
        let col_idx = read_only_copy(q, a.col_idx())?;
        let vals = read_only_copy(q, a.values())?;
        let x = Buffer::<T>::builder()
            .queue(q.clone())
            .flags(ro)
            .len(a.ncols().max(1))
            .build()?;
        let y = Buffer::<T>::builder()
            .queue(q.clone())
            .flags(ocl::flags::MEM_READ_WRITE)
            .len(a.nrows().max(1))
            .build()?;
        let dummy = Buffer::<u32>::builder()
            .queue(q.clone())
            .flags(ro)
            .len(1)
            .build()?;
        let (x_pinned, x_map) = crate::host::map_pinned::<T>(q, a.ncols())?;
        let (y_pinned, y_map) = crate::host::map_pinned::<T>(q, a.nrows())?;
        Ok(DeviceMatrix {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            nrows: a.nrows(),
            ncols: a.ncols(),
            nnz: a.nnz(),
            row_ptr_host: a.row_ptr().to_vec(),
            row_ptr,
            col_idx,
            vals,
            x,
            y,
            dummy,
            kernels,
            staging: Mutex::new(Staging {
                x: x_map,
                y: y_map,
                _x_buf: x_pinned,
                _y_buf: y_pinned,
            }),
        })
    }

    /// Replaces the matrix's values (in CSR order, `nnz` of them, finite)
    /// on the device: the pattern, its device arrays and every plan prepared
    /// for the matrix stay as they are (they read the values buffer at each
    /// call). Waits for calls on the matrix in progress; the next call sees
    /// the new values.
    pub fn update_values<T: DeviceScalar>(&self, m: &DeviceMatrix<T>, vals: &[T]) -> Result<()> {
        if vals.len() != m.nnz {
            return Err(EngineError::InvalidPlan(format!(
                "{} values for a matrix of {} nonzeros",
                vals.len(),
                m.nnz
            )));
        }
        if let Some(i) = vals.iter().position(|v| !v.to_f64().is_finite()) {
            return Err(EngineError::InvalidPlan(format!("value {i} is not finite")));
        }
        let _serial = m.staging.lock().unwrap_or_else(|e| e.into_inner());
        if m.nnz > 0 {
            m.vals.write(vals).queue(&self.queue).enq()?;
        }
        self.queue.finish()?;
        Ok(())
    }

    /// Prepares a complete plan (its scheme is binned here).
    pub fn prepare<T: DeviceScalar>(
        &self,
        m: &DeviceMatrix<T>,
        plan: &Plan,
        mode: LaunchMode,
    ) -> Result<PreparedPlan<T>> {
        let binning = Binning::new(&m.row_ptr_host, plan.scheme);
        self.prepare_binned(m, &binning, plan, mode)
    }

    /// Prepares a complete plan whose binning the caller already has.
    pub fn prepare_binned<T: DeviceScalar>(
        &self,
        m: &DeviceMatrix<T>,
        binning: &Binning,
        plan: &Plan,
        mode: LaunchMode,
    ) -> Result<PreparedPlan<T>> {
        if binning.nrows != m.nrows {
            return Err(EngineError::InvalidPlan(format!(
                "the binning is for {} rows but the matrix has {}",
                binning.nrows, m.nrows
            )));
        }
        plan.check(binning)
            .map_err(|e| EngineError::InvalidPlan(e.to_string()))?;
        // (Kernels of empty bins, which the check allows, launch nothing:
        // `prepare_bins` skips them.)
        let mut pp = self.prepare_bins(m, binning, &plan.kernels, mode)?;
        pp.complete = true;
        Ok(pp)
    }

    /// One kernel on the whole matrix (single-bin scheme, no row list).
    pub fn prepare_kernel<T: DeviceScalar>(
        &self,
        m: &DeviceMatrix<T>,
        kernel: KernelId,
    ) -> Result<PreparedPlan<T>> {
        self.prepare(m, &Plan::single(kernel), LaunchMode::Grouped)
    }

    /// Prepares launches for some bins only: `&[(bin, kernel)]` with
    /// [`LaunchMode::PerBin`] is one kernel on one bin alone, what the trainer
    /// times. Rows outside these bins come back as 0 from [`Engine::execute`].
    pub fn prepare_bins<T: DeviceScalar>(
        &self,
        m: &DeviceMatrix<T>,
        binning: &Binning,
        assign: &[(usize, KernelId)],
        mode: LaunchMode,
    ) -> Result<PreparedPlan<T>> {
        let params = self.params(T::PRECISION);
        for &(b, _) in assign {
            if b >= binning.num_bins() {
                return Err(EngineError::InvalidPlan(format!(
                    "bin {b} does not exist ({} bins)",
                    binning.num_bins()
                )));
            }
        }
        let mut info = launch_groups(binning, assign, mode);
        let mut steps = Vec::with_capacity(info.len());
        let fused = crate::prepared::fuses(mode, &info);
        let rows: Vec<RowSet> = info.iter().map(|l| group_rows(binning, &l.bins)).collect();
        let mut fused_at = None;
        for (l, rows_of) in info.iter_mut().zip(&rows) {
            if fused && crate::fused::row_mapped(l.kernel) {
                // Every row-mapped group is in the one launch, enqueued where
                // the first of them stands; it counts that group's enqueue.
                if fused_at.is_none() {
                    fused_at = Some(steps.len());
                    l.enqueues = 1;
                }
                continue;
            }
            l.enqueues = build_steps(&self.queue, m, &params, (l.kernel, rows_of), &mut steps)?;
        }
        if let Some(at) = fused_at {
            let groups: Vec<(KernelId, &RowSet)> = info
                .iter()
                .zip(&rows)
                .filter(|(l, _)| crate::fused::row_mapped(l.kernel))
                .map(|(l, r)| (l.kernel, r))
                .collect();
            let one = crate::prepared::fused_launch(&self.queue, m, &params, &groups)?;
            steps.insert(at, one);
        }
        let covered: usize = info.iter().map(|l| l.rows).sum();
        Ok(PreparedPlan {
            matrix_id: m.id,
            scheme: binning.scheme,
            mode,
            complete: covered == m.nrows,
            info,
            steps: Mutex::new(steps),
            calls: AtomicU64::new(0),
            _t: PhantomData,
        })
    }

    fn check_call<T: DeviceScalar>(
        &self,
        m: &DeviceMatrix<T>,
        pp: &PreparedPlan<T>,
        x: &[T],
    ) -> Result<()> {
        if pp.matrix_id != m.id {
            return Err(EngineError::WrongMatrix);
        }
        if x.len() != m.ncols {
            return Err(EngineError::XLength {
                expected: m.ncols,
                got: x.len(),
            });
        }
        Ok(())
    }

    /// Enqueues the plan's launches; with `profiled`, each with its profiling
    /// event (returned in order), else with none (an empty list): the
    /// cheaper enqueue of calls nobody times.
    fn enqueue_all(&self, steps: &[Launch], profiled: bool) -> Result<Vec<Event>> {
        self.enqueue_all_with(steps, Redirect::default(), None, profiled)
    }

    /// [`Engine::enqueue_all`] with the launches' x and y arguments pointing
    /// at `to`'s buffers for these enqueues (then back at `m`'s own buffers
    /// `home`, which `to` needs).
    pub(crate) fn enqueue_all_with(
        &self,
        steps: &[Launch],
        to: Redirect<'_>,
        home: Option<(&ocl::core::Mem, &ocl::core::Mem)>,
        profiled: bool,
    ) -> Result<Vec<Event>> {
        let x = to.x.zip(home.map(|h| h.0));
        let y = to.y.zip(home.map(|h| h.1));
        let mut events = Vec::with_capacity(if profiled { steps.len() } else { 0 });
        for k in steps {
            let mut ev = Event::empty();
            let want = profiled.then_some(&mut ev);
            match (x, y) {
                (None, None) => k.enqueue(&self.queue, want)?,
                _ => k.enqueue_with(&self.queue, want, x, y)?,
            }
            if profiled {
                events.push(ev);
            }
        }
        Ok(events)
    }

    /// Uploads the x already in the matrix's pinned buffer; returns the upload's
    /// profiling event.
    /// With a `gate`, the upload waits for it.
    fn upload_staged_x<T: DeviceScalar>(
        &self,
        m: &DeviceMatrix<T>,
        st: &Staging<T>,
        gate: Option<&Gate>,
    ) -> Result<Option<Event>> {
        if m.ncols == 0 {
            return Ok(None);
        }
        let mut ev = Event::empty();
        let cmd = m.x.write(&st.x[..m.ncols]).queue(&self.queue).enew(&mut ev);
        match gate {
            // SAFETY: the staging buffer is locked (`st`) until the caller has
            // waited for the queue, which it does on every path (`run_and_read`).
            Some(g) => unsafe { cmd.ewait(&g.0).block(false).enq()? },
            None => cmd.enq()?,
        }
        Ok(Some(ev))
    }

    /// y = A x with a prepared plan: uploads x, runs the launches, downloads y
    /// (both transfers through pinned host memory). The timings give the kernel,
    /// upload and download times apart, from OpenCL profiling events.
    pub fn execute<T: DeviceScalar>(
        &self,
        m: &DeviceMatrix<T>,
        pp: &PreparedPlan<T>,
        x: &[T],
    ) -> Result<(Vec<T>, Timings)> {
        self.check_call(m, pp, x)?;
        self.execute_with(m, pp, copy_into(x), |y: &[T]| y.to_vec())
    }

    /// y = A x like [`Engine::execute`], but `fill_x` writes x straight into the
    /// pinned staging buffer (a slice of `ncols` values) and `read_y` reads y
    /// straight from it (`nrows` values), so a caller that converts x from its own
    /// encoding and y to another makes one pass over each and no other copy (the
    /// service's request path). An error of `fill_x` stops the call before any
    /// device work. `wall` in the timings spans upload, kernels and download only.
    pub fn execute_with<T, R, E>(
        &self,
        m: &DeviceMatrix<T>,
        pp: &PreparedPlan<T>,
        fill_x: impl FnOnce(&mut [T]) -> std::result::Result<(), E>,
        read_y: impl FnOnce(&[T]) -> R,
    ) -> std::result::Result<(R, Timings), E>
    where
        T: DeviceScalar,
        E: From<EngineError>,
    {
        if pp.matrix_id != m.id {
            return Err(EngineError::WrongMatrix.into());
        }
        let mut st = m.staging.lock().unwrap_or_else(|e| e.into_inner());
        fill_x(&mut st.x[..m.ncols])?;
        let t0 = Instant::now();
        let gate = Gate::new(&self.context)?;
        let up = self.upload_staged_x(m, &st, Some(&gate))?;
        let read = |ev: &mut Event| -> Result<()> {
            let cmd = m.y.read(&mut st.y[..m.nrows]).queue(&self.queue).enew(ev);
            // SAFETY: non-blocking (a blocking read would wait for the gated
            // upload before the gate opens); the staging buffer stays locked
            // until `run_and_read` has waited for the queue.
            unsafe { cmd.block(false).enq()? };
            Ok(())
        };
        let timings =
            self.run_and_read(m, pp, (t0, Redirect::default()), up, read, || drop(gate))?;
        Ok((read_y(&st.y[..m.nrows]), timings))
    }

    /// y = A x with x and y as the little-endian bytes of `T` (the service's
    /// binary wire format), each moved by the device's own copy: x written
    /// from `x_le`, y read into the returned buffer, with no host copy or
    /// conversion of either. `check_x` (the caller's check of x's values)
    /// runs on this thread while the device works; its error is returned
    /// once the device is done, and y discarded. `None` when the host or the
    /// device is big-endian, whose bytes differ from the wire's: then
    /// [`Engine::execute_with`] converts. Calls on one matrix are serialised
    /// by the same lock as the staged path.
    pub fn execute_le<T, E>(
        &self,
        m: &DeviceMatrix<T>,
        pp: &PreparedPlan<T>,
        x_le: &[u8],
        check_x: impl FnOnce() -> std::result::Result<(), E>,
    ) -> std::result::Result<Option<(Vec<u8>, Timings)>, E>
    where
        T: DeviceScalar,
        E: From<EngineError>,
    {
        let mut y = HostBytes::heap(0);
        let t = self.execute_le_into(m, pp, x_le.into(), &mut y, check_x)?;
        Ok(t.map(|t| (y.into_vec(), t)))
    }

    /// `len` bytes of pinned host memory for x or y (contents unspecified):
    /// [`Engine::execute_le_into`] moves x and y in such bytes straight at
    /// the DMA's speed.
    pub fn pinned_bytes(&self, len: usize) -> Result<HostBytes> {
        HostBytes::pinned(&self.queue, len)
    }

    /// [`Engine::execute_le`] with y read into the caller's `y` (made
    /// `nrows * T::BYTES` bytes long, of the same kind, when it has another
    /// length): a caller that reuses its buffer allocates and faults in no
    /// new memory per call. When x and y are both shared memory
    /// ([`Engine::shared_bytes`]) the kernels use them in place, with no
    /// copy; when both are pinned host memory they go straight to and from
    /// the device; otherwise the engine's
    /// [`crate::BinaryStaging`] says whether they are copied through the
    /// matrix's pinned staging. `y` is left unspecified on an error.
    pub fn execute_le_into<T, E>(
        &self,
        m: &DeviceMatrix<T>,
        pp: &PreparedPlan<T>,
        x: LeBytes<'_>,
        y: &mut HostBytes,
        check_x: impl FnOnce() -> std::result::Result<(), E>,
    ) -> std::result::Result<Option<Timings>, E>
    where
        T: DeviceScalar,
        E: From<EngineError>,
    {
        if cfg!(target_endian = "big") || !self.device_little_endian() {
            return Ok(None);
        }
        if pp.matrix_id != m.id {
            return Err(EngineError::WrongMatrix.into());
        }
        let x_le = x.bytes;
        if x_le.len() != m.ncols * T::BYTES {
            return Err(EngineError::XLength {
                expected: m.ncols,
                got: x_le.len() / T::BYTES,
            }
            .into());
        }
        self.fit_host_bytes(y, m.nrows * T::BYTES)?;
        if let Some(both) = self.in_place(m, x, y) {
            return self.execute_in_place(m, pp, both, check_x).map(Some);
        }
        let widest = m.ncols.max(m.nrows) * T::BYTES;
        let both_pinned = x.pinned && y.is_pinned();
        if !both_pinned && self.binary_staging.pinned_for(&self.info.kind, widest) {
            // Through the matrix's pinned buffers (the staged path): x's bytes
            // copied in and checked before the device starts, y's copied out.
            let fill = |xs: &mut [T]| {
                le_bytes_mut(xs).copy_from_slice(x_le);
                check_x()
            };
            let ((), t) = self.execute_with(m, pp, fill, |ys: &[T]| {
                y.as_mut().copy_from_slice(le_bytes(ys))
            })?;
            return Ok(Some(t));
        }
        let _serial = m.staging.lock().unwrap_or_else(|e| e.into_inner());
        let t0 = Instant::now();
        let mut up = None;
        let gate = Gate::new(&self.context)?;
        if m.ncols > 0 {
            let mut ev = Event::empty();
            // SAFETY: `x_le` holds exactly the buffer's `ncols * T::BYTES`
            // bytes and outlives the call, which waits for the queue to finish.
            unsafe {
                ocl::core::enqueue_write_buffer(
                    self.queue.as_core(),
                    m.x.as_core(),
                    false,
                    0,
                    x_le,
                    Some(&gate.0),
                    Some(&mut ev),
                )
                .map_err(EngineError::from)?;
            }
            up = Some(ev);
        }
        let mut checked = Ok(());
        let read = |ev: &mut Event| self.enqueue_read_y_le(m, y.as_mut(), ev);
        let timings = self.run_and_read(m, pp, (t0, Redirect::default()), up, read, || {
            drop(gate);
            checked = check_x()
        })?;
        checked?;
        Ok(Some(timings))
    }

    /// Gives `y` the length `len` (a new buffer of its kind when it has
    /// another; nothing to do when it has that length).
    fn fit_host_bytes(&self, y: &mut HostBytes, len: usize) -> Result<()> {
        if y.len() != len {
            *y = if y.is_pinned() {
                self.pinned_bytes(len)?
            } else if y.is_shared() {
                self.shared_bytes(len)?
            } else {
                HostBytes::heap(len)
            };
        }
        Ok(())
    }

    /// Whether the device stores values little-endian (every GPU and CPU
    /// device known; OpenCL lets a device say otherwise).
    fn device_little_endian(&self) -> bool {
        self.little_endian
    }

    /// Enqueues the read of `m`'s y into `y`, its little-endian bytes,
    /// without blocking; `y` must hold exactly `nrows * T::BYTES` bytes and is
    /// not to be touched until the queue has finished.
    fn enqueue_read_y_le<T: DeviceScalar>(
        &self,
        m: &DeviceMatrix<T>,
        y: &mut [u8],
        ev: &mut Event,
    ) -> Result<()> {
        // SAFETY: the caller keeps `y` (the buffer's size) untouched until
        // the queue has finished.
        unsafe {
            ocl::core::enqueue_read_buffer(
                self.queue.as_core(),
                m.y.as_core(),
                false,
                0,
                y,
                None::<ocl::core::Event>,
                Some(ev),
            )?;
        }
        Ok(())
    }

    /// The rest of one call once x's upload (`up`) is enqueued: zeroes y when
    /// the plan does not write every row, enqueues the launches (reading x
    /// from `x_mem` when given, else the matrix's own x), enqueues y's
    /// download with `read_y` (given the event to fill; not called for an
    /// empty y), runs `meanwhile` on this thread while the device works (the
    /// callers' `meanwhile` first drops their [`Gate`], which starts the device),
    /// waits for the queue and returns the timings, wall time from `t0`.
    pub(crate) fn run_and_read<T: DeviceScalar>(
        &self,
        m: &DeviceMatrix<T>,
        pp: &PreparedPlan<T>,
        (t0, to): (Instant, Redirect<'_>),
        up: Option<Event>,
        read_y: impl FnOnce(&mut Event) -> Result<()>,
        meanwhile: impl FnOnce(),
    ) -> Result<Timings> {
        let steps = pp.steps.lock().unwrap_or_else(|e| e.into_inner());
        let profiled = pp.profile_call(self.profile_every);
        let enqueued = (|| -> Result<(Vec<Event>, Option<Event>)> {
            if !pp.complete && m.nrows > 0 {
                match to.y {
                    // SVM is the host's during the call as well: zeroed here,
                    // before the launches are enqueued.
                    // SAFETY: `y` holds the matrix's `nrows` values of `T`,
                    // and no command is using it (the queue was drained at
                    // the end of the last call).
                    Some(Target::Svm(y)) => unsafe {
                        std::ptr::write_bytes(y.as_ptr(), 0, m.nrows * T::BYTES)
                    },
                    // (`y` holds the matrix's `nrows` values of `T`.)
                    Some(Target::Mem(y)) => ocl::core::enqueue_fill_buffer(
                        self.queue.as_core(),
                        y,
                        T::zero(),
                        0,
                        m.nrows,
                        None::<ocl::core::Event>,
                        None::<&mut ocl::core::Event>,
                        None,
                    )?,
                    None => m.y.cmd().queue(&self.queue).fill(T::zero(), None).enq()?,
                }
            }
            let home = (m.x.as_core(), m.y.as_core());
            let events = self.enqueue_all_with(&steps, to, Some(home), profiled)?;
            let mut down = None;
            if m.nrows > 0 {
                let mut ev = Event::empty();
                read_y(&mut ev)?;
                // (Empty when reading y enqueued nothing: SVM.)
                down = (!ev.is_empty()).then_some(ev);
            }
            Ok((events, down))
        })();
        // Also after a failed enqueue: `meanwhile` opens the caller's gate and
        // the queue is drained, so no command still reads x's or writes y's
        // memory once the caller has it back.
        meanwhile();
        self.queue.finish()?;
        let (events, down) = enqueued?;
        let wall_ns = t0.elapsed().as_nanos() as u64;
        let mut kernel_ns = 0;
        for ev in &events {
            kernel_ns += event_ns(ev)?;
        }
        let opt_ns = |e: &Option<Event>| e.as_ref().map_or(Ok(0), event_ns);
        Ok(Timings {
            kernel_ns,
            upload_x_ns: opt_ns(&up)?,
            upload_x_after_ns: opt_ns(&up)?,
            download_y_ns: opt_ns(&down)?,
            wall_ns,
            enqueues: steps.len(),
            profiled,
            in_place: to.x.is_some() && to.y.is_some(),
        })
    }

    /// Times a prepared plan: uploads x once, runs `warmup` untimed calls, then
    /// `reps` timed ones (kernel time from profiling events, summed over launches).
    pub fn time<T: DeviceScalar>(
        &self,
        m: &DeviceMatrix<T>,
        pp: &PreparedPlan<T>,
        x: &[T],
        warmup: usize,
        reps: usize,
    ) -> Result<TimeStats> {
        self.check_call(m, pp, x)?;
        let policy = TimingPolicy::fixed(warmup);
        self.timed(m, pp, copy_into(x), &policy, warmup, reps)
    }

    /// Times a prepared plan under `policy`, given an estimate of one call (ms,
    /// typically the caller's first run): warm-up and a first batch sized by
    /// the policy ([`TimingPolicy::reps_for`], [`TimingPolicy::warmup_for`]),
    /// then batches until the median's 95% CI is within `policy.ci_target`,
    /// `policy.ci_max_reps` or `policy.ci_budget_ms` ([`crate::timing::adaptive`]).
    pub fn measure<T: DeviceScalar>(
        &self,
        m: &DeviceMatrix<T>,
        pp: &PreparedPlan<T>,
        x: &[T],
        policy: &TimingPolicy,
        estimate_ms: f64,
    ) -> Result<TimeStats> {
        self.check_call(m, pp, x)?;
        let warmup = policy.warmup_for(estimate_ms);
        let first = policy.reps_for(estimate_ms);
        self.timed(m, pp, copy_into(x), policy, warmup, first)
    }

    /// The one timing loop: x written by `fill_x` into the staging buffer and
    /// uploaded once, `warmup` untimed calls, `first` timed ones, then the
    /// policy's adaptive batches.
    pub(crate) fn timed<T: DeviceScalar>(
        &self,
        m: &DeviceMatrix<T>,
        pp: &PreparedPlan<T>,
        fill_x: impl FnOnce(&mut [T]) -> Result<()>,
        policy: &TimingPolicy,
        warmup: usize,
        first: usize,
    ) -> Result<TimeStats> {
        self.with_x_uploaded(m, pp, fill_x, warmup, |steps| {
            crate::timing::adaptive(policy, first, |n, kern, wall| {
                for _ in 0..n {
                    let t0 = Instant::now();
                    let events = self.enqueue_all(steps, true)?;
                    self.queue.finish()?;
                    wall.push(t0.elapsed().as_secs_f64() * 1e3);
                    let mut ns = 0;
                    for ev in &events {
                        ns += event_ns(ev)?;
                    }
                    kern.push(ns as f64 * 1e-6);
                }
                Ok(())
            })
        })
    }

    /// The timing loops' set-up: x written by `fill_x` into the staging
    /// buffer and uploaded once, `warmup` untimed calls, then `run` over the
    /// plan's launches (staging and launches held until it returns).
    fn with_x_uploaded<T: DeviceScalar, R>(
        &self,
        m: &DeviceMatrix<T>,
        pp: &PreparedPlan<T>,
        fill_x: impl FnOnce(&mut [T]) -> Result<()>,
        warmup: usize,
        run: impl FnOnce(&[Launch]) -> Result<R>,
    ) -> Result<R> {
        if pp.matrix_id != m.id {
            return Err(EngineError::WrongMatrix);
        }
        let mut st = m.staging.lock().unwrap_or_else(|e| e.into_inner());
        fill_x(&mut st.x[..m.ncols])?;
        let steps = pp.steps.lock().unwrap_or_else(|e| e.into_inner());
        self.upload_staged_x(m, &st, None)?;
        for _ in 0..warmup {
            self.enqueue_all(&steps, false)?;
            self.queue.finish()?;
        }
        run(&steps)
    }

    /// Back-to-back calls, timed as a caller that keeps the device busy sees
    /// them: x uploaded once, one warm-up call, then (`calls`, `rounds`):
    /// `rounds` times `calls` executions of the plan enqueued one after the other with a single
    /// `finish` at the end; each round's wall time divided by `calls`. This is
    /// the figure comparable with a library timed by replaying a graph of
    /// `calls` calls (launch gaps included, no host round trip per call),
    /// where [`Engine::measure`] gives the device time of one call.
    pub fn back_to_back<T: DeviceScalar>(
        &self,
        m: &DeviceMatrix<T>,
        pp: &PreparedPlan<T>,
        x: &[T],
        (calls, rounds): (usize, usize),
    ) -> Result<BackToBack> {
        self.check_call(m, pp, x)?;
        let (calls, rounds) = (calls.max(1), rounds.max(1));
        self.with_x_uploaded(m, pp, copy_into(x), 1, |steps| {
            let mut per_call = Vec::with_capacity(rounds);
            for _ in 0..rounds {
                let t0 = Instant::now();
                // No events: what a caller that keeps the device busy pays.
                for _ in 0..calls {
                    self.enqueue_all(steps, false)?;
                }
                self.queue.finish()?;
                per_call.push(t0.elapsed().as_secs_f64() * 1e3 / calls as f64);
            }
            Ok(BackToBack::of(calls, per_call))
        })
    }

    /// Convenience: y = A x with one kernel on the whole matrix.
    pub fn spmv<T: DeviceScalar>(
        &self,
        m: &DeviceMatrix<T>,
        kernel: KernelId,
        x: &[T],
    ) -> Result<(Vec<T>, Timings)> {
        let pp = self.prepare_kernel(m, kernel)?;
        self.execute(m, &pp, x)
    }

    /// Measures the device's copy bandwidth with a float4 copy of about `bytes`
    /// bytes (each way; capped by the device's largest allocation).
    pub fn copy_bandwidth(&self, bytes: usize, reps: usize) -> Result<CopyBandwidth> {
        let prog = self.program(Precision::F32)?;
        let cap = (self.info.max_alloc_bytes as usize).min(self.info.global_mem_bytes as usize / 3);
        let n = (bytes.min(cap) / 16).max(256);
        let q = &self.queue;
        let a = Buffer::<f32>::builder()
            .queue(q.clone())
            .len(n * 4)
            .fill_val(1.0f32)
            .build()?;
        let b = Buffer::<f32>::builder()
            .queue(q.clone())
            .len(n * 4)
            .build()?;
        let wg = self.params(Precision::F32).wg_size;
        let k = LaunchBuilder::new(&prog, "copy_float4", (n.div_ceil(wg) * wg, wg))
            .arg(n as u32)
            .arg(&a)
            .arg(&b)
            .build()?;
        let mut times = Vec::new();
        for i in 0..reps.max(1) + 2 {
            let events = self.enqueue_all(std::slice::from_ref(&k), true)?;
            q.finish()?;
            if i >= 2 {
                times.push(event_ns(&events[0])? as f64 * 1e-6);
            }
        }
        let st = TimeStats::from_samples(times, vec![]);
        let moved = (2 * n * 16) as u64;
        let gbps = |ms: f64| moved as f64 / (ms * 1e-3) / 1e9;
        Ok(CopyBandwidth {
            bytes: moved,
            median_ms: st.median_ms,
            gbps: gbps(st.median_ms),
            min_ms: st.min_ms,
            peak_gbps: gbps(st.min_ms),
        })
    }

    /// The device's figures that planning weighs ([`PlanningFigures`]).
    pub fn planning_figures(&self) -> PlanningFigures {
        PlanningFigures {
            launch_ms: self.launch_prepare_ms(),
            copy: self.copy_bandwidth(64 << 20, 5),
        }
    }

    /// Host time of preparing one launch (a kernel over a tiny uploaded
    /// matrix: kernel object and arguments), median of 7 after one untimed,
    /// in ms: the per-launch part of a plan's analysis cost.
    pub fn launch_prepare_ms(&self) -> Result<f64> {
        let a = Csr::<f32>::from_triplets(4, 4, &[0, 1, 2, 3], &[0, 1, 2, 3], &[1.0; 4])
            .expect("a 4x4 diagonal is a valid matrix");
        let m = self.upload(&a)?;
        self.prepare_kernel(&m, KernelId::Serial)?;
        let mut t = Vec::with_capacity(7);
        for _ in 0..7 {
            let t0 = Instant::now();
            self.prepare_kernel(&m, KernelId::Serial)?;
            t.push(t0.elapsed().as_secs_f64() * 1e3);
        }
        t.sort_by(f64::total_cmp);
        Ok(t[t.len() / 2])
    }

    /// Bins a matrix (host side) under `scheme`: a shortcut for `Binning::new`.
    pub fn binning<T: DeviceScalar>(&self, m: &DeviceMatrix<T>, scheme: Scheme) -> Binning {
        Binning::new(&m.row_ptr_host, scheme)
    }
}

/// A user event the x upload of a call waits on, completed (by dropping it)
/// once every command of the call is enqueued: the device then runs them
/// back to back. Without it, on PoCL the upload starts at once on the
/// device's threads, which share the host's cores, and the calling thread
/// could wait for a core before enqueueing the kernels while the device sat
/// idle (measured: 0.02-0.08 ms at 100K nonzeros, up to several ms at 10M,
/// `examples/call_overhead`). Dropped on every path, so an error between the
/// enqueues never leaves the queue blocked.
struct Gate(ocl::core::Event);

impl Gate {
    fn new(context: &Context) -> Result<Gate> {
        Ok(Gate(ocl::core::create_user_event(context.as_core())?))
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        let _ =
            ocl::core::set_user_event_status(&self.0, ocl::core::CommandExecutionStatus::Complete);
    }
}

/// The bytes of `v` (f32 or f64 values, stored in the host's order, which
/// callers have checked is little-endian like the wire's).
fn le_bytes<T: DeviceScalar>(v: &[T]) -> &[u8] {
    // SAFETY: f32 and f64 have no padding; the slice borrows `v`.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

/// [`le_bytes`], writable.
fn le_bytes_mut<T: DeviceScalar>(v: &mut [T]) -> &mut [u8] {
    let len = std::mem::size_of_val(v);
    // SAFETY: f32 and f64 have no padding and every byte pattern is a valid
    // u8; the slice borrows `v` mutably for its lifetime.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), len) }
}
