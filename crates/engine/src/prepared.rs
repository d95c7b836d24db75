//! Prepared plans: everything a plan needs on the device (row lists, CSR-Adaptive
//! row blocks, merge-path offsets and carries, kernels with their arguments
//! bound), built once so repeated SpMVs do no host analysis.

use crate::engine::read_only_copy;
use crate::error::{EngineError, Result};
use crate::kernels::{entry_point, DeviceScalar, KernelParams};
use crate::launch::{Launch, LaunchBuilder, MatrixBuf, XBuf, YBuf};
use crate::matrix::DeviceMatrix;
use ocl::{Buffer, Queue};
use sparse::{Binning, KernelId, Plan, Scheme};
use std::borrow::Cow;
use std::marker::PhantomData;
use std::sync::Mutex;

/// How the bins of a plan become kernel launches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum LaunchMode {
    /// One launch per non-empty bin, as in the paper.
    PerBin,
    /// One launch per kernel: the rows of all bins that chose it, concatenated
    /// (in increasing row order). The default: `spmv bench` on PoCL (2 cores) found it
    /// as fast or faster than one launch per bin on most matrices (best-kernel-per-bin
    /// plans at U = 100, e.g. HB/bcsstk33 with 24 bins, f64: 0.358 vs 0.370 ms;
    /// differences are within noise on matrices with few bins), and it saves the
    /// per-launch latency, which is larger on GPUs.
    #[default]
    Grouped,
    /// One launch for every bin whose kernel maps lanes onto rows (serial,
    /// subvector-X, vector), over a table of work-group descriptors built
    /// when the plan is prepared (`kernels/fused.cl`), each bin keeping its
    /// lanes per row; CSR-Adaptive and the merge kernels launch as grouped.
    /// A plan with one row-mapped kernel runs that kernel's own launch.
    Fused,
}

impl LaunchMode {
    /// How a service runs plans on a device of `kind` (`DeviceInfo::kind`):
    /// fused on every device but a CPU, where a launch costs 6-7 us through
    /// NVIDIA's OpenCL and no plan of two or more launches beat the best
    /// single kernel on the H100 (training-data/report/nvidia-h100-80gb-hbm3/);
    /// grouped on a CPU, where PoCL's launch is cheap and the fused kernel's
    /// per-work-group width was no faster (`spmv bench`, plan lines).
    pub fn serving(kind: &str) -> LaunchMode {
        if kind == "cpu" {
            LaunchMode::Grouped
        } else {
            LaunchMode::Fused
        }
    }
}

impl std::str::FromStr for LaunchMode {
    type Err = EngineError;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().replace('-', "_").as_str() {
            "per_bin" | "perbin" | "bin" => Ok(LaunchMode::PerBin),
            "grouped" | "group" => Ok(LaunchMode::Grouped),
            "fused" | "one" => Ok(LaunchMode::Fused),
            _ => Err(EngineError::InvalidPlan(format!(
                "unknown launch mode '{s}' (per_bin, grouped or fused)"
            ))),
        }
    }
}

/// What one launch of a prepared plan covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchInfo {
    /// The kernel.
    pub kernel: KernelId,
    /// The bins whose rows it computes.
    pub bins: Vec<usize>,
    /// Rows computed.
    pub rows: usize,
    /// Nonzeros of those rows.
    pub nnz: u64,
    /// OpenCL kernel enqueues (2 for merge path and for CSR-Adaptive with split
    /// rows; 1 + fix-up levels for merge tile).
    pub enqueues: usize,
}

/// A plan made ready for one uploaded matrix (see [`crate::Engine::prepare`]).
#[derive(Debug)]
pub struct PreparedPlan<T: DeviceScalar> {
    pub(crate) matrix_id: u64,
    pub(crate) scheme: Scheme,
    pub(crate) mode: LaunchMode,
    /// Whether every row of the matrix is computed (false for single-bin timing plans).
    pub(crate) complete: bool,
    pub(crate) info: Vec<LaunchInfo>,
    /// The launches to enqueue, in order. An OpenCL kernel object is Send but
    /// not Sync; the lock makes the plan shareable between threads.
    pub(crate) steps: Mutex<Vec<Launch>>,
    /// Calls made with the plan (which of them are profiled).
    pub(crate) calls: std::sync::atomic::AtomicU64,
    pub(crate) _t: PhantomData<T>,
}

impl<T: DeviceScalar> PreparedPlan<T> {
    /// The launches, in order.
    pub fn launches(&self) -> &[LaunchInfo] {
        &self.info
    }

    /// The binning scheme.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// The launch mode.
    pub fn mode(&self) -> LaunchMode {
        self.mode
    }

    /// Whether every row of the matrix is computed by this plan.
    pub fn is_complete(&self) -> bool {
        self.complete
    }

