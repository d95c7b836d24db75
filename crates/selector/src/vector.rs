//! The two feature-vector layouts of the model: stage 1 (matrix features, which
//! decide the binning scheme U) and stage 2 (matrix features, U, the bin id and
//! features of the bin, which decide the bin's kernel), and the monotone
//! transform the trees see.
//!
//! Both layouts are fixed lists of names; a model stores them in its card and
//! refuses to load when they differ from this build's ([`STAGE1_FEATURES`],
//! [`STAGE2_FEATURES`]).

use sparse::{BinSizes, Binning, Features, Scheme, FEATURE_NAMES};

/// Stage-1 feature names: exactly [`sparse::FEATURE_NAMES`], in that order.
pub const STAGE1_FEATURES: [&str; FEATURE_NAMES.len()] = FEATURE_NAMES;

/// The per-bin features appended to the stage-1 features for stage 2.
///
/// | name | meaning |
/// |---|---|
/// | `scheme_u` | [`sparse::Scheme::code`]: U, or 0 for the single-bin scheme |
/// | `bin` | the bin id (0..=99; 0 for the single-bin scheme) |
/// | `bin_mean_row_len` | the bin's nonzeros / its rows (0 for an empty bin) |
/// | `bin_mean_over_matrix_mean` | `bin_mean_row_len` / the matrix's mean row length (0 when that is 0) |
/// | `bin_log2_rows` | log2 of the bin's row count (0 for 0 or 1 row) |
/// | `bin_log2_nnz` | log2 of the bin's nonzeros (0 for 0 or 1) |
/// | `bin_row_share` | the bin's rows / the matrix's rows |
/// | `bin_nnz_share` | the bin's nonzeros / the matrix's nonzeros |
///
/// The kernel choice depends mostly on the row length the kernel will see, which the
/// bin id only bounds for a given U; `bin_mean_row_len` gives it directly.
pub const STAGE2_EXTRA: [&str; 8] = [
    "scheme_u",
    "bin",
    "bin_mean_row_len",
    "bin_mean_over_matrix_mean",
    "bin_log2_rows",
    "bin_log2_nnz",
    "bin_row_share",
    "bin_nnz_share",
];

/// Length of the stage-2 vector.
pub const STAGE2_LEN: usize = STAGE1_FEATURES.len() + STAGE2_EXTRA.len();

/// Stage-2 feature names: [`STAGE1_FEATURES`] followed by [`STAGE2_EXTRA`].
pub const STAGE2_FEATURES: [&str; STAGE2_LEN] = concat_names();

const fn concat_names() -> [&'static str; STAGE2_LEN] {
    let mut out = [""; STAGE2_LEN];
    let mut i = 0;
    while i < STAGE1_FEATURES.len() {
        out[i] = STAGE1_FEATURES[i];
        i += 1;
    }
    let mut j = 0;
    while j < STAGE2_EXTRA.len() {
        out[i + j] = STAGE2_EXTRA[j];
        j += 1;
    }
    out
}

/// The stage-1 vector of a matrix (order [`STAGE1_FEATURES`]). A `Features` value
/// of another length (built by hand) is cut or padded with zeros.
pub fn stage1_vector(f: &Features) -> Vec<f64> {
    let mut v = f.values.clone();
    v.resize(STAGE1_FEATURES.len(), 0.0);
    v
}

/// The stage-2 vector of bin `bin` of `binning` (order [`STAGE2_FEATURES`]).
/// A bin id outside the binning is treated as an empty bin.
pub fn stage2_vector(f: &Features, binning: &Binning, bin: usize) -> Vec<f64> {
    let (rows, nnz) = if bin < binning.num_bins() {
        (binning.row_count(bin) as f64, binning.bin_nnz[bin] as f64)
    } else {
        (0.0, 0.0)
    };
    stage2_of(f, (binning.scheme, binning.nrows), bin, (rows, nnz))
}

/// [`stage2_vector`] from the bins' sizes alone (the same values: the
/// selector chooses kernels before it knows whether the lists are needed).
pub(crate) fn stage2_vector_sized(f: &Features, sizes: &BinSizes, bin: usize) -> Vec<f64> {
    let (rows, nnz) = match (sizes.rows.get(bin), sizes.nnz.get(bin)) {
        (Some(&r), Some(&n)) => (r as f64, n as f64),
        _ => (0.0, 0.0),
    };
    stage2_of(f, (sizes.scheme, sizes.nrows), bin, (rows, nnz))
}

/// The stage-2 vector of bin `bin` holding `rows` rows and `nnz` nonzeros
/// of a matrix of `nrows` rows binned under `scheme`.
fn stage2_of(
    f: &Features,
    (scheme, nrows): (Scheme, usize),
    bin: usize,
    (rows, nnz): (f64, f64),
) -> Vec<f64> {
    let mut v = stage1_vector(f);
    let mean_len = if rows > 0.0 { nnz / rows } else { 0.0 };
    let matrix_mean = feature(f, "nnz_row_mean");
    let total_rows = nrows as f64;
    let total_nnz = feature(f, "nnz");
    v.extend([
        scheme.code() as f64,
        bin as f64,
        mean_len,
        if matrix_mean > 0.0 {
            mean_len / matrix_mean
        } else {
            0.0
        },
        rows.max(1.0).log2(),
        nnz.max(1.0).log2(),
        if total_rows > 0.0 {
            rows / total_rows
        } else {
            0.0
        },
        if total_nnz > 0.0 {
            nnz / total_nnz
        } else {
            0.0
        },
    ]);
    v
}

