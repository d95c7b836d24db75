//! Stand-in matrices built from the statistics of a SuiteSparse collection matrix.
//!
//! The collection holds 2,893 matrices, most far too big to ship or to time on a
//! CPU. What we do have for each of them (see `training-data/README.md`) is its
//! size, the five-number summary, mean and variance of its row lengths and of its
//! column lengths (from Ginkgo's `matrix_statistics`), its bandwidths and its
//! problem kind. [`standin`] turns one such record into a matrix with the same
//! row-length distribution and a column placement that follows the kind, scaled
//! down to a nonzero budget when asked, and reports how close it came.
//!
//! How the row lengths are made ([`row_lengths`]): the sorted lengths follow a
//! monotone quantile function through the knots `(0, min)`, `(P1, q1)`,
//! `(P2, median)`, `(P3, q3)`, `(m-1, max)`, where `Pk` are the fractional sorted
//! positions Ginkgo's quartile rule reads. Between knots the function is a power
//! curve; the tail segment (q3 to max) has an exponent, an offset and a plateau at
//! the maximum. The exponent is solved so that the lengths add up to the nonzero
//! count (hence the mean), and the offset/plateau knob is then solved to approach
//! the variance. The values are rounded, the quartile positions are pinned to
//! integer values that give exactly the target quartiles, and the remaining
//! difference to the nonzero count is spread over rows that can move without
//! crossing a knot. Finally the rows are shuffled.
//!
//! Column placement ([`Placement`]): square matrices from discretisations (`isND`
//! or a discretisation kind) and matrices whose bandwidth is under a tenth of
//! their size get entries in a band around the diagonal (a contiguous cluster
//! holding the diagonal plus entries spread through the band); everything else
//! (graphs, LP, circuits, ...) gets columns drawn with probability proportional to
//! column lengths built from the column statistics, so popular columns stay
//! popular.

use super::{build_rows, rng_for, sample_distinct, sample_weighted_distinct, Alias};
use crate::error::ParseErrorKind;
use crate::{Csr, SparseError};
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// Summary statistics of a distribution of row (or column) lengths, as Ginkgo's
/// `matrix_statistics` computes them: quartiles by its "Method 3" position table,
/// population variance.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Dist {
    /// Shortest.
    pub min: f64,
    /// First quartile.
    pub q1: f64,
    /// Median.
    pub median: f64,
    /// Third quartile.
    pub q3: f64,
    /// Longest.
    pub max: f64,
    /// Mean.
    pub mean: f64,
    /// Population variance (NaN when unknown).
    pub variance: f64,
}

/// Sorted positions and weights of a quartile for `n` values: `(p0, p1, c0, c1)`,
/// the quartile being `c0 * s[p0] + c1 * s[p1]` of the sorted values `s`.
/// This is the table of Ginkgo's `benchmark/matrix_statistics` (its reading of
/// Wikipedia's "Method 3"), which produced the collection statistics.
fn quartile_positions(n: usize, k: usize) -> (usize, usize, f64, f64) {
    let q = n / 4;
    let pos =
        |a: isize| (q as isize * k as isize + a).clamp(0, n.saturating_sub(1) as isize) as usize;
    // Offsets relative to k*q for k = 1, 2, 3, by n % 4.
    let (a0, a1, c0, c1) = match (n % 4, k) {
        (0, _) => (-1, 0, 0.5, 0.5),
        (1, 1) => (-1, 0, 0.75, 0.25),
        (1, 2) => (0, 0, 0.5, 0.5),
        (1, _) => (0, 1, 0.25, 0.75),
        (2, 1) => (0, 0, 0.5, 0.5),
        (2, 2) => (0, 1, 0.5, 0.5),
        (2, _) => (1, 1, 0.5, 0.5),
        (_, 1) => (0, 1, 0.25, 0.75),
        (_, 2) => (1, 1, 0.5, 0.5),
        (_, _) => (1, 2, 0.75, 0.25),
    };
    (pos(a0), pos(a1), c0, c1)
}

impl Dist {
    /// The statistics of a list of lengths (empty list: all zero).
    pub fn of_lengths(lengths: &[u32]) -> Dist {
        let n = lengths.len();
        if n == 0 {
            return Dist {
                min: 0.0,
                q1: 0.0,
                median: 0.0,
                q3: 0.0,
                max: 0.0,
                mean: 0.0,
                variance: 0.0,
            };
        }
        let mut s = lengths.to_vec();
        s.sort_unstable();
        let quart = |k| {
            let (p0, p1, c0, c1) = quartile_positions(n, k);
            c0 * s[p0] as f64 + c1 * s[p1] as f64
        };
        let mean = s.iter().map(|&v| v as f64).sum::<f64>() / n as f64;
        let variance = s.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n as f64;
        Dist {
            min: s[0] as f64,
            q1: quart(1),
            median: quart(2),
            q3: quart(3),
            max: s[n - 1] as f64,
            mean,
            variance,
        }
    }

    /// Row-length statistics of a matrix.
    pub fn of_rows<T: crate::Scalar>(m: &Csr<T>) -> Dist {
        let lengths: Vec<u32> = m.row_lengths().map(|l| l as u32).collect();
        Dist::of_lengths(&lengths)
    }

    /// Column-length statistics of a matrix.
    pub fn of_cols<T: crate::Scalar>(m: &Csr<T>) -> Dist {
        let mut counts = vec![0u32; m.ncols()];
        for &c in m.col_idx() {
            counts[c as usize] += 1;
        }
        Dist::of_lengths(&counts)
    }
}

/// A coarse class of the collection's problem kinds, for placement and for
/// stratifying a corpus.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum KindClass {
    /// 2D/3D discretisations: structural, CFD, electromagnetics, thermal, ...
    Discretisation,
    /// Graphs and networks (except power networks).
    Graph,
    /// Linear programming, optimisation, optimal control, least squares, economics.
    Optimisation,
    /// Circuit simulation and power networks.
    Circuit,
    /// Chemistry: quantum, process simulation.
    Chemistry,
    /// Combinatorial, statistical and everything else.
    Other,
}

impl KindClass {
    /// Every class, in a fixed order.
    pub const ALL: [KindClass; 6] = [
        KindClass::Discretisation,
        KindClass::Graph,
        KindClass::Optimisation,
        KindClass::Circuit,
        KindClass::Chemistry,
        KindClass::Other,
    ];

