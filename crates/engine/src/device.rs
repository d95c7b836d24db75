//! Device discovery: GPUs first, then accelerators, then CPUs, optionally
//! filtered by a platform or device name substring (`--device` / `SPMV_DEVICE`,
//! read by the binaries).

use crate::error::{EngineError, Result};
use ocl::enums::{DeviceInfo as Di, DeviceInfoResult as Dr, PlatformInfo as Pi};
use ocl::flags::DeviceType;
use ocl::{Device, Platform};

/// Environment variable that binaries read for the device to use (platform or
/// device name substring); the engine itself reads no environment.
pub const DEVICE_ENV: &str = "SPMV_DEVICE";

/// What the engine knows about its device.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeviceInfo {
    /// Device name, e.g. `pthread-skylake-avx512-AMD EPYC` or `NVIDIA H200`.
    pub name: String,
    /// Device vendor.
    pub vendor: String,
    /// Driver version string.
    pub driver: String,
    /// OpenCL version string of the device.
    pub version: String,
    /// Platform name.
    pub platform: String,
    /// `gpu`, `accelerator`, `cpu` or `other`.
    pub kind: String,
    /// Compute units.
    pub compute_units: u32,
    /// Global memory in bytes.
    pub global_mem_bytes: u64,
    /// Largest single buffer in bytes.
    pub max_alloc_bytes: u64,
    /// Local memory per work-group in bytes.
    pub local_mem_bytes: u64,
    /// Largest work-group size.
    pub max_work_group_size: usize,
    /// Whether double precision (`cl_khr_fp64`) is supported.
    pub fp64: bool,
}

fn kind_rank(t: DeviceType) -> (u8, &'static str) {
    if t.contains(DeviceType::GPU) {
        (0, "gpu")
    } else if t.contains(DeviceType::ACCELERATOR) {
        (1, "accelerator")
    } else if t.contains(DeviceType::CPU) {
        (2, "cpu")
    } else {
        (3, "other")
    }
}

/// Every (platform, device) pair, best kind first (GPU, accelerator, CPU, other),
/// in platform order within a kind. An error only when no platform exists.
pub fn list_devices() -> Result<Vec<(Platform, Device, DeviceInfo)>> {
    // One listing at a time in a process: PoCL's first device query, made from
    // two threads at once (two engines opened together, as tests do), can
    // answer with no device for one of them.
    static LISTING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = LISTING.lock().unwrap_or_else(|e| e.into_inner());
    let ids = ocl::core::get_platform_ids().map_err(|e| EngineError::NoPlatform(e.to_string()))?;
    if ids.is_empty() {
        return Err(EngineError::NoPlatform(
            "the OpenCL loader lists no platform".into(),
        ));
    }
    let mut out = Vec::new();
    for id in ids {
        let p = Platform::new(id);
        // A platform without devices (or a broken one) is skipped, not fatal.
        let Ok(devs) = Device::list_all(p) else {
            continue;
        };
        for d in devs {
            if let Ok(info) = describe(&p, &d) {
                out.push((p, d, info));
            }
        }
    }
    out.sort_by_key(|(_, d, _)| match d.info(Di::Type) {
        Ok(Dr::Type(t)) => kind_rank(t).0,
        _ => 3,
    });
    Ok(out)
}

/// Picks the device: the first matching `selector` (case-insensitive substring
/// of "platform / device" name), or the best kind when `selector` is `None`.
pub fn select(selector: Option<&str>) -> Result<(Platform, Device, DeviceInfo)> {
    let all = list_devices()?;
    let available = all
        .iter()
        .map(|(_, _, i)| format!("{} / {}", i.platform, i.name))
        .collect::<Vec<_>>()
        .join("; ");
    let sel = selector
        .map(|s| s.trim().to_lowercase())
        .filter(|s| !s.is_empty());
    let found = all.into_iter().find(|(_, _, i)| match &sel {
        None => true,
        Some(s) => format!("{} / {}", i.platform, i.name)
            .to_lowercase()
            .contains(s.as_str()),
    });
    found.ok_or_else(|| EngineError::NoDevice {
        selector: sel.unwrap_or_else(|| "any".into()),
        available: if available.is_empty() {
            "none".into()
        } else {
            available
        },
    })
}

fn describe(p: &Platform, d: &Device) -> Result<DeviceInfo> {
    let platform = p.info(Pi::Name)?.to_string();
    let mut info = DeviceInfo {
        name: d.name()?.trim().to_string(),
        vendor: d.vendor()?.trim().to_string(),
        driver: d.info(Di::DriverVersion)?.to_string(),
        version: d.info(Di::Version)?.to_string(),
        platform: platform.trim().to_string(),
        kind: "other".into(),
        compute_units: 0,
        global_mem_bytes: 0,
        max_alloc_bytes: 0,
        local_mem_bytes: 0,
        max_work_group_size: 0,
        fp64: false,
    };
    if let Dr::Type(t) = d.info(Di::Type)? {
        info.kind = kind_rank(t).1.into();
    }
    if let Dr::MaxComputeUnits(v) = d.info(Di::MaxComputeUnits)? {
        info.compute_units = v;
    }
    if let Dr::GlobalMemSize(v) = d.info(Di::GlobalMemSize)? {
        info.global_mem_bytes = v;
    }
    if let Dr::MaxMemAllocSize(v) = d.info(Di::MaxMemAllocSize)? {
        info.max_alloc_bytes = v;
    }
    if let Dr::LocalMemSize(v) = d.info(Di::LocalMemSize)? {
        info.local_mem_bytes = v;
    }
    if let Dr::MaxWorkGroupSize(v) = d.info(Di::MaxWorkGroupSize)? {
        info.max_work_group_size = v;
    }
    if let Dr::Extensions(e) = d.info(Di::Extensions)? {
        info.fp64 = e.split_whitespace().any(|x| x == "cl_khr_fp64");
    }
    Ok(info)
}