    /// Counts a call; whether its kernels are profiled: the first
    /// [`crate::engine::PROFILED_FIRST`] calls, then one in `every`.
    pub(crate) fn profile_call(&self, every: u64) -> bool {
        let n = self
            .calls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        n < crate::engine::PROFILED_FIRST || n.is_multiple_of(every.max(1))
    }
}

/// Rows given to one launch.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum RowSet {
    /// Rows base .. base + n, no list on the device.
    Range { base: u32, n: u32 },
    /// An increasing list of rows.
    List(Vec<u32>),
}

impl RowSet {
    /// A list, turned into a range when it is one.
    pub(crate) fn from_sorted(list: Vec<u32>) -> RowSet {
        match (list.first(), list.last()) {
            (None, _) | (_, None) => RowSet::Range { base: 0, n: 0 },
            (Some(&f), Some(&l)) if (l - f) as usize + 1 == list.len() => RowSet::Range {
                base: f,
                n: list.len() as u32,
            },
            _ => RowSet::List(list),
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            RowSet::Range { n, .. } => *n as usize,
            RowSet::List(v) => v.len(),
        }
    }

    pub(crate) fn row(&self, i: usize) -> u32 {
        match self {
            RowSet::Range { base, .. } => base + i as u32,
            RowSet::List(v) => v[i],
        }
    }

    /// Maximal runs of consecutive rows, as half-open ranges.
    fn runs(&self) -> Vec<(u32, u32)> {
        match self {
            RowSet::Range { base, n } => {
                if *n == 0 {
                    vec![]
                } else {
                    vec![(*base, base + n)]
                }
            }
            RowSet::List(v) => {
                let mut out: Vec<(u32, u32)> = Vec::new();
                for &r in v {
                    match out.last_mut() {
                        Some(last) if last.1 == r => last.1 = r + 1,
                        _ => out.push((r, r + 1)),
                    }
                }
                out
            }
        }
    }
}

/// The rows of bin `b` under `binning`, without expanding the single-bin scheme.
fn bin_rows(binning: &Binning, b: usize) -> RowSet {
    match binning.scheme {
        Scheme::Single => RowSet::Range {
            base: 0,
            n: binning.nrows as u32,
        },
        Scheme::Granularity(_) => RowSet::from_sorted(binning.expand(b)),
    }
}

/// The launches of `assign` (bin, kernel) under `mode`, in launch order: each
/// kernel with the non-empty bins it computes (one group per bin, or one per
/// kernel when grouped), their rows and nonzeros; `enqueues` is left 0 for
/// the preparation to fill in. Bins out of range are the caller's to refuse.
pub(crate) fn launch_groups(
    binning: &Binning,
    assign: &[(usize, KernelId)],
    mode: LaunchMode,
) -> Vec<LaunchInfo> {
    let mut groups: Vec<LaunchInfo> = Vec::with_capacity(assign.len().min(4));
    for &(b, k) in assign {
        if binning.bins[b].is_empty() {
            continue;
        }
        let (rows, nnz) = (binning.row_count(b), binning.bin_nnz[b]);
        let same = match mode {
            LaunchMode::PerBin => None,
            LaunchMode::Grouped | LaunchMode::Fused => groups.iter_mut().find(|g| g.kernel == k),
        };
        match same {
            Some(g) => {
                g.bins.push(b);
                g.rows += rows;
                g.nnz += nnz;
            }
            None => groups.push(LaunchInfo {
                kernel: k,
                bins: vec![b],
                rows,
                nnz,
                enqueues: 0,
            }),
        }
    }
    groups
}

/// The rows of one launch group: its bin's rows, or the rows of its bins
/// merged in row order (a plain range when they are consecutive, e.g. every
/// row of the matrix).
pub(crate) fn group_rows(binning: &Binning, bins: &[usize]) -> RowSet {
    if binning.scheme == Scheme::Single {
        return bin_rows(binning, bins[0]);
    }
    // Bins hold disjoint rows: when these hold them all, they are the whole
    // matrix, and the list need not be built to find that out.
    let covered: usize = bins.iter().map(|&b| binning.row_count(b)).sum();
    if covered == binning.nrows {
        return RowSet::Range {
            base: 0,
            n: binning.nrows as u32,
        };
    }
    if let [b] = bins {
        return bin_rows(binning, *b);
    }
    let mut all: Vec<u32> = bins.iter().flat_map(|&b| binning.rows(b)).collect();
    all.sort_unstable();
    RowSet::from_sorted(all)
}

/// What a complete plan enqueues, as far as it depends on the plan: each
/// launch's kernel and rows, in order. The steps of a launch are a function of
/// its kernel and rows alone (`build_steps`; the matrix and the kernel
/// parameters aside), so two plans with equal keys run the same kernels over
/// the same rows with the same arguments: a timing of one is a timing of the
/// other. A plan of any scheme whose bins all chose one kernel (grouped) has
/// the key of that kernel over the single bin: one launch over the whole
/// matrix as a plain range, no row list.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LaunchKey(Vec<(KernelId, RowSet)>, bool);

