//! Seeded synthetic matrix generators for corpus building, tests and benchmarks.
//!
//! Every generator builds the CSR arrays directly (rows sorted, no duplicates, so
//! [`Csr::try_new`] accepts them as they are) and is deterministic for a seed: the
//! same arguments give the same matrix on every machine and thread count. Random
//! generators draw rows in fixed chunks, each chunk from its own ChaCha8 stream
//! derived from the seed, so generation runs in parallel without losing that.
//!
//! Values are random in `[-1, -0.01] ∪ [0.01, 1]` (never zero) except for the
//! stencils, which carry the usual Laplacian coefficients.
//!
//! [`Family`] lists the generator families by name so that a trainer can iterate
//! over them, and [`Family::generate`] builds any of them near a nonzero target.
//! The stand-in generator that imitates SuiteSparse collection matrices from
//! their statistics lives in [`standin`].

pub mod standin;

use crate::{Csr, SparseError};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use std::fmt;
use std::str::FromStr;

/// Rows per independently seeded chunk in parallel generation.
const CHUNK_ROWS: usize = 2048;

/// A ChaCha8 generator for `seed` on stream `stream` (streams are independent).
pub(crate) fn rng_for(seed: u64, stream: u64) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(stream);
    rng
}

/// A random value in `[-1, -0.01] ∪ [0.01, 1]`: never zero, so a stored entry is
/// always a true nonzero.
#[inline]
pub(crate) fn random_value<R: Rng>(rng: &mut R) -> f64 {
    let magnitude: f64 = rng.gen_range(0.01..=1.0);
    if rng.gen::<bool>() {
        magnitude
    } else {
        -magnitude
    }
}

fn invalid(message: impl Into<String>) -> SparseError {
    SparseError::InvalidParameter(message.into())
}

/// Writes `k` distinct sorted columns drawn uniformly from `[0, n)` into `out`
/// (cleared first). Dense requests use selection sampling (one pass over `n`);
/// sparse ones draw, sort and deduplicate until `k` distinct columns are found.
pub(crate) fn sample_distinct<R: Rng>(rng: &mut R, k: usize, n: usize, out: &mut Vec<u32>) {
    out.clear();
    assert!(k <= n, "cannot draw {k} distinct columns out of {n}");
    if k == 0 {
        return;
    }
    if k == n {
        out.extend(0..n as u32);
        return;
    }
    if k * 4 >= n {
        let mut needed = k;
        for j in 0..n {
            if rng.gen_range(0..n - j) < needed {
                out.push(j as u32);
                needed -= 1;
                if needed == 0 {
                    break;
                }
            }
        }
        return;
    }
    while out.len() < k {
        let missing = k - out.len();
        for _ in 0..missing {
            out.push(rng.gen_range(0..n as u32));
        }
        out.sort_unstable();
        out.dedup();
    }
}

/// Walker's alias table: draws an index with probability proportional to its
/// weight in O(1) (one uniform index, one uniform number).
pub(crate) struct Alias {
    prob: Vec<f64>,
    alias: Vec<u32>,
    total: f64,
}

impl Alias {
    /// Builds the table (Vose's construction) for non-negative weights.
    pub(crate) fn new(weights: &[f64]) -> Alias {
        let n = weights.len();
        let total: f64 = weights.iter().sum();
        let mut prob: Vec<f64> = if total > 0.0 {
            weights.iter().map(|&w| w * n as f64 / total).collect()
        } else {
            vec![1.0; n]
        };
        let mut alias: Vec<u32> = (0..n as u32).collect();
        let (mut small, mut large): (Vec<u32>, Vec<u32>) =
            (0..n as u32).partition(|&i| prob[i as usize] < 1.0);
        while let (Some(&s), Some(&l)) = (small.last(), large.last()) {
            small.pop();
            alias[s as usize] = l;
            prob[l as usize] -= 1.0 - prob[s as usize];
            if prob[l as usize] < 1.0 {
                large.pop();
                small.push(l);
            }
        }
        // Leftovers are 1 up to rounding.
        for i in small.into_iter().chain(large) {
            prob[i as usize] = 1.0;
        }
        Alias { prob, alias, total }
    }

