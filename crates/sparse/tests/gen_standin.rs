//! The stand-in generator against the collection statistics it imitates: row
//! length summary within tolerance, nonzeros exact, placement by kind, scaling to
//! a nonzero budget, determinism. Reads the shipped `training-data/uf_stats.csv`.

use sparse::gen::standin::{
    load_default_stats, rel_err, standin, Dist, KindClass, MatrixStats, Placement, StandinOptions,
    StandinReport,
};

/// Quartile, mean, min and max tolerance (relative, or absolute 1 under 1, see
/// `rel_err`) for matrices with real statistics.
const SUMMARY_TOL: f64 = 0.05;

fn stats() -> Vec<MatrixStats> {
    load_default_stats().expect("training-data/uf_stats.csv loads")
}

/// About 50 matrices: every 58th of the collection plus a few chosen shapes.
fn sample(all: &[MatrixStats]) -> Vec<&MatrixStats> {
    let named = [
        "HB/nos5",
        "ACUSIM/Pres_Poisson",
        "SNAP/web-Google",
        "LPnetlib/lp_osa_60",
        "JGD_GL7d/GL7d10",
    ];
    let mut out: Vec<&MatrixStats> = all.iter().step_by(58).collect();
    out.extend(
        all.iter()
            .filter(|s| named.contains(&s.full_name().as_str())),
    );
    out
}

fn check_summary(report: &StandinReport, tol: f64) {
    let (t, a) = (&report.target, &report.achieved);
    let show = || format!("{report}");
    assert_eq!(report.achieved_nnz, report.target_nnz, "nnz\n{}", show());
    assert!(rel_err(t.mean, a.mean) < 1e-9, "mean\n{}", show());
    if !report.synthetic_target {
        for (what, tv, av) in [
            ("q1", t.q1, a.q1),
            ("median", t.median, a.median),
            ("q3", t.q3, a.q3),
        ] {
            assert!(rel_err(tv, av) <= tol, "{what}\n{}", show());
        }
    }
    assert!(rel_err(t.min, a.min) <= tol, "min\n{}", show());
    assert!(rel_err(t.max, a.max) <= tol, "max\n{}", show());
}

#[test]
fn sample_of_collection_within_tolerance_scaled() {
    let all = stats();
    let picked = sample(&all);
    assert!(picked.len() >= 50, "{}", picked.len());
    let mut classes = std::collections::BTreeSet::new();
    let (mut var_errs, mut scaled) = (Vec::new(), 0);
    for s in picked {
        let opts = StandinOptions {
            nnz_budget: Some(200_000),
            seed: 11,
        };
        let (m, report) = standin(s, &opts).unwrap_or_else(|e| panic!("{}: {e}", s.full_name()));
        assert_eq!((m.nrows(), m.ncols()), (report.rows, report.cols));
        assert!(
            m.nnz() as u64 <= 200_000 + 8 * s.nnz / s.rows as u64 + 1,
            "{report}"
        );
        assert_eq!(Dist::of_rows(&m), report.achieved);
        if report.scale < 1.0 {
            scaled += 1;
        }
        check_summary(&report, SUMMARY_TOL);
        if !report.synthetic_target && !report.max_capped {
            var_errs.push(report.variance_error());
        }
        classes.insert(report.class);
    }
    assert!(
        scaled >= 10,
        "only {scaled} matrices needed scaling: budget too large for the test"
    );
    assert!(classes.len() >= 5, "{classes:?}");
    var_errs.sort_by(f64::total_cmp);
    let median = var_errs[var_errs.len() / 2];
    eprintln!(
        "variance relative error: median {median:.3}, worst {:.3}",
        var_errs.last().unwrap()
    );
    assert!(median < 0.1, "median variance error {median}");
}

#[test]
fn full_size_small_matrices_match_exactly_in_nnz_and_closely_in_shape() {
    let all = stats();
    let small: Vec<&MatrixStats> = all
        .iter()
        .filter(|s| s.nnz < 60_000 && s.rows >= 4 && s.row.is_some())
        .step_by(25)
        .collect();
    assert!(small.len() >= 20);
    for s in small {
        let (m, report) = standin(
            s,
            &StandinOptions {
                nnz_budget: None,
                seed: 5,
            },
        )
        .unwrap();
        assert_eq!(
            (m.nrows(), m.ncols(), m.nnz() as u64),
            (s.rows, s.cols, s.nnz),
            "{report}"
        );
        assert_eq!(report.scale, 1.0);
        check_summary(&report, SUMMARY_TOL);
    }
}

