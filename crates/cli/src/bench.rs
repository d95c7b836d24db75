//! `spmv bench`: every kernel of the pool on whole matrices, CSR-Adaptive, merge
//! path and the CPU-parallel SpMV, timed (warm-up, repetitions until the
//! median's 95% CI is within --ci-target; median, spread and CI) and verified
//! against the reference, with GB/s under the minimum-bytes model
//! beside the device's copy bandwidth measured in the same run; plus one plan's
//! one-launch-per-bin vs grouped launches.

use anyhow::{bail, Context, Result};
use clap::Args as ClapArgs;
use engine::{min_bytes, registry, DeviceScalar, Engine, LaunchMode, TimeStats};
use sparse::gen::Family;
use sparse::mm::{read_path, ReadOptions};
use sparse::spmv::{compare, spmv_par_into, spmv_ref};
use sparse::{Binning, Csr, KernelId, Plan, Scheme};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Arguments of `spmv bench`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// Matrix Market files or folders of them (.mtx, .mtx.gz).
    pub paths: Vec<PathBuf>,
    /// Generated matrices, FAMILY:NNZ (e.g. uniform:1M, stencil2d:4000000, power_law:16M); repeatable.
    #[arg(long = "gen")]
    pub gens: Vec<String>,
    /// f32, f64 or both.
    #[arg(long, default_value = "both")]
    pub precision: sparse::Precisions,
    /// CSV output (one row per matrix, kernel and precision) instead of a table.
    #[arg(long)]
    pub csv: bool,
    /// Timed repetitions per kernel (fewer when one run is slow, see --budget-ms).
    #[arg(long, default_value_t = 10)]
    pub reps: usize,
    /// Untimed warm-up runs per kernel.
    #[arg(long, default_value_t = 2)]
    pub warmup: usize,
    /// Time budget per kernel and matrix in ms: slow kernels get fewer repetitions.
    #[arg(long, default_value_t = 4000.0)]
    pub budget_ms: f64,
    /// Then more repetitions until the median's 95% confidence interval is
    /// within this fraction of it (0 = --reps only).
    #[arg(long, env = "SPMV_CI_TARGET", default_value_t = engine::TimingPolicy::default().ci_target)]
    pub ci_target: f64,
    /// Most repetitions of one kernel, adaptive batches included.
    #[arg(long, env = "SPMV_CI_MAX_REPS", default_value_t = engine::TimingPolicy::default().ci_max_reps)]
    pub ci_max_reps: usize,
    /// Most wall time (ms) the adaptive batches of one kernel may take.
    #[arg(long, env = "SPMV_CI_BUDGET_MS", default_value_t = engine::TimingPolicy::default().ci_budget_ms)]
    pub ci_budget_ms: f64,
    /// OpenCL device (platform or device name substring); default env SPMV_DEVICE, else the best device.
    #[arg(long, env = "SPMV_DEVICE")]
    pub device: Option<String>,
    #[command(flatten)]
    pub engine: crate::engine_args::EngineArgs,
    /// Size of each buffer of the copy-bandwidth kernel, MiB.
    #[arg(long, default_value_t = 256)]
    pub copy_mb: usize,
    /// Scheme of the per-bin vs grouped comparison (best kernel per bin), or `none`.
    #[arg(long, default_value = "100")]
    pub plan_scheme: String,
    /// Only the N largest input files (by size on disk).
    #[arg(long)]
    pub largest: Option<usize>,
    /// Only these kernels (comma-separated names); default every kernel.
    #[arg(long)]
    pub kernels: Option<String>,
    /// Calls per round of the back-to-back timing (the plan enqueued N times,
    /// then one finish; wall time / N), as a library is timed by replaying a
    /// graph of N calls; 0 skips it. Fewer calls when N of them would exceed
    /// --budget-ms (the CSV's b2b_calls says how many).
    #[arg(long, default_value_t = 100)]
    pub back_to_back: usize,
}