    /// Classifies a SuiteSparse `kind` string; `is_nd` (the index's 2D/3D flag)
    /// makes anything a discretisation.
    pub fn of(kind: &str, is_nd: bool) -> KindClass {
        let k = kind.to_ascii_lowercase();
        let has = |words: &[&str]| words.iter().any(|w| k.contains(w));
        if is_nd
            || has(&[
                "2d/3d",
                "structural",
                "fluid dynamics",
                "electromagnetics",
                "acoustics",
                "thermal",
                "materials",
                "semiconductor",
                "model reduction",
                "computer graphics",
                "vision",
            ])
        {
            KindClass::Discretisation
        } else if has(&["circuit", "power network"]) {
            KindClass::Circuit
        } else if has(&["graph", "network"]) {
            KindClass::Graph
        } else if has(&[
            "linear programming",
            "optimization",
            "optimal control",
            "least squares",
            "economic",
        ]) {
            KindClass::Optimisation
        } else if has(&["chemistry", "chemical"]) {
            KindClass::Chemistry
        } else {
            KindClass::Other
        }
    }

    /// Lower-case name (`discretisation`, `graph`, ...).
    pub fn name(self) -> &'static str {
        match self {
            KindClass::Discretisation => "discretisation",
            KindClass::Graph => "graph",
            KindClass::Optimisation => "optimisation",
            KindClass::Circuit => "circuit",
            KindClass::Chemistry => "chemistry",
            KindClass::Other => "other",
        }
    }
}

/// What the collection tells about one matrix: one row of `training-data/uf_stats.csv`.
#[derive(Debug, Clone, PartialEq)]
pub struct MatrixStats {
    /// SuiteSparse id (1-based).
    pub id: u32,
    /// Group, such as `HB`.
    pub group: String,
    /// Name within the group.
    pub name: String,
    /// Problem kind, such as `structural problem`.
    pub kind: String,
    /// Rutherford-Boeing type (`rsa`, `rua`, `pua`, ...).
    pub rb_type: String,
    /// Comes from a 2D/3D discretisation.
    pub is_nd: bool,
    /// Is a graph.
    pub is_graph: bool,
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
    /// Stored entries after symmetric expansion (Ginkgo's `nonzeros`).
    pub nnz: u64,
    /// Entries on the diagonal (0 for rectangular matrices).
    pub nnzdiag: i64,
    /// Lower bandwidth (negative: not computed).
    pub lower_bandwidth: i64,
    /// Upper bandwidth (negative: not computed).
    pub upper_bandwidth: i64,
    /// Row-length statistics (absent for 50 matrices Ginkgo did not analyse).
    pub row: Option<Dist>,
    /// Column-length statistics.
    pub col: Option<Dist>,
}

impl MatrixStats {
    /// `Group/Name`, the collection's unique name.
    pub fn full_name(&self) -> String {
        format!("{}/{}", self.group, self.name)
    }

    /// The coarse kind class.
    pub fn kind_class(&self) -> KindClass {
        KindClass::of(&self.kind, self.is_nd)
    }
}

/// The flat CSV record of `uf_stats.csv`.
#[derive(Debug, Serialize, Deserialize)]
struct Record {
    id: u32,
    group: String,
    name: String,
    kind: String,
    rbtype: String,
    is_nd: u8,
    is_graph: u8,
    rows: usize,
    cols: usize,
    nnz: u64,
    nnzdiag: i64,
    lower_bandwidth: i64,
    upper_bandwidth: i64,
    row_min: Option<f64>,
    row_q1: Option<f64>,
    row_median: Option<f64>,
    row_q3: Option<f64>,
    row_max: Option<f64>,
    row_mean: Option<f64>,
    row_variance: Option<f64>,
    col_min: Option<f64>,
    col_q1: Option<f64>,
    col_median: Option<f64>,
    col_q3: Option<f64>,
    col_max: Option<f64>,
    col_mean: Option<f64>,
    col_variance: Option<f64>,
}

#[allow(clippy::too_many_arguments)]
fn dist_from(
    min: Option<f64>,
    q1: Option<f64>,
    median: Option<f64>,
    q3: Option<f64>,
    max: Option<f64>,
    mean: Option<f64>,
    variance: Option<f64>,
) -> Option<Dist> {
    Some(Dist {
        min: min?,
        q1: q1?,
        median: median?,
        q3: q3?,
        max: max?,
        mean: mean?,
        variance: variance?,
    })
}

impl From<Record> for MatrixStats {
    fn from(r: Record) -> Self {
        MatrixStats {
            row: dist_from(
                r.row_min,
                r.row_q1,
                r.row_median,
                r.row_q3,
                r.row_max,
                r.row_mean,
                r.row_variance,
            ),
            col: dist_from(
                r.col_min,
                r.col_q1,
                r.col_median,
                r.col_q3,
                r.col_max,
                r.col_mean,
                r.col_variance,
            ),
            id: r.id,
            group: r.group,
            name: r.name,
            kind: r.kind,
            rb_type: r.rbtype,
            is_nd: r.is_nd != 0,
            is_graph: r.is_graph != 0,
            rows: r.rows,
            cols: r.cols,
            nnz: r.nnz,
            nnzdiag: r.nnzdiag,
            lower_bandwidth: r.lower_bandwidth,
            upper_bandwidth: r.upper_bandwidth,
        }
    }
}

impl From<&MatrixStats> for Record {
    fn from(s: &MatrixStats) -> Self {
        let (r, c) = (s.row.as_ref(), s.col.as_ref());
        Record {
            id: s.id,
            group: s.group.clone(),
            name: s.name.clone(),
            kind: s.kind.clone(),
            rbtype: s.rb_type.clone(),
            is_nd: s.is_nd as u8,
            is_graph: s.is_graph as u8,
            rows: s.rows,
            cols: s.cols,
            nnz: s.nnz,
            nnzdiag: s.nnzdiag,
            lower_bandwidth: s.lower_bandwidth,
            upper_bandwidth: s.upper_bandwidth,
            row_min: r.map(|d| d.min),
            row_q1: r.map(|d| d.q1),
            row_median: r.map(|d| d.median),
            row_q3: r.map(|d| d.q3),
            row_max: r.map(|d| d.max),
            row_mean: r.map(|d| d.mean),
            row_variance: r.map(|d| d.variance),
            col_min: c.map(|d| d.min),
            col_q1: c.map(|d| d.q1),
            col_median: c.map(|d| d.median),
            col_q3: c.map(|d| d.q3),
            col_max: c.map(|d| d.max),
            col_mean: c.map(|d| d.mean),
            col_variance: c.map(|d| d.variance),
        }
    }
}

/// A CSV problem as a [`SparseError::Parse`] naming the file and line.
fn csv_error(path: &str, e: csv::Error) -> SparseError {
    let line = e.position().map(|p| p.line() as usize).unwrap_or(0);
    let kind = match e.kind() {
        csv::ErrorKind::Io(_) => ParseErrorKind::Io,
        csv::ErrorKind::UnequalLengths { .. } => ParseErrorKind::WrongFieldCount,
        _ => ParseErrorKind::NonNumeric,
    };
    SparseError::parse(line, kind, format!("{path}: {e}"))
}

