//! The first call of a matrix never seen (an inline /spmv, one expected
//! call) is planned without its features, binning or row lists: the shipped
//! PoCL model's quick plan is one kernel over the single bin, and planning it
//! allocates a few small blocks whatever the matrix's size (counted by this
//! test binary's allocator, per thread). A feature pass or a row list would
//! allocate in proportion to the rows; a formatted name or sentence would
//! add blocks.

use selector::{AmortiseContext, AnalysisCosts, Model};
use sparse::{Csr, Features, KernelId, Plan, Scheme};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::OnceLock;

/// The system allocator, counting this thread's allocations and their bytes.
struct Counting;

thread_local! {
    static MADE: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
}

fn count(bytes: usize) {
    // (`try_with`: a thread being torn down may still allocate.)
    let _ = MADE.try_with(|m| {
        let (n, b) = m.get();
        m.set((n + 1, b + bytes));
    });
}

// SAFETY: forwards every call to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count(l.size());
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        count(n);
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations and bytes this thread made while running `f`.
fn allocations<R>(f: impl FnOnce() -> R) -> (R, usize, usize) {
    let (n0, b0) = MADE.with(Cell::get);
    let r = f();
    let (n1, b1) = MADE.with(Cell::get);
    (r, n1 - n0, b1 - b0)
}

/// `rows` rows of 8 nonzeros.
fn matrix(rows: usize) -> Csr<f64> {
    let rp: Vec<u32> = (0..=rows).map(|i| (i * 8) as u32).collect();
    let ci: Vec<u32> = (0..rows * 8).map(|i| (i % 64) as u32).collect();
    Csr::try_new(rows, 64, rp, ci, vec![1.0; rows * 8]).unwrap()
}

/// A device whose bandwidth bound is so small that no feature pass pays
/// for one call.
fn ctx() -> AmortiseContext {
    AmortiseContext {
        costs: AnalysisCosts {
            bin_ns_per_virtual_row: 5.0,
            list_ns_per_row: 10.0,
            launch_ms: 0.001,
            features_ns_fixed: 200.0,
            features_ns_per_row: 20.0,
            features_ns_per_entry: 2.0,
            source: "test".into(),
        },
        copy_gbps: Some(1e6),
        value_bytes: 8,
    }
}

fn model() -> Model {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../models/pthread-skylake-avx512-amd-epyc-f64.json"
    );
    Model::load(path).expect("the shipped PoCL model loads")
}

#[test]
fn a_one_call_plan_computes_no_features_and_lists_no_rows() {
    let (m, ctx) = (model(), ctx());
    let mut seen = Vec::new();
    // Warm up first: the model's fallback kernel and the kernel names are
    // made once per process, on the first quick plan.
    for rows in [1_000, 1_000, 200_000] {
        let a = matrix(rows);
        let cell = OnceLock::new();
        let computed = Cell::new(false);
        let compute = || {
            computed.set(true);
            Features::of(&a)
        };
        let (p, n, bytes) =
            allocations(|| m.plan_lazy(&cell, compute, a.rows(), a.ncols(), 1, &ctx, false));
        assert!(!computed.get() && cell.get().is_none(), "features computed");
        assert!(!p.planning.features_computed);
        assert_eq!(p.planning.method, "quick");
        let b = &p.prediction.binning;
        assert_eq!((b.scheme, b.nrows), (Scheme::Single, rows));
        assert_eq!(
            b.bins,
            vec![vec![0u32]],
            "one bin, one virtual row, no list"
        );
        assert_eq!(b.bin_nnz, vec![8 * rows as u64]);
        assert_eq!(p.prediction.plan, Plan::single(KernelId::Serial));
        assert_eq!(p.planning.chosen, "single:serial");
        assert!(p.prediction.explanation.is_none());
        seen.push((rows, n, bytes));
    }
    // The same allocations for 1K and 200K rows (a row list of 200K rows
    // alone would be 800 KB), and few of them: the single bin (3), the plan
    // (1), the two candidates (1) and the quick one's kernel name (1).
    let (_, n_small, bytes_small) = seen[1];
    let (_, n_large, bytes_large) = seen[2];
    assert_eq!((n_small, bytes_small), (n_large, bytes_large), "{seen:?}");
    assert!(
        n_large <= 6,
        "a one-call plan made {n_large} allocations: {seen:?}"
    );
    assert!(
        bytes_large <= 1024,
        "a one-call plan allocated {bytes_large} bytes: {seen:?}"
    );
}

#[test]
fn the_reason_is_unchanged_when_read() {
    let (m, ctx, a) = (model(), ctx(), matrix(1_000));
    let p = m.plan_lazy(
        &OnceLock::new(),
        || Features::of(&a),
        a.rows(),
        a.ncols(),
        1,
        &ctx,
        false,
    );
    let json = serde_json::to_value(&p.planning).unwrap();
    assert_eq!(json["chosen"], "single:serial");
    assert_eq!(json["method"], "quick");
    assert_eq!(json["stage1_scheme"], "none");
    let names: Vec<&str> = json["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["model", "single:serial"]);
    assert_eq!(json["candidates"][1]["scheme"], "single");
    assert_eq!(json["candidates"][1]["kernels"][0], "serial");
    assert_eq!(json["candidates"][0]["scheme"], "unknown");
    let reason = json["reason"].as_str().unwrap();
    assert!(
        reason.contains("the kernel most often best in the model's labels"),
        "{reason}"
    );
}
