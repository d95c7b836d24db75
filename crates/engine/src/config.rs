//! What the binaries tell the engine at start (device, kernel parameter
//! overrides, reduction path, program cache folder): the engine reads no
//! environment variables itself.

use crate::device::DeviceInfo;
use crate::error::{EngineError, Result};
use std::fmt;
use std::path::{Path, PathBuf};

/// Whether reductions use NVIDIA warp shuffles (inline PTX `shfl.sync`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum WarpShuffle {
    /// Portable local-memory reductions with barriers, on every device.
    Off,
    /// Shuffles on an NVIDIA GPU (falling back to the portable path if the
    /// shuffle program does not build there); portable elsewhere. The default:
    /// on an H100 it made the reduction kernels 6-18% faster (geomean over 90
    /// matrix x precision runs, training-data/report/nvidia-h100-80gb-hbm3/).
    #[default]
    Auto,
    /// Shuffles, required: an error on any device but an NVIDIA GPU.
    On,
    /// The shuffle path's reduction logic with each shuffle emulated in local
    /// memory (barriers): runs anywhere, for testing that path without a GPU.
    Emulate,
}

impl std::str::FromStr for WarpShuffle {
    type Err = EngineError;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "off" | "false" | "0" | "no" => Ok(WarpShuffle::Off),
            "auto" => Ok(WarpShuffle::Auto),
            "on" | "true" | "1" | "yes" => Ok(WarpShuffle::On),
            "emulate" => Ok(WarpShuffle::Emulate),
            _ => Err(EngineError::Config(format!(
                "unknown warp-shuffle setting '{s}' (off, auto, on or emulate)"
            ))),
        }
    }
}

impl fmt::Display for WarpShuffle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WarpShuffle::Off => "off",
            WarpShuffle::Auto => "auto",
            WarpShuffle::On => "on",
            WarpShuffle::Emulate => "emulate",
        })
    }
}

/// How binary x and y ([`crate::Engine::execute_le_into`]) reach the device
/// when they are not both in pinned host memory (both pinned always go
/// straight).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum BinaryStaging {
    /// Pinned on a device that is not a CPU when x and y each have less than
    /// [`BINARY_PINNED_MAX_BYTES`], direct otherwise (the default).
    #[default]
    Auto,
    /// x's bytes copied into the matrix's pinned staging buffer, y read into
    /// the other and copied out: the device's copies run from and to pinned
    /// memory, at the price of one host copy each way.
    Pinned,
    /// The device copies straight from the caller's x and into its y
    /// (pageable memory): no host copy.
    Direct,
}

/// The widest x or y that [`BinaryStaging::Auto`] sends through pinned
/// memory. On an H100 (3 alternated rounds each, f64, x sent whole) the
/// pinned copies cut the device's wall time beyond its profiled commands
/// from 0.13-0.47 to 0.06-0.07 ms at every size, but the two host copies cost
/// it back: at 100K nonzeros (x and y of 160 KB) the server's time fell
/// from 0.243 to 0.195-0.214 ms, at 1M (1.6 MB) it was a tie (0.90-1.24
/// against 1.06 ms), at 10M (16 MB) a loss (9.38 against 8.89 ms, the copies
/// 4 ms). The bound sits between the win and the tie; on PoCL every buffer
/// is host memory and `Auto` never copies.
pub const BINARY_PINNED_MAX_BYTES: usize = 1 << 20;

impl BinaryStaging {
    /// Whether x and y (the wider of them `bytes`) go through pinned memory
    /// on a device of this OpenCL type (`cpu`, `gpu`, ...).
    pub fn pinned_for(self, device_kind: &str, bytes: usize) -> bool {
        match self {
            BinaryStaging::Auto => {
                !device_kind.eq_ignore_ascii_case("cpu") && bytes < BINARY_PINNED_MAX_BYTES
            }
            BinaryStaging::Pinned => true,
            BinaryStaging::Direct => false,
        }
    }
}

impl std::str::FromStr for BinaryStaging {
    type Err = EngineError;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(BinaryStaging::Auto),
            "pinned" => Ok(BinaryStaging::Pinned),
            "direct" => Ok(BinaryStaging::Direct),
            _ => Err(EngineError::Config(format!(
                "unknown binary-staging setting '{s}' (auto, pinned or direct)"
            ))),
        }
    }
}

impl fmt::Display for BinaryStaging {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BinaryStaging::Auto => "auto",
            BinaryStaging::Pinned => "pinned",
            BinaryStaging::Direct => "direct",
        })
    }
}

