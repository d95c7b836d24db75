//! Every malformed file in tests/bad_files/ produces its specific error kind at
//! the line where the problem is, and the reader never trusts a header with memory.

use sparse::error::ParseErrorKind::{self, *};
use sparse::mm::{read_bytes, read_path, read_str, ReadOptions};
use sparse::SparseError;
use std::path::{Path, PathBuf};

fn bad_files() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/bad_files")
}

/// File name, expected kind, expected 1-based line (0: the file as a whole).
const TABLE: &[(&str, ParseErrorKind, usize)] = &[
    ("empty.mtx", Empty, 1),
    ("whitespace_only.mtx", Empty, 1),
    ("no_banner.mtx", BadBanner, 1),
    ("banner_misspelled.mtx", BadBanner, 1),
    ("banner_too_few_words.mtx", BadBanner, 1),
    ("banner_vector_object.mtx", BadBanner, 1),
    ("format_unknown.mtx", UnsupportedFormat, 1),
    ("field_unknown.mtx", UnsupportedField, 1),
    ("symmetry_unknown.mtx", UnsupportedSymmetry, 1),
    ("complex_not_allowed.mtx", ComplexNotAllowed, 1),
    ("pattern_array.mtx", InvalidCombination, 1),
    ("hermitian_real.mtx", InvalidCombination, 1),
    ("size_line_missing.mtx", BadSizeLine, 4),
    ("size_line_two_numbers.mtx", BadSizeLine, 3),
    ("size_line_negative.mtx", BadSizeLine, 2),
    ("size_line_text.mtx", BadSizeLine, 2),
    ("size_line_overflow.mtx", TooLarge, 2),
    ("not_square_symmetric.mtx", NotSquare, 2),
    ("array_not_square_skew.mtx", NotSquare, 2),
    ("claims_1e12_nonzeros.mtx", TooLarge, 2),
    ("claims_2e9_nonzeros.mtx", ExceedsData, 2),
    ("dims_too_large.mtx", TooLarge, 2),
    ("array_expanded_too_large.mtx", TooLarge, 2),
    ("missing_value.mtx", WrongFieldCount, 4),
    ("extra_field.mtx", WrongFieldCount, 4),
    ("pattern_with_value.mtx", WrongFieldCount, 4),
    ("complex_missing_imaginary.mtx", WrongFieldCount, 4),
    ("value_not_a_number.mtx", NonNumeric, 4),
    ("value_trailing_garbage.mtx", NonNumeric, 4),
    ("index_not_a_number.mtx", NonNumeric, 4),
    ("index_fractional.mtx", NonNumeric, 4),
    ("integer_field_fraction.mtx", NonNumeric, 4),
    ("index_zero.mtx", IndexOutOfRange, 3),
    ("index_column_too_big.mtx", IndexOutOfRange, 4),
    ("index_row_too_big.mtx", IndexOutOfRange, 4),
    ("index_negative.mtx", IndexOutOfRange, 3),
    ("skew_diagonal.mtx", TriangleViolation, 4),
    ("truncated_entries.mtx", Truncated, 6),
    ("truncated_no_final_newline.mtx", Truncated, 5),
    ("too_many_entries.mtx", TooManyEntries, 5),
    ("array_too_many_values.mtx", TooManyEntries, 5),
    ("array_truncated.mtx", Truncated, 6),
    ("crlf_error_on_line_6.mtx", WrongFieldCount, 6),
    ("comments_before_error.mtx", NonNumeric, 9),
    ("non_utf8.mtx", NotUtf8, 5),
    ("truncated_gzip.mtx.gz", Gzip, 0),
    ("corrupt_gzip.mtx.gz", Gzip, 0),
    ("not_gzip.mtx.gz", Gzip, 0),
    ("nested_gzip.mtx.gz", NestedGzip, 0),
    ("dims_exceed_text.mtx", ExceedsData, 2),
    ("header_whitespace_huge_nnz.mtx", ExceedsData, 3),
    ("array_exceeds_text.mtx", ExceedsData, 2),
];

/// Files whose banner says complex are read asking for the real part, so that
/// the error they hold is the one reached, except the one testing the refusal.
fn options_for(name: &str) -> ReadOptions {
    ReadOptions {
        complex_real_part: name.starts_with("complex_") && name != "complex_not_allowed.mtx",
    }
}