/// The [`LaunchKey`] of `plan` over `binning` under `mode`, without a device;
/// an error for a plan that does not fit the binning (as
/// [`crate::Engine::prepare_binned`] refuses it).
pub fn launch_key(binning: &Binning, plan: &Plan, mode: LaunchMode) -> Result<LaunchKey> {
    plan.check(binning)
        .map_err(|e| EngineError::InvalidPlan(e.to_string()))?;
    let groups = launch_groups(binning, &plan.kernels, mode);
    let fused = fuses(mode, &groups);
    Ok(LaunchKey(
        groups
            .into_iter()
            .map(|g| (g.kernel, group_rows(binning, &g.bins)))
            .collect(),
        fused,
    ))
}

/// Whether `groups` under `mode` run as a fused launch: two or more of them
/// with a row-mapped kernel (one alone runs its own kernel's launch).
pub(crate) fn fuses(mode: LaunchMode, groups: &[LaunchInfo]) -> bool {
    mode == LaunchMode::Fused
        && groups
            .iter()
            .filter(|g| crate::fused::row_mapped(g.kernel))
            .count()
            >= 2
}

/// CSR-Adaptive row blocks built on the host over runs of consecutive rows.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct RowBlocks {
    /// Four u32 per block: row_start, row_end, k_start, k_end.
    pub(crate) blocks: Vec<u32>,
    /// Per block: NONE, or its slot in the partial sums of a split row.
    pub(crate) slots: Vec<u32>,
    /// Rows split over several blocks (CSR-VectorL).
    pub(crate) long_rows: Vec<u32>,
    /// Offsets of each long row's slots (len = long_rows + 1).
    pub(crate) long_ptr: Vec<u32>,
}

const NONE: u32 = u32::MAX;

impl RowBlocks {
    pub(crate) fn num_blocks(&self) -> usize {
        self.slots.len()
    }

    fn push(&mut self, rs: u32, re: u32, ks: u32, ke: u32, slot: u32) {
        self.blocks.extend_from_slice(&[rs, re, ks, ke]);
        self.slots.push(slot);
    }

    /// Blocks of about `nnz_per_wg` nonzeros (at most `nnz_per_wg` rows) over each
    /// run; a row longer than `nnz_per_wg` gets its own block, split into chunks
    /// of `nnz_per_wg * nnz_multiplier` when longer than that (paper 003).
    pub(crate) fn build(rp: &[u32], runs: &[(u32, u32)], p: &KernelParams) -> RowBlocks {
        let per_wg = p.nnz_per_wg as u64;
        let cap = (p.nnz_per_wg * p.nnz_multiplier) as u64;
        let mut out = RowBlocks {
            long_ptr: vec![0],
            ..Default::default()
        };
        let mut nslots = 0u32;
        for &(a, b) in runs {
            let mut i = a;
            while i < b {
                let len = (rp[i as usize + 1] - rp[i as usize]) as u64;
                if len > per_wg {
                    let (ks, ke) = (rp[i as usize], rp[i as usize + 1]);
                    if len <= cap {
                        out.push(i, i + 1, ks, ke, NONE);
                    } else {
                        out.long_rows.push(i);
                        let mut k = ks;
                        while k < ke {
                            let e = (k as u64 + cap).min(ke as u64) as u32;
                            out.push(i, i + 1, k, e, nslots);
                            nslots += 1;
                            k = e;
                        }
                        out.long_ptr.push(nslots);
                    }
                    i += 1;
                } else {
                    let start = i;
                    let mut nnz = 0u64;
                    while i < b && ((i - start) as u64) < per_wg {
                        let l = (rp[i as usize + 1] - rp[i as usize]) as u64;
                        if nnz + l > per_wg {
                            break;
                        }
                        nnz += l;
                        i += 1;
                    }
                    out.push(start, i, rp[start as usize], rp[i as usize], NONE);
                }
            }
        }
        out
    }
}

fn round_up(n: usize, m: usize) -> usize {
    n.div_ceil(m) * m
}

fn t_buffer<T: DeviceScalar>(queue: &Queue, len: usize) -> Result<Buffer<T>> {
    Ok(Buffer::<T>::builder()
        .queue(queue.clone())
        .flags(ocl::flags::MEM_READ_WRITE)
        .len(len.max(1))
        .build()?)
}

fn check_gws(gws: usize, what: &str) -> Result<()> {
    if gws > u32::MAX as usize {
        return Err(EngineError::InvalidPlan(format!(
            "{what} would need {gws} work-items, more than this engine launches at once"
        )));
    }
    Ok(())
}

