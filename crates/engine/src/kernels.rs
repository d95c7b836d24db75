//! The kernel pool: OpenCL sources (embedded from `kernels/` so the binary runs
//! from anywhere), build options per precision, and the registry of kernels.

use crate::any::{AnyMatrix, AnyPlan, Values};
use crate::config::ReductionPath;
use crate::matrix::DeviceMatrix;
use crate::prepared::PreparedPlan;
use sparse::{KernelId, Scalar};
use std::borrow::Cow;

/// Shared prelude (value type, row-list helper), prepended to every program.
pub const PRELUDE_CL: &str = include_str!("../../../kernels/prelude.cl");
/// Kernel-Serial.
pub const SERIAL_CL: &str = include_str!("../../../kernels/serial.cl");
/// Kernel-SubvectorX, X = 2..128.
pub const SUBVECTOR_CL: &str = include_str!("../../../kernels/subvector.cl");
/// Kernel-Vector.
pub const VECTOR_CL: &str = include_str!("../../../kernels/vector.cl");
/// CSR-Adaptive (Stream / Vector / VectorL + the long-row second pass).
pub const CSR_ADAPTIVE_CL: &str = include_str!("../../../kernels/csr_adaptive.cl");
/// Merge-path SpMV and its carry fix-up pass.
pub const MERGE_PATH_CL: &str = include_str!("../../../kernels/merge_path.cl");
/// Cooperative (work-group-tiled) merge-path SpMV and its carry fix-up levels.
pub const MERGE_TILE_CL: &str = include_str!("../../../kernels/merge_tile.cl");
/// STREAM-like copy for the bandwidth bound.
pub const COPY_CL: &str = include_str!("../../../kernels/copy.cl");
/// Parameter-list macros of the kernels added after the first models.
pub const CSR_ARGS_CL: &str = include_str!("../../../kernels/csr_args.cl");
/// Merge path in one launch (last-arriver fix-up).
pub const MERGE_ONE_CL: &str = include_str!("../../../kernels/merge_one.cl");
/// One launch for a plan's row-mapped bins over a descriptor table.
pub const FUSED_CL: &str = include_str!("../../../kernels/fused.cl");

/// Every kernel source file the engine builds, as `(file name in kernels/, text)`,
/// in program order (the trainer records their hashes on a model card, the
/// service refuses models trained with other sources).
pub const SOURCES: [(&str, &str); 11] = [
    ("prelude.cl", PRELUDE_CL),
    ("serial.cl", SERIAL_CL),
    ("subvector.cl", SUBVECTOR_CL),
    ("vector.cl", VECTOR_CL),
    ("csr_adaptive.cl", CSR_ADAPTIVE_CL),
    ("merge_path.cl", MERGE_PATH_CL),
    ("merge_tile.cl", MERGE_TILE_CL),
    ("copy.cl", COPY_CL),
    ("csr_args.cl", CSR_ARGS_CL),
    ("fused.cl", FUSED_CL),
    ("merge_one.cl", MERGE_ONE_CL),
];

/// The whole program source, every family in one program (one build per precision).
pub fn program_source() -> String {
    SOURCES.map(|(_, text)| text).join("\n")
}

/// Environment variable with kernel parameter overrides (see [`KernelParams::with_overrides`]).
pub const PARAMS_ENV: &str = "SPMV_KERNEL_PARAMS";

/// Value precision of a program and a matrix (the workspace's one type).
pub use sparse::Precision;

/// A value type the device can compute with: `f32` or `f64`.
pub trait DeviceScalar: Scalar + ocl::OclPrm {
    /// The precision of this type.
    const PRECISION: Precision;
    /// A matrix of this type as an [`AnyMatrix`].
    fn any_matrix(m: DeviceMatrix<Self>) -> AnyMatrix;
    /// A plan of this type as an [`AnyPlan`].
    fn any_plan(p: PreparedPlan<Self>) -> AnyPlan;
    /// Values of this type as [`Values`].
    fn values(v: &[Self]) -> Values<'_>;
}

/// Implements [`DeviceScalar`] for a primitive whose precision, matrix, plan
/// and values variants share one name (`F32`, `F64`).
macro_rules! device_scalar {
    ($t:ty, $variant:ident) => {
        impl DeviceScalar for $t {
            const PRECISION: Precision = Precision::$variant;
            fn any_matrix(m: DeviceMatrix<$t>) -> AnyMatrix {
                AnyMatrix::$variant(m)
            }
            fn any_plan(p: PreparedPlan<$t>) -> AnyPlan {
                AnyPlan::$variant(p)
            }
            fn values(v: &[$t]) -> Values<'_> {
                Values::$variant(v)
            }
        }
    };
}

