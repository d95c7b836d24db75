//! The `spmv` binary as a user runs it: every subcommand on a real fixture,
//! its output shape, and exit codes that tell usage errors (64), bad data (65),
//! missing files (66) and a missing device (69) apart.

use std::path::PathBuf;
use std::process::{Command, Output};

fn spmv(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spmv"))
        .args(args)
        .current_dir(repo())
        .output()
        .expect("running spmv")
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn fixture(name: &str) -> String {
    repo()
        .join("crates/sparse/tests/data")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

fn bad_file(name: &str) -> String {
    repo()
        .join("crates/sparse/tests/bad_files")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[track_caller]
fn assert_exit(o: &Output, code: i32) {
    assert_eq!(
        o.status.code(),
        Some(code),
        "stdout:\n{}\nstderr:\n{}",
        text(&o.stdout),
        text(&o.stderr)
    );
}

/// Runs `spmv`, asserts it succeeded, and gives its standard output.
fn stdout_of(args: &[&str]) -> String {
    let o = spmv(args);
    assert_exit(&o, 0);
    text(&o.stdout)
}

/// Asserts that an output stream holds `want` (the stream is the message).
fn assert_says(stream: &[u8], want: &str) {
    let t = text(stream);
    assert!(t.contains(want), "wanted {want:?} in:\n{t}");
}

const CAN: &str = "HB__can_229.mtx.gz";

#[test]
fn info_prints_sizes_features_and_bins_as_json() {
    let o = spmv(&["info", &fixture(CAN), "--scheme", "10", "--json"]);
    assert_exit(&o, 0);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON on stdout");
    assert_eq!(v["rows"], 229, "{v}");
    assert_eq!(v["cols"], 229, "{v}");
    assert_eq!(v["nnz"], 1777, "{v}");
    let bins = v["bins"].as_array().expect("bins");
    let rows: u64 = bins.iter().map(|b| b["rows"].as_u64().unwrap()).sum();
    assert_eq!(rows, 229);
}

#[test]
fn run_prints_y_equal_to_the_reference_in_both_precisions() {
    let a: sparse::Csr<f64> =
        sparse::mm::read_path(std::path::Path::new(&fixture(CAN)), &Default::default()).unwrap();
    let y_ref = sparse::spmv::spmv_ref(&a, &vec![1.0; 229]).unwrap();
    for p in ["f32", "f64"] {
        let y: Vec<f64> = stdout_of(&["run", &fixture(CAN), "--precision", p])
            .lines()
            .map(|l| l.trim().parse().expect("one number per line"))
            .collect();
        assert_eq!(y.len(), 229);
        for (i, (a, b)) in y.iter().zip(&y_ref).enumerate() {
            assert!(
                (a - b).abs() <= 1e-4 * b.abs().max(1.0),
                "{p} row {i}: {a} vs {b}"
            );
        }
    }
}

#[test]
fn run_with_every_named_kernel_and_a_scheme() {
    for k in [
        "serial",
        "vector",
        "subvector8",
        "csr_adaptive",
        "merge_path",
        "merge_tile",
    ] {
        let y = stdout_of(&["run", &fixture(CAN), "--kernel", k]);
        assert_eq!(y.lines().count(), 229, "{k}");
    }
    let o = spmv(&["run", &fixture(CAN), "--scheme", "10", "--mode", "per_bin"]);
    assert_exit(&o, 0);
}

#[test]
fn predict_prints_a_plan_that_covers_every_row() {
    let o = spmv(&["predict", &fixture(CAN), "--json"]);
    assert_exit(&o, 0);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON on stdout");
    let bins = v["plan"]["bins"]
        .as_array()
        .unwrap_or_else(|| panic!("{v}"));
    let rows: u64 = bins.iter().map(|b| b["rows"].as_u64().unwrap()).sum();
    assert_eq!(rows, 229, "{v}");
    assert!(v["plan"]["scheme"].is_string(), "{v}");
    // The key is always there: null when the selector has no performance model.
    let t = v.get("predicted_ms").unwrap_or_else(|| panic!("{v}"));
    assert!(
        t.is_null() || t["plan"]["ms"].as_f64().is_some_and(|ms| ms > 0.0),
        "{v}"
    );
}

/// `--calls N` plans as the service does for N calls (with the H100 f32
/// model, whose performance part prices every candidate): the plan shown is
/// the candidate of least analysis + N x predicted time, and the planning
/// says so. Without `--calls`, the trees' plan and no planning; 0 calls is a
/// usage error.
#[test]
fn predict_with_calls_plans_as_the_service_does() {
    let model = repo().join("models/nvidia-h100-80gb-hbm3-f32.json");
    let model = model.to_string_lossy();
    let can = fixture(CAN);
    let trees = |extra: &[&str]| {
        let mut args = vec!["predict", "--json", "--model", &model, "--precision", "f32"];
        args.extend_from_slice(extra);
        args.push(&can);
        let o = spmv(&args);
        assert_exit(&o, 0);
        serde_json::from_slice::<serde_json::Value>(&o.stdout).expect("JSON on stdout")
    };
    let raw = trees(&[]);
    assert!(raw["planning"].is_null(), "{raw}");
    let planned = trees(&["--calls", "1000"]);
    let p = &planned["planning"];
    assert_eq!(p["expected_calls"], 1000, "{planned}");
    assert_eq!(p["method"], "perf_model", "{planned}");
    let chosen = p["chosen"].as_str().unwrap_or_else(|| panic!("{planned}"));
    // The chosen candidate is the plan shown, and no candidate was cheaper.
    let total = |c: &serde_json::Value| c["total_ms"].as_f64().unwrap_or(f64::INFINITY);
    let cands = p["candidates"].as_array().unwrap();
    let best = cands.iter().map(total).fold(f64::INFINITY, f64::min);
    let mine = cands.iter().find(|c| c["name"] == chosen).unwrap();
    assert_eq!(total(mine), best, "{planned}");
    if chosen.starts_with("single:") {
        assert_eq!(planned["plan"]["scheme"], "single", "{planned}");
    }
    let rows: u64 = planned["plan"]["bins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["rows"].as_u64().unwrap())
        .sum();
    assert_eq!(rows, 229, "{planned}");
    let o = spmv(&["predict", "--calls", "0", &can]);
    assert_exit(&o, 64);
}

#[test]
fn bench_prints_one_correct_line_per_kernel_with_csv_columns() {
    let out = stdout_of(&[
        "bench",
        &fixture(CAN),
        "--csv",
        "--precision",
        "f64",
        "--reps",
        "2",
        "--budget-ms",
        "50",
        "--copy-mb",
        "8",
    ]);
    let mut lines = out.lines().filter(|l| !l.starts_with('#'));
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    // scripts/gpu-campaign.sh and the reports read these columns by name.
    assert_eq!(
        header.join(","),
        "matrix,kernel,precision,nnz,median_ms,min_ms,spread,reps,gbps,bound_fraction,gflops,err_vs_bound,ok,ci_rel,converged,b2b_ms,b2b_calls"
    );
    let b2b_col = header.iter().position(|h| *h == "b2b_ms").unwrap();
    let calls_col = header.iter().position(|h| *h == "b2b_calls").unwrap();
    let ci_col = header.iter().position(|h| *h == "ci_rel").unwrap();
    let conv_col = header.iter().position(|h| *h == "converged").unwrap();
    let ok_col = header.iter().position(|h| *h == "ok").expect("ok column");
    let err_col = header
        .iter()
        .position(|h| *h == "err_vs_bound")
        .expect("err_vs_bound column");
    let rows: Vec<Vec<&str>> = lines
        .map(|l| l.split(',').collect())
        .filter(|r: &Vec<&str>| r.len() == header.len())
        .collect();
    assert!(rows.len() >= 10, "{out}");
    for r in &rows {
        assert_eq!(r[ok_col], "true", "{r:?}");
        let e: f64 = r[err_col].parse().unwrap();
        assert!(e <= 1.0, "{r:?}");
        // A converged kernel's CI is within the default 2% target.
        let ci: f64 = r[ci_col].parse().unwrap();
        if r[conv_col] == "true" {
            assert!(ci <= 0.02, "{r:?}");
        }
        // Back-to-back calls (method (b)) on every device line, none on the CPU's.
        if r[1] == "cpu_parallel" {
            assert_eq!((r[b2b_col], r[calls_col]), ("", "0"), "{r:?}");
        } else {
            let (ms, calls): (f64, usize) =
                (r[b2b_col].parse().unwrap(), r[calls_col].parse().unwrap());
            assert!(ms > 0.0 && (1..=100).contains(&calls), "{r:?}");
        }
    }
    assert!(
        rows.iter().any(|r| r[conv_col] == "true"),
        "some kernel converges: {out}"
    );
}

#[test]
fn bench_parse_reports_throughput_without_scipy() {
    let o = spmv(&[
        "bench-parse",
        &fixture(CAN),
        "--no-scipy",
        "--generated",
        "0",
        "--repeat",
        "1",
    ]);
    assert_exit(&o, 0);
    assert_says(&o.stdout, "HB__can_229");
}

#[test]
fn an_unknown_precision_is_a_usage_error_listing_the_valid_ones() {
    for cmd in ["run", "predict", "bench"] {
        let o = spmv(&[cmd, &fixture(CAN), "--precision", "f16"]);
        assert_exit(&o, 64);
        let err = text(&o.stderr);
        assert!(err.contains("f32") && err.contains("f64"), "{cmd}: {err}");
    }
}

#[test]
fn unknown_flags_kernels_and_schemes_are_usage_errors() {
    assert_exit(&spmv(&["run", &fixture(CAN), "--frobnicate"]), 64);
    assert_exit(&spmv(&["no-such-command"]), 64);
    assert_exit(&spmv(&["run", &fixture(CAN), "--kernel", "warp9"]), 64);
    assert_exit(&spmv(&["run", &fixture(CAN), "--scheme", "banana"]), 64);
    assert_exit(&spmv(&["run", &fixture(CAN), "--mode", "sideways"]), 64);
    assert_exit(&spmv(&["--help"]), 0);
}

#[test]
fn bad_data_is_65_and_a_missing_file_66() {
    let o = spmv(&["info", &bad_file("index_zero.mtx")]);
    assert_exit(&o, 65);
    assert_says(&o.stderr, "line");
    assert_exit(&spmv(&["run", &bad_file("banner_misspelled.mtx")]), 65);
    assert_exit(&spmv(&["info", "/no/such/file.mtx"]), 66);
    // An x file of the wrong length is bad data too.
    let dir = tempfile::tempdir().unwrap();
    let x = dir.path().join("x.txt");
    std::fs::write(&x, "1\n2\n3\n").unwrap();
    let o = spmv(&["run", &fixture(CAN), "--x", x.to_str().unwrap()]);
    assert_exit(&o, 65);
    assert_says(&o.stderr, "229 columns");
}

#[test]
fn a_device_that_does_not_exist_is_69() {
    let o = spmv(&["run", &fixture(CAN), "--device", "no-such-device-anywhere"]);
    assert_exit(&o, 69);
}

#[test]
fn bench_overhead_prices_features_and_prediction_in_spmv_equivalents() {
    let o = spmv(&[
        "bench-overhead",
        &fixture(CAN),
        "--families",
        "stencil2d",
        "--sizes",
        "2K",
        "--min-nnz",
        "0",
        "--precision",
        "f64",
        "--reps",
        "3",
        "--csv",
    ]);
    assert_exit(&o, 0);
    let out = text(&o.stdout);
    let mut lines = out.lines();
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    let names: Vec<&str> = rows.iter().map(|r| r[col("matrix")]).collect();
    assert_eq!(names, ["HB__can_229", "gen:stencil2d:2K"], "{out}");
    for r in &rows {
        let v = |name: &str| r[col(name)].parse::<f64>().unwrap();
        assert!(v("features_ms") > 0.0 && v("predict_ms") > 0.0, "{r:?}");
        assert!(v("binning_ms") >= 0.0 && v("spmv_ms") > 0.0, "{r:?}");
        let want = (v("features_ms") + v("predict_ms")) / v("spmv_ms");
        assert!((v("spmv_equivalents") - want).abs() <= 1e-9 * want, "{r:?}");
    }
    let err = text(&o.stderr);
    assert!(err.contains("worst family"), "{err}");
}

/// `spmv gen` writes the generated matrix `spmv bench --gen` times, in the
/// binary CSR layout (header, row_ptr, col_idx, values), under the name
/// `bench/cusparse_bench.py` maps back to `gen:FAMILY:NNZ`; a bad spec is a
/// usage error.
#[test]
fn gen_writes_binary_csr_files_a_peer_reads() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().display().to_string();
    let o = spmv(&["gen", "uniform:20000", "stencil2d:5000", "--out", &out]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let printed = String::from_utf8_lossy(&o.stdout);
    assert!(printed.contains("gen:uniform_random:20000"), "{printed}");
    let a = sparse::gen::Family::UniformRandom
        .generate(20_000, 1)
        .unwrap();
    let bytes = std::fs::read(dir.path().join("gen_uniform_random_20000.csr")).unwrap();
    assert_eq!(&bytes[..8], b"SPMVCSR\0");
    assert_eq!((bytes[10], bytes[11]), (4, 8));
    let u64_at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().unwrap());
    assert_eq!(
        (u64_at(16), u64_at(24), u64_at(32)),
        (a.nrows() as u64, a.ncols() as u64, a.nnz() as u64)
    );
    assert_eq!(bytes.len(), 40 + (a.nrows() + 1) * 4 + a.nnz() * (4 + 8));
    let last = a.values()[a.nnz() - 1];
    assert_eq!(&bytes[bytes.len() - 8..], &last.to_le_bytes());
    assert!(dir.path().join("gen_stencil2d_5000.csr").exists());
    let bad = spmv(&["gen", "nosuchfamily:10", "--out", &out]);
    assert!(!bad.status.success());
}