    /// Number of indices.
    pub(crate) fn len(&self) -> usize {
        self.prob.len()
    }

    /// One weighted draw.
    #[inline]
    pub(crate) fn sample<R: Rng>(&self, rng: &mut R) -> u32 {
        let i = rng.gen_range(0..self.prob.len());
        if rng.gen::<f64>() < self.prob[i] {
            i as u32
        } else {
            self.alias[i]
        }
    }
}

/// Writes `k` distinct sorted columns drawn with probability proportional to the
/// column weights of `table`. When the weights are too concentrated to give `k`
/// distinct columns in a few rounds, the rest are drawn uniformly among the
/// columns not taken; rows of at least a quarter of the columns are uniform.
pub(crate) fn sample_weighted_distinct<R: Rng>(
    rng: &mut R,
    k: usize,
    table: &Alias,
    out: &mut Vec<u32>,
    scratch: &mut Vec<u32>,
) {
    let n = table.len();
    out.clear();
    assert!(k <= n, "cannot draw {k} distinct columns out of {n}");
    if k == 0 {
        return;
    }
    if k * 4 >= n || table.total <= 0.0 {
        sample_distinct(rng, k, n, out);
        return;
    }
    for _round in 0..6 {
        let missing = k - out.len();
        if missing == 0 {
            return;
        }
        for _ in 0..missing {
            out.push(table.sample(rng));
        }
        out.sort_unstable();
        out.dedup();
    }
    // Fill the remainder uniformly from the columns not yet chosen: draw ranks
    // among the free columns, then map each rank past the taken ones.
    let missing = k - out.len();
    if missing == 0 {
        return;
    }
    let free = n - out.len();
    sample_distinct(rng, missing, free, scratch);
    let mut merged = Vec::with_capacity(k);
    let (mut t, mut shift) = (0usize, 0u32);
    for &rank in scratch.iter() {
        // Advance past every taken column at or below rank + shift.
        while t < out.len() && out[t] <= rank + shift {
            merged.push(out[t]);
            t += 1;
            shift += 1;
        }
        merged.push(rank + shift);
    }
    merged.extend_from_slice(&out[t..]);
    *out = merged;
}

/// Builds a matrix from row lengths, filling each row in parallel chunks.
///
/// `fill(row, len, rng, cols)` must write exactly `len` sorted distinct columns
/// below `ncols` into `cols`; values are drawn by [`random_value`] from the same
/// per-chunk stream.
pub(crate) fn build_rows<F>(
    nrows: usize,
    ncols: usize,
    lengths: &[u32],
    seed: u64,
    fill: F,
) -> Result<Csr<f64>, SparseError>
where
    F: Fn(usize, usize, &mut ChaCha8Rng, &mut Vec<u32>) + Sync,
{
    assert_eq!(lengths.len(), nrows);
    let mut row_ptr = Vec::with_capacity(nrows + 1);
    row_ptr.push(0u32);
    let mut total = 0u64;
    for &l in lengths {
        total += l as u64;
        if total > crate::MAX_DIM as u64 {
            return Err(SparseError::TooLarge {
                what: "nnz",
                value: lengths.iter().map(|&l| l as u64).sum(),
                max: crate::MAX_DIM as u64,
            });
        }
        row_ptr.push(total as u32);
    }
    let nnz = total as usize;
    let mut col_idx = vec![0u32; nnz];
    let mut values = vec![0f64; nnz];
    // Split the output arrays at chunk boundaries so chunks write disjoint slices.
    let mut pieces = Vec::with_capacity(nrows.div_ceil(CHUNK_ROWS));
    let (mut cols_rest, mut vals_rest) = (col_idx.as_mut_slice(), values.as_mut_slice());
    for (chunk, start) in (0..nrows).step_by(CHUNK_ROWS).enumerate() {
        let end = (start + CHUNK_ROWS).min(nrows);
        let len = (row_ptr[end] - row_ptr[start]) as usize;
        let (c, cr) = cols_rest.split_at_mut(len);
        let (v, vr) = vals_rest.split_at_mut(len);
        cols_rest = cr;
        vals_rest = vr;
        pieces.push((chunk, start, end, c, v));
    }
    pieces
        .into_par_iter()
        .for_each(|(chunk, start, end, cols, vals)| {
            let mut rng = rng_for(seed, chunk as u64 + 1);
            let mut row_cols = Vec::new();
            let mut offset = 0usize;
            for (r, &len) in lengths.iter().enumerate().take(end).skip(start) {
                let len = len as usize;
                fill(r, len, &mut rng, &mut row_cols);
                debug_assert_eq!(row_cols.len(), len, "row {r}");
                cols[offset..offset + len].copy_from_slice(&row_cols);
                for v in &mut vals[offset..offset + len] {
                    *v = random_value(&mut rng);
                }
                offset += len;
            }
        });
    Csr::try_new(nrows, ncols, row_ptr, col_idx, values)
}