/// Appends the kernels to enqueue (in order) for `kernel` over `rows` of `m`
/// to `out`; returns how many (a row kernel's one launch is pushed as is, no
/// vector of its own).
pub(crate) fn build_steps<T: DeviceScalar>(
    queue: &Queue,
    m: &DeviceMatrix<T>,
    p: &KernelParams,
    (kernel, rows): (KernelId, &RowSet),
    out: &mut Vec<Launch>,
) -> Result<usize> {
    if rows.len() == 0 {
        return Ok(0);
    }
    let steps = match kernel {
        KernelId::Serial | KernelId::Subvector(_) | KernelId::Vector => {
            out.push(row_kernel_launch(queue, m, p, kernel, rows)?);
            return Ok(1);
        }
        KernelId::CsrAdaptive => csr_adaptive_steps(queue, m, p, rows)?,
        KernelId::MergePath => merge_path_steps(&Merge::new(queue, m, p, rows)?)?,
        KernelId::MergeTile => merge_tile_steps(&Merge::new(queue, m, p, rows)?)?,
        KernelId::MergeOne => {
            out.push(merge_one_launch(&Merge::new(queue, m, p, rows)?)?);
            return Ok(1);
        }
    };
    let n = steps.len();
    out.extend(steps);
    Ok(n)
}

/// The arguments every SpMV kernel takes in this order: the matrix's row
/// pointers, column indices and values, then x and y.
trait MatrixArgs {
    fn matrix_xy<T: DeviceScalar>(&mut self, m: &DeviceMatrix<T>) -> &mut Self;
}

impl MatrixArgs for LaunchBuilder {
    fn matrix_xy<T: DeviceScalar>(&mut self, m: &DeviceMatrix<T>) -> &mut Self {
        self.arg(MatrixBuf(&m.row_ptr))
            .arg(MatrixBuf(&m.col_idx))
            .arg(MatrixBuf(&m.vals))
            .arg(XBuf(&m.x))
            .arg(YBuf(&m.y))
    }
}

/// A launch builder for entry point `name` of the matrix's program, with its
/// launch geometry `(global, local)`: the caller adds the arguments.
fn launch<T: DeviceScalar>(
    m: &DeviceMatrix<T>,
    name: impl Into<Cow<'static, str>>,
    geometry: (usize, usize),
) -> LaunchBuilder {
    LaunchBuilder::pooled(&m.kernels, name, geometry)
}

/// The launch geometry `(global, local)` of a row kernel over `n` rows.
fn row_kernel_geometry(p: &KernelParams, kernel: KernelId, n: usize) -> Result<(usize, usize)> {
    Ok(match kernel {
        KernelId::Serial => (round_up(n, p.wg_size), p.wg_size),
        KernelId::Subvector(x) => {
            let x = x as usize;
            if !x.is_power_of_two() || x > p.wg_size {
                return Err(EngineError::InvalidPlan(format!(
                    "subvector{x} needs a power-of-two width at most the work-group size {}",
                    p.wg_size
                )));
            }
            (round_up(n * x, p.wg_size), p.wg_size)
        }
        _ => (n * p.vector_wg, p.vector_wg),
    })
}

/// Serial, subvector-X and vector: one launch, X work-items per row.
fn row_kernel_launch<T: DeviceScalar>(
    queue: &Queue,
    m: &DeviceMatrix<T>,
    p: &KernelParams,
    kernel: KernelId,
    rows: &RowSet,
) -> Result<Launch> {
    let n = rows.len();
    let (use_list, base, own) = match rows {
        RowSet::Range { base, .. } => (0u32, *base, None),
        RowSet::List(v) => (1u32, 0u32, Some(read_only_copy(queue, v)?)),
    };
    let (gws, lws) = row_kernel_geometry(p, kernel, n)?;
    if gws / lws > u32::MAX as usize {
        // (Tested here first so the kernel's name is made only for the error.)
        check_gws(gws / lws, &kernel.name())?;
    }
    let mut k = launch(m, entry_point(kernel), (gws, lws));
    k.arg(n as u32).arg(use_list).arg(base);
    match &own {
        Some(list) => k.arg(list),
        None => k.arg(MatrixBuf(&m.dummy)),
    };
    k.matrix_xy(m).build()
}

/// The fused launch over `groups` (each a row-mapped kernel and its rows):
/// one work-group per descriptor of their [`crate::fused::FusedTable`].
pub(crate) fn fused_launch<T: DeviceScalar>(
    queue: &Queue,
    m: &DeviceMatrix<T>,
    p: &KernelParams,
    groups: &[(KernelId, &RowSet)],
) -> Result<Launch> {
    let t = crate::fused::FusedTable::build(groups, p.wg_size)?;
    check_gws(t.groups(), "the fused launch")?;
    let desc = read_only_copy(queue, &t.desc)?;
    let rows = read_only_copy(queue, &t.rows)?;
    launch(m, "spmv_fused", (t.groups() * p.wg_size, p.wg_size))
        .arg(&desc)
        .arg(&rows)
        .matrix_xy(m)
        .build()
}

