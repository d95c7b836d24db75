//! Golden record of what the analysis path computes, so that making it faster
//! cannot change its results: for every shared matrix (skipped with a printed
//! reason when the folder is absent, a failure under CI) and a set of generated
//! matrices of 1M-4M nonzeros, the feature vector (every value, exactly), a
//! digest of the binning under every scheme, and the plan each shipped PoCL
//! model makes in its precision must equal `tests/data/golden_plans.tsv`.
//!
//! `SPMV_WRITE_GOLDEN=1` rewrites the file from this build (only when the
//! results are meant to change, e.g. a retrained model).

use selector::Model;
use sparse::gen::Family;
use sparse::mm::{read_path, ReadOptions};
use sparse::testing::{missing, shared_dir};
use sparse::{Binning, Csr, Features, Scheme};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn manifest() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn golden_path() -> PathBuf {
    manifest().join("tests/data/golden_plans.tsv")
}

/// The shipped CPU (PoCL pthread) models, sorted by file name.
fn pocl_models() -> Vec<(String, Model)> {
    let dir = manifest().join("../../models");
    let mut v: Vec<(String, Model)> = std::fs::read_dir(&dir)
        .expect("the models folder")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy();
            n.starts_with("pthread-") && n.ends_with(".json")
        })
        .map(|p| {
            let m = Model::load(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p.file_stem().unwrap().to_string_lossy().into_owned(), m)
        })
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(v.len() >= 2, "expected the f32 and f64 PoCL models");
    v
}

fn shared_files() -> Option<Vec<PathBuf>> {
    sparse::mm::matrix_files(&shared_dir("matrices")?).ok()
}

/// Generated matrices large enough for the parallel feature pass, the sampled
/// column locality and every bin of the ladder.
fn generated() -> Vec<(String, Csr<f64>)> {
    let mut specs: Vec<(Family, usize)> = Family::CORPUS.iter().map(|&f| (f, 1 << 20)).collect();
    specs.extend([
        (Family::Stencil3d27, 4_000_000),
        (Family::PowerLaw, 4_000_000),
        (Family::UniformRandom, 4_000_000),
        (Family::OneHugeRow, 1 << 20),
        (Family::TallThin, 1 << 20),
    ]);
    specs
        .into_iter()
        .map(|(f, n)| {
            let a = f.generate(n, 42).expect("generated matrix");
            (format!("gen:{}:{n}", f.name()), a)
        })
        .collect()
}

/// A 64-bit digest of a binning (bins' first rows and nonzeros), FNV-1a.
fn digest(b: &Binning) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |x: u64| {
        for byte in x.to_le_bytes() {
            h ^= byte as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    eat(b.u as u64);
    for (rows, nnz) in b.bins.iter().zip(&b.bin_nnz) {
        eat(rows.len() as u64);
        rows.iter().for_each(|&r| eat(r as u64));
        eat(*nnz);
    }
    format!("{h:016x}")
}

/// The record of one matrix: name, then `key=value` fields, tab-separated.
fn record(name: &str, a: &Csr<f64>, models: &[(String, Model)]) -> Vec<(String, String)> {
    let f = Features::of(a);
    // `{}` prints the shortest text that parses back to the same f64.
    let values: Vec<String> = f.values.iter().map(|v| format!("{v}")).collect();
    let mut out = vec![
        ("matrix".to_string(), name.to_string()),
        ("features".to_string(), values.join(",")),
    ];
    let bins: Vec<String> = Scheme::all()
        .into_iter()
        .map(|s| format!("{s}:{}", digest(&Binning::new(a.row_ptr(), s))))
        .collect();
    out.push(("binning".to_string(), bins.join(",")));
    for (model_name, m) in models {
        let p = m.predict(&f, a.row_ptr());
        let plan = serde_json::to_string(&p.plan).unwrap();
        out.push((format!("plan[{model_name}]"), plan));
        out.push((format!("plan_binning[{model_name}]"), digest(&p.binning)));
    }
    out
}

fn line(fields: &[(String, String)]) -> String {
    let v: Vec<String> = fields.iter().map(|(k, v)| format!("{k}={v}")).collect();
    v.join("\t")
}

fn parse_golden(text: &str) -> BTreeMap<String, BTreeMap<String, String>> {
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let fields: BTreeMap<String, String> = l
                .split('\t')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            (fields["matrix"].clone(), fields)
        })
        .collect()
}

