//! A CART regression tree (least squares) and gradient boosting of shallow ones,
//! written here because linfa-trees 0.8.1 only classifies. Fitting is
//! deterministic: rows are ordered by (value, row index), and among equally good
//! splits the lowest feature and then the lowest cut wins.

use crate::tree::{check_nodes, walk_nodes, FlatNode};
use serde::{Deserialize, Serialize};

/// One node of a regression tree. Decisions: go left when `value < cut`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum RegNode {
    /// An internal node on feature `feature`.
    Split {
        feature: usize,
        cut: f64,
        left: usize,
        right: usize,
    },
    /// A leaf: the mean target of its training rows (rounded to `f32`, which is
    /// far finer than timer noise and keeps files small) and how many there were.
    Leaf { value: f64, n: usize },
}

impl FlatNode for RegNode {
    fn split(&self) -> Option<(usize, f64, [usize; 2])> {
        match *self {
            RegNode::Split {
                feature,
                cut,
                left,
                right,
            } => Some((feature, cut, [left, right])),
            RegNode::Leaf { .. } => None,
        }
    }
}

/// A regression tree: `nodes[0]` is the root, children come after their parent.
///
/// Stored in JSON as one compact string (a boosted model has hundreds of trees,
/// and pretty-printed node objects made a model file 35 times larger): nodes
/// separated by `;`, a split as `s<feature>:<cut>:<left>:<right>`, a leaf as
/// `l<value>:<rows>`; numbers in Rust's shortest round-trip form, so a file gives
/// back the same tree bit for bit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub(crate) struct RegTree {
    pub nodes: Vec<RegNode>,
}

impl From<RegTree> for String {
    fn from(t: RegTree) -> String {
        let parts: Vec<String> = t
            .nodes
            .iter()
            .map(|n| match n {
                RegNode::Split {
                    feature,
                    cut,
                    left,
                    right,
                } => format!("s{feature}:{cut:?}:{left}:{right}"),
                RegNode::Leaf { value, n } => format!("l{:?}:{n}", *value as f32),
            })
            .collect();
        parts.join(";")
    }
}

impl TryFrom<String> for RegTree {
    type Error = String;

    fn try_from(s: String) -> Result<RegTree, String> {
        let bad = |part: &str| format!("bad regression-tree node `{part}`");
        let mut nodes = Vec::new();
        for part in s.split(';') {
            let f: Vec<&str> = part.get(1..).unwrap_or("").split(':').collect();
            let node = match (part.chars().next(), f.as_slice()) {
                (Some('s'), [feature, cut, left, right]) => RegNode::Split {
                    feature: feature.parse().map_err(|_| bad(part))?,
                    cut: cut.parse().map_err(|_| bad(part))?,
                    left: left.parse().map_err(|_| bad(part))?,
                    right: right.parse().map_err(|_| bad(part))?,
                },
                (Some('l'), [value, n]) => RegNode::Leaf {
                    value: value.parse::<f32>().map_err(|_| bad(part))? as f64,
                    n: n.parse().map_err(|_| bad(part))?,
                },
                _ => return Err(bad(part)),
            };
            nodes.push(node);
        }
        Ok(RegTree { nodes })
    }
}

/// How a regression tree grows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct GrowParams {
    /// Deepest split level (0: a single leaf).
    pub max_depth: usize,
    /// Fewest training rows in a leaf (at least 1).
    pub min_leaf: usize,
}

/// A split must lower the node's squared error by this share of it, so that
/// rounding noise never splits.
const MIN_RELATIVE_GAIN: f64 = 1e-12;

/// The training data seen by one fit: row-major features and the target.
struct Data<'a> {
    x: &'a [Vec<f64>],
    y: &'a [f64],
    params: GrowParams,
}

impl RegTree {
    /// Fits a tree on rows `x` (all of one length, finite) and targets `y`.
    pub fn fit(x: &[Vec<f64>], y: &[f64], params: GrowParams) -> RegTree {
        assert_eq!(x.len(), y.len(), "one target per row");
        let params = GrowParams {
            min_leaf: params.min_leaf.max(1),
            ..params
        };
        let nf = x.first().map_or(0, Vec::len);
        // One order per feature, kept sorted while rows are partitioned down the tree.
        let orders: Vec<Vec<usize>> = (0..nf)
            .map(|f| {
                let mut o: Vec<usize> = (0..x.len()).collect();
                o.sort_by(|&a, &b| x[a][f].total_cmp(&x[b][f]).then(a.cmp(&b)));
                o
            })
            .collect();
        let rows: Vec<usize> = (0..x.len()).collect();
        let data = Data { x, y, params };
        let mut nodes = Vec::new();
        data.grow(&rows, orders, 0, &mut nodes);
        RegTree { nodes }
    }

