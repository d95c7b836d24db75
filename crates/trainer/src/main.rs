//! `trainer`: corpus -> label -> fit -> evaluate (the default), or one stage at a time.

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use selector::RuleClass;
use std::path::PathBuf;
use store::Precision;
use trainer::corpus::{self, CorpusOptions, Manifest};
use trainer::finish::{self, Evaluator, Finish};
use trainer::label::LabelOptions;
use trainer::peers::CusparseTable;
use trainer::pipeline::{self, Env, Labelled};

#[derive(Parser)]
#[command(
    name = "trainer",
    version,
    about = "Label a corpus on the device, fit the two-stage trees, evaluate held-out matrices"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    common: Common,
}

#[derive(Args, Clone)]
struct Common {
    /// Corpus manifest (default: training-data/manifest.json).
    #[arg(long, global = true)]
    manifest: Option<PathBuf>,
    /// Folder of real matrices (.mtx / .mtx.gz), instead of the manifest's.
    #[arg(long, global = true)]
    matrices: Option<PathBuf>,
    /// Number of stand-ins (overrides the manifest).
    #[arg(long, global = true)]
    standins: Option<usize>,
    /// Nonzero budget of stand-ins (overrides the manifest).
    #[arg(long, global = true)]
    standin_budget: Option<usize>,
    /// Generator sizes in nonzeros, comma separated (overrides the manifest; "" for none).
    #[arg(long, global = true)]
    generators: Option<String>,
    /// Only the first N corpus items (quick runs).
    #[arg(long, global = true)]
    limit: Option<usize>,
    /// f32, f64 or both.
    #[arg(long, global = true, default_value = "both")]
    precision: String,
    /// OpenCL device (substring of "platform / device"); default: env SPMV_DEVICE, else the best found.
    #[arg(long, global = true, env = "SPMV_DEVICE")]
    device: Option<String>,
    /// Results database: postgres://USER@HOST/DB (shared by several workers), a
    /// path or a sqlite:// URL (default: spmv.db in the working directory).
    #[arg(
        long = "database-url",
        alias = "database",
        global = true,
        env = "DATABASE_URL"
    )]
    database: Option<String>,
    /// Stop labelling after this many minutes (what is measured is kept; run again to resume).
    #[arg(long, global = true)]
    budget_minutes: Option<f64>,
    /// Where models are written (default: models/ of the repository).
    #[arg(long, alias = "models", global = true, env = "SPMV_MODELS_DIR")]
    models_dir: Option<PathBuf>,
    /// Where the evaluation CSV, report and plots are written.
    #[arg(long, global = true)]
    out: Option<PathBuf>,
    /// Seed of the split and of every random choice (overrides the manifest).
    #[arg(long, global = true)]
    seed: Option<u64>,
    /// Fewest timed repetitions per measurement.
    #[arg(long, global = true, default_value_t = 3)]
    min_reps: usize,
    /// Most timed repetitions of a measurement's first batch.
    #[arg(long, global = true, default_value_t = 25)]
    max_reps: usize,
    /// Time more repetitions until the median's 95% confidence interval is
    /// within this fraction of it (0 = first batch only, the old fixed count).
    #[arg(long, global = true, env = "SPMV_CI_TARGET", default_value_t = engine::TimingPolicy::default().ci_target)]
    ci_target: f64,
    /// Most repetitions of one measurement, adaptive batches included.
    #[arg(long, global = true, env = "SPMV_CI_MAX_REPS", default_value_t = engine::TimingPolicy::default().ci_max_reps)]
    ci_max_reps: usize,
    /// Most wall time (ms) the adaptive batches of one measurement may take.
    #[arg(long, global = true, env = "SPMV_CI_BUDGET_MS", default_value_t = engine::TimingPolicy::default().ci_budget_ms)]
    ci_budget_ms: f64,
    /// Adaptive batches of a matrix may take at most this share of the time
    /// its first batches took (plus one --ci-budget-ms): 0.5 keeps labelling
    /// within about 1.5x the time of fixed repetitions.
    #[arg(long, global = true, env = "SPMV_CI_EXTRA_SHARE", default_value_t = LabelOptions::default().ci_extra_share)]
    ci_extra_share: f64,
    /// A training run left `running` with no heartbeat for this many minutes is
    /// marked interrupted when labelling starts (one whose process is gone on
    /// this host is marked at once).
    #[arg(long, global = true, default_value_t = 30.0)]
    stale_run_minutes: f64,
    /// Also learn from served work: the matrices of the request log whose copies
    /// the server kept in DIR (`server --keep-matrices DIR`).
    #[arg(long, global = true, value_name = "DIR")]
    include_requests: Option<PathBuf>,
    /// cuSPARSE figures to set beside ours in the report (the CSV of `bench/cusparse_bench.py`).
    #[arg(long, global = true, value_name = "CSV")]
    cusparse: Option<PathBuf>,
    /// Boosting rounds of the performance model (trees on log plan time).
    #[arg(long, global = true, default_value_t = selector::PerfParams::default().rounds)]
    perf_rounds: usize,
    /// Depth of each tree of the performance model.
    #[arg(long, global = true, default_value_t = selector::PerfParams::default().max_depth)]
    perf_depth: usize,
    /// Shrinkage of each tree of the performance model.
    #[arg(long, global = true, default_value_t = selector::PerfParams::default().rate)]
    perf_rate: f64,
    /// Mark the performance model as predicting only: /predict reports its
    /// times and the service calibrates them, but the planner chooses plans
    /// as without it (for a device where planning by it was measured worse).
    #[arg(long, global = true)]
    perf_predict_only: bool,
    /// Device class of the rule baseline (`gpu` or `cpu`); default: the device's kind
    /// (with `fit --from-db`: guessed from the stored name and vendor).
    #[arg(long, global = true)]
    device_class: Option<String>,
}