/// Stencil matrix on a grid with the given neighbour offsets (in grid steps).
fn stencil(dims: [usize; 3], offsets: &[[i64; 3]], diag: f64) -> Result<Csr<f64>, SparseError> {
    let [nx, ny, nz] = dims;
    if nx == 0 || ny == 0 || nz == 0 {
        return Err(invalid(format!(
            "stencil grid {nx} x {ny} x {nz} has an empty side"
        )));
    }
    let n = nx
        .checked_mul(ny)
        .and_then(|v| v.checked_mul(nz))
        .filter(|&n| n <= crate::MAX_DIM)
        .ok_or(SparseError::TooLarge {
            what: "rows",
            value: (nx as u64)
                .saturating_mul(ny as u64)
                .saturating_mul(nz as u64),
            max: crate::MAX_DIM as u64,
        })?;
    // Offsets sorted by their linear index so that rows come out sorted.
    let mut offs: Vec<[i64; 3]> = offsets.to_vec();
    offs.sort_by_key(|o| o[2] * (nx * ny) as i64 + o[1] * nx as i64 + o[0]);
    let mut row_ptr = Vec::with_capacity(n + 1);
    let mut col_idx = Vec::with_capacity(n * offs.len());
    let mut values = Vec::with_capacity(n * offs.len());
    row_ptr.push(0u32);
    for z in 0..nz as i64 {
        for y in 0..ny as i64 {
            for x in 0..nx as i64 {
                for o in &offs {
                    let (xx, yy, zz) = (x + o[0], y + o[1], z + o[2]);
                    if xx < 0
                        || yy < 0
                        || zz < 0
                        || xx >= nx as i64
                        || yy >= ny as i64
                        || zz >= nz as i64
                    {
                        continue;
                    }
                    let c = (zz as usize * ny + yy as usize) * nx + xx as usize;
                    col_idx.push(c as u32);
                    values.push(if *o == [0, 0, 0] { diag } else { -1.0 });
                }
                if col_idx.len() > crate::MAX_DIM {
                    return Err(SparseError::TooLarge {
                        what: "nnz",
                        value: col_idx.len() as u64,
                        max: crate::MAX_DIM as u64,
                    });
                }
                row_ptr.push(col_idx.len() as u32);
            }
        }
    }
    Csr::try_new(n, n, row_ptr, col_idx, values)
}

/// The 5-point Laplacian on an `nx x ny` grid: diagonal 4, neighbours -1; rows
/// hold 3 (corners) to 5 (interior) entries. Row `y * nx + x` is point `(x, y)`.
pub fn stencil_2d(nx: usize, ny: usize) -> Result<Csr<f64>, SparseError> {
    stencil(
        [nx, ny, 1],
        &[[0, 0, 0], [-1, 0, 0], [1, 0, 0], [0, -1, 0], [0, 1, 0]],
        4.0,
    )
}

/// Which neighbours a 3D stencil couples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stencil3d {
    /// The 6 face neighbours and the point itself (rows of 4 to 7 entries).
    Point7,
    /// The whole 3x3x3 cube around the point (rows of 8 to 27 entries).
    Point27,
}

