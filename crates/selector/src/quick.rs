//! The kernel for a matrix whose features would not pay: [`Facts`] known
//! without a pass over the matrix (sizes and value width), and the model's
//! optional quick part ([`QuickModel`]: a small tree over them whose leaves
//! name one kernel for the whole matrix), fitted to minimise the expected
//! slowdown against each training matrix's best single kernel
//! ([`fit_quick`]), not the misclassification rate: a wrong pick that costs
//! 1% weighs 1%, one that costs 3x weighs 3x.

use crate::SelectorError;
use serde::{Deserialize, Serialize};
use sparse::KernelId;

/// What is known of a matrix before any pass over it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Facts {
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
    /// Nonzeros.
    pub nnz: usize,
    /// Bytes per value of the precision planned (4 or 8).
    pub value_bytes: usize,
}

/// The names of [`Facts::vector`]'s entries, in order.
pub const QUICK_FACTS: [&str; 6] = [
    "rows",
    "cols",
    "nnz",
    "nnz_row_mean",
    "density",
    "value_bytes",
];

impl Facts {
    /// The facts of a CSR row pointer with `cols` columns.
    pub fn of(row_ptr: &[u32], cols: usize, value_bytes: usize) -> Facts {
        Facts {
            rows: row_ptr.len().saturating_sub(1),
            cols,
            nnz: row_ptr.last().copied().unwrap_or(0) as usize,
            value_bytes,
        }
    }

    /// The values named by [`QUICK_FACTS`].
    pub fn vector(&self) -> [f64; 6] {
        let (m, n, z) = (self.rows as f64, self.cols as f64, self.nnz as f64);
        let mean = if m > 0.0 { z / m } else { 0.0 };
        let density = if m * n > 0.0 { z / (m * n) } else { 0.0 };
        [m, n, z, mean, density, self.value_bytes as f64]
    }

    /// The minimum bytes one SpMV moves (DESIGN.md): row pointer, column
    /// indices and values, x and y.
    pub fn min_bytes(&self) -> f64 {
        let (m, n, z) = (self.rows as f64, self.cols as f64, self.nnz as f64);
        let v = self.value_bytes as f64;
        (m + 1.0) * 4.0 + z * (4.0 + v) + n * v + m * v
    }
}

/// One node of the quick tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QuickNode {
    /// `fact <= threshold` goes left.
    Split {
        /// Index into [`QUICK_FACTS`].
        fact: usize,
        /// The cut.
        threshold: f64,
        /// Node index when at or below the cut.
        left: usize,
        /// Node index above it.
        right: usize,
    },
    /// The kernel for the whole matrix.
    Leaf {
        /// Its name.
        kernel: KernelId,
    },
}

/// The quick part of a model file: a tree over [`Facts`] (node 0 the root).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuickModel {
    /// The fact names the splits index ([`QUICK_FACTS`] when written).
    pub facts: Vec<String>,
    /// The nodes.
    pub nodes: Vec<QuickNode>,
}

impl QuickModel {
    /// The kernel for a matrix with these facts.
    pub fn kernel(&self, f: &Facts) -> KernelId {
        let x = f.vector();
        let mut i = 0;
        loop {
            match &self.nodes[i] {
                QuickNode::Leaf { kernel } => return *kernel,
                QuickNode::Split {
                    fact,
                    threshold,
                    left,
                    right,
                } => {
                    i = if x[*fact] <= *threshold {
                        *left
                    } else {
                        *right
                    }
                }
            }
        }
    }

    /// Checks the fact names and that every split points forward to a node
    /// that exists (so [`QuickModel::kernel`] ends).
    pub fn validate(&self) -> Result<(), SelectorError> {
        let bad = |why: String| Err(SelectorError::InvalidModel(format!("quick part: {why}")));
        if self.facts != QUICK_FACTS {
            return bad(format!(
                "facts {:?}, this build reads {QUICK_FACTS:?}",
                self.facts
            ));
        }
        if self.nodes.is_empty() {
            return bad("no nodes".into());
        }
        for (i, n) in self.nodes.iter().enumerate() {
            if let QuickNode::Split {
                fact, left, right, ..
            } = n
            {
                let n = self.nodes.len();
                if *fact >= QUICK_FACTS.len()
                    || *left <= i
                    || *right <= i
                    || *left >= n
                    || *right >= n
                {
                    return bad(format!("node {i} is not a forward split over a known fact"));
                }
            }
        }
        Ok(())
    }