#[derive(Subcommand)]
enum Command {
    /// Corpus -> label -> fit -> evaluate (the default).
    Run,
    /// Print the corpus and its composition.
    Corpus,
    /// Time every scheme, bin and kernel of the corpus into the database.
    Label,
    /// Fit and evaluate both models from a results database, with no device: the
    /// held-out matrices are evaluated from the stored measurements.
    Fit {
        #[command(flatten)]
        db: FromDb,
        /// Keep the trees and card of this device's models in DIR and refit only
        /// their performance model (the card's metrics record it under
        /// `perf_refit`); the new files go to --models-dir as usual.
        #[arg(long, value_name = "DIR")]
        refit_perf_of: Option<PathBuf>,
    },
    /// Judge extra features (issue 12 item 4) from a results database, with no
    /// device: for each split seed, the same fit on the shipped features and on
    /// them plus the extras, held-out geomean and worst oracle ratio of each
    /// (`--out`: `study_<precision>.json` and the first seed's candidate models).
    FeatureStudy {
        #[command(flatten)]
        db: FromDb,
        /// Split seeds (the manifest's split is seed 42).
        #[arg(long, value_delimiter = ',', default_value = "42,1,2,3,4")]
        seeds: Vec<u64>,
        /// Extra features to append (default: every one of sparse::extra_features).
        #[arg(long, value_delimiter = ',')]
        extra: Vec<String>,
        /// Search the trainer's whole parameter grid on a validation quarter
        /// for each arm (default: the default parameters only).
        #[arg(long)]
        full_search: bool,
    },
    /// Add (or refit) only the quick part of an existing model file (one
    /// kernel from the matrix's sizes, for first calls whose features would
    /// not pay) from a results database's single-kernel whole-matrix timings;
    /// stages 1 and 2, the performance part and the card's hashes stay as
    /// they are, the card's metrics record what was added.
    FitQuick(FitQuickArgs),
    /// Put the corpus (same flags as `label`) into the labelling queue of the
    /// database, for `trainer worker` processes to claim.
    Enqueue {
        #[command(flatten)]
        queue: QueueArgs,
    },
    /// Claim matrices from the labelling queue and label them, until the queue
    /// is empty. Run one per device, on as many machines as share the database.
    Worker {
        #[command(flatten)]
        queue: QueueArgs,
        /// Enqueue the corpus first (harmless when it is already there).
        #[arg(long)]
        enqueue: bool,
        /// A claim not renewed for this many seconds lapses, and another worker
        /// takes the matrix over (renewed every quarter of it).
        #[arg(long, env = "SPMV_WORKER_LEASE_SECONDS", default_value_t = 60.0)]
        lease_seconds: f64,
        /// A matrix is claimed at most this many times (a matrix that keeps
        /// killing its workers is then left alone).
        #[arg(long, default_value_t = 3)]
        max_attempts: u32,
        /// Seconds between looks at the queue while other workers hold every
        /// open matrix.
        #[arg(long, default_value_t = 2.0)]
        poll_seconds: f64,
    },
    /// Evaluate a model on the matrices of a folder (labelling them first when needed).
    Evaluate {
        /// The model file.
        #[arg(long)]
        model: PathBuf,
        /// Also evaluate the matrices the model was trained on (its card's
        /// `trained_on`); by default they are left out, so the figures are
        /// held-out ones.
        #[arg(long)]
        include_trained: bool,
    },
}