/// A 3D Laplacian-like stencil on an `nx x ny x nz` grid (diagonal = number of
/// neighbours of an interior point, neighbours -1). Row `(z * ny + y) * nx + x`.
pub fn stencil_3d(
    nx: usize,
    ny: usize,
    nz: usize,
    kind: Stencil3d,
) -> Result<Csr<f64>, SparseError> {
    match kind {
        Stencil3d::Point7 => stencil(
            [nx, ny, nz],
            &[
                [0, 0, 0],
                [-1, 0, 0],
                [1, 0, 0],
                [0, -1, 0],
                [0, 1, 0],
                [0, 0, -1],
                [0, 0, 1],
            ],
            6.0,
        ),
        Stencil3d::Point27 => {
            let mut offs = Vec::with_capacity(27);
            for dz in -1..=1 {
                for dy in -1..=1 {
                    for dx in -1..=1 {
                        offs.push([dx, dy, dz]);
                    }
                }
            }
            stencil([nx, ny, nz], &offs, 26.0)
        }
    }
}

/// `nrows x ncols` with exactly `per_row` distinct uniformly random columns in
/// every row (`per_row <= ncols`).
pub fn uniform_random(
    nrows: usize,
    ncols: usize,
    per_row: usize,
    seed: u64,
) -> Result<Csr<f64>, SparseError> {
    if per_row > ncols {
        return Err(invalid(format!(
            "per_row = {per_row} exceeds ncols = {ncols}"
        )));
    }
    let lengths = vec![per_row as u32; nrows];
    build_rows(nrows, ncols, &lengths, seed, |_, len, rng, cols| {
        sample_distinct(rng, len, ncols, cols)
    })
}

/// Zipf-like weights `(rank + 1)^-exponent` over a random permutation of `n` slots.
fn zipf_weights(n: usize, exponent: f64, rng: &mut ChaCha8Rng) -> Vec<f64> {
    let mut w: Vec<f64> = (0..n).map(|i| ((i + 1) as f64).powf(-exponent)).collect();
    w.shuffle(rng);
    w
}

/// Scales weights to integer lengths with the given total (stochastic rounding),
/// each clamped to `[lo, hi]`.
fn lengths_from_weights(w: &[f64], total: f64, lo: u32, hi: u32, rng: &mut ChaCha8Rng) -> Vec<u32> {
    let sum: f64 = w.iter().sum();
    w.iter()
        .map(|&x| {
            let v = x * total / sum;
            let l = v.floor()
                + if rng.gen::<f64>() < v.fract() {
                    1.0
                } else {
                    0.0
                };
            (l as u32).clamp(lo, hi)
        })
        .collect()
}

/// A square power-law (Chung-Lu style) matrix: row lengths follow Zipf weights
/// `rank^-0.7` over a random row order, scaled to `avg_degree` on average (each
/// row at least 1, at most `n`), and columns are drawn with probability following
/// an independent Zipf weighting, so a few columns are very popular too.
pub fn power_law(n: usize, avg_degree: f64, seed: u64) -> Result<Csr<f64>, SparseError> {
    if n == 0 || avg_degree.is_nan() || avg_degree < 1.0 || avg_degree > n as f64 {
        return Err(invalid(format!(
            "power_law needs n >= 1 and 1 <= avg_degree <= n (n = {n}, avg_degree = {avg_degree})"
        )));
    }
    let mut rng = rng_for(seed, 0);
    let row_w = zipf_weights(n, 0.7, &mut rng);
    let lengths = lengths_from_weights(&row_w, avg_degree * n as f64, 1, n as u32, &mut rng);
    let col_table = Alias::new(&zipf_weights(n, 0.7, &mut rng));
    build_rows(n, n, &lengths, seed, |_, len, rng, cols| {
        let mut scratch = Vec::new();
        sample_weighted_distinct(rng, len, &col_table, cols, &mut scratch)
    })
}

