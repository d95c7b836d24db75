//! The shared state of the service ([`AppState`]) and its core operations:
//! matrices and their device versions, planning, the device queue.
//!
//! It holds the device (or why there is none), the plan selector, the matrix
//! cache, the device queue, the results database and the metrics; uploading a
//! matrix with its plan, and running y = A x. Device work goes through
//! [`AppState::on_device`], which runs it on the engine of the [`DeviceSlot`]
//! and, on an OpenCL error, drops that engine and every cached matrix's device
//! buffers for a rebuild (the host copies stay, and are uploaded again on their
//! next use).

use crate::device::queue::DeviceQueue;
use crate::device::recovery::{DeviceSlot, RebuildPolicy};
pub use crate::device::run::{
    cast_checked, device_bytes, execute_blocking, upload_blocking, DeviceBuffers, Executed, YVec,
};
pub use crate::device::state::DeviceState;
use crate::domain::config::{Config, Limits};
use crate::domain::error::ApiError;
use crate::service::auth::Principal;
use crate::service::budget::MemoryBudget;
use crate::service::cache::ByteLru;
use crate::service::metrics::{Gauges, Metrics};
use crate::service::planner::{Planned, Planner};
use crate::service::request_log::RequestLog;
use engine::Engine;
use sparse::{Csr, Features, Precision};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

/// What an uploaded matrix holds for one precision.
pub struct Ready {
    /// The precision.
    pub precision: Precision,
    /// The plan and the selector that chose it.
    pub planned: Arc<Planned>,
    /// Device buffers and prepared launches.
    pub buffers: DeviceBuffers,
    /// The generation of the engine they belong to (see [`DeviceSlot`]).
    pub generation: u64,
    /// Bytes charged to the cache for this precision: device buffers, the
    /// plan's host copy and the prepared launches (see [`ready_bytes`]).
    pub device_bytes: u64,
    /// Time spent planning, uploading and preparing, in milliseconds.
    pub setup_ms: f64,
    /// The performance model's own prediction of the plan kept (ms), and the
    /// key its measurements are kept under in the device's calibration (the
    /// same as its tuning race's); `None` without a performance model.
    pub predicted: Option<(String, f64)>,
}

/// An uploaded matrix: the host copy (for verification and other precisions),
/// its features, and its device state per precision.
pub struct StoredMatrix {
    /// The id: a keyed hash of the owner and the content (see [`crate::service::auth::matrix_id`]).
    pub id: String,
    /// The API key name that uploaded it ("" without keys).
    pub owner: String,
    /// The matrix as parsed (values in `f64`).
    pub host: Csr<f64>,
    /// Its features, once computed: at upload, or for an inline matrix only
    /// when the planner asks for them (see [`StoredMatrix::features`]).
    features: OnceLock<Features>,
    /// How often it is expected to be multiplied (the planner weighs analysis
    /// against it): 1 for an inline matrix unless the client says otherwise,
    /// `--uploaded-expected-calls` or the client's figure for an upload.
    pub expected_calls: u64,
    ready: Mutex<Vec<Arc<Ready>>>,
}

impl StoredMatrix {
    /// Wraps a parsed matrix.
    pub fn new(id: String, owner: String, host: Csr<f64>, features: Features) -> Self {
        let m = StoredMatrix::lazy(id, owner, host);
        let _ = m.features.set(features);
        m
    }

    /// Wraps a parsed matrix whose features are computed only when asked
    /// (an inline matrix: the planner may not need them).
    pub fn lazy(id: String, owner: String, host: Csr<f64>) -> Self {
        StoredMatrix {
            id,
            owner,
            host,
            features: OnceLock::new(),
            expected_calls: 1,
            ready: Mutex::new(Vec::new()),
        }
    }

    /// Its features, computed now when they were not yet.
    pub fn features(&self) -> &Features {
        self.features.get_or_init(|| Features::of(&self.host))
    }

