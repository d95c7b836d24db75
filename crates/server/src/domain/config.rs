//! Service configuration: command-line flags, each also readable from the
//! environment, with defaults that work with no configuration at all.

use crate::domain::error::ApiError;
use clap::{Parser, ValueEnum};
use std::net::SocketAddr;
use std::path::PathBuf;

/// Everything the service can be told at start-up.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "server",
    version,
    about = "SpMV service: POST a matrix to /predict for a plan, to /matrices to upload it once, to /spmv for y = A x"
)]
pub struct Config {
    /// Address and port to listen on.
    #[arg(long, env = "SPMV_BIND", default_value = "127.0.0.1:8080")]
    pub bind: SocketAddr,

    /// Results database (`postgres://USER@HOST/DB` for one shared by several
    /// machines, `sqlite://PATH`, a plain path, or `sqlite::memory:`); served
    /// requests are logged there. Default: `spmv.db` in the working directory.
    #[arg(long, alias = "database", env = "DATABASE_URL")]
    pub database_url: Option<String>,

    /// Run without a results database (requests are not logged).
    #[arg(long, env = "SPMV_NO_DATABASE", default_value_t = false)]
    pub no_database: bool,

    /// Folder holding the selector models (`*.json`).
    #[arg(
        long = "models-dir",
        alias = "models",
        env = "SPMV_MODELS_DIR",
        default_value = "models"
    )]
    pub models: PathBuf,

    /// OpenCL device to use, as a case-insensitive substring of "platform / device"
    /// names (for example `nvidia`, `pocl`, `A100`). Default: the best device found
    /// (GPU first, then accelerators, then CPUs).
    #[arg(long, env = "SPMV_DEVICE")]
    pub device: Option<String>,

    /// Print the OpenAPI document (what GET /openapi.json serves) and exit,
    /// touching neither OpenCL nor a database. An action, so no variable.
    #[arg(long, default_value_t = false)]
    pub print_openapi: bool,

    /// Start without touching OpenCL at all (/spmv then answers 503).
    #[arg(long, env = "SPMV_NO_DEVICE", default_value_t = false)]
    pub no_device: bool,

    /// Largest request body in bytes, as received (see also --max-decompressed-bytes).
    #[arg(long, env = "SPMV_MAX_BODY_BYTES", default_value_t = 256 << 20)]
    pub max_body_bytes: usize,

    /// Largest request body after gzip decompression, in bytes (one gzip layer
    /// is accepted; past this the answer is 413).
    #[arg(long, env = "SPMV_MAX_DECOMPRESSED_BYTES", default_value_t = 256 << 20)]
    pub max_decompressed_bytes: usize,

    /// Memory, in bytes, that requests in flight may hold at once, estimated
    /// from their bodies and declared sizes (body, parse, matrix, x and y). A
    /// request that does not fit waits up to --memory-wait-ms, then gets 503
    /// with Retry-After; one that could never fit gets 413.
    #[arg(long, env = "SPMV_MEMORY_BUDGET_BYTES", default_value_t = 2 << 30)]
    pub memory_budget_bytes: u64,

    /// Milliseconds a request waits for room in the memory budget before 503.
    #[arg(long, env = "SPMV_MEMORY_WAIT_MS", default_value_t = 5000)]
    pub memory_wait_ms: u64,

    /// Largest number of matrix rows accepted.
    #[arg(long, env = "SPMV_MAX_ROWS", default_value_t = 50_000_000)]
    pub max_rows: usize,

    /// Largest number of matrix columns accepted.
    #[arg(long, env = "SPMV_MAX_COLS", default_value_t = 50_000_000)]
    pub max_cols: usize,

    /// Largest number of stored entries accepted.
    #[arg(long, env = "SPMV_MAX_NNZ", default_value_t = 100_000_000)]
    pub max_nnz: usize,

    /// Bytes of uploaded matrices kept (host copy plus device buffers);
    /// the least recently used matrix is evicted first.
    #[arg(long, env = "SPMV_CACHE_BYTES", default_value_t = 2 << 30)]
    pub cache_bytes: usize,

    /// Device memory the service may use, in bytes (default: all of the device's
    /// global memory). A matrix whose buffers need more is refused with 507.
    #[arg(long, env = "SPMV_DEVICE_MEMORY_BYTES")]
    pub device_memory_bytes: Option<u64>,

    /// Device jobs admitted at once (running plus waiting); more answer 503.
    #[arg(long, env = "SPMV_QUEUE_DEPTH", default_value_t = 64)]
    pub queue_depth: usize,

    /// Seconds a client is told to wait (Retry-After) when the queue is full.
    #[arg(long = "retry-after", env = "SPMV_RETRY_AFTER", default_value_t = 1)]
    pub retry_after_s: u64,

    /// Keep a copy of every served matrix as `<DIR>/<id>.mtx` so that the trainer
    /// (`trainer --include-requests DIR`) can label and learn from served work.
    /// Off by default: served matrices may be private.
    #[arg(long, env = "SPMV_KEEP_MATRICES")]
    pub keep_matrices: Option<PathBuf>,

    /// Byte quota of the `--keep-matrices` folder: a matrix that would take the
    /// folder past it is not kept (logged and counted). Default 1 GiB.
    #[arg(long, env = "SPMV_KEEP_MATRICES_BYTES", default_value_t = 1 << 30)]
    pub keep_matrices_bytes: u64,

    /// Seconds a client may take to send a request's headers; also how long an
    /// idle keep-alive connection is held open waiting for the next request.
    #[arg(long, env = "SPMV_HEADER_TIMEOUT_S", default_value_t = 10)]
    pub header_timeout_s: u64,

    /// Seconds a client may take to send a request's whole body (408 past it).
    #[arg(long, env = "SPMV_BODY_TIMEOUT_S", default_value_t = 60)]
    pub body_timeout_s: u64,

    /// Seconds a request may take from its headers to its answer, device work
    /// included (503 past it). A device job still queued then is dropped
    /// without running; one running finishes and its result is discarded.
    #[arg(long, env = "SPMV_REQUEST_TIMEOUT_S", default_value_t = 120)]
    pub request_timeout_s: u64,

    /// Open connections served at once; further clients wait in the listen
    /// backlog until one closes.
    #[arg(long, env = "SPMV_MAX_CONNECTIONS", default_value_t = 1024)]
    pub max_connections: usize,

    /// Seconds given to requests in flight after SIGTERM or SIGINT before the
    /// service closes their connections and exits.
    #[arg(long, env = "SPMV_SHUTDOWN_GRACE_S", default_value_t = 30)]
    pub shutdown_grace_s: u64,

    /// Attempts to reopen the device after a device fault (OpenCL error)
    /// before it is reported down; another round starts with a request after
    /// a cool-down.
    #[arg(long, env = "SPMV_REBUILD_ATTEMPTS", default_value_t = 5)]
    pub rebuild_attempts: u32,

    /// Milliseconds waited after the first failed attempt to reopen the
    /// device, doubled after each further one (at most 30 s).
    #[arg(long, env = "SPMV_REBUILD_BACKOFF_MS", default_value_t = 500)]
    pub rebuild_backoff_ms: u64,

    /// Matrix requests (every POST: /predict, /matrices, /spmv) worked on at
    /// once; past it they are shed at once with 503 and `Retry-After` instead
    /// of queueing for CPU time.
    #[arg(long, env = "SPMV_MAX_IN_FLIGHT", default_value_t = 64)]
    pub max_in_flight: usize,

    /// Requests waiting to be written to the request log; past it entries are
    /// dropped (and counted in /metrics) rather than held in memory.
    #[arg(long, env = "SPMV_LOG_QUEUE", default_value_t = 4096)]
    pub log_queue: usize,

    /// File of API keys, one `NAME:KEY` or `NAME:KEY:contribute` per line
    /// (`contribute`: matrices served for this key may be kept for retraining).
    /// With keys, every route but /healthz, /readyz and /openapi.json needs one.
    #[arg(long, env = "SPMV_API_KEYS_FILE")]
    pub api_keys_file: Option<PathBuf>,

    /// API keys given inline, in the keys file's format separated by commas.
    #[arg(long, env = "SPMV_API_KEYS", hide_env_values = true)]
    pub api_keys: Option<String>,

    /// Serve without API keys on a non-loopback address (refused otherwise).
    #[arg(long, env = "SPMV_ALLOW_ANONYMOUS", default_value_t = false)]
    pub allow_anonymous: bool,

    /// Secret (64 hex digits) that matrix ids are derived from, so that ids
    /// cannot be computed from a matrix's content; share it between replicas.
    /// Default: a random secret per start.
    #[arg(long, env = "SPMV_ID_SECRET", hide_env_values = true)]
    pub id_secret: Option<String>,

    /// Origins allowed to call the service from a browser (CORS). Default: none
    /// (no CORS headers are sent).
    #[arg(long = "cors-origin", env = "SPMV_CORS_ORIGINS", value_delimiter = ',')]
    pub cors_origins: Vec<String>,

    /// Race an uploaded matrix's planned kernels against every single-kernel plan
    /// at its first use on the device and keep the fastest (inline requests are
    /// never tuned). `false` keeps the model's plan as predicted.
    #[arg(long, env = "SPMV_TUNE_UPLOADS", default_value_t = true, action = clap::ArgAction::Set)]
    pub tune_uploads: bool,

    /// Time budget of one tuning race, milliseconds (the model's plan is always timed).
    #[arg(long, env = "SPMV_TUNE_BUDGET_MS", default_value_t = 250.0)]
    pub tune_budget_ms: f64,

    /// How often an uploaded matrix (POST /matrices) is expected to be
    /// multiplied when the client does not say (`expected_calls`); the planner
    /// weighs a plan's analysis against it. Inline /spmv matrices count 1.
    #[arg(long, env = "SPMV_UPLOADED_EXPECTED_CALLS", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub uploaded_expected_calls: u64,

    /// Reductions by NVIDIA warp shuffles: off (portable barriers), auto (on
    /// NVIDIA GPUs, portable elsewhere; the default), on (required), emulate (testing).
    #[arg(long, env = "SPMV_WARP_SHUFFLE", default_value = "auto")]
    pub warp_shuffle: engine::WarpShuffle,

    /// How binary x and y reach the device when they are not both in pinned
    /// host pools (`--host-pools`; an inline matrix's, or heap pools): auto
    /// (the default: through the matrix's pinned buffers on a device that is
    /// not a CPU when x and y each have under 1 MiB, else straight from and
    /// to the request's and answer's own memory), pinned, direct.
    #[arg(long, env = "SPMV_BINARY_STAGING", default_value = "auto")]
    pub binary_staging: engine::BinaryStaging,

    /// Where an uploaded matrix keeps the host buffers that binary x is
    /// received into and y answered from: auto (the default: pinned host
    /// memory on a device that is not a CPU, so the device copies both at
    /// DMA speed with no host copy; shared on a CPU device, whose kernels
    /// then read x and write y where they are, with no copy at all), pinned,
    /// shared, heap.
    #[arg(long, env = "SPMV_HOST_POOLS", value_enum, default_value_t = HostPools::Auto)]
    pub host_pools: HostPools,

    /// What shared host pools (`--host-pools`) are made of: auto (the
    /// default: fine-grained SVM where the device offers it, as PoCL does,
    /// which the kernels use with no command around them), mapped (memory
    /// under a host-pointer buffer, unmapped for each call's kernels and
    /// mapped again after: four more commands per call).
    #[arg(long, env = "SPMV_SHARED_MEMORY", default_value = "auto")]
    pub shared_memory: engine::SharedMemory,

    /// The fewest bytes of x and y together for which shared host pools
    /// (`--host-pools`) are used in place; smaller ones are copied (default:
    /// 0 for SVM, which needs no command of its own; 1048576 for mapped
    /// buffers: on PoCL their four commands cost about 0.05 ms, more than
    /// copying 320 KB, less than 3.2 MB).
    #[arg(long, env = "SPMV_IN_PLACE_MIN_BYTES")]
    pub in_place_min_bytes: Option<usize>,

    /// Kernel parameter overrides `name=value,...` (see `spmv bench --help`).
    #[arg(long, env = "SPMV_KERNEL_PARAMS")]
    pub kernel_params: Option<String>,

    /// Folder of cached kernel binaries, so a restart does not recompile
    /// (default: $XDG_CACHE_HOME or ~/.cache, then spmv-select/kernels; `none`: no cache).
    #[arg(long, env = "SPMV_KERNEL_CACHE")]
    pub kernel_cache: Option<PathBuf>,
}