/// The shipped statistics file: `$SPMV_UF_STATS` when set, else
/// `training-data/uf_stats.csv` of this repository.
pub fn default_stats_path() -> PathBuf {
    match std::env::var_os("SPMV_UF_STATS") {
        Some(p) => PathBuf::from(p),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../training-data/uf_stats.csv"),
    }
}

/// Reads statistics records (the `uf_stats.csv` format) from a reader; `origin`
/// names the source in errors.
pub fn read_stats<R: Read>(reader: R, origin: &str) -> Result<Vec<MatrixStats>, SparseError> {
    let mut rdr = csv::Reader::from_reader(reader);
    rdr.deserialize::<Record>()
        .map(|r| r.map(MatrixStats::from).map_err(|e| csv_error(origin, e)))
        .collect()
}

/// Loads a statistics file such as `training-data/uf_stats.csv`.
pub fn load_stats(path: impl AsRef<Path>) -> Result<Vec<MatrixStats>, SparseError> {
    let path = path.as_ref();
    let file = std::fs::File::open(path).map_err(|e| {
        SparseError::parse(0, ParseErrorKind::Io, format!("{}: {e}", path.display()))
    })?;
    read_stats(std::io::BufReader::new(file), &path.display().to_string())
}

/// Loads the shipped statistics file ([`default_stats_path`]).
pub fn load_default_stats() -> Result<Vec<MatrixStats>, SparseError> {
    load_stats(default_stats_path())
}

/// Writes statistics records in the `uf_stats.csv` format.
pub fn write_stats<W: Write>(writer: W, stats: &[MatrixStats]) -> Result<(), SparseError> {
    let mut w = csv::Writer::from_writer(writer);
    for s in stats {
        w.serialize(Record::from(s))
            .map_err(|e| csv_error("output", e))?;
    }
    w.flush()
        .map_err(|e| SparseError::parse(0, ParseErrorKind::Io, format!("output: {e}")))
}

/// Derives the statistics table from the upstream files of a `uf-stats` folder
/// (`ginkgo_features.csv`, `ss_index.csv`, `ssstats.csv`; see
/// `training-data/README.md`): one record per collection matrix, in id order.
/// Sizes, nonzeros and length statistics come from Ginkgo's features; kind from
/// `ssstats.csv`; flags, bandwidths, diagonal count and type from `ss_index.csv`.
pub fn derive_stats(uf_stats_dir: impl AsRef<Path>) -> Result<Vec<MatrixStats>, SparseError> {
    let dir = uf_stats_dir.as_ref();
    let kinds = read_kinds(dir)?;
    let index = read_table(dir, "ss_index.csv")?;
    let ginkgo = read_table(dir, "ginkgo_features.csv")?;
    let index_by_id: HashMap<u32, &Row> = index
        .iter()
        .filter_map(|r| Some((r.get("id")?.parse().ok()?, r)))
        .collect();
    let mut out = ginkgo
        .iter()
        .enumerate()
        .map(|(i, g)| derive_one(g, &index_by_id, &kinds, i + 2))
        .collect::<Result<Vec<_>, _>>()?;
    out.sort_by_key(|s| s.id);
    Ok(out)
}

/// A row of a CSV table with a header row: column name -> field.
type Row = HashMap<String, String>;

/// A headerless, flexible CSV reader on `dir/name`, and the name as shown.
fn open_csv(dir: &Path, name: &str) -> Result<(csv::Reader<std::fs::File>, String), SparseError> {
    let p = dir.join(name);
    let shown = p.display().to_string();
    let rdr = csv::ReaderBuilder::new()
        .flexible(true)
        .has_headers(false)
        .from_path(&p)
        .map_err(|e| csv_error(&shown, e))?;
    Ok((rdr, shown))
}

/// A field of an upstream file that is missing or not a number.
fn bad_field(origin: &str, line: usize, msg: String) -> SparseError {
    SparseError::parse(line, ParseErrorKind::NonNumeric, format!("{origin}: {msg}"))
}

/// The kinds of `ssstats.csv`, by id - 1: two header lines (count, date),
/// then field 12 of each line is the kind.
fn read_kinds(dir: &Path) -> Result<Vec<String>, SparseError> {
    let (mut rdr, origin) = open_csv(dir, "ssstats.csv")?;
    let mut kinds = Vec::new();
    for (i, rec) in rdr.records().enumerate() {
        let rec = rec.map_err(|e| csv_error(&origin, e))?;
        if i >= 2 {
            let kind = rec
                .get(11)
                .ok_or_else(|| bad_field(&origin, i + 1, "missing kind field".into()))?;
            kinds.push(kind.to_string());
        }
    }
    Ok(kinds)
}

/// A table with a header row, read as maps from column name to field.
fn read_table(dir: &Path, name: &str) -> Result<Vec<Row>, SparseError> {
    let (mut rdr, origin) = open_csv(dir, name)?;
    let mut rows = Vec::new();
    let mut header: Vec<String> = Vec::new();
    for (i, rec) in rdr.records().enumerate() {
        let rec = rec.map_err(|e| csv_error(&origin, e))?;
        if i == 0 {
            header = rec.iter().map(str::to_string).collect();
        } else {
            rows.push(
                header
                    .iter()
                    .cloned()
                    .zip(rec.iter().map(str::to_string))
                    .collect(),
            );
        }
    }
    Ok(rows)
}

/// The record of one `ginkgo_features.csv` row `g` (at `line`), with its
/// `ss_index.csv` row and its kind.
fn derive_one(
    g: &Row,
    index_by_id: &HashMap<u32, &Row>,
    kinds: &[String],
    line: usize,
) -> Result<MatrixStats, SparseError> {
    let origin = "ginkgo_features.csv";
    let field = |row: &Row, key: &str| -> Result<String, SparseError> {
        row.get(key)
            .cloned()
            .ok_or_else(|| bad_field(origin, line, format!("missing column {key}")))
    };
    let num = |row: &Row, key: &str| -> Result<f64, SparseError> {
        let v = field(row, key)?;
        v.parse::<f64>()
            .map_err(|_| bad_field(origin, line, format!("{key} = `{v}` is not a number")))
    };
    let opt = |row: &Row, key: &str| -> Result<Option<f64>, SparseError> {
        match row.get(key).map(String::as_str) {
            None | Some("") => Ok(None),
            Some(_) => num(row, key).map(Some),
        }
    };
    let id = num(g, "id")? as u32;
    let ix = index_by_id
        .get(&id)
        .ok_or_else(|| bad_field(origin, line, format!("id {id} not in ss_index.csv")))?;
    let dist = |prefix: &str| -> Result<Option<Dist>, SparseError> {
        let f = |s: &str| opt(g, &format!("{prefix}_{s}"));
        Ok(dist_from(
            f("min")?,
            f("q1")?,
            f("median")?,
            f("q3")?,
            f("max")?,
            f("mean")?,
            f("variance")?,
        ))
    };
    Ok(MatrixStats {
        id,
        group: field(g, "group")?,
        name: field(g, "name")?,
        kind: kinds
            .get(id as usize - 1)
            .cloned()
            .ok_or_else(|| bad_field(origin, line, format!("id {id} not in ssstats.csv")))?,
        rb_type: field(ix, "RBtype")?,
        is_nd: num(ix, "isND")? != 0.0,
        is_graph: num(ix, "isGraph")? != 0.0,
        rows: num(g, "rows")? as usize,
        cols: num(g, "cols")? as usize,
        nnz: num(g, "nonzeros")? as u64,
        nnzdiag: num(ix, "nnzdiag")? as i64,
        lower_bandwidth: num(ix, "lowerbandwidth")? as i64,
        upper_bandwidth: num(ix, "upperbandwidth")? as i64,
        row: dist("row")?,
        col: dist("col")?,
    })
}

