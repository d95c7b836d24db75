//! The precision-erased API (`AnyMatrix`, `AnyPlan`): an f32 and an f64 upload
//! of the same matrix through upload, prepare, execute and measure, each checked
//! against the reference SpMV in its own precision; mismatched pairs and bad x
//! are errors.
//!
//! Without any OpenCL platform the tests skip with a message, except when
//! `CI=true` or `SPMV_REQUIRE_DEVICE=1`, where they fail.

use engine::{AnyMatrix, AnyPlan, Engine, EngineError, LaunchMode, TimingPolicy, Values};
use sparse::spmv::{compare, spmv_ref};
use sparse::{gen, Binning, Csr, KernelId, Plan, Precision, Scheme};
use std::sync::OnceLock;

/// The engine of this module, for the other modules of the test binary.
pub(crate) fn shared_engine() -> Option<&'static Engine> {
    engine()
}

/// One engine per test process (two threads opening PoCL at once can fail).
fn engine() -> Option<&'static Engine> {
    static ENGINE: OnceLock<Option<Engine>> = OnceLock::new();
    ENGINE
        .get_or_init(|| match Engine::new(None) {
            Ok(e) => Some(e),
            Err(EngineError::NoPlatform(why)) => {
                let set = |k: &str| {
                    std::env::var(k).is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"))
                };
                if set("CI") || set("SPMV_REQUIRE_DEVICE") {
                    panic!(
                        "an OpenCL platform is required under CI / SPMV_REQUIRE_DEVICE=1 ({why})"
                    );
                }
                eprintln!("SKIP: no OpenCL platform at all ({why})");
                None
            }
            Err(e) => panic!("an OpenCL platform exists but the engine failed to start: {e}"),
        })
        .as_ref()
}

/// The precisions the device computes in (f64 needs `cl_khr_fp64`).
fn precisions(e: &Engine) -> Vec<Precision> {
    if e.info().fp64 {
        vec![Precision::F32, Precision::F64]
    } else {
        vec![Precision::F32]
    }
}

/// Checks y (computed in precision `p`) against the reference SpMV in `p`.
fn check(a: &Csr<f64>, x: &[f64], y: &[f64], p: Precision, what: &str) {
    let ok = match p {
        Precision::F32 => {
            let (a, x) = (
                a.cast::<f32>(),
                x.iter().map(|&v| v as f32).collect::<Vec<_>>(),
            );
            let y: Vec<f32> = y.iter().map(|&v| v as f32).collect();
            let c = compare(&a, &x, &y, &spmv_ref(&a, &x).unwrap());
            (c.ok(), c.worst_bound_ratio)
        }
        Precision::F64 => {
            let c = compare(a, x, y, &spmv_ref(a, x).unwrap());
            (c.ok(), c.worst_bound_ratio)
        }
    };
    assert!(ok.0, "{what} in {p}: worst row at {} times its bound", ok.1);
}

fn test_matrix() -> (Csr<f64>, Vec<f64>) {
    let a = gen::mixed_lengths(600, 7).unwrap();
    let x: Vec<f64> = (0..a.ncols())
        .map(|i| ((i * 37) % 101) as f64 / 50.0 - 1.0)
        .collect();
    (a, x)
}

#[test]
fn both_precisions_upload_prepare_execute_and_equal_the_reference() {
    let Some(e) = engine() else { return };
    let (a, x) = test_matrix();
    for p in precisions(e) {
        let m = e.upload_as(&a, p).unwrap();
        assert_eq!(m.precision(), p);
        assert_eq!(
            (m.nrows(), m.ncols(), m.nnz()),
            (a.nrows(), a.ncols(), a.nnz())
        );
        assert_eq!(m.row_ptr(), a.row_ptr());
        assert_eq!(
            m.min_bytes(),
            engine::min_bytes(a.nrows(), a.ncols(), a.nnz(), p.bytes())
        );
        let plans = [
            Plan::single(KernelId::CsrAdaptive),
            Plan::uniform(
                &e.binning_any(&m, Scheme::Granularity(10)),
                KernelId::Subvector(4),
            ),
        ];
        for plan in &plans {
            for mode in [LaunchMode::Grouped, LaunchMode::PerBin] {
                let pp = e.prepare_any(&m, plan, mode).unwrap();
                assert_eq!(
                    (pp.precision(), pp.scheme(), pp.mode()),
                    (p, plan.scheme, mode)
                );
                assert!(pp.is_complete() && !pp.launches().is_empty());
                let (y, t) = e.execute_any(&m, &pp, &x).unwrap();
                check(&a, &x, &y, p, &format!("{plan:?} {mode:?}"));
                assert!(t.kernel_ns > 0 && t.enqueues >= 1, "{t:?}");
            }
        }
    }
}

