//! `spmv bench-overhead`: what the host pays before a first call's kernels run
//! (features, the model's prediction, which includes binning under the scheme
//! stage 1 picks) beside the device time of the plan it picks, in
//! SpMV-equivalents, per matrix and per family of matrices with at least
//! `--min-nnz` nonzeros (issue 12's target: at most 0.3 on every family).

use crate::bench::{collect_files, parse_count};
use crate::predict::{choose_selector, default_models_dir, identity};
use anyhow::{bail, Context, Result};
use engine::{Engine, LaunchMode, TimingPolicy};
use selector::{stage1_vector, Selector};
use sparse::gen::Family;
use sparse::mm::{read_path, ReadOptions};
use sparse::{BinSizes, Binning, Csr, Features, Precision, Scheme};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

/// Arguments of `spmv bench-overhead`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Matrix Market files or folders (default: the shared matrices folder,
    /// $SPMV_SHARED_DIR/matrices or ../shared/matrices); only those with at
    /// least --min-nnz nonzeros are measured.
    pub paths: Vec<PathBuf>,
    /// Generator families (comma-separated names, `corpus` for every corpus family, `none`).
    #[arg(long, default_value = "corpus")]
    pub families: String,
    /// Nonzero counts of the generated matrices (comma-separated, e.g. 1M,4M,16M).
    #[arg(long, default_value = "1M,4M,16M")]
    pub sizes: String,
    /// Smallest matrix measured (nonzeros).
    #[arg(long, default_value = "1M")]
    pub min_nnz: String,
    /// f32, f64 or both.
    #[arg(long, default_value = "both")]
    pub precision: sparse::Precisions,
    /// Host repetitions of each analysis step, interleaved; the median is kept.
    #[arg(long, default_value_t = 9)]
    pub reps: usize,
    /// Statistic of the repeated timings, host and device alike: `median` (as
    /// `trainer evaluate`) or `min` (the least disturbed run, steadier on a
    /// busy machine).
    #[arg(long, default_value = "median", value_parser = ["median", "min"])]
    pub stat: String,
    /// CSV output (one row per matrix and precision) instead of a table.
    #[arg(long)]
    pub csv: bool,
    /// Models folder (default: env SPMV_MODELS_DIR, else `models/` found from here).
    #[arg(long, env = "SPMV_MODELS_DIR")]
    pub models_dir: Option<PathBuf>,
    /// A model file to use for its precision instead of the folder's match for
    /// this device (repeatable, one per precision): for timing another
    /// device's model on this host, e.g. the GPU's models, whose plans this
    /// host's analysis cost is then measured for. The SpMV time is still
    /// this device's, so pair the host times with that device's own.
    #[arg(long = "model")]
    pub models: Vec<PathBuf>,
    /// OpenCL device (platform or device name substring); default the best device.
    #[arg(long, env = "SPMV_DEVICE")]
    pub device: Option<String>,
    #[command(flatten)]
    pub engine: crate::engine_args::EngineArgs,
}

/// One matrix in one precision.
#[derive(Debug, Clone, serde::Serialize)]
struct Row {
    matrix: String,
    family: String,
    precision: &'static str,
    rows: usize,
    nnz: usize,
    /// Stage 1's scheme (before a uniform plan collapses to the single bin).
    scheme: String,
    plan: String,
    features_ms: f64,
    /// The model's whole prediction (tree walks, binning, collapse).
    predict_ms: f64,
    /// Binning alone under stage 1's scheme, as the prediction bins (part
    /// of `predict_ms`): the bins' sizes, and their row lists only for a
    /// plan that keeps its bins.
    binning_ms: f64,
    spmv_ms: f64,
    /// (features + prediction) / SpMV.
    spmv_equivalents: f64,
}