device_scalar!(f32, F32);
device_scalar!(f64, F64);

/// Merge-path items per work-item on CPU devices.
const CPU_MP_ITEMS: usize = 4096;
/// Merge-tile work-group size and items per work-item on CPU devices (PoCL runs
/// a work-group as a loop, so a narrow group of long shares has fewer barrier
/// splits; measured with `spmv bench`).
const CPU_MT: (usize, usize) = (16, 64);
/// Merge-tile work-group size and items per work-item on GPUs: a tile of 1024
/// items, 13.5 KiB of local memory in f64.
const GPU_MT: (usize, usize) = (128, 8);
/// CSR-Adaptive work-group size on CPU devices.
const CPU_ADAPTIVE_WG: usize = 64;
/// Work-group size of every kernel when the device allows it (the paper's 256).
const DEFAULT_WG: usize = 256;

/// The largest power of two at most `n` (1 for 0).
fn pow2_floor(n: usize) -> usize {
    if n <= 1 {
        1
    } else {
        1 << (usize::BITS - 1 - n.leading_zeros())
    }
}

/// Tunable parameters compiled into a program (and mirrored by the host code
/// that sizes launches and builds CSR-Adaptive row blocks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelParams {
    /// Work-group size of serial, subvector and merge path.
    pub wg_size: usize,
    /// Work-group size of the vector kernel (the paper's 256).
    pub vector_wg: usize,
    /// Work-group size of CSR-Adaptive (the paper's 256).
    pub adaptive_wg: usize,
    /// CSR-Adaptive: nonzeros per row block (paper 003, Table I).
    pub nnz_per_wg: usize,
    /// CSR-Adaptive: fewest rows of a block handled by CSR-Stream (Table I).
    pub num_rows_stream: usize,
    /// CSR-Adaptive: a row longer than `nnz_per_wg * nnz_multiplier` is split
    /// over several work-groups (CSR-VectorL) (Table I).
    pub nnz_multiplier: usize,
    /// Merge path: rows + nonzeros per work-item.
    pub mp_items: usize,
    /// Merge tile: work-group size (a power of two); one tile per work-group.
    pub mt_wg: usize,
    /// Merge tile: rows + nonzeros per work-item (a tile is `mt_wg * mt_items`).
    pub mt_items: usize,
}

impl KernelParams {
    /// Defaults for a precision on a kind of device (`cpu`, `gpu`, ... as in
    /// [`crate::DeviceInfo::kind`]): the 003 paper's Table I for CSR-Adaptive
    /// everywhere; on CPUs (PoCL runs a work-group as a loop on one core, so
    /// barriers are loop splits and fewer, longer work-items win) long merge-path
    /// chunks and smaller CSR-Adaptive work-groups, measured by `spmv bench`.
    /// Every work-group size is capped by the device's `max_work_group_size`
    /// (rounded down to a power of two), so a device that allows fewer than 256
    /// work-items per group still runs every kernel.
    pub fn for_device(p: Precision, kind: &str, max_work_group_size: usize) -> KernelParams {
        let mut k = KernelParams::defaults(p);
        if kind == "cpu" {
            k.mp_items = CPU_MP_ITEMS;
            k.adaptive_wg = CPU_ADAPTIVE_WG;
            (k.mt_wg, k.mt_items) = CPU_MT;
        }
        let cap = pow2_floor(max_work_group_size.max(1));
        k.mt_wg = k.mt_wg.min(cap);
        k.wg_size = k.wg_size.min(cap);
        k.vector_wg = k.vector_wg.min(cap);
        k.adaptive_wg = k.adaptive_wg.min(cap);
        k
    }

    /// The work-group sizes compiled into a program.
    pub fn work_group_sizes(&self) -> [usize; 3] {
        [self.wg_size, self.vector_wg, self.adaptive_wg]
    }

    /// Defaults for a precision (GPU-friendly): the 003 paper's Table I for CSR-Adaptive.
    pub fn defaults(p: Precision) -> KernelParams {
        let (nnz_per_wg, num_rows_stream, nnz_multiplier) = match p {
            Precision::F32 => (1024, 1, 3),
            Precision::F64 => (1536, 2, 2),
        };
        KernelParams {
            wg_size: DEFAULT_WG,
            vector_wg: DEFAULT_WG,
            adaptive_wg: DEFAULT_WG,
            nnz_per_wg,
            num_rows_stream,
            nnz_multiplier,
            mp_items: 64,
            mt_wg: GPU_MT.0,
            mt_items: GPU_MT.1,
        }
    }