/// The labelling queue a command works on.
#[derive(Args, Clone)]
struct QueueArgs {
    /// The queue's name (several queues can share a database, e.g. one per device kind).
    #[arg(long, env = "SPMV_QUEUE", default_value = "default")]
    queue: String,
}

impl Common {
    /// Adds the served matrices to the corpus when `--include-requests` is given.
    async fn add_requests(&self, env: &Env, items: &mut Vec<corpus::Item>) -> Result<()> {
        if let Some(dir) = &self.include_requests {
            let (extra, missing) = corpus::request_items(&env.store, dir).await?;
            eprintln!(
                "trainer: {} served matrices from {} added ({missing} logged matrices have no kept copy)",
                extra.len(),
                dir.display()
            );
            items.extend(extra);
        }
        Ok(())
    }

    fn precisions(&self) -> Result<Vec<Precision>> {
        Ok(match self.precision.as_str() {
            "both" => vec![Precision::F32, Precision::F64],
            p => vec![p.parse().context("--precision")?],
        })
    }

    fn corpus(&self) -> Result<(Manifest, Vec<corpus::Item>)> {
        let mpath = self.manifest.clone().unwrap_or_else(Manifest::default_path);
        let m = Manifest::load(&mpath)?;
        let mut opts = CorpusOptions::from_manifest(&m, &mpath, self.matrices.clone());
        if let Some(n) = self.standins {
            opts.standins = n;
        }
        if let Some(b) = self.standin_budget {
            opts.standin_nnz_budget = b;
        }
        if let Some(g) = &self.generators {
            opts.generator_nnz = g
                .split(',')
                .filter(|s| !s.trim().is_empty())
                .map(|s| s.trim().parse::<usize>().context("--generators"))
                .collect::<Result<_>>()?;
        }
        if let Some(s) = self.seed {
            opts.seed = s;
        }
        let mut items = corpus::build(&opts)?;
        if let Some(n) = self.limit {
            items.truncate(n);
        }
        Ok((m, items))
    }

    fn label_options(&self) -> LabelOptions {
        LabelOptions {
            policy: engine::TimingPolicy {
                min_reps: self.min_reps,
                max_reps: self.max_reps.max(self.min_reps),
                ci_target: self.ci_target.max(0.0),
                ci_max_reps: self.ci_max_reps,
                ci_budget_ms: self.ci_budget_ms.max(0.0),
                ..engine::TimingPolicy::default()
            },
            ci_extra_share: self.ci_extra_share.max(0.0),
            stale_after: std::time::Duration::try_from_secs_f64(
                self.stale_run_minutes.max(0.0) * 60.0,
            )
            .unwrap_or(std::time::Duration::MAX),
            ..LabelOptions::default()
        }
    }

    /// The end of a run for `device`: corpus, split, destinations and peers.
    #[allow(clippy::too_many_arguments)]
    fn finish<'a>(
        &self,
        manifest: &Manifest,
        items: &'a [corpus::Item],
        identity: selector::DeviceIdentity,
        class: RuleClass,
        copy_gbps: Option<f64>,
        card_extra: serde_json::Value,
        default_out: PathBuf,
    ) -> Result<Finish<'a>> {
        let seed = self.seed.unwrap_or(manifest.seed);
        let cusparse = match &self.cusparse {
            Some(p) if p.is_file() => Some(CusparseTable::load(p)?),
            Some(p) => {
                eprintln!(
                    "trainer: no cuSPARSE figures at {}: that column stays empty",
                    p.display()
                );
                None
            }
            None => None,
        };
        Ok(Finish {
            items,
            sides: pipeline::split_items(items, seed),
            corpus: format!(
                "{} ({} matrices: {}; split 75/25 by matrix, stratified by kind and size, seed {seed})",
                manifest.description,
                items.len(),
                composition(items)
            ),
            seed,
            device: identity.name.clone(),
            identity,
            class,
            copy_gbps,
            cusparse,
            models_dir: self
                .models_dir
                .clone()
                .unwrap_or_else(|| corpus::repo_root().join("models")),
            out: self.out.clone().unwrap_or(default_out),
            card_extra,
            perf: selector::PerfParams {
                rounds: self.perf_rounds,
                max_depth: self.perf_depth,
                rate: self.perf_rate,
                ..selector::PerfParams::default()
            },
            refit_perf: None,
            perf_predict_only: self.perf_predict_only,
        })
    }

    fn budget(&self) -> Option<std::time::Duration> {
        self.budget_minutes
            .map(|m| std::time::Duration::from_secs_f64((m * 60.0).max(0.0)))
    }
}