    /// Its features when they were computed.
    pub fn features_if_computed(&self) -> Option<&Features> {
        self.features.get()
    }

    /// The same, expected to be multiplied `calls` times.
    pub fn with_expected_calls(mut self, calls: u64) -> Self {
        self.expected_calls = calls.max(1);
        self
    }

    /// The device state for `p`, when uploaded in that precision.
    pub fn ready(&self, p: Precision) -> Option<Arc<Ready>> {
        self.lock().iter().find(|r| r.precision == p).cloned()
    }

    /// The device state for `p` on the engine of generation `generation`.
    pub fn ready_at(&self, p: Precision, generation: u64) -> Option<Arc<Ready>> {
        self.lock()
            .iter()
            .find(|r| r.precision == p && r.generation == generation)
            .cloned()
    }

    /// Gives up every precision's device state (after a device fault);
    /// returns the bytes they were charged.
    pub fn forget_device(&self) -> u64 {
        std::mem::take(&mut *self.lock())
            .iter()
            .map(|r| r.device_bytes)
            .sum()
    }

    /// Every precision uploaded.
    pub fn all_ready(&self) -> Vec<Arc<Ready>> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Ready>>> {
        self.ready.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Device bytes held for it, every precision.
    pub fn device_bytes(&self) -> u64 {
        self.lock().iter().map(|r| r.device_bytes).sum()
    }

    /// Host bytes charged to the cache: the CSR arrays, plus the id, features
    /// and bookkeeping (a fixed [`ENTRY_OVERHEAD`]).
    pub fn host_bytes(&self) -> u64 {
        self.host.bytes() as u64 + ENTRY_OVERHEAD
    }
}

/// The cache key of the transpose of uploaded matrix `id` (`?transpose=true`).
pub fn transposed_id(id: &str) -> String {
    format!("{id}.T")
}

/// Bytes charged per cached matrix and per prepared precision beyond its
/// arrays: id, features, kernel objects and their arguments, locks.
pub const ENTRY_OVERHEAD: u64 = 16 * 1024;

/// Everything one prepared precision holds, charged to the cache: the device
/// buffers ([`device_bytes`]), the plan's host copy (bin row lists and
/// per-bin counts), the idle x and y buffers its `VectorPools` keep, and
/// the prepared launches ([`ENTRY_OVERHEAD`]).
pub fn ready_bytes(a: &Csr<f64>, p: Precision, planned: &Planned) -> u64 {
    let b = &planned.binning;
    let lists: u64 = b.bins.iter().map(|v| 4 * v.len() as u64).sum();
    let pools = (a.nrows() + a.ncols()) as u64 * p.bytes() as u64;
    device_bytes(a, p) + lists + 8 * b.bin_nnz.len() as u64 + pools + ENTRY_OVERHEAD
}

struct Inner {
    config: Config,
    limits: Limits,
    device: DeviceState,
    slot: Arc<DeviceSlot>,
    planner: Planner,
    cache: Mutex<ByteLru<Arc<StoredMatrix>>>,
    queue: DeviceQueue<()>,
    store: Option<store::Store>,
    log: Option<RequestLog>,
    keys: crate::service::auth::Keys,
    id_secret: [u8; 32],
    probe: crate::service::readiness::ProbeCache,
    /// measured / predicted on this device, per precision (f32, f64).
    calibration: [Mutex<selector::Calibration>; 2],
    work: Arc<tokio::sync::Semaphore>,
    metrics: Arc<Metrics>,
    budget: MemoryBudget,
    keeper: Option<Arc<crate::service::keep::Keeper>>,
    started: Instant,
}

/// The state every handler shares; cheap to clone.
#[derive(Clone)]
pub struct AppState(Arc<Inner>);

impl AppState {
    /// Assembles the state from its parts (tests build it this way, with a shared
    /// device, an in-memory database and the planner of their choice).
    pub fn new(
        config: Config,
        device: DeviceState,
        planner: Planner,
        store: Option<store::Store>,
    ) -> AppState {
        let metrics = Arc::new(Metrics::default());
        let planner = planner
            .with_device_figures(device.copy.as_ref().map(|c| c.peak_gbps), device.launch_ms);
        let slot = Arc::new(DeviceSlot::new(
            &device,
            config.engine_config(),
            RebuildPolicy {
                attempts: config.rebuild_attempts,
                backoff: std::time::Duration::from_millis(config.rebuild_backoff_ms),
            },
            metrics.recovery_counters(),
        ));
        let (worker_slot, due_slot) = (slot.clone(), slot.clone());
        let queue = DeviceQueue::start_with(
            config.queue_depth,
            config.retry_after_s,
            || (),
            crate::device::queue::Hook::new(
                move |_| worker_slot.recover(),
                move || due_slot.recovery_pending(),
            ),
            metrics.job_counters(),
        );
        // The slot holds the engine from now on: this copy must not keep a
        // context alive that a fault gives up.
        let device = device.without_engine();
        let log = store
            .clone()
            .map(|db| RequestLog::start(db, config.log_queue, metrics.clone()));
        // `from_config` has checked the keys already; a direct caller with a
        // keys configuration that cannot be used is a programming error.
        let keys = crate::service::auth::keys_for(&config).expect("usable API keys configuration");
        let id_secret = id_secret(&config).expect("usable --id-secret");
        AppState(Arc::new(Inner {
            keys,
            id_secret,
            probe: Default::default(),
            calibration: Default::default(),
            work: Arc::new(tokio::sync::Semaphore::new(config.max_in_flight.max(1))),
            limits: Limits::from(&config),
            cache: Mutex::new(ByteLru::new(config.cache_bytes)),
            device,
            slot,
            planner,
            queue,
            store,
            log,
            metrics,
            budget: MemoryBudget::new(
                config.memory_budget_bytes,
                std::time::Duration::from_millis(config.memory_wait_ms),
                config.retry_after_s,
            ),
            keeper: config
                .keep_matrices
                .clone()
                .map(|dir| crate::service::keep::Keeper::new(dir, config.keep_matrices_bytes)),
            started: Instant::now(),
            config,
        }))
    }