/// The value of a named stage-1 feature; 0 when the name is unknown or the vector
/// is too short (unlike `Features::get`, never panics on a hand-made `Features`).
pub fn feature(f: &Features, name: &str) -> f64 {
    STAGE1_FEATURES
        .iter()
        .position(|n| *n == name)
        .and_then(|i| f.values.get(i).copied())
        .unwrap_or(0.0)
}

/// Scale of [`spread`]: values of `1 / SPREAD_SCALE` map to 1.
const SPREAD_SCALE: f64 = (1u64 << 30) as f64;

/// The monotone transform applied to every feature before the trees see it:
/// `sign(x) * log2(1 + |x| * 2^30)`.
///
/// Why: linfa-trees 0.8.1 treats two sorted neighbouring values as equal (and never
/// splits between them) when they differ by less than an *absolute* 1e-5. Many of
/// our features are small fractions (`density` is often 1e-7, histogram shares and
/// column spreads can be 1e-6), so the raw values could never be split. After this
/// transform, two values can be split whenever they differ by more than about
/// 7 parts per million relatively, at any scale from 1e-9 to 1e15. A monotone
/// transform does not change which partitions a tree can express, only where it
/// is able to cut.
pub fn spread(x: f64) -> f64 {
    x.signum() * (1.0 + x.abs() * SPREAD_SCALE).log2()
}

/// Inverse of [`spread`], used to report thresholds in the feature's own units.
pub fn unspread(t: f64) -> f64 {
    if t == 0.0 {
        return 0.0;
    }
    t.signum() * (t.abs().exp2() - 1.0) / SPREAD_SCALE
}

#[cfg(test)]
mod tests {
    use super::*;
    use sparse::{Csr, Scheme};

    #[test]
    fn layouts() {
        assert_eq!(
            &STAGE2_FEATURES[..STAGE1_FEATURES.len()],
            &STAGE1_FEATURES[..]
        );
        assert_eq!(&STAGE2_FEATURES[STAGE1_FEATURES.len()..], &STAGE2_EXTRA[..]);
        let mut names: Vec<_> = STAGE2_FEATURES.to_vec();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), STAGE2_LEN, "feature names are unique");
    }

    #[test]
    fn stage2_by_hand() {
        // Row lengths 1, 1, 6, 8 with U = 2: virtual rows {0,1} (2 nnz, bin 1), {2,3} (14 nnz, bin 7).
        let rp = vec![0u32, 1, 2, 8, 16];
        let ci: Vec<u32> = vec![0, 1, 0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5, 6, 7];
        let a = Csr::<f64>::try_new(4, 8, rp.clone(), ci, vec![1.0; 16]).unwrap();
        let f = Features::of(&a);
        let b = Binning::new(&rp, Scheme::Granularity(2));
        let v = stage2_vector(&f, &b, 7);
        assert_eq!(v.len(), STAGE2_LEN);
        let get = |name: &str| v[STAGE2_FEATURES.iter().position(|n| *n == name).unwrap()];
        assert_eq!(get("nnz"), 16.0);
        assert_eq!(get("scheme_u"), 2.0);
        assert_eq!(get("bin"), 7.0);
        assert_eq!(get("bin_mean_row_len"), 7.0);
        assert_eq!(get("bin_mean_over_matrix_mean"), 7.0 / 4.0);
        assert_eq!(get("bin_log2_rows"), 1.0);
        assert_eq!(get("bin_log2_nnz"), 14f64.log2());
        assert_eq!(get("bin_row_share"), 0.5);
        assert_eq!(get("bin_nnz_share"), 14.0 / 16.0);
        // An out-of-range bin is an empty one, not a panic.
        let e = stage2_vector(&f, &b, 500);
        assert_eq!(e[STAGE1_FEATURES.len() + 2], 0.0);
        // The single-bin scheme codes U as 0.
        let s = stage2_vector(&f, &Binning::new(&rp, Scheme::Single), 0);
        assert_eq!(s[STAGE1_FEATURES.len()], 0.0);
        assert_eq!(s[STAGE1_FEATURES.len() + 2], 4.0);
    }

    #[test]
    fn spread_is_monotone_and_invertible() {
        let xs = [-5.0, -1e-7, 0.0, 1e-9, 2e-9, 1e-7, 0.5, 1.0, 2.0, 1e6, 1e12];
        for w in xs.windows(2) {
            assert!(spread(w[0]) < spread(w[1]), "{} {}", w[0], w[1]);
        }
        for x in xs {
            let back = unspread(spread(x));
            assert!(
                (back - x).abs() <= 1e-9 * x.abs().max(1e-9),
                "{x} -> {back}"
            );
        }
        // Values 1e-7 apart near 1e-7 end up more than linfa's 1e-5 apart.
        assert!(spread(2e-7) - spread(1e-7) > 1e-3);
    }
}