/// Median (or with `min`, the least) wall time (ms) of each closure over
/// `reps` interleaved rounds.
fn interleaved<const N: usize>(reps: usize, min: bool, fs: &mut [&mut dyn FnMut(); N]) -> [f64; N] {
    let mut samples: [Vec<f64>; N] = std::array::from_fn(|_| Vec::new());
    for _ in 0..reps.max(1) {
        for (f, s) in fs.iter_mut().zip(samples.iter_mut()) {
            let t = Instant::now();
            f();
            s.push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    samples.map(|mut s| {
        s.sort_by(f64::total_cmp);
        if min {
            s[0]
        } else {
            s[s.len() / 2]
        }
    })
}

/// The host steps of one matrix under one selector: (scheme, features, predict, binning ms).
fn host_times(sel: &Selector, a: &Csr<f64>, reps: usize, min: bool) -> (Scheme, f64, f64, f64) {
    let f = Features::of(a);
    let scheme = match sel {
        Selector::Model(m) => m.predict_scheme(&stage1_vector(&f)),
        Selector::Rule => sel.plan(&f, a.rows()).plan.scheme,
    };
    let rp = a.row_ptr();
    let keeps_bins = sel.plan(&f, a.rows()).plan.scheme != Scheme::Single;
    let [feat, pred, bin] = interleaved(
        reps,
        min,
        &mut [
            &mut || {
                std::hint::black_box(Features::of(a));
            },
            &mut || {
                std::hint::black_box(sel.plan(&f, a.rows()));
            },
            &mut || {
                std::hint::black_box(BinSizes::new(rp, scheme));
                if keeps_bins {
                    std::hint::black_box(Binning::new(rp, scheme));
                }
            },
        ],
    );
    (scheme, feat, pred, bin)
}

/// Kernel time (ms, median or least under the labelling policy) of the selector's plan.
fn plan_ms(
    engine: &Engine,
    sel: &Selector,
    (a, p): (&Csr<f64>, Precision),
    min: bool,
) -> Result<(String, f64)> {
    let pred = sel.plan(&Features::of(a), a.rows());
    let dm = engine.upload_as(a, p)?;
    let pp = engine.prepare_binned_any(&dm, &pred.binning, &pred.plan, LaunchMode::default())?;
    let x: Vec<f64> = (0..a.ncols())
        .map(|i| 1.0 + (i % 7) as f64 * 0.125)
        .collect();
    let est = engine.time_any(&dm, &pp, &x, 1, 1)?.median_ms;
    let st = engine.measure_any(&dm, &pp, &x, &TimingPolicy::default(), est)?;
    let plan = pred
        .plan
        .kernels
        .iter()
        .map(|(b, k)| format!("{b}:{k}"))
        .collect::<Vec<_>>()
        .join(" ");
    let ms = if min { st.min_ms } else { st.median_ms };
    Ok((format!("{} [{plan}]", pred.plan.scheme), ms))
}

/// The matrices to measure: (name, family, generator or file).
enum Source {
    File(PathBuf),
    Gen(Family, usize),
}

fn sources(args: &Args) -> Result<Vec<(String, String, Source)>> {
    let mut out = Vec::new();
    let paths = if args.paths.is_empty() {
        vec![crate::bench_parse::default_dir()]
    } else {
        args.paths.clone()
    };
    for p in collect_files(&paths)? {
        let name = crate::bench::matrix_name(&p);
        let group = name.split("__").next().unwrap_or(&name).to_string();
        out.push((name, format!("file:{group}"), Source::File(p)));
    }
    let families: Vec<Family> = match args.families.as_str() {
        "none" | "" => Vec::new(),
        "corpus" => Family::CORPUS.to_vec(),
        list => list
            .split(',')
            .map(|s| s.trim().parse::<Family>())
            .collect::<Result<_, _>>()?,
    };
    for s in args.sizes.split(',').filter(|s| !s.trim().is_empty()) {
        let n = parse_count(s.trim())?;
        for &f in &families {
            let name = format!("gen:{}:{}", f.name(), s.trim());
            out.push((name, format!("gen:{}", f.name()), Source::Gen(f, n)));
        }
    }
    Ok(out)
}

fn load(src: &Source) -> Result<Csr<f64>> {
    match src {
        Source::File(p) => read_path::<f64>(
            p,
            &ReadOptions {
                complex_real_part: true,
            },
        )
        .with_context(|| format!("reading {}", p.display())),
        Source::Gen(f, n) => Ok(f.generate(*n, 42)?),
    }
}

/// Runs `spmv bench-overhead`.
pub fn run(args: Args) -> Result<()> {
    let min_nnz = parse_count(&args.min_nnz)?;
    let engine = Engine::with_config(&args.engine.config(args.device.as_deref()))?;
    let device = identity(engine.info());
    let dir = args.models_dir.clone().unwrap_or_else(default_models_dir);
    let mut forced = BTreeMap::new();
    for path in &args.models {
        let m = selector::Model::load(path)
            .with_context(|| format!("loading model {}", path.display()))?;
        if forced.insert(m.card.precision.clone(), path).is_some() {
            bail!("two --model files for {}", m.card.precision);
        }
    }
    let mut selectors = Vec::new();
    for p in args.precision.to_vec() {
        let model = forced.get(p.name()).map(|p| p.as_path());
        let (sel, note) = choose_selector(model, &dir, Some(&device), p.name())?;
        eprintln!("# {}: {note}", p.name());
        selectors.push((p, sel));
    }
    eprintln!(
        "# device {}; host steps with {} hardware threads, {} of {} interleaved rounds",
        device.name,
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        args.stat,
        args.reps
    );
    let mut rows = Vec::new();
    let mut out = Output::new(args.csv);
    for (name, family, src) in sources(&args)? {
        let a = load(&src)?;
        if a.nnz() < min_nnz {
            continue;
        }
        for (p, sel) in &selectors {
            let min = args.stat == "min";
            let (scheme, features_ms, predict_ms, binning_ms) = host_times(sel, &a, args.reps, min);
            let (plan, spmv_ms) = plan_ms(&engine, sel, (&a, *p), min)?;
            let row = Row {
                matrix: name.clone(),
                family: family.clone(),
                precision: p.name(),
                rows: a.nrows(),
                nnz: a.nnz(),
                scheme: scheme.to_string(),
                plan,
                features_ms,
                predict_ms,
                binning_ms,
                spmv_ms,
                spmv_equivalents: (features_ms + predict_ms) / spmv_ms,
            };
            out.row(&row)?;
            rows.push(row);
        }
    }
    if rows.is_empty() {
        bail!("no matrix with at least {min_nnz} nonzeros");
    }
    summary(&rows);
    Ok(())
}

/// Table or CSV rows as they are measured.
struct Output {
    csv: Option<csv::Writer<std::io::Stdout>>,
    header: bool,
}

impl Output {
    fn new(csv: bool) -> Output {
        Output {
            csv: csv.then(|| csv::Writer::from_writer(std::io::stdout())),
            header: false,
        }
    }

    fn row(&mut self, r: &Row) -> Result<()> {
        if let Some(w) = &mut self.csv {
            w.serialize(r)?;
            w.flush()?;
            return Ok(());
        }
        if !self.header {
            println!(
                "{:<28} {:>4} {:>9} {:>8} {:>8} {:>8} {:>8} {:>9} {:>7}  plan",
                "matrix", "prec", "nnz", "U", "feat_ms", "pred_ms", "bin_ms", "spmv_ms", "ratio"
            );
            self.header = true;
        }
        println!(
            "{:<28} {:>4} {:>9} {:>8} {:>8.3} {:>8.3} {:>8.3} {:>9.3} {:>7.3}  {}",
            r.matrix,
            r.precision,
            r.nnz,
            r.scheme,
            r.features_ms,
            r.predict_ms,
            r.binning_ms,
            r.spmv_ms,
            r.spmv_equivalents,
            r.plan
        );
        Ok(())
    }
}

/// Per family: the worst and median ratio, and the shares of the host time.
fn summary(rows: &[Row]) {
    let mut fams: BTreeMap<&str, Vec<&Row>> = BTreeMap::new();
    for r in rows {
        fams.entry(&r.family).or_default().push(r);
    }
    eprintln!(
        "\n# per family (ratio = (features + prediction) / SpMV of the plan)\n{:<22} {:>3} {:>8} {:>8} {:>7} {:>7} {:>7}",
        "family", "n", "worst", "median", "feat%", "bin%", "walk%"
    );
    let mut worst: Option<(&str, f64)> = None;
    for (fam, rs) in &fams {
        let mut ratios: Vec<f64> = rs.iter().map(|r| r.spmv_equivalents).collect();
        ratios.sort_by(f64::total_cmp);
        let w = *ratios.last().expect("a family has rows");
        let host: f64 = rs.iter().map(|r| r.features_ms + r.predict_ms).sum();
        let feat: f64 = rs.iter().map(|r| r.features_ms).sum();
        let bin: f64 = rs.iter().map(|r| r.binning_ms).sum();
        let pct = |x: f64| 100.0 * x / host;
        eprintln!(
            "{:<22} {:>3} {:>8.3} {:>8.3} {:>6.1}% {:>6.1}% {:>6.1}%",
            fam,
            rs.len(),
            w,
            ratios[ratios.len() / 2],
            pct(feat),
            pct(bin),
            pct(host - feat - bin)
        );
        if worst.is_none_or(|(_, x)| w > x) {
            worst = Some((fam, w));
        }
    }
    if let Some((fam, w)) = worst {
        eprintln!("# worst family: {fam} at {w:.3} SpMV-equivalents (target <= 0.3)");
    }
}