    /// Leaves of the tree.
    pub fn leaves(&self) -> usize {
        self.nodes
            .iter()
            .filter(|n| matches!(n, QuickNode::Leaf { .. }))
            .count()
    }
}

/// A value a model works out once and keeps, outside its file: the kernel
/// a model without a quick part chooses without features (from its card's
/// label counts; reading it from the card's JSON metrics took a lookup and a
/// string per kernel on every first call) and its host cost of planning
/// with features ([`crate::Model::planning_with_features_ms`]). Two models
/// compare equal whatever their cells hold.
#[derive(Debug, Clone)]
pub(crate) struct KeptCell<T>(std::sync::OnceLock<T>);

impl<T> Default for KeptCell<T> {
    fn default() -> Self {
        KeptCell(std::sync::OnceLock::new())
    }
}

impl<T: Copy> KeptCell<T> {
    /// The kept value, worked out by `f` the first time.
    pub(crate) fn get_or_init(&self, f: impl FnOnce() -> T) -> T {
        *self.0.get_or_init(f)
    }
}

impl<T> PartialEq for KeptCell<T> {
    fn eq(&self, _: &KeptCell<T>) -> bool {
        true
    }
}

/// One training matrix for the quick part: its facts and each kernel's time
/// over the whole matrix (single-bin scheme).
#[derive(Debug, Clone, PartialEq)]
pub struct QuickSample {
    /// Its name.
    pub matrix: String,
    /// Its facts.
    pub facts: Facts,
    /// Each kernel's time (ms); kernels not timed are missing.
    pub times: Vec<(KernelId, f64)>,
}

/// The slowdown charged for a kernel a sample has no time for.
pub const MISSING_SLOWDOWN: f64 = 10.0;

impl QuickSample {
    /// The best time of the sample (ms).
    fn best_ms(&self) -> f64 {
        self.times
            .iter()
            .map(|t| t.1)
            .filter(|t| t.is_finite() && *t > 0.0)
            .fold(f64::INFINITY, f64::min)
    }

    /// `k`'s time over the best kernel's ([`MISSING_SLOWDOWN`] when not timed).
    pub fn slowdown(&self, k: KernelId) -> f64 {
        let t = self
            .times
            .iter()
            .find(|t| t.0 == k)
            .map(|t| t.1)
            .filter(|t| t.is_finite() && *t > 0.0);
        t.map_or(MISSING_SLOWDOWN, |t| {
            (t / self.best_ms()).min(MISSING_SLOWDOWN)
        })
    }
}

/// How large the quick tree may grow.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct QuickParams {
    /// Most splits from the root to a leaf.
    pub max_depth: usize,
    /// Fewest samples in a leaf.
    pub min_leaf: usize,
}

impl Default for QuickParams {
    fn default() -> Self {
        QuickParams {
            max_depth: 3,
            min_leaf: 8,
        }
    }
}

/// Geometric-mean slowdown of picking `pick(sample)` on each sample.
pub fn geomean_slowdown(samples: &[QuickSample], pick: impl Fn(&QuickSample) -> KernelId) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    let s: f64 = samples.iter().map(|q| q.slowdown(pick(q)).ln()).sum();
    (s / samples.len() as f64).exp()
}