    /// Opens everything the configuration names: the device (off the runtime),
    /// the models, and the results database. Only a database that cannot be
    /// opened is fatal; a missing device or models folder is not.
    pub async fn from_config(config: Config) -> anyhow::Result<AppState> {
        use anyhow::Context;
        crate::service::auth::keys_for(&config)?;
        id_secret(&config)?;
        let device = if config.no_device {
            DeviceState::none("disabled by --no-device / SPMV_NO_DEVICE")
        } else {
            let cfg = config.engine_config();
            tokio::task::spawn_blocking(move || DeviceState::open_with(&cfg))
                .await
                .context("opening the OpenCL device")?
        };
        // A relative models folder (the default `models`) is found from the working
        // directory or the executable, so the service starts from any folder.
        let models = selector::ModelsDir::search(&config.models);
        tracing::info!(folder = %models.path.display(), found = models.found, "models folder");
        let planner = Planner::load_found(&models, device.identity().as_ref());
        let store = if config.no_database {
            None
        } else {
            let s = store::Store::connect(config.database_url.as_deref())
                .await
                .with_context(|| {
                    // The parsed location hides a PostgreSQL password.
                    let shown = match config.database_url.as_deref() {
                        Some(url) => store::DbLocation::parse(url)
                            .map(|l| l.to_string())
                            .unwrap_or_else(|_| "(an invalid URL)".into()),
                        None => "(DATABASE_URL or spmv.db)".into(),
                    };
                    format!("opening the results database {shown}")
                })?;
            tracing::info!(location = %s.location(), "results database ready");
            Some(s)
        };
        Ok(AppState::new(config, device, planner, store))
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.0.config
    }
    /// The size limits.
    pub fn limits(&self) -> &Limits {
        &self.0.limits
    }
    /// The device.
    pub fn device(&self) -> &DeviceState {
        &self.0.device
    }
    /// The plan selector.
    /// Keeps one measured time of a plan the performance model predicted
    /// (see [`selector::Calibration`]).
    pub fn observe_time(&self, p: Precision, key: &str, predicted_ms: f64, measured_ms: f64) {
        self.calibration(p).observe(key, predicted_ms, measured_ms);
    }