/// Where an uploaded matrix's x and y host buffers live ([`Config::host_pools`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum HostPools {
    /// Shared on a CPU device, pinned on any other (the default).
    Auto,
    /// Pinned host memory (`CL_MEM_ALLOC_HOST_PTR`, mapped once).
    Pinned,
    /// Host memory the kernels use in place (`CL_MEM_USE_HOST_PTR`, unmapped
    /// for each call's launches): no copy on a CPU device; on a GPU every
    /// access would cross the bus.
    Shared,
    /// The heap.
    Heap,
}

/// The kind of host memory an uploaded matrix's pools hold ([`HostPools`]
/// resolved for a device).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PoolKind {
    /// The heap.
    #[default]
    Heap,
    /// Pinned host memory, copied by the device's DMA.
    Pinned,
    /// Memory the device's kernels use in place.
    Shared,
}

impl HostPools {
    /// The pools' memory on a device of this OpenCL type (`cpu`, `gpu`, ...).
    pub fn kind_for(self, device_kind: &str) -> PoolKind {
        match self {
            HostPools::Auto if device_kind.eq_ignore_ascii_case("cpu") => PoolKind::Shared,
            HostPools::Auto | HostPools::Pinned => PoolKind::Pinned,
            HostPools::Shared => PoolKind::Shared,
            HostPools::Heap => PoolKind::Heap,
        }
    }
}