/// One measured line.
struct Line {
    matrix: String,
    kernel: String,
    precision: &'static str,
    nnz: usize,
    stats: TimeStats,
    gbps: f64,
    bound_fraction: f64,
    gflops: f64,
    /// Worst |y - y_ref| over its per-row bound (eps x row length x sum |a x|):
    /// at most 1 is a correct answer, whatever the cancellation in y.
    err_vs_bound: f64,
    ok: bool,
    /// Back-to-back wall time per call (`None`: not timed so, e.g. on the CPU).
    b2b: Option<engine::BackToBack>,
}

/// One row of `spmv bench --csv`; the field names are the header
/// (`scripts/gpu-campaign.sh` and the reports read these columns).
#[derive(serde::Serialize)]
struct CsvLine<'a> {
    matrix: &'a str,
    kernel: &'a str,
    precision: &'a str,
    nnz: usize,
    #[serde(serialize_with = "fixed::<_, 6>")]
    median_ms: f64,
    #[serde(serialize_with = "fixed::<_, 6>")]
    min_ms: f64,
    #[serde(serialize_with = "fixed::<_, 4>")]
    spread: f64,
    reps: usize,
    #[serde(serialize_with = "fixed::<_, 3>")]
    gbps: f64,
    #[serde(serialize_with = "fixed::<_, 4>")]
    bound_fraction: f64,
    #[serde(serialize_with = "fixed::<_, 3>")]
    gflops: f64,
    #[serde(serialize_with = "scientific3")]
    err_vs_bound: f64,
    ok: bool,
    /// Relative half-width of the median's 95% CI (inf below 6 repetitions).
    #[serde(serialize_with = "fixed::<_, 4>")]
    ci_rel: f64,
    converged: bool,
    /// Median over rounds of the wall time of `b2b_calls` calls enqueued back
    /// to back (one finish) divided by `b2b_calls`: method (b) of the campaign
    /// report, comparable with cuSPARSE's graph replay. Empty when not timed.
    #[serde(serialize_with = "fixed_or_empty::<_, 6>")]
    b2b_ms: f64,
    b2b_calls: usize,
}

impl<'a> CsvLine<'a> {
    fn of(l: &'a Line) -> CsvLine<'a> {
        CsvLine {
            matrix: &l.matrix,
            kernel: &l.kernel,
            precision: l.precision,
            nnz: l.nnz,
            median_ms: l.stats.median_ms,
            min_ms: l.stats.min_ms,
            spread: l.stats.spread,
            reps: l.stats.reps,
            gbps: l.gbps,
            bound_fraction: l.bound_fraction,
            gflops: l.gflops,
            err_vs_bound: l.err_vs_bound,
            ok: l.ok,
            ci_rel: l.stats.ci_rel,
            converged: l.stats.converged,
            b2b_ms: l.b2b.as_ref().map_or(f64::NAN, |b| b.median_ms),
            b2b_calls: l.b2b.as_ref().map_or(0, |b| b.calls),
        }
    }
}

/// Like [`fixed`], but an empty cell for a figure that was not measured (NaN).
fn fixed_or_empty<S: serde::Serializer, const N: usize>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    if v.is_nan() {
        return s.serialize_str("");
    }
    fixed::<S, N>(v, s)
}

/// A number with `N` decimals (a short, stable cell instead of every digit).
fn fixed<S: serde::Serializer, const N: usize>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&format_args!("{v:.N$}"))
}

/// A number in scientific notation with 3 decimals.
fn scientific3<S: serde::Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&format_args!("{v:.3e}"))
}

struct Ctx<'a> {
    args: &'a Args,
    engine: &'a Engine,
    copy_gbps: f64,
    kernels: Vec<KernelId>,
    plan_scheme: Option<Scheme>,
    wrote_header: bool,
    /// The CSV writer of `--csv` (to stdout), else `None` for the table.
    csv: Option<csv::Writer<std::io::Stdout>>,
    all: Vec<Line>,
}

