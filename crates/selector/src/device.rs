//! Device identity and architecture class: the plain description of a device the
//! caller passes in (this crate never asks OpenCL), and the class read from it
//! (PoCL CPU by ISA and SIMD level, NVIDIA and AMD GPUs by architecture) that
//! decides which models may plan for a device they were not trained on.

use serde::{Deserialize, Serialize};

/// The kind of device, as OpenCL reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceType {
    /// A CPU (PoCL, Intel's or AMD's CPU runtime).
    Cpu,
    /// A GPU.
    Gpu,
    /// An accelerator (FPGA, ...).
    Accelerator,
    /// Anything else, or not known (a legacy model card).
    #[default]
    Other,
}

impl DeviceType {
    /// Reads `cpu`, `gpu` or `accelerator` (any case, as the engine names them);
    /// anything else is [`DeviceType::Other`].
    pub fn parse(s: &str) -> DeviceType {
        match s.trim().to_ascii_lowercase().as_str() {
            "cpu" => DeviceType::Cpu,
            "gpu" => DeviceType::Gpu,
            "accelerator" => DeviceType::Accelerator,
            _ => DeviceType::Other,
        }
    }

    /// `cpu`, `gpu`, `accelerator` or `other`.
    pub fn as_str(self) -> &'static str {
        match self {
            DeviceType::Cpu => "cpu",
            DeviceType::Gpu => "gpu",
            DeviceType::Accelerator => "accelerator",
            DeviceType::Other => "other",
        }
    }
}

/// What a caller knows about a device: enough to match models, nothing OpenCL-typed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceIdentity {
    /// The OpenCL device name, e.g. `pthread-skylake-avx512-AMD EPYC` or `NVIDIA H100 80GB HBM3`.
    pub name: String,
    /// The device vendor string (`AuthenticAMD`, `NVIDIA Corporation`, ...); empty when unknown.
    pub vendor: String,
    /// The driver version string; empty when unknown.
    pub driver: String,
    /// CPU, GPU, ...
    pub device_type: DeviceType,
}

impl DeviceIdentity {
    /// An identity from its four parts (`device_type` as the engine spells it).
    pub fn new(name: &str, vendor: &str, driver: &str, device_type: &str) -> DeviceIdentity {
        DeviceIdentity {
            name: name.trim().to_string(),
            vendor: vendor.trim().to_string(),
            driver: driver.trim().to_string(),
            device_type: DeviceType::parse(device_type),
        }
    }

    /// The architecture class this identity belongs to.
    pub fn class(&self) -> DeviceClass {
        if let Some(c) = pocl_cpu(&self.name) {
            return c;
        }
        let vendor = self.vendor.to_ascii_lowercase();
        let name = self.name.to_ascii_lowercase();
        let gpu = self.device_type == DeviceType::Gpu;
        if vendor.contains("nvidia") || (gpu && name.contains("nvidia")) {
            return DeviceClass::NvidiaGpu {
                arch: nvidia_arch(&self.name),
            };
        }
        if gpu && (vendor.contains("advanced micro devices") || vendor.contains("amd")) {
            return DeviceClass::AmdGpu {
                arch: amd_gpu_arch(&name),
            };
        }
        DeviceClass::Unknown
    }
}

/// The widest SIMD extension a CPU class vectorises with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Simd {
    /// SSE2 ... SSE4.2 (128-bit).
    Sse,
    /// AVX (256-bit floating point).
    Avx,
    /// AVX2 with FMA (256-bit).
    Avx2,
    /// AVX-512 (512-bit).
    Avx512,
    /// Arm NEON (128-bit).
    Neon,
    /// Arm SVE.
    Sve,
}

impl Simd {
    /// Lower-case name (`avx512`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Simd::Sse => "sse",
            Simd::Avx => "avx",
            Simd::Avx2 => "avx2",
            Simd::Avx512 => "avx512",
            Simd::Neon => "neon",
            Simd::Sve => "sve",
        }
    }
}

/// The architecture class of a device: what decides whether a model trained on
/// one device may plan for another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceClass {
    /// PoCL's CPU device (`pthread-`, `cpu-`, `basic-` names): the LLVM CPU
    /// target in its name gives the ISA and SIMD level; the CPU's vendor and model do not matter.
    PoclCpu {
        /// `x86-64`, `aarch64`, `riscv64`, or `unknown`.
        isa: &'static str,
        /// The SIMD level, when the LLVM CPU name is known.
        simd: Option<Simd>,
    },
    /// An NVIDIA GPU; the architecture (`hopper`, `ampere`, ...) read from the product name.
    NvidiaGpu {
        /// The architecture, when the name is known.
        arch: Option<&'static str>,
    },
    /// An AMD GPU; the architecture (`cdna3`, `rdna3`, ...) read from its `gfx` name.
    AmdGpu {
        /// The architecture, when the name is known.
        arch: Option<&'static str>,
    },
    /// No class is known (another runtime, or too little information).
    Unknown,
}

