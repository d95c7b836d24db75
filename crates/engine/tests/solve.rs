//! Conjugate gradients on the device (`Engine::solve_cg`): the answer solves
//! the system (checked with the reference SpMV on the host), with and
//! without Jacobi, from zero and from a given x0, the same bits twice; an
//! indefinite matrix breaks down with the iteration; bad input is an error.

use engine::solve::{SolveOptions, Stop};
use engine::{DeviceScalar, Engine, LaunchMode};
use sparse::spmv::spmv_ref;
use sparse::{gen, Csr, KernelId, Plan};

fn engine() -> Option<&'static Engine> {
    crate::any_precision::shared_engine()
}

/// ||b - A x|| / ||b|| on the host, in f64.
fn residual<T: DeviceScalar>(a: &Csr<T>, x: &[T], b: &[T]) -> f64 {
    let ax = spmv_ref(a, x).unwrap();
    let num: f64 = ax
        .iter()
        .zip(b)
        .map(|(p, q)| (q.to_f64() - p.to_f64()).powi(2))
        .sum();
    let den: f64 = b.iter().map(|q| q.to_f64().powi(2)).sum();
    (num / den).sqrt()
}

fn solve_laplacian<T: DeviceScalar>(e: &Engine, tol: f64) {
    // The 2D Laplacian (5-point, SPD) on a 40 x 30 grid.
    let a = gen::stencil_2d(40, 30).unwrap().cast::<T>();
    let n = a.nrows();
    let b: Vec<T> = (0..n).map(|i| T::from_f64(1.0 + (i % 7) as f64)).collect();
    let m = e.upload(&a).unwrap();
    let pp = e
        .prepare(&m, &Plan::single(KernelId::Vector), LaunchMode::Grouped)
        .unwrap();
    for jacobi in [false, true] {
        let opts = SolveOptions {
            tol,
            maxiter: 2000,
            jacobi,
            deadline: None,
        };
        let s = e.solve_cg(&m, &pp, &b, None, &opts).unwrap();
        assert_eq!(s.stop, Stop::Converged, "{:?}", s.residuals.last());
        assert!(s.iterations > 5 && s.residuals.len() == s.iterations + 1);
        assert!(*s.residuals.last().unwrap() <= tol);
        let res = residual(&a, &s.x, &b);
        assert!(
            res <= tol * 10.0,
            "{} jacobi={jacobi}: true residual {res}",
            T::NAME
        );
        // Deterministic: the same bits again.
        let again = e.solve_cg(&m, &pp, &b, None, &opts).unwrap();
        assert!(again
            .x
            .iter()
            .zip(&s.x)
            .all(|(p, q)| p.to_f64().to_bits() == q.to_f64().to_bits()));
        // From the answer as x0 it converges at once.
        let warm = e.solve_cg(&m, &pp, &b, Some(&s.x), &opts).unwrap();
        assert!(warm.iterations <= 1, "{}", warm.iterations);
    }
    // maxiter stops it.
    let opts = SolveOptions {
        tol: 1e-30,
        maxiter: 3,
        ..SolveOptions::default()
    };
    let s = e.solve_cg(&m, &pp, &b, None, &opts).unwrap();
    assert_eq!((s.stop, s.iterations), (Stop::MaxIter, 3));
}

#[test]
fn cg_on_the_device_solves_a_laplacian() {
    let Some(e) = engine() else { return };
    solve_laplacian::<f32>(e, 1e-4);
    if e.info().fp64 {
        solve_laplacian::<f64>(e, 1e-10);
    }
}

#[test]
fn indefinite_matrices_break_down_and_bad_input_is_refused() {
    let Some(e) = engine() else { return };
    // diag(1, -1, 2): p'Ap <= 0 in the first iteration for b = (0, 1, 0).
    let a =
        Csr::<f64>::try_new(3, 3, vec![0, 1, 2, 3], vec![0, 1, 2], vec![1.0, -1.0, 2.0]).unwrap();
    let m = e.upload(&a).unwrap();
    let pp = e.prepare_kernel(&m, KernelId::Serial).unwrap();
    let s = e
        .solve_cg(&m, &pp, &[0.0, 1.0, 0.0], None, &SolveOptions::default())
        .unwrap();
    match s.stop {
        Stop::Breakdown { iteration, why } => {
            assert_eq!(iteration, 1);
            assert!(why.contains("positive definite"), "{why}");
        }
        other => panic!("{other:?}"),
    }
    let opts = SolveOptions::default();
    assert!(e.solve_cg(&m, &pp, &[1.0, 2.0], None, &opts).is_err());
    assert!(e
        .solve_cg(&m, &pp, &[1.0, f64::NAN, 0.0], None, &opts)
        .is_err());
    assert!(e
        .solve_cg(&m, &pp, &[1.0, 1.0, 1.0], Some(&[0.0; 2]), &opts)
        .is_err());
    // A zero diagonal refuses Jacobi.
    let z = Csr::<f64>::try_new(2, 2, vec![0, 1, 2], vec![1, 0], vec![1.0, 1.0]).unwrap();
    let mz = e.upload(&z).unwrap();
    let ppz = e.prepare_kernel(&mz, KernelId::Serial).unwrap();
    let jac = SolveOptions {
        jacobi: true,
        ..SolveOptions::default()
    };
    let err = e.solve_cg(&mz, &ppz, &[1.0, 1.0], None, &jac).unwrap_err();
    assert!(err.to_string().contains("diagonal"), "{err}");
    // Not square.
    let r = Csr::<f64>::try_new(1, 2, vec![0, 1], vec![1], vec![1.0]).unwrap();
    let mr = e.upload(&r).unwrap();
    let ppr = e.prepare_kernel(&mr, KernelId::Serial).unwrap();
    assert!(e.solve_cg(&mr, &ppr, &[1.0], None, &opts).is_err());
}

