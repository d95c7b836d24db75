//! Host cost of preparing trivial plans (one kernel over the whole matrix,
//! single-bin scheme), per kernel, the way the first call pays it
//! (`Engine::prepare_binned_any(.., LaunchMode::Grouped)`), plus the split of
//! one kernel object's cost into its OpenCL calls.
//!
//! `cargo run --release -p engine --example prepare_cost -- [--reps N] [--split] FILE.mtx.gz...`
//!
//! For every precision the device has, every kernel and every matrix (in the
//! order given, so each matrix after the first finds the engine warm, as the
//! service's does), it times the first preparation on that matrix ("first")
//! and the median of `--reps` more ("again"), and prints per kernel the
//! median over the matrices in microseconds. `--split` also times, on the
//! serial kernel's entry point, `clCreateKernel`, ocl's argument-type queries
//! (what ocl's `KernelBuilder::build` does before setting arguments: 18
//! `clGetKernelArgInfo`, which fail on our programs, built without
//! `-cl-kernel-arg-info`, each failure formatted into an error message) and
//! nine `clSetKernelArg`s.

use engine::{AnyMatrix, Engine, EngineConfig, LaunchMode, Precision};
use sparse::{Binning, Csr, KernelId, Plan, Scheme};
use std::path::PathBuf;
use std::time::Instant;

fn us(t0: Instant) -> f64 {
    t0.elapsed().as_secs_f64() * 1e6
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        f64::NAN
    } else {
        v[v.len() / 2]
    }
}

/// (first, again) preparation times in us of `kernel` as a single plan on `m`.
fn prepare_us(e: &Engine, m: &AnyMatrix, kernel: KernelId, reps: usize) -> (f64, f64) {
    let binning = Binning::new(m.row_ptr(), Scheme::Single);
    let plan = Plan::single(kernel);
    let t0 = Instant::now();
    let pp = e.prepare_binned_any(m, &binning, &plan, LaunchMode::Grouped);
    let first = us(t0);
    pp.expect("prepare");
    let again = (0..reps)
        .map(|_| {
            let t0 = Instant::now();
            let pp = e.prepare_binned_any(m, &binning, &plan, LaunchMode::Grouped);
            let t = us(t0);
            drop(pp.expect("prepare"));
            t
        })
        .collect();
    (first, median(again))
}

/// Times the OpenCL calls behind one kernel object: create, argument-type
/// queries, nine argument sets (medians of `reps`, us).
fn split(e: &Engine, p: Precision, reps: usize) {
    use ocl::core::{self, ArgVal};
    let prog = e.program(p).expect("program");
    let ctx = match core::get_program_info(prog.as_core(), core::ProgramInfo::Context) {
        Ok(core::ProgramInfoResult::Context(c)) => c,
        other => panic!("program context: {other:?}"),
    };
    // SAFETY: a plain device allocation with no host pointer.
    let buf = unsafe {
        core::create_buffer::<_, u32>(&ctx, core::MEM_READ_WRITE, 16, None).expect("buffer")
    };
    let (mut create, mut types, mut set, mut release) = (vec![], vec![], vec![], vec![]);
    for _ in 0..reps {
        let t0 = Instant::now();
        let k = core::create_kernel(prog.as_core(), "spmv_serial").expect("kernel");
        create.push(us(t0));
        let t0 = Instant::now();
        for i in 0..9 {
            let _ = ocl::core::get_kernel_arg_info(&k, i, ocl::core::KernelArgInfo::TypeName, None);
            let _ = ocl::core::get_kernel_arg_info(
                &k,
                i,
                ocl::core::KernelArgInfo::TypeQualifier,
                None,
            );
        }
        types.push(us(t0));
        let t0 = Instant::now();
        for i in 0..3 {
            core::set_kernel_arg(&k, i, ArgVal::scalar(&0u32)).expect("arg");
        }
        for i in 3..9 {
            core::set_kernel_arg(&k, i, ArgVal::mem(&buf)).expect("arg");
        }
        set.push(us(t0));
        let t0 = Instant::now();
        drop(k);
        release.push(us(t0));
    }
    println!(
        "split {:>4}: clCreateKernel {:7.2} us, arg-type queries {:7.2} us, 9 x clSetKernelArg {:6.2} us, release {:6.2} us",
        p.name(),
        median(create),
        median(types),
        median(set),
        median(release)
    );
}

fn main() {
    let mut reps = 9;
    let mut do_split = false;
    let mut files: Vec<PathBuf> = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--reps" => reps = args.next().and_then(|v| v.parse().ok()).expect("--reps N"),
            "--split" => do_split = true,
            _ => files.push(a.into()),
        }
    }
    let e = Engine::with_config(&EngineConfig::default()).expect("an OpenCL device");
    let mats: Vec<Csr<f64>> = files
        .iter()
        .map(|f| sparse::mm::read_path(f, &Default::default()).expect("matrix"))
        .collect();
    println!(
        "device: {}; {} matrices; median over matrices of (first, median of {reps} again), us",
        e.info().name,
        mats.len()
    );
    for p in [Precision::F32, Precision::F64] {
        if p == Precision::F64 && !e.info().fp64 {
            continue;
        }
        e.program(p).expect("program");
        if do_split {
            split(&e, p, reps.max(5));
        }
        let dms: Vec<AnyMatrix> = mats
            .iter()
            .map(|a| e.upload_as(a, p).expect("upload"))
            .collect();
        for k in KernelId::all() {
            let (first, again): (Vec<f64>, Vec<f64>) =
                dms.iter().map(|m| prepare_us(&e, m, k, reps)).unzip();
            println!(
                "{:>4} {:<12} first {:8.2} us  again {:8.2} us",
                p.name(),
                k.name(),
                median(first),
                median(again)
            );
        }
    }
}