impl std::fmt::Display for DeviceClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let opt = |o: Option<&'static str>| o.unwrap_or("unknown architecture");
        match self {
            DeviceClass::PoclCpu { isa, simd } => write!(
                f,
                "PoCL CPU, {isa}, {}",
                simd.map_or("unknown SIMD level", Simd::as_str)
            ),
            DeviceClass::NvidiaGpu { arch } => write!(f, "NVIDIA GPU, {}", opt(*arch)),
            DeviceClass::AmdGpu { arch } => write!(f, "AMD GPU, {}", opt(*arch)),
            DeviceClass::Unknown => f.write_str("unknown class"),
        }
    }
}

impl DeviceClass {
    /// Whether a model of class `self` may plan for a device of class `other` as
    /// the same class: `Some(true)` for an identical known class, `Some(false)`
    /// for a compatible one (PoCL x86-64 with AVX2 and AVX-512: both vectorise
    /// work-items 256 bits wide or more), `None` otherwise (unknown never matches).
    pub fn compatible(&self, other: &DeviceClass) -> Option<bool> {
        use DeviceClass::*;
        match (self, other) {
            (
                PoclCpu {
                    isa: a,
                    simd: Some(x),
                },
                PoclCpu {
                    isa: b,
                    simd: Some(y),
                },
            ) if a == b && *a != "unknown" => {
                let wide = |s: &Simd| matches!(s, Simd::Avx2 | Simd::Avx512);
                if x == y {
                    Some(true)
                } else if wide(x) && wide(y) {
                    Some(false)
                } else {
                    None
                }
            }
            (NvidiaGpu { arch: Some(a) }, NvidiaGpu { arch: Some(b) })
            | (AmdGpu { arch: Some(a) }, AmdGpu { arch: Some(b) })
                if a == b =>
            {
                Some(true)
            }
            _ => None,
        }
    }
}

/// LLVM CPU names PoCL puts in its device name, with the ISA and SIMD level.
/// Longest names are tried first, so `skylake-avx512` wins over `skylake`.
const LLVM_CPUS: &[(&str, &str, Simd)] = &[
    ("skylake-avx512", "x86-64", Simd::Avx512),
    ("skx", "x86-64", Simd::Avx512),
    ("cascadelake", "x86-64", Simd::Avx512),
    ("cooperlake", "x86-64", Simd::Avx512),
    ("cannonlake", "x86-64", Simd::Avx512),
    ("icelake-client", "x86-64", Simd::Avx512),
    ("icelake-server", "x86-64", Simd::Avx512),
    ("tigerlake", "x86-64", Simd::Avx512),
    ("rocketlake", "x86-64", Simd::Avx512),
    ("sapphirerapids", "x86-64", Simd::Avx512),
    ("emeraldrapids", "x86-64", Simd::Avx512),
    ("graniterapids", "x86-64", Simd::Avx512),
    ("knl", "x86-64", Simd::Avx512),
    ("knm", "x86-64", Simd::Avx512),
    ("znver4", "x86-64", Simd::Avx512),
    ("znver5", "x86-64", Simd::Avx512),
    ("x86-64-v4", "x86-64", Simd::Avx512),
    ("haswell", "x86-64", Simd::Avx2),
    ("broadwell", "x86-64", Simd::Avx2),
    ("skylake", "x86-64", Simd::Avx2),
    ("alderlake", "x86-64", Simd::Avx2),
    ("raptorlake", "x86-64", Simd::Avx2),
    ("meteorlake", "x86-64", Simd::Avx2),
    ("arrowlake", "x86-64", Simd::Avx2),
    ("lunarlake", "x86-64", Simd::Avx2),
    ("znver1", "x86-64", Simd::Avx2),
    ("znver2", "x86-64", Simd::Avx2),
    ("znver3", "x86-64", Simd::Avx2),
    ("bdver4", "x86-64", Simd::Avx2),
    ("core-avx2", "x86-64", Simd::Avx2),
    ("x86-64-v3", "x86-64", Simd::Avx2),
    ("sandybridge", "x86-64", Simd::Avx),
    ("ivybridge", "x86-64", Simd::Avx),
    ("corei7-avx", "x86-64", Simd::Avx),
    ("core-avx-i", "x86-64", Simd::Avx),
    ("bdver1", "x86-64", Simd::Avx),
    ("bdver2", "x86-64", Simd::Avx),
    ("bdver3", "x86-64", Simd::Avx),
    ("btver2", "x86-64", Simd::Avx),
    ("x86-64-v2", "x86-64", Simd::Sse),
    ("x86-64", "x86-64", Simd::Sse),
    ("nehalem", "x86-64", Simd::Sse),
    ("westmere", "x86-64", Simd::Sse),
    ("corei7", "x86-64", Simd::Sse),
    ("core2", "x86-64", Simd::Sse),
    ("penryn", "x86-64", Simd::Sse),
    ("silvermont", "x86-64", Simd::Sse),
    ("goldmont", "x86-64", Simd::Sse),
    ("tremont", "x86-64", Simd::Sse),
    ("neoverse-v1", "aarch64", Simd::Sve),
    ("neoverse-v2", "aarch64", Simd::Sve),
    ("a64fx", "aarch64", Simd::Sve),
    ("neoverse-n1", "aarch64", Simd::Neon),
    ("neoverse-n2", "aarch64", Simd::Neon),
    ("cortex-", "aarch64", Simd::Neon),
    ("apple-", "aarch64", Simd::Neon),
    ("ampere1", "aarch64", Simd::Neon),
    ("thunderx", "aarch64", Simd::Neon),
    ("carmel", "aarch64", Simd::Neon),
];