/// New values on the same pattern: every plan prepared before computes with
/// them (no new preparation), wrong counts and non-finite values are refused
/// and change nothing; the transpose (`Csr::transpose`) uploaded as a matrix
/// of its own gives Aᵀx.
#[test]
fn new_values_reach_existing_plans_and_the_transpose_multiplies() {
    let Some(e) = engine() else { return };
    let a = gen::power_law(3_000, 6.0, 91).unwrap();
    let x: Vec<f64> = (0..a.ncols()).map(|i| ((i % 13) as f64) - 6.0).collect();
    let m = e.upload(&a).unwrap();
    let plans = [
        e.prepare_kernel(&m, KernelId::Serial).unwrap(),
        e.prepare_kernel(&m, KernelId::MergeOne).unwrap(),
        e.prepare_kernel(&m, KernelId::CsrAdaptive).unwrap(),
    ];
    let vals: Vec<f64> = a.values().iter().map(|v| v * -2.5 + 1.0).collect();
    let b = Csr::try_new(
        a.nrows(),
        a.ncols(),
        a.row_ptr().to_vec(),
        a.col_idx().to_vec(),
        vals.clone(),
    )
    .unwrap();
    e.update_values(&m, &vals).unwrap();
    let want = spmv_ref(&b, &x).unwrap();
    for pp in &plans {
        let (y, _) = e.execute(&m, pp, &x).unwrap();
        assert!(sparse::spmv::compare(&b, &x, &y, &want).ok());
    }
    assert!(e.update_values(&m, &vals[1..]).is_err());
    let mut bad = vals.clone();
    bad[7] = f64::INFINITY;
    assert!(e.update_values(&m, &bad).is_err());
    let (y, _) = e.execute(&m, &plans[0], &x).unwrap();
    assert!(
        sparse::spmv::compare(&b, &x, &y, &want).ok(),
        "a refused update changed nothing"
    );

    // Aᵀ x of a rectangular matrix.
    let r = gen::lp_like(300, 1_200, 92).unwrap();
    let t = r.transpose();
    let xt: Vec<f64> = (0..t.ncols()).map(|i| (i % 5) as f64 - 2.0).collect();
    let mt = e.upload(&t).unwrap();
    let ppt = e.prepare_kernel(&mt, KernelId::Vector).unwrap();
    let (yt, _) = e.execute(&mt, &ppt, &xt).unwrap();
    // The reference: y_j = sum_i A[i][j] x_i, straight from A's rows.
    let mut want_t = vec![0.0; r.ncols()];
    for (i, xi) in xt.iter().enumerate() {
        for k in r.row_ptr()[i] as usize..r.row_ptr()[i + 1] as usize {
            want_t[r.col_idx()[k] as usize] += r.values()[k] * xi;
        }
    }
    assert!(sparse::spmv::compare(&t, &xt, &yt, &want_t).ok());
}

/// SpMM: k vectors at once equal k single products, for k = 1, 3, 16 and
/// 70 (two chunks), square and rectangular, both precisions; k = 0 and a
/// wrong length are refused.
#[test]
fn spmm_equals_one_product_per_vector() {
    let Some(e) = engine() else { return };
    let mats = [
        gen::power_law(2_000, 6.0, 93).unwrap(),
        gen::lp_like(200, 900, 94).unwrap(),
        gen::many_empty_rows(500, 0.5, 95).unwrap(),
    ];
    for a in &mats {
        let m = e.upload(a).unwrap();
        for k in [1usize, 3, 16, 70] {
            let x: Vec<f64> = (0..a.ncols() * k)
                .map(|i| ((i * 7 % 11) as f64) - 5.0)
                .collect();
            let y = e.spmm(&m, &x, k).unwrap();
            for j in 0..k {
                let xj: Vec<f64> = (0..a.ncols()).map(|i| x[i * k + j]).collect();
                let yj: Vec<f64> = (0..a.nrows()).map(|i| y[i * k + j]).collect();
                let want = spmv_ref(a, &xj).unwrap();
                assert!(
                    sparse::spmv::compare(a, &xj, &yj, &want).ok(),
                    "k {k} column {j}"
                );
            }
        }
        assert!(e.spmm(&m, &[], 0).is_err());
        assert!(e.spmm(&m, &vec![1.0; a.ncols() * 2 - 1], 2).is_err());
        if e.info().fp64 {
            let a32 = a.cast::<f32>();
            let m32 = e.upload(&a32).unwrap();
            let x: Vec<f32> = (0..a.ncols() * 4).map(|i| (i % 3) as f32).collect();
            let y = e.spmm(&m32, &x, 4).unwrap();
            let x0: Vec<f32> = (0..a.ncols()).map(|i| x[i * 4]).collect();
            let y0: Vec<f32> = (0..a.nrows()).map(|i| y[i * 4]).collect();
            assert!(sparse::spmv::compare(&a32, &x0, &y0, &spmv_ref(&a32, &x0).unwrap()).ok());
        }
    }
}