/// Fits the quick tree on `samples`, choosing among `kernels`: each leaf
/// takes the kernel of least summed log slowdown (the geometric-mean
/// slowdown of its matrices), each split the cut that lowers that sum most.
/// Deterministic: ties go to the earlier fact, cut and kernel.
pub fn fit_quick(
    samples: &[QuickSample],
    kernels: &[KernelId],
    params: QuickParams,
) -> Result<QuickModel, SelectorError> {
    if kernels.is_empty() {
        return Err(SelectorError::NoSamples {
            what: "quick-kernel",
        });
    }
    for (i, s) in samples.iter().enumerate() {
        if !s.best_ms().is_finite() {
            return Err(SelectorError::InvalidSample {
                stage: 4,
                index: i,
                matrix: s.matrix.clone(),
                reason: "no finite positive kernel time".into(),
            });
        }
    }
    if samples.is_empty() {
        return Err(SelectorError::NoSamples {
            what: "quick-kernel",
        });
    }
    // cost[i][k]: log slowdown of kernel k on sample i.
    let cost: Vec<Vec<f64>> = samples
        .iter()
        .map(|s| kernels.iter().map(|&k| s.slowdown(k).ln()).collect())
        .collect();
    let facts: Vec<[f64; 6]> = samples.iter().map(|s| s.facts.vector()).collect();
    let mut nodes = Vec::new();
    let all: Vec<usize> = (0..samples.len()).collect();
    grow(
        &Grow {
            cost: &cost,
            facts: &facts,
            kernels,
            params,
        },
        &all,
        0,
        &mut nodes,
    );
    Ok(QuickModel {
        facts: QUICK_FACTS.iter().map(|s| s.to_string()).collect(),
        nodes,
    })
}

/// What the recursion of [`fit_quick`] reads.
struct Grow<'a> {
    cost: &'a [Vec<f64>],
    facts: &'a [[f64; 6]],
    kernels: &'a [KernelId],
    params: QuickParams,
}

/// The best kernel of a set (index into `kernels`) and its summed cost.
fn best_leaf(sums: &[f64]) -> (usize, f64) {
    let mut best = (0, f64::INFINITY);
    for (k, &s) in sums.iter().enumerate() {
        if s < best.1 - 1e-12 {
            best = (k, s);
        }
    }
    best
}

fn sums_of(g: &Grow, idx: &[usize]) -> Vec<f64> {
    let mut sums = vec![0.0; g.kernels.len()];
    for &i in idx {
        for (s, c) in sums.iter_mut().zip(&g.cost[i]) {
            *s += c;
        }
    }
    sums
}

/// The best split of `idx`: (fact, threshold, cost of both sides), when any
/// split leaves `min_leaf` on each side.
fn best_split(g: &Grow, idx: &[usize]) -> Option<(usize, f64, f64)> {
    let mut best: Option<(usize, f64, f64)> = None;
    let min = g.params.min_leaf.max(1);
    for fact in 0..QUICK_FACTS.len() {
        let mut order = idx.to_vec();
        order.sort_by(|&a, &b| {
            g.facts[a][fact]
                .total_cmp(&g.facts[b][fact])
                .then(a.cmp(&b))
        });
        let total = sums_of(g, &order);
        let mut left = vec![0.0; g.kernels.len()];
        for pos in 0..order.len().saturating_sub(1) {
            for (s, c) in left.iter_mut().zip(&g.cost[order[pos]]) {
                *s += c;
            }
            let (here, next) = (g.facts[order[pos]][fact], g.facts[order[pos + 1]][fact]);
            if pos + 1 < min || order.len() - pos - 1 < min || here == next {
                continue;
            }
            let right: Vec<f64> = total.iter().zip(&left).map(|(t, l)| t - l).collect();
            let c = best_leaf(&left).1 + best_leaf(&right).1;
            if best.is_none_or(|b| c < b.2 - 1e-12) {
                best = Some((fact, (here + next) / 2.0, c));
            }
        }
    }
    best
}