fn composition(items: &[corpus::Item]) -> serde_json::Value {
    let mut by: std::collections::BTreeMap<String, usize> = Default::default();
    for it in items {
        *by.entry(it.source.split(':').next().unwrap_or("").to_string())
            .or_default() += 1;
    }
    serde_json::json!(by)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    let c = cli.common.clone();
    match cli.command.unwrap_or(Command::Run) {
        Command::Corpus => {
            let (m, items) = c.corpus()?;
            println!("corpus: {}", m.description);
            for it in &items {
                println!("{:<60} {:<40} {}", it.name, it.source, it.kind);
            }
            println!("{} matrices: {}", items.len(), composition(&items));
            Ok(())
        }
        Command::Label => {
            let (_, mut items) = c.corpus()?;
            let env = Env::open(c.device.as_deref(), c.database.as_deref()).await?;
            c.add_requests(&env, &mut items).await?;
            let lc = pipeline::label_corpus(
                &env,
                &items,
                &c.precisions()?,
                &c.label_options(),
                c.budget(),
                serde_json::json!({"matrices": items.len()}),
            )
            .await?;
            report_labelling(&lc, &items);
            Ok(())
        }
        Command::Enqueue { queue } => {
            let (_, items) = c.corpus()?;
            let store = store::Store::connect(c.database.as_deref())
                .await
                .context("opening the results database")?;
            let added = trainer::worker::enqueue(&store, &queue.queue, &items).await?;
            println!(
                "queue '{}': {added} of {} corpus matrices added",
                queue.queue,
                items.len()
            );
            Ok(())
        }
        Command::Worker {
            queue,
            enqueue,
            lease_seconds,
            max_attempts,
            poll_seconds,
        } => {
            let secs = |s: f64, what: &str| {
                std::time::Duration::try_from_secs_f64(s)
                    .ok()
                    .filter(|d| !d.is_zero())
                    .with_context(|| format!("{what} must be a positive number of seconds"))
            };
            let opts = trainer::worker::WorkerOptions {
                queue: queue.queue,
                lease: secs(lease_seconds, "--lease-seconds")?,
                max_attempts,
                poll: secs(poll_seconds, "--poll-seconds")?,
                precisions: c.precisions()?,
                label: c.label_options(),
            };
            work(&c, &opts, enqueue).await
        }
        Command::Run => run(&c).await,
        Command::Fit { db, refit_perf_of } => fit_command(&c, &db, refit_perf_of).await,
        Command::FitQuick(args) => fit_quick(&args).await,
        Command::FeatureStudy {
            db,
            seeds,
            extra,
            full_search,
        } => feature_study(&c, &db, &seeds, &extra, full_search).await,
        Command::Evaluate {
            model,
            include_trained,
        } => evaluate(&c, &model, include_trained).await,
    }
}

/// `trainer fit --from-db`: both models from a results database, or with
/// `--refit-perf-of DIR` only the performance part of the models in DIR.
async fn fit_command(c: &Common, db: &FromDb, refit_perf_of: Option<PathBuf>) -> Result<()> {
    let refit = refit_perf_of.map(|dir| trainer::finish::PerfRefit {
        models_dir: dir,
        record: serde_json::json!({
            "database": db.from_db,
            "command": std::env::args().collect::<Vec<_>>().join(" "),
        }),
    });
    fit_from_db(
        c,
        &db.from_db,
        db.device_name.as_deref(),
        db.context.as_deref(),
        refit,
    )
    .await
}

/// `trainer worker`: the corpus, the device, then claims until the queue is empty.
async fn work(c: &Common, opts: &trainer::worker::WorkerOptions, enqueue: bool) -> Result<()> {
    let (_, items) = c.corpus()?;
    let env = Env::open(c.device.as_deref(), c.database.as_deref()).await?;
    if enqueue {
        trainer::worker::enqueue(&env.store, &opts.queue, &items).await?;
    }
    let r = trainer::worker::run_worker(&env, &items, opts).await?;
    println!(
        "worker {}: {} labelled, {} failed, {} taken over by other workers",
        r.worker,
        r.labelled.len(),
        r.failed.len(),
        r.lost.len()
    );
    for (n, e) in &r.failed {
        println!("  failed: {n}: {e}");
    }
    Ok(())
}