pub(crate) fn parse_count(s: &str) -> Result<usize> {
    let t = s.trim().to_ascii_lowercase();
    let (num, mul) = match t.chars().last() {
        Some('k') => (&t[..t.len() - 1], 1e3),
        Some('m') => (&t[..t.len() - 1], 1e6),
        Some('g') => (&t[..t.len() - 1], 1e9),
        _ => (&t[..], 1.0),
    };
    let v: f64 = num
        .parse()
        .with_context(|| format!("'{s}' is not a count like 1000000, 4M or 16m"))?;
    Ok((v * mul).round() as usize)
}

pub(crate) fn parse_gen(spec: &str) -> Result<(Family, usize)> {
    let Some((fam, n)) = spec.split_once(':') else {
        bail!("--gen wants FAMILY:NNZ, e.g. uniform:1M (got '{spec}')");
    };
    let fam = match fam {
        "uniform" => "uniform_random",
        "stencil" => "stencil2d",
        f => f,
    };
    Ok((fam.parse::<Family>()?, parse_count(n)?))
}

pub(crate) fn collect_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            out.extend(sparse::mm::matrix_files(p)?);
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

/// The CI column: `±1.2%`, with `*` when the target was not reached, `-` when
/// there were too few repetitions for a CI.
fn ci_cell(st: &TimeStats) -> String {
    if !st.ci_rel.is_finite() {
        return "-".into();
    }
    let mark = if st.converged { "" } else { "*" };
    format!("±{:.1}%{mark}", st.ci_rel * 100.0)
}

fn x_vector(n: usize) -> Vec<f64> {
    // Deterministic, varied, never zero: a wrong column index changes the answer.
    (0..n)
        .map(|i| 1.0 + ((i as u64 * 2_654_435_761 % 1000) as f64) / 1000.0)
        .collect()
}