    /// A prediction scaled by what this device has measured.
    pub fn calibrate(&self, p: Precision, t: selector::TimePrediction) -> selector::TimePrediction {
        self.calibration(p).apply(t)
    }

    fn calibration(&self, p: Precision) -> std::sync::MutexGuard<'_, selector::Calibration> {
        let i = match p {
            Precision::F32 => 0,
            Precision::F64 => 1,
        };
        self.0.calibration[i]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    pub fn planner(&self) -> &Planner {
        &self.0.planner
    }
    /// The device queue (tests use it to occupy the device deterministically).
    pub fn queue(&self) -> &DeviceQueue<()> {
        &self.0.queue
    }
    /// The memory budget of requests in flight.
    pub fn budget(&self) -> &MemoryBudget {
        &self.0.budget
    }
    /// The metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.0.metrics
    }
    /// The results database, when one is open.
    pub fn store(&self) -> Option<&store::Store> {
        self.0.store.as_ref()
    }
    /// Seconds since start-up.
    pub fn uptime_s(&self) -> f64 {
        self.0.started.elapsed().as_secs_f64()
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, ByteLru<Arc<StoredMatrix>>> {
        self.0.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The current gauge values.
    pub fn gauges(&self) -> Gauges {
        let c = self.cache();
        Gauges {
            cache_bytes: c.used(),
            cache_capacity: c.capacity(),
            cache_entries: c.len(),
            queue_in_flight: self.0.queue.in_flight(),
            queue_depth: self.0.queue.depth(),
            device_up: self.0.slot.is_up(),
        }
    }

    /// Permits for matrix requests in progress (see [`crate::http::layers::shed`]).
    pub fn work_permits(&self) -> &Arc<tokio::sync::Semaphore> {
        &self.0.work
    }

    /// The readiness probe's last outcome.
    pub fn probe_cache(&self) -> &crate::service::readiness::ProbeCache {
        &self.0.probe
    }

    /// The configured API keys.
    pub fn keys(&self) -> &crate::service::auth::Keys {
        &self.0.keys
    }

    /// The id a matrix with this content hash has for this caller.
    pub fn matrix_id(&self, who: &Principal, content_hash: &str) -> String {
        crate::service::auth::matrix_id(&self.0.id_secret, who.owner(), content_hash)
    }

    /// The uploaded matrix `id` of this caller without touching its recency.
    pub fn peek(&self, id: &str, who: &Principal) -> Option<(Arc<StoredMatrix>, usize)> {
        let c = self.cache();
        c.peek(id)
            .filter(|m| m.owner == who.owner())
            .map(|m| (m, c.bytes_of(id).unwrap_or(0)))
    }

    /// Looks up this caller's `id` only if it is cached here (marking it
    /// recently used), without asking the database: see [`AppState::resolve`].
    pub fn try_cached(&self, id: &str, who: &Principal) -> Option<Arc<StoredMatrix>> {
        let mut c = self.cache();
        match c.peek(id) {
            Some(m) if m.owner == who.owner() => c.get(id),
            _ => None,
        }
    }

    /// Removes this caller's `id` (and its transpose, when one was built);
    /// false when it was not there (or not theirs).
    pub fn remove(&self, id: &str, who: &Principal) -> bool {
        let mut c = self.cache();
        match c.peek(id) {
            Some(m) if m.owner == who.owner() => {
                c.remove(&transposed_id(id));
                c.remove(id).is_some()
            }
            _ => false,
        }
    }

    /// Removes `id` (and its transpose) whoever owns it (a failed upload
    /// taking back its own entry, or a delete seen on another replica).
    pub fn remove_any(&self, id: &str) -> bool {
        let mut c = self.cache();
        c.remove(&transposed_id(id));
        c.remove(id).is_some()
    }

    /// The engine slot: generation and health of the device in use.
    pub fn device_slot(&self) -> &DeviceSlot {
        &self.0.slot
    }

    /// Makes the next `faults` device jobs fail with an OpenCL error, and the
    /// next `rebuild_failures` attempts to reopen the device fail (testing).
    pub fn inject_device_faults(&self, faults: u32, rebuild_failures: u32) {
        self.0.slot.inject(faults, rebuild_failures);
    }

    /// Runs a blocking closure on the device worker with the engine in use,
    /// answering 503 when the queue is full, there is no device, or it is
    /// being rebuilt after a fault (see [`AppState::on_device_at`]).
    pub async fn on_device<R: Send + 'static>(
        &self,
        f: impl FnOnce(&Engine) -> Result<R, ApiError> + Send + 'static,
    ) -> Result<R, ApiError> {
        self.on_device_at(None, move |e, _| f(e)).await
    }

    /// Runs `f(engine, generation)` on the device worker, within the request's
    /// deadline (a job still queued past it is dropped without running). With
    /// `expect`, a job that finds an engine of another generation (rebuilt
    /// since its buffers were made) does not run and answers
    /// [`ApiError::Recovering`]. A device fault drops the engine and every
    /// device buffer of the cache, and the worker rebuilds it.
    pub async fn on_device_at<R: Send + 'static>(
        &self,
        expect: Option<u64>,
        f: impl FnOnce(&Engine, u64) -> Result<R, ApiError> + Send + 'static,
    ) -> Result<R, ApiError> {
        let retry = self.0.config.retry_after_s;
        self.0.slot.current(retry, || self.0.queue.wake())?;
        let (admitted, state) = (Instant::now(), self.clone());
        let job = move |_: &mut ()| {
            state.0.metrics.queue_wait(admitted.elapsed().as_secs_f64());
            let (engine, generation) = state.0.slot.current(retry, || {})?;
            if expect.is_some_and(|g| g != generation) {
                return Err(ApiError::Recovering {
                    reason: "the device was rebuilt after a fault while this request waited".into(),
                    retry_after_s: retry,
                });
            }
            let r = match state.0.slot.injected_fault() {
                Some(e) => Err(e),
                None => f(&engine, generation),
            };
            if let Err(ApiError::DeviceFault(cause)) = &r {
                state.device_fault(generation, cause);
            }
            r
        };
        let deadline = crate::device::queue::request_deadline();
        match self.0.queue.run_until(deadline, job).await {
            Ok(r) => r,
            Err(e) => {
                if matches!(e, ApiError::QueueFull { .. }) {
                    self.0.metrics.queue_full();
                }
                Err(e)
            }
        }
    }

