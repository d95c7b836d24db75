//! The train/test split: by matrix, 75/25, stratified by size and kind, seeded.

use rand::seq::SliceRandom;
use rand::SeedableRng;
use std::collections::BTreeMap;

/// Which side of the split a matrix is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Side {
    /// Used for fitting.
    Train,
    /// Held out for evaluation.
    Test,
}

/// Size bucket of a matrix: decades of nonzeros.
pub fn size_bucket(nnz: usize) -> u32 {
    (nnz.max(1) as f64).log10().floor() as u32
}

/// The coarse kind of a matrix for stratification: its source family
/// (`suitesparse`, `standin`, `generator`) and the collection's problem kind
/// folded into graph-like / discretisation-like / other.
pub fn kind_class(source: &str, kind: &str) -> String {
    let src = source.split(':').next().unwrap_or(source);
    let k = kind.to_ascii_lowercase();
    let class = if k.contains("graph") || k.contains("network") {
        "graph"
    } else if k.contains("2d/3d")
        || k.contains("structural")
        || k.contains("fluid")
        || k.contains("electromagnetic")
        || k.contains("thermal")
        || k.contains("acoustic")
        || k.contains("stencil")
    {
        "discretisation"
    } else {
        "other"
    };
    format!("{src}/{class}")
}

/// Splits items into train and test: within each stratum (kind class, size
/// bucket) the items are shuffled with `seed` and a quarter (rounded, at least one
/// when the stratum has four or more) goes to test. Returns one side per item.
pub fn split(strata: &[(String, u32)], test_fraction: f64, seed: u64) -> Vec<Side> {
    let mut groups: BTreeMap<&(String, u32), Vec<usize>> = BTreeMap::new();
    for (i, s) in strata.iter().enumerate() {
        groups.entry(s).or_default().push(i);
    }
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut sides = vec![Side::Train; strata.len()];
    // Leftover fractions carried across strata so small strata still add up to 25%.
    let mut carry = 0.0;
    for (_, mut idx) in groups {
        idx.shuffle(&mut rng);
        let want = idx.len() as f64 * test_fraction + carry;
        let n = want.floor() as usize;
        carry = want - n as f64;
        for &i in idx.iter().take(n.min(idx.len())) {
            sides[i] = Side::Test;
        }
    }
    sides
}

/// The validation quarter of the training matrices (of `nnz` nonzeros each),
/// stratified by size: the matrices every fitting choice is judged on, so that
/// the held-out split is never used to choose. One split for the trees and the
/// performance model alike.
pub fn validation_sides(nnz: &[usize], seed: u64) -> Vec<Side> {
    let strata: Vec<(String, u32)> = nnz
        .iter()
        .map(|&n| (String::from("all"), size_bucket(n)))
        .collect();
    split(&strata, 0.25, seed ^ 0xfeed)
}

/// `items` parted into (fitting, validation) by [`validation_sides`] of their
/// nonzero counts (`nnz` of each), both in the order given.
pub fn validation_part<'a, T>(
    items: &[&'a T],
    nnz: impl Fn(&T) -> usize,
    seed: u64,
) -> (Vec<&'a T>, Vec<&'a T>) {
    let counts: Vec<usize> = items.iter().map(|&t| nnz(t)).collect();
    let (mut fit, mut valid) = (Vec::new(), Vec::new());
    for (&t, side) in items.iter().zip(validation_sides(&counts, seed)) {
        match side {
            Side::Train => fit.push(t),
            Side::Test => valid.push(t),
        }
    }
    (fit, valid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quarter_held_out_in_every_large_stratum_and_seeded() {
        let strata: Vec<(String, u32)> = (0..200)
            .map(|i| {
                (
                    if i % 2 == 0 { "a" } else { "b" }.to_string(),
                    (i % 5) as u32,
                )
            })
            .collect();
        let s = split(&strata, 0.25, 7);
        let test = s.iter().filter(|&&x| x == Side::Test).count();
        assert_eq!(test, 50);
        for key in [("a", 0u32), ("b", 3)] {
            let n = strata
                .iter()
                .zip(&s)
                .filter(|((k, b), side)| k == key.0 && *b == key.1 && **side == Side::Test)
                .count();
            assert_eq!(n, 5, "stratum {key:?}");
        }
        assert_eq!(s, split(&strata, 0.25, 7));
        assert_ne!(s, split(&strata, 0.25, 8));
    }

    #[test]
    fn kinds_fold() {
        assert_eq!(
            kind_class("suitesparse", "undirected graph"),
            "suitesparse/graph"
        );
        assert_eq!(
            kind_class("standin:HB/x", "2D/3D problem"),
            "standin/discretisation"
        );
        assert_eq!(
            kind_class("generator:lp_like", "generator:lp_like"),
            "generator/other"
        );
        assert_eq!(size_bucket(999), 2);
        assert_eq!(size_bucket(1000), 3);
    }
}
