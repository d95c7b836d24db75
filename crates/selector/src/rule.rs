//! The hand-written rule baseline the trees must beat: one kernel for the whole
//! matrix (the single-bin scheme), chosen by thresholds on the row lengths.
//!
//! The idea is what the common libraries do without a model:
//! * Ginkgo's "classical" CSR SpMV sizes the group of threads working on one row
//!   (its subwarp) from the average number of nonzeros per row;
//! * clSPARSE runs CSR-Adaptive, which handles irregular row lengths by grouping
//!   short rows into blocks and giving long rows a whole work-group.
//!
//! Our rule, tested in this order (each test reads "`value < threshold`"):
//! 1. rows are skewed — `nnz_row_max_over_mean >= 16` and `nnz_row_max >= 1024` —
//!    -> `csr_adaptive` (clSPARSE's answer to irregular rows);
//! 2. `nnz_row_mean < 4` -> `serial` (one work-item per short row);
//! 3. `nnz_row_mean < 256` -> `subvectorX` with X the smallest power of two
//!    `>= nnz_row_mean`, at most 128 (about one nonzero per work-item, as Ginkgo
//!    sizes its subwarps, with our wider subvectors);
//! 4. otherwise `vector` (a work-group of 256 per row).
//!
//! Those are the thresholds of a CPU device ([`RuleClass::Cpu`], also what
//! [`rule_plan`] uses). A GPU ([`RuleClass::Gpu`]) hides latency with many threads
//! per row, so its rule keeps `serial` for rows of about one nonzero only, calls
//! rows skewed earlier (a long row stalls a whole warp), and gives rows of 128 and
//! more nonzeros a work-group (`vector`), as CSR-Vector does on GPUs.

use crate::explain::{BinDecision, Explanation, Prediction, SchemeDecision, Step, Went};
use sparse::{Binning, Features, KernelId, Plan, Scheme};

/// Rows are skewed when the longest is at least this many times the mean...
pub const RULE_SKEW_MAX_OVER_MEAN: f64 = 16.0;
/// ...and at least this long.
pub const RULE_SKEW_MIN_MAX_ROW: f64 = 1024.0;
/// Below this mean row length: `serial`.
pub const RULE_SERIAL_BELOW: f64 = 4.0;
/// From this mean row length on: `vector`.
pub const RULE_VECTOR_FROM: f64 = 256.0;

/// The kind of device a rule is tuned for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RuleClass {
    /// A CPU (PoCL and the like): the thresholds of the module docs.
    #[default]
    Cpu,
    /// A GPU (or another accelerator with wide SIMT groups).
    Gpu,
}

impl RuleClass {
    /// The class of an OpenCL device kind (`gpu`, `accelerator`, `cpu`, ...).
    pub fn from_kind(kind: &str) -> RuleClass {
        match kind {
            "gpu" | "accelerator" => RuleClass::Gpu,
            _ => RuleClass::Cpu,
        }
    }

    /// A guess from a device's name and vendor, for records that lost the kind
    /// (a results database): GPU vendors and names say so, anything else is a CPU.
    pub fn guess(name: &str, vendor: &str) -> RuleClass {
        let t = format!("{name} {vendor}").to_ascii_lowercase();
        let gpu = [
            "nvidia", "geforce", "tesla", "radeon", "gfx", " gpu", "graphics", "h100", "h200",
            "a100",
        ];
        if gpu.iter().any(|g| t.contains(g)) {
            RuleClass::Gpu
        } else {
            RuleClass::Cpu
        }
    }
}

/// The rule's thresholds for one class of device.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RuleThresholds {
    /// Skewed when max / mean row length is at least this...
    pub skew_max_over_mean: f64,
    /// ...and the longest row at least this long.
    pub skew_min_max_row: f64,
    /// Below this mean row length: `serial`.
    pub serial_below: f64,
    /// From this mean row length on: `vector`.
    pub vector_from: f64,
}