    /// After a fault of the engine of `generation` (on the device worker):
    /// gives the engine up for a rebuild and drops every cached matrix's
    /// device buffers and prepared plans (their host copies stay).
    fn device_fault(&self, generation: u64, cause: &str) {
        if !self.0.slot.fault(generation, cause) {
            return;
        }
        let mut c = self.cache();
        let mut freed = 0u64;
        for key in c.keys_lru_first() {
            if let Some(m) = c.peek(&key) {
                let bytes = m.forget_device();
                c.shrink(&key, usize::try_from(bytes).unwrap_or(usize::MAX));
                freed += bytes;
            }
        }
        drop(c);
        self.0.probe.clear();
        tracing::info!(
            freed,
            "device buffers of cached matrices dropped; uploaded again on next use"
        );
    }

    /// Refuses, before any device work, a matrix whose device buffers exceed the
    /// device memory the service may use (507, with the sizes), or a precision
    /// the device lacks (422).
    pub fn check_device_fit(&self, a: &Csr<f64>, p: Precision) -> Result<(), ApiError> {
        let Some(info) = self.0.device.info() else {
            return Ok(());
        };
        if p == Precision::F64 && !info.fp64 {
            return Err(ApiError::Unprocessable(format!(
                "device {} does not support f64 (no cl_khr_fp64); use precision=f32",
                info.name
            )));
        }
        let limit = match self.0.config.device_memory_bytes {
            Some(l) => l.min(info.global_mem_bytes),
            None => info.global_mem_bytes,
        };
        let need = device_bytes(a, p);
        if need > limit {
            return Err(ApiError::DeviceMemory {
                what: format!(
                    "the {}x{} matrix with {} nonzeros in {p}, with x and y,",
                    a.nrows(),
                    a.ncols(),
                    a.nnz()
                ),
                needed: need,
                available: limit,
                device: info.name.clone(),
            });
        }
        self.make_device_room(need, limit);
        Ok(())
    }