impl Ctx<'_> {
    fn line<T: DeviceScalar>(
        &self,
        matrix: &str,
        kernel: String,
        a: &Csr<T>,
        stats: TimeStats,
        err_vs_bound: f64,
        ok: bool,
    ) -> Line {
        let bytes = min_bytes(a.nrows(), a.ncols(), a.nnz(), T::BYTES) as f64;
        let secs = stats.median_ms * 1e-3;
        let gbps = if secs > 0.0 { bytes / secs / 1e9 } else { 0.0 };
        Line {
            matrix: matrix.to_string(),
            kernel,
            precision: T::NAME,
            nnz: a.nnz(),
            gflops: if secs > 0.0 {
                2.0 * a.nnz() as f64 / secs / 1e9
            } else {
                0.0
            },
            bound_fraction: gbps / self.copy_gbps,
            gbps,
            stats,
            err_vs_bound,
            ok,
            b2b: None,
        }
    }

    fn emit(&mut self, l: Line) {
        if let Some(w) = &mut self.csv {
            // The header comes from `CsvLine`'s fields, before the first row.
            let _ = w.serialize(CsvLine::of(&l));
            let _ = w.flush();
            self.all.push(l);
            return;
        }
        let mut out = std::io::stdout().lock();
        if !self.wrote_header {
            let _ = writeln!(
                out,
                "{:<40} {:<22} {:<4} {:>11} {:>10} {:>6} {:>7} {:>4} {:>8} {:>6} {:>8} {:>10} {:>10}",
                "matrix",
                "kernel",
                "prec",
                "nnz",
                "median_ms",
                "spread",
                "ci95",
                "reps",
                "GB/s",
                "bound",
                "GFLOP/s",
                "err/bound",
                "b2b_ms"
            );
            self.wrote_header = true;
        }
        let _ = writeln!(
            out,
            "{:<40} {:<22} {:<4} {:>11} {:>10.4} {:>5.1}% {:>7} {:>4} {:>8.2} {:>5.1}% {:>8.3} {:>10.2e} {:>10}{}",
            truncate(&l.matrix, 40),
            l.kernel,
            l.precision,
            l.nnz,
            l.stats.median_ms,
            l.stats.spread * 100.0,
            ci_cell(&l.stats),
            l.stats.reps,
            l.gbps,
            l.bound_fraction * 100.0,
            l.gflops,
            l.err_vs_bound,
            l.b2b
                .as_ref()
                .map_or("-".to_string(), |b| format!("{:.4}", b.median_ms)),
            if l.ok { "" } else { "  WRONG" }
        );
        let _ = out.flush();
        self.all.push(l);
    }

    /// Times a prepared plan: one checked run (also the first warm-up), then
    /// repetitions within the budget, then the back-to-back rounds.
    fn measure<T: DeviceScalar>(
        &self,
        m: &engine::DeviceMatrix<T>,
        pp: &engine::PreparedPlan<T>,
        a: &Csr<T>,
        x: &[T],
        y_ref: &[T],
    ) -> Result<(TimeStats, f64, bool, Option<engine::BackToBack>)> {
        let (y, t) = self.engine.execute(m, pp, x)?;
        let c = compare(a, x, &y, y_ref);
        // The checked call above was the first warm-up.
        let policy = engine::TimingPolicy {
            warmup: self.args.warmup.saturating_sub(1),
            min_reps: 1,
            max_reps: self.args.reps,
            target_ms: self.args.budget_ms,
            ci_target: self.args.ci_target.max(0.0),
            ci_max_reps: self.args.ci_max_reps,
            ci_budget_ms: self.args.ci_budget_ms.max(0.0),
        };
        let st = self
            .engine
            .measure(m, pp, x, &policy, t.kernel_ms().max(1e-3))?;
        let b2b = self.back_to_back(m, pp, x, st.wall_median_ms)?;
        Ok((st, c.worst_bound_ratio, c.ok(), b2b))
    }

    /// The back-to-back rounds (`--back-to-back` calls each, fewer when they
    /// would exceed the budget), given one call's wall time (ms).
    fn back_to_back<T: DeviceScalar>(
        &self,
        m: &engine::DeviceMatrix<T>,
        pp: &engine::PreparedPlan<T>,
        x: &[T],
        call_ms: f64,
    ) -> Result<Option<engine::BackToBack>> {
        if self.args.back_to_back == 0 {
            return Ok(None);
        }
        const ROUNDS: usize = 3;
        let fit = (self.args.budget_ms / ROUNDS as f64 / call_ms.max(1e-4)) as usize;
        let calls = self.args.back_to_back.min(fit.max(1));
        Ok(Some(self.engine.back_to_back(m, pp, x, (calls, ROUNDS))?))
    }

    fn bench_matrix<T: DeviceScalar>(&mut self, name: &str, a64: &Csr<f64>) -> Result<()> {
        let a: Csr<T> = a64.cast();
        let x: Vec<T> = x_vector(a.ncols()).into_iter().map(T::from_f64).collect();
        let y_ref = spmv_ref(&a, &x)?;
        let m = self.engine.upload(&a)?;
        let mut singles: Vec<(String, f64)> = Vec::new();
        for &k in &self.kernels.clone() {
            let pp = self.engine.prepare_kernel(&m, k)?;
            let (st, err, ok, b2b) = self.measure(&m, &pp, &a, &x, &y_ref)?;
            singles.push((k.name(), st.median_ms));
            let l = Line {
                b2b,
                ..self.line(name, k.name(), &a, st, err, ok)
            };
            self.emit(l);
        }
        self.bench_cpu_parallel(name, &a, &x, &y_ref);
        if let Some(scheme) = self.plan_scheme {
            self.bench_plan(name, scheme, &m, &a, &x, &y_ref)?;
        }
        report_best_single::<T>(name, &singles);
        Ok(())
    }

    /// The CPU-parallel SpMV (rayon) on the same x: one checked run, one timed
    /// to size the repetitions, the warm-ups, then the repetitions.
    fn bench_cpu_parallel<T: DeviceScalar>(
        &mut self,
        name: &str,
        a: &Csr<T>,
        x: &[T],
        y_ref: &[T],
    ) {
        let mut y = vec![T::zero(); a.nrows()];
        spmv_par_into(a, x, &mut y);
        let c = compare(a, x, &y, y_ref);
        let t0 = Instant::now();
        spmv_par_into(a, x, &mut y);
        let first = t0.elapsed().as_secs_f64() * 1e3;
        let reps =
            ((self.args.budget_ms / first.max(1e-3)) as usize).clamp(1, self.args.reps.max(1));
        for _ in 0..self.args.warmup {
            spmv_par_into(a, x, &mut y);
        }
        let mut samples = Vec::with_capacity(reps);
        for _ in 0..reps {
            let t0 = Instant::now();
            spmv_par_into(a, x, &mut y);
            samples.push(t0.elapsed().as_secs_f64() * 1e3);
        }
        let st = TimeStats::from_samples(samples.clone(), samples);
        let l = self.line(
            name,
            "cpu_parallel".into(),
            a,
            st,
            c.worst_bound_ratio,
            c.ok(),
        );
        self.emit(l);
    }

    /// The best kernel per bin at one scheme, run with one launch per bin,
    /// with the bins of a kernel grouped, and fused (the row-mapped bins in
    /// one launch).
    fn bench_plan<T: DeviceScalar>(
        &mut self,
        name: &str,
        scheme: Scheme,
        m: &engine::DeviceMatrix<T>,
        a: &Csr<T>,
        x: &[T],
        y_ref: &[T],
    ) -> Result<()> {
        let binning = Binning::new(a.row_ptr(), scheme);
        let mut plan = Plan {
            scheme,
            kernels: Vec::new(),
        };
        for b in binning.nonempty_bins() {
            let mut best = (f64::INFINITY, KernelId::Serial);
            for &k in &self.kernels {
                let pp = self
                    .engine
                    .prepare_bins(m, &binning, &[(b, k)], LaunchMode::PerBin)?;
                let (y, t) = self.engine.execute(m, &pp, x)?;
                drop(y);
                let reps =
                    ((self.args.budget_ms / 4.0 / t.kernel_ms().max(1e-3)) as usize).clamp(1, 3);
                let st = self.engine.time(m, &pp, x, 0, reps)?;
                if st.median_ms < best.0 {
                    best = (st.median_ms, k);
                }
            }
            plan.kernels.push((b, best.1));
        }
        let nbins = plan.kernels.len();
        for mode in [LaunchMode::PerBin, LaunchMode::Grouped, LaunchMode::Fused] {
            let pp = self.engine.prepare_binned(m, &binning, &plan, mode)?;
            let (st, err, ok, b2b) = self.measure(m, &pp, a, x, y_ref)?;
            let label = format!(
                "plan_u{}_{}({}b/{}l)",
                scheme,
                match mode {
                    LaunchMode::PerBin => "per_bin",
                    LaunchMode::Grouped => "grouped",
                    LaunchMode::Fused => "fused",
                },
                nbins,
                pp.launches().iter().map(|l| l.enqueues).sum::<usize>()
            );
            let l = Line {
                b2b,
                ..self.line(name, label, a, st, err, ok)
            };
            self.emit(l);
        }
        Ok(())
    }

    /// Benchmarks a matrix that was read or generated, or says on stderr why
    /// it could not be; false when it failed.
    fn bench_one(&mut self, name: &str, a: Result<Csr<f64>>) -> bool {
        let res = a.and_then(|a| self.bench_both(name, &a));
        if let Err(e) = &res {
            eprintln!("# {name}: error: {e:#}");
        }
        res.is_ok()
    }

    fn bench_both(&mut self, name: &str, a: &Csr<f64>) -> Result<()> {
        if self.args.precision.contains(sparse::Precision::F32) {
            self.bench_matrix::<f32>(name, a)?;
        }
        if self.args.precision.contains(sparse::Precision::F64) {
            if self.engine.info().fp64 {
                self.bench_matrix::<f64>(name, a)?;
            } else {
                eprintln!("# {name}: device has no f64, skipped");
            }
        }
        Ok(())
    }
}