// ---------------------------------------------------------------------------
// Row lengths from a distribution summary.

/// Tail exponent bounds: tiny puts the whole tail at the maximum, huge puts it
/// at q3 (but for the last row).
const A_MIN: f64 = 1e-6;
const A_MAX: f64 = 1e9;

/// Shape of the quantile function between the knots.
#[derive(Debug, Clone, Copy)]
struct Shape {
    /// Exponent of the three lower segments: `g(t) = 1 - (1 - t)^b` (1: linear).
    b: f64,
    /// Extra exponent factor of the lowest segment (min to q1) alone.
    b0: f64,
    /// Tail exponent: `g(t) = c + (1 - c) (t / (1 - s))^a` below the plateau.
    a: f64,
    /// Tail offset in `[0, 1)`.
    c: f64,
    /// Tail plateau at the maximum, a fraction of the tail in `[0, 1)`.
    s: f64,
}

/// Knots of the quantile function on sorted positions.
struct Knots {
    pos: [f64; 5],
    val: [f64; 5],
}

impl Knots {
    fn value(&self, sh: &Shape, i: f64) -> f64 {
        let mut j = 0;
        while j < 3 && i > self.pos[j + 1] {
            j += 1;
        }
        let (p0, p1, lo, hi) = (self.pos[j], self.pos[j + 1], self.val[j], self.val[j + 1]);
        if p1 <= p0 {
            return hi;
        }
        let t = ((i - p0) / (p1 - p0)).clamp(0.0, 1.0);
        let g = if j < 3 {
            1.0 - (1.0 - t).powf(if j == 0 { sh.b * sh.b0 } else { sh.b })
        } else if t >= 1.0 - sh.s {
            1.0
        } else {
            sh.c + (1.0 - sh.c) * (t / (1.0 - sh.s)).powf(sh.a)
        };
        lo + (hi - lo) * g
    }
}

/// Quadrature points: (sorted position, weight).
type Points = Vec<(f64, f64)>;

/// Quadrature points (sorted position, weight) standing for all `m` rows: every
/// row when `m` is small, else strided blocks plus the last rows one by one
/// (where a heavy tail lives). Split into head (segments 1-3) and tail points.
fn quadrature(m: usize, p3: f64) -> (Points, Points) {
    let mut pts = Vec::new();
    if m <= 16_000 {
        pts.extend((0..m).map(|i| (i as f64, 1.0)));
    } else {
        let exact = 1_000;
        let body = m - exact;
        let blocks = 12_000usize;
        let step = body as f64 / blocks as f64;
        for b in 0..blocks {
            let lo = (b as f64 * step).floor();
            let hi = ((b + 1) as f64 * step).floor();
            if hi > lo {
                pts.push(((lo + hi - 1.0) / 2.0, hi - lo));
            }
        }
        pts.extend((body..m).map(|i| (i as f64, 1.0)));
    }
    pts.into_iter().partition(|&(i, _)| i <= p3)
}

fn moments(knots: &Knots, sh: &Shape, pts: &[(f64, f64)]) -> (f64, f64) {
    pts.iter().fold((0.0, 0.0), |(s, s2), &(i, w)| {
        let v = knots.value(sh, i);
        (s + w * v, s2 + w * v * v)
    })
}