impl RuleThresholds {
    /// The thresholds of a device class.
    pub fn for_class(class: RuleClass) -> RuleThresholds {
        match class {
            RuleClass::Cpu => RuleThresholds {
                skew_max_over_mean: RULE_SKEW_MAX_OVER_MEAN,
                skew_min_max_row: RULE_SKEW_MIN_MAX_ROW,
                serial_below: RULE_SERIAL_BELOW,
                vector_from: RULE_VECTOR_FROM,
            },
            RuleClass::Gpu => RuleThresholds {
                skew_max_over_mean: 8.0,
                skew_min_max_row: 512.0,
                serial_below: 2.0,
                vector_from: 128.0,
            },
        }
    }
}

fn test(steps: &mut Vec<Step>, f: &Features, feature: &str, threshold: f64) -> bool {
    let value = crate::vector::feature(f, feature);
    let left = value < threshold;
    steps.push(Step {
        feature: feature.to_string(),
        threshold,
        value,
        went: if left { Went::Left } else { Went::Right },
    });
    left
}

/// The rule's kernel for a matrix on a CPU, and the tests that led to it.
pub fn rule_kernel(f: &Features) -> (KernelId, Vec<Step>) {
    rule_kernel_for(RuleClass::Cpu, f)
}

/// The rule's kernel for a matrix on a device class, and the tests that led to it.
pub fn rule_kernel_for(class: RuleClass, f: &Features) -> (KernelId, Vec<Step>) {
    let th = RuleThresholds::for_class(class);
    let mut steps = Vec::new();
    if !test(
        &mut steps,
        f,
        "nnz_row_max_over_mean",
        th.skew_max_over_mean,
    ) && !test(&mut steps, f, "nnz_row_max", th.skew_min_max_row)
    {
        return (KernelId::CsrAdaptive, steps);
    }
    if test(&mut steps, f, "nnz_row_mean", th.serial_below) {
        return (KernelId::Serial, steps);
    }
    let mean = crate::vector::feature(f, "nnz_row_mean");
    if test(&mut steps, f, "nnz_row_mean", th.vector_from) {
        let width = KernelId::SUBVECTOR_WIDTHS
            .iter()
            .copied()
            .find(|&x| x as f64 >= mean)
            .unwrap_or(128);
        return (KernelId::Subvector(width), steps);
    }
    (KernelId::Vector, steps)
}

/// The rule's plan on a CPU: the single-bin scheme with [`rule_kernel`] (no bins
/// for an empty matrix).
pub fn rule_plan(f: &Features, row_ptr: &[u32]) -> Plan {
    rule_prediction(f, row_ptr, false).plan
}

/// The rule's plan on a device class.
pub fn rule_plan_for(class: RuleClass, f: &Features, row_ptr: &[u32]) -> Plan {
    rule_prediction_for(class, f, row_ptr, false).plan
}

/// The rule's plan on a CPU with its binning, and its tests as an explanation when `explain`.
pub fn rule_prediction(f: &Features, row_ptr: &[u32], explain: bool) -> Prediction {
    rule_prediction_for(RuleClass::Cpu, f, row_ptr, explain)
}