/// Grows the node for `idx` at `depth`, appending it (and its children) to `nodes`.
fn grow(g: &Grow, idx: &[usize], depth: usize, nodes: &mut Vec<QuickNode>) -> usize {
    let me = nodes.len();
    let (k, leaf_cost) = best_leaf(&sums_of(g, idx));
    nodes.push(QuickNode::Leaf {
        kernel: g.kernels[k],
    });
    if depth >= g.params.max_depth {
        return me;
    }
    let Some((fact, threshold, c)) = best_split(g, idx) else {
        return me;
    };
    if c >= leaf_cost - 1e-9 {
        return me;
    }
    let (l, r): (Vec<usize>, Vec<usize>) =
        idx.iter().partition(|&&i| g.facts[i][fact] <= threshold);
    let left = grow(g, &l, depth + 1, nodes);
    let right = grow(g, &r, depth + 1, nodes);
    nodes[me] = QuickNode::Split {
        fact,
        threshold,
        left,
        right,
    };
    me
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(name: &str, rows: usize, nnz: usize, times: &[(KernelId, f64)]) -> QuickSample {
        QuickSample {
            matrix: name.into(),
            facts: Facts {
                rows,
                cols: rows,
                nnz,
                value_bytes: 8,
            },
            times: times.to_vec(),
        }
    }

    /// Short rows: serial is fastest; long rows: vector is, by a wide margin.
    fn samples() -> Vec<QuickSample> {
        let mut v = Vec::new();
        for i in 0..20 {
            let rows = 1000 + i * 10;
            v.push(sample(
                &format!("short{i}"),
                rows,
                rows * 3,
                &[(KernelId::Serial, 1.0), (KernelId::Vector, 1.3)],
            ));
            v.push(sample(
                &format!("long{i}"),
                rows,
                rows * 200,
                &[(KernelId::Serial, 9.0), (KernelId::Vector, 2.0)],
            ));
        }
        v
    }

    #[test]
    fn the_fitted_tree_picks_the_fastest_kernel_by_row_length() {
        let s = samples();
        let kernels = [KernelId::Serial, KernelId::Vector];
        let q = fit_quick(&s, &kernels, QuickParams::default()).unwrap();
        q.validate().unwrap();
        for x in &s {
            let best = if x.matrix.starts_with("short") {
                KernelId::Serial
            } else {
                KernelId::Vector
            };
            assert_eq!(q.kernel(&x.facts), best, "{}", x.matrix);
        }
        assert!((geomean_slowdown(&s, |x| q.kernel(&x.facts)) - 1.0).abs() < 1e-12);
        // Deterministic: the same fit twice is the same tree.
        assert_eq!(q, fit_quick(&s, &kernels, QuickParams::default()).unwrap());
    }

    #[test]
    fn a_leaf_minimises_slowdown_not_misclassification() {
        // Serial is best on 3 of 4 matrices by 1%, but 5x slower on the
        // fourth: vector loses least in all (one leaf: depth 0).
        let s = vec![
            sample(
                "a",
                100,
                300,
                &[(KernelId::Serial, 1.0), (KernelId::Vector, 1.01)],
            ),
            sample(
                "b",
                100,
                300,
                &[(KernelId::Serial, 1.0), (KernelId::Vector, 1.01)],
            ),
            sample(
                "c",
                100,
                300,
                &[(KernelId::Serial, 1.0), (KernelId::Vector, 1.01)],
            ),
            sample(
                "d",
                100,
                300,
                &[(KernelId::Serial, 5.0), (KernelId::Vector, 1.0)],
            ),
        ];
        let p = QuickParams {
            max_depth: 0,
            min_leaf: 1,
        };
        let q = fit_quick(&s, &[KernelId::Serial, KernelId::Vector], p).unwrap();
        assert_eq!(
            q.nodes,
            vec![QuickNode::Leaf {
                kernel: KernelId::Vector
            }]
        );
    }

    #[test]
    fn bad_trees_and_samples_are_refused() {
        let s = vec![sample("z", 10, 10, &[(KernelId::Serial, f64::NAN)])];
        assert!(fit_quick(&s, &[KernelId::Serial], QuickParams::default()).is_err());
        let q = QuickModel {
            facts: QUICK_FACTS.iter().map(|s| s.to_string()).collect(),
            nodes: vec![QuickNode::Split {
                fact: 0,
                threshold: 1.0,
                left: 0,
                right: 0,
            }],
        };
        assert!(q.validate().is_err());
    }
}
