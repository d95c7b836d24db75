//! Host time of one SpMV call around the device's own work, on generated 2D
//! stencils (the matrices of `bench/request_path.py`): for `execute_le` (the
//! service's binary x and y) and `execute`, the median over calls of
//! (the call's wall clock on this thread) - (kernel + x upload + y download
//! from OpenCL profiling), and of the engine's own `wall_ns` minus the same.
//!
//! `cargo run --release -p engine --example call_overhead -- [--calls N] [--kernel NAME] [NNZ...]`
//! (NNZ like 100000 or 10M; default 100K 1M 10M; f64).

use engine::{Engine, EngineConfig, LaunchMode, Timings};
use sparse::{gen, KernelId, Plan};
use std::time::Instant;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn parse_count(s: &str) -> usize {
    let (num, mul) = match s.to_ascii_lowercase().chars().last() {
        Some('k') => (&s[..s.len() - 1], 1e3),
        Some('m') => (&s[..s.len() - 1], 1e6),
        _ => (s, 1.0),
    };
    (num.parse::<f64>().expect("a count like 100000 or 1M") * mul) as usize
}

/// (call - device, wall - device, device) medians in ms of `calls` calls of `f`.
fn overhead(calls: usize, mut f: impl FnMut() -> Timings) -> (f64, f64, f64) {
    let (mut call, mut wall, mut dev) = (vec![], vec![], vec![]);
    for i in 0..calls + 2 {
        let t0 = Instant::now();
        let t = f();
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        let d = t.kernel_ms() + t.upload_x_ms() + t.download_y_ms();
        if i >= 2 {
            call.push(ms - d);
            wall.push(t.wall_ms() - d);
            dev.push(d);
        }
    }
    (median(call), median(wall), median(dev))
}

fn main() {
    let mut calls = 15;
    let mut kernel = KernelId::Serial;
    let mut sizes = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--calls" => calls = args.next().and_then(|v| v.parse().ok()).expect("--calls N"),
            "--kernel" => {
                kernel = args
                    .next()
                    .expect("--kernel NAME")
                    .parse()
                    .expect("a kernel")
            }
            s => sizes.push(parse_count(s)),
        }
    }
    if sizes.is_empty() {
        sizes = vec![100_000, 1_000_000, 10_000_000];
    }
    let e = Engine::with_config(&EngineConfig::default()).expect("an OpenCL device");
    println!(
        "device: {}; {kernel}, f64, medians of {calls} calls, ms",
        e.info().name
    );
    for nnz in sizes {
        let side = ((nnz as f64 / 5.0).sqrt().round() as usize).max(2);
        let a = gen::stencil_2d(side, side).expect("stencil");
        let m = e.upload(&a).expect("upload");
        let pp = e
            .prepare(&m, &Plan::single(kernel), LaunchMode::Grouped)
            .expect("prepare");
        let x: Vec<f64> = (0..a.ncols()).map(|i| (i % 7) as f64 - 3.0).collect();
        let x_le: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
        let le = overhead(calls, || {
            let r = e.execute_le(&m, &pp, &x_le, || Ok::<(), engine::EngineError>(()));
            r.expect("execute_le").expect("a little-endian device").1
        });
        let st = overhead(calls, || e.execute(&m, &pp, &x).expect("execute").1);
        for (what, (call, wall, dev)) in [("execute_le", le), ("execute", st)] {
            println!(
                "{:>9} nnz {what:<10}: device {dev:8.3}  call - device {call:7.3}  wall - device {wall:7.3}",
                a.nnz()
            );
        }
    }
}