    /// The prediction for `x`; a missing or NaN feature goes right.
    pub fn predict(&self, x: &[f64]) -> f64 {
        match walk_nodes(&self.nodes, x, |_, _| {}) {
            Some(RegNode::Leaf { value, .. }) => *value,
            _ => f64::NAN,
        }
    }

    /// Checks indices and values: features below `n_features`, finite cuts and
    /// leaf values, children after their parent, every node reached once.
    pub fn validate(&self, n_features: usize) -> Result<(), String> {
        check_nodes(&self.nodes, "regression tree", n_features, |i, n| match n {
            RegNode::Split { cut, .. } if !cut.is_finite() => {
                Err(format!("node {i} has cut {cut}"))
            }
            RegNode::Leaf { value, .. } if !value.is_finite() => {
                Err(format!("leaf {i} predicts {value}"))
            }
            _ => Ok(()),
        })
    }

    /// Number of leaves.
    #[cfg(test)]
    pub fn leaves(&self) -> usize {
        self.nodes
            .iter()
            .filter(|n| matches!(n, RegNode::Leaf { .. }))
            .count()
    }
}

impl Data<'_> {
    /// Grows the subtree of `rows` (whose per-feature sorted orders are `orders`)
    /// into `out` in pre-order; returns its root's index.
    fn grow(
        &self,
        rows: &[usize],
        orders: Vec<Vec<usize>>,
        depth: usize,
        out: &mut Vec<RegNode>,
    ) -> usize {
        let me = out.len();
        let n = rows.len().max(1) as f64;
        let mean = rows.iter().map(|&r| self.y[r]).sum::<f64>() / n;
        out.push(RegNode::Leaf {
            value: mean as f32 as f64,
            n: rows.len(),
        });
        if depth >= self.params.max_depth || rows.len() < 2 * self.params.min_leaf {
            return me;
        }
        let Some((feature, cut)) = self.best_split(rows, &orders) else {
            return me;
        };
        let goes_left = |r: usize| self.x[r][feature] < cut;
        let (mut lo, mut ro) = (Vec::new(), Vec::new());
        for o in &orders {
            let (l, r): (Vec<usize>, Vec<usize>) = o.iter().partition(|&&r| goes_left(r));
            lo.push(l);
            ro.push(r);
        }
        drop(orders);
        let (lrows, rrows): (Vec<usize>, Vec<usize>) = rows.iter().partition(|&&r| goes_left(r));
        let left = self.grow(&lrows, lo, depth + 1, out);
        let right = self.grow(&rrows, ro, depth + 1, out);
        out[me] = RegNode::Split {
            feature,
            cut,
            left,
            right,
        };
        me
    }

    /// The split of `rows` that lowers the squared error most, as (feature, cut),
    /// or `None` when no split keeps `min_leaf` rows on each side and gains.
    fn best_split(&self, rows: &[usize], orders: &[Vec<usize>]) -> Option<(usize, f64)> {
        let n = rows.len();
        let first = self.y[rows[0]];
        if rows.iter().all(|&r| self.y[r] == first) {
            return None; // a constant target: nothing to explain
        }
        // Sums of centred targets, so that the gains do not cancel large numbers.
        let mean = rows.iter().map(|&r| self.y[r]).sum::<f64>() / n as f64;
        let yc = |r: usize| self.y[r] - mean;
        let total: f64 = rows.iter().map(|&r| yc(r)).sum();
        let ss: f64 = rows.iter().map(|&r| yc(r) * yc(r)).sum();
        let base = total * total / n as f64;
        let min_gain = MIN_RELATIVE_GAIN * ss;
        let mut best: Option<(f64, usize, f64)> = None;
        let k = self.params.min_leaf;
        for (f, order) in orders.iter().enumerate() {
            let mut left_sum = 0.0;
            for i in 0..n - 1 {
                left_sum += yc(order[i]);
                let (a, b) = (self.x[order[i]][f], self.x[order[i + 1]][f]);
                let nl = i + 1;
                if nl < k || n - nl < k || a >= b {
                    continue;
                }
                let right_sum = total - left_sum;
                let gain = left_sum * left_sum / nl as f64
                    + right_sum * right_sum / (n - nl) as f64
                    - base;
                if gain > min_gain && best.is_none_or(|(g, _, _)| gain > g) {
                    // The midpoint, unless rounding puts it on `a` (adjacent floats).
                    let mid = a + (b - a) / 2.0;
                    best = Some((gain, f, if mid > a { mid } else { b }));
                }
            }
        }
        best.map(|(_, f, c)| (f, c))
    }
}

