//! `trainer fit --from-db` end to end through the binary: label a tiny corpus on
//! the OpenCL device into a fresh database, then fit and evaluate from that
//! database alone (no device is opened), for the device the database names, and
//! check the model files and the report with its cuSPARSE and bound columns.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn device_required() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
        || std::env::var("SPMV_REQUIRE_DEVICE").is_ok_and(|v| v == "1")
}

fn trainer(args: &[&str]) -> std::process::Output {
    let out = Command::new(env!("CARGO_BIN_EXE_trainer"))
        .args(args)
        .env_remove("DATABASE_URL")
        .env_remove("SPMV_DEVICE")
        .output()
        .expect("trainer runs");
    eprintln!(
        "trainer {}:\n{}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `trainer fit --from-db DB --device-name NAME --manifest M`, then `more`.
fn fit_from_db(db: &str, name: &str, m: &str, more: &[&str]) -> std::process::Output {
    let mut args = vec![
        "fit",
        "--from-db",
        db,
        "--device-name",
        name,
        "--manifest",
        m,
    ];
    args.extend_from_slice(more);
    trainer(&args)
}

#[tokio::test(flavor = "current_thread")]
async fn a_database_labelled_elsewhere_gives_models_without_a_device() {
    if let Err(e) = engine::Engine::new(None) {
        assert!(!device_required(), "an OpenCL device is required here: {e}");
        eprintln!("SKIP: no OpenCL device ({e})");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let manifest_dir = dir.path().join("training-data");
    std::fs::create_dir_all(&manifest_dir).unwrap();
    let manifest = manifest_dir.join("manifest.json");
    std::fs::write(
        &manifest,
        serde_json::json!({
            "description": "fit-from-db test corpus",
            "real_dir": repo().join("crates/sparse/tests/data"),
            "real_fallback_dir": repo().join("crates/sparse/tests/data"),
            "stats_file": repo().join("training-data/uf_stats.csv"),
            "standins": 0,
            "standin_nnz_budget": 1000,
            "generator_nnz": [],
            "seed": 42
        })
        .to_string(),
    )
    .unwrap();
    let db = dir.path().join("campaign.db").display().to_string();
    let m = manifest.display().to_string();
    let quick = ["--min-reps", "2", "--max-reps", "3"];
    let mut args = vec!["label", "--manifest", &m, "--database", &db];
    args.extend(quick);
    assert!(trainer(&args).status.success(), "labelling failed");

    // The database alone decides: read its device name as the lead would.
    let store = store::Store::connect(Some(&db)).await.unwrap();
    let devices = store.list_devices().await.unwrap();
    assert_eq!(devices.len(), 1);
    let name = devices[0].record.name.clone();
    store.close().await;

    let models = dir.path().join("models");
    let report = dir.path().join("report");
    let cusparse = dir.path().join("cusparse.csv");
    std::fs::write(
        &cusparse,
        "matrix,precision,nnz,ms_cupy,ms_spmv_raw,gbps\nHB__can_229,f64,1777,0.5,0.25,1.0\nHB__can_229,f32,1777,0.4,0.2,1.0\n",
    )
    .unwrap();
    let (md, rd, cd) = (
        models.display().to_string(),
        report.display().to_string(),
        cusparse.display().to_string(),
    );
    let out = fit_from_db(
        &db,
        &name,
        &m,
        &[
            "--models-dir",
            &md,
            "--out",
            &rd,
            "--cusparse",
            &cd,
            // A device that does not exist: fit must not open one.
            "--device",
            "no such device anywhere",
        ],
    );
    assert!(out.status.success(), "fit --from-db failed");
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        printed.contains("performance model: chosen plan's time median abs. error"),
        "{printed}"
    );
    for p in ["f32", "f64"] {
        let file = models.join(trainer::pipeline::model_file_name(
            &name,
            p.parse().unwrap(),
        ));
        let model = selector::Model::load(&file).unwrap();
        assert_eq!(model.card.device, name);
        assert_eq!(model.card.precision, p);
        // The performance model is fitted with the trees and carries the band
        // measured on the held-out matrices, which the report states.
        let perf = model.perf().expect("a performance model in the file");
        let band = perf.band.as_ref().expect("a held-out error band");
        assert!(
            band.low > 0.0 && band.low <= band.high && band.samples > 0,
            "{band:?}"
        );
        let md = std::fs::read_to_string(report.join(format!("report_{p}_all.md"))).unwrap();
        assert!(
            md.contains("## Performance model") && md.contains("median abs. error"),
            "{md}"
        );
        for f in [
            format!("evaluation_{p}_all.csv"),
            format!("report_{p}_all.md"),
            format!("fig6_{p}_all.svg"),
            format!("fig8_{p}_all.svg"),
        ] {
            assert!(report.join(&f).exists(), "{f}");
        }
        let csv = std::fs::read_to_string(report.join(format!("evaluation_{p}_all.csv"))).unwrap();
        let header = csv.lines().next().unwrap();
        for col in [
            "cusparse_ms",
            "bound_ms",
            "timing",
            "csr_adaptive_ms",
            "oracle_ms",
        ] {
            assert!(header.split(',').any(|c| c == col), "{col} in {header}");
        }
        assert!(csv.lines().skip(1).all(|l| l.ends_with(",stored")), "{csv}");
    }
    // The two checks on refitting the same database come before `trainer
    // evaluate`, which labels on this device and stores what it times (the
    // model's own plans among them) into the same database: after it, a fit
    // may see more measurements than the first one saw.
    same_database_same_perf_bytes(&db, &name, &m, dir.path(), &models);
    only_the_performance_model_is_refitted(&db, &name, &m, dir.path(), &models);
    evaluate_leaves_out_what_the_model_was_trained_on(&db, &name, dir.path(), &models);
    // A device name the database does not hold is refused, with the names it holds.
    let bad = fit_from_db(&db, "GPU that was never here", &m, &[]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains(&name));
}

/// The card lists the matrices the trees were fitted on, none of them among
/// the held-out ones the report evaluated; `trainer evaluate` on the whole
/// folder leaves them out and says how many, unless `--include-trained`.
fn evaluate_leaves_out_what_the_model_was_trained_on(
    db: &str,
    name: &str,
    dir: &Path,
    models: &Path,
) {
    let file = models.join(trainer::pipeline::model_file_name(
        name,
        "f64".parse().unwrap(),
    ));
    let model = selector::Model::load(&file).unwrap();
    let trained = &model.card.trained_on;
    let fixtures = repo().join("crates/sparse/tests/data");
    let all = trainer::corpus::real_items(&fixtures).unwrap();
    assert!(
        trained.len() >= 4 && trained.len() < all.len(),
        "{trained:?} of {}",
        all.len()
    );
    assert!(
        trained.windows(2).all(|w| w[0] < w[1]),
        "sorted: {trained:?}"
    );
    assert!(
        trained.iter().all(|t| all.iter().any(|i| &i.name == t)),
        "{trained:?}"
    );
    let evaluated = |csv: &Path| -> Vec<String> {
        let text = std::fs::read_to_string(csv).unwrap();
        text.lines()
            .skip(1)
            .map(|l| l.split(',').next().unwrap().to_string())
            .collect()
    };
    let report = dir.join("report").join("evaluation_f64_all.csv");
    let held_out = evaluated(&report);
    assert!(!held_out.is_empty());
    assert!(
        held_out.iter().all(|m| !trained.contains(m)),
        "{held_out:?}"
    );

    let (fd, md) = (fixtures.display().to_string(), file.display().to_string());
    for (include, expect) in [(false, all.len() - trained.len()), (true, all.len())] {
        let out_dir = dir.join(format!("evaluate-{include}"));
        let od = out_dir.display().to_string();
        let mut args = vec![
            "evaluate",
            "--model",
            &md,
            "--matrices",
            &fd,
            "--database",
            db,
            "--out",
            &od,
            "--min-reps",
            "2",
            "--max-reps",
            "3",
        ];
        if include {
            args.push("--include-trained");
        }
        let out = trainer(&args);
        assert!(out.status.success(), "trainer evaluate failed");
        let said = String::from_utf8_lossy(&out.stderr);
        if include {
            assert!(said.contains("--include-trained: all"), "{said}");
        } else {
            let want = format!("left out {} of {} matrices", trained.len(), all.len());
            assert!(said.contains(&want), "{want} in {said}");
        }
        let rows = evaluated(&out_dir.join("evaluation_f64_evaluate.csv"));
        assert_eq!(rows.len(), expect, "{rows:?}");
        assert_eq!(
            rows.iter().any(|m| trained.contains(m)),
            include,
            "{rows:?}"
        );
    }
}

/// Fits again from the same database and manifest into another folder: the
/// performance model and its fitting record are byte for byte the same
/// (seeded, no hash order, stable sorts), and so are the two trees and the
/// parameters chosen for them (our own split search, see `selector::fit`).
/// The rest of the card carries first-call figures timed on this host;
/// `--refit-perf-of` files are compared whole below.
fn same_database_same_perf_bytes(db: &str, name: &str, m: &str, dir: &Path, models: &Path) {
    let again = dir.join("models-again");
    let (ad, rd) = (
        again.display().to_string(),
        dir.join("report-again").display().to_string(),
    );
    let out = fit_from_db(db, name, m, &["--models-dir", &ad, "--out", &rd]);
    assert!(out.status.success(), "second fit --from-db failed");
    for p in ["f32", "f64"] {
        let file = trainer::pipeline::model_file_name(name, p.parse().unwrap());
        let json = |d: &Path| -> serde_json::Value {
            serde_json::from_slice(&std::fs::read(d.join(&file)).unwrap()).unwrap()
        };
        let (a, b) = (json(models), json(&again));
        assert!(a["perf"].is_object(), "{file} has a performance model");
        let (pa, pb) = (a["perf"].to_string(), b["perf"].to_string());
        assert!(
            pa == pb,
            "{file}: the performance model differs between two fits"
        );
        let record = |v: &serde_json::Value| v["card"]["metrics"]["perf_fit"].to_string();
        assert_eq!(record(&a), record(&b), "{file}: perf_fit differs");
        for part in ["stage1", "stage2"] {
            assert!(a[part]["nodes"].is_array(), "{file} has a {part} tree");
            assert!(
                a[part] == b[part],
                "{file}: the {part} tree differs between two fits"
            );
        }
        let params = |v: &serde_json::Value| v["card"]["hyper_parameters"].to_string();
        assert_eq!(params(&a), params(&b), "{file}: chosen parameters differ");
    }
}

/// `--refit-perf-of` keeps the trees and the card's device and kernel hashes,
/// replaces the performance model and records it (with the replaced one's
/// held-out figures beside the new ones).
fn only_the_performance_model_is_refitted(
    db: &str,
    name: &str,
    m: &str,
    dir: &Path,
    models: &Path,
) {
    let refit = dir.join("models-refit");
    let (fd, rd, kd) = (
        refit.display().to_string(),
        dir.join("report-refit").display().to_string(),
        models.display().to_string(),
    );
    let more = [
        "--precision",
        "f64",
        "--refit-perf-of",
        &kd,
        "--models-dir",
        &fd,
        "--out",
        &rd,
        "--perf-rounds",
        "30",
    ];
    let out = fit_from_db(db, name, m, &more);
    assert!(out.status.success(), "fit --refit-perf-of failed");
    let file = trainer::pipeline::model_file_name(name, "f64".parse().unwrap());
    // The same command on the same database again (the card records the
    // command) writes the same file, byte for byte.
    let first = dir.join("models-refit-first");
    std::fs::rename(&refit, &first).unwrap();
    assert!(
        fit_from_db(db, name, m, &more).status.success(),
        "second refit failed"
    );
    let bytes = |d: &Path| std::fs::read(d.join(&file)).unwrap();
    assert!(
        bytes(&refit) == bytes(&first),
        "two refits of the same database differ"
    );
    let json = |d: &Path| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(d.join(&file)).unwrap()).unwrap()
    };
    let (before, after) = (json(models), json(&refit));
    for part in ["stage1", "stage2"] {
        assert_eq!(before[part], after[part], "{part} changed");
    }
    for key in ["device", "kernel_sources", "hyper_parameters", "corpus"] {
        assert_eq!(
            before["card"][key], after["card"][key],
            "card {key} changed"
        );
    }
    assert_ne!(before["perf"], after["perf"]);
    assert_eq!(after["perf"]["params"]["rounds"], 30);
    let record = &after["card"]["metrics"]["perf_refit"];
    assert_eq!(record["database"], db);
    for key in ["fit", "held_out_all", "held_out_all_before", "command"] {
        assert!(!record[key].is_null(), "perf_refit.{key} in {record}");
    }
    assert!(
        record["held_out_all"]["top2_right_noise_aware"].is_number(),
        "{record}"
    );
    assert_eq!(
        after["card"]["metrics"]["test_all"], before["card"]["metrics"]["test_all"],
        "the trees' held-out figures are kept"
    );
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(printed.contains("replaced performance model:"), "{printed}");
}
