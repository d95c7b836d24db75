//! Matrix Market variants read into the hand-computed CSR, and read -> write -> read
//! gives the same matrix bit for bit.

use sparse::mm::{matrix_files, read_bytes, read_path, read_str, write, write_path, ReadOptions};
use sparse::testing::shared_dir_or_skip;
use sparse::{Csr, Scalar};
use std::path::{Path, PathBuf};

fn read(text: &str) -> Csr<f64> {
    read_str::<f64>(text, &ReadOptions::default()).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn read_complex(text: &str) -> Csr<f64> {
    let opts = ReadOptions {
        complex_real_part: true,
    };
    read_str::<f64>(text, &opts).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// Asserts the CSR arrays of `a`.
fn assert_csr(
    a: &Csr<f64>,
    shape: (usize, usize),
    row_ptr: &[u32],
    col_idx: &[u32],
    values: &[f64],
) {
    assert_eq!((a.nrows(), a.ncols()), shape, "shape");
    assert_eq!(a.row_ptr(), row_ptr, "row_ptr");
    assert_eq!(a.col_idx(), col_idx, "col_idx");
    assert_eq!(a.values(), values, "values");
}

#[test]
fn coordinate_real_general_unsorted_with_duplicates() {
    let a = read(
        "%%MatrixMarket matrix coordinate real general\n\
         % a comment\n\
         3 4 5\n\
         3 2 -1.5\n\
         1 1 2\n\
         1 4 3e2\n\
         3 2 0.5\n\
         2 3 0\n",
    );
    // The explicit zero stays; the duplicate (3,2) sums to -1.
    assert_csr(
        &a,
        (3, 4),
        &[0, 2, 3, 4],
        &[0, 3, 2, 1],
        &[2.0, 300.0, 0.0, -1.0],
    );
}

#[test]
fn coordinate_double_symmetric_mirrors_off_diagonal() {
    let a = read(
        "%%MatrixMarket matrix coordinate double symmetric\n3 3 4\n1 1 4\n2 1 1\n3 1 2\n3 3 5\n",
    );
    assert_csr(
        &a,
        (3, 3),
        &[0, 3, 4, 6],
        &[0, 1, 2, 0, 0, 2],
        &[4.0, 1.0, 2.0, 1.0, 2.0, 5.0],
    );
}

#[test]
fn coordinate_integer_skew_symmetric_negates_mirror() {
    let a = read("%%MatrixMarket matrix coordinate integer skew-symmetric\n3 3 2\n2 1 3\n3 2 -4\n");
    assert_csr(
        &a,
        (3, 3),
        &[0, 1, 3, 4],
        &[1, 0, 2, 1],
        &[-3.0, 3.0, 4.0, -4.0],
    );
}

#[test]
fn coordinate_pattern_general_upper_case_crlf_blank_lines() {
    let a = read(
        "%%MATRIXMARKET MATRIX COORDINATE PATTERN GENERAL\r\n%\r\n\r\n2 3 3\r\n1 3\r\n\r\n2 1\r\n% late comment\r\n2 2\r\n",
    );
    assert_csr(&a, (2, 3), &[0, 1, 3], &[2, 0, 1], &[1.0, 1.0, 1.0]);
}

#[test]
fn coordinate_pattern_symmetric_accepts_upper_triangle_entries() {
    // Some SuiteSparse files (Pajek/USpowerGrid) store the upper triangle.
    let a = read("%%MatrixMarket matrix coordinate pattern symmetric\n3 3 2\n1 2\n2 3\n");
    assert_csr(&a, (3, 3), &[0, 1, 3, 4], &[1, 0, 2, 1], &[1.0; 4]);
}

#[test]
fn coordinate_complex_hermitian_and_general_keep_real_part() {
    let h = read_complex(
        "%%MatrixMarket matrix coordinate complex hermitian\n2 2 3\n1 1 2.0 0.0\n2 1 1.5 -0.5\n2 2 3.0 0\n",
    );
    assert_csr(&h, (2, 2), &[0, 2, 4], &[0, 1, 0, 1], &[2.0, 1.5, 1.5, 3.0]);
    let g = read_complex(
        "%%MatrixMarket matrix coordinate complex general\n2 2 2\n2 1 -1 7\n1 2 0.25 -1e3\n",
    );
    assert_csr(&g, (2, 2), &[0, 1, 2], &[1, 0], &[0.25, -1.0]);
}

#[test]
fn array_general_is_column_major() {
    let a = read("%%MatrixMarket matrix array real general\n2 3\n1\n2\n3\n4\n5\n6\n");
    assert_csr(
        &a,
        (2, 3),
        &[0, 3, 6],
        &[0, 1, 2, 0, 1, 2],
        &[1.0, 3.0, 5.0, 2.0, 4.0, 6.0],
    );
    let i = read("%%MatrixMarket matrix array integer general\n1 2\n% comment\n-7\n\n8\n");
    assert_csr(&i, (1, 2), &[0, 2], &[0, 1], &[-7.0, 8.0]);
}

#[test]
fn array_symmetric_stores_lower_triangle() {
    let a = read("%%MatrixMarket matrix array real symmetric\n3 3\n1\n2\n3\n4\n5\n6\n");
    assert_csr(
        &a,
        (3, 3),
        &[0, 3, 6, 9],
        &[0, 1, 2, 0, 1, 2, 0, 1, 2],
        &[1.0, 2.0, 3.0, 2.0, 4.0, 5.0, 3.0, 5.0, 6.0],
    );
}

#[test]
fn array_skew_symmetric_has_no_diagonal() {
    let a = read("%%MatrixMarket matrix array real skew-symmetric\n3 3\n1\n2\n3\n");
    assert_csr(
        &a,
        (3, 3),
        &[0, 2, 4, 6],
        &[1, 2, 0, 2, 0, 1],
        &[-1.0, -2.0, 1.0, -3.0, 2.0, 3.0],
    );
}

#[test]
fn array_complex_hermitian_real_part() {
    let a = read_complex("%%MatrixMarket matrix array complex hermitian\n2 2\n1 0\n2 1\n3 0\n");
    assert_csr(&a, (2, 2), &[0, 2, 4], &[0, 1, 0, 1], &[1.0, 2.0, 2.0, 3.0]);
}

#[test]
fn empty_matrices_and_odd_whitespace() {
    assert_csr(
        &read("%%MatrixMarket matrix coordinate real general\n0 0 0\n"),
        (0, 0),
        &[0],
        &[],
        &[],
    );
    assert_csr(
        &read("%%MatrixMarket matrix coordinate real symmetric\n3 3 0"),
        (3, 3),
        &[0, 0, 0, 0],
        &[],
        &[],
    );
    assert_csr(
        &read("%%MatrixMarket matrix array real general\n0 5\n"),
        (0, 5),
        &[0],
        &[],
        &[],
    );
    // A byte order mark before the banner.
    assert_csr(
        &read("\u{feff}%%MatrixMarket matrix coordinate real general\n1 1 1\n1 1 2\n"),
        (1, 1),
        &[0, 1],
        &[0],
        &[2.0],
    );
    // Leading blanks, tabs, trailing blanks, no final newline.
    let a = read(" %%MatrixMarket\tmatrix coordinate real general  \n  2\t2 2 \n\t1\t1 +1.5  \n  2   2\t-.5e1");
    assert_csr(&a, (2, 2), &[0, 1, 2], &[0, 1], &[1.5, -5.0]);
}

#[test]
fn single_precision_reads_round_to_nearest() {
    let a = read_str::<f32>(
        "%%MatrixMarket matrix coordinate real general\n1 2 2\n1 1 0.1\n1 2 16777217\n",
        &ReadOptions::default(),
    )
    .unwrap();
    assert_eq!(a.values(), &[0.1f32, 16777216.0]);
}

/// Writes and reads back, checking every value's bits.
fn roundtrip<T: Scalar>(a: &Csr<T>) {
    let mut text = Vec::new();
    write(a, &mut text).unwrap();
    let b = read_bytes::<T>(&text, &ReadOptions::default()).unwrap();
    assert_eq!(a.row_ptr(), b.row_ptr());
    assert_eq!(a.col_idx(), b.col_idx());
    assert_eq!((a.nrows(), a.ncols()), (b.nrows(), b.ncols()));
    for (x, y) in a.values().iter().zip(b.values()) {
        assert!(
            x.to_f64().to_bits() == y.to_f64().to_bits()
                || (x.to_f64().is_nan() && y.to_f64().is_nan()),
            "{x:?} read back as {y:?}"
        );
    }
}

#[test]
fn awkward_values_roundtrip_exactly() {
    let vals = [
        0.1,
        -1.0 / 3.0,
        1e-300,
        f64::MIN_POSITIVE / 8.0, // subnormal
        f64::MAX,
        -0.0,
        123_456_789.123_456_78,
        2.0f64.powi(60),
        f64::INFINITY,
        f64::NAN,
    ];
    let n = vals.len();
    let a = Csr::<f64>::try_new(
        1,
        n,
        vec![0, n as u32],
        (0..n as u32).collect(),
        vals.to_vec(),
    )
    .unwrap();
    roundtrip(&a);
    let b = Csr::<f32>::try_new(
        1,
        n,
        vec![0, n as u32],
        (0..n as u32).collect(),
        vals.iter().map(|&v| v as f32).collect(),
    )
    .unwrap();
    roundtrip(&b);
}

#[test]
fn matrix_files_are_the_mtx_and_mtx_gz_files_of_a_folder_sorted() {
    let dir = std::env::temp_dir().join(format!("spmv-matrix-files-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    for name in ["b.mtx.gz", "a.mtx", "index.csv", "c.gz", "d.mtx.txt", "mtx"] {
        std::fs::write(dir.join(name), "").unwrap();
    }
    let found = matrix_files(&dir);
    let missing_folder = matrix_files(&dir.join("none"));
    std::fs::remove_dir_all(&dir).unwrap();
    let names: Vec<String> = found
        .unwrap()
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["a.mtx", "b.mtx.gz"]);
    assert!(missing_folder.is_err());
}

#[test]
fn fixtures_roundtrip_in_both_precisions() {
    let opts = ReadOptions {
        complex_real_part: true,
    };
    let files = matrix_files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data")).unwrap();
    assert!(files.len() >= 4);
    for f in files {
        roundtrip(&read_path::<f64>(&f, &opts).unwrap());
        roundtrip(&read_path::<f32>(&f, &opts).unwrap());
    }
}

#[test]
fn shared_matrices_roundtrip() {
    let Some(dir) = shared_dir_or_skip("matrices") else {
        return;
    };
    let opts = ReadOptions {
        complex_real_part: true,
    };
    let files = matrix_files(&dir).unwrap();
    for f in &files {
        roundtrip(&read_path::<f64>(f, &opts).unwrap_or_else(|e| panic!("{}: {e}", f.display())));
    }
    eprintln!("{} shared matrices round-tripped", files.len());
}

#[test]
fn write_path_gz_and_plain_read_back() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let a = read(
        "%%MatrixMarket matrix coordinate real symmetric\n3 3 3\n1 1 1.25\n3 1 -2\n2 2 1e-9\n",
    );
    for name in ["mm_roundtrip_test.mtx", "mm_roundtrip_test.mtx.gz"] {
        let path = dir.join(name);
        write_path(&a, &path).unwrap();
        let b = read_path::<f64>(&path, &ReadOptions::default()).unwrap();
        assert_eq!(a, b, "{name}");
        std::fs::remove_file(&path).unwrap();
    }
}

/// A file large enough to be parsed and assembled in parallel, unsorted and
/// with duplicates, equals the matrix built from its expanded triplets.
#[test]
fn large_unsorted_symmetric_file_equals_triplet_build() {
    let (n, entries) = (5_000u32, 200_000usize);
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut text =
        format!("%%MatrixMarket matrix coordinate real skew-symmetric\n{n} {n} {entries}\n");
    let (mut rows, mut cols, mut vals) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..entries {
        let a = (next() % n as u64) as u32;
        let b = (next() % n as u64) as u32;
        let (i, j) = if a == b {
            ((a + 1) % n, a)
        } else {
            (a.max(b), a.min(b))
        };
        let (i, j) = if next() % 5 == 0 { (j, i) } else { (i, j) }; // some in the upper triangle
        let v = (next() % 2001) as f64 / 8.0 - 125.0;
        text.push_str(&format!("{} {} {v}\n", i + 1, j + 1));
        rows.extend([i, j]);
        cols.extend([j, i]);
        vals.extend([v, -v]);
    }
    assert!(text.len() > 2 << 20);
    let expected = Csr::<f64>::from_triplets(n as usize, n as usize, &rows, &cols, &vals).unwrap();
    let got = read(&text);
    assert_eq!(got, expected);
    assert!(
        got.nnz() < 2 * entries,
        "the test should contain duplicates"
    );
}
