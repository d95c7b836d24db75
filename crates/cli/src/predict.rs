//! `spmv predict FILE`: the features, the plan the selector makes (scheme, and a
//! kernel per non-empty bin with its rows and nonzeros) and why (the decision
//! path of each tree). Also the shared model lookup used by `spmv run`.

use anyhow::{Context, Result};
use selector::{DeviceIdentity, KernelSources, Model, Selector, Target};
use sparse::mm::{read_path, ReadOptions};
use sparse::Features;
use std::path::{Path, PathBuf};

/// Arguments of `spmv predict`.
#[derive(clap::Args)]
pub struct Args {
    /// Matrix Market file (.mtx or .mtx.gz).
    file: PathBuf,
    /// Model file; default: the model in the models folder that matches the device and precision.
    #[arg(long)]
    model: Option<PathBuf>,
    /// Models folder searched when --model is not given (default: env SPMV_MODELS_DIR, else
    /// `models/` found from the working directory or the executable).
    #[arg(long, alias = "models", env = "SPMV_MODELS_DIR")]
    models_dir: Option<PathBuf>,
    /// Precision the plan is for: f32 or f64.
    #[arg(long, default_value = "f64")]
    precision: sparse::Precision,
    /// OpenCL device whose model is wanted (default env SPMV_DEVICE, else the best device found).
    #[arg(long, env = "SPMV_DEVICE")]
    device: Option<String>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Accept complex matrices by keeping their real part.
    #[arg(long)]
    real_part: bool,
    /// Plan for this many expected calls as the service does (`/predict`
    /// plans for an upload's 1000 by default): the least analysis cost plus
    /// calls x predicted time among the trees' plan and each kernel alone,
    /// with the device's copy bandwidth and launch cost measured first.
    /// Without it: the two-stage trees' own plan.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    calls: Option<u64>,
}

/// The default models folder: env `SPMV_MODELS_DIR`, else `models` found from the
/// working directory or the executable (see [`selector::resolve_models_dir`]).
pub fn default_models_dir() -> PathBuf {
    if let Ok(d) = std::env::var("SPMV_MODELS_DIR") {
        return PathBuf::from(d);
    }
    selector::ModelsDir::search(Path::new("models")).path
}

/// What a device is, for model matching (from the engine's description).
pub fn identity(info: &engine::DeviceInfo) -> DeviceIdentity {
    DeviceIdentity::new(&info.name, &info.vendor, &info.driver, &info.kind)
}

/// The selector for a device and precision: `model` when given (it must load),
/// else the closest usable model of `dir` (see [`Selector::choose`]), else the
/// rule baseline. Also returns a sentence saying what was chosen and why.
pub fn choose_selector(
    model: Option<&Path>,
    dir: &Path,
    device: Option<&DeviceIdentity>,
    precision: &str,
) -> Result<(Selector, String)> {
    if let Some(p) = model {
        let m = Model::load(p).with_context(|| format!("loading model {}", p.display()))?;
        let note = format!(
            "model {} (trained on '{}', {})",
            p.display(),
            m.card.device,
            m.card.precision
        );
        return Ok((Selector::Model(m), note));
    }
    let mut models = Vec::new();
    if dir.is_dir() {
        for (path, r) in selector::load_models_dir(dir)? {
            match r {
                Ok(m) => models.push(m),
                Err(e) => eprintln!("note: skipping model {}: {e}", path.display()),
            }
        }
    }
    let Some(device) = device else {
        return Ok((
            Selector::Rule,
            "rule baseline: no OpenCL device to match models against".into(),
        ));
    };
    let kernels = KernelSources::of(engine::kernels::SOURCES);
    let c = Selector::choose(
        &models,
        &Target {
            device,
            precision,
            kernels: &kernels,
        },
    );
    let note = match &c.selector {
        Selector::Model(m) => format!(
            "model {} for '{}' {}, match {}: {}",
            m.id(),
            m.card.device,
            m.card.precision,
            c.level.as_str(),
            c.reason
        ),
        Selector::Rule => c.reason.clone(),
    };
    Ok((c.selector, note))
}