    /// Local memory one merge-tile work-group declares, in bytes, for values of
    /// precision `p`: the tile's row ends and products, the scan's rows and
    /// values, and the tile's two bounds.
    pub fn merge_tile_local_bytes(&self, p: Precision) -> u64 {
        let v = p.bytes() as u64;
        let tile = (self.mt_wg * self.mt_items) as u64;
        tile * (4 + v) + self.mt_wg as u64 * (4 + v) + 8
    }

    /// Shrinks the merge tile until its local memory fits `local_mem_bytes` (the
    /// device's `CL_DEVICE_LOCAL_MEM_SIZE`): fewer items per work-item first,
    /// then a narrower work-group. A device with less than two work-items' worth
    /// keeps 2 x 1 and fails at build time with the driver's message; 0 (the
    /// size unknown) changes nothing.
    pub fn fit_local_memory(mut self, p: Precision, local_mem_bytes: u64) -> KernelParams {
        if local_mem_bytes == 0 {
            return self;
        }
        while self.merge_tile_local_bytes(p) > local_mem_bytes && self.mt_items > 1 {
            self.mt_items /= 2;
        }
        while self.merge_tile_local_bytes(p) > local_mem_bytes && self.mt_wg > 2 {
            self.mt_wg /= 2;
        }
        self
    }

    /// Applies overrides written `name=value,...` (names as the fields:
    /// `wg_size`, `vector_wg`, `nnz_per_wg`, `num_rows_stream`, `nnz_multiplier`,
    /// `mp_items`, `mt_wg`, `mt_items`), e.g. from [`crate::EngineConfig::kernel_params`] when tuning
    /// for a new device.
    pub fn with_overrides(mut self, spec: &str) -> Result<KernelParams, String> {
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (k, v) = item
                .split_once('=')
                .ok_or_else(|| format!("'{item}' is not name=value"))?;
            let v: usize = v
                .trim()
                .parse()
                .map_err(|_| format!("'{item}': value is not a positive integer"))?;
            if v == 0 {
                return Err(format!("'{item}': value must be positive"));
            }
            match k.trim() {
                "wg_size" => self.wg_size = v,
                "vector_wg" => self.vector_wg = v,
                "adaptive_wg" => self.adaptive_wg = v,
                "nnz_per_wg" => self.nnz_per_wg = v,
                "num_rows_stream" => self.num_rows_stream = v,
                "nnz_multiplier" => self.nnz_multiplier = v,
                "mp_items" => self.mp_items = v,
                "mt_wg" => self.mt_wg = v,
                "mt_items" => self.mt_items = v,
                other => return Err(format!("unknown kernel parameter '{other}'")),
            }
        }
        if ![self.wg_size, self.vector_wg, self.adaptive_wg, self.mt_wg]
            .iter()
            .all(|w| w.is_power_of_two())
        {
            return Err("work-group sizes must be powers of two".into());
        }
        if self.mt_wg * self.mt_items < 2 {
            return Err("a merge tile (mt_wg x mt_items) needs at least 2 items".into());
        }
        Ok(self)
    }

    /// OpenCL build options for this precision and reduction path.
    pub fn build_options(&self, p: Precision, path: ReductionPath) -> String {
        format!(
            "-DVALUE_TYPE={}{} -DWG_SIZE={} -DVECTOR_WG={} -DADAPTIVE_WG={} -DNNZ_PER_WG={} -DNUM_ROWS_STREAM={} -DMP_ITEMS={} -DMT_WG={} -DMT_ITEMS={}{}",
            p.cl_type(),
            if p == Precision::F64 { " -DUSE_DOUBLE" } else { "" },
            self.wg_size,
            self.vector_wg,
            self.adaptive_wg,
            self.nnz_per_wg,
            self.num_rows_stream,
            self.mp_items,
            self.mt_wg,
            self.mt_items,
            path.build_options()
        )
    }
}

/// One kernel of the pool as the registry lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelInfo {
    /// Its id (also the plan vocabulary of `sparse::plan`).
    pub id: KernelId,
    /// Its name, as printed by the CLI (`serial`, `subvector8`, ...).
    pub name: String,
    /// Its family, which is also its source file `kernels/<family>.cl`.
    pub family: &'static str,
    /// Whether it runs on one bin's row list (every kernel of the pool does).
    pub per_bin: bool,
    /// One line on its thread mapping.
    pub description: String,
}