/// A road-network-like symmetric pattern on `n` nodes laid out on a grid of width
/// `ceil(sqrt(n))`: each node keeps each of its (up to 4) grid edges with
/// probability 0.65, and a node left isolated gets one edge back, so rows hold 1
/// to 4 entries (no diagonal) whose columns are local neighbours.
pub fn road_like(n: usize, seed: u64) -> Result<Csr<f64>, SparseError> {
    if n < 2 {
        return Err(invalid(format!(
            "road_like needs at least 2 nodes, got {n}"
        )));
    }
    let w = (n as f64).sqrt().ceil() as usize;
    let mut rng = rng_for(seed, 0);
    // right[i]: edge i -- i+1; down[i]: edge i -- i+w.
    let mut right = vec![false; n];
    let mut down = vec![false; n];
    for i in 0..n {
        right[i] = (i + 1) % w != 0 && i + 1 < n && rng.gen_bool(0.65);
        down[i] = i + w < n && rng.gen_bool(0.65);
    }
    let has_edge = |i: usize, right: &[bool], down: &[bool]| {
        right[i] || down[i] || (!i.is_multiple_of(w) && right[i - 1]) || (i >= w && down[i - w])
    };
    for i in 0..n {
        if !has_edge(i, &right, &down) {
            // Restore one grid edge; it was dropped, so both ends stay at <= 4.
            if (i + 1) % w != 0 && i + 1 < n {
                right[i] = true;
            } else if i % w != 0 {
                right[i - 1] = true;
            } else if i + w < n {
                down[i] = true;
            } else {
                down[i - w] = true;
            }
        }
    }
    let mut row_ptr = Vec::with_capacity(n + 1);
    let mut col_idx = Vec::with_capacity(3 * n);
    row_ptr.push(0u32);
    for i in 0..n {
        if i >= w && down[i - w] {
            col_idx.push((i - w) as u32);
        }
        if i % w != 0 && right[i - 1] {
            col_idx.push((i - 1) as u32);
        }
        if right[i] {
            col_idx.push((i + 1) as u32);
        }
        if down[i] {
            col_idx.push((i + w) as u32);
        }
        row_ptr.push(col_idx.len() as u32);
    }
    let values = (0..col_idx.len()).map(|_| random_value(&mut rng)).collect();
    Csr::try_new(n, n, row_ptr, col_idx, values)
}

/// `nblocks` dense `block_size x block_size` blocks on the diagonal (every row
/// holds exactly `block_size` entries).
pub fn block_diagonal(
    nblocks: usize,
    block_size: usize,
    seed: u64,
) -> Result<Csr<f64>, SparseError> {
    let n = nblocks
        .checked_mul(block_size)
        .filter(|&n| n <= crate::MAX_DIM)
        .ok_or_else(|| {
            invalid(format!(
                "{nblocks} blocks of {block_size} rows overflow the index range"
            ))
        })?;
    let lengths = vec![block_size as u32; n];
    build_rows(n, n, &lengths, seed, |r, len, _, cols| {
        cols.clear();
        let first = (r / block_size) * block_size;
        cols.extend((first..first + len).map(|c| c as u32));
    })
}

/// Number of very long rows of [`lp_like`] with `nrows` rows.
fn lp_long_rows(nrows: usize) -> usize {
    (nrows / 500).clamp(1, 20).min(nrows)
}

/// An LP-constraint-like `nrows x ncols` matrix (meant to be wide, `ncols` several
/// times `nrows`): a few very long rows (`clamp(nrows / 500, 1, 20)` of them, each
/// with `ncols/16 ..= ncols/4` entries) at random positions and many short rows
/// of 1 to 8 entries, columns uniformly random.
pub fn lp_like(nrows: usize, ncols: usize, seed: u64) -> Result<Csr<f64>, SparseError> {
    if nrows == 0 || ncols < 16 {
        return Err(invalid(format!(
            "lp_like needs nrows >= 1 and ncols >= 16 (got {nrows} x {ncols})"
        )));
    }
    let mut rng = rng_for(seed, 0);
    let mut lengths: Vec<u32> = (0..nrows)
        .map(|_| rng.gen_range(1..=8u32.min(ncols as u32)))
        .collect();
    let long = lp_long_rows(nrows);
    for &r in rand::seq::index::sample(&mut rng, nrows, long)
        .into_vec()
        .iter()
    {
        lengths[r] = rng.gen_range(ncols / 16..=ncols / 4) as u32;
    }
    build_rows(nrows, ncols, &lengths, seed, |_, len, rng, cols| {
        sample_distinct(rng, len, ncols, cols)
    })
}