/// The PoCL CPU class of a device name, when it is one (`pthread-<llvm cpu>-<model>`,
/// `cpu-...`, `cpu-minimal-...`, `cpu-tbb-...`, `basic-...`).
fn pocl_cpu(name: &str) -> Option<DeviceClass> {
    let lower = name.trim().to_ascii_lowercase();
    let rest = ["cpu-minimal-", "cpu-tbb-", "pthread-", "basic-", "cpu-"]
        .iter()
        .find_map(|p| lower.strip_prefix(p))?;
    let mut best: Option<(&str, &'static str, Simd)> = None;
    for &(cpu, isa, simd) in LLVM_CPUS {
        let fits = rest
            .strip_prefix(cpu)
            .is_some_and(|after| cpu.ends_with('-') || after.is_empty() || after.starts_with('-'));
        let longer = match best {
            None => true,
            Some(b) => cpu.len() > b.0.len(),
        };
        if fits && longer {
            best = Some((cpu, isa, simd));
        }
    }
    Some(match best {
        Some((_, isa, simd)) => DeviceClass::PoclCpu {
            isa,
            simd: Some(simd),
        },
        None if rest.starts_with("sifive") || rest.starts_with("generic-rv64") => {
            DeviceClass::PoclCpu {
                isa: "riscv64",
                simd: None,
            }
        }
        None => DeviceClass::PoclCpu {
            isa: "unknown",
            simd: None,
        },
    })
}

/// The NVIDIA architecture of a product name (`NVIDIA H100 80GB HBM3` -> `hopper`).
fn nvidia_arch(name: &str) -> Option<&'static str> {
    let up = name.to_ascii_uppercase();
    let tokens: Vec<&str> = up
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|t| !t.is_empty())
        .collect();
    for (i, t) in tokens.iter().enumerate() {
        let next = tokens.get(i + 1).copied().unwrap_or("");
        if matches!(*t, "RTX" | "GTX")
            && next.len() == 4
            && next.chars().all(|c| c.is_ascii_digit())
        {
            return match &next[..2] {
                "50" => Some("blackwell"),
                "40" => Some("ada"),
                "30" => Some("ampere"),
                "20" | "16" => Some("turing"),
                "10" => Some("pascal"),
                _ => None,
            };
        }
        if *t == "TITAN" && next == "V" {
            return Some("volta");
        }
        if let Some(a) = nvidia_product(t) {
            return Some(a);
        }
    }
    None
}

/// Data-centre product code prefixes and their architectures, the two-letter
/// prefixes first (`GH200` is Hopper, `GB200` Blackwell).
const NVIDIA_PRODUCTS: [(&str, &str); 9] = [
    ("GH", "hopper"),
    ("GB", "blackwell"),
    ("H", "hopper"),
    ("B", "blackwell"),
    ("L", "ada"),
    ("A", "ampere"),
    ("V", "volta"),
    ("T", "turing"),
    ("P", "pascal"),
];

/// Data-centre product codes: a prefix of [`NVIDIA_PRODUCTS`] and a model
/// number of at most four digits (an `S` or `X` suffix allowed).
fn nvidia_product(t: &str) -> Option<&'static str> {
    let digits_after = |p: &str| {
        t.strip_prefix(p).is_some_and(|r| {
            let r = r.trim_end_matches(['S', 'X']);
            !r.is_empty() && r.len() <= 4 && r.chars().all(|c| c.is_ascii_digit())
        })
    };
    NVIDIA_PRODUCTS
        .iter()
        .find(|(prefix, _)| digits_after(prefix))
        .map(|&(_, arch)| arch)
}

