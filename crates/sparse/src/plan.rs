//! The names of the kernels a plan can choose from, and the plan itself: a
//! binning scheme plus one kernel per non-empty bin. (Only names live here; the
//! OpenCL code behind each name belongs to the engine.)

use crate::{Binning, Scheme, SparseError};
use std::fmt;
use std::str::FromStr;

/// One kernel of the pool, by thread mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KernelId {
    /// One work-item per row.
    Serial,
    /// X work-items per row (X in 2, 4, ..., 128), reduction in local memory.
    Subvector(u32),
    /// One work-group of 256 work-items per row.
    Vector,
    /// CSR-Adaptive (paper 003): CSR-Stream, CSR-Vector and CSR-VectorL over row blocks.
    CsrAdaptive,
    /// Load-balanced over the nonzero space (merge path, paper 001's idea).
    MergePath,
    /// Merge path in work-group tiles: coalesced loads into local memory, carries
    /// combined by segmented scans (added after the first trained models: a model
    /// whose kernel list lacks it never picks it).
    MergeTile,
    /// Merge path in one launch: tiles whose start coordinates are computed
    /// when the plan is prepared, coalesced staging, rows that cross tiles
    /// finished by the last work-group to arrive (added after the first GPU
    /// models, which never pick it).
    MergeOne,
}

impl KernelId {
    /// The subvector widths of the paper.
    pub const SUBVECTOR_WIDTHS: [u32; 7] = [2, 4, 8, 16, 32, 64, 128];

    /// The paper's nine kernels: serial, subvector-2..128, vector.
    pub fn paper_nine() -> Vec<KernelId> {
        let mut v = vec![KernelId::Serial];
        v.extend(
            Self::SUBVECTOR_WIDTHS
                .iter()
                .map(|&x| KernelId::Subvector(x)),
        );
        v.push(KernelId::Vector);
        v
    }

    /// Every kernel of the pool.
    pub fn all() -> Vec<KernelId> {
        let mut v = Self::paper_nine();
        v.push(KernelId::CsrAdaptive);
        v.push(KernelId::MergePath);
        v.push(KernelId::MergeTile);
        v.push(KernelId::MergeOne);
        v
    }

    /// The kernel's name, as printed by the CLI and stored in databases and models.
    pub fn name(self) -> String {
        match self {
            KernelId::Serial => "serial".into(),
            KernelId::Subvector(x) => format!("subvector{x}"),
            KernelId::Vector => "vector".into(),
            KernelId::CsrAdaptive => "csr_adaptive".into(),
            KernelId::MergePath => "merge_path".into(),
            KernelId::MergeTile => "merge_tile".into(),
            KernelId::MergeOne => "merge_one".into(),
        }
    }

    /// The kernel's family: `serial`, `subvector`, `vector`, `csr_adaptive`, `merge_path`,
    /// `merge_tile`, `merge_one`.
    pub fn family(self) -> &'static str {
        match self {
            KernelId::Serial => "serial",
            KernelId::Subvector(_) => "subvector",
            KernelId::Vector => "vector",
            KernelId::CsrAdaptive => "csr_adaptive",
            KernelId::MergePath => "merge_path",
            KernelId::MergeTile => "merge_tile",
            KernelId::MergeOne => "merge_one",
        }
    }

    /// Position in [`KernelId::all`], usable as a class label.
    pub fn index(self) -> usize {
        Self::all()
            .iter()
            .position(|&k| k == self)
            .expect("every kernel is in all()")
    }
}

impl fmt::Display for KernelId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

impl FromStr for KernelId {
    type Err = SparseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim().to_ascii_lowercase().replace('-', "_");
        KernelId::all()
            .into_iter()
            .find(|k| k.name() == t || k.name().replace('_', "") == t.replace('_', ""))
            .ok_or_else(|| {
                SparseError::InvalidParameter(format!(
                    "unknown kernel '{s}'; known: {}",
                    KernelId::all()
                        .iter()
                        .map(|k| k.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })
    }
}

impl serde::Serialize for KernelId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.name())
    }
}

impl<'de> serde::Deserialize<'de> for KernelId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A binning scheme plus the kernel chosen for each non-empty bin.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Plan {
    /// How rows are split into bins.
    pub scheme: Scheme,
    /// `(bin, kernel)` for each non-empty bin, by increasing bin.
    pub kernels: Vec<(usize, KernelId)>,
}

impl Plan {
    /// The same kernel on every non-empty bin of `binning`.
    pub fn uniform(binning: &Binning, kernel: KernelId) -> Plan {
        Plan {
            scheme: binning.scheme,
            kernels: binning.nonempty_bins().map(|b| (b, kernel)).collect(),
        }
    }

    /// One kernel on the whole matrix (the single-bin scheme).
    pub fn single(kernel: KernelId) -> Plan {
        Plan {
            scheme: Scheme::Single,
            kernels: vec![(0, kernel)],
        }
    }

    /// The kernel assigned to bin `b`, if any.
    pub fn kernel_of(&self, b: usize) -> Option<KernelId> {
        self.kernels
            .iter()
            .find(|(bin, _)| *bin == b)
            .map(|(_, k)| *k)
    }

    /// Checks that the plan fits `binning`: same scheme, and exactly one kernel for
    /// every non-empty bin (kernels for empty bins are allowed and ignored).
    pub fn check(&self, binning: &Binning) -> Result<(), SparseError> {
        if self.scheme != binning.scheme {
            return Err(SparseError::InvalidParameter(format!(
                "plan is for scheme {} but the binning is for {}",
                self.scheme, binning.scheme
            )));
        }
        for b in binning.nonempty_bins() {
            let n = self.kernels.iter().filter(|(bin, _)| *bin == b).count();
            if n != 1 {
                return Err(SparseError::InvalidParameter(format!(
                    "plan assigns {n} kernels to non-empty bin {b}; exactly one is needed"
                )));
            }
        }
        if let Some((b, _)) = self.kernels.iter().find(|(b, _)| *b >= binning.num_bins()) {
            return Err(SparseError::InvalidParameter(format!(
                "plan names bin {b} but the scheme has {} bins",
                binning.num_bins()
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        assert_eq!(KernelId::all().len(), 13);
        for k in KernelId::all() {
            assert_eq!(k.name().parse::<KernelId>().unwrap(), k);
            assert_eq!(KernelId::all()[k.index()], k);
        }
        assert!("subvector3".parse::<KernelId>().is_err());
    }

    #[test]
    fn plan_check() {
        let rp = [0u32, 1, 3, 3, 10];
        let b = Binning::new(&rp, Scheme::Granularity(1));
        let p = Plan::uniform(&b, KernelId::Serial);
        p.check(&b).unwrap();
        let mut q = p.clone();
        q.kernels.pop();
        assert!(q.check(&b).is_err());
        assert!(Plan::single(KernelId::Vector).check(&b).is_err());
        let json = serde_json::to_string(&p).unwrap();
        assert_eq!(serde_json::from_str::<Plan>(&json).unwrap(), p);
    }
}