fn report_labelling(lc: &pipeline::LabelledCorpus, items: &[corpus::Item]) {
    println!(
        "labelled {} matrices in f32 and {} in f64 in {:.0} s{}; {} failed",
        lc.f32.len(),
        lc.f64.len(),
        lc.seconds,
        if lc.interrupted {
            " (time budget reached: run again to resume)"
        } else {
            ""
        },
        lc.failed.len()
    );
    for (n, e) in &lc.failed {
        println!("  failed: {n}: {e}");
    }
    println!("corpus composition: {}", composition(items));
    for (tag, l) in [("f32", &lc.f32), ("f64", &lc.f64)] {
        if !l.is_empty() {
            println!(
                "label distribution {tag}: {}",
                pipeline::label_distribution(l)
            );
        }
    }
}

async fn run(c: &Common) -> Result<()> {
    let (manifest, mut items) = c.corpus()?;
    let env = Env::open(c.device.as_deref(), c.database.as_deref()).await?;
    c.add_requests(&env, &mut items).await?;
    let items = items;
    let opts = c.label_options();
    let lc = pipeline::label_corpus(
        &env,
        &items,
        &c.precisions()?,
        &opts,
        c.budget(),
        serde_json::json!({"matrices": items.len(), "composition": composition(&items)}),
    )
    .await?;
    report_labelling(&lc, &items);
    let info = env.engine.info().clone();
    let copy_gbps = env
        .store
        .device(env.device)
        .await?
        .and_then(|d| d.record.copy_bandwidth_gbps);
    let fin = c.finish(
        &manifest,
        &items,
        identity(&info),
        RuleClass::from_kind(&info.kind),
        copy_gbps,
        serde_json::json!({"labelling_seconds": lc.seconds}),
        pipeline::default_report_dir(),
    )?;
    let ev = Evaluator::Device(&env, opts);
    let mut last = serde_json::Value::Null;
    for (precision, labelled) in [(Precision::F32, &lc.f32), (Precision::F64, &lc.f64)] {
        if labelled.is_empty() {
            continue;
        }
        let f = fin.precision(&ev, &env.store, precision, labelled).await?;
        last = summary_json(&f.real, &f.all, precision.as_str());
    }
    println!("{last}");
    Ok(())
}

/// `trainer fit --from-db`: models and report from a results database alone.
async fn fit_from_db(
    c: &Common,
    db: &str,
    device_name: Option<&str>,
    context: Option<&str>,
    refit: Option<trainer::finish::PerfRefit>,
) -> Result<()> {
    let store = store::Store::connect(Some(db))
        .await
        .with_context(|| format!("opening the results database {db}"))?;
    let dev = pick_device(&store, db, device_name).await?;
    let (manifest, items) = c.corpus()?;
    let rec = &dev.record;
    let class = match c.device_class.as_deref() {
        Some(k) => RuleClass::from_kind(k),
        None => RuleClass::guess(&rec.name, &rec.vendor),
    };
    eprintln!(
        "trainer fit: device '{}' ({:?}, copy bandwidth {}) from {db}; no device is used: held-out matrices are evaluated from stored measurements",
        rec.name,
        class,
        rec.copy_bandwidth_gbps.map_or("unknown".into(), |b| format!("{b:.1} GB/s"))
    );
    let kind = match class {
        RuleClass::Gpu => "gpu",
        RuleClass::Cpu => "cpu",
    };
    let mut fin = c.finish(
        &manifest,
        &items,
        selector::DeviceIdentity::new(&rec.name, &rec.vendor, &rec.driver, kind),
        class,
        rec.copy_bandwidth_gbps,
        serde_json::json!({"fitted_from_database": true}),
        pipeline::device_report_dir(&rec.name),
    )?;
    fin.refit_perf = refit;
    let mut written = 0;
    for precision in c.precisions()? {
        let Some(ctx) = pick_context(&store, dev.id, precision, context).await? else {
            println!("{precision}: no measurements of this device in the database");
            continue;
        };
        let ev = Evaluator::Stored(&store, dev.id, ctx);
        let (labelled, partial) =
            finish::labelled_from_store(&store, dev.id, ctx, &items, precision).await?;
        println!(
            "{precision}: {} matrices fully labelled in the database, {} incomplete or absent on this device",
            labelled.len(),
            partial.len()
        );
        if labelled.is_empty() {
            continue;
        }
        let f = fin.precision(&ev, &store, precision, &labelled).await?;
        println!("{}", summary_json(&f.real, &f.all, precision.as_str()));
        written += 1;
    }
    if written == 0 {
        bail!(
            "no fully labelled matrix of this corpus for '{}' in {db}",
            rec.name
        );
    }
    Ok(())
}