/// The AMD GPU architecture of a ROCm device name (`gfx90a:sramecc+:xnack-` -> `cdna2`).
fn amd_gpu_arch(lower_name: &str) -> Option<&'static str> {
    let gfx = lower_name
        .split(|c: char| !c.is_ascii_alphanumeric())
        .find(|t| t.starts_with("gfx"))?;
    let id = &gfx[3..];
    Some(match id {
        "908" => "cdna1",
        "90a" => "cdna2",
        "940" | "941" | "942" => "cdna3",
        "950" => "cdna4",
        _ if id.starts_with("101") => "rdna1",
        _ if id.starts_with("103") => "rdna2",
        _ if id.starts_with("11") && id.len() == 4 => "rdna3",
        _ if id.starts_with("12") && id.len() == 4 => "rdna4",
        _ if id.starts_with('9') => "gcn5",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(name: &str, vendor: &str, kind: &str) -> DeviceClass {
        DeviceIdentity::new(name, vendor, "", kind).class()
    }

    #[test]
    fn pocl_names_give_isa_and_simd() {
        let avx512 = DeviceClass::PoclCpu {
            isa: "x86-64",
            simd: Some(Simd::Avx512),
        };
        assert_eq!(
            class("pthread-skylake-avx512-AMD EPYC", "AuthenticAMD", "cpu"),
            avx512
        );
        assert_eq!(
            class(
                "pthread-icelake-server-Intel(R) Xeon(R) Processor",
                "GenuineIntel",
                "cpu"
            ),
            avx512
        );
        assert_eq!(
            class("cpu-skylake-Intel(R) Core(TM) i7", "GenuineIntel", "cpu"),
            DeviceClass::PoclCpu {
                isa: "x86-64",
                simd: Some(Simd::Avx2)
            }
        );
        assert_eq!(
            class("pthread-cortex-a72", "ARM", "cpu"),
            DeviceClass::PoclCpu {
                isa: "aarch64",
                simd: Some(Simd::Neon)
            }
        );
        assert_eq!(
            class("pthread-mystery-chip", "", "cpu"),
            DeviceClass::PoclCpu {
                isa: "unknown",
                simd: None
            }
        );
        assert_eq!(
            class("Intel(R) Xeon(R) Gold 6338", "Intel(R) Corporation", "cpu"),
            DeviceClass::Unknown
        );
    }

    #[test]
    fn gpu_names_give_architectures() {
        let nv = |n: &str| class(n, "NVIDIA Corporation", "gpu");
        let arch = |a| DeviceClass::NvidiaGpu { arch: Some(a) };
        assert_eq!(nv("NVIDIA H100 80GB HBM3"), arch("hopper"));
        assert_eq!(nv("NVIDIA H200"), arch("hopper"));
        assert_eq!(nv("NVIDIA GH200 480GB"), arch("hopper"));
        assert_eq!(nv("NVIDIA A100-SXM4-80GB"), arch("ampere"));
        assert_eq!(nv("NVIDIA L40S"), arch("ada"));
        assert_eq!(nv("NVIDIA GeForce RTX 4090"), arch("ada"));
        assert_eq!(nv("Tesla V100-PCIE-16GB"), arch("volta"));
        assert_eq!(nv("NVIDIA B200"), arch("blackwell"));
        assert_eq!(
            nv("Some NVIDIA thing"),
            DeviceClass::NvidiaGpu { arch: None }
        );
        let amd = |n: &str| class(n, "Advanced Micro Devices, Inc.", "gpu");
        assert_eq!(
            amd("gfx942:sramecc+:xnack-"),
            DeviceClass::AmdGpu {
                arch: Some("cdna3")
            }
        );
        assert_eq!(
            amd("gfx1100"),
            DeviceClass::AmdGpu {
                arch: Some("rdna3")
            }
        );
    }

    #[test]
    fn compatibility_is_symmetric_and_unknown_never_matches() {
        let c = |s| DeviceClass::PoclCpu {
            isa: "x86-64",
            simd: Some(s),
        };
        assert_eq!(c(Simd::Avx512).compatible(&c(Simd::Avx512)), Some(true));
        assert_eq!(c(Simd::Avx512).compatible(&c(Simd::Avx2)), Some(false));
        assert_eq!(c(Simd::Avx2).compatible(&c(Simd::Avx512)), Some(false));
        assert_eq!(c(Simd::Avx512).compatible(&c(Simd::Sse)), None);
        assert_eq!(DeviceClass::Unknown.compatible(&DeviceClass::Unknown), None);
        let none = DeviceClass::NvidiaGpu { arch: None };
        assert_eq!(none.compatible(&none), None);
    }
}
