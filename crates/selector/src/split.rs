//! The best split of one classification-tree node, searched exhaustively in f64
//! with a fixed order of work, so that two fits of the same samples give the same
//! tree bit for bit (linfa-trees 0.8.1 does not: see `fit.rs`).
//!
//! Every feature is tried in layout order; rows are sorted by (value, row index);
//! a cut is tried between every two distinct neighbouring values of the node's own
//! rows; class masses are sums in that order, impurities sums over class index.
//! Among splits whose weighted impurities differ by less than [`TIE_RELATIVE`] of
//! the node's impurity, the first found wins: the lowest feature, then the lowest cut.

use crate::Criterion;

/// Splits whose impurities are this close (relative to the node's) are equally
/// good: rounding of the same partition summed in two orders stays far below it.
pub(crate) const TIE_RELATIVE: f64 = 1e-9;

/// What one node's split search reads: transformed features, labels, weights.
pub(crate) struct SplitSearch<'a> {
    pub tx: &'a [Vec<f64>],
    pub labels: &'a [usize],
    pub weights: &'a [f32],
    pub n_classes: usize,
    pub criterion: Criterion,
    /// Each side must carry at least this weight.
    pub min_weight_leaf: f64,
    /// The node's impurity minus the split's weighted impurity must reach this.
    pub min_impurity_decrease: f64,
}

/// The split found: feature, cut (go left when `value < cut`) and impurity decrease.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Split {
    pub feature: usize,
    pub cut: f64,
    pub gain: f64,
}

/// Impurity of class masses `m` whose sum is `total` (> 0).
fn impurity(m: &[f64], total: f64, criterion: Criterion) -> f64 {
    match criterion {
        Criterion::Gini => 1.0 - m.iter().map(|&x| (x / total) * (x / total)).sum::<f64>(),
        Criterion::Entropy => m
            .iter()
            .filter(|&&x| x > 0.0)
            .map(|&x| -(x / total) * (x / total).log2())
            .sum(),
    }
}