/// `trainer feature-study`: each precision's labelled matrices from the
/// database, then `trainer::feature_study::run`.
async fn feature_study(
    c: &Common,
    db: &FromDb,
    seeds: &[u64],
    extra: &[String],
    full: bool,
) -> Result<()> {
    let store = store::Store::connect(Some(&db.from_db))
        .await
        .with_context(|| format!("opening the results database {}", db.from_db))?;
    let dev = pick_device(&store, &db.from_db, db.device_name.as_deref()).await?;
    let (_, items) = c.corpus()?;
    let extra: Vec<&str> = if extra.is_empty() {
        sparse::extra_features::EXTRA_FEATURE_NAMES.to_vec()
    } else {
        extra.iter().map(String::as_str).collect()
    };
    let out = c
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("feature-study"));
    for precision in c.precisions()? {
        let Some(ctx) = pick_context(&store, dev.id, precision, db.context.as_deref()).await?
        else {
            println!("{precision}: no measurements of this device in the database");
            continue;
        };
        let (labelled, _) =
            finish::labelled_from_store(&store, dev.id, ctx, &items, precision).await?;
        println!("{precision}: {} matrices fully labelled", labelled.len());
        let input = trainer::feature_study::StudyInput {
            store: &store,
            device: dev.id,
            context: ctx,
            items: &items,
            precision,
        };
        trainer::feature_study::run(&input, &labelled, seeds, &extra, full, &out).await?;
    }
    Ok(())
}

/// The device of a results database: the one named (exact, else a
/// substring), else its only one.
async fn pick_device(
    store: &store::Store,
    db: &str,
    device_name: Option<&str>,
) -> Result<store::Device> {
    let devices = store.list_devices().await?;
    let names: Vec<&str> = devices.iter().map(|d| d.record.name.as_str()).collect();
    let dev = match device_name {
        Some(n) => devices
            .iter()
            .find(|d| d.record.name == n)
            .or_else(|| devices.iter().find(|d| d.record.name.contains(n))),
        None if devices.len() == 1 => devices.first(),
        None => bail!("{db} holds several devices {names:?}: choose one with --device-name"),
    }
    .with_context(|| format!("no device matching {device_name:?} in {db} (it holds {names:?})"))?;
    Ok(dev.clone())
}

/// The results database that `fit` and `fit-quick` read, and what in it.
#[derive(Args, Clone)]
struct FromDb {
    /// The results database (a path, sqlite:// or postgres:// URL), e.g. one brought back from a GPU.
    #[arg(long)]
    from_db: String,
    /// The device of that database to fit for (exact name or substring); needed
    /// when it holds several (`fit-quick`: default, the model's device).
    #[arg(long)]
    device_name: Option<String>,
    /// The measurement context to fit on: a context hash (or a prefix of 8+
    /// hex digits) or `legacy` (timings stored before contexts were recorded).
    /// Default: the context of this build's kernels and engine version.
    #[arg(long, env = "SPMV_MEASUREMENT_CONTEXT")]
    context: Option<String>,
}

/// What `trainer fit-quick` is asked.
#[derive(Args, Clone)]
struct FitQuickArgs {
    /// The model file.
    #[arg(long)]
    model: PathBuf,
    #[command(flatten)]
    db: FromDb,
    /// CSV files whose `matrix` column names matrices to leave out of the
    /// fit entirely (e.g. the held-out evaluations), comma separated.
    #[arg(long, value_delimiter = ',')]
    exclude: Vec<PathBuf>,
    /// Where to write the model (default: over --model).
    #[arg(long)]
    output: Option<PathBuf>,
    /// Most splits from the root of the quick tree to a leaf.
    #[arg(long, default_value_t = selector::QuickParams::default().max_depth)]
    quick_depth: usize,
    /// Fewest training matrices in a leaf of the quick tree.
    #[arg(long, default_value_t = selector::QuickParams::default().min_leaf)]
    quick_min_leaf: usize,
}

