//! Every kernel of the registry, in both precisions, against the reference SpMV:
//! one test body looped over kernels, on the shared SuiteSparse matrices (or the
//! fixtures shipped in crates/sparse/tests/data) and on awkward shapes; plans with
//! a random kernel per bin in both launch modes; repeated calls bit-identical;
//! the warp-shuffle reduction logic (emulated shuffles), the program binary
//! cache, and the transfer timings.
//!
//! Without any OpenCL platform the tests skip with a message, except when
//! `CI=true` or `SPMV_REQUIRE_DEVICE=1`, where they fail.

use engine::{
    registry, DeviceScalar, Engine, EngineConfig, EngineError, LaunchMode, ReductionPath,
    SharedMemory, WarpShuffle,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sparse::spmv::{compare, spmv_ref};
use sparse::testing::{missing, shared_dir};
use sparse::{gen, Binning, Csr, KernelId, Plan, Scheme};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// One engine per test process (programs are built once per precision).
fn engine() -> Option<&'static Engine> {
    static ENGINE: OnceLock<Option<Engine>> = OnceLock::new();
    ENGINE
        .get_or_init(|| match Engine::new(None) {
            Ok(e) => {
                eprintln!("engine tests on {} / {}", e.info().platform, e.info().name);
                Some(e)
            }
            Err(EngineError::NoPlatform(why)) => {
                missing(
                    &format!("an OpenCL platform ({why})"),
                    &format!("SKIP: no OpenCL platform at all ({why})"),
                );
                None
            }
            Err(e) => panic!("an OpenCL platform exists but the engine failed to start: {e}"),
        })
        .as_ref()
}

fn x_for(n: usize, seed: u64) -> Vec<f64> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n).map(|_| rng.gen_range(-1.0..1.0)).collect()
}

/// The one test body: every kernel on the whole matrix equals the reference.
/// Returns the failures as text (empty when all pass).
fn check_every_kernel<T: DeviceScalar>(e: &Engine, name: &str, a: &Csr<T>) -> Vec<String> {
    let x: Vec<T> = x_for(a.ncols(), 7).into_iter().map(T::from_f64).collect();
    let y_ref = spmv_ref(a, &x).unwrap();
    let m = e
        .upload(a)
        .unwrap_or_else(|err| panic!("{name}: upload failed: {err}"));
    let mut failures = Vec::new();
    for k in registry() {
        match e.spmv(&m, k.id, &x) {
            Ok((y, _)) => {
                let c = compare(a, &x, &y, &y_ref);
                if !c.ok() {
                    failures.push(format!(
                        "{name} {} {}: row {} got {} want {} (bound ratio {:.3e})",
                        k.name,
                        T::NAME,
                        c.worst_row,
                        y[c.worst_row],
                        y_ref[c.worst_row],
                        c.worst_bound_ratio
                    ));
                }
            }
            Err(err) => failures.push(format!("{name} {} {}: {err}", k.name, T::NAME)),
        }
    }
    failures.extend(check_fused(e, name, a, (&m, &x, &y_ref)));
    failures
}

/// A plan whose bins take every row-mapped width (serial for the shortest
/// rows, wider subvectors as rows grow, vector for the longest), run fused:
/// it equals the reference, makes exactly one enqueue when two or more
/// widths are used, and three calls give the same bits.
fn check_fused<T: DeviceScalar>(
    e: &Engine,
    name: &str,
    a: &Csr<T>,
    (m, x, y_ref): (&engine::DeviceMatrix<T>, &[T], &[T]),
) -> Vec<String> {
    let widths = [
        KernelId::Serial,
        KernelId::Subvector(2),
        KernelId::Subvector(4),
        KernelId::Subvector(8),
        KernelId::Subvector(32),
        KernelId::Vector,
    ];
    let binning = Binning::new(a.row_ptr(), Scheme::Granularity(10));
    let plan = Plan {
        scheme: binning.scheme,
        kernels: binning
            .nonempty_bins()
            .map(|b| (b, widths[(b / 2).min(widths.len() - 1)]))
            .collect(),
    };
    let used: std::collections::BTreeSet<_> = plan.kernels.iter().map(|p| p.1).collect();
    let pp = match e.prepare(m, &plan, LaunchMode::Fused) {
        Ok(pp) => pp,
        Err(err) => return vec![format!("{name} fused {}: {err}", T::NAME)],
    };
    let mut failures = Vec::new();
    let mut first: Option<Vec<T>> = None;
    for call in 0..3 {
        let (y, t) = e.execute(m, &pp, x).unwrap();
        let c = compare(a, x, &y, y_ref);
        if !c.ok() {
            failures.push(format!(
                "{name} fused {} {:?}: row {} got {} want {}",
                T::NAME,
                plan.kernels,
                c.worst_row,
                y[c.worst_row],
                y_ref[c.worst_row]
            ));
        }
        let want = usize::from(!used.is_empty());
        if t.enqueues != want {
            failures.push(format!(
                "{name} fused {}: {} enqueues for {} widths",
                T::NAME,
                t.enqueues,
                used.len()
            ));
        }
        let bits: Vec<f64> = y.iter().map(|v| v.to_f64()).collect();
        match &first {
            None => first = Some(y),
            Some(f) => {
                let same = f
                    .iter()
                    .zip(&bits)
                    .all(|(p, q)| p.to_f64().to_bits() == q.to_bits());
                if !same {
                    failures.push(format!("{name} fused {}: call {call} differs", T::NAME));
                }
            }
        }
    }
    failures
}

