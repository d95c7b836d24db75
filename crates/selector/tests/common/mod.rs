//! Shared helpers of the selector's integration tests: matrices built from row
//! lengths, and a made-up cost model that gives every kernel and scheme a time,
//! so fitting can be tested on synthetic labels without a device.

#![allow(dead_code)]

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use selector::{Stage1Sample, Stage2Sample};
use sparse::{Binning, Csr, Features, KernelId, Scheme};

/// A matrix whose row r has `lens[r]` entries in columns `0..lens[r]` (spread a bit).
pub fn csr_from_lengths(lens: &[u32]) -> Csr<f64> {
    let ncols = lens.iter().copied().max().unwrap_or(0).max(1) as usize * 2;
    let mut rp = vec![0u32];
    let mut ci = Vec::new();
    for (r, &l) in lens.iter().enumerate() {
        let start = (r * 7) % (ncols - l as usize + 1);
        ci.extend((0..l).map(|c| (start + c as usize) as u32));
        rp.push(ci.len() as u32);
    }
    let n = ci.len();
    Csr::try_new(lens.len(), ncols, rp, ci, vec![1.0; n]).unwrap()
}

/// A few families of row-length patterns, seeded.
pub fn synthetic_matrices(seed: u64, count: usize) -> Vec<(String, Csr<f64>)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..count)
        .map(|i| {
            let m = rng.gen_range(200..3000);
            let lens: Vec<u32> = match i % 5 {
                0 => {
                    let l = rng.gen_range(1..6);
                    (0..m).map(|_| rng.gen_range(l..l + 3)).collect()
                }
                1 => {
                    let l = rng.gen_range(8..200);
                    (0..m).map(|_| rng.gen_range(l / 2..l + 1)).collect()
                }
                2 => (0..m)
                    .map(|r| {
                        if r % 50 == 0 {
                            rng.gen_range(300..2000)
                        } else {
                            rng.gen_range(1..4)
                        }
                    })
                    .collect(),
                3 => (0..m)
                    .map(|r| {
                        if (r / 400) % 2 == 0 {
                            rng.gen_range(1..3)
                        } else {
                            rng.gen_range(30..90)
                        }
                    })
                    .collect(),
                _ => (0..m)
                    .map(|_| {
                        let u: f64 = rng.gen_range(0.0..1.0);
                        (2.0 / (1.0 - u).powf(0.7)).min(3000.0) as u32
                    })
                    .collect(),
            };
            (format!("synthetic_{i}"), csr_from_lengths(&lens))
        })
        .collect()
}

/// The candidate kernels of the cost model.
pub fn kernels() -> Vec<KernelId> {
    KernelId::all()
}

/// A made-up time (ms) of `kernel` on `rows` rows holding `nnz` nonzeros, shaped like
/// a GPU: a launch cost, then waves of 2048 lanes; a row gets X lanes (1 for serial,
/// 256 for vector) and takes `ceil(len / X) + log2(X)` steps.
pub fn kernel_time(kernel: KernelId, rows: usize, nnz: u64) -> f64 {
    if rows == 0 {
        return 0.005;
    }
    let len = nnz as f64 / rows as f64;
    let lanes = |x: f64| {
        let waves = ((rows as f64 * x) / 2048.0).ceil().max(1.0);
        0.005 + waves * ((len / x).ceil().max(1.0) + x.log2()) * 1e-4
    };
    match kernel {
        KernelId::Serial => lanes(1.0) * (1.0 + len / 64.0),
        KernelId::Subvector(x) => lanes(x as f64),
        KernelId::Vector => lanes(256.0) * 1.1,
        KernelId::CsrAdaptive => 0.008 + (nnz as f64 * 0.9 + rows as f64 * 2.0) * 1e-6 * 4.0,
        KernelId::MergePath => 0.012 + (nnz as f64 + rows as f64) * 1e-6 * 4.0,
        // Never the fastest here, so the fits these tests check are unchanged.
        KernelId::MergeTile | KernelId::MergeOne => 0.02 + (nnz as f64 + rows as f64) * 1e-6 * 5.0,
    }
}

/// Labels of one matrix under the cost model: its stage-1 sample and the stage-2
/// samples of every scheme's non-empty bins.
pub fn label(name: &str, a: &Csr<f64>) -> (Stage1Sample, Vec<Stage2Sample>) {
    let f = Features::of(a);
    let mut scheme_times = Vec::new();
    let mut s2 = Vec::new();
    for scheme in Scheme::all() {
        let b = Binning::new(a.row_ptr(), scheme);
        let mut total = 0.0;
        for bin in b.nonempty_bins() {
            let times: Vec<(KernelId, f64)> = kernels()
                .into_iter()
                .map(|k| (k, kernel_time(k, b.row_count(bin), b.bin_nnz[bin])))
                .collect();
            total += times.iter().map(|t| t.1).fold(f64::INFINITY, f64::min);
            s2.push(Stage2Sample::new(name, &f, &b, bin, times));
        }
        scheme_times.push((scheme, total.max(1e-6)));
    }
    (Stage1Sample::new(name, &f, scheme_times), s2)
}

/// Labels of many matrices.
pub fn label_all(ms: &[(String, Csr<f64>)]) -> (Vec<Stage1Sample>, Vec<Stage2Sample>) {
    let mut s1 = Vec::new();
    let mut s2 = Vec::new();
    for (name, a) in ms {
        let (a1, a2) = label(name, a);
        s1.push(a1);
        s2.extend(a2);
    }
    (s1, s2)
}

/// Cost-model time of a plan on a matrix.
pub fn plan_time(plan: &sparse::Plan, a: &Csr<f64>) -> f64 {
    let b = Binning::new(a.row_ptr(), plan.scheme);
    plan.check(&b).unwrap();
    b.nonempty_bins()
        .map(|bin| {
            kernel_time(
                plan.kernel_of(bin).unwrap(),
                b.row_count(bin),
                b.bin_nnz[bin],
            )
        })
        .sum()
}

/// Cost-model time of the oracle plan of a matrix.
pub fn oracle_time(a: &Csr<f64>) -> f64 {
    Scheme::all()
        .into_iter()
        .map(|s| {
            let b = Binning::new(a.row_ptr(), s);
            b.nonempty_bins()
                .map(|bin| {
                    kernels()
                        .into_iter()
                        .map(|k| kernel_time(k, b.row_count(bin), b.bin_nnz[bin]))
                        .fold(f64::INFINITY, f64::min)
                })
                .sum::<f64>()
        })
        .fold(f64::INFINITY, f64::min)
}
