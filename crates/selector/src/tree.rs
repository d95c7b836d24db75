//! The fitted trees in our own flat form: grown from linfa-trees splits (see
//! `fit.rs`), walked for prediction and explanation, stored in the model JSON.
//!
//! Why our own form rather than linfa's serde output: linfa nests nodes (deep JSON,
//! a recursion limit on load), its node fields are private (a decision path needs
//! the walk), and our trees are grown node by node anyway. Nodes are a flat list in
//! pre-order (children after their parent, so a valid list has no cycles), and
//! loading validates every index.

use serde::{Deserialize, Serialize};

/// One node. Decisions follow linfa's rule: go left when `value < cut`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum Node {
    /// An internal node on feature `feature` (index in the stage's layout); `cut` is
    /// in transformed units ([`crate::vector::spread`]), `threshold` the same cut in
    /// the feature's own units (informational; decisions use `cut`).
    Split {
        feature: usize,
        cut: f64,
        threshold: f64,
        left: usize,
        right: usize,
    },
    /// A leaf predicting class `class` (index in the stage's class list).
    Leaf { class: usize },
}

/// A decision tree: `nodes[0]` is the root.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Tree {
    pub nodes: Vec<Node>,
}

/// One step of a walk: the node's feature and cut, and whether the walk went left.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Hop {
    pub feature: usize,
    pub cut: f64,
    pub threshold: f64,
    pub left: bool,
}

impl Tree {
    /// Walks transformed vector `tx` to a leaf; returns its class and the path.
    /// A missing feature reads as NaN, which goes right. Never panics on a validated tree.
    pub fn walk(&self, tx: &[f64]) -> (usize, Vec<Hop>) {
        let mut path = Vec::new();
        let leaf = walk_nodes(&self.nodes, tx, |n, left| {
            if let Node::Split {
                feature,
                cut,
                threshold,
                ..
            } = *n
            {
                path.push(Hop {
                    feature,
                    cut,
                    threshold,
                    left,
                });
            }
        });
        match leaf {
            Some(Node::Leaf { class }) => (*class, path),
            _ => (0, path),
        }
    }

    /// Checks every index: features below `n_features`, classes below `n_classes`,
    /// children after their parent and inside the list, every node reached once.
    pub fn validate(&self, n_features: usize, n_classes: usize) -> Result<(), String> {
        check_nodes(&self.nodes, "tree", n_features, |i, n| match n {
            Node::Split { cut, .. } if cut.is_nan() => Err(format!("node {i} has a NaN cut")),
            Node::Leaf { class } if *class >= n_classes => Err(format!(
                "leaf {i} predicts class {class}, the model has {n_classes} classes"
            )),
            _ => Ok(()),
        })
    }

    /// Replaces every split whose subtrees all predict one class by a leaf, and
    /// renumbers the nodes in pre-order.
    pub fn pruned(&self) -> Tree {
        fn go(t: &Tree, i: usize, out: &mut Vec<Node>) -> Option<usize> {
            // Returns the single class of the rebuilt subtree, if it has one.
            let me = out.len();
            match &t.nodes[i] {
                Node::Leaf { class } => {
                    out.push(Node::Leaf { class: *class });
                    Some(*class)
                }
                Node::Split {
                    feature,
                    cut,
                    threshold,
                    left,
                    right,
                } => {
                    out.push(Node::Leaf { class: 0 });
                    let lc = go(t, *left, out);
                    let r_at = out.len();
                    let rc = go(t, *right, out);
                    match (lc, rc) {
                        (Some(a), Some(b)) if a == b => {
                            out.truncate(me);
                            out.push(Node::Leaf { class: a });
                            Some(a)
                        }
                        _ => {
                            out[me] = Node::Split {
                                feature: *feature,
                                cut: *cut,
                                threshold: *threshold,
                                left: me + 1,
                                right: r_at,
                            };
                            None
                        }
                    }
                }
            }
        }
        let mut nodes = Vec::new();
        go(self, 0, &mut nodes);
        Tree { nodes }
    }

    /// Number of leaves.
    pub fn leaves(&self) -> usize {
        self.nodes
            .iter()
            .filter(|n| matches!(n, Node::Leaf { .. }))
            .count()
    }

    /// Depth of the deepest leaf (a single leaf has depth 0).
    pub fn depth(&self) -> usize {
        let mut depth = vec![0usize; self.nodes.len()];
        let mut max = 0;
        for (i, n) in self.nodes.iter().enumerate() {
            if let Node::Split { left, right, .. } = n {
                depth[*left] = depth[i] + 1;
                depth[*right] = depth[i] + 1;
                max = max.max(depth[i] + 1);
            }
        }
        max
    }
}

/// A node of a tree stored as a flat list in pre-order, classification or
/// regression: what walking and checking the list need of it.
pub(crate) trait FlatNode {
    /// A split's feature, cut (go left when `value < cut`) and children;
    /// `None` for a leaf.
    fn split(&self) -> Option<(usize, f64, [usize; 2])>;
}

impl FlatNode for Node {
    fn split(&self) -> Option<(usize, f64, [usize; 2])> {
        match *self {
            Node::Split {
                feature,
                cut,
                left,
                right,
                ..
            } => Some((feature, cut, [left, right])),
            Node::Leaf { .. } => None,
        }
    }
}