/// Gradient boosting of regression trees on squared error: the mean, plus
/// `rate` times each tree fitted to the residuals of the ones before.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Boosted {
    pub base: f64,
    pub rate: f64,
    pub trees: Vec<RegTree>,
}

impl Boosted {
    /// Fits `rounds` trees with shrinkage `rate`.
    pub fn fit(x: &[Vec<f64>], y: &[f64], rounds: usize, rate: f64, grow: GrowParams) -> Boosted {
        let base = if y.is_empty() {
            0.0
        } else {
            y.iter().sum::<f64>() / y.len() as f64
        };
        let mut pred = vec![base; y.len()];
        let mut trees = Vec::with_capacity(rounds);
        for _ in 0..rounds {
            let resid: Vec<f64> = y.iter().zip(&pred).map(|(t, p)| t - p).collect();
            let tree = RegTree::fit(x, &resid, grow);
            if tree.nodes.len() == 1 && !trees.is_empty() {
                break; // nothing left that a split can explain
            }
            for (p, row) in pred.iter_mut().zip(x) {
                *p += rate * tree.predict(row);
            }
            trees.push(tree);
        }
        Boosted { base, rate, trees }
    }

    /// The prediction for `x`.
    pub fn predict(&self, x: &[f64]) -> f64 {
        self.base + self.rate * self.trees.iter().map(|t| t.predict(x)).sum::<f64>()
    }