/// Runs `spmv predict`.
pub fn run(args: Args) -> Result<()> {
    let a = read_path::<f64>(
        &args.file,
        &ReadOptions {
            complex_real_part: args.real_part,
        },
    )
    .with_context(|| format!("reading {}", args.file.display()))?;
    let engine = match engine::Engine::new(args.device.as_deref()) {
        Ok(e) => Some(e),
        Err(e) => {
            eprintln!("note: no OpenCL device ({e}); models are matched against no device");
            None
        }
    };
    let device = engine.as_ref().map(|e| identity(e.info()));
    let dir = args.models_dir.clone().unwrap_or_else(default_models_dir);
    let (sel, note) = choose_selector(
        args.model.as_deref(),
        &dir,
        device.as_ref(),
        args.precision.name(),
    )?;
    let device = device.map(|d| d.name).unwrap_or_default();
    // The device's figures are measured before the timed steps.
    let ctx = args
        .calls
        .map(|_| amortise_context(engine.as_ref(), args.precision));
    let out = predict(&sel, &a, args.calls.zip(ctx.as_ref()));
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&out.json(&args, &a, &sel, (&note, &device)))?
        );
    } else {
        println!(
            "{}: {} x {}, {} nonzeros",
            args.file.display(),
            a.nrows(),
            a.ncols(),
            a.nnz()
        );
        println!("selector: {note}");
        out.print();
    }
    Ok(())
}

/// What `spmv predict` found for one matrix.
struct Outcome {
    features: Features,
    pred: selector::Prediction,
    /// The amortised planning, with `--calls`.
    planning: Option<selector::Planning>,
    predicted: Option<selector::TimePrediction>,
    /// Features, then prediction and binning, in ms.
    timings_ms: (f64, f64),
}

/// Features, the plan (amortised over `calls` when given) and its predicted
/// time, with the first two steps timed.
fn predict(
    sel: &Selector,
    a: &sparse::Csr<f64>,
    calls: Option<(u64, &selector::AmortiseContext)>,
) -> Outcome {
    let t0 = std::time::Instant::now();
    let features = Features::of(a);
    let t1 = std::time::Instant::now();
    let (pred, planning) = match calls {
        Some((calls, ctx)) => {
            let am = sel.plan_for_calls(&features, a.rows(), calls, ctx, true);
            (am.prediction, Some(am.planning))
        }
        None => (sel.plan_explained(&features, a.rows()), None),
    };
    let t2 = std::time::Instant::now();
    let predicted = predicted_time(sel, &features, &pred);
    let timings_ms = ((t1 - t0).as_secs_f64() * 1e3, (t2 - t1).as_secs_f64() * 1e3);
    Outcome {
        features,
        pred,
        planning,
        predicted,
        timings_ms,
    }
}

impl Outcome {
    /// The `--json` document.
    fn json(
        &self,
        args: &Args,
        a: &sparse::Csr<f64>,
        sel: &Selector,
        (note, device): (&str, &str),
    ) -> serde_json::Value {
        let pred = &self.pred;
        let bins: Vec<serde_json::Value> = pred
            .plan
            .kernels
            .iter()
            .map(|(b, k)| {
                serde_json::json!({"bin": b, "rows": pred.binning.row_count(*b), "nnz": pred.binning.bin_nnz[*b], "kernel": k})
            })
            .collect();
        serde_json::json!({
            "file": args.file.display().to_string(),
            "rows": a.nrows(), "cols": a.ncols(), "nnz": a.nnz(),
            "features": self.features.to_map(),
            "selector": sel.info(),
            "selector_note": note,
            "device": device,
            "precision": args.precision,
            "plan": {"scheme": pred.plan.scheme, "bins": bins},
            "explanation": pred.explanation,
            "planning": self.planning,
            "predicted_ms": self.predicted,
            "timings_ms": {"features": self.timings_ms.0, "predict_and_bin": self.timings_ms.1},
        })
    }