/// CSR-Adaptive: the row-block launch, plus the long-row sum when rows were split.
fn csr_adaptive_steps<T: DeviceScalar>(
    queue: &Queue,
    m: &DeviceMatrix<T>,
    p: &KernelParams,
    rows: &RowSet,
) -> Result<Vec<Launch>> {
    let rb = RowBlocks::build(&m.row_ptr_host, &rows.runs(), p);
    let blocks = read_only_copy(queue, &rb.blocks)?;
    let slots = read_only_copy(queue, &rb.slots)?;
    let nslots = *rb.long_ptr.last().unwrap_or(&0) as usize;
    let partials = t_buffer::<T>(queue, nslots)?;
    check_gws(rb.num_blocks(), "csr_adaptive")?;
    let geometry = (rb.num_blocks() * p.adaptive_wg, p.adaptive_wg);
    let mut steps = vec![launch(m, "spmv_csr_adaptive", geometry)
        .arg(&blocks)
        .arg(&slots)
        .matrix_xy(m)
        .arg(&partials)
        .build()?];
    if !rb.long_rows.is_empty() {
        let nl = rb.long_rows.len();
        let long_rows = read_only_copy(queue, &rb.long_rows)?;
        let long_ptr = read_only_copy(queue, &rb.long_ptr)?;
        let geometry = (round_up(nl, p.wg_size), p.wg_size);
        steps.push(
            launch(m, "spmv_csr_adaptive_long_rows", geometry)
                .arg(nl as u32)
                .arg(&long_rows)
                .arg(&long_ptr)
                .arg(&partials)
                .arg(YBuf(&m.y))
                .build()?,
        );
    }
    Ok(steps)
}

/// The rows of a merge-path launch on the device.
struct MergeRows {
    /// Rows given to the launch.
    n: usize,
    /// 1 when `list` holds the rows, 0 for the range `base ..`.
    use_list: u32,
    base: u32,
    list: Buffer<u32>,
    /// Prefix sums of the rows' lengths (the matrix's own `row_ptr` for the whole matrix).
    list_ptr: Buffer<u32>,
    /// Nonzeros of those rows.
    nnz: u64,
    /// `list_ptr` on the host, empty for the whole matrix (then the matrix's
    /// own `row_ptr`).
    lp_host: Vec<u32>,
}

fn merge_rows<T: DeviceScalar>(
    queue: &Queue,
    m: &DeviceMatrix<T>,
    rows: &RowSet,
) -> Result<MergeRows> {
    let n = rows.len();
    let rp = &m.row_ptr_host;
    if matches!(rows, RowSet::Range { base: 0, n } if *n as usize == m.nrows) {
        return Ok(MergeRows {
            n,
            use_list: 0,
            base: 0,
            list: m.dummy.clone(),
            list_ptr: m.row_ptr.clone(),
            nnz: m.nnz as u64,
            lp_host: Vec::new(),
        });
    }
    let mut lp = Vec::with_capacity(n + 1);
    lp.push(0u32);
    let mut acc = 0u64;
    for i in 0..n {
        let r = rows.row(i) as usize;
        acc += (rp[r + 1] - rp[r]) as u64;
        lp.push(acc as u32);
    }
    let (use_list, base, list) = match rows {
        RowSet::Range { base, .. } => (0u32, *base, m.dummy.clone()),
        RowSet::List(v) => (1u32, 0u32, read_only_copy(queue, v)?),
    };
    Ok(MergeRows {
        n,
        use_list,
        base,
        list,
        list_ptr: read_only_copy(queue, &lp)?,
        nnz: acc,
        lp_host: lp,
    })
}

/// The first pass of a merge kernel (`spmv_merge_path`, `spmv_merge_tile`)
/// with the eleven arguments both take first: rows, nonzeros, the row set
/// (`use_list`, `base`, `list`, `list_ptr`), the matrix, x and y. The caller
/// adds its own arguments and builds it.
fn merge_pass<T: DeviceScalar>(
    m: &DeviceMatrix<T>,
    r: &MergeRows,
    name: &'static str,
    geometry: (usize, usize),
) -> LaunchBuilder {
    let mut b = launch(m, name, geometry);
    b.arg(r.n as u32)
        .arg(r.nnz as u32)
        .arg(r.use_list)
        .arg(r.base)
        .arg(&r.list)
        .arg(&r.list_ptr)
        .matrix_xy(m);
    b
}

/// A merge fix-up pass (`spmv_merge_path_fixup`, `spmv_merge_tile_fixup`) with
/// the arguments both take first: `count` carries, the row set, the carries
/// and y. The caller adds its own arguments and builds it.
fn merge_fixup<T: DeviceScalar>(
    m: &DeviceMatrix<T>,
    r: &MergeRows,
    name: &'static str,
    geometry: (usize, usize),
    count: usize,
    carry: (&Buffer<u32>, &Buffer<T>),
) -> LaunchBuilder {
    let mut b = launch(m, name, geometry);
    b.arg(count as u32)
        .arg(r.use_list)
        .arg(r.base)
        .arg(&r.list)
        .arg(carry.0)
        .arg(carry.1)
        .arg(YBuf(&m.y));
    b
}