    /// What the cached matrices already hold on the device counts against the
    /// limit: least recently used matrices are evicted until `need` more bytes
    /// fit (with a database they are read from it again on next use; without
    /// one they answer 404 afterwards).
    fn make_device_room(&self, need: u64, limit: u64) {
        let mut c = self.cache();
        let mut in_use = device_bytes_held(&c);
        for key in c.keys_lru_first() {
            if need.saturating_add(in_use) <= limit {
                break;
            }
            if let Some(m) = c.remove(&key) {
                let freed = m.device_bytes();
                in_use = in_use.saturating_sub(freed);
                tracing::info!(id = %key, freed, "evicted to make room on the device");
            }
        }
        drop(c);
        tracing::debug!(need, in_use, limit, "device memory after making room");
    }

    /// Device bytes held by the matrices in the cache, every precision.
    pub fn device_bytes_in_use(&self) -> u64 {
        device_bytes_held(&self.cache())
    }

    /// Plans `m` for precision `p` and the calls it is expected to serve
    /// (blocking; features computed only when they can pay, binning only
    /// when it pays).
    pub fn plan(&self, m: &StoredMatrix, p: Precision, explain: bool) -> Planned {
        let compute = || Features::of(&m.host);
        let a = self.0.planner.plan_lazy(
            p,
            (&m.features, compute),
            &m.host,
            m.expected_calls,
            explain,
        );
        Planned {
            plan: a.prediction.plan,
            binning: a.prediction.binning,
            explanation: a.prediction.explanation,
            model: self.0.planner.used(p).clone(),
            tuning: None,
            planning: a.planning,
        }
    }

    /// Makes sure `m` is on the device in precision `p`: plans, uploads and
    /// prepares it on first use, charging the device bytes to the cache.
    /// Returns the device state and whether this call created it.
    pub async fn ensure_ready(
        &self,
        m: &Arc<StoredMatrix>,
        p: Precision,
    ) -> Result<(Arc<Ready>, bool), ApiError> {
        if let Some(r) = m.ready_at(p, self.0.slot.generation()) {
            return Ok((r, false));
        }
        self.check_device_fit(&m.host, p)?;
        let t0 = Instant::now();
        let dev_bytes = device_bytes(&m.host, p);
        {
            let cap = self.cache().capacity() as u64;
            if m.host_bytes() + dev_bytes > cap {
                return Err(ApiError::too_large(
                    "matrix bytes (host copy plus device buffers)",
                    m.host_bytes() + dev_bytes,
                    cap,
                ));
            }
        }
        let planned = {
            let (state, m2) = (self.clone(), m.clone());
            tokio::task::spawn_blocking(move || state.plan(&m2, p, false))
                .await
                .map_err(ApiError::internal)?
        };
        let model_ms =
            self.planner()
                .predict_plan_ms(p, m.features(), &planned.plan, &planned.binning);
        let m2 = m.clone();
        let tune = self.0.config.tune_config();
        let host_pools = self.0.config.host_pools;
        let (buffers, planned, generation) = self
            .on_device_at(None, move |engine, g| {
                let pools = host_pools.kind_for(&engine.info().kind);
                let b =
                    upload_blocking(engine, &m2.host, p, &planned.binning, &planned.plan, pools)?;
                let (b, planned) =
                    crate::service::tune::tune_blocking(engine, b, &m2.host, planned, &tune)?;
                Ok((b, planned, g))
            })
            .await?;
        let dev_bytes = ready_bytes(&m.host, p, &planned);
        let predicted = self.observe_tuning(m, p, &planned, model_ms);
        let ready = Arc::new(Ready {
            precision: p,
            planned: Arc::new(planned),
            buffers,
            generation,
            device_bytes: dev_bytes,
            setup_ms: t0.elapsed().as_secs_f64() * 1e3,
            predicted,
        });
        self.keep_ready(m, ready)
    }