/// Every kernel the engine can run, in [`KernelId::all`] order.
pub fn registry() -> Vec<KernelInfo> {
    KernelId::all()
        .into_iter()
        .map(|id| KernelInfo {
            id,
            name: id.name(),
            family: id.family(),
            per_bin: true,
            description: match id {
                KernelId::Serial => "one work-item per row".into(),
                KernelId::Subvector(x) => format!("{x} work-items per row, local-memory tree (or warp shuffle) reduction"),
                KernelId::Vector => "one work-group (256 or the device's maximum) per row".into(),
                KernelId::CsrAdaptive => {
                    "row blocks of ~NNZ_PER_WG nonzeros: CSR-Stream / CSR-Vector / CSR-VectorL (second pass for split rows)".into()
                }
                KernelId::MergePath => "merge path over rows + nonzeros, equal work per work-item, carry fix-up pass".into(),
                KernelId::MergeTile => {
                    "merge path in tiles of MT_WG x MT_ITEMS items per work-group: coalesced loads into local memory, segmented scan of carries, tree fix-up".into()
                }
                KernelId::MergeOne => {
                    "merge path in one launch: tiles of WG_SIZE x 8 items from start coordinates computed at preparation, coalesced staging, crossing rows finished by the last work-group to arrive".into()
                }
            },
        })
        .collect()
}

/// Name of the OpenCL entry point of a row-list kernel.
pub(crate) fn entry_point(id: KernelId) -> Cow<'static, str> {
    Cow::Borrowed(match id {
        KernelId::Serial => "spmv_serial",
        KernelId::Subvector(2) => "spmv_subvector2",
        KernelId::Subvector(4) => "spmv_subvector4",
        KernelId::Subvector(8) => "spmv_subvector8",
        KernelId::Subvector(16) => "spmv_subvector16",
        KernelId::Subvector(32) => "spmv_subvector32",
        KernelId::Subvector(64) => "spmv_subvector64",
        KernelId::Subvector(128) => "spmv_subvector128",
        KernelId::Subvector(x) => return Cow::Owned(format!("spmv_subvector{x}")),
        KernelId::Vector => "spmv_vector",
        KernelId::CsrAdaptive => "spmv_csr_adaptive",
        KernelId::MergePath => "spmv_merge_path",
        KernelId::MergeOne => "spmv_merge_one",
        KernelId::MergeTile => "spmv_merge_tile",
    })
}

/// Every entry point a plan's launches use: each kernel's, and the second
/// passes of CSR-Adaptive and the merge kernels.
pub(crate) fn plan_entry_points() -> Vec<Cow<'static, str>> {
    let mut v: Vec<Cow<'static, str>> = KernelId::all().into_iter().map(entry_point).collect();
    v.extend(
        [
            "spmv_csr_adaptive_long_rows",
            "spmv_merge_path_fixup",
            "spmv_merge_tile_fixup",
        ]
        .map(Cow::Borrowed),
    );
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_group_sizes_follow_the_device() {
        let big = KernelParams::for_device(Precision::F64, "gpu", 1024);
        assert_eq!(big.work_group_sizes(), [256, 256, 256]);
        let cpu = KernelParams::for_device(Precision::F32, "cpu", 4096);
        assert_eq!(cpu.work_group_sizes(), [256, 256, 64]);
        assert_eq!(cpu.mp_items, 4096);
        // A device allowing 192 work-items per group gets 128 everywhere.
        let small = KernelParams::for_device(Precision::F32, "gpu", 192);
        assert_eq!(small.work_group_sizes(), [128, 128, 128]);
        assert_eq!(pow2_floor(1), 1);
        assert_eq!(pow2_floor(0), 1);
        assert_eq!(pow2_floor(1023), 512);
    }

    #[test]
    fn build_options_select_the_reduction_path() {
        let k = KernelParams::defaults(Precision::F64);
        let portable = k.build_options(Precision::F64, ReductionPath::Portable);
        assert!(portable.contains("-DVALUE_TYPE=double -DUSE_DOUBLE"));
        assert!(!portable.contains("SPMV_WARP_SHUFFLE"));
        let ptx = k.build_options(Precision::F64, ReductionPath::WarpShuffle);
        assert!(ptx.ends_with(" -DSPMV_WARP_SHUFFLE=1"), "{ptx}");
        assert!(!ptx.contains("EMULATE"));
        let emu = k.build_options(Precision::F32, ReductionPath::EmulatedShuffle);
        assert!(emu.contains("-DVALUE_TYPE=float -DWG_SIZE"));
        assert!(
            emu.contains("-DSPMV_WARP_SHUFFLE=1 -DSPMV_SHUFFLE_EMULATE=1"),
            "{emu}"
        );
    }
}
