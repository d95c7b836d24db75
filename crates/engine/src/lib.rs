//! OpenCL SpMV engine: device discovery, the kernel pool (`kernels/*.cl`, built
//! once per device and precision), matrices uploaded once, plans prepared once
//! (row lists, CSR-Adaptive row blocks) and executed many times, with kernel
//! time from OpenCL profiling events and end-to-end wall time.
//!
//! Architecture invariant: no HTTP, no SQL; only `sparse` below it. `ocl` calls
//! block, so async callers run the engine on a blocking thread.
//!
//! ```no_run
//! use engine::{Engine, LaunchMode};
//! use sparse::{Csr, KernelId, Plan};
//! let engine = Engine::new(None)?;
//! let a = Csr::<f64>::identity(4).unwrap();
//! let m = engine.upload(&a)?;
//! let plan = engine.prepare(&m, &Plan::single(KernelId::CsrAdaptive), LaunchMode::default())?;
//! let (y, t) = engine.execute(&m, &plan, &[1.0, 2.0, 3.0, 4.0])?;
//! println!("{y:?} in {} ms of kernel time", t.kernel_ms());
//! # Ok::<(), engine::EngineError>(())
//! ```

pub mod any;
mod build;
mod cache;
pub mod config;
pub mod device;
pub mod engine;
pub mod error;
mod fused;
pub mod host;
pub mod kernels;
mod launch;
pub mod matrix;
pub mod prepared;
pub mod shared;
pub mod solve;
pub mod timing;

pub use any::{AnyMatrix, AnyPlan, Values, XSource};
pub use build::ProgramStats;
pub use config::{
    default_cache_dir, BinaryStaging, EngineConfig, ReductionPath, SharedMemory, WarpShuffle,
    BINARY_PINNED_MAX_BYTES,
};
pub use device::{DeviceInfo, DEVICE_ENV};
pub use engine::{CopyBandwidth, Engine, PlanningFigures, Timings, PROFILED_FIRST};
pub use error::{EngineError, Result};
pub use host::{HostBytes, LeBytes};
pub use kernels::{registry, DeviceScalar, KernelInfo, KernelParams, Precision, PARAMS_ENV};
pub use matrix::{min_bytes, DeviceMatrix};
pub use prepared::{launch_key, LaunchInfo, LaunchKey, LaunchMode, PreparedPlan};
pub use shared::SharedView;
pub use timing::{engine_version, BackToBack, TimeStats, TimingPolicy, TIMING_VERSION};

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn engine_types_are_shareable_between_threads() {
        assert_send_sync::<Engine>();
        assert_send_sync::<DeviceMatrix<f32>>();
        assert_send_sync::<PreparedPlan<f64>>();
    }

    #[test]
    fn registry_lists_every_kernel_once() {
        let r = registry();
        assert_eq!(r.len(), sparse::KernelId::all().len());
        for (k, info) in sparse::KernelId::all().into_iter().zip(&r) {
            assert_eq!(info.id, k);
            assert_eq!(info.name, k.name());
            assert!(info.per_bin);
        }
    }

    #[test]
    fn min_bytes_model() {
        // 2x3 matrix, 4 nonzeros, f64: 3*4 + 4*12 + 3*8 + 2*8.
        assert_eq!(min_bytes(2, 3, 4, 8), 12 + 48 + 24 + 16);
    }
}