    /// Keeps the tuning race's times against the performance model's
    /// predictions (`model_ms`: of the model's plan), and returns the key and
    /// prediction of the plan kept, whose /spmv times are kept under it.
    fn observe_tuning(
        &self,
        m: &StoredMatrix,
        p: Precision,
        planned: &Planned,
        model_ms: Option<f64>,
    ) -> Option<(String, f64)> {
        let model_ms = model_ms?;
        let predicted = |name: &str| match name {
            "model" => Some(model_ms),
            k => k
                .parse::<sparse::KernelId>()
                .ok()
                .and_then(|k| self.planner().predict_single(p, m.features(), k)),
        };
        let key = |name: &str| format!("{}/{name}", m.id);
        let chosen = match &planned.tuning {
            Some(t) => {
                for c in &t.candidates {
                    if let (Some(ms), Some(pred)) = (c.kernel_ms, predicted(&c.plan)) {
                        self.observe_time(p, &key(&c.plan), pred, ms);
                    }
                }
                t.chosen.as_str()
            }
            None => "model",
        };
        Some((key(chosen), predicted(chosen)?))
    }

    /// Attaches freshly uploaded device state to `m` and charges it to the
    /// cache, unless another request attached the same meanwhile (theirs is
    /// kept) or its engine was given up after a fault (503, retry).
    fn keep_ready(
        &self,
        m: &Arc<StoredMatrix>,
        ready: Arc<Ready>,
    ) -> Result<(Arc<Ready>, bool), ApiError> {
        let (p, generation, dev_bytes) = (ready.precision, ready.generation, ready.device_bytes);
        // The cache lock, then the matrix's: the order a fault's clean-up takes
        // them in, so buffers of an engine given up are never kept or charged.
        let mut c = self.cache();
        {
            let mut list = m.lock();
            if let Some(r) = list
                .iter()
                .find(|r| r.precision == p && r.generation == generation)
            {
                // Another request uploaded it meanwhile; keep theirs.
                return Ok((r.clone(), false));
            }
            if generation != self.0.slot.generation() {
                return Err(ApiError::Recovering {
                    reason: "the device was rebuilt after a fault during this upload".into(),
                    retry_after_s: self.0.config.retry_after_s,
                });
            }
            // An entry of an engine given up (none are left after a fault's
            // clean-up, but its charge would be lost if one were).
            let stale: u64 = list
                .iter()
                .filter(|r| r.precision == p)
                .map(|r| r.device_bytes)
                .sum();
            list.retain(|r| r.precision != p);
            list.push(ready.clone());
            c.shrink(&m.id, usize::try_from(stale).unwrap_or(usize::MAX));
        }
        match c.grow(&m.id, dev_bytes as usize) {
            Ok(Some(evicted)) => self.log_evictions(&evicted),
            // Evicted while we were uploading: the result is still correct for
            // this request; the id answers 404 afterwards.
            Ok(None) => {}
            Err(tb) => {
                tracing::warn!(id = %m.id, bytes = tb.bytes, capacity = tb.capacity, "matrix outgrew the cache; dropped");
                c.remove(&m.id);
            }
        }
        Ok((ready, true))
    }

