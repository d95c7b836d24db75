//! Host cost of building a matrix (`Csr::try_new` on arrays already sorted, as
//! the generators, the binary CSR reader and most Matrix Market files give
//! them) and of its feature pass, per generator family and size: the pair that
//! shows whether analysis work was saved or only moved into the constructor.
//!
//! ```text
//! cargo run --release -p sparse --example construct_cost -- [REPS] [SIZES] [FAMILIES]
//! ```
//! `SIZES` and `FAMILIES` are comma-separated (`1000000,4000000`; family
//! names or `corpus`). Prints CSV: family, nnz, the least of `REPS` timings
//! of each step (ms), interleaved.

use sparse::gen::Family;
use sparse::{Csr, Features};
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let reps: usize = args.get(1).map_or(15, |s| s.parse().expect("REPS"));
    let sizes: Vec<usize> = args
        .get(2)
        .map_or("1000000,4000000,16000000", |s| s.as_str())
        .split(',')
        .map(|s| s.parse().expect("a size in nonzeros"))
        .collect();
    let families: Vec<Family> = match args.get(3).map_or("corpus", |s| s.as_str()) {
        "corpus" => Family::CORPUS.to_vec(),
        list => list
            .split(',')
            .map(|s| s.parse().expect("a family name"))
            .collect(),
    };
    println!("family,nnz,try_new_ms,features_ms");
    for &n in &sizes {
        for &f in &families {
            let a = f.generate(n, 42).expect("generate");
            let (try_new_ms, features_ms) = timings(&a, reps);
            println!("{},{},{try_new_ms:.4},{features_ms:.4}", f.name(), a.nnz());
        }
    }
}

/// The least of `reps` timings of `try_new` on copies of `a`'s arrays (the
/// copy is made outside the timing) and of `Features::of(a)`, interleaved.
fn timings(a: &Csr<f64>, reps: usize) -> (f64, f64) {
    let (mut build, mut feat) = (f64::MAX, f64::MAX);
    for _ in 0..reps {
        let parts = a.clone().into_parts();
        let t = Instant::now();
        let b = Csr::try_new(parts.0, parts.1, parts.2, parts.3, parts.4).expect("valid");
        build = build.min(t.elapsed().as_secs_f64() * 1e3);
        std::hint::black_box(&b);
        drop(b);
        let t = Instant::now();
        std::hint::black_box(Features::of(a));
        feat = feat.min(t.elapsed().as_secs_f64() * 1e3);
    }
    (build, feat)
}