/// Bisection for an increasing function `f` on `[lo, hi]` to reach `target`.
fn bisect(mut lo: f64, mut hi: f64, iters: usize, target: f64, f: impl Fn(f64) -> f64) -> f64 {
    for _ in 0..iters {
        let mid = 0.5 * (lo + hi);
        if f(mid) < target {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

/// Integer pairs `(x0, x1)`, `x0 <= x1`, within `[lo, hi]`, with
/// `c0 x0 + c1 x1 = q`: the one nearest `q` first, then other exact ones (at most
/// six in all). When no pair is exact, the nearest one alone.
fn quartile_pairs(q: f64, c0: f64, c1: f64, same: bool, lo: f64, hi: f64) -> Vec<(f64, f64)> {
    let clamp = |v: f64| v.clamp(lo, hi);
    if same {
        let x = clamp(q.round());
        return vec![(x, x)];
    }
    let mut exact = Vec::new();
    let mut x0 = clamp(q.floor());
    while x0 >= lo && exact.len() < 6 {
        let x1 = (q - c0 * x0) / c1;
        if x1 > hi + 1e-9 {
            break;
        }
        if (x1 - x1.round()).abs() < 1e-9 && x1.round() >= x0 {
            exact.push((x0, x1.round()));
        }
        x0 -= 1.0;
    }
    if exact.is_empty() {
        exact.push((clamp(q.floor()), clamp(q.ceil())));
    }
    exact
}

/// Pins sorted positions to values, keeps every other row between its
/// neighbouring pins, and spreads the difference to `total` over rows that can
/// move without leaving those bounds. Returns the sorted lengths and what is left
/// of the difference (0 unless the pins make `total` unreachable).
fn pin_and_fix(raw: &[u32], pins: &mut [(usize, f64)], total: u64) -> (Vec<u32>, i64) {
    let m = raw.len();
    let mut lengths = raw.to_vec();
    pins.sort_by_key(|p| p.0);
    for &(p, v) in pins.iter() {
        lengths[p] = v as u32;
    }
    let mut bounds = vec![(0u32, 0u32); m];
    let mut pinned = vec![false; m];
    for &(p, _) in pins.iter() {
        pinned[p] = true;
    }
    for w in pins.windows(2) {
        let ((p0, v0), (p1, v1)) = (w[0], w[1]);
        let (lo, hi) = (v0 as u32, (v1 as u32).max(v0 as u32));
        for i in (p0 + 1).min(p1)..p1 {
            lengths[i] = lengths[i].clamp(lo, hi);
            bounds[i] = (lo, hi);
        }
    }
    let mut diff = total as i64 - lengths.iter().map(|&l| l as i64).sum::<i64>();
    while diff != 0 {
        let up = diff > 0;
        let room = |i: usize, l: u32| if up { bounds[i].1 - l } else { l - bounds[i].0 };
        let free: Vec<usize> = (0..m)
            .filter(|&i| !pinned[i] && room(i, lengths[i]) > 0)
            .collect();
        if free.is_empty() {
            break;
        }
        let need = diff.unsigned_abs();
        if need < free.len() as u64 {
            // One step each for `need` rows spread evenly over the free ones.
            for j in 0..need as usize {
                let i = free[((j as f64 + 0.5) * free.len() as f64 / need as f64) as usize];
                lengths[i] = if up { lengths[i] + 1 } else { lengths[i] - 1 };
            }
            diff = 0;
        } else {
            // An equal share for every free row, as far as its room allows;
            // each pass uses at least the share of the fullest rows.
            let share = need / free.len() as u64;
            let mut moved = 0u64;
            for &i in &free {
                let step = (room(i, lengths[i]) as u64).min(share) as u32;
                lengths[i] = if up {
                    lengths[i] + step
                } else {
                    lengths[i] - step
                };
                moved += step as u64;
            }
            diff -= if up { moved as i64 } else { -(moved as i64) };
        }
    }
    lengths.sort_unstable();
    (lengths, diff)
}

/// `m` integer lengths in ascending order, each in `[0, cap]`, adding up to
/// `total` when the summary allows it, whose quartiles, minimum and maximum are
/// those of `d` (as far as integers allow) and whose variance approaches
/// `d.variance` (ignored when NaN). `d.mean` is not read: `total / m` is the mean.
pub fn row_lengths(d: &Dist, m: usize, cap: usize, total: u64) -> Vec<u32> {
    if m == 0 {
        return Vec::new();
    }
    let capf = cap as f64;
    let min = d.min.clamp(0.0, capf).round();
    let max = d.max.clamp(min, capf).round();
    let clampv = |v: f64| v.clamp(min, max);
    let (q1, med, q3) = (clampv(d.q1), clampv(d.median), clampv(d.q3));
    // Pinned rows: sorted position -> (value); bounds between pins.
    let mut pins: Vec<(usize, f64)> = vec![(0, min), (m - 1, max)];
    if m < 4 {
        let lengths: Vec<u32> = (0..m)
            .map(|i| {
                let t = if m == 1 {
                    1.0
                } else {
                    i as f64 / (m - 1) as f64
                };
                (min + (max - min) * t).round() as u32
            })
            .collect();
        return pin_and_fix(&lengths, &mut pins, total).0;
    }
    let qp: Vec<(usize, usize, f64, f64)> = (1..=3).map(|k| quartile_positions(m, k)).collect();
    let knot_pos = |k: usize| qp[k].0 as f64 * qp[k].2 + qp[k].1 as f64 * qp[k].3;
    let curve = Curve::new(
        Knots {
            pos: [0.0, knot_pos(0), knot_pos(1), knot_pos(2), (m - 1) as f64],
            val: [min, q1, med, q3, max],
        },
        m,
    );
    let shape = curve.fit(d.variance, total as f64);
    let lengths: Vec<u32> = (0..m)
        .map(|i| clampv(curve.knots.value(&shape, i as f64).round()) as u32)
        .collect();
    let cands: Vec<Vec<(f64, f64)>> = qp
        .iter()
        .zip([q1, med, q3])
        .map(|(&(p0, p1, c0, c1), q)| quartile_pairs(q, c0, c1, p0 == p1, min, max))
        .collect();
    pin_quartiles(&lengths, &pins, &qp, &cands, total)
}

/// The shape every fit starts from: linear segments, no tail offset or plateau.
const BASE_SHAPE: Shape = Shape {
    b: 1.0,
    b0: 1.0,
    a: 1.0,
    c: 0.0,
    s: 0.0,
};

/// The quantile curve being fitted: its knots (minimum, quartiles, maximum)
/// and the quadrature points of its head (up to q3) and of its tail.
struct Curve {
    knots: Knots,
    head_pts: Points,
    tail_pts: Points,
    m: usize,
}

impl Curve {
    fn new(knots: Knots, m: usize) -> Curve {
        let (head_pts, tail_pts) = quadrature(m, knots.pos[3]);
        Curve {
            knots,
            head_pts,
            tail_pts,
            m,
        }
    }

    /// The sum of the head rows under a shape.
    fn head_sum(&self, sh: Shape) -> f64 {
        moments(&self.knots, &sh, &self.head_pts).0
    }

    /// The sum of the tail rows under a shape.
    fn tail_sum(&self, sh: Shape) -> f64 {
        moments(&self.knots, &sh, &self.tail_pts).0
    }

    /// The tail exponent giving the tail sum `need` with offset `c` and
    /// plateau `s`. The tail sum decreases with a: bisect on ln a with the sign
    /// flipped.
    fn solve_a(&self, c: f64, s: f64, need: f64) -> f64 {
        let f = |la: f64| {
            -self.tail_sum(Shape {
                a: la.exp(),
                c,
                s,
                ..BASE_SHAPE
            })
        };
        bisect(A_MIN.ln(), A_MAX.ln(), 50, -need, f).exp()
    }

    /// `tail` (whose sum is `tail_total`) with the head's exponent b bisected
    /// on ln b in `[lo, hi]` so that the whole sum reaches `target`.
    fn scale_head(&self, tail: Shape, tail_total: f64, lo: f64, hi: f64, target: f64) -> Shape {
        let f = |lb: f64| {
            self.head_sum(Shape {
                b: lb.exp(),
                ..tail
            }) + tail_total
        };
        Shape {
            b: bisect(lo, hi, 50, target, f).exp(),
            ..tail
        }
    }

    /// The shape whose rows add up to `target` (as far as the knots allow),
    /// with a variance approaching `variance` when that is finite.
    fn fit(&self, variance: f64, target: f64) -> Shape {
        let (q3, max) = (self.knots.val[3], self.knots.val[4]);
        let tail_lo = self.tail_sum(Shape {
            a: A_MAX,
            ..BASE_SHAPE
        });
        let tail_hi = self.tail_sum(Shape {
            a: A_MIN,
            ..BASE_SHAPE
        });
        let need = target - self.head_sum(BASE_SHAPE);
        if need < tail_lo {
            // Even a tail at q3 is too heavy: push the lower segments down.
            let tail = Shape {
                a: A_MAX,
                ..BASE_SHAPE
            };
            self.scale_head(tail, tail_lo, 1e-4f64.ln(), 0.0, target)
        } else if need > tail_hi {
            let tail = Shape {
                a: A_MIN,
                ..BASE_SHAPE
            };
            self.scale_head(tail, tail_hi, 0.0, 1e4f64.ln(), target)
        } else if max > q3 && variance.is_finite() {
            self.fit_variance(variance, target, (tail_lo, tail_hi))
        } else {
            Shape {
                a: self.solve_a(0.0, 0.0, need),
                ..BASE_SHAPE
            }
        }
    }

    /// The mean fixed by a, the variance approached by a knob k that trades, in
    /// order of increasing variance: the lowest segment gathered at q1 (k < -1),
    /// a tail offset (-1 <= k < 0), a plateau at the maximum (0 < k <= 1), the
    /// lowest segment gathered at the minimum (k > 1); bisection on k approaches
    /// the variance. The lowest segment moves only as far as the tail can still
    /// make up the mean (`tails`: the tail sums at the largest and smallest a).
    fn fit_variance(&self, variance: f64, target: f64, tails: (f64, f64)) -> Shape {
        let (tail_lo, tail_hi) = tails;
        let (q3, max) = (self.knots.val[3], self.knots.val[4]);
        let w_tail: f64 = self.tail_pts.iter().map(|p| p.1).sum();
        let mean = target / self.m as f64;
        let need_for = |b0: f64| target - self.head_sum(Shape { b0, ..BASE_SHAPE });
        // need_for decreases as b0 grows (the lowest segment moves up).
        let b_hi = if need_for(1e3) >= tail_lo {
            1e3
        } else {
            bisect(0.0, 1e3f64.ln(), 40, 0.0, |lb| tail_lo - need_for(lb.exp())).exp()
        };
        let b_lo = if need_for(1e-3) <= tail_hi {
            1e-3
        } else {
            bisect(1e-3f64.ln(), 0.0, 40, 0.0, |lb| {
                tail_hi - need_for(lb.exp())
            })
            .exp()
        };
        let shape_for = |k: f64| {
            let (b0, k) = if k < -1.0 {
                ((-1.0 - k) * b_hi.ln(), -1.0)
            } else if k > 1.0 {
                ((k - 1.0) * b_lo.ln(), 1.0)
            } else {
                (0.0, k)
            };
            let b0 = b0.exp();
            let need = need_for(b0);
            let mu = ((need - q3 * w_tail) / ((max - q3) * w_tail)).clamp(0.0, 1.0);
            let (c, s) = if k < 0.0 {
                (-k * 0.98 * mu, 0.0)
            } else {
                (0.0, k * 0.98 * mu)
            };
            Shape {
                b0,
                a: self.solve_a(c, s, need),
                c,
                s,
                ..BASE_SHAPE
            }
        };
        let var_for = |k: f64| {
            let sh = shape_for(k);
            let (_, head_sq) = moments(&self.knots, &sh, &self.head_pts);
            let (_, tail_sq) = moments(&self.knots, &sh, &self.tail_pts);
            (head_sq + tail_sq) / self.m as f64 - mean * mean
        };
        shape_for(bisect(-2.0, 2.0, 30, variance, var_for))
    }
}

/// Pins the quartile pairs (`qp` positions, `cands` values, nearest first)
/// into `lengths` and fixes the total. The nearest pairs can make `total`
/// unreachable in small matrices; other exact pairs may not, so there every
/// combination is tried and the one that comes nearest is kept.
fn pin_quartiles(
    lengths: &[u32],
    pins: &[(usize, f64)],
    qp: &[(usize, usize, f64, f64)],
    cands: &[Vec<(f64, f64)>],
    total: u64,
) -> Vec<u32> {
    let pins_for = |choice: [usize; 3]| {
        let mut p = pins.to_vec();
        for k in 0..3 {
            let (x0, x1) = cands[k][choice[k]];
            p.push((qp[k].0, x0));
            p.push((qp[k].1, x1));
        }
        p
    };
    let (mut best, mut left) = pin_and_fix(lengths, &mut pins_for([0, 0, 0]), total);
    if left != 0 && lengths.len() <= 20_000 {
        for a in 0..cands[0].len() {
            for b in 0..cands[1].len() {
                for c in 0..cands[2].len() {
                    let (l, d) = pin_and_fix(lengths, &mut pins_for([a, b, c]), total);
                    if d.abs() < left.abs() {
                        (best, left) = (l, d);
                    }
                }
            }
        }
    }
    best
}

// ---------------------------------------------------------------------------
// The stand-in generator.

/// Options of [`standin`]; the default keeps the full size, seed 0.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct StandinOptions {
    /// Scale the matrix down (rows and columns by the same factor, row-length
    /// distribution kept) so that it holds about this many nonzeros; `None`
    /// keeps the full size.
    pub nnz_budget: Option<u64>,
    /// Seed of every random choice.
    pub seed: u64,
}

/// Where the entries of a row go.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Placement {
    /// Within `lower` columns left and `upper` right of the (scaled) diagonal; a
    /// `cluster` share of each row is one contiguous run holding the diagonal,
    /// the rest spread uniformly through the band (widened where a row is longer
    /// than the band).
    Banded {
        /// Lower bandwidth (scaled).
        lower: usize,
        /// Upper bandwidth (scaled).
        upper: usize,
        /// Share of a row in the contiguous run around the diagonal.
        cluster: f64,
    },
    /// Anywhere, with probability proportional to column lengths built from the
    /// column statistics (uniform when there are none).
    Scattered,
}

/// Target against achieved statistics of a stand-in, for printing and tests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StandinReport {
    /// `Group/Name` of the imitated matrix.
    pub name: String,
    /// Kind class.
    pub class: KindClass,
    /// Row scale factor (1 at full size).
    pub scale: f64,
    /// Rows of the stand-in.
    pub rows: usize,
    /// Columns of the stand-in.
    pub cols: usize,
    /// Nonzeros aimed at: the original mean row length times `rows`.
    pub target_nnz: u64,
    /// Nonzeros of the stand-in.
    pub achieved_nnz: u64,
    /// Row-length statistics aimed at (with the maximum capped when scaling made
    /// the longest row exceed a quarter of the budget or the columns).
    pub target: Dist,
    /// Row-length statistics of the stand-in.
    pub achieved: Dist,
    /// Column-length statistics of the original, when known.
    pub target_col: Option<Dist>,
    /// Column-length statistics of the stand-in.
    pub achieved_col: Dist,
    /// Column placement used.
    pub placement: Placement,
    /// The collection had no row statistics: the target was made up from the
    /// mean (quartiles around it, no variance target).
    pub synthetic_target: bool,
    /// The longest row was capped by scaling.
    pub max_capped: bool,
}

