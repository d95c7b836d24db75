//! The engine settings shared by the subcommands that open the device: kernel
//! parameter overrides, warp-shuffle reductions and the program binary cache,
//! read here (flags or env) and passed to the engine as an `EngineConfig`.

use engine::{EngineConfig, WarpShuffle};
use std::path::PathBuf;

/// Engine flags (flattened into a subcommand's arguments).
#[derive(clap::Args, Debug, Clone)]
pub struct EngineArgs {
    /// Kernel parameter overrides `name=value,...` (wg_size, vector_wg, adaptive_wg,
    /// nnz_per_wg, num_rows_stream, nnz_multiplier, mp_items, mt_wg, mt_items), when tuning a device.
    #[arg(long, env = "SPMV_KERNEL_PARAMS")]
    pub kernel_params: Option<String>,
    /// Reductions by NVIDIA warp shuffles: off (portable barriers), auto (on NVIDIA
    /// GPUs, portable elsewhere; the default), on (required), emulate (the shuffle
    /// path emulated, for testing).
    #[arg(long, env = "SPMV_WARP_SHUFFLE", default_value = "auto")]
    pub warp_shuffle: WarpShuffle,
    /// Folder of cached kernel binaries (default: $XDG_CACHE_HOME or ~/.cache, spmv-select/kernels).
    #[arg(long, env = "SPMV_KERNEL_CACHE")]
    pub kernel_cache: Option<PathBuf>,
    /// Compile the kernels at every start (no binary cache).
    #[arg(long)]
    pub no_kernel_cache: bool,
}

impl EngineArgs {
    /// The engine configuration for the device `selector`.
    pub fn config(&self, selector: Option<&str>) -> EngineConfig {
        let cache_dir = if self.no_kernel_cache {
            None
        } else {
            self.kernel_cache.clone().or_else(|| {
                let xdg = std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from);
                let home = std::env::var_os("HOME").map(PathBuf::from);
                engine::default_cache_dir(xdg.as_deref(), home.as_deref())
            })
        };
        EngineConfig {
            device: selector.map(str::to_string),
            kernel_params: self.kernel_params.clone(),
            warp_shuffle: self.warp_shuffle,
            cache_dir,
            binary_staging: engine::BinaryStaging::default(),
            in_place_min_bytes: None,
            shared_memory: engine::SharedMemory::default(),
        }
    }
}