    /// The text form.
    fn print(&self) {
        print_prediction(&self.features, &self.pred);
        if let Some(p) = &self.planning {
            println!(
                "planned for {} calls: {} ({}): {}",
                p.expected_calls, p.chosen, p.method, p.reason
            );
        }
        print_predicted(self.predicted.as_ref());
        println!(
            "time: features {:.3} ms, prediction + binning {:.3} ms",
            self.timings_ms.0, self.timings_ms.1
        );
    }
}

/// The features, the plan with its bins and, when there is one, why it was chosen.
fn print_prediction(features: &Features, pred: &selector::Prediction) {
    println!("features:");
    for (n, v) in features.named() {
        println!("  {n:<24} {v}");
    }
    println!("plan: scheme {}", pred.plan.scheme);
    println!("  {:>4} {:>10} {:>12}  kernel", "bin", "rows", "nnz");
    for (b, k) in &pred.plan.kernels {
        println!(
            "  {:>4} {:>10} {:>12}  {k}",
            b,
            pred.binning.row_count(*b),
            pred.binning.bin_nnz[*b]
        );
    }
    if let Some(ex) = &pred.explanation {
        println!("why ({}):", ex.selector);
        println!("  stage 1 -> scheme {}", ex.stage1.scheme);
        if let Some(c) = ex.collapsed_from {
            println!("  (every bin of scheme {c} chose the same kernel: run on the whole matrix)");
        }
        print_path(&ex.stage1.path);
        for d in &ex.stage2 {
            println!(
                "  stage 2, bin {} ({} rows, {} nnz) -> {}",
                d.bin, d.rows, d.nnz, d.kernel
            );
            print_path(&d.path);
        }
    }
}

/// What planning for a number of calls weighs, as the service has it: the
/// host's analysis costs, and the device's copy bandwidth and launch cost
/// measured now (none without a device: the planner's fallbacks then apply).
fn amortise_context(
    engine: Option<&engine::Engine>,
    p: sparse::Precision,
) -> selector::AmortiseContext {
    let fig = engine.map(engine::Engine::planning_figures);
    selector::AmortiseContext {
        costs: selector::AnalysisCosts::calibrate()
            .with_device_launch(fig.as_ref().and_then(engine::PlanningFigures::launch)),
        copy_gbps: fig.as_ref().and_then(engine::PlanningFigures::copy_gbps),
        value_bytes: p.bytes(),
    }
}

/// The performance model's predicted times of the plan and the best single
/// kernel, when the selector is a model that has one.
fn predicted_time(
    sel: &Selector,
    f: &Features,
    pred: &selector::Prediction,
) -> Option<selector::TimePrediction> {
    match sel {
        Selector::Model(m) => m.predict_time(f, &pred.plan, &pred.binning),
        Selector::Rule => None,
    }
}

fn print_predicted(t: Option<&selector::TimePrediction>) {
    let Some(t) = t else {
        println!("predicted time: none (the selector has no performance model)");
        return;
    };
    let band = |e: &selector::Estimate| match (e.low_ms, e.high_ms) {
        (Some(l), Some(h)) => format!(" ({l:.4}-{h:.4})"),
        _ => String::new(),
    };
    println!(
        "predicted time: plan {:.4} ms{}, best single kernel {} {:.4} ms{}",
        t.plan.ms,
        band(&t.plan),
        t.best_single_kernel,
        t.best_single.ms,
        band(&t.best_single)
    );
    println!("  band: {}", t.band);
}

/// Prints a decision path, one test per line.
fn print_path(path: &[selector::Step]) {
    for s in path {
        let op = if matches!(s.went, selector::Went::Left) {
            "<"
        } else {
            ">="
        };
        println!("    {} = {:.6} {op} {:.6}", s.feature, s.value, s.threshold);
    }
}
