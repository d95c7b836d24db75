//! `fuzz`: runs the mutation fuzzer for a number of inputs or seconds and
//! reports inputs, time, outcomes, and any crash (panic, 5xx, hang), which is
//! written to the crash folder and makes the exit status 1.
//!
//! Example (the short CI run):
//! `cargo run --release -p fuzz -- --seconds 20 --seeds crates/sparse/tests/data --seeds crates/sparse/tests/bad_files`

use anyhow::Context;
use clap::Parser;
use fuzz::mutate::mutate;
use fuzz::seeds::{self, Kind, Seed};
use fuzz::targets::Targets;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(
    about = "Mutation fuzzing of the Matrix Market, JSON CSR, binary CSR and multipart readers"
)]
struct Args {
    /// Stop after this many inputs.
    #[arg(long, default_value_t = 1_000_000)]
    iterations: u64,
    /// Stop after this many seconds (whichever comes first).
    #[arg(long, default_value_t = 3600)]
    seconds: u64,
    /// Random seed (the run is deterministic for a given seed and corpus).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Folders of seed files (Matrix Market, gzip or not); repeatable.
    #[arg(long = "seeds")]
    seeds: Vec<PathBuf>,
    /// Where crashing inputs are written.
    #[arg(long, default_value = "target/fuzz-crashes")]
    crashes: PathBuf,
    /// Largest input, in bytes.
    #[arg(long, default_value_t = 64 * 1024)]
    max_len: usize,
    /// Milliseconds after which one input counts as a hang.
    #[arg(long, default_value_t = 5000)]
    hang_ms: u64,
    /// The models folder the service loads.
    #[arg(long, default_value = "models")]
    models: PathBuf,
}

/// Counts of one run.
#[derive(Default)]
struct Stats {
    inputs: u64,
    mm: u64,
    json: u64,
    binary: u64,
    http: u64,
    accepted: u64,
    crashes: u64,
    slowest_ms: f64,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut corpus: Vec<Seed> = Vec::new();
    for dir in &args.seeds {
        let n = seeds::from_dir(dir, args.max_len, &mut corpus)
            .with_context(|| format!("reading seeds from {}", dir.display()))?;
        eprintln!("{n} seed files from {}", dir.display());
    }
    anyhow::ensure!(!corpus.is_empty(), "no seeds: give --seeds DIR");
    std::fs::create_dir_all(&args.crashes)?;
    let targets = Targets::new(&args.models);
    let current: Arc<Mutex<Vec<u8>>> = Arc::default();
    let started_ms = Arc::new(AtomicU64::new(0));
    let t0 = Instant::now();
    watchdog(&args, current.clone(), started_ms.clone(), t0);
    std::panic::set_hook(Box::new(|_| {}));
    let mut rng = ChaCha8Rng::seed_from_u64(args.seed);
    let mut stats = Stats::default();
    let deadline = Duration::from_secs(args.seconds);
    while stats.inputs < args.iterations && t0.elapsed() < deadline {
        let s = &corpus[rng.gen_range(0..corpus.len())];
        let other = &corpus[rng.gen_range(0..corpus.len())].bytes;
        let input = if rng.gen_bool(0.05) {
            s.bytes.clone()
        } else {
            mutate(&mut rng, &s.bytes, other, args.max_len)
        };
        let kind = s.kind;
        *current.lock().unwrap_or_else(|e| e.into_inner()) = input.clone();
        started_ms.store(t0.elapsed().as_millis() as u64 + 1, Ordering::SeqCst);
        let t = Instant::now();
        let variant: u8 = rng.gen();
        let http = rng.gen_range(0..8) == 0 || kind == Kind::Multipart;
        let r = run_one(&targets, kind, &input, http, variant, &mut stats);
        started_ms.store(0, Ordering::SeqCst);
        stats.slowest_ms = stats.slowest_ms.max(t.elapsed().as_secs_f64() * 1e3);
        stats.inputs += 1;
        if let Err(why) = r {
            stats.crashes += 1;
            let path = save(&args.crashes, &input)?;
            eprintln!(
                "CRASH ({kind:?}): {why}\n  input saved to {}",
                path.display()
            );
        } else if stats.inputs % 100_000 == 0 {
            eprintln!(
                "{} inputs, {:.0} s",
                stats.inputs,
                t0.elapsed().as_secs_f64()
            );
        }
    }
    report(&stats, t0.elapsed());
    anyhow::ensure!(stats.crashes == 0, "{} crashes", stats.crashes);
    Ok(())
}

/// Runs one input through its targets; a panic or a 5xx is an error.
fn run_one(
    t: &Targets,
    kind: Kind,
    input: &[u8],
    http: bool,
    variant: u8,
    st: &mut Stats,
) -> Result<(), String> {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| -> Result<bool, String> {
        let mut ok = match kind {
            Kind::MatrixMarket => t.matrix_market(input),
            Kind::Json => t.json_csr(input),
            Kind::BinaryCsr => t.binary_csr(input),
            Kind::Multipart => false,
        };
        if http {
            let status = t.http(kind, input, variant)?;
            ok |= status < 300;
        }
        Ok(ok)
    }));
    match kind {
        Kind::MatrixMarket => st.mm += 1,
        Kind::Json => st.json += 1,
        Kind::BinaryCsr => st.binary += 1,
        Kind::Multipart => {}
    }
    st.http += u64::from(http);
    match r {
        Ok(Ok(ok)) => {
            st.accepted += u64::from(ok);
            Ok(())
        }
        Ok(Err(e)) => Err(e),
        Err(p) => Err(format!(
            "panic: {}",
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()
        )),
    }
}

/// Aborts the process, saving the input, when one input runs past the hang limit.
fn watchdog(args: &Args, current: Arc<Mutex<Vec<u8>>>, started_ms: Arc<AtomicU64>, t0: Instant) {
    let (limit, dir) = (args.hang_ms, args.crashes.clone());
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_millis(100));
        let s = started_ms.load(Ordering::SeqCst);
        if s != 0 && t0.elapsed().as_millis() as u64 > s + limit {
            let input = current.lock().unwrap_or_else(|e| e.into_inner()).clone();
            let path = save(&dir, &input)
                .map(|p| p.display().to_string())
                .unwrap_or_default();
            eprintln!("HANG: one input ran over {limit} ms; saved to {path}");
            std::process::exit(2);
        }
    });
}

fn save(dir: &std::path::Path, input: &[u8]) -> std::io::Result<PathBuf> {
    let name = blake3::hash(input).to_hex()[..16].to_string();
    let path = dir.join(format!("crash-{name}"));
    std::fs::write(&path, input)?;
    Ok(path)
}

fn report(s: &Stats, elapsed: Duration) {
    let secs = elapsed.as_secs_f64();
    println!(
        "inputs: {} in {secs:.1} s ({:.0}/s)",
        s.inputs,
        s.inputs as f64 / secs.max(1e-9)
    );
    println!("  Matrix Market reader: {}, JSON CSR reader: {}, binary CSR reader: {}, HTTP (predict/matrices/spmv incl. multipart): {}", s.mm, s.json, s.binary, s.http);
    println!(
        "  accepted by some reader: {}, slowest input: {:.1} ms",
        s.accepted, s.slowest_ms
    );
    println!(
        "crashes (panics, 5xx other than 503): {}, hangs: 0",
        s.crashes
    );
}