/// [`rule_prediction`] with the thresholds of a device class.
pub fn rule_prediction_for(
    class: RuleClass,
    f: &Features,
    row_ptr: &[u32],
    explain: bool,
) -> Prediction {
    let binning = Binning::new(row_ptr, Scheme::Single);
    let (kernel, steps) = rule_kernel_for(class, f);
    let plan = Plan::uniform(&binning, kernel);
    let explanation = explain.then(|| Explanation {
        selector: "rule".into(),
        stage1: SchemeDecision {
            path: Vec::new(),
            scheme: Scheme::Single,
        },
        stage2: binning
            .nonempty_bins()
            .map(|b| BinDecision {
                bin: b,
                rows: binning.row_count(b),
                nnz: binning.bin_nnz[b],
                path: steps.clone(),
                kernel,
            })
            .collect(),
        collapsed_from: None,
    });
    Prediction {
        plan,
        binning,
        explanation,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sparse::Csr;

    fn matrix(lens: &[u32]) -> Csr<f64> {
        let ncols = lens.iter().copied().max().unwrap_or(0).max(1);
        let mut rp = vec![0u32];
        let mut ci = Vec::new();
        for &l in lens {
            ci.extend(0..l);
            rp.push(ci.len() as u32);
        }
        let n = ci.len();
        Csr::try_new(lens.len(), ncols as usize, rp, ci, vec![1.0; n]).unwrap()
    }

    fn kernel_for(lens: &[u32]) -> KernelId {
        let a = matrix(lens);
        let p = rule_plan(&Features::of(&a), a.row_ptr());
        assert_eq!(p.scheme, Scheme::Single);
        p.check(&Binning::new(a.row_ptr(), Scheme::Single)).unwrap();
        p.kernels[0].1
    }

    #[test]
    fn thresholds() {
        assert_eq!(kernel_for(&[1; 100]), KernelId::Serial);
        assert_eq!(kernel_for(&[3; 100]), KernelId::Serial);
        assert_eq!(kernel_for(&[4; 100]), KernelId::Subvector(4));
        assert_eq!(kernel_for(&[5; 100]), KernelId::Subvector(8));
        assert_eq!(kernel_for(&[32; 100]), KernelId::Subvector(32));
        assert_eq!(kernel_for(&[200; 50]), KernelId::Subvector(128));
        assert_eq!(kernel_for(&[300; 10]), KernelId::Vector);
        // One row of 5000 among 999 rows of 2: skewed.
        let mut lens = vec![2u32; 999];
        lens.push(5000);
        assert_eq!(kernel_for(&lens), KernelId::CsrAdaptive);
        // Skewed but short: not worth CSR-Adaptive.
        let mut lens = vec![1u32; 999];
        lens.push(100);
        assert_eq!(kernel_for(&lens), KernelId::Serial);
    }

    #[test]
    fn gpu_thresholds_differ_where_a_gpu_differs() {
        let gpu = |lens: &[u32]| {
            let a = matrix(lens);
            rule_plan_for(RuleClass::Gpu, &Features::of(&a), a.row_ptr()).kernels[0].1
        };
        assert_eq!(gpu(&[1; 100]), KernelId::Serial);
        assert_eq!(gpu(&[3; 100]), KernelId::Subvector(4));
        assert_eq!(gpu(&[200; 50]), KernelId::Vector);
        let mut lens = vec![8u32; 999];
        lens.push(600);
        assert_eq!(gpu(&lens), KernelId::CsrAdaptive);
        assert_eq!(kernel_for(&lens), KernelId::Subvector(16));
        assert_eq!(RuleClass::from_kind("gpu"), RuleClass::Gpu);
        assert_eq!(RuleClass::from_kind("cpu"), RuleClass::Cpu);
        assert_eq!(
            RuleClass::guess("NVIDIA H100 80GB HBM3", "NVIDIA Corporation"),
            RuleClass::Gpu
        );
        assert_eq!(
            RuleClass::guess("pthread-skylake-avx512-AMD EPYC", "AuthenticAMD"),
            RuleClass::Cpu
        );
    }

    #[test]
    fn explained_and_empty() {
        let a = matrix(&[8; 10]);
        let p = rule_prediction(&Features::of(&a), a.row_ptr(), true);
        let e = p.explanation.unwrap();
        assert_eq!(e.selector, "rule");
        assert_eq!(e.stage2.len(), 1);
        let path: Vec<_> = e.stage2[0]
            .path
            .iter()
            .map(|s| (s.feature.as_str(), s.went))
            .collect();
        assert_eq!(
            path,
            vec![
                ("nnz_row_max_over_mean", Went::Left),
                ("nnz_row_mean", Went::Right),
                ("nnz_row_mean", Went::Left)
            ]
        );
        let z = Csr::<f64>::zeros(0, 0).unwrap();
        let p = rule_prediction(&Features::of(&z), z.row_ptr(), true);
        assert!(p.plan.kernels.is_empty());
        assert!(p.explanation.unwrap().stage2.is_empty());
    }
}