/// Column count of [`mixed_lengths`].
fn mixed_ncols(nrows: usize) -> usize {
    nrows.max(20_000)
}

/// Rows of wildly mixed length: 10% empty, the rest `floor(10^(4.2 u))` for `u`
/// uniform in `[0, 1)` (1 to about 15,800 entries, log-uniform), in a matrix of
/// `max(nrows, 20000)` columns with uniformly random columns.
pub fn mixed_lengths(nrows: usize, seed: u64) -> Result<Csr<f64>, SparseError> {
    let ncols = mixed_ncols(nrows);
    let mut rng = rng_for(seed, 0);
    let lengths: Vec<u32> = (0..nrows)
        .map(|_| {
            if rng.gen_bool(0.1) {
                0
            } else {
                (10f64.powf(4.2 * rng.gen::<f64>()).floor() as usize).clamp(1, ncols) as u32
            }
        })
        .collect();
    build_rows(nrows, ncols, &lengths, seed, |_, len, rng, cols| {
        sample_distinct(rng, len, ncols, cols)
    })
}

/// A square matrix in which exactly `round(empty_frac * nrows)` rows, chosen at
/// random, are empty and the others hold 1 to 16 uniformly random columns.
pub fn many_empty_rows(nrows: usize, empty_frac: f64, seed: u64) -> Result<Csr<f64>, SparseError> {
    if !(0.0..=1.0).contains(&empty_frac) {
        return Err(invalid(format!(
            "empty_frac = {empty_frac} is not in [0, 1]"
        )));
    }
    let mut rng = rng_for(seed, 0);
    let hi = 16u32.min(nrows as u32).max(1);
    let mut lengths: Vec<u32> = (0..nrows).map(|_| rng.gen_range(1..=hi)).collect();
    let empty = (empty_frac * nrows as f64).round() as usize;
    for r in rand::seq::index::sample(&mut rng, nrows, empty).into_iter() {
        lengths[r] = 0;
    }
    build_rows(nrows, nrows, &lengths, seed, |_, len, rng, cols| {
        sample_distinct(rng, len, nrows, cols)
    })
}

/// A fixed seed for the awkward shapes, whose values only need to be nonzero.
const AWKWARD_SEED: u64 = 0x5eed_a3c1;

/// Seven rows and `len` columns in which row 3 holds every column (all `len`
/// nonzeros) and the other rows are empty: one huge row for the kernels.
pub fn one_huge_row(len: usize) -> Result<Csr<f64>, SparseError> {
    if len == 0 {
        return Err(invalid("one_huge_row needs len >= 1"));
    }
    let mut lengths = vec![0u32; 7];
    lengths[3] = len as u32;
    build_rows(7, len, &lengths, AWKWARD_SEED, |_, l, _, cols| {
        cols.clear();
        cols.extend(0..l as u32);
    })
}

/// A very tall, thin matrix: row `r` holds the first `1 + r % ncols` columns.
pub fn tall_thin(nrows: usize, ncols: usize) -> Result<Csr<f64>, SparseError> {
    if ncols == 0 {
        return Err(invalid("tall_thin needs ncols >= 1"));
    }
    let lengths: Vec<u32> = (0..nrows).map(|r| (1 + r % ncols) as u32).collect();
    build_rows(nrows, ncols, &lengths, AWKWARD_SEED, |_, l, _, cols| {
        cols.clear();
        cols.extend(0..l as u32);
    })
}

/// An `n x n` matrix with no entries at all.
pub fn all_rows_empty(n: usize) -> Result<Csr<f64>, SparseError> {
    Csr::zeros(n, n)
}

