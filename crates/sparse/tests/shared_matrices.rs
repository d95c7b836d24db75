//! Every shared SuiteSparse matrix is read and its shape and row-length
//! statistics equal the independently computed index (scipy), and the parallel
//! CPU SpMV equals the reference on each. Without ../shared the same checks run
//! on the small fixtures shipped in tests/data/.

use sparse::mm::{read_path, ReadOptions};
use sparse::spmv::{compare, spmv_par, spmv_ref};
use sparse::testing::{missing, shared_dir};
use sparse::{Csr, Features};
use std::path::{Path, PathBuf};

/// The shared matrices folder, if present.
fn shared_matrices() -> Option<PathBuf> {
    shared_dir("matrices").filter(|d| d.join("index.csv").is_file())
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

/// One row of index.csv: the file and the values we check.
struct Expected {
    file: String,
    field: String,
    nrows: usize,
    ncols: usize,
    nnz_expanded: usize,
    row_min: f64,
    row_mean: f64,
    row_max: f64,
    row_var: f64,
    empty_rows: usize,
}

fn load_index(dir: &Path) -> Vec<Expected> {
    let mut rdr = csv::Reader::from_path(dir.join("index.csv")).expect("open index.csv");
    let headers = rdr.headers().expect("index.csv header").clone();
    let col = |name: &str| {
        headers
            .iter()
            .position(|h| h == name)
            .unwrap_or_else(|| panic!("index.csv has no column {name}"))
    };
    let (file, field, nrows, ncols, nnz) = (
        col("file"),
        col("field"),
        col("nrows"),
        col("ncols"),
        col("nnz_expanded"),
    );
    let (min, mean, max, var, empty) = (
        col("row_nnz_min"),
        col("row_nnz_mean"),
        col("row_nnz_max"),
        col("row_nnz_var"),
        col("empty_rows"),
    );
    rdr.records()
        .map(|r| {
            let r = r.expect("index.csv record");
            let f = |i: usize| -> f64 {
                r[i].parse()
                    .unwrap_or_else(|_| panic!("bad number {:?} in index.csv", &r[i]))
            };
            Expected {
                file: r[file].to_string(),
                field: r[field].to_string(),
                nrows: f(nrows) as usize,
                ncols: f(ncols) as usize,
                nnz_expanded: f(nnz) as usize,
                row_min: f(min),
                row_mean: f(mean),
                row_max: f(max),
                row_var: f(var),
                empty_rows: f(empty) as usize,
            }
        })
        .collect()
}

/// Equal to the ~6 significant digits index.csv is printed with.
fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-5 * a.abs().max(b.abs()) + 1e-9
}

fn read(dir: &Path, e: &Expected) -> Csr<f64> {
    let opts = ReadOptions {
        complex_real_part: e.field == "complex",
    };
    read_path::<f64>(&dir.join(&e.file), &opts).unwrap_or_else(|err| panic!("{}: {err}", e.file))
}

/// Differences between the matrix and its index row, in words.
fn stat_problems(a: &Csr<f64>, e: &Expected) -> Vec<String> {
    let lens: Vec<f64> = a.row_lengths().map(|l| l as f64).collect();
    let m = lens.len().max(1) as f64;
    let mean = lens.iter().sum::<f64>() / m;
    let var = lens.iter().map(|l| (l - mean) * (l - mean)).sum::<f64>() / m;
    let min = lens.iter().copied().fold(f64::INFINITY, f64::min);
    let max = lens.iter().copied().fold(0.0, f64::max);
    let empty = lens.iter().filter(|&&l| l == 0.0).count();
    let mut p = Vec::new();
    let mut check = |what: &str, got: f64, want: f64| {
        if !close(got, want) {
            p.push(format!("{}: {what} = {got}, index says {want}", e.file));
        }
    };
    check("rows", a.nrows() as f64, e.nrows as f64);
    check("cols", a.ncols() as f64, e.ncols as f64);
    check("nnz (expanded)", a.nnz() as f64, e.nnz_expanded as f64);
    check("row min", min, e.row_min);
    check("row mean", mean, e.row_mean);
    check("row max", max, e.row_max);
    check("row variance", var, e.row_var);
    check("empty rows", empty as f64, e.empty_rows as f64);
    // The feature vector the CLI prints must say the same.
    let f = Features::of(a);
    for (name, want) in [
        ("nnz", e.nnz_expanded as f64),
        ("nnz_row_min", e.row_min),
        ("nnz_row_mean", e.row_mean),
        ("nnz_row_max", e.row_max),
        ("nnz_row_var", e.row_var),
        ("empty_rows", e.empty_rows as f64),
    ] {
        check(
            &format!("feature {name}"),
            f.get(name).expect("feature name"),
            want,
        );
    }
    p
}

fn spmv_problem(a: &Csr<f64>, file: &str) -> Option<String> {
    let x: Vec<f64> = (0..a.ncols())
        .map(|i| 1.0 + ((i * 7919) % 13) as f64 * 0.37 - 2.0)
        .collect();
    let y_ref = spmv_ref(a, &x).expect("x length");
    let y = spmv_par(a, &x).expect("x length");
    let c = compare(a, &x, &y, &y_ref);
    (!c.ok()).then(|| format!("{file}: spmv_par differs from spmv_ref ({c:?})"))
}

/// Checks every matrix of a folder against its index.csv.
fn check_folder(dir: &Path) {
    let index = load_index(dir);
    assert!(!index.is_empty(), "{} lists no matrices", dir.display());
    let mut problems = Vec::new();
    for e in &index {
        let a = read(dir, e);
        problems.extend(stat_problems(&a, e));
        problems.extend(spmv_problem(&a, &e.file));
    }
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
    eprintln!("checked {} matrices in {}", index.len(), dir.display());
}

#[test]
fn shared_matrices_match_index_and_spmv_par_matches_reference() {
    match shared_matrices() {
        Some(dir) => check_folder(&dir),
        None => {
            missing("../shared/matrices", "skipping: ../shared/matrices not found (set SPMV_SHARED_DIR); the fixtures test covers tests/data");
        }
    }
}

#[test]
fn fixtures_match_index_and_spmv_par_matches_reference() {
    check_folder(&fixtures());
}

#[test]
fn fixtures_cover_several_fields_and_symmetries() {
    let index = load_index(&fixtures());
    let fields: std::collections::BTreeSet<&str> = index.iter().map(|e| e.field.as_str()).collect();
    assert!(fields.len() >= 3, "fixtures cover only {fields:?}");
    for e in &index {
        let a = read(&fixtures(), e);
        assert!(a.nnz() > 0, "{} read as empty", e.file);
    }
}
