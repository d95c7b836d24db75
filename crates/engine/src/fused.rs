//! One launch for a plan's row-mapped bins (`LaunchMode::Fused`): the
//! descriptor table `kernels/fused.cl` reads, built on the host when the plan
//! is prepared.

use crate::error::{EngineError, Result};
use crate::prepared::RowSet;
use sparse::KernelId;

/// Whether `kernel` maps lanes onto whole rows (serial, subvector-X, vector),
/// what a fused launch can run.
pub(crate) fn row_mapped(kernel: KernelId) -> bool {
    matches!(
        kernel,
        KernelId::Serial | KernelId::Subvector(_) | KernelId::Vector
    )
}

/// log2 of the lanes per row `kernel` gives a row in a work-group of `wg`
/// work-items: 0 for serial, log2(X) for subvector-X, log2(`wg`) for vector
/// (one row per work-group).
pub(crate) fn lanes_log2(kernel: KernelId, wg: usize) -> Result<u32> {
    let lanes = match kernel {
        KernelId::Serial => 1,
        KernelId::Subvector(x) => x as usize,
        KernelId::Vector => wg,
        other => {
            return Err(EngineError::InvalidPlan(format!(
                "{} does not map lanes onto rows: it cannot be fused",
                other.name()
            )))
        }
    };
    if !lanes.is_power_of_two() || lanes > wg {
        return Err(EngineError::InvalidPlan(format!(
            "{} needs {lanes} lanes per row, not a power of two at most the work-group size {wg}",
            kernel.name()
        )));
    }
    Ok(lanes.trailing_zeros())
}

/// The descriptor table of one fused launch.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct FusedTable {
    /// Two u32 per work-group: the position of its first row in `rows`,
    /// then (its row count << 8) | log2(lanes per row).
    pub(crate) desc: Vec<u32>,
    /// The rows, work-group after work-group.
    pub(crate) rows: Vec<u32>,
}

impl FusedTable {
    /// Work-groups of `wg` work-items over each `(kernel, rows)` group:
    /// `wg >> log2(lanes)` rows each, in row order within a group, the groups
    /// with the most lanes per row first (the heaviest rows start first).
    pub(crate) fn build(groups: &[(KernelId, &RowSet)], wg: usize) -> Result<FusedTable> {
        let mut order = Vec::with_capacity(groups.len());
        for (i, &(k, _)) in groups.iter().enumerate() {
            order.push((lanes_log2(k, wg)?, i));
        }
        // Stable: equal widths keep the plan's order.
        order.sort_by_key(|&(shift, i)| (std::cmp::Reverse(shift), i));
        let total: usize = groups.iter().map(|(_, r)| r.len()).sum();
        if total > u32::MAX as usize {
            return Err(EngineError::InvalidPlan(format!(
                "a fused launch over {total} rows"
            )));
        }
        let mut t = FusedTable {
            desc: Vec::new(),
            rows: Vec::with_capacity(total),
        };
        for (shift, i) in order {
            let rows = groups[i].1;
            let per = (wg >> shift).max(1);
            let n = rows.len();
            let mut start = 0;
            while start < n {
                let count = per.min(n - start);
                t.desc.push(t.rows.len() as u32);
                t.desc.push(((count as u32) << 8) | shift);
                t.rows.extend((start..start + count).map(|j| rows.row(j)));
                start += count;
            }
        }
        Ok(t)
    }

    /// Work-groups of the launch.
    pub(crate) fn groups(&self) -> usize {
        self.desc.len() / 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every row of every group lands in exactly one work-group, with its
    /// group's lanes, no work-group holds more rows than its lanes allow, and
    /// the widest groups come first: checked against a plain walk.
    #[test]
    fn descriptors_cover_every_row_once_with_its_lanes() {
        let wg = 64;
        let a = RowSet::List(vec![0, 3, 4, 9]);
        let b = RowSet::Range { base: 10, n: 150 };
        let c = RowSet::List((200..330).step_by(3).collect());
        let d = RowSet::Range { base: 400, n: 0 };
        let groups = [
            (KernelId::Serial, &b),
            (KernelId::Vector, &a),
            (KernelId::Subvector(8), &c),
            (KernelId::Subvector(2), &d),
        ];
        let t = FusedTable::build(&groups, wg).unwrap();
        let mut seen: Vec<(u32, u32)> = Vec::new();
        let mut last_shift = u32::MAX;
        for g in 0..t.groups() {
            let (first, word) = (t.desc[2 * g] as usize, t.desc[2 * g + 1]);
            let (n, shift) = ((word >> 8) as usize, word & 0xff);
            assert!(
                n >= 1 && n <= wg >> shift,
                "group {g}: {n} rows, shift {shift}"
            );
            assert!(shift <= last_shift, "widest first");
            last_shift = shift;
            for &r in &t.rows[first..first + n] {
                seen.push((r, shift));
            }
        }
        let mut want: Vec<(u32, u32)> = Vec::new();
        for (k, rows) in groups {
            let s = lanes_log2(k, wg).unwrap();
            want.extend((0..rows.len()).map(|j| (rows.row(j), s)));
        }
        seen.sort_unstable();
        want.sort_unstable();
        assert_eq!(seen, want);
        // 4 vector rows (one each), 44 subvector-8 rows (8 per group), 150
        // serial rows (64 per group).
        assert_eq!(t.groups(), 4 + 6 + 3);
    }

    #[test]
    fn kernels_that_do_not_map_rows_are_refused() {
        let r = RowSet::Range { base: 0, n: 3 };
        assert!(FusedTable::build(&[(KernelId::CsrAdaptive, &r)], 64).is_err());
        assert!(FusedTable::build(&[(KernelId::Subvector(128), &r)], 64).is_err());
        assert_eq!(lanes_log2(KernelId::Vector, 128).unwrap(), 7);
    }
}
