//! Micro-benchmark of a first call's fixed cost: plans one matrix for one call
//! as an inline /spmv does (`trainer::first_call`'s lazy planning) and prepares
//! the chosen plan's launches on the device, many times in a loop, and prints
//! the mean per step (planning, preparation, both) in microseconds.

use clap::Parser;
use engine::{Engine, LaunchMode};
use sparse::{mm, Precision};
use std::alloc::{GlobalAlloc, Layout, System};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;
use trainer::first_call::{plan_one_call, FirstCallSetup};

/// The system allocator, counting allocations (so the loops can say how
/// many each call makes).
struct Counting;

static ALLOCS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[derive(Parser)]
struct Args {
    /// The model file.
    #[arg(long)]
    model: PathBuf,
    /// A Matrix Market file.
    #[arg(long)]
    matrix: PathBuf,
    /// Iterations of each loop.
    #[arg(long, default_value_t = 100_000)]
    iters: usize,
    /// f64 or f32.
    #[arg(long, default_value = "f64")]
    precision: Precision,
    /// The device's copy bandwidth (GB/s) instead of the one measured at
    /// start (it moves with the machine's load, and with it whether the
    /// feature pass is judged to pay).
    #[arg(long)]
    copy_gbps: Option<f64>,
    /// Which loops: plan, prepare, both (comma-separated).
    #[arg(long, default_value = "plan,prepare,both")]
    loops: String,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let model = selector::Model::load(&args.model)?;
    let a = mm::read_path::<f64>(&args.matrix, &Default::default())?;
    let engine = Engine::new(None)?;
    let mut setup = FirstCallSetup::new(Some(&engine));
    if let Some(g) = args.copy_gbps {
        setup.copy_gbps = Some(g);
    }
    let ctx = setup.context(args.precision.bytes());
    let dm = engine.upload_as(&a, args.precision)?;
    let first = plan_one_call(&model, &a, &ctx);
    let pl = &first.planning;
    println!(
        "matrix {} rows {} nnz {}: {} ({}); features est {:?} ms, bound {:?} ms, break-even {:?} calls",
        args.matrix.display(),
        a.nrows(),
        a.nnz(),
        pl.chosen,
        pl.method,
        pl.features_estimate_ms,
        pl.spmv_bound_ms,
        pl.break_even_calls,
    );
    let n = args.iters.max(1);
    let per = |t: Instant| t.elapsed().as_secs_f64() * 1e6 / n as f64;
    for l in args.loops.split(',') {
        let allocs = ALLOCS.load(Ordering::Relaxed);
        let t = Instant::now();
        match l {
            "plan" => (0..n).for_each(|_| {
                std::hint::black_box(plan_one_call(&model, &a, &ctx));
            }),
            "prepare" => {
                let (b, p) = (&first.prediction.binning, &first.prediction.plan);
                for _ in 0..n {
                    std::hint::black_box(engine.prepare_binned_any(
                        &dm,
                        b,
                        p,
                        LaunchMode::Grouped,
                    )?);
                }
            }
            "both" => {
                for _ in 0..n {
                    let pl = plan_one_call(&model, &a, &ctx);
                    let (b, p) = (&pl.prediction.binning, &pl.prediction.plan);
                    std::hint::black_box(engine.prepare_binned_any(
                        &dm,
                        b,
                        p,
                        LaunchMode::Grouped,
                    )?);
                }
            }
            other => anyhow::bail!("unknown loop '{other}' (plan, prepare, both)"),
        }
        let us = per(t);
        let made = (ALLOCS.load(Ordering::Relaxed) - allocs) as f64 / n as f64;
        println!("{l}: {us:.3} us per call, {made:.1} allocations per call");
    }
    Ok(())
}