/// Walks `nodes` from the root for `x` (a missing or NaN feature goes right),
/// telling `hop` each split passed and whether it went left; returns the leaf
/// reached. Never panics: on a list that is not a valid tree it may return
/// `None` (a child out of range, or a cycle, cut short by the bound).
pub(crate) fn walk_nodes<'a, N: FlatNode>(
    nodes: &'a [N],
    x: &[f64],
    mut hop: impl FnMut(&'a N, bool),
) -> Option<&'a N> {
    let mut i = 0;
    // A validated tree has children after parents, so this ends; the bound is a guard.
    for _ in 0..=nodes.len() {
        let n = nodes.get(i)?;
        let Some((feature, cut, [left, right])) = n.split() else {
            return Some(n);
        };
        let go_left = x.get(feature).copied().unwrap_or(f64::NAN) < cut;
        hop(n, go_left);
        i = if go_left { left } else { right };
    }
    None
}

/// Checks a node list (`what` names the tree in the error): not empty, split
/// features below `n_features`, children after their parent and inside the list,
/// every node reached once; `values` checks each node's own values (a cut, what
/// a leaf predicts).
pub(crate) fn check_nodes<N: FlatNode>(
    nodes: &[N],
    what: &str,
    n_features: usize,
    values: impl Fn(usize, &N) -> Result<(), String>,
) -> Result<(), String> {
    if nodes.is_empty() {
        return Err(format!("a {what} has no nodes"));
    }
    let mut links = Links::new(nodes.len());
    for (i, n) in nodes.iter().enumerate() {
        match n.split() {
            Some((feature, _, children)) => {
                check_feature(i, feature, n_features)?;
                values(i, n)?;
                links.add(i, children)?;
            }
            None => values(i, n)?,
        }
    }
    links.finish()
}

/// The links of a tree stored as a node list: each child after its parent and
/// inside the list, every node but the root reached exactly once.
struct Links {
    parents: Vec<usize>,
}

impl Links {
    fn new(len: usize) -> Links {
        Links {
            parents: vec![0; len],
        }
    }

    /// Records the children of split node `i`.
    fn add(&mut self, i: usize, children: [usize; 2]) -> Result<(), String> {
        for c in children {
            if c <= i || c >= self.parents.len() {
                return Err(format!("node {i} has child {c} out of order or range"));
            }
            self.parents[c] += 1;
        }
        Ok(())
    }

    /// Checks that every node but the root has exactly one parent.
    fn finish(self) -> Result<(), String> {
        match (1..self.parents.len()).find(|&i| self.parents[i] != 1) {
            Some(i) => Err(format!(
                "node {i} has {} parents, 1 expected",
                self.parents[i]
            )),
            None => Ok(()),
        }
    }
}

/// A split's feature index against the layout's length.
fn check_feature(i: usize, feature: usize, n_features: usize) -> Result<(), String> {
    if feature >= n_features {
        return Err(format!(
            "node {i} splits on feature {feature}, the layout has {n_features}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(feature: usize, cut: f64, left: usize, right: usize) -> Node {
        Node::Split {
            feature,
            cut,
            threshold: cut,
            left,
            right,
        }
    }

    #[test]
    fn walk_validate_prune() {
        // x0 < 1 ? (x1 < 5 ? A : A) : B
        let t = Tree {
            nodes: vec![
                split(0, 1.0, 1, 4),
                split(1, 5.0, 2, 3),
                Node::Leaf { class: 0 },
                Node::Leaf { class: 0 },
                Node::Leaf { class: 1 },
            ],
        };
        t.validate(2, 2).unwrap();
        assert_eq!(t.walk(&[0.0, 9.0]).0, 0);
        let (c, path) = t.walk(&[2.0, 0.0]);
        assert_eq!(c, 1);
        assert_eq!(path.len(), 1);
        assert!(!path[0].left);
        // NaN and missing features go right rather than panicking.
        assert_eq!(t.walk(&[f64::NAN]).0, 1);
        assert_eq!(t.walk(&[]).0, 1);
        let p = t.pruned();
        assert_eq!(p.nodes.len(), 3);
        p.validate(2, 2).unwrap();
        assert_eq!(p.depth(), 1);
        assert_eq!(p.leaves(), 2);
        for x in [[0.0, 0.0], [0.0, 9.0], [3.0, 1.0]] {
            assert_eq!(p.walk(&x).0, t.walk(&x).0);
        }
    }

    #[test]
    fn validate_refuses_bad_trees() {
        let leaf = || Node::Leaf { class: 0 };
        // The nodes, the features and classes of the layout, and a piece of the error.
        let refuses = |nodes: Vec<Node>, n_features, n_classes, part: &str| {
            let err = Tree { nodes }.validate(n_features, n_classes).unwrap_err();
            assert!(err.contains(part), "{err:?} lacks {part:?}");
        };
        refuses(vec![], 1, 1, "no nodes");
        refuses(vec![Node::Leaf { class: 3 }], 1, 2, "class 3");
        refuses(
            vec![split(0, 1.0, 0, 1), leaf()],
            1,
            1,
            "child 0 out of order",
        );
        refuses(vec![split(0, 1.0, 1, 7), leaf()], 1, 1, "child 7 out of");
        refuses(vec![split(5, 1.0, 1, 2), leaf(), leaf()], 2, 1, "feature 5");
        refuses(vec![split(0, 1.0, 1, 1), leaf()], 1, 1, "2 parents");
        refuses(
            vec![split(0, f64::NAN, 1, 2), leaf(), leaf()],
            1,
            1,
            "NaN cut",
        );
    }
}