    /// Validates every tree (see [`RegTree::validate`]) and the scalars.
    pub fn validate(&self, n_features: usize) -> Result<(), String> {
        if !self.base.is_finite() || !self.rate.is_finite() {
            return Err("boosting base or rate is not finite".into());
        }
        for (i, t) in self.trees.iter().enumerate() {
            t.validate(n_features)
                .map_err(|e| format!("tree {i}: {e}"))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grid(n: usize) -> Vec<Vec<f64>> {
        (0..n).map(|i| vec![i as f64, (i % 7) as f64]).collect()
    }

    #[test]
    fn fits_a_step_function_exactly() {
        // y = 1 for x0 < 30, 5 for 30 <= x0 < 70, 2 above; x1 is noise-free filler.
        let x = grid(100);
        let y: Vec<f64> = x
            .iter()
            .map(|r| match r[0] {
                v if v < 30.0 => 1.0,
                v if v < 70.0 => 5.0,
                _ => 2.0,
            })
            .collect();
        let t = RegTree::fit(
            &x,
            &y,
            GrowParams {
                max_depth: 3,
                min_leaf: 1,
            },
        );
        t.validate(2).unwrap();
        for (r, want) in x.iter().zip(&y) {
            assert_eq!(t.predict(r), *want, "{r:?}");
        }
        assert_eq!(t.leaves(), 3);
        // The cuts sit halfway between the training values either side.
        let cuts: Vec<f64> = t
            .nodes
            .iter()
            .filter_map(|n| match n {
                RegNode::Split {
                    feature: 0, cut, ..
                } => Some(*cut),
                _ => None,
            })
            .collect();
        assert!(cuts.contains(&29.5) && cuts.contains(&69.5), "{cuts:?}");
        assert_eq!(t.predict(&[29.4, 0.0]), 1.0);
        assert_eq!(t.predict(&[69.6, 0.0]), 2.0);
    }

    #[test]
    fn constant_target_and_tied_features_give_one_leaf() {
        let x = grid(50);
        let t = RegTree::fit(
            &x,
            &[3.25; 50],
            GrowParams {
                max_depth: 6,
                min_leaf: 1,
            },
        );
        assert_eq!(t.nodes, vec![RegNode::Leaf { value: 3.25, n: 50 }]);
        // Every feature tied: no cut can separate rows, whatever the targets.
        let tied = vec![vec![1.0, 2.0]; 10];
        let y: Vec<f64> = (0..10).map(|i| i as f64).collect();
        let t = RegTree::fit(
            &tied,
            &y,
            GrowParams {
                max_depth: 6,
                min_leaf: 1,
            },
        );
        assert_eq!(t.leaves(), 1);
        assert_eq!(t.predict(&[1.0, 2.0]), 4.5);
    }

    #[test]
    fn never_cuts_between_equal_values_and_respects_min_leaf() {
        // x0 takes 3 values with many ties; the target changes only between values.
        let x: Vec<Vec<f64>> = (0..30).map(|i| vec![(i / 10) as f64]).collect();
        let y: Vec<f64> = x.iter().map(|r| r[0] * 10.0).collect();
        let t = RegTree::fit(
            &x,
            &y,
            GrowParams {
                max_depth: 4,
                min_leaf: 1,
            },
        );
        for n in &t.nodes {
            if let RegNode::Split { cut, .. } = n {
                assert!([0.5, 1.5].contains(cut), "{cut}");
            }
        }
        assert_eq!(t.predict(&[2.0]), 20.0);
        // min_leaf larger than half the rows: no split at all.
        let t = RegTree::fit(
            &x,
            &y,
            GrowParams {
                max_depth: 4,
                min_leaf: 16,
            },
        );
        assert_eq!(t.leaves(), 1);
    }

    #[test]
    fn fitting_is_deterministic_and_boosting_converges() {
        let x: Vec<Vec<f64>> = (0..200)
            .map(|i| {
                let a = (i * 37 % 101) as f64 / 10.0;
                let b = (i * 53 % 89) as f64 / 9.0;
                vec![a, b, (i % 3) as f64]
            })
            .collect();
        // A smooth target a single shallow tree cannot fit.
        let y: Vec<f64> = x.iter().map(|r| r[0].sin() + 0.3 * r[1] + r[2]).collect();
        let grow = GrowParams {
            max_depth: 3,
            min_leaf: 2,
        };
        let a = Boosted::fit(&x, &y, 200, 0.1, grow);
        let b = Boosted::fit(&x, &y, 200, 0.1, grow);
        assert_eq!(a, b);
        a.validate(3).unwrap();
        let mse = |m: &Boosted| {
            x.iter()
                .zip(&y)
                .map(|(r, t)| (m.predict(r) - t).powi(2))
                .sum::<f64>()
                / y.len() as f64
        };
        let one = Boosted::fit(&x, &y, 1, 1.0, grow);
        assert!(mse(&a) < 0.02, "boosted mse {}", mse(&a));
        assert!(mse(&a) < mse(&one) / 10.0, "{} vs {}", mse(&a), mse(&one));
        // JSON round trip keeps predictions bit for bit.
        let back: Boosted = serde_json::from_str(&serde_json::to_string(&a).unwrap()).unwrap();
        for r in &x {
            assert_eq!(back.predict(r), a.predict(r));
        }
    }

    #[test]
    fn the_compact_form_round_trips_and_refuses_garbage() {
        let t = RegTree {
            nodes: vec![
                RegNode::Split {
                    feature: 2,
                    cut: 1e-7 + 0.1,
                    left: 1,
                    right: 2,
                },
                RegNode::Leaf {
                    value: -0.125,
                    n: 3,
                },
                RegNode::Leaf {
                    value: 1.0f32 as f64 / 3.0f32 as f64,
                    n: 4,
                },
            ],
        };
        let s = String::from(t.clone());
        assert!(s.starts_with("s2:") && s.contains(";l-0.125:3;"), "{s}");
        let back = RegTree::try_from(s).unwrap();
        assert_eq!(back.nodes[0], t.nodes[0]);
        assert_eq!(back.nodes[1], t.nodes[1]);
        // Leaf values are kept to f32 precision.
        match back.nodes[2] {
            RegNode::Leaf { value, n: 4 } => assert!((value - 1.0 / 3.0).abs() < 1e-7),
            ref other => panic!("{other:?}"),
        }
        for bad in ["", "x1:2", "s1:2:3", "l1.0", "s1:abc:1:2", "l1.0:-3"] {
            assert!(RegTree::try_from(bad.to_string()).is_err(), "{bad}");
        }
        let json = serde_json::to_string(&t).unwrap();
        assert!(json.starts_with('"'), "{json}");
    }

    #[test]
    fn validate_refuses_bad_trees() {
        let leaf = RegNode::Leaf { value: 1.0, n: 1 };
        assert!(RegTree { nodes: vec![] }.validate(1).is_err());
        let nan = RegTree {
            nodes: vec![RegNode::Leaf {
                value: f64::NAN,
                n: 1,
            }],
        };
        assert!(nan.validate(1).is_err());
        let split = |feature, left, right| RegNode::Split {
            feature,
            cut: 0.5,
            left,
            right,
        };
        for bad in [
            vec![split(0, 0, 1), leaf.clone()],
            vec![split(0, 1, 5), leaf.clone()],
            vec![split(3, 1, 2), leaf.clone(), leaf.clone()],
            vec![split(0, 1, 1), leaf.clone()],
        ] {
            assert!(
                RegTree { nodes: bad.clone() }.validate(2).is_err(),
                "{bad:?}"
            );
        }
        let ok = RegTree {
            nodes: vec![split(1, 1, 2), leaf.clone(), leaf],
        };
        ok.validate(2).unwrap();
        assert_eq!(ok.predict(&[0.0, f64::NAN]), 1.0);
    }
}