/// `n` carry slots of a merge kernel: a row each and its partial sum.
fn carries<T: DeviceScalar>(queue: &Queue, n: usize) -> Result<(Buffer<u32>, Buffer<T>)> {
    Ok((u32_scratch(queue, n)?, t_buffer::<T>(queue, n)?))
}

fn u32_scratch(queue: &Queue, len: usize) -> Result<Buffer<u32>> {
    Ok(Buffer::<u32>::builder()
        .queue(queue.clone())
        .flags(ocl::flags::MEM_READ_WRITE)
        .len(len.max(1))
        .build()?)
}

/// What a merge kernel's launches are made from: the queue, the matrix, the
/// kernel parameters and the rows on the device ([`merge_rows`]).
struct Merge<'a, T: DeviceScalar> {
    queue: &'a Queue,
    m: &'a DeviceMatrix<T>,
    p: &'a KernelParams,
    r: MergeRows,
}

impl<'a, T: DeviceScalar> Merge<'a, T> {
    fn new(
        queue: &'a Queue,
        m: &'a DeviceMatrix<T>,
        p: &'a KernelParams,
        rows: &RowSet,
    ) -> Result<Self> {
        Ok(Merge {
            queue,
            m,
            p,
            r: merge_rows(queue, m, rows)?,
        })
    }
}

fn merge_path_steps<T: DeviceScalar>(c: &Merge<'_, T>) -> Result<Vec<Launch>> {
    let (queue, m, p, r) = (c.queue, c.m, c.p, &c.r);
    let total = r.n as u64 + r.nnz;
    let nchunks = total.div_ceil(p.mp_items as u64) as usize;
    check_gws(nchunks, "merge_path")?;
    let (carry_row, carry_val) = carries::<T>(queue, nchunks)?;
    let geometry = (round_up(nchunks, p.wg_size), p.wg_size);
    let pass1 = merge_pass(m, r, "spmv_merge_path", geometry)
        .arg(nchunks as u32)
        .arg(&carry_row)
        .arg(&carry_val)
        .build()?;
    let carry = (&carry_row, &carry_val);
    let pass2 = merge_fixup(m, r, "spmv_merge_path_fixup", geometry, nchunks, carry).build()?;
    Ok(vec![pass1, pass2])
}

/// Merge items (row ends plus nonzeros) per work-item of `merge_one`: the
/// `MO_ITEMS` of `kernels/merge_one.cl`, whose tiles are `wg_size` times it.
pub const MERGE_ONE_ITEMS: usize = 8;