/// Relative difference `|a - t| / max(|t|, 1)`.
pub fn rel_err(target: f64, achieved: f64) -> f64 {
    (achieved - target).abs() / target.abs().max(1.0)
}

impl StandinReport {
    /// Largest relative error over mean, quartiles, minimum and maximum.
    pub fn worst_summary_error(&self) -> f64 {
        let (t, a) = (&self.target, &self.achieved);
        [
            rel_err(t.mean, a.mean),
            rel_err(t.q1, a.q1),
            rel_err(t.median, a.median),
            rel_err(t.q3, a.q3),
            rel_err(t.min, a.min),
            rel_err(t.max, a.max),
        ]
        .into_iter()
        .fold(0.0, f64::max)
    }

    /// Relative error of the variance (NaN when there is no target).
    pub fn variance_error(&self) -> f64 {
        let (t, a) = (self.target.variance, self.achieved.variance);
        (a - t).abs() / t.abs().max(1.0)
    }
}

impl fmt::Display for StandinReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} ({}, {:?}) scale {:.4}: {} x {}, nnz {} (target {}){}{}",
            self.name,
            self.class.name(),
            self.placement,
            self.scale,
            self.rows,
            self.cols,
            self.achieved_nnz,
            self.target_nnz,
            if self.synthetic_target {
                ", made-up target"
            } else {
                ""
            },
            if self.max_capped { ", max capped" } else { "" },
        )?;
        writeln!(
            f,
            "  {:<9} {:>14} {:>14} {:>9}",
            "rows", "target", "achieved", "rel.err"
        )?;
        let (t, a) = (&self.target, &self.achieved);
        for (name, tv, av) in [
            ("min", t.min, a.min),
            ("q1", t.q1, a.q1),
            ("median", t.median, a.median),
            ("q3", t.q3, a.q3),
            ("max", t.max, a.max),
            ("mean", t.mean, a.mean),
            ("variance", t.variance, a.variance),
        ] {
            writeln!(
                f,
                "  {name:<9} {tv:>14.4} {av:>14.4} {:>8.2}%",
                100.0 * rel_err(tv, av)
            )?;
        }
        if let Some(tc) = &self.target_col {
            let ac = &self.achieved_col;
            write!(
                f,
                "  cols: median {} -> {}, max {} -> {}, mean {:.3} -> {:.3}",
                tc.median, ac.median, tc.max, ac.max, tc.mean, ac.mean
            )?;
        }
        Ok(())
    }
}

