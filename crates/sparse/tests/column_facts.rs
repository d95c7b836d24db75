//! The column facts a `Csr` keeps (band, sampled column distances) and its
//! row facts (length statistics, histogram) equal the plain entry-by-entry
//! definitions after every constructor, on awkward shapes, and the features
//! computed from them equal the features computed from the arrays, bit for bit.

use proptest::prelude::*;
use sparse::gen::Family;
use sparse::mm::{read_path, ReadOptions};
use sparse::{ColumnFacts, Csr, Features, RowFacts, Scalar, SparseError};
use std::path::Path;

/// The kept facts equal the reference, and `Features::of` (which uses them)
/// equals `Features::of_pattern` (which reads the arrays) bit for bit.
fn check<T: Scalar>(what: &str, a: &Csr<T>) {
    let want = ColumnFacts::of_pattern(a.nrows(), a.row_ptr(), a.col_idx());
    assert_eq!(a.column_facts(), want, "{what}: column facts");
    assert_eq!(
        a.row_facts(),
        RowFacts::of_pattern(a.row_ptr()),
        "{what}: row facts"
    );
    let bits = |f: Features| f.values.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    let kept = bits(Features::of(a));
    let read = bits(Features::of_pattern(
        a.nrows(),
        a.ncols(),
        a.row_ptr(),
        a.col_idx(),
    ));
    assert_eq!(kept, read, "{what}: features");
    // Rows are sorted and without duplicates, whatever the input was.
    for r in 0..a.nrows() {
        let (cols, _) = a.row(r);
        assert!(cols.windows(2).all(|w| w[0] < w[1]), "{what}: row {r}");
    }
}

/// A pattern from row lengths with columns `(r * 7919 + j * step) % ncols`,
/// sorted and deduplicated when `sorted`, else left as drawn.
fn pattern(lens: &[usize], ncols: usize, step: usize, sorted: bool) -> (Vec<u32>, Vec<u32>) {
    let (mut rp, mut ci) = (vec![0u32], Vec::new());
    for (r, &l) in lens.iter().enumerate() {
        let mut row: Vec<u32> = (0..l)
            .map(|j| ((r * 7919 + j * step) % ncols) as u32)
            .collect();
        if sorted {
            row.sort_unstable();
            row.dedup();
        }
        ci.extend(row);
        rp.push(ci.len() as u32);
    }
    (rp, ci)
}

fn build(nrows: usize, ncols: usize, (rp, ci): (Vec<u32>, Vec<u32>)) -> Csr<f64> {
    let n = ci.len();
    Csr::try_new(nrows, ncols, rp, ci, vec![1.0; n]).unwrap()
}

#[test]
fn every_constructor_keeps_true_facts() {
    let a = Csr::<f64>::try_new(2, 5, vec![0, 3, 5], vec![4, 0, 4, 1, 0], vec![1.0; 5]).unwrap();
    check("try_new, unsorted with a duplicate", &a);
    assert_eq!(a.col_idx(), &[0, 4, 0, 1]);
    check("cast", &a.cast::<f32>());
    assert_eq!(a.cast::<f32>().column_facts(), a.column_facts());
    let t = Csr::<f32>::from_triplets(3, 4, &[2, 0, 2, 2], &[0, 3, 3, 0], &[1.0; 4]).unwrap();
    check("from_triplets", &t);
    check("zeros", &Csr::<f64>::zeros(7, 3).unwrap());
    check("identity", &Csr::<f64>::identity(9000).unwrap());
    for f in Family::ALL {
        check(f.name(), &f.generate(20_000, 7).unwrap());
    }
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let mut read = 0;
    for e in std::fs::read_dir(&data).unwrap() {
        let p = e.unwrap().path();
        if p.to_string_lossy().ends_with(".mtx.gz") {
            let opts = ReadOptions {
                complex_real_part: true,
            };
            check(
                &p.display().to_string(),
                &read_path::<f64>(&p, &opts).unwrap(),
            );
            read += 1;
        }
    }
    assert!(read >= 5, "the fixtures in {} are missing", data.display());
}

#[test]
fn awkward_shapes() {
    check("0 x 0", &Csr::<f64>::zeros(0, 0).unwrap());
    check("0 x 5", &Csr::<f64>::zeros(0, 5).unwrap());
    check("5 x 0", &Csr::<f64>::zeros(5, 0).unwrap());
    check("1 x 1 empty", &Csr::<f64>::zeros(1, 1).unwrap());
    let one = Csr::<f64>::identity(1).unwrap();
    check("1 x 1", &one);
    assert_eq!(one.column_facts().band, 0);
    // Empty rows everywhere, among them rows whose neighbours descend.
    let lens: Vec<usize> = (0..10_000).map(|r| [0, 0, 3, 0, 1][r % 5]).collect();
    check(
        "empty rows",
        &build(10_000, 50, pattern(&lens, 50, 11, true)),
    );
    // One huge row among short ones, beyond the sample's size.
    let lens: Vec<usize> = (0..9000)
        .map(|r| if r == 4100 { 600_000 } else { 2 })
        .collect();
    check(
        "one huge row",
        &build(9000, 700_000, pattern(&lens, 700_000, 1, true)),
    );
    // Very wide: one row across 2^31 - 1 columns, the farthest column last.
    let wide = Csr::<f64>::try_new(
        1,
        sparse::MAX_DIM,
        vec![0, 3],
        vec![0, 5, (sparse::MAX_DIM - 1) as u32],
        vec![1.0; 3],
    )
    .unwrap();
    check("very wide", &wide);
    assert_eq!(wide.column_facts().band, (sparse::MAX_DIM - 1) as u64);
    // Very tall: a million rows, one column.
    let lens: Vec<usize> = (0..1 << 20).map(|r| r % 2).collect();
    let tall = build(1 << 20, 1, pattern(&lens, 1, 1, true));
    check("very tall", &tall);
    assert_eq!(tall.column_facts().band, (1 << 20) - 1);
}