/// The start of every tile of `tile` merge items on the merge path of rows
/// whose prefix sums of lengths are `lp` (`lp[0] = 0`, `n + 1` entries), and
/// the path's end: two u32 per boundary, (rows ended before it, nonzeros
/// before it).
pub(crate) fn merge_tile_coords(lp: &[u32], tile: usize) -> Vec<u32> {
    let n = lp.len() - 1;
    let nnz = lp[n] as u64;
    let total = n as u64 + nnz;
    let tiles = total.div_ceil(tile as u64).max(1);
    let mut out = Vec::with_capacity(2 * (tiles as usize + 1));
    for t in 0..=tiles {
        let d = (t * tile as u64).min(total);
        // The most rows i with every one of them ended before diagonal d:
        // row i - 1's end lp[i] is at most the nonzeros d - i before it.
        let (mut lo, mut hi) = (d.saturating_sub(nnz) as usize, (d as usize).min(n));
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if (lp[mid + 1] as u64) < d - mid as u64 {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        out.push(lo as u32);
        out.push((d - lo as u64) as u32);
    }
    out
}

/// `merge_one`: one launch, a work-group per tile of the merge path, the
/// tiles' start coordinates computed here; rows that cross tiles are
/// finished by the last work-group to arrive (`kernels/merge_one.cl`).
fn merge_one_launch<T: DeviceScalar>(c: &Merge<'_, T>) -> Result<Launch> {
    let (queue, m, wg, r) = (c.queue, c.m, c.p.wg_size, &c.r);
    let tile = wg * MERGE_ONE_ITEMS;
    let lp: &[u32] = if r.lp_host.is_empty() {
        &m.row_ptr_host
    } else {
        &r.lp_host
    };
    let coords = merge_tile_coords(lp, tile);
    let ntiles = coords.len() / 2 - 1;
    check_gws(ntiles.saturating_mul(wg), "merge_one")?;
    let coords = read_only_copy(queue, &coords)?;
    let (carry_row, carry_val) = carries::<T>(queue, ntiles)?;
    // The arrival counter starts at 0 and the last work-group of every call
    // sets it back to 0.
    let arrived = Buffer::<u32>::builder()
        .queue(queue.clone())
        .flags(ocl::flags::MEM_READ_WRITE | ocl::flags::MEM_COPY_HOST_PTR)
        .len(1)
        .copy_host_slice(&[0u32])
        .build()?;
    merge_pass(m, r, "spmv_merge_one", (ntiles * wg, wg))
        .arg(ntiles as u32)
        .arg(&coords)
        .arg(&carry_row)
        .arg(&carry_val)
        .arg(&arrived)
        .build()
}

/// Carries per level of the merge-tile fix-up: `tiles` carries of pass 1, then
/// one per chunk of `tile` carries, until one chunk holds them all (no level
/// when there is a single tile: its carry is always empty). Each level divides
/// the count by `tile` (at least 2), so there are at most log_tile(tiles) levels.
pub(crate) fn merge_tile_levels(tiles: usize, tile: usize) -> Vec<usize> {
    assert!(
        tile >= 2,
        "KernelParams::with_overrides refuses merge tiles under 2 items"
    );
    let mut levels = Vec::new();
    let mut count = tiles;
    while count > 1 {
        levels.push(count);
        if count <= tile {
            break;
        }
        count = count.div_ceil(tile);
    }
    levels
}

fn merge_tile_steps<T: DeviceScalar>(c: &Merge<'_, T>) -> Result<Vec<Launch>> {
    let (queue, m, p, r) = (c.queue, c.m, c.p, &c.r);
    let tile = p.mt_wg * p.mt_items;
    let tiles = (r.n as u64 + r.nnz).div_ceil(tile as u64) as usize;
    check_gws(tiles.saturating_mul(p.mt_wg), "merge_tile")?;
    let (mut carry_row, mut carry_val) = carries::<T>(queue, tiles)?;
    let mut steps = vec![
        merge_pass(m, r, "spmv_merge_tile", (tiles * p.mt_wg, p.mt_wg))
            .arg(&carry_row)
            .arg(&carry_val)
            .build()?,
    ];
    for count in merge_tile_levels(tiles, tile) {
        let groups = count.div_ceil(tile);
        let emit = groups > 1;
        let (out_row, out_val) = carries::<T>(queue, if emit { groups } else { 1 })?;
        let geometry = (groups * p.mt_wg, p.mt_wg);
        let carry = (&carry_row, &carry_val);
        steps.push(
            merge_fixup(m, r, "spmv_merge_tile_fixup", geometry, count, carry)
                .arg(u32::from(emit))
                .arg(&out_row)
                .arg(&out_val)
                .build()?,
        );
        carry_row = out_row;
        carry_val = out_val;
    }
    Ok(steps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::Precision;

    /// Tile starts on the merge path against a walk of the path item by
    /// item, with empty rows, one long row and a path that is a whole number
    /// of tiles.
    #[test]
    fn merge_tile_coords_match_a_walk_of_the_path() {
        for lens in [
            vec![],
            vec![0, 0, 0],
            vec![3, 0, 0, 5, 1, 0, 40, 2, 0],
            vec![100],
            vec![1; 16],
        ] {
            let mut lp = vec![0u32];
            for l in &lens {
                lp.push(lp.last().unwrap() + l);
            }
            // The path: at each step a row end if the row's nonzeros are done.
            let mut at = vec![(0u32, 0u32)];
            let (mut i, mut k) = (0usize, 0u32);
            while i < lens.len() {
                if k == lp[i + 1] {
                    i += 1;
                } else {
                    k += 1;
                }
                at.push((i as u32, k));
            }
            for tile in [1, 2, 3, 7, 16, 1000] {
                let c = merge_tile_coords(&lp, tile);
                let total = at.len() - 1;
                let tiles = total.div_ceil(tile).max(1);
                assert_eq!(c.len(), 2 * (tiles + 1), "{lens:?} tile {tile}");
                for t in 0..=tiles {
                    let d = (t * tile).min(total);
                    assert_eq!(
                        (c[2 * t], c[2 * t + 1]),
                        at[d],
                        "{lens:?} tile {tile} t {t}"
                    );
                }
            }
        }
    }

    #[test]
    fn row_sets_and_runs() {
        assert_eq!(
            RowSet::from_sorted(vec![3, 4, 5]),
            RowSet::Range { base: 3, n: 3 }
        );
        assert_eq!(RowSet::from_sorted(vec![]), RowSet::Range { base: 0, n: 0 });
        let l = RowSet::from_sorted(vec![0, 1, 5, 6, 9]);
        assert_eq!(l.runs(), vec![(0, 2), (5, 7), (9, 10)]);
    }

    /// Power-law rows (lengths 1 to a few hundred) over 3000 rows: many bins at U = 10.
    fn skewed() -> sparse::Csr<f64> {
        sparse::gen::power_law(3000, 12.0, 7).unwrap()
    }

    #[test]
    fn plans_with_one_kernel_everywhere_have_the_single_bin_key() {
        let a = skewed();
        let single = Binning::new(a.row_ptr(), Scheme::Single);
        let binned = Binning::new(a.row_ptr(), Scheme::Granularity(10));
        assert!(binned.nonempty_bins().count() > 2);
        let key = |b: &Binning, p: &Plan, mode| launch_key(b, p, mode).unwrap();
        for k in KernelId::all() {
            let whole = key(&single, &Plan::single(k), LaunchMode::Grouped);
            let uniform = Plan::uniform(&binned, k);
            assert_eq!(key(&binned, &uniform, LaunchMode::Grouped), whole, "{k}");
            // One launch per bin is other work: several launches over row lists.
            assert_ne!(key(&binned, &uniform, LaunchMode::PerBin), whole, "{k}");
        }
        let serial = key(
            &single,
            &Plan::single(KernelId::Serial),
            LaunchMode::Grouped,
        );
        let vector = key(
            &single,
            &Plan::single(KernelId::Vector),
            LaunchMode::Grouped,
        );
        assert_ne!(serial, vector);
        let mut mixed = Plan::uniform(&binned, KernelId::Serial);
        mixed.kernels[0].1 = KernelId::Vector;
        assert_ne!(key(&binned, &mixed, LaunchMode::Grouped), serial);
        assert!(launch_key(&single, &mixed, LaunchMode::Grouped).is_err());
    }

    /// What the engine enqueues for a one-kernel plan binned at U = 10 is what
    /// it enqueues for that kernel over the single bin: the same entry points,
    /// geometry and matrix buffers, no row list or extra pass.
    #[test]
    fn a_uniform_binned_plan_prepares_the_launches_of_the_plain_kernel() {
        let Some(e) = crate::launch::tests::engine() else {
            return;
        };
        let a = skewed();
        let m = e.upload(&a).unwrap();
        let binned = Binning::new(a.row_ptr(), Scheme::Granularity(10));
        let matrix_mems = [
            m.row_ptr.as_core().as_ptr(),
            m.col_idx.as_core().as_ptr(),
            m.vals.as_core().as_ptr(),
            m.x.as_core().as_ptr(),
            m.y.as_core().as_ptr(),
            m.dummy.as_core().as_ptr(),
        ];
        // Each argument: which of the matrix's buffers, or None for one the plan made.
        let shapes = |pp: &PreparedPlan<f64>| {
            let steps = pp.steps.lock().unwrap();
            steps
                .iter()
                .map(|l| {
                    let (name, gws, lws, mems) = l.shape();
                    let args: Vec<Option<usize>> = mems
                        .iter()
                        .map(|mem| matrix_mems.iter().position(|p| *p == mem.as_ptr()))
                        .collect();
                    (name, gws, lws, args)
                })
                .collect::<Vec<_>>()
        };
        for k in KernelId::all() {
            let plain = e.prepare_kernel(&m, k).unwrap();
            let uniform = Plan::uniform(&binned, k);
            let grouped = e
                .prepare_binned(&m, &binned, &uniform, LaunchMode::Grouped)
                .unwrap();
            assert_eq!(shapes(&grouped), shapes(&plain), "{k}");
            let per_bin = e
                .prepare_binned(&m, &binned, &uniform, LaunchMode::PerBin)
                .unwrap();
            assert_ne!(shapes(&per_bin), shapes(&plain), "{k}");
        }
    }

    #[test]
    fn merge_tile_fix_up_levels_shrink_by_the_tile() {
        assert!(merge_tile_levels(1, 1024).is_empty());
        assert_eq!(merge_tile_levels(2, 1024), vec![2]);
        assert_eq!(merge_tile_levels(1024, 1024), vec![1024]);
        assert_eq!(merge_tile_levels(1025, 1024), vec![1025, 2]);
        assert_eq!(merge_tile_levels(5001, 12), vec![5001, 417, 35, 3]);
        assert_eq!(merge_tile_levels(7, 2), vec![7, 4, 2]);
    }

    #[test]
    fn row_blocks_cover_every_row_once() {
        let mut p = KernelParams::defaults(Precision::F32);
        p.nnz_per_wg = 8;
        p.nnz_multiplier = 2;
        // Row lengths: 3, 3, 3, 0, 9 (vector), 40 (split into 16+16+8), 1.
        let lens = [3u32, 3, 3, 0, 9, 40, 1];
        let mut rp = vec![0u32];
        for l in lens {
            rp.push(rp.last().unwrap() + l);
        }
        let rb = RowBlocks::build(&rp, &[(0, 7)], &p);
        let blocks: Vec<[u32; 4]> = rb
            .blocks
            .chunks(4)
            .map(|c| [c[0], c[1], c[2], c[3]])
            .collect();
        assert_eq!(
            blocks,
            vec![
                [0, 2, 0, 6],
                [2, 4, 6, 9],
                [4, 5, 9, 18],
                [5, 6, 18, 34],
                [5, 6, 34, 50],
                [5, 6, 50, 58],
                [6, 7, 58, 59]
            ]
        );
        assert_eq!(rb.slots, vec![NONE, NONE, NONE, 0, 1, 2, NONE]);
        assert_eq!(rb.long_rows, vec![5]);
        assert_eq!(rb.long_ptr, vec![0, 3]);
    }
}