impl SplitSearch<'_> {
    /// The best split of `rows`, or `None` when no cut keeps `min_weight_leaf` on
    /// each side and lowers the impurity by `min_impurity_decrease` (and by more than rounding).
    pub(crate) fn best(&self, rows: &[usize]) -> Option<Split> {
        let nf = self.tx.first().map_or(0, Vec::len);
        let mut parent = vec![0f64; self.n_classes];
        for &r in rows {
            parent[self.labels[r]] += self.weights[r] as f64;
        }
        let total: f64 = parent.iter().sum();
        if rows.len() < 2 || total <= 0.0 {
            return None;
        }
        let node = impurity(&parent, total, self.criterion);
        let tie = TIE_RELATIVE * node.max(f64::MIN_POSITIVE);
        let mut best: Option<(f64, usize, f64)> = None;
        let mut order = rows.to_vec();
        for f in 0..nf {
            order.sort_by(|&a, &b| self.tx[a][f].total_cmp(&self.tx[b][f]).then(a.cmp(&b)));
            if let Some((score, cut)) = self.best_on(&order, f, &parent, total) {
                if best.is_none_or(|(s, _, _)| score < s - tie) {
                    best = Some((score, f, cut));
                }
            }
        }
        let (score, feature, cut) = best?;
        let gain = node - score;
        (gain > tie && gain >= self.min_impurity_decrease).then_some(Split { feature, cut, gain })
    }

    /// The lowest weighted impurity of a cut on feature `f` over `order` (rows
    /// sorted by it), and that cut; the first of equally good cuts.
    fn best_on(&self, order: &[usize], f: usize, parent: &[f64], total: f64) -> Option<(f64, f64)> {
        let mut left = vec![0f64; self.n_classes];
        let mut right = parent.to_vec();
        let mut wl = 0f64;
        let mut best: Option<(f64, f64)> = None;
        let tie = TIE_RELATIVE * impurity(parent, total, self.criterion).max(f64::MIN_POSITIVE);
        for i in 0..order.len() - 1 {
            let r = order[i];
            let (c, w) = (self.labels[r], self.weights[r] as f64);
            left[c] += w;
            right[c] = parent[c] - left[c];
            wl += w;
            let (a, b) = (self.tx[r][f], self.tx[order[i + 1]][f]);
            // Equal values stay on one side; `total - wl` rather than a running sum,
            // so the right side's weight does not drift.
            let wr = total - wl;
            if a >= b || wl < self.min_weight_leaf || wr < self.min_weight_leaf {
                continue;
            }
            if wl <= 0.0 || wr <= 0.0 {
                continue;
            }
            let score = (wl * impurity(&left, wl, self.criterion)
                + wr * impurity(&right, wr, self.criterion))
                / total;
            if best.is_none_or(|(s, _)| score < s - tie) {
                // The midpoint, unless rounding puts it on `a` (adjacent floats).
                let mid = a + (b - a) / 2.0;
                best = Some((score, if mid > a { mid } else { b }));
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn search<'a>(tx: &'a [Vec<f64>], labels: &'a [usize], weights: &'a [f32]) -> SplitSearch<'a> {
        SplitSearch {
            tx,
            labels,
            weights,
            n_classes: 3,
            criterion: Criterion::Gini,
            min_weight_leaf: 0.0,
            min_impurity_decrease: 1e-7,
        }
    }

    #[test]
    fn equal_splits_go_to_the_lowest_feature_and_cut() {
        // Features 0 and 2 separate the classes identically; 1 is noise.
        let tx: Vec<Vec<f64>> = (0..8)
            .map(|i| vec![(i / 4) as f64, (i % 3) as f64, 10.0 + (i / 4) as f64])
            .collect();
        let labels: Vec<usize> = (0..8).map(|i| i / 4).collect();
        let w = vec![1.0; 8];
        let s = search(&tx, &labels, &w)
            .best(&(0..8).collect::<Vec<_>>())
            .unwrap();
        assert_eq!((s.feature, s.cut), (0, 0.5));
        assert!((s.gain - 0.5).abs() < 1e-12);
        // A pure node and a node of one value do not split.
        assert!(search(&tx, &labels, &w).best(&[0, 1, 2]).is_none());
        let same: Vec<Vec<f64>> = (0..8).map(|_| vec![1.0, 1.0, 1.0]).collect();
        assert!(search(&same, &labels, &w)
            .best(&(0..8).collect::<Vec<_>>())
            .is_none());
    }

    #[test]
    fn min_weight_leaf_and_entropy() {
        let tx: Vec<Vec<f64>> = (0..6).map(|i| vec![i as f64]).collect();
        let labels = [0, 1, 1, 1, 1, 1];
        let w = vec![1.0f32; 6];
        let mut s = search(&tx, &labels, &w);
        assert_eq!(s.best(&[0, 1, 2, 3, 4, 5]).unwrap().cut, 0.5);
        s.min_weight_leaf = 2.0;
        assert_eq!(s.best(&[0, 1, 2, 3, 4, 5]).unwrap().cut, 1.5);
        s.criterion = Criterion::Entropy;
        s.min_weight_leaf = 0.0;
        let e = s.best(&[0, 1, 2, 3, 4, 5]).unwrap();
        let h = -(1.0f64 / 6.0) * (1.0f64 / 6.0).log2() - (5.0 / 6.0) * (5.0f64 / 6.0).log2();
        assert_eq!(e.cut, 0.5);
        assert!((e.gain - h).abs() < 1e-12);
    }

    /// The simplest search there is: every feature, every cut between two
    /// distinct values, class masses counted afresh; the lowest weighted Gini.
    fn brute_force(tx: &[Vec<f64>], labels: &[usize], w: &[f32], rows: &[usize]) -> f64 {
        let mass = |keep: &dyn Fn(usize) -> bool| {
            let mut m = [0f64; 3];
            for &r in rows.iter().filter(|&&r| keep(r)) {
                m[labels[r]] += w[r] as f64;
            }
            let t: f64 = m.iter().sum();
            (
                t,
                if t > 0.0 {
                    impurity(&m, t, Criterion::Gini)
                } else {
                    0.0
                },
            )
        };
        let (total, node) = mass(&|_| true);
        let mut best = node;
        let nf = tx[0].len();
        for (f, &c) in (0..nf).flat_map(|f| rows.iter().map(move |c| (f, c))) {
            let cut = tx[c][f];
            let (wl, il) = mass(&|r| tx[r][f] < cut);
            let (wr, ir) = mass(&|r| tx[r][f] >= cut);
            if wl > 0.0 && wr > 0.0 {
                best = best.min((wl * il + wr * ir) / total);
            }
        }
        node - best
    }

    #[test]
    fn matches_brute_force_on_tied_random_data() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        for _ in 0..200 {
            let n = rng.gen_range(2..40);
            let tx: Vec<Vec<f64>> = (0..n)
                .map(|_| (0..4).map(|_| rng.gen_range(0..5) as f64).collect())
                .collect();
            let labels: Vec<usize> = (0..n).map(|_| rng.gen_range(0..3)).collect();
            let w: Vec<f32> = (0..n).map(|_| rng.gen_range(0.1..3.0)).collect();
            let rows: Vec<usize> = (0..n).filter(|_| rng.gen_bool(0.8)).collect();
            if rows.is_empty() {
                continue;
            }
            let want = brute_force(&tx, &labels, &w, &rows);
            let got = search(&tx, &labels, &w).best(&rows).map_or(0.0, |s| s.gain);
            let floor = 1e-7; // min_impurity_decrease of `search`
            if want >= floor + 1e-9 {
                assert!((got - want).abs() < 1e-9, "{got} vs {want}");
            } else {
                assert!(got == 0.0 || (got - want).abs() < 1e-9, "{got} vs {want}");
            }
        }
    }
}