/// A made-up summary around a mean, for matrices without row statistics.
fn synthetic_dist(mean: f64, cap: f64) -> Dist {
    let max = (2.0 * mean).ceil().max(mean.ceil()).min(cap);
    Dist {
        min: (mean / 2.0).floor().min(max),
        q1: mean.floor().min(max),
        median: mean.round().min(max),
        q3: mean.ceil().min(max),
        max,
        mean,
        variance: f64::NAN,
    }
}

/// Builds a stand-in for one collection matrix (see the module docs) and reports
/// target against achieved statistics.
///
/// Errors: a matrix with no rows or columns, or one that even scaled does not fit
/// 32-bit indices.
pub fn standin(
    stats: &MatrixStats,
    opts: &StandinOptions,
) -> Result<(Csr<f64>, StandinReport), SparseError> {
    if stats.rows == 0 || stats.cols == 0 {
        return Err(SparseError::InvalidParameter(format!(
            "{} has no rows or columns",
            stats.full_name()
        )));
    }
    let t = Scaled::of(stats, opts);
    let (m, n) = (t.rows, t.cols);
    let mut rng = rng_for(opts.seed, 0);
    let mut lengths = row_lengths(&t.target, m, n, t.target_nnz);
    lengths.shuffle(&mut rng);
    let placement = placement_of(stats, n);
    let matrix = match placement {
        Placement::Banded {
            lower,
            upper,
            cluster,
        } => build_rows(m, n, &lengths, opts.seed, |r, k, rng, out| {
            banded_row(r, k, m, n, lower, upper, cluster, rng, out)
        })?,
        Placement::Scattered => {
            let weights = column_weights(stats, m, n, t.target_nnz, &mut rng);
            let table = Alias::new(&weights);
            build_rows(m, n, &lengths, opts.seed, |_, k, rng, out| {
                let mut scratch = Vec::new();
                sample_weighted_distinct(rng, k, &table, out, &mut scratch)
            })?
        }
    };
    let report = StandinReport {
        name: stats.full_name(),
        class: stats.kind_class(),
        scale: t.scale,
        rows: m,
        cols: n,
        target_nnz: t.target_nnz,
        achieved_nnz: matrix.nnz() as u64,
        target: t.target,
        achieved: Dist::of_rows(&matrix),
        target_col: stats.col,
        achieved_col: Dist::of_cols(&matrix),
        placement,
        synthetic_target: t.synthetic_target,
        max_capped: t.max_capped,
    };
    Ok((matrix, report))
}

/// The size and row-length target of a stand-in, scaled to the nonzero budget.
struct Scaled {
    /// Rows and columns kept over those of the original.
    scale: f64,
    rows: usize,
    cols: usize,
    target_nnz: u64,
    target: Dist,
    /// The collection gave no row statistics: `target` is made up.
    synthetic_target: bool,
    /// The longest row was cut to fit the scaled matrix.
    max_capped: bool,
}

impl Scaled {
    fn of(stats: &MatrixStats, opts: &StandinOptions) -> Scaled {
        let (rows, cols) = (stats.rows as f64, stats.cols as f64);
        let nnz = stats.nnz as f64;
        let mean = nnz / rows;
        let scale = match opts.nnz_budget {
            Some(b) if nnz > 0.0 => (b as f64 / nnz).min(1.0),
            _ => 1.0,
        };
        let m = ((rows * scale).round() as usize)
            .max(stats.rows.min(8))
            .max(1);
        let target_nnz = (mean * m as f64).round() as u64;
        let synthetic_target = stats.row.is_none();
        let mut target = stats.row.unwrap_or_else(|| synthetic_dist(mean, cols));
        if stats.rows < 4 {
            // Ginkgo's quartile table reads outside the data for fewer than 4 rows:
            // its quartiles are noise, so keep them inside [min, max] and in order.
            let mut q =
                [target.q1, target.median, target.q3].map(|v| v.clamp(target.min, target.max));
            q.sort_by(f64::total_cmp);
            [target.q1, target.median, target.q3] = q;
        }
        let mut max_capped = false;
        if scale < 1.0 {
            let cap = (0.25 * target_nnz as f64).max(target.q3).floor();
            if target.max > cap {
                target.max = cap;
                max_capped = true;
            }
        }
        let n = ((cols * scale).round() as usize)
            .max(target.max as usize)
            .clamp(1, stats.cols);
        if target.max > n as f64 {
            target.max = n as f64;
            max_capped = true;
        }
        target.mean = target_nnz as f64 / m as f64;
        Scaled {
            scale,
            rows: m,
            cols: n,
            target_nnz,
            target,
            synthetic_target,
            max_capped,
        }
    }
}