#[test]
fn execute_any_with_hands_y_in_the_matrix_precision() {
    let Some(e) = engine() else { return };
    let (a, x) = test_matrix();
    for p in precisions(e) {
        let m = e.upload_as(&a, p).unwrap();
        let b = e.binning_any(&m, Scheme::Single);
        let pp = e
            .prepare_binned_any(&m, &b, &Plan::single(KernelId::Serial), LaunchMode::Grouped)
            .unwrap();
        let (y, _) = e
            .execute_any_with(&m, &pp, x.as_slice(), |y: Values<'_>| {
                let same = matches!(
                    (y, p),
                    (Values::F32(_), Precision::F32) | (Values::F64(_), Precision::F64)
                );
                assert!(same, "y in the wrong precision");
                y.to_f64_vec()
            })
            .unwrap();
        check(&a, &x, &y, p, "serial through execute_any_with");
    }
}

#[test]
fn one_bin_alone_gives_its_rows_and_zeros_elsewhere() {
    let Some(e) = engine() else { return };
    let (a, x) = test_matrix();
    for p in precisions(e) {
        let m = e.upload_as(&a, p).unwrap();
        let b = Binning::new(a.row_ptr(), Scheme::Granularity(10));
        let bin = b.nonempty_bins().next().unwrap();
        let pp = e
            .prepare_bins_any(&m, &b, &[(bin, KernelId::Vector)], LaunchMode::PerBin)
            .unwrap();
        assert!(!pp.is_complete());
        let (y, _) = e.execute_any(&m, &pp, &x).unwrap();
        let mine: std::collections::HashSet<u32> = b.rows(bin).collect();
        // The same kernel over the whole matrix reduces each row the same way.
        let whole = e
            .prepare_any(&m, &Plan::single(KernelId::Vector), LaunchMode::Grouped)
            .unwrap();
        let (full, _) = e.execute_any(&m, &whole, &x).unwrap();
        for r in 0..a.nrows() {
            if mine.contains(&(r as u32)) {
                assert_eq!(y[r], full[r], "row {r} of bin {bin} in {p}");
            } else {
                assert_eq!(y[r], 0.0, "row {r} outside bin {bin} in {p}");
            }
        }
    }
}

#[test]
fn measure_and_time_run_the_one_timing_routine_in_both_precisions() {
    let Some(e) = engine() else { return };
    let a = gen::stencil_2d(48, 48).unwrap();
    let x = vec![1.0; a.ncols()];
    for p in precisions(e) {
        let m = e.upload_as(&a, p).unwrap();
        let pp = e
            .prepare_any(
                &m,
                &Plan::single(KernelId::CsrAdaptive),
                LaunchMode::Grouped,
            )
            .unwrap();
        let once = e.time_any(&m, &pp, &x, 1, 4).unwrap();
        assert_eq!(once.reps, 4);
        assert!(once.median_ms > 0.0 && !once.converged, "{once:?}");
        let policy = TimingPolicy {
            ci_budget_ms: 5_000.0,
            ..TimingPolicy::default()
        };
        let st = e.measure_any(&m, &pp, &x, &policy, once.median_ms).unwrap();
        assert!(st.reps >= policy.reps_for(once.median_ms), "{st:?}");
        assert!(st.reps <= policy.ci_max_reps, "{st:?}");
        assert!(st.min_ms <= st.median_ms && st.median_ms <= st.max_ms);
        // The matrix still computes the right y after timing.
        let (y, _) = e.execute_any(&m, &pp, &x).unwrap();
        check(&a, &x, &y, p, "after measuring");
    }
}