#[test]
fn large_matrices_are_sampled_and_unsorted_rows_found_in_any_block() {
    // 300 000 rows of 0..6 entries (~750 000 entries: a sample stride of 2,
    // the scan spread over the thread pool).
    let n = 300_000;
    let lens: Vec<usize> = (0..n).map(|r| (r * 31) % 7).collect();
    let a = build(n, n, pattern(&lens, n, 977, true));
    check("sampled", &a);
    let f = a.column_facts();
    assert!(f.dist_nnz > 0 && (f.dist_nnz as usize) < a.nnz(), "{f:?}");
    // The same rows drawn unsorted (with duplicates when the step wraps):
    // each is sorted and summed wherever it lies, in or out of the sample.
    let b = build(n, 50, pattern(&lens, 50, 20, false));
    check("unsorted", &b);
    assert!(b.nnz() < lens.iter().sum::<usize>(), "duplicates summed");
    // One descent in one row of an unsampled block, nothing else.
    let (rp, mut ci) = pattern(&lens, n, 977, true);
    let r = 4096 + 17;
    let s = rp[r] as usize;
    assert!(rp[r + 1] as usize - s >= 2);
    ci.swap(s, s + 1);
    let c = build(n, n, (rp, ci));
    check("one descent", &c);
    assert_eq!(c, a);
    // The farthest entry is the last of a row in an unsampled block, then
    // the first of one (columns far right of the rows, then far left).
    let (rp, mut ci) = pattern(&lens, n, 977, true);
    let wide = 1usize << 30;
    let s = rp[r + 1] as usize - 1;
    ci[s] = (wide - 1) as u32;
    let d = build(n, wide, (rp.clone(), ci.clone()));
    check("far right", &d);
    assert_eq!(d.column_facts().band, (wide - 1 - r) as u64);
    let far = 71 * 4096 + 10;
    assert_eq!((far / 4096) % 2, 1, "an unsampled block");
    let wide_ci: Vec<u32> = ci
        .iter()
        .map(|&c| c.min(n as u32 - 1) + 4_000_000)
        .collect();
    let mut ci = wide_ci;
    let s = rp[far] as usize;
    assert!(rp[far + 1] as usize > s);
    ci[s] = 0;
    let e = build(n, wide, (rp, ci));
    check("far left", &e);
    assert!(e.column_facts().band >= 4_000_000);
}

#[test]
fn the_first_bad_column_is_named_whatever_the_threads() {
    let n = 300_000;
    let lens: Vec<usize> = vec![4; n];
    let (rp, mut ci) = pattern(&lens, 1000, 3, true);
    for r in [200_001, 90_000, 290_000] {
        ci[rp[r] as usize + 2] = 1000 + r as u32;
    }
    let err = Csr::<f32>::try_new(n, 1000, rp, ci, vec![1.0; 4 * n]).unwrap_err();
    assert_eq!(
        err,
        SparseError::ColumnOutOfRange {
            row: 90_000,
            col: 91_000,
            ncols: 1000
        }
    );
    // No column at all: any entry is out of range, empty rows are not.
    let err = Csr::<f32>::try_new(3, 0, vec![0, 0, 0, 1], vec![0], vec![1.0]).unwrap_err();
    assert!(matches!(
        err,
        SparseError::ColumnOutOfRange {
            row: 2,
            col: 0,
            ncols: 0
        }
    ));
}

proptest! {
    #[test]
    fn random_patterns_sorted_or_not(
        lens in proptest::collection::vec(0usize..12, 0..9000),
        ncols in 1usize..300,
        step in 1usize..50,
        sorted: bool,
    ) {
        let a = build(lens.len(), ncols, pattern(&lens, ncols, step, sorted));
        check("random", &a);
        let (rows, cols): (Vec<u32>, Vec<u32>) = (0..a.nrows())
            .flat_map(|r| a.row(r).0.iter().map(move |&c| (r as u32, c)))
            .unzip();
        let t = Csr::<f64>::from_triplets(a.nrows(), ncols, &rows, &cols, a.values()).unwrap();
        prop_assert_eq!(t, a);
    }
}