impl std::str::FromStr for SharedMemory {
    type Err = EngineError;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(SharedMemory::Auto),
            "mapped" => Ok(SharedMemory::MappedBuffer),
            _ => Err(EngineError::Config(format!(
                "unknown shared-memory setting '{s}' (auto or mapped)"
            ))),
        }
    }
}

impl fmt::Display for SharedMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SharedMemory::Auto => "auto",
            SharedMemory::MappedBuffer => "mapped",
        })
    }
}

/// How a built program reduces partial sums (see `kernels/prelude.cl`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReductionPath {
    /// Local-memory trees with barriers.
    Portable,
    /// Warp shuffles by inline PTX (NVIDIA only).
    WarpShuffle,
    /// The shuffle path with emulated shuffles (testing).
    EmulatedShuffle,
}

impl ReductionPath {
    /// The build options that select this path.
    pub fn build_options(self) -> &'static str {
        match self {
            ReductionPath::Portable => "",
            ReductionPath::WarpShuffle => " -DSPMV_WARP_SHUFFLE=1",
            ReductionPath::EmulatedShuffle => " -DSPMV_WARP_SHUFFLE=1 -DSPMV_SHUFFLE_EMULATE=1",
        }
    }
}

/// Whether the device is an NVIDIA GPU (vendor or platform says NVIDIA).
pub fn is_nvidia_gpu(info: &DeviceInfo) -> bool {
    let nv = |s: &str| s.to_ascii_lowercase().contains("nvidia");
    info.kind == "gpu" && (nv(&info.vendor) || nv(&info.platform))
}

/// The reduction path for a setting on a device whose work-group sizes are
/// `wg_sizes` (the shuffle path needs multiples of the 32-wide warp).
pub fn choose_reduction(
    setting: WarpShuffle,
    info: &DeviceInfo,
    wg_sizes: &[usize],
) -> Result<ReductionPath> {
    let warp_multiples = wg_sizes.iter().all(|w| w % 32 == 0);
    let nvidia = is_nvidia_gpu(info);
    match setting {
        WarpShuffle::Off => Ok(ReductionPath::Portable),
        WarpShuffle::Auto if nvidia && warp_multiples => Ok(ReductionPath::WarpShuffle),
        WarpShuffle::Auto => Ok(ReductionPath::Portable),
        WarpShuffle::On | WarpShuffle::Emulate if !warp_multiples => {
            Err(EngineError::Config(format!(
                "warp shuffles need work-group sizes that are multiples of 32, not {wg_sizes:?}"
            )))
        }
        WarpShuffle::On if !nvidia => Err(EngineError::Config(format!(
            "warp shuffles (inline PTX) need an NVIDIA GPU, not {} / {}",
            info.platform, info.name
        ))),
        WarpShuffle::On => Ok(ReductionPath::WarpShuffle),
        WarpShuffle::Emulate => Ok(ReductionPath::EmulatedShuffle),
    }
}

/// Everything an engine is opened with. `Default` is: the best device, the
/// device's default kernel parameters, warp shuffles on NVIDIA GPUs (portable
/// reductions elsewhere), no program cache.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EngineConfig {
    /// Device selector: a case-insensitive substring of "platform / device".
    pub device: Option<String>,
    /// Kernel parameter overrides `name=value,...` (see
    /// [`crate::KernelParams::with_overrides`]), applied to both precisions.
    pub kernel_params: Option<String>,
    /// Reduction path setting.
    pub warp_shuffle: WarpShuffle,
    /// Folder of cached program binaries (created when missing); `None`: every
    /// start compiles the kernels.
    pub cache_dir: Option<PathBuf>,
    /// How binary x and y reach the device.
    pub binary_staging: BinaryStaging,
    /// The fewest bytes of x and y together for which shared x and y are
    /// used in place ([`crate::Engine::shared_bytes`]); `None`:
    /// [`crate::shared::IN_PLACE_MIN_BYTES`], or
    /// [`crate::shared::IN_PLACE_MIN_BYTES_SVM`] for SVM.
    pub in_place_min_bytes: Option<usize>,
    /// What shared memory is made of.
    pub shared_memory: SharedMemory,
}

/// What [`crate::Engine::shared_bytes`] allocates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SharedMemory {
    /// Fine-grained buffer SVM where the device offers it (no map or unmap
    /// around a call's launches), else mapped buffers (the default).
    #[default]
    Auto,
    /// Always memory of ours under a `CL_MEM_USE_HOST_PTR` buffer, unmapped
    /// for each call's launches and mapped again after.
    MappedBuffer,
}