fn kind_and_line(e: &SparseError) -> (ParseErrorKind, usize) {
    match e {
        SparseError::Parse { kind, line, .. } => (*kind, *line),
        other => panic!("expected a parse error, got {other:?}"),
    }
}

#[test]
fn each_bad_file_gives_its_kind_and_line() {
    assert!(TABLE.len() >= 25);
    let mut wrong = Vec::new();
    for &(name, kind, line) in TABLE {
        let path = bad_files().join(name);
        assert!(path.is_file(), "missing fixture {name}");
        let opts = options_for(name);
        for (how, got) in [
            ("read_path f64", read_path::<f64>(&path, &opts).map(|_| ())),
            ("read_path f32", read_path::<f32>(&path, &opts).map(|_| ())),
        ] {
            match got {
                Ok(()) => wrong.push(format!("{name} ({how}): read without error")),
                Err(e) => {
                    if how == "read_path f64" {
                        eprintln!("{name:<34} {e}");
                    }
                    let got = kind_and_line(&e);
                    if got != (kind, line) {
                        wrong.push(format!(
                            "{name} ({how}): expected {kind:?} on line {line}, got {got:?}: {e}"
                        ));
                    }
                    // The message names the line so a person can find it.
                    if !e.to_string().starts_with(&format!("line {line}: ")) {
                        wrong.push(format!(
                            "{name}: message `{e}` does not start with the line"
                        ));
                    }
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn every_fixture_in_the_folder_is_in_the_table() {
    let listed: std::collections::BTreeSet<&str> = TABLE.iter().map(|t| t.0).collect();
    for entry in std::fs::read_dir(bad_files()).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        assert!(
            listed.contains(name.as_str()),
            "{name} has no expected error in TABLE"
        );
    }
}

#[test]
fn bytes_and_paths_agree() {
    for &(name, kind, line) in TABLE {
        // read_bytes only recognises gzip by its magic, so a text file named
        // .gz is read as text there; the others must give the same error.
        if name == "not_gzip.mtx.gz" {
            continue;
        }
        let bytes = std::fs::read(bad_files().join(name)).unwrap();
        let e = read_bytes::<f64>(&bytes, &options_for(name)).unwrap_err();
        assert_eq!(kind_and_line(&e), (kind, line), "{name}: {e}");
    }
}

#[test]
fn a_missing_file_is_an_io_error() {
    let e = read_path::<f64>(
        &bad_files().join("no_such_file.mtx"),
        &ReadOptions::default(),
    )
    .unwrap_err();
    assert_eq!(kind_and_line(&e), (Io, 0));
    assert!(e.to_string().contains("no_such_file.mtx"), "{e}");
}

/// A large file (parsed in parallel chunks) still reports the first error a
/// sequential reader would meet, with its exact line.
#[test]
fn errors_deep_in_large_files_have_exact_lines() {
    let n = 60_000;
    let entries: Vec<String> = (1..=n)
        .map(|i| format!("{i} {} {}.25", (i * 7) % n + 1, i))
        .collect();
    let build = |nnz: usize, lines: &[String]| {
        format!(
            "%%MatrixMarket matrix coordinate real general\n% c\n{n} {n} {nnz}\n{}\n",
            lines.join("\n")
        )
    };
    // The entry on file line 4 + k is entries[k].
    let ok = build(n, &entries);
    assert!(
        ok.len() > 1 << 20,
        "the test needs a file large enough to be split"
    );
    assert_eq!(
        read_str::<f64>(&ok, &ReadOptions::default()).unwrap().nnz(),
        n
    );

    let mut bad = entries.clone();
    bad[41_234] = "5 5 x".into();
    bad[50_000] = "0 1 1.0".into();
    let e = read_str::<f64>(&build(n, &bad), &ReadOptions::default()).unwrap_err();
    assert_eq!(kind_and_line(&e), (NonNumeric, 4 + 41_234));

    let e = read_str::<f64>(&build(n - 10, &entries), &ReadOptions::default()).unwrap_err();
    assert_eq!(kind_and_line(&e), (TooManyEntries, 4 + n - 10));

    let e = read_str::<f64>(&build(n + 1, &entries), &ReadOptions::default()).unwrap_err();
    assert_eq!(kind_and_line(&e), (Truncated, 4 + n));

    // Too many entries is met before a later malformed line.
    let mut late = entries.clone();
    late[n - 1] = "garbage".into();
    let e = read_str::<f64>(&build(n - 5, &late), &ReadOptions::default()).unwrap_err();
    assert_eq!(kind_and_line(&e), (TooManyEntries, 4 + n - 5));
}

/// A header claiming far more than the bytes hold is refused without
/// reserving memory for it (this would abort the test process otherwise).
#[test]
fn huge_headers_do_not_allocate() {
    for (text, kind) in [
        ("%%MatrixMarket matrix coordinate real general\n2000000000 2000000000 2000000000\n1 1 1\n", ExceedsData),
        ("%%MatrixMarket matrix coordinate pattern symmetric\n2147483647 2147483647 2147483647\n", ExceedsData),
        ("%%MatrixMarket matrix array real general\n46340 46340\n1\n", ExceedsData),
        // Few entries, but row_ptr, x and y for 50 million rows: refused on the size line.
        ("%%MatrixMarket matrix coordinate real general\n50000000 1 1\n1 1 1\n", ExceedsData),
        ("%%MatrixMarket\tmatrix  coordinate real\tgeneral\r\n50000000\t1  1\r\n1\t1 1\r\n", ExceedsData),
        ("%%MatrixMarket matrix coordinate real general\n1 1 1000000000000\n1 1 1\n", TooLarge),
    ] {
        let e = read_str::<f64>(text, &ReadOptions::default()).unwrap_err();
        assert_eq!(kind_and_line(&e).0, kind, "{text}: {e}");
    }
}

/// Limits are checked on the size line, whatever whitespace separates its
/// numbers, and gzip is decoded once with a cap.
#[test]
fn limits_apply_on_the_size_line_and_to_gzip() {
    use sparse::mm::{gunzip_limited, read_bytes_with, read_header, SizeLimits};
    let limits = SizeLimits {
        max_rows: 100,
        max_cols: 100,
        max_nnz: 10,
        max_text_bytes: 1 << 20,
    };
    let opts = ReadOptions::default();
    for (text, kind, what) in [
        (
            "%%MatrixMarket matrix coordinate real general\n101 2 1\n1 1 1\n",
            TooLarge,
            "rows = 101",
        ),
        (
            "%%MatrixMarket\tmatrix coordinate real general\r\n2\t\t101 1\r\n1 1 1\r\n",
            TooLarge,
            "cols = 101",
        ),
        (
            "%%MatrixMarket matrix coordinate real general\n2  2   11\n1 1 1\n",
            TooLarge,
            "nnz = 11",
        ),
        (
            "%%MatrixMarket matrix array real general\n4 4\n1\n",
            TooLarge,
            "nnz = 16",
        ),
    ] {
        let e = read_bytes_with::<f64>(text.as_bytes(), &opts, &limits).unwrap_err();
        assert_eq!(kind_and_line(&e), (kind, 2), "{text}: {e}");
        assert!(e.to_string().contains(what), "{e}");
        let h = read_header(text.as_bytes(), &opts, &limits).unwrap_err();
        assert_eq!(h, e, "the header reader is the same parser");
    }
    let ok = "%%MatrixMarket matrix coordinate real symmetric\n3 3 2\n1 1 1\n3 1 2\n";
    let d = read_header(ok.as_bytes(), &opts, &limits).unwrap();
    assert_eq!((d.nrows, d.ncols, d.entries, d.mirrored), (3, 3, 2, true));
    // Symmetric expansion past the nnz limit is caught before the arrays are built.
    let sym = format!(
        "%%MatrixMarket matrix coordinate real symmetric\n9 9 6\n{}",
        (2..=7).map(|i| format!("{i} 1 1\n")).collect::<String>()
    );
    let e = read_bytes_with::<f64>(sym.as_bytes(), &opts, &limits).unwrap_err();
    assert!(
        e.to_string().contains("nnz after symmetric expansion = 12"),
        "{e}"
    );
    // A gzip bomb stops at the cap; gzip inside gzip is refused at once.
    let gz = |b: &[u8]| {
        use std::io::Write;
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        enc.write_all(b).unwrap();
        enc.finish().unwrap()
    };
    let bomb = gz(&vec![b' '; 4 << 20]);
    let e = gunzip_limited(&bomb, 1 << 20).unwrap_err();
    assert_eq!(kind_and_line(&e), (TooLarge, 0));
    let e = read_bytes_with::<f64>(&gz(&bomb), &opts, &limits).unwrap_err();
    assert_eq!(kind_and_line(&e), (NestedGzip, 0));
    assert_eq!(gunzip_limited(&gz(b"abc"), 3).unwrap(), b"abc");
}