/// The generator families, by name, for a trainer or a benchmark to iterate over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    /// [`stencil_2d`] on a square grid.
    Stencil2d,
    /// [`stencil_3d`] with [`Stencil3d::Point7`] on a cube.
    Stencil3d7,
    /// [`stencil_3d`] with [`Stencil3d::Point27`] on a cube.
    Stencil3d27,
    /// [`uniform_random`], square, 8 entries per row.
    UniformRandom,
    /// [`power_law`], average degree 8.
    PowerLaw,
    /// [`road_like`].
    RoadLike,
    /// [`block_diagonal`] with blocks of 32.
    BlockDiagonal,
    /// [`lp_like`] with 8 times more columns than rows.
    LpLike,
    /// [`mixed_lengths`].
    MixedLengths,
    /// [`many_empty_rows`] with half the rows empty.
    ManyEmptyRows,
    /// [`one_huge_row`].
    OneHugeRow,
    /// [`tall_thin`] with 4 columns.
    TallThin,
    /// [`all_rows_empty`].
    AllRowsEmpty,
}

impl Family {
    /// Every family, in a fixed order.
    pub const ALL: [Family; 13] = [
        Family::Stencil2d,
        Family::Stencil3d7,
        Family::Stencil3d27,
        Family::UniformRandom,
        Family::PowerLaw,
        Family::RoadLike,
        Family::BlockDiagonal,
        Family::LpLike,
        Family::MixedLengths,
        Family::ManyEmptyRows,
        Family::OneHugeRow,
        Family::TallThin,
        Family::AllRowsEmpty,
    ];

    /// The families that imitate real workloads: every family but the three
    /// awkward shapes kept for kernel tests, which [`Family::ALL`] lists last.
    pub const CORPUS: &'static [Family] = Self::ALL.split_at(10).0;

    /// The family's name (`stencil2d`, `power_law`, ...), also accepted by `FromStr`.
    pub fn name(self) -> &'static str {
        match self {
            Family::Stencil2d => "stencil2d",
            Family::Stencil3d7 => "stencil3d7",
            Family::Stencil3d27 => "stencil3d27",
            Family::UniformRandom => "uniform_random",
            Family::PowerLaw => "power_law",
            Family::RoadLike => "road_like",
            Family::BlockDiagonal => "block_diagonal",
            Family::LpLike => "lp_like",
            Family::MixedLengths => "mixed_lengths",
            Family::ManyEmptyRows => "many_empty_rows",
            Family::OneHugeRow => "one_huge_row",
            Family::TallThin => "tall_thin",
            Family::AllRowsEmpty => "all_rows_empty",
        }
    }

    /// Whether the generator ignores the seed (the stencils and awkward shapes).
    pub fn is_deterministic(self) -> bool {
        matches!(
            self,
            Family::Stencil2d
                | Family::Stencil3d7
                | Family::Stencil3d27
                | Family::OneHugeRow
                | Family::TallThin
                | Family::AllRowsEmpty
        )
    }

    /// Builds a member of the family with about `nnz_target` nonzeros (within a
    /// few percent for the random families; grid rounding for the stencils).
    /// [`Family::AllRowsEmpty`] has no nonzeros: it gets `nnz_target` rows.
    pub fn generate(self, nnz_target: usize, seed: u64) -> Result<Csr<f64>, SparseError> {
        let t = nnz_target.max(1) as f64;
        let at_least = |v: f64, lo: usize| (v.round() as usize).max(lo);
        match self {
            Family::Stencil2d => stencil_2d(
                cube_side(t, 2, |n| 5.0 * n * n - 4.0 * n),
                cube_side(t, 2, |n| 5.0 * n * n - 4.0 * n),
            ),
            Family::Stencil3d7 => {
                let side = cube_side(t, 3, |n| 7.0 * n * n * n - 6.0 * n * n);
                stencil_3d(side, side, side, Stencil3d::Point7)
            }
            Family::Stencil3d27 => {
                let side = cube_side(t, 3, |n| (3.0 * n - 2.0).powi(3));
                stencil_3d(side, side, side, Stencil3d::Point27)
            }
            Family::UniformRandom => {
                let n = at_least(t / 8.0, 8);
                uniform_random(n, n, 8, seed)
            }
            Family::PowerLaw => {
                let n = at_least(t / 8.0, 8);
                power_law(n, 8.0, seed)
            }
            // About 2.7 entries per row after dropping and restoring edges.
            Family::RoadLike => road_like(at_least(t / 2.7, 2), seed),
            Family::BlockDiagonal => block_diagonal(at_least(t / 1024.0, 1), 32, seed),
            Family::LpLike => {
                // Expected nnz: 4.5 per short row + long rows of 5/32 ncols on average.
                let expected = |m: usize| {
                    let long = lp_long_rows(m) as f64;
                    4.5 * (m as f64 - long) + long * 5.0 / 32.0 * (8 * m) as f64
                };
                let (mut lo, mut hi) = (2usize, 2usize);
                while expected(hi) < t {
                    hi *= 2;
                }
                while hi - lo > 1 {
                    let mid = (lo + hi) / 2;
                    if expected(mid) < t {
                        lo = mid;
                    } else {
                        hi = mid;
                    }
                }
                lp_like(hi, 8 * hi, seed)
            }
            Family::MixedLengths => {
                // Mean length: 0.9 * E[floor(10^(4.2u))] with 10^(4.2u) averaging
                // (10^4.2 - 1) / (4.2 ln 10); the floor takes about 0.5 off.
                let mean = 0.9 * ((10f64.powf(4.2) - 1.0) / (4.2 * std::f64::consts::LN_10) - 0.5);
                mixed_lengths(at_least(t / mean, 1), seed)
            }
            Family::ManyEmptyRows => many_empty_rows(at_least(t / 4.25, 2), 0.5, seed),
            Family::OneHugeRow => one_huge_row(at_least(t, 1)),
            Family::TallThin => tall_thin(at_least(t / 2.5, 1), 4),
            Family::AllRowsEmpty => all_rows_empty(at_least(t, 1)),
        }
    }
}