/// The usual program cache folder, for binaries to pass as
/// [`EngineConfig::cache_dir`]: `$XDG_CACHE_HOME/spmv-select/kernels`, else
/// `$HOME/.cache/spmv-select/kernels` (the caller reads the two variables).
pub fn default_cache_dir(xdg_cache_home: Option<&Path>, home: Option<&Path>) -> Option<PathBuf> {
    let base = match (xdg_cache_home, home) {
        (Some(x), _) if x.is_absolute() => x.to_path_buf(),
        (_, Some(h)) if !h.as_os_str().is_empty() => h.join(".cache"),
        _ => return None,
    };
    Some(base.join("spmv-select").join("kernels"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(kind: &str, vendor: &str, platform: &str) -> DeviceInfo {
        DeviceInfo {
            name: "some device".into(),
            vendor: vendor.into(),
            driver: "1.0".into(),
            version: "OpenCL 3.0".into(),
            platform: platform.into(),
            kind: kind.into(),
            compute_units: 1,
            global_mem_bytes: 1 << 30,
            max_alloc_bytes: 1 << 28,
            local_mem_bytes: 1 << 16,
            max_work_group_size: 1024,
            fp64: true,
        }
    }

    #[test]
    fn shuffles_only_on_nvidia_gpus_and_when_allowed() {
        let nv = device("gpu", "NVIDIA Corporation", "NVIDIA CUDA");
        let cpu = device("cpu", "GenuineIntel", "Portable Computing Language");
        let amd = device(
            "gpu",
            "Advanced Micro Devices, Inc.",
            "AMD Accelerated Parallel Processing",
        );
        let ws = [256, 256, 64];
        let pick = |s, d: &DeviceInfo| choose_reduction(s, d, &ws).unwrap();
        assert_eq!(pick(WarpShuffle::Off, &nv), ReductionPath::Portable);
        assert_eq!(pick(WarpShuffle::Auto, &nv), ReductionPath::WarpShuffle);
        assert_eq!(pick(WarpShuffle::On, &nv), ReductionPath::WarpShuffle);
        assert_eq!(pick(WarpShuffle::Auto, &cpu), ReductionPath::Portable);
        assert_eq!(pick(WarpShuffle::Auto, &amd), ReductionPath::Portable);
        assert_eq!(
            pick(WarpShuffle::Emulate, &cpu),
            ReductionPath::EmulatedShuffle
        );
        assert!(choose_reduction(WarpShuffle::On, &cpu, &ws).is_err());
        assert!(choose_reduction(WarpShuffle::On, &amd, &ws).is_err());
        // An NVIDIA CPU-kind device (none exists, but the kind decides).
        assert_eq!(
            pick(WarpShuffle::Auto, &device("cpu", "NVIDIA", "x")),
            ReductionPath::Portable
        );
        // Work-group sizes not multiples of the warp: Auto stays portable, On refuses.
        assert_eq!(
            choose_reduction(WarpShuffle::Auto, &nv, &[256, 48]).unwrap(),
            ReductionPath::Portable
        );
        assert!(choose_reduction(WarpShuffle::On, &nv, &[256, 48]).is_err());
    }

    #[test]
    fn settings_parse() {
        for (s, w) in [
            ("off", WarpShuffle::Off),
            ("AUTO", WarpShuffle::Auto),
            ("on", WarpShuffle::On),
            ("emulate", WarpShuffle::Emulate),
        ] {
            assert_eq!(s.parse::<WarpShuffle>().unwrap(), w);
            assert_eq!(w.to_string().parse::<WarpShuffle>().unwrap(), w);
        }
        assert!("sometimes".parse::<WarpShuffle>().is_err());
    }

    #[test]
    fn cache_dir_defaults() {
        let home = Path::new("/home/u");
        assert_eq!(
            default_cache_dir(None, Some(home)).unwrap(),
            Path::new("/home/u/.cache/spmv-select/kernels")
        );
        assert_eq!(
            default_cache_dir(Some(Path::new("/c")), Some(home)).unwrap(),
            Path::new("/c/spmv-select/kernels")
        );
        // A relative XDG_CACHE_HOME is ignored, as the XDG spec says.
        assert_eq!(
            default_cache_dir(Some(Path::new("rel")), Some(home)).unwrap(),
            Path::new("/home/u/.cache/spmv-select/kernels")
        );
        assert_eq!(default_cache_dir(None, None), None);
    }
}
