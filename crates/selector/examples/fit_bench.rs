//! Prints how long fitting takes for growing numbers of synthetic stage-2 samples
//! (labels a noisy function of U and the bin's row length), so a trainer can size
//! `max_stage2_samples`. Run with `cargo run --release -p selector --example fit_bench`.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use selector::*;
use sparse::{KernelId, Scheme};
use std::time::Instant;

fn main() {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let s1 = stage1_samples(&mut rng);
    for n in [10_000usize, 50_000, 200_000] {
        let s2 = stage2_samples(&mut rng, n);
        for w in [Weighting::Plain, Weighting::TieRelabel] {
            let p = TrainParams::new()
                .weighting(w)
                .max_stage2_samples(None)
                .check()
                .unwrap();
            let t = Instant::now();
            let m = fit(&s1, &s2, &p).unwrap();
            let secs = t.elapsed().as_secs_f64();
            let e = evaluate_stage2(&m, &s2).unwrap();
            println!(
                "stage-2 samples {n:>7} {w:?}: fit {secs:6.2} s, leaves {:?}, train accuracy {:.3}, geomean best/chosen {:.4}",
                m.leaves(),
                e.accuracy,
                e.geomean_ratio
            );
        }
    }
}

/// 500 stage-1 samples of random features, each with one scheme clearly best.
fn stage1_samples(rng: &mut ChaCha8Rng) -> Vec<Stage1Sample> {
    (0..500)
        .map(|i| {
            let x: Vec<f64> = (0..STAGE1_FEATURES.len())
                .map(|_| rng.gen_range(0.0..1e4))
                .collect();
            let best = Scheme::all()[(x[3] as usize) % 17];
            Stage1Sample {
                matrix: format!("m{i}"),
                features: x,
                scheme_times: Scheme::all()
                    .into_iter()
                    .map(|s| {
                        (
                            s,
                            if s == best {
                                1.0
                            } else {
                                1.0 + rng.gen_range(0.0..0.5)
                            },
                        )
                    })
                    .collect(),
                scheme_ci: Vec::new(),
            }
        })
        .collect()
}

/// `n` stage-2 samples whose best kernel follows U and the bin's mean row
/// length, with a little noise on every time.
fn stage2_samples(rng: &mut ChaCha8Rng, n: usize) -> Vec<Stage2Sample> {
    let position = |name: &str| STAGE2_FEATURES.iter().position(|f| *f == name).unwrap();
    let (iu, im) = (position("scheme_u"), position("bin_mean_row_len"));
    let kernels = KernelId::all();
    (0..n)
        .map(|i| {
            let mut x: Vec<f64> = (0..STAGE2_LEN).map(|_| rng.gen_range(0.0..1e4)).collect();
            x[iu] = [0.0, 10.0, 100.0, 1000.0][i % 4];
            x[im] = rng.gen_range(0.0..300.0f64).floor();
            let ideal = ((x[im] + 1.0).log2() as usize + (i % 4)).min(kernels.len() - 1);
            let kernel_times = kernels
                .iter()
                .enumerate()
                .map(|(j, &k)| {
                    (
                        k,
                        1.0 + (j as f64 - ideal as f64).abs() * 0.1 + rng.gen_range(0.0..0.03),
                    )
                })
                .collect();
            Stage2Sample {
                matrix: format!("m{}", i % 500),
                x,
                kernel_times,
                kernel_ci: Vec::new(),
            }
        })
        .collect()
}