#[test]
fn placement_follows_kind() {
    let all = stats();
    let find = |name: &str| all.iter().find(|s| s.full_name() == name).unwrap();
    let opts = StandinOptions {
        nnz_budget: Some(100_000),
        seed: 1,
    };

    // A 3D discretisation: banded around the diagonal.
    let pres = find("ACUSIM/Pres_Poisson");
    assert_eq!(pres.kind_class(), KindClass::Discretisation);
    let (m, report) = standin(pres, &opts).unwrap();
    let Placement::Banded { lower, upper, .. } = report.placement else {
        panic!("{report}")
    };
    for r in 0..m.nrows() {
        let (cols, _) = m.row(r);
        let width = (lower + upper + 1).max(cols.len());
        for &c in cols {
            assert!(
                (c as i64 - r as i64).unsigned_abs() as usize <= width,
                "row {r} col {c}\n{report}"
            );
        }
    }
    // A web graph: scattered, and columns as heavy-tailed as the original's.
    let web = find("SNAP/web-Google");
    assert_eq!(web.kind_class(), KindClass::Graph);
    let (_, report) = standin(web, &opts).unwrap();
    assert_eq!(report.placement, Placement::Scattered, "{report}");
    assert!(
        report.achieved_col.max > 20.0 * report.achieved_col.mean,
        "{report}"
    );
    // An LP: rectangular, scattered.
    let lp = find("LPnetlib/lp_osa_60");
    assert_eq!(lp.kind_class(), KindClass::Optimisation);
    let (m, report) = standin(lp, &opts).unwrap();
    assert_eq!(report.placement, Placement::Scattered);
    assert!(m.ncols() > 5 * m.nrows(), "{report}");
}

#[test]
fn deterministic_for_a_seed_and_different_across_seeds() {
    let all = stats();
    let s = all
        .iter()
        .find(|s| s.full_name() == "SNAP/web-Google")
        .unwrap();
    let run = |seed| {
        standin(
            s,
            &StandinOptions {
                nnz_budget: Some(50_000),
                seed,
            },
        )
        .unwrap()
        .0
    };
    assert_eq!(run(3).content_hash(), run(3).content_hash());
    assert_ne!(run(3).content_hash(), run(4).content_hash());
}

#[test]
fn matrices_without_statistics_still_get_a_stand_in() {
    let all = stats();
    let s = all.iter().find(|s| s.row.is_none()).unwrap();
    let (m, report) = standin(
        s,
        &StandinOptions {
            nnz_budget: Some(50_000),
            seed: 0,
        },
    )
    .unwrap();
    assert!(report.synthetic_target);
    assert_eq!(m.nnz() as u64, report.target_nnz, "{report}");
}

/// Every collection matrix at a 1M-nonzero budget: prints the worst cases and
/// the error distribution. Slow in debug builds, hence ignored; run with
/// `cargo test --release -p sparse --test gen_standin -- --ignored --nocapture`.
#[test]
#[ignore]
fn whole_collection_sweep() {
    let all = stats();
    let budget = std::env::var("STANDIN_BUDGET")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let mut summary = Vec::new();
    let mut var = Vec::new();
    let mut nnz_off = Vec::new();
    let t0 = std::time::Instant::now();
    let mut slowest = Vec::new();
    for s in &all {
        let t = std::time::Instant::now();
        let opts = StandinOptions {
            nnz_budget: Some(budget),
            seed: 0,
        };
        let (_, report) = standin(s, &opts).unwrap();
        slowest.push((t.elapsed().as_secs_f64(), report.name.clone()));
        if report.achieved_nnz != report.target_nnz {
            nnz_off.push((
                rel_err(report.target_nnz as f64, report.achieved_nnz as f64),
                report.name.clone(),
            ));
        }
        if !report.synthetic_target {
            summary.push((report.worst_summary_error(), report.name.clone()));
            if !report.max_capped {
                if std::env::var_os("STANDIN_SHOW_VARIANCE").is_some()
                    && report.variance_error() > 0.5
                {
                    eprintln!("{report}");
                }
                var.push((report.variance_error(), report.name.clone()));
            }
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    slowest.sort_by(|a, b| b.0.total_cmp(&a.0));
    eprintln!("slowest: {:?}", &slowest[..3]);
    summary.sort_by(|a, b| a.0.total_cmp(&b.0));
    var.sort_by(|a, b| a.0.total_cmp(&b.0));
    let q = |v: &[(f64, String)], p: f64| v[((v.len() - 1) as f64 * p) as usize].0;
    eprintln!("{} matrices in {secs:.1} s at budget {budget}", all.len());
    eprintln!(
        "summary error: median {:.4} p90 {:.4} p99 {:.4} max {:.4} ({}); over 5%: {}",
        q(&summary, 0.5),
        q(&summary, 0.9),
        q(&summary, 0.99),
        summary.last().unwrap().0,
        summary.last().unwrap().1,
        summary.iter().filter(|e| e.0 > 0.05).count()
    );
    eprintln!(
        "variance error: median {:.4} p90 {:.4} p99 {:.4}; under 10%: {} of {}",
        q(&var, 0.5),
        q(&var, 0.9),
        q(&var, 0.99),
        var.iter().filter(|e| e.0 < 0.1).count(),
        var.len()
    );
    nnz_off.sort_by(|a, b| a.0.total_cmp(&b.0));
    eprintln!(
        "nnz not exact for {} matrices, worst {:?}",
        nnz_off.len(),
        nnz_off.last()
    );
    for (e, name) in summary.iter().rev().take(8) {
        eprintln!("  worst summary {e:.3} {name}");
    }
    assert!(q(&summary, 0.9) <= 0.05);
    assert!(
        nnz_off.len() * 100 < all.len(),
        "nnz missed for over 1% of the collection"
    );
    // A few matrices with very few, very long rows (LPs with 73 rows of 12,000
    // entries, say) cannot keep both quartiles and nonzeros once scaled to 8 rows.
    assert!(
        nnz_off.iter().filter(|e| e.0 >= 0.01).count() <= 5,
        "nnz missed by 1% or more too often"
    );
}