#[test]
fn mismatched_pairs_bad_x_and_overflowing_values_are_errors() {
    let Some(e) = engine() else { return };
    let (a, x) = test_matrix();
    let m32 = e.upload_as(&a, Precision::F32).unwrap();
    let plan = Plan::single(KernelId::Serial);
    let p32 = e.prepare_any(&m32, &plan, LaunchMode::Grouped).unwrap();
    let other = e.upload_as(&a, Precision::F32).unwrap();
    let wrong =
        |r: engine::Result<(Vec<f64>, engine::Timings)>| matches!(r, Err(EngineError::WrongMatrix));
    assert!(
        wrong(e.execute_any(&other, &p32, &x)),
        "a plan of another matrix"
    );
    if e.info().fp64 {
        let m64: AnyMatrix = e.upload_as(&a, Precision::F64).unwrap();
        assert!(wrong(e.execute_any(&m64, &p32, &x)), "f64 matrix, f32 plan");
        let p64: AnyPlan = e.prepare_any(&m64, &plan, LaunchMode::Grouped).unwrap();
        assert!(matches!(
            e.measure_any(&m32, &p64, &x, &TimingPolicy::default(), 1.0),
            Err(EngineError::WrongMatrix)
        ));
    }
    assert!(matches!(
        e.execute_any(&m32, &p32, &x[1..]),
        Err(EngineError::XLength { expected, got }) if expected == a.ncols() && got == a.ncols() - 1
    ));
    assert!(matches!(
        e.time_any(&m32, &p32, &[], 0, 1),
        Err(EngineError::XLength { .. })
    ));
    // 1e300 is finite in f64 and overflows f32: refused only where asked.
    let big = Csr::from_triplets(2, 2, &[0, 1], &[0, 1], &[1e300, 1.0]).unwrap();
    match e.upload_finite_as(&big, Precision::F32) {
        Err(EngineError::NonFinite(msg)) => assert!(msg.contains("f32"), "{msg}"),
        other => panic!("expected NonFinite, got {other:?}"),
    }
    assert!(
        e.upload_as(&big, Precision::F32).is_ok(),
        "the plain cast keeps inf"
    );
    if e.info().fp64 {
        assert!(e.upload_finite_as(&big, Precision::F64).is_ok());
    }
}

/// Matrices of different shapes for the launch tests: short and mixed rows,
/// a power law with long rows, a 2D stencil, one huge row (split by
/// CSR-Adaptive, carried by the merge kernels) and a wide rectangle.
fn several_matrices() -> Vec<(&'static str, Csr<f64>)> {
    vec![
        ("mixed", gen::mixed_lengths(300, 3).unwrap()),
        ("power_law", gen::power_law(900, 6.0, 5).unwrap()),
        ("stencil", gen::stencil_2d(23, 19).unwrap()),
        ("huge_row", gen::one_huge_row(5000).unwrap()),
        ("lp", gen::lp_like(120, 700, 9).unwrap()),
    ]
}

fn x_for(n: usize, seed: usize) -> Vec<f64> {
    (0..n)
        .map(|i| ((i * 37 + seed * 11) % 101) as f64 / 50.0 - 1.0)
        .collect()
}

/// Launches are made ready at preparation and enqueued as they are: every
/// single-kernel plan of several matrices in both precisions, all prepared
/// before any runs (so many kernel objects of the same entry point are alive
/// at once, each with its own arguments), then run in reverse order and again
/// with another x, equal the reference each time.
#[test]
fn plans_prepared_together_keep_their_own_arguments() {
    let Some(e) = engine() else { return };
    let mats = several_matrices();
    let mut prepared = Vec::new();
    for p in precisions(e) {
        for (name, a) in &mats {
            let m = e.upload_as(a, p).unwrap();
            let b = e.binning_any(&m, Scheme::Single);
            let plans: Vec<(KernelId, AnyPlan)> = KernelId::all()
                .into_iter()
                .map(|k| {
                    let plan = Plan::single(k);
                    let pp = e.prepare_binned_any(&m, &b, &plan, LaunchMode::Grouped);
                    (k, pp.unwrap_or_else(|err| panic!("{name} {k} {p}: {err}")))
                })
                .collect();
            prepared.push((name, a, p, m, plans));
        }
    }
    for seed in 0..2 {
        for (name, a, p, m, plans) in prepared.iter().rev() {
            let x = x_for(a.ncols(), seed);
            for (k, pp) in plans.iter().rev() {
                let (y, _) = e.execute_any(m, pp, &x).unwrap();
                check(a, &x, &y, *p, &format!("{name} {k} x#{seed}"));
            }
        }
    }
}

/// Two threads prepare and run plans at the same time, each on its own
/// matrices (one engine, one queue): each thread's results equal the
/// reference, in both precisions and for every kernel.
#[test]
fn two_threads_prepare_and_run_at_once() {
    let Some(e) = engine() else { return };
    let mats = several_matrices();
    let start = std::sync::Barrier::new(2);
    std::thread::scope(|s| {
        for t in 0..2usize {
            let (mats, start) = (&mats, &start);
            s.spawn(move || {
                start.wait();
                for round in 0..3 {
                    for (i, (name, a)) in mats.iter().enumerate() {
                        let p = precisions(e)[(i + t + round) % precisions(e).len()];
                        let m = e.upload_as(a, p).unwrap();
                        let x = x_for(a.ncols(), t + round);
                        for k in KernelId::all() {
                            let pp = e.prepare_any(&m, &Plan::single(k), LaunchMode::Grouped);
                            let (y, _) = e.execute_any(&m, &pp.unwrap(), &x).unwrap();
                            check(a, &x, &y, p, &format!("thread {t} {name} {k}"));
                        }
                    }
                }
            });
        }
    });
}