/// `trainer fit-quick`: the quick part of a model file from a results database.
async fn fit_quick(a: &FitQuickArgs) -> Result<()> {
    let mut model = selector::Model::load(&a.model)
        .with_context(|| format!("loading model {}", a.model.display()))?;
    let precision: Precision = model.card.precision.parse().context("model precision")?;
    let db = a.db.from_db.as_str();
    let store = store::Store::connect(Some(db))
        .await
        .with_context(|| format!("opening the results database {db}"))?;
    let wanted =
        a.db.device_name
            .clone()
            .unwrap_or(model.card.device.clone());
    let dev = pick_device(&store, db, Some(&wanted)).await?;
    let ctx = pick_context(&store, dev.id, precision, a.db.context.as_deref())
        .await?
        .with_context(|| format!("no {precision} measurements of '{wanted}' in {db}"))?;
    let hash = store
        .contexts()
        .await?
        .into_iter()
        .find(|c| c.id == ctx)
        .map_or_else(String::new, |c| c.hash);
    let samples = trainer::quick_fit::quick_samples(&store, dev.id, ctx, precision).await?;
    let excluded = trainer::quick_fit::names_in_csvs(&a.exclude)?;
    let db_name = std::path::Path::new(db)
        .file_name()
        .map_or(db.to_string(), |n| n.to_string_lossy().into_owned());
    let src = trainer::quick_fit::QuickSource {
        database: &db_name,
        device: &dev.record.name,
        context: &hash,
    };
    let params = selector::QuickParams {
        max_depth: a.quick_depth,
        min_leaf: a.quick_min_leaf,
    };
    let rec = trainer::quick_fit::fit_into(&mut model, &samples, &excluded, &src, params)?;
    let out = a.output.as_ref().unwrap_or(&a.model);
    model.save(out)?;
    println!("{}", serde_json::to_string_pretty(&rec)?);
    println!("quick part written to {}", out.display());
    Ok(())
}