/// The size limits requests are checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest body in bytes (as received).
    pub max_body_bytes: usize,
    /// Largest body in bytes after gzip decompression.
    pub max_decompressed_bytes: usize,
    /// Largest row count.
    pub max_rows: usize,
    /// Largest column count.
    pub max_cols: usize,
    /// Largest nonzero count.
    pub max_nnz: usize,
    /// Seconds allowed for receiving a body (reported in the 408).
    pub body_timeout_s: u64,
}

impl From<&Config> for Limits {
    fn from(c: &Config) -> Limits {
        Limits {
            max_body_bytes: c.max_body_bytes,
            max_decompressed_bytes: c.max_decompressed_bytes,
            max_rows: c.max_rows,
            max_cols: c.max_cols,
            max_nnz: c.max_nnz,
            body_timeout_s: c.body_timeout_s,
        }
    }
}

impl Limits {
    /// The same limits for the Matrix Market reader.
    pub fn mm(&self) -> sparse::mm::SizeLimits {
        sparse::mm::SizeLimits {
            max_rows: self.max_rows,
            max_cols: self.max_cols,
            max_nnz: self.max_nnz,
            max_text_bytes: self.max_decompressed_bytes,
        }
    }
}

impl Config {
    /// What the engine is opened with.
    pub fn engine_config(&self) -> engine::EngineConfig {
        let cache_dir = match &self.kernel_cache {
            Some(p) if p.as_os_str() == "none" => None,
            Some(p) => Some(p.clone()),
            None => {
                let xdg = std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from);
                let home = std::env::var_os("HOME").map(PathBuf::from);
                engine::default_cache_dir(xdg.as_deref(), home.as_deref())
            }
        };
        engine::EngineConfig {
            device: self.device.clone(),
            kernel_params: self.kernel_params.clone(),
            warp_shuffle: self.warp_shuffle,
            cache_dir,
            binary_staging: self.binary_staging,
            in_place_min_bytes: self.in_place_min_bytes,
            shared_memory: self.shared_memory,
        }
    }

    /// The defaults, as if started with no flags and no environment.
    pub fn defaults() -> Config {
        Config::parse_from(["server"])
    }
}