/// The grid side `n >= 1` whose stencil nonzero count `nnz(n)` (increasing) is
/// nearest `target`, for a grid of `dims` dimensions.
fn cube_side(target: f64, dims: i32, nnz: impl Fn(f64) -> f64) -> usize {
    let guess = target.powf(1.0 / dims as f64).ceil().max(1.0) as usize;
    (1..=guess + 1)
        .min_by(|&a, &b| {
            (nnz(a as f64) - target)
                .abs()
                .total_cmp(&(nnz(b as f64) - target).abs())
        })
        .unwrap_or(1)
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Family {
    type Err = SparseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Family::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| invalid(format!("unknown generator family `{s}`")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weighted_sampling_falls_back_to_uniform_fill() {
        // All weight on column 0: five rounds give only {0}; the fill adds the rest.
        let mut w = vec![0.0; 100];
        w[0] = 1.0;
        let table = Alias::new(&w);
        let mut rng = rng_for(1, 0);
        let (mut out, mut scratch) = (Vec::new(), Vec::new());
        sample_weighted_distinct(&mut rng, 20, &table, &mut out, &mut scratch);
        assert_eq!(out.len(), 20);
        assert!(out.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(out[0], 0);
        assert!(out.iter().all(|&c| c < 100));
    }

    #[test]
    fn alias_table_follows_weights() {
        let table = Alias::new(&[1.0, 0.0, 3.0, 6.0]);
        let mut rng = rng_for(2, 0);
        let mut counts = [0usize; 4];
        for _ in 0..100_000 {
            counts[table.sample(&mut rng) as usize] += 1;
        }
        assert_eq!(counts[1], 0);
        for (c, p) in counts.iter().zip([0.1, 0.0, 0.3, 0.6]) {
            assert!((*c as f64 / 100_000.0 - p).abs() < 0.01, "{counts:?}");
        }
    }

    #[test]
    fn distinct_sampling_dense_and_sparse() {
        let mut rng = rng_for(7, 3);
        let mut out = Vec::new();
        for (k, n) in [(0, 5), (5, 5), (3, 10), (90, 100), (10, 1_000_000)] {
            sample_distinct(&mut rng, k, n, &mut out);
            assert_eq!(out.len(), k);
            assert!(out.windows(2).all(|w| w[0] < w[1]));
            assert!(out.iter().all(|&c| (c as usize) < n));
        }
    }
}