/// The measurement context `fit --from-db` fits on in `precision`: the one
/// named, else the one of this build (same kernel sources and engine version;
/// build options are the device's, so any, when only one matches). `None` when
/// the device has no measurements in this precision.
async fn pick_context(
    store: &store::Store,
    device: store::DeviceId,
    precision: Precision,
    wanted: Option<&str>,
) -> Result<Option<store::ContextId>> {
    let used = store.contexts_used(device, precision).await?;
    if used.is_empty() {
        return Ok(None);
    }
    let listing = used
        .iter()
        .map(|(c, n)| {
            format!(
                "{} (engine {}, {n} measurements)",
                &c.hash[..c.hash.len().min(16)],
                c.context.engine_version
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    let chosen: Vec<&store::StoredContext> = match wanted {
        Some(h) => {
            let c = store
                .context_by_hash(h)
                .await?
                .with_context(|| format!("no measurement context '{h}' (stored: {listing})"))?;
            used.iter()
                .map(|(u, _)| u)
                .filter(|u| u.id == c.id)
                .collect()
        }
        None => {
            let kernels = selector::KernelSources::of(engine::kernels::SOURCES).hash;
            let version = engine::engine_version();
            used.iter()
                .map(|(u, _)| u)
                .filter(|u| {
                    u.context.kernel_sources_hash == kernels && u.context.engine_version == version
                })
                .collect()
        }
    };
    match chosen.as_slice() {
        [one] => {
            eprintln!(
                "trainer fit: {precision} on measurement context {} (engine {}, options '{}')",
                one.hash, one.context.engine_version, one.context.build_options
            );
            Ok(Some(one.id))
        }
        [] => bail!(
            "{precision}: no measurements of this device in the {} context; stored contexts: \
             {listing}; choose one with --context HASH (or --context legacy)",
            wanted.unwrap_or("current build's")
        ),
        _ => bail!("{precision}: several contexts match this build ({listing}); choose one with --context HASH"),
    }
}

fn evaluate_print(rows: &[trainer::evaluate::EvalRow]) {
    trainer::evaluate::print_table(rows);
}

fn summary_json(
    s: &trainer::evaluate::Summary,
    all: &trainer::evaluate::Summary,
    tag: &str,
) -> serde_json::Value {
    let mut v = serde_json::to_value(s).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        o.insert("precision".into(), serde_json::json!(tag));
        o.insert(
            "scope".into(),
            serde_json::json!("held-out real SuiteSparse matrices"),
        );
        o.insert(
            "all_held_out".into(),
            serde_json::to_value(all).unwrap_or_default(),
        );
    }
    v
}

/// The device as the selector matches it.
fn identity(info: &engine::DeviceInfo) -> selector::DeviceIdentity {
    selector::DeviceIdentity::new(&info.name, &info.vendor, &info.driver, &info.kind)
}

/// The kernel sources this build runs (embedded in the engine).
fn kernel_sources() -> selector::KernelSources {
    selector::KernelSources::of(engine::kernels::SOURCES)
}

/// Leaves out of `items` the matrices the model's card says it was trained
/// on (unless `include_trained`), saying how many; what the report records.
fn held_out_items(
    card: &selector::ModelCard,
    items: Vec<corpus::Item>,
    include_trained: bool,
) -> (Vec<corpus::Item>, serde_json::Value) {
    let total = items.len();
    if card.trained_on.is_empty() {
        eprintln!(
            "evaluate: note: the model's card lists no training matrices (fitted before they \
             were recorded): all {total} matrices are evaluated, and some may be ones it was \
             trained on, so these are not held-out figures"
        );
        return (
            items,
            serde_json::json!({"split": "unknown", "evaluated": total}),
        );
    }
    if include_trained {
        eprintln!("evaluate: --include-trained: all {total} matrices, trained-on ones included");
        return (
            items,
            serde_json::json!({"split": "trained included", "evaluated": total}),
        );
    }
    let trained: std::collections::HashSet<&str> =
        card.trained_on.iter().map(String::as_str).collect();
    let kept: Vec<corpus::Item> = items
        .into_iter()
        .filter(|i| !trained.contains(i.name.as_str()))
        .collect();
    let left_out = total - kept.len();
    eprintln!(
        "evaluate: left out {left_out} of {total} matrices the model was trained on \
         (--include-trained keeps them); {} held out",
        kept.len()
    );
    let record = serde_json::json!({
        "split": "the model's own (card trained_on)",
        "left_out_trained": left_out,
        "evaluated": kept.len(),
    });
    (kept, record)
}

async fn evaluate(c: &Common, model_path: &PathBuf, include_trained: bool) -> Result<()> {
    let model = selector::Model::load(model_path)
        .with_context(|| format!("loading model {}", model_path.display()))?;
    let precision: Precision = model.card.precision.parse().context("model precision")?;
    let dir = c
        .matrices
        .clone()
        .context("evaluate needs --matrices DIR (a folder of .mtx / .mtx.gz files)")?;
    let items = corpus::real_items(&dir)?;
    if items.is_empty() {
        bail!("no .mtx or .mtx.gz files in {}", dir.display());
    }
    let (mut items, split) = held_out_items(&model.card, items, include_trained);
    if let Some(n) = c.limit {
        items.truncate(n);
    }
    if items.is_empty() {
        bail!(
            "every matrix in {} is one the model was trained on: nothing is held out \
             (--include-trained evaluates them anyway)",
            dir.display()
        );
    }
    let env = Env::open(c.device.as_deref(), c.database.as_deref()).await?;
    let here = identity(env.engine.info());
    let m = selector::match_device(&model.card.identity(), &here);
    if m.level != selector::MatchLevel::Exact {
        eprintln!(
            "evaluate: note: match {} for this device: {}",
            m.level.as_str(),
            m.reason
        );
    }
    if let selector::Assessment::Refused(r) = model.assess(&selector::Target {
        device: &here,
        precision: precision.as_str(),
        kernels: &kernel_sources(),
    }) {
        eprintln!("evaluate: note: a service would refuse this model: {r}");
    }
    let opts = c.label_options();
    let lc = pipeline::label_corpus(
        &env,
        &items,
        &[precision],
        &opts,
        c.budget(),
        serde_json::json!({"evaluate": dir.display().to_string()}),
    )
    .await?;
    let labelled: Vec<&Labelled> = lc.of(precision).iter().collect();
    let class = match c.device_class.as_deref() {
        Some(k) => RuleClass::from_kind(k),
        None => RuleClass::from_kind(&env.engine.info().kind),
    };
    let rows =
        pipeline::evaluate_labelled(&env, class, &model, &items, &labelled, precision, &opts)
            .await?;
    evaluate_report(c, &env, &model, &labelled, rows, split).await
}

/// `trainer evaluate`'s report: the peers' columns, the files and the summary
/// of the evaluated rows; `split` says which matrices were left out.
async fn evaluate_report(
    c: &Common,
    env: &Env,
    model: &selector::Model,
    labelled: &[&Labelled],
    mut rows: Vec<trainer::evaluate::EvalRow>,
    split: serde_json::Value,
) -> Result<()> {
    let precision: Precision = model.card.precision.parse().context("model precision")?;
    let copy_gbps = env
        .store
        .device(env.device)
        .await?
        .and_then(|d| d.record.copy_bandwidth_gbps);
    let cusparse = match &c.cusparse {
        Some(p) => Some(CusparseTable::load(p)?),
        None => None,
    };
    trainer::peers::annotate(&mut rows, precision, copy_gbps, cusparse.as_ref());
    let out = c.out.clone().unwrap_or_else(pipeline::default_report_dir);
    let tag = format!("{}_evaluate", precision.as_str());
    let extra = serde_json::json!({ "held_out": split });
    let summary = pipeline::write_outputs(&out, &tag, &rows, model, labelled, extra)?;
    evaluate_print(&rows);
    pipeline::print_summary(&tag, &summary);
    println!("report, CSV and plots in {}", out.display());
    println!("{}", serde_json::to_string(&summary)?);
    Ok(())
}