fn check_both_precisions(e: &Engine, cases: &[(String, Csr<f64>)]) {
    let mut failures = Vec::new();
    for (name, a) in cases {
        failures.extend(check_every_kernel::<f64>(e, name, a));
        failures.extend(check_every_kernel::<f32>(e, name, &a.cast::<f32>()));
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Rows of the given lengths, uniformly random columns in `ncols`.
fn rows_of_lengths(lens: &[usize], ncols: usize, seed: u64) -> Csr<f64> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut rp = vec![0u32];
    let mut ci = Vec::new();
    let mut v = Vec::new();
    for &l in lens {
        assert!(l <= ncols);
        let mut cols: Vec<u32> = if l * 2 > ncols {
            (0..ncols as u32)
                .filter(|_| rng.gen_bool(l as f64 / ncols as f64))
                .collect()
        } else {
            let mut set = std::collections::BTreeSet::new();
            while set.len() < l {
                set.insert(rng.gen_range(0..ncols as u32));
            }
            set.into_iter().collect()
        };
        cols.sort_unstable();
        for c in cols {
            ci.push(c);
            v.push(rng.gen_range(0.01..1.0) * if rng.gen_bool(0.5) { 1.0 } else { -1.0 });
        }
        rp.push(ci.len() as u32);
    }
    Csr::try_new(lens.len(), ncols, rp, ci, v).unwrap()
}

fn awkward_cases() -> Vec<(String, Csr<f64>)> {
    let mut c: Vec<(String, Csr<f64>)> = vec![
        ("empty 0x0".into(), Csr::zeros(0, 0).unwrap()),
        ("empty 5x0".into(), Csr::zeros(5, 0).unwrap()),
        ("empty 0x5".into(), Csr::zeros(0, 5).unwrap()),
        ("all rows empty".into(), gen::all_rows_empty(1000).unwrap()),
        (
            "1x1".into(),
            Csr::try_new(1, 1, vec![0, 1], vec![0], vec![2.5]).unwrap(),
        ),
        ("1x1 empty".into(), Csr::zeros(1, 1).unwrap()),
        (
            "one huge row 150000".into(),
            gen::one_huge_row(150_000).unwrap(),
        ),
        (
            "tall thin 100000x4".into(),
            gen::tall_thin(100_000, 4).unwrap(),
        ),
        (
            "lp-like 2000x16000".into(),
            gen::lp_like(2000, 16_000, 3).unwrap(),
        ),
        (
            "mixed lengths 3000".into(),
            gen::mixed_lengths(3000, 4).unwrap(),
        ),
        (
            "many empty rows".into(),
            gen::many_empty_rows(5000, 0.5, 5).unwrap(),
        ),
        (
            "power law 20000".into(),
            gen::power_law(20_000, 8.0, 6).unwrap(),
        ),
        (
            "uniform 257 rows".into(),
            gen::uniform_random(257, 300, 5, 7).unwrap(),
        ),
        (
            "uniform 1001 rows".into(),
            gen::uniform_random(1001, 1001, 9, 8).unwrap(),
        ),
        ("stencil2d 37x29".into(), gen::stencil_2d(37, 29).unwrap()),
    ];
    // Rows around the CSR-Adaptive thresholds (NNZ_PER_WG 1024/1536, x2 / x3).
    let lens = [
        0, 1, 1023, 1024, 1025, 1535, 1536, 1537, 3071, 3072, 3073, 3, 4609, 9000, 0, 2, 6145, 5,
    ];
    c.push((
        "adaptive thresholds".into(),
        rows_of_lengths(&lens, 10_000, 9),
    ));
    // One work-group's worth of rows plus one, of lengths 1..4.
    let lens: Vec<usize> = (0..1025).map(|i| 1 + i % 4).collect();
    c.push(("1025 short rows".into(), rows_of_lengths(&lens, 50, 10)));
    c
}

#[test]
fn every_kernel_equals_reference_on_awkward_matrices() {
    let Some(e) = engine() else { return };
    check_both_precisions(e, &awkward_cases());
}

#[test]
fn every_kernel_equals_reference_on_real_matrices() {
    let Some(e) = engine() else { return };
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sparse/tests/data");
    let dir = match shared_dir("matrices") {
        Some(d) => d,
        None => {
            let instead = format!(
                "shared matrices not found (../shared/matrices); using the fixtures in {}",
                fixtures.display()
            );
            missing("../shared/matrices", &instead);
            fixtures
        }
    };
    let files = sparse::mm::matrix_files(&dir).unwrap();
    assert!(!files.is_empty(), "no matrices in {}", dir.display());
    let opts = sparse::mm::ReadOptions {
        complex_real_part: true,
    };
    let mut failures = Vec::new();
    for f in &files {
        let name = f.file_name().unwrap().to_string_lossy().to_string();
        let a: Csr<f64> =
            sparse::mm::read_path(f, &opts).unwrap_or_else(|err| panic!("{name}: {err}"));
        failures.extend(check_every_kernel::<f64>(e, &name, &a));
        failures.extend(check_every_kernel::<f32>(e, &name, &a.cast::<f32>()));
    }
    eprintln!(
        "checked {} matrices x {} kernels x 2 precisions",
        files.len(),
        registry().len()
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn random_plan(binning: &Binning, rng: &mut ChaCha8Rng) -> Plan {
    let all = KernelId::all();
    Plan {
        scheme: binning.scheme,
        kernels: binning
            .nonempty_bins()
            .map(|b| (b, all[rng.gen_range(0..all.len())]))
            .collect(),
    }
}

fn check_random_plans<T: DeviceScalar>(
    e: &Engine,
    name: &str,
    a: &Csr<T>,
    seed: u64,
) -> Vec<String> {
    let x: Vec<T> = x_for(a.ncols(), seed)
        .into_iter()
        .map(T::from_f64)
        .collect();
    let y_ref = spmv_ref(a, &x).unwrap();
    let m = e.upload(a).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut failures = Vec::new();
    for scheme in [
        Scheme::Single,
        Scheme::Granularity(1),
        Scheme::Granularity(10),
        Scheme::Granularity(50),
        Scheme::Granularity(200),
    ] {
        let binning = Binning::new(a.row_ptr(), scheme);
        for _ in 0..2 {
            let plan = random_plan(&binning, &mut rng);
            for mode in [LaunchMode::PerBin, LaunchMode::Grouped, LaunchMode::Fused] {
                let pp = e.prepare(&m, &plan, mode).unwrap();
                let (y, _) = e.execute(&m, &pp, &x).unwrap();
                let c = compare(a, &x, &y, &y_ref);
                if !c.ok() {
                    failures.push(format!(
                        "{name} {} {scheme} {mode:?} {:?}: row {}",
                        T::NAME,
                        plan.kernels,
                        c.worst_row
                    ));
                }
            }
        }
    }
    failures
}

#[test]
fn plans_with_a_random_kernel_per_bin_equal_reference() {
    let Some(e) = engine() else { return };
    let cases = [
        ("mixed lengths", gen::mixed_lengths(2000, 11).unwrap()),
        ("power law", gen::power_law(30_000, 6.0, 12).unwrap()),
        (
            "many empty rows",
            gen::many_empty_rows(4000, 0.3, 13).unwrap(),
        ),
        ("lp-like", gen::lp_like(3000, 12_000, 14).unwrap()),
        (
            "adaptive thresholds",
            rows_of_lengths(&[5, 0, 1500, 4000, 3, 3, 3, 7000, 1, 0, 2, 1024], 8000, 15),
        ),
    ];
    let mut failures = Vec::new();
    for (i, (name, a)) in cases.iter().enumerate() {
        failures.extend(check_random_plans::<f64>(e, name, a, 100 + i as u64));
        failures.extend(check_random_plans::<f32>(
            e,
            name,
            &a.cast::<f32>(),
            200 + i as u64,
        ));
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn repeated_calls_give_bit_identical_results() {
    let Some(e) = engine() else { return };
    // Split rows (CSR-VectorL partials) and long rows (merge-path carries) included.
    let a = rows_of_lengths(&[3, 20_000, 0, 7, 9000, 1, 50_000, 2], 60_000, 21);
    let x = x_for(a.ncols(), 22);
    let m = e.upload(&a).unwrap();
    for k in registry() {
        let pp = e.prepare_kernel(&m, k.id).unwrap();
        let (first, _) = e.execute(&m, &pp, &x).unwrap();
        for call in 0..5 {
            let (y, _) = e.execute(&m, &pp, &x).unwrap();
            let same = y
                .iter()
                .zip(&first)
                .all(|(p, q)| p.to_bits() == q.to_bits());
            assert!(same, "{}: call {call} differs from the first", k.name);
        }
        // A different x in between must not leave anything behind either.
        let x2: Vec<f64> = x.iter().map(|v| -v).collect();
        let (y2, _) = e.execute(&m, &pp, &x2).unwrap();
        assert!(
            compare(&a, &x2, &y2, &spmv_ref(&a, &x2).unwrap()).ok(),
            "{} with another x",
            k.name
        );
    }
}

/// Method (b) of the campaign: the plan enqueued N times with one finish.
/// Every kernel and a binned plan: the figures are sane, the calls leave y as
/// one call computes it, and a wrong x is refused before anything is enqueued.
#[test]
fn back_to_back_calls_are_timed_and_leave_the_right_y() {
    let Some(e) = engine() else { return };
    let a = rows_of_lengths(&[3, 2_000, 0, 7, 900, 1, 5_000, 2], 6_000, 31);
    let x = x_for(a.ncols(), 32);
    let y_ref = spmv_ref(&a, &x).unwrap();
    let m = e.upload(&a).unwrap();
    let binning = Binning::new(a.row_ptr(), Scheme::Granularity(2));
    let binned = Plan::uniform(&binning, KernelId::Vector);
    let mut plans: Vec<_> = registry()
        .iter()
        .map(|k| e.prepare_kernel(&m, k.id).unwrap())
        .collect();
    plans.push(e.prepare(&m, &binned, LaunchMode::PerBin).unwrap());
    for pp in &plans {
        let b = e.back_to_back(&m, pp, &x, (7, 3)).unwrap();
        assert_eq!((b.calls, b.rounds), (7, 3), "{b:?}");
        assert!(b.min_ms > 0.0 && b.min_ms <= b.median_ms, "{b:?}");
        let (y, _) = e.execute(&m, pp, &x).unwrap();
        assert!(compare(&a, &x, &y, &y_ref).ok(), "{:?}", pp.launches());
    }
    let short = vec![1.0; a.ncols() - 1];
    assert!(e.back_to_back(&m, &plans[0], &short, (7, 3)).is_err());
}

/// Served calls are profiled only when sampled: the first
/// `PROFILED_FIRST`, then one in `every`; the others enqueue without events,
/// report no kernel time and compute the same y, bit for bit.
#[test]
fn unsampled_calls_skip_profiling_and_compute_the_same_y() {
    let Some(_) = engine() else { return };
    let e = Engine::new(None).unwrap().with_profile_every(4);
    let a = rows_of_lengths(&[3, 2_000, 0, 7, 900, 1, 5_000, 2], 6_000, 37);
    let x = x_for(a.ncols(), 38);
    let y_ref = spmv_ref(&a, &x).unwrap();
    let m = e.upload(&a).unwrap();
    let binning = Binning::new(a.row_ptr(), Scheme::Granularity(2));
    let pp = e
        .prepare(
            &m,
            &Plan::uniform(&binning, KernelId::Vector),
            LaunchMode::PerBin,
        )
        .unwrap();
    let mut first = None;
    let mut pattern = Vec::new();
    for _ in 0..12 {
        let (y, t) = e.execute(&m, &pp, &x).unwrap();
        assert!(compare(&a, &x, &y, &y_ref).ok());
        let bits: Vec<u64> = y.iter().map(|v| v.to_bits()).collect();
        assert_eq!(first.get_or_insert_with(|| bits.clone()), &bits);
        assert_eq!(
            t.enqueues,
            pp.launches().iter().map(|l| l.enqueues).sum::<usize>()
        );
        assert_eq!(t.kernel_ms_profiled().is_some(), t.profiled);
        if !t.profiled {
            assert_eq!(t.kernel_ns, 0, "{t:?}");
        }
        pattern.push(t.profiled);
    }
    let want: Vec<bool> = (0..12u64)
        .map(|n| n < engine::PROFILED_FIRST || n % 4 == 0)
        .collect();
    assert_eq!(pattern, want);
}

#[test]
fn one_bin_alone_computes_its_rows_and_zeros_elsewhere() {
    let Some(e) = engine() else { return };
    let a = gen::mixed_lengths(1500, 31).unwrap();
    let x = x_for(a.ncols(), 32);
    let y_ref = spmv_ref(&a, &x).unwrap();
    let m = e.upload(&a).unwrap();
    let binning = Binning::new(a.row_ptr(), Scheme::Granularity(10));
    for b in binning.nonempty_bins().take(6) {
        let rows = binning.expand(b);
        for k in [
            KernelId::Serial,
            KernelId::Subvector(8),
            KernelId::CsrAdaptive,
            KernelId::MergePath,
            KernelId::MergeTile,
        ] {
            let alone = e
                .prepare_bins(&m, &binning, &[(b, k)], LaunchMode::PerBin)
                .unwrap();
            let (y, _) = e.execute(&m, &alone, &x).unwrap();
            let mut want = vec![0.0; a.nrows()];
            for &r in &rows {
                want[r as usize] = y_ref[r as usize];
            }
            assert!(compare(&a, &x, &y, &want).ok(), "bin {b} kernel {k}");
            let st = e.time(&m, &alone, &x, 1, 3).unwrap();
            assert_eq!(st.reps, 3);
            assert!(st.median_ms >= 0.0 && st.min_ms <= st.max_ms);
        }
    }
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    let Some(e) = engine() else { return };
    let a = gen::uniform_random(10, 12, 3, 1).unwrap();
    let m = e.upload(&a).unwrap();
    let pp = e.prepare_kernel(&m, KernelId::Serial).unwrap();
    assert!(matches!(
        e.execute(&m, &pp, &[1.0; 11]),
        Err(EngineError::XLength {
            expected: 12,
            got: 11
        })
    ));
    let other = e.upload(&a).unwrap();
    assert!(matches!(
        e.execute(&other, &pp, &[1.0; 12]),
        Err(EngineError::WrongMatrix)
    ));
    let binning = Binning::new(a.row_ptr(), Scheme::Granularity(2));
    let mut plan = Plan::uniform(&binning, KernelId::Vector);
    plan.kernels.pop();
    assert!(matches!(
        e.prepare(&m, &plan, LaunchMode::Grouped),
        Err(EngineError::InvalidPlan(_))
    ));
    assert!(matches!(
        e.prepare_bins(&m, &binning, &[(100, KernelId::Serial)], LaunchMode::PerBin),
        Err(EngineError::InvalidPlan(_))
    ));
    assert!(matches!(
        Engine::new(Some("no such device 12345")),
        Err(EngineError::NoDevice { .. })
    ));
}

#[test]
fn the_engine_serves_several_threads() {
    let Some(e) = engine() else { return };
    let a = gen::power_law(5000, 5.0, 41).unwrap();
    let x = x_for(a.ncols(), 42);
    let y_ref = spmv_ref(&a, &x).unwrap();
    let shared = e.upload(&a).unwrap();
    let pp = e.prepare_kernel(&shared, KernelId::Subvector(4)).unwrap();
    std::thread::scope(|s| {
        for t in 0..4 {
            let (a, x, y_ref, shared, pp) = (&a, &x, &y_ref, &shared, &pp);
            s.spawn(move || {
                let own = e.upload(a).unwrap();
                for i in 0..5 {
                    let (y, _) = if (i + t) % 2 == 0 {
                        e.execute(shared, pp, x).unwrap()
                    } else {
                        e.spmv(&own, KernelId::MergePath, x).unwrap()
                    };
                    assert!(compare(a, x, &y, y_ref).ok());
                }
            });
        }
    });
}

#[test]
fn copy_bandwidth_is_measured() {
    let Some(e) = engine() else { return };
    let bw = e.copy_bandwidth(8 << 20, 3).unwrap();
    assert!(bw.gbps.is_finite() && bw.gbps > 0.0, "{bw:?}");
}

/// `e` with GPU-like small work-groups (128, CSR-Adaptive 32) and tiny
/// CSR-Adaptive blocks (16 nonzeros, multiplier 2) in both precisions, then
/// `more` applied to each precision's parameters.
fn with_small_blocks(mut e: Engine, more: impl Fn(&mut engine::KernelParams)) -> Engine {
    for p in [engine::Precision::F32, engine::Precision::F64] {
        let mut k = engine::KernelParams::defaults(p);
        k.wg_size = 128;
        k.adaptive_wg = 32;
        k.nnz_per_wg = 16;
        k.nnz_multiplier = 2;
        more(&mut k);
        e = e.with_params(p, k).unwrap();
    }
    e
}

/// merge_one with tiles of 32 x 8 items: many tiles, rows crossing many of
/// them, empty rows at tile edges, and row lists of bins; three calls each
/// (the arrival counter must be back at 0 after every call), both precisions.
#[test]
fn merge_one_with_small_tiles_finishes_crossing_rows_every_call() {
    if engine().is_none() {
        return;
    }
    let e = with_small_blocks(Engine::new(None).unwrap(), |k| k.wg_size = 32);
    let cases = [
        rows_of_lengths(&[0, 255, 256, 257, 0, 0, 3, 2_000, 1, 0, 511, 0], 3_000, 71),
        gen::one_huge_row(5000).unwrap(),
        gen::many_empty_rows(999, 0.6, 72).unwrap(),
        gen::power_law(4_000, 6.0, 73).unwrap(),
    ];
    for a in &cases {
        let x = x_for(a.ncols(), 74);
        let y_ref = spmv_ref(a, &x).unwrap();
        let m = e.upload(a).unwrap();
        let binning = Binning::new(a.row_ptr(), Scheme::Granularity(1));
        let mut plans = vec![e.prepare_kernel(&m, KernelId::MergeOne).unwrap()];
        // Every other bin by merge_one (row lists), the rest serial.
        let plan = Plan {
            scheme: binning.scheme,
            kernels: binning
                .nonempty_bins()
                .enumerate()
                .map(|(i, b)| {
                    (
                        b,
                        if i % 2 == 0 {
                            KernelId::MergeOne
                        } else {
                            KernelId::Serial
                        },
                    )
                })
                .collect(),
        };
        plans.push(e.prepare(&m, &plan, LaunchMode::Grouped).unwrap());
        for pp in &plans {
            let mut first: Option<Vec<u64>> = None;
            for _ in 0..3 {
                let (y, _) = e.execute(&m, pp, &x).unwrap();
                let c = compare(a, &x, &y, &y_ref);
                assert!(c.ok(), "{:?}: row {}", pp.launches(), c.worst_row);
                let bits: Vec<u64> = y.iter().map(|v| v.to_bits()).collect();
                assert_eq!(first.get_or_insert_with(|| bits.clone()), &bits);
            }
        }
    }
}

#[test]
fn small_blocks_and_chunks_stress_split_rows_and_carries() {
    // GPU-like and extreme parameters: tiny CSR-Adaptive blocks (many split rows,
    // CSR-VectorL partials) and tiny merge-path chunks (many carries), odd sizes.
    if engine().is_none() {
        return;
    }
    let e = with_small_blocks(Engine::new(None).unwrap(), |k| k.mp_items = 7);
    let cases: Vec<(String, Csr<f64>)> = vec![
        ("mixed lengths".into(), gen::mixed_lengths(500, 51).unwrap()),
        ("one huge row".into(), gen::one_huge_row(5000).unwrap()),
        ("lp-like".into(), gen::lp_like(400, 3200, 52).unwrap()),
        (
            "many empty rows".into(),
            gen::many_empty_rows(999, 0.6, 53).unwrap(),
        ),
        (
            "lengths around 16 and 32".into(),
            rows_of_lengths(&[15, 16, 17, 0, 31, 32, 33, 1, 64, 65, 2], 100, 54),
        ),
    ];
    check_both_precisions(&e, &cases);
    let a = gen::mixed_lengths(800, 55).unwrap();
    let mut failures = check_random_plans::<f64>(&e, "mixed (small params)", &a, 56);
    failures.extend(check_random_plans::<f32>(
        &e,
        "mixed (small params)",
        &a.cast::<f32>(),
        57,
    ));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Engines whose merge tiles are (work-group, items per work-item): the GPU
/// default (tiles of 1024), a tiny one (thousands of tiles, several fix-up
/// levels) and the smallest allowed (2 items a tile).
fn merge_tile_engines() -> Vec<(String, Engine)> {
    [(128, 8), (4, 3), (2, 1)]
        .into_iter()
        .map(|(wg, items)| {
            let mut e = Engine::new(None).unwrap();
            for p in [engine::Precision::F32, engine::Precision::F64] {
                let mut k = e.params(p);
                (k.mt_wg, k.mt_items) = (wg, items);
                e = e.with_params(p, k).unwrap();
            }
            (format!("tile {wg}x{items}"), e)
        })
        .collect()
}

/// merge_tile alone over the whole matrix, and over each of the first bins of
/// U = 10 (row lists) alone and as whole plans in both launch modes, against the
/// reference; returns the failures and the enqueues of the whole-matrix launch.
fn check_merge_tile<T: DeviceScalar>(e: &Engine, name: &str, a: &Csr<T>) -> (Vec<String>, usize) {
    let x: Vec<T> = x_for(a.ncols(), 63).into_iter().map(T::from_f64).collect();
    let y_ref = spmv_ref(a, &x).unwrap();
    let m = e.upload(a).unwrap();
    let mut failures = Vec::new();
    let mut ok = |what: String, y: &[T], want: &[T]| {
        if !compare(a, &x, y, want).ok() {
            failures.push(format!("{name} {} {what}", T::NAME));
        }
    };
    let pp = e.prepare_kernel(&m, KernelId::MergeTile).unwrap();
    let enqueues = pp.launches().iter().map(|l| l.enqueues).sum();
    ok(
        "whole matrix".into(),
        &e.execute(&m, &pp, &x).unwrap().0,
        &y_ref,
    );
    let binning = Binning::new(a.row_ptr(), Scheme::Granularity(10));
    for b in binning.nonempty_bins().take(4) {
        let alone = e
            .prepare_bins(
                &m,
                &binning,
                &[(b, KernelId::MergeTile)],
                LaunchMode::PerBin,
            )
            .unwrap();
        let (y, _) = e.execute(&m, &alone, &x).unwrap();
        let mut want = vec![T::from_f64(0.0); a.nrows()];
        for r in binning.expand(b) {
            want[r as usize] = y_ref[r as usize];
        }
        ok(format!("bin {b} alone"), &y, &want);
    }
    for mode in [LaunchMode::PerBin, LaunchMode::Grouped] {
        let plan = Plan::uniform(&binning, KernelId::MergeTile);
        let pp = e.prepare(&m, &plan, mode).unwrap();
        ok(
            format!("U=10 {mode:?}"),
            &e.execute(&m, &pp, &x).unwrap().0,
            &y_ref,
        );
    }
    (failures, enqueues)
}

#[test]
fn merge_tile_long_rows_many_tiles_empty_rows_and_bin_lists() {
    if engine().is_none() {
        return;
    }
    let cases: Vec<(&str, Csr<f64>)> = vec![
        (
            "rows longer than a tile",
            rows_of_lengths(&[5, 3000, 0, 2, 1500, 7, 0, 0, 1025], 4000, 61),
        ),
        (
            "one row over many tiles",
            gen::one_huge_row(60_000).unwrap(),
        ),
        (
            "many empty rows",
            gen::many_empty_rows(3000, 0.9, 62).unwrap(),
        ),
        ("all rows empty", gen::all_rows_empty(2000).unwrap()),
        ("mixed lengths", gen::mixed_lengths(1200, 64).unwrap()),
        (
            "1x1",
            Csr::try_new(1, 1, vec![0, 1], vec![0], vec![-1.5]).unwrap(),
        ),
        ("2x3 no nonzeros", Csr::zeros(2, 3).unwrap()),
    ];
    let mut failures = Vec::new();
    for (tag, e) in merge_tile_engines() {
        for (name, a) in &cases {
            let name = format!("{name} ({tag})");
            let (f, enq64) = check_merge_tile::<f64>(&e, &name, a);
            let (f32_failures, enq32) = check_merge_tile::<f32>(&e, &name, &a.cast::<f32>());
            failures.extend(f.into_iter().chain(f32_failures));
            assert_eq!(enq64, enq32, "{name}");
            if name.starts_with("one row over many tiles") && !tag.contains("128x") {
                // 60,001 items in tiles of at most 12: a fix-up tree of 3+ levels.
                assert!(enq64 >= 4, "{name}: {enq64} enqueues");
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn merge_tile_shrinks_to_the_local_memory_and_refuses_empty_tiles() {
    let k = engine::KernelParams::defaults(engine::Precision::F64);
    assert_eq!((k.mt_wg, k.mt_items), (128, 8));
    // 1024 items x (4 + 8) bytes + 128 x (4 + 8) + 8: fits an H100's 48 KiB.
    assert_eq!(k.merge_tile_local_bytes(engine::Precision::F64), 13_832);
    let big = engine::KernelParams {
        mt_wg: 256,
        mt_items: 32,
        ..k
    };
    let fitted = big.fit_local_memory(engine::Precision::F64, 48 << 10);
    assert_eq!((fitted.mt_wg, fitted.mt_items), (256, 8));
    assert!(fitted.merge_tile_local_bytes(engine::Precision::F64) <= 48 << 10);
    let tiny = big.fit_local_memory(engine::Precision::F32, 10);
    assert_eq!((tiny.mt_wg, tiny.mt_items), (2, 1));
    assert_eq!(big.fit_local_memory(engine::Precision::F64, 0), big);
    assert!(k.with_overrides("mt_wg=1,mt_items=1").is_err());
    assert!(k.with_overrides("mt_wg=96").is_err());
    let o = k.with_overrides("mt_wg=64,mt_items=16").unwrap();
    assert_eq!((o.mt_wg, o.mt_items), (64, 16));
    assert!(o
        .build_options(engine::Precision::F64, ReductionPath::Portable)
        .contains("-DMT_WG=64 -DMT_ITEMS=16"));
}

#[test]
fn the_shuffle_path_logic_equals_reference_with_emulated_shuffles() {
    // The inline-PTX shuffles only compile on NVIDIA; with SPMV_SHUFFLE_EMULATE
    // each shuffle is done in local memory, so everything else of that path
    // (segment widths, warp sums combined across warps, uniform control flow)
    // runs here. Default and small work-groups (128 / 64 / 32: one warp) both.
    if engine().is_none() {
        return;
    }
    let cfg = EngineConfig {
        warp_shuffle: WarpShuffle::Emulate,
        ..EngineConfig::default()
    };
    let e = Engine::with_config(&cfg).unwrap();
    for p in [engine::Precision::F32, engine::Precision::F64] {
        assert_eq!(e.reduction_path(p).unwrap(), ReductionPath::EmulatedShuffle);
    }
    check_both_precisions(&e, &awkward_cases());
    let small = with_small_blocks(Engine::with_config(&cfg).unwrap(), |k| k.vector_wg = 64);
    let cases: Vec<(String, Csr<f64>)> = vec![
        ("mixed lengths".into(), gen::mixed_lengths(500, 61).unwrap()),
        ("power law".into(), gen::power_law(3000, 6.0, 62).unwrap()),
        (
            "lengths around 16 and 32".into(),
            rows_of_lengths(&[15, 16, 17, 0, 31, 32, 33, 1, 64, 65, 2], 100, 63),
        ),
    ];
    check_both_precisions(&small, &cases);
}

#[test]
fn warp_shuffle_on_needs_nvidia_and_auto_stays_portable_elsewhere() {
    let Some(e) = engine() else { return };
    let nvidia = engine::config::is_nvidia_gpu(e.info());
    let on = EngineConfig {
        warp_shuffle: WarpShuffle::On,
        ..EngineConfig::default()
    };
    let auto = EngineConfig {
        warp_shuffle: WarpShuffle::Auto,
        ..EngineConfig::default()
    };
    let e_auto = Engine::with_config(&auto).unwrap();
    let want = if nvidia {
        ReductionPath::WarpShuffle
    } else {
        ReductionPath::Portable
    };
    // Auto may fall back to portable if the driver refuses the PTX.
    let got = e_auto.reduction_path(engine::Precision::F32).unwrap();
    assert!(got == want || got == ReductionPath::Portable, "{got:?}");
    if !nvidia {
        let e_on = Engine::with_config(&on).unwrap();
        assert!(matches!(
            e_on.program(engine::Precision::F32),
            Err(EngineError::Config(_))
        ));
        assert_eq!(
            e.reduction_path(engine::Precision::F64).unwrap(),
            ReductionPath::Portable
        );
    }
}

fn temp_cache(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("spmv-engine-cache-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// A fresh engine on `dir`, both precisions run on a matrix and checked.
fn cached_engine_run(dir: &Path) -> engine::ProgramStats {
    let cfg = EngineConfig {
        cache_dir: Some(dir.to_path_buf()),
        ..EngineConfig::default()
    };
    let e = Engine::with_config(&cfg).unwrap();
    let cases = vec![(
        "power law".to_string(),
        gen::power_law(2000, 5.0, 71).unwrap(),
    )];
    check_both_precisions(&e, &cases);
    e.program_stats()
}

#[test]
fn a_second_engine_loads_its_programs_from_the_binary_cache() {
    if engine().is_none() {
        return;
    }
    let dir = temp_cache("reuse");
    let first = cached_engine_run(&dir);
    assert_eq!(
        (first.source_builds, first.cache_stores, first.cache_loads),
        (2, 2, 0)
    );
    let second = cached_engine_run(&dir);
    assert_eq!(
        (
            second.source_builds,
            second.cache_loads,
            second.cache_rejects
        ),
        (0, 2, 0)
    );
    // Damage every entry (one flipped byte, one truncation): ignored, rebuilt, stored again.
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "clbin"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 2, "{files:?}");
    let mut raw = std::fs::read(&files[0]).unwrap();
    let mid = raw.len() / 2;
    raw[mid] ^= 0x5a;
    std::fs::write(&files[0], &raw).unwrap();
    let raw = std::fs::read(&files[1]).unwrap();
    std::fs::write(&files[1], &raw[..raw.len() / 3]).unwrap();
    let third = cached_engine_run(&dir);
    assert_eq!(
        (third.cache_rejects, third.source_builds, third.cache_stores),
        (2, 2, 2)
    );
    let fourth = cached_engine_run(&dir);
    assert_eq!((fourth.source_builds, fourth.cache_loads), (0, 2));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn execute_reports_kernel_and_transfer_times_apart() {
    let Some(e) = engine() else { return };
    let a = gen::uniform_random(20_000, 20_000, 8, 81).unwrap();
    let x = x_for(a.ncols(), 82);
    let m = e.upload(&a).unwrap();
    let pp = e.prepare_kernel(&m, KernelId::Serial).unwrap();
    let (y, t) = e.execute(&m, &pp, &x).unwrap();
    assert!(compare(&a, &x, &y, &spmv_ref(&a, &x).unwrap()).ok());
    assert!(
        t.kernel_ns > 0 && t.upload_x_ns > 0 && t.download_y_ns > 0,
        "{t:?}"
    );
    // Profiled device times fit inside the host's wall clock of the whole call.
    assert!(
        t.kernel_ns + t.upload_x_ns + t.download_y_ns <= t.wall_ns,
        "{t:?}"
    );
    assert_eq!(t.enqueues, 1);
}

/// Little-endian bytes of values of `T`'s width (the service's wire format).
fn le_bytes<T: DeviceScalar>(v: &[T]) -> Vec<u8> {
    v.iter()
        .flat_map(|v| match T::BYTES {
            4 => (v.to_f64() as f32).to_le_bytes().to_vec(),
            _ => v.to_f64().to_le_bytes().to_vec(),
        })
        .collect()
}

/// `execute_le` against `execute` on one matrix and prepared plan: the same
/// bits of y, and a wrong x length refused.
fn check_le_path<T: DeviceScalar>(
    e: &Engine,
    name: &str,
    m: &engine::DeviceMatrix<T>,
    pp: &engine::PreparedPlan<T>,
) {
    let x: Vec<T> = x_for(m.ncols(), 91).into_iter().map(T::from_f64).collect();
    let (want, _) = e.execute(m, pp, &x).unwrap();
    // Twice: the second call finds y's device buffer holding the first answer.
    for call in 0..2 {
        let (y, t) = e
            .execute_le(m, pp, &le_bytes(&x), || Ok::<(), EngineError>(()))
            .unwrap()
            .expect("CPU and GPU devices are little-endian");
        assert_eq!(y, le_bytes(&want), "{name} {} call {call}", T::NAME);
        assert!(
            t.kernel_ns + t.upload_x_ns + t.download_y_ns <= t.wall_ns,
            "{t:?}"
        );
    }
    // Into the caller's buffer (`execute_le_into`): first one too long and
    // full of stale bytes, then the same buffer again at the right length.
    let x_le = le_bytes(&x);
    let mut y = engine::HostBytes::from(vec![0xa5u8; (m.nrows() + 3) * T::BYTES]);
    for call in 0..2 {
        e.execute_le_into(m, pp, x_le[..].into(), &mut y, || Ok::<(), EngineError>(()))
            .unwrap()
            .expect("CPU and GPU devices are little-endian");
        assert_eq!(
            y.as_ref(),
            le_bytes(&want),
            "{name} {} into, call {call}",
            T::NAME
        );
    }
    // x and y in pinned host memory (straight to and from the device), then
    // x pinned and y on the heap (the engine's staging rule), y's stale
    // bytes overwritten each time.
    let mut x_pinned = e.pinned_bytes(x_le.len()).unwrap();
    x_pinned.as_mut().copy_from_slice(&x_le);
    let mut y_pinned = e.pinned_bytes(m.nrows() * T::BYTES).unwrap();
    y_pinned.as_mut().fill(0xa5);
    let mut y_heap = engine::HostBytes::heap(0);
    for y in [&mut y_pinned, &mut y_heap] {
        e.execute_le_into(m, pp, (&x_pinned).into(), y, || Ok::<(), EngineError>(()))
            .unwrap()
            .expect("CPU and GPU devices are little-endian");
        let what = format!("{name} {} x pinned, y pinned {}", T::NAME, y.is_pinned());
        assert_eq!(y.as_ref(), le_bytes(&want), "{what}");
    }
    assert!(y_pinned.is_pinned() && !y_heap.is_pinned());
    // x and y in shared memory (the kernels use them in place, unmapped
    // for the call and mapped again), twice; then shared with heap either
    // way (copied as usual); then a shared y of the wrong length, replaced.
    let mut x_shared = e.shared_bytes(x_le.len()).unwrap();
    x_shared.as_mut().copy_from_slice(&x_le);
    let mut y_shared = e.shared_bytes(m.nrows() * T::BYTES).unwrap();
    for call in 0..2 {
        y_shared.as_mut().fill(0xa5);
        let t = e
            .execute_le_into(m, pp, (&x_shared).into(), &mut y_shared, || {
                Ok::<(), EngineError>(())
            })
            .unwrap()
            .expect("CPU and GPU devices are little-endian");
        let what = format!("{name} {} x and y shared, call {call}", T::NAME);
        assert_eq!(y_shared.as_ref(), le_bytes(&want), "{what}");
        assert_eq!(x_shared.as_ref(), x_le, "{what}: x kept");
        assert!(
            t.kernel_ns + t.upload_x_ns + t.download_y_ns <= t.wall_ns,
            "{t:?}"
        );
        let wide = (m.nrows() + m.ncols()) * T::BYTES >= e.in_place_min_bytes();
        let in_place = m.nrows() > 0 && m.ncols() > 0 && wide;
        assert_eq!(t.in_place, in_place, "{what}: {t:?}");
    }
    let mut y_heap = engine::HostBytes::heap(0);
    let t = e
        .execute_le_into(m, pp, (&x_shared).into(), &mut y_heap, || {
            Ok::<(), EngineError>(())
        })
        .unwrap()
        .unwrap();
    assert!(!t.in_place);
    assert_eq!(
        y_heap.as_ref(),
        le_bytes(&want),
        "{name} {} x shared, y heap",
        T::NAME
    );
    y_shared.as_mut().fill(0xa5);
    e.execute_le_into(m, pp, x_le[..].into(), &mut y_shared, || {
        Ok::<(), EngineError>(())
    })
    .unwrap();
    assert_eq!(
        y_shared.as_ref(),
        le_bytes(&want),
        "{name} {} x heap, y shared",
        T::NAME
    );
    let mut y_long = e.shared_bytes(m.nrows() * T::BYTES + 5).unwrap();
    e.execute_le_into(m, pp, (&x_shared).into(), &mut y_long, || {
        Ok::<(), EngineError>(())
    })
    .unwrap();
    assert!(y_long.is_shared(), "{name}: replaced by shared bytes");
    assert_eq!(
        y_long.as_ref(),
        le_bytes(&want),
        "{name} {} y shared, too long",
        T::NAME
    );
    // A check of x that refuses it: y unspecified, both still usable after.
    let refused = e.execute_le_into(m, pp, (&x_shared).into(), &mut y_shared, || {
        Err(EngineError::InvalidPlan("x refused".into()))
    });
    assert!(
        matches!(refused, Err(EngineError::InvalidPlan(_))),
        "{name}"
    );
    y_shared.as_mut().fill(0);
    e.execute_le_into(m, pp, (&x_shared).into(), &mut y_shared, || {
        Ok::<(), EngineError>(())
    })
    .unwrap();
    assert_eq!(
        y_shared.as_ref(),
        le_bytes(&want),
        "{name} {} shared after a refusal",
        T::NAME
    );
    let short = le_bytes(&x[..m.ncols().saturating_sub(1)]);
    if m.ncols() > 0 {
        assert!(matches!(
            e.execute_le(m, pp, &short, || Ok::<(), EngineError>(())),
            Err(EngineError::XLength { .. })
        ));
    }
    // The caller's check of x runs while the device works; its error wins.
    let refused = e.execute_le(m, pp, &le_bytes(&x), || {
        Err(EngineError::InvalidPlan("x refused".into()))
    });
    assert!(
        matches!(refused, Err(EngineError::InvalidPlan(_))),
        "{name}"
    );
}

#[test]
fn the_wire_path_gives_the_bits_of_the_staged_path() {
    let Some(e) = engine() else { return };
    fn both<T: DeviceScalar>(e: &Engine, name: &str, a: &Csr<f64>) {
        let a = a.cast::<T>();
        let m = e.upload(&a).unwrap();
        let pp = e.prepare_kernel(&m, KernelId::CsrAdaptive).unwrap();
        check_le_path(e, name, &m, &pp);
        // Two launches writing y (the carries' fix-up pass after the first).
        let pp = e.prepare_kernel(&m, KernelId::MergePath).unwrap();
        check_le_path(e, &format!("{name}, merge path"), &m, &pp);
        // One bin only: the rows outside it come from the zero fill.
        let binning = Binning::new(a.row_ptr(), Scheme::Granularity(10));
        let first = binning.nonempty_bins().next();
        if let Some(b) = first {
            let pp = e
                .prepare_bins(&m, &binning, &[(b, KernelId::Serial)], LaunchMode::Grouped)
                .unwrap();
            check_le_path(e, &format!("{name}, bin {b} alone"), &m, &pp);
        }
    }
    let mut cases = awkward_cases();
    cases.push(("mixed".into(), gen::mixed_lengths(1500, 33).unwrap()));
    // The device's default (direct on a CPU device, pinned for narrow x and
    // y elsewhere; shared x and y in place at every size when they are SVM,
    // from 1 MiB, so not these, when they are mapped buffers), then both
    // ways forced and shared x and y always in place, SVM and mapped: the
    // same bits of y through each.
    // Shared memory is fine-grained SVM where the device has it (PoCL), so
    // the last engine makes it mapped buffers.
    let forced = [
        (engine::BinaryStaging::Pinned, SharedMemory::Auto),
        (engine::BinaryStaging::Direct, SharedMemory::Auto),
        (engine::BinaryStaging::Direct, SharedMemory::MappedBuffer),
    ]
    .map(|(s, shared_memory)| {
        Engine::with_config(&EngineConfig {
            binary_staging: s,
            in_place_min_bytes: Some(0),
            shared_memory,
            ..EngineConfig::default()
        })
        .unwrap()
    });
    assert!(!forced[2].shared_is_svm());
    eprintln!("shared memory is SVM: {}", forced[0].shared_is_svm());
    for e in std::iter::once(e).chain(&forced) {
        for (name, a) in &cases {
            both::<f32>(e, name, a);
            both::<f64>(e, name, a);
        }
    }
}

/// The adaptive timing loop on the device: a small matrix's median converges to
/// a 2% confidence interval within the repetition cap, and the statistics agree
/// with themselves.
#[test]
fn measure_converges_to_the_ci_target_on_a_small_matrix() {
    let Some(e) = engine() else { return };
    let a = gen::stencil_2d(64, 64).unwrap();
    let m = e.upload(&a).unwrap();
    let pp = e
        .prepare(
            &m,
            &Plan::single(KernelId::CsrAdaptive),
            LaunchMode::default(),
        )
        .unwrap();
    let x = vec![1.0f64; a.ncols()];
    let policy = engine::TimingPolicy {
        ci_budget_ms: 5_000.0,
        ..engine::TimingPolicy::default()
    };
    let est = e.time(&m, &pp, &x, 1, 1).unwrap().median_ms;
    // A burst of other work on a shared CPU device can keep one measurement
    // from converging within the cap: the loop must converge in one of three.
    let mut tries = Vec::new();
    let st = loop {
        let st = e.measure(&m, &pp, &x, &policy, est).unwrap();
        if st.converged || tries.len() == 2 {
            break st;
        }
        tries.push(st);
    };
    assert!(
        st.converged,
        "no convergence in 3 tries: {tries:?} then {st:?}"
    );
    assert!(st.ci_rel <= policy.ci_target, "{st:?}");
    assert!(st.reps >= engine::timing::MIN_CI_SAMPLES && st.reps <= policy.ci_max_reps);
    assert!(st.min_ms <= st.median_ms && st.median_ms <= st.max_ms);
    // Without a target the first batch is all there is.
    let once = engine::TimingPolicy {
        ci_target: 0.0,
        ..policy
    };
    let st = e.measure(&m, &pp, &x, &once, est).unwrap();
    assert_eq!(st.reps, once.reps_for(est));
    assert!(!st.converged && st.extra_ms == 0.0);
}