/// Every matrix of the record: the generated ones always, the shared ones when there.
fn matrices() -> Vec<(String, Csr<f64>)> {
    let mut out = generated();
    match shared_files() {
        Some(files) => {
            for p in files {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                let opts = ReadOptions {
                    complex_real_part: true,
                };
                match read_path::<f64>(&p, &opts) {
                    Ok(a) => out.push((name, a)),
                    Err(e) => eprintln!("not recorded: {name}: {e}"),
                }
            }
        }
        None => {
            missing(
                "../shared/matrices",
                "SKIP shared part: no shared matrices folder (set SPMV_SHARED_DIR)",
            );
        }
    }
    out
}

fn write_golden(path: &Path, records: &[Vec<(String, String)>]) {
    let mut text = String::from(
        "# features, binning digests and PoCL model plans per matrix: see tests/golden_plans.rs\n",
    );
    for r in records {
        text.push_str(&line(r));
        text.push('\n');
    }
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    eprintln!("wrote {} ({} matrices)", path.display(), records.len());
}

#[test]
fn features_binning_and_plans_equal_the_golden_record() {
    let models = pocl_models();
    let records: Vec<Vec<(String, String)>> = matrices()
        .iter()
        .map(|(name, a)| record(name, a, &models))
        .collect();
    let path = golden_path();
    if std::env::var("SPMV_WRITE_GOLDEN").is_ok_and(|v| v == "1") {
        write_golden(&path, &records);
        return;
    }
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (SPMV_WRITE_GOLDEN=1 writes it)", path.display()));
    let golden = parse_golden(&text);
    let mut diffs = Vec::new();
    for r in &records {
        let name = &r[0].1;
        let Some(g) = golden.get(name) else {
            diffs.push(format!("{name}: not in the golden record"));
            continue;
        };
        for (k, v) in &r[1..] {
            if g.get(k) != Some(v) {
                diffs.push(format!(
                    "{name}: {k}\n  now    {v}\n  golden {:?}",
                    g.get(k)
                ));
            }
        }
    }
    eprintln!("compared {} matrices with the golden record", records.len());
    assert!(
        diffs.is_empty(),
        "{} differences:\n{}",
        diffs.len(),
        diffs[..diffs.len().min(10)].join("\n")
    );
}

#[test]
fn bins_are_listed_only_for_a_plan_that_keeps_them() {
    // Kernels are chosen from the bins' sizes; a plan whose bins all chose
    // one kernel collapses to the single bin without listing them, and any
    // other plan carries the full binning of its scheme. The shipped models
    // make both kinds on the generated matrices.
    let (mut collapsed, mut kept) = (0, 0);
    let models = pocl_models();
    for (name, a) in generated() {
        let f = Features::of(&a);
        for (model_name, m) in &models {
            let p = m.predict_explained(&f, a.row_ptr());
            let e = p.explanation.as_ref().unwrap();
            let full = Binning::new(a.row_ptr(), e.stage1.scheme);
            // Stage 2 decided each non-empty bin of the stage-1 scheme, from
            // the full binning's sizes, as its stage-2 vector says.
            let decided: Vec<usize> = e.stage2.iter().map(|d| d.bin).collect();
            assert_eq!(decided, full.nonempty_bins().collect::<Vec<_>>(), "{name}");
            for d in &e.stage2 {
                let want = (full.row_count(d.bin), full.bin_nnz[d.bin]);
                assert_eq!((d.rows, d.nnz), want, "{name} {model_name}");
                let x2 = selector::stage2_vector(&f, &full, d.bin);
                assert_eq!(m.predict_kernel(&x2), d.kernel, "{name} {model_name}");
            }
            match e.collapsed_from {
                Some(s) => {
                    collapsed += 1;
                    assert_eq!(s, e.stage1.scheme);
                    assert_eq!(p.plan.scheme, Scheme::Single);
                    assert_eq!(p.binning, Binning::new(a.row_ptr(), Scheme::Single));
                    assert!(e.stage2.iter().all(|d| d.kernel == p.plan.kernels[0].1));
                }
                None => {
                    kept += usize::from(e.stage1.scheme != Scheme::Single);
                    assert_eq!(p.plan.scheme, e.stage1.scheme);
                    assert_eq!(p.binning, full, "{name} {model_name}");
                }
            }
        }
    }
    assert!(
        collapsed > 0 && kept > 0,
        "collapsed {collapsed}, kept {kept}"
    );
}