/// Says on stderr which single kernel was fastest on the matrix, and how
/// csr_adaptive compares with it.
fn report_best_single<T: DeviceScalar>(name: &str, singles: &[(String, f64)]) {
    let Some(best) = singles.iter().min_by(|p, q| p.1.total_cmp(&q.1)) else {
        return;
    };
    let adaptive = singles
        .iter()
        .find(|(k, _)| k == "csr_adaptive")
        .map(|s| s.1);
    eprintln!(
        "# {name} {}: best single kernel {} ({:.4} ms){}",
        T::NAME,
        best.0,
        best.1,
        adaptive
            .map(|t| format!("; csr_adaptive {:.2}x its time", t / best.1))
            .unwrap_or_default()
    );
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let tail: String = s
            .chars()
            .rev()
            .take(n - 1)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        format!("~{tail}")
    }
}

pub(crate) fn matrix_name(p: &Path) -> String {
    let s = p
        .file_name()
        .map(|f| f.to_string_lossy().to_string())
        .unwrap_or_default();
    s.trim_end_matches(".gz")
        .trim_end_matches(".mtx")
        .to_string()
}

/// Runs `spmv bench`.
pub fn run(args: Args) -> Result<()> {
    let kernels: Vec<KernelId> = match &args.kernels {
        None => registry().into_iter().map(|k| k.id).collect(),
        Some(list) => list
            .split(',')
            .map(|s| s.parse::<KernelId>())
            .collect::<Result<_, _>>()?,
    };
    let plan_scheme = match args.plan_scheme.as_str() {
        "none" | "off" => None,
        s => Some(s.parse::<Scheme>()?),
    };
    let gens = args
        .gens
        .iter()
        .map(|g| parse_gen(g))
        .collect::<Result<Vec<_>>>()?;
    let mut files = collect_files(&args.paths)?;
    if let Some(n) = args.largest {
        files
            .sort_by_key(|f| std::cmp::Reverse(std::fs::metadata(f).map(|m| m.len()).unwrap_or(0)));
        files.truncate(n);
    }
    if files.is_empty() && gens.is_empty() {
        bail!("nothing to benchmark: give matrix files, folders or --gen FAMILY:NNZ");
    }
    let engine = Engine::with_config(&args.engine.config(args.device.as_deref()))?;
    let info = engine.info().clone();
    let bw = engine.copy_bandwidth(args.copy_mb << 20, 10)?;
    eprintln!(
        "# device: {} / {} ({} CUs, driver {}); copy bandwidth {:.2} GB/s ({} MiB buffers); cpu_parallel on {} threads",
        info.platform,
        info.name,
        info.compute_units,
        info.driver,
        bw.gbps,
        args.copy_mb,
        rayon_threads()
    );
    let mut ctx = Ctx {
        args: &args,
        engine: &engine,
        copy_gbps: bw.gbps,
        kernels,
        plan_scheme,
        wrote_header: false,
        csv: args
            .csv
            .then(|| csv::Writer::from_writer(std::io::stdout())),
        all: Vec::new(),
    };
    let mut failed = 0;
    let opts = ReadOptions {
        complex_real_part: true,
    };
    for f in &files {
        let a = read_path::<f64>(f, &opts).with_context(|| format!("reading {}", f.display()));
        failed += usize::from(!ctx.bench_one(&matrix_name(f), a));
    }
    for (fam, nnz) in gens {
        let a = fam.generate(nnz, 1).map_err(anyhow::Error::from);
        failed += usize::from(!ctx.bench_one(&format!("gen:{fam}:{nnz}"), a));
    }
    let wrong = ctx.all.iter().filter(|l| !l.ok).count();
    if wrong > 0 {
        bail!("{wrong} results differ from the reference");
    }
    if failed > 0 {
        bail!("{failed} matrices could not be benchmarked");
    }
    Ok(())
}

fn rayon_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}