/// Where a stand-in's nonzeros go: in a band around the diagonal for square
/// matrices that are nested-dissection ordered, discretisations or narrow
/// banded (bandwidths scaled to `n` columns), else scattered.
fn placement_of(stats: &MatrixStats, n: usize) -> Placement {
    let cols = stats.cols as f64;
    let class = stats.kind_class();
    let square = stats.rows == stats.cols;
    let bw_known = stats.lower_bandwidth >= 0 && stats.upper_bandwidth >= 0;
    let band_frac = if bw_known {
        (stats.lower_bandwidth + stats.upper_bandwidth) as f64 / cols
    } else {
        1.0
    };
    if !(square && (stats.is_nd || class == KindClass::Discretisation || band_frac <= 0.1)) {
        return Placement::Scattered;
    }
    let sc = |bw: i64| {
        if bw_known {
            ((bw as f64 * n as f64 / cols).ceil() as usize).min(n)
        } else {
            n
        }
    };
    Placement::Banded {
        lower: sc(stats.lower_bandwidth),
        upper: sc(stats.upper_bandwidth),
        cluster: if class == KindClass::Discretisation {
            0.75
        } else {
            0.5
        },
    }
}

/// The weight of each of `n` columns in a scattered stand-in: lengths drawn
/// from the column statistics when known (in a random order), else uniform.
fn column_weights(
    stats: &MatrixStats,
    m: usize,
    n: usize,
    target_nnz: u64,
    rng: &mut ChaCha8Rng,
) -> Vec<f64> {
    match &stats.col {
        Some(cd) => {
            let mut cd = *cd;
            cd.max = cd.max.min(m as f64);
            let mut w = row_lengths(&cd, n, m, target_nnz);
            w.shuffle(rng);
            w.into_iter().map(|x| x as f64).collect()
        }
        None => vec![1.0; n],
    }
}

/// Fills one banded row: `k` distinct sorted columns in the band around the
/// scaled diagonal of row `r`, a `cluster` share of them contiguous.
#[allow(clippy::too_many_arguments)]
fn banded_row(
    r: usize,
    k: usize,
    m: usize,
    n: usize,
    lower: usize,
    upper: usize,
    cluster: f64,
    rng: &mut ChaCha8Rng,
    out: &mut Vec<u32>,
) {
    out.clear();
    if k == 0 {
        return;
    }
    let d = if m == n {
        r
    } else {
        ((r as f64 + 0.5) * n as f64 / m as f64) as usize
    }
    .min(n - 1);
    let mut lo = d.saturating_sub(lower);
    let mut hi = (d + upper + 1).min(n);
    // Widen the window (both ways, within the matrix) until the row fits.
    while hi - lo < k {
        let grow = (k - (hi - lo)).div_ceil(2);
        lo = lo.saturating_sub(grow);
        hi = (hi + grow).min(n);
    }
    let w = hi - lo;
    let run = ((k as f64 * cluster).round() as usize).clamp(1, k);
    let run_start = d.saturating_sub(run / 2).clamp(lo, hi - run);
    let mut rest = Vec::new();
    sample_distinct(rng, k - run, w - run, &mut rest);
    let run_off = (run_start - lo) as u32;
    let mut run_done = false;
    for x in rest {
        if x >= run_off && !run_done {
            out.extend(run_start as u32..(run_start + run) as u32);
            run_done = true;
        }
        out.push(if x < run_off {
            lo as u32 + x
        } else {
            lo as u32 + x + run as u32
        });
    }
    if !run_done {
        out.extend(run_start as u32..(run_start + run) as u32);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    fn random_lengths(rng: &mut ChaCha8Rng, m: usize, hi: u32) -> Vec<u32> {
        (0..m).map(|_| rng.gen_range(0..=hi)).collect()
    }

    #[test]
    fn quartiles_follow_ginkgo_table() {
        // n = 4: positions (0,1), (1,2), (2,3), all halves.
        let d = Dist::of_lengths(&[1, 2, 3, 4]);
        assert_eq!((d.q1, d.median, d.q3), (1.5, 2.5, 3.5));
        // n = 5 (r = 1): q1 = .75 s[0] + .25 s[1], median s[2], q3 = .25 s[3] + .75 s[4].
        let d = Dist::of_lengths(&[10, 20, 30, 40, 50]);
        assert_eq!((d.q1, d.median, d.q3), (12.5, 30.0, 47.5));
        // n = 6 (r = 2): q1 s[1], median (s[2]+s[3])/2, q3 s[4].
        let d = Dist::of_lengths(&[1, 2, 3, 4, 5, 6]);
        assert_eq!((d.q1, d.median, d.q3), (2.0, 3.5, 5.0));
        // n = 7 (r = 3): q1 = .25 s[1] + .75 s[2], median s[3], q3 = .75 s[4] + .25 s[5].
        let d = Dist::of_lengths(&[0, 4, 8, 12, 16, 20, 24]);
        assert_eq!((d.q1, d.median, d.q3), (7.0, 12.0, 17.0));
        assert_eq!(d.variance, 64.0);
    }

    #[test]
    fn lengths_reproduce_their_own_summary() {
        let mut rng = rng_for(3, 0);
        for m in [9usize, 100, 1001, 20_003] {
            let l = random_lengths(&mut rng, m, 40);
            let d = Dist::of_lengths(&l);
            let total: u64 = l.iter().map(|&x| x as u64).sum();
            let got = Dist::of_lengths(&row_lengths(&d, m, 40, total));
            assert_eq!(
                (got.min, got.q1, got.median, got.q3, got.max),
                (d.min, d.q1, d.median, d.q3, d.max)
            );
            assert!((got.mean - d.mean).abs() < 1e-9, "{m}: {got:?} vs {d:?}");
            assert!(
                rel_err(d.variance, got.variance) < 0.1,
                "{m}: {got:?} vs {d:?}"
            );
        }
    }

    #[test]
    fn kind_classes() {
        let cases = [
            ("structural problem", false, KindClass::Discretisation),
            ("power network problem", false, KindClass::Circuit),
            ("directed weighted graph", false, KindClass::Graph),
            ("linear programming problem", false, KindClass::Optimisation),
            ("combinatorial problem", true, KindClass::Discretisation),
            ("combinatorial problem", false, KindClass::Other),
        ];
        for (kind, is_nd, class) in cases {
            assert_eq!(KindClass::of(kind, is_nd), class, "{kind} (nd: {is_nd})");
        }
    }
}