    /// Puts a parsed matrix in the cache (or returns the one already there).
    pub fn insert(&self, m: StoredMatrix) -> Result<(Arc<StoredMatrix>, bool), ApiError> {
        let mut c = self.cache();
        if let Some(existing) = c.get(&m.id) {
            return Ok((existing, true));
        }
        let m = Arc::new(m);
        let evicted = c
            .insert(&m.id, m.clone(), m.host_bytes() as usize)
            .map_err(|tb| ApiError::too_large("matrix bytes (host copy)", tb.bytes, tb.capacity))?;
        drop(c);
        self.log_evictions(&evicted);
        Ok((m, false))
    }

    fn log_evictions(&self, evicted: &[(String, Arc<StoredMatrix>)]) {
        for (id, _) in evicted {
            tracing::info!(%id, "evicted from the matrix cache (least recently used)");
        }
    }

    /// With `--keep-matrices DIR`, writes the matrix to `DIR/<id>.mtx` once, off the
    /// request's path, for the trainer to learn from served work (within the
    /// folder's `--keep-matrices-bytes` quota).
    pub fn keep_matrix(&self, m: &StoredMatrix) {
        let Some(keeper) = self.0.keeper.clone() else {
            return;
        };
        // The copy is the price of keeping: only paid when --keep-matrices is set.
        let host = m.host.clone();
        let id = m.id.clone();
        tokio::task::spawn_blocking(move || {
            if let Err(e) = keeper.keep(&id, &host) {
                tracing::warn!(error = %e, %id, "could not keep the served matrix");
            }
        });
    }

    /// Served matrices `--keep-matrices` turned away because of its byte quota.
    pub fn keep_skipped(&self) -> u64 {
        self.0.keeper.as_ref().map_or(0, |k| k.skipped())
    }

    /// Writes a served request to the results database, off the request's path
    /// (through the bounded request log; a dropped entry is counted).
    pub fn log_request(&self, r: store::RequestRecord) {
        if let Some(log) = &self.0.log {
            if !log.push(r) {
                self.0.metrics.log_dropped();
            }
        }
    }

    /// The last step of a graceful shutdown: writes the request-log entries
    /// still queued and closes the results database.
    pub async fn shutdown(&self) {
        if let Some(log) = &self.0.log {
            log.flush_and_close().await;
        }
    }
}

/// The id secret: from `--id-secret` (64 hex digits) or random for this start.
fn id_secret(config: &Config) -> anyhow::Result<[u8; 32]> {
    match &config.id_secret {
        Some(h) => {
            let h = h.trim();
            let v: Vec<u8> = (0..h.len() / 2)
                .map(|i| {
                    h.get(2 * i..2 * i + 2)
                        .and_then(|b| u8::from_str_radix(b, 16).ok())
                })
                .collect::<Option<_>>()
                .filter(|_| h.len() % 2 == 0)
                .ok_or_else(|| anyhow::anyhow!("--id-secret is not hex"))?;
            v.try_into().map_err(|v: Vec<u8>| {
                anyhow::anyhow!(
                    "--id-secret must be 32 bytes (64 hex digits), not {}",
                    v.len()
                )
            })
        }
        None => {
            use rand::RngCore;
            let mut s = [0u8; 32];
            rand::rngs::OsRng.fill_bytes(&mut s);
            Ok(s)
        }
    }
}

/// Device bytes held by every matrix in a cache.
fn device_bytes_held(c: &ByteLru<Arc<StoredMatrix>>) -> u64 {
    c.keys_lru_first()
        .iter()
        .filter_map(|k| c.peek(k))
        .map(|m| m.device_bytes())
        .sum()
}