/// Checks dimensions against the limits.
pub fn check_dims(limits: &Limits, nrows: u64, ncols: u64, nnz: u64) -> Result<(), ApiError> {
    if nrows > limits.max_rows as u64 {
        return Err(ApiError::too_large("rows", nrows, limits.max_rows));
    }
    if ncols > limits.max_cols as u64 {
        return Err(ApiError::too_large("cols", ncols, limits.max_cols));
    }
    if nnz > limits.max_nnz as u64 {
        return Err(ApiError::too_large("nnz", nnz, limits.max_nnz));
    }
    Ok(())
}

#[cfg(test)]
impl Limits {
    /// Small limits for the parsers' unit tests.
    pub(crate) fn small() -> Limits {
        Limits {
            max_body_bytes: 1 << 20,
            max_decompressed_bytes: 1 << 20,
            max_rows: 1000,
            max_cols: 1000,
            max_nnz: 5000,
            body_timeout_s: 60,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_pools_are_pinned_by_default_on_devices_other_than_cpus_and_shared_on_cpus() {
        assert_eq!(Config::defaults().host_pools, HostPools::Auto);
        assert_eq!(HostPools::Auto.kind_for("gpu"), PoolKind::Pinned);
        assert_eq!(HostPools::Auto.kind_for("accelerator"), PoolKind::Pinned);
        assert_eq!(HostPools::Auto.kind_for("CPU"), PoolKind::Shared);
        assert_eq!(HostPools::Pinned.kind_for("cpu"), PoolKind::Pinned);
        assert_eq!(HostPools::Shared.kind_for("gpu"), PoolKind::Shared);
        assert_eq!(HostPools::Heap.kind_for("gpu"), PoolKind::Heap);
        let c = Config::parse_from(["server", "--host-pools", "pinned"]);
        assert_eq!(c.host_pools, HostPools::Pinned);
        let c = Config::parse_from(["server", "--host-pools", "shared"]);
        assert_eq!(c.host_pools, HostPools::Shared);
        assert!(Config::try_parse_from(["server", "--host-pools", "locked"]).is_err());
    }

    #[test]
    fn binary_staging_and_shared_memory_default_to_auto_and_parse() {
        // The streamed-x mode is gone: its flag is refused.
        assert!(Config::try_parse_from(["server", "--stream-x", "off"]).is_err());
        assert_eq!(
            Config::defaults().binary_staging,
            engine::BinaryStaging::Auto
        );
        let c = Config::parse_from(["server", "--binary-staging", "pinned"]);
        assert_eq!(
            c.engine_config().binary_staging,
            engine::BinaryStaging::Pinned
        );
        assert!(Config::try_parse_from(["server", "--binary-staging", "mapped"]).is_err());
        assert_eq!(
            Config::defaults().engine_config().shared_memory,
            engine::SharedMemory::Auto
        );
        let c = Config::parse_from(["server", "--shared-memory", "mapped"]);
        assert_eq!(
            c.engine_config().shared_memory,
            engine::SharedMemory::MappedBuffer
        );
        assert!(Config::try_parse_from(["server", "--shared-memory", "svm"]).is_err());
        let narrow = engine::BINARY_PINNED_MAX_BYTES - 8;
        assert!(engine::BinaryStaging::Auto.pinned_for("gpu", narrow));
        assert!(!engine::BinaryStaging::Auto.pinned_for("gpu", narrow + 8));
        assert!(!engine::BinaryStaging::Auto.pinned_for("cpu", narrow));
        assert!(!engine::BinaryStaging::Direct.pinned_for("gpu", narrow));
        assert!(engine::BinaryStaging::Pinned.pinned_for("cpu", 1 << 30));
    }
}
