//! `spmv check`: every kernel of the pool, in f32 and f64, on given matrices,
//! generated ones and built-in awkward shapes, against the reference SpMV with
//! sparse's tolerance model; also one plan per binning scheme (kernels cycled
//! over the bins) in each launch mode (per bin, grouped, fused). Exits non-zero on any mismatch: the
//! correctness stage of the GPU campaign.

use anyhow::{bail, Context, Result};
use clap::Args as ClapArgs;
use engine::{registry, DeviceScalar, Engine, LaunchMode};
use sparse::mm::{read_path, ReadOptions};
use sparse::spmv::{compare, spmv_ref};
use sparse::{gen, Binning, Csr, KernelId, Plan, Scheme};
use std::path::PathBuf;

/// Arguments of `spmv check`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// Matrix Market files or folders of them (.mtx, .mtx.gz).
    pub paths: Vec<PathBuf>,
    /// Also the built-in awkward shapes (empty, 1x1, one huge row, tall and thin,
    /// rows around the CSR-Adaptive thresholds, ...).
    #[arg(long)]
    pub awkward: bool,
    /// Generated matrices, FAMILY:NNZ (e.g. stencil2d:4M); repeatable.
    #[arg(long = "gen")]
    pub gens: Vec<String>,
    /// f32, f64 or both.
    #[arg(long, default_value = "both")]
    pub precision: sparse::Precisions,
    /// Skip the binned plans (whole-matrix kernels only).
    #[arg(long)]
    pub no_plans: bool,
    /// OpenCL device (platform or device name substring); default env SPMV_DEVICE, else the best device.
    #[arg(long)]
    pub device: Option<String>,
    /// Kernel parameters, reduction path and program cache, as for `spmv bench`
    /// (so parameters being tuned on a device are checked first).
    #[command(flatten)]
    pub engine: crate::engine_args::EngineArgs,
}

/// Rows of the given lengths over `ncols` columns, spread evenly, deterministic values.
fn rows_of_lengths(lens: &[usize], ncols: usize) -> Result<Csr<f64>> {
    let mut rp = vec![0u32];
    let (mut ci, mut v) = (Vec::new(), Vec::new());
    for (i, &l) in lens.iter().enumerate() {
        let step = (ncols / l.max(1)).max(1);
        let off = i % step;
        for j in 0..l.min(ncols) {
            ci.push((j * step + off) as u32);
            v.push(if (i + j) % 3 == 0 {
                -0.75
            } else {
                0.5 + (j % 7) as f64 / 8.0
            });
        }
        rp.push(ci.len() as u32);
    }
    Ok(Csr::try_new(lens.len(), ncols, rp, ci, v)?)
}

/// The built-in awkward shapes.
pub fn awkward_cases() -> Result<Vec<(String, Csr<f64>)>> {
    let one = Csr::try_new(1, 1, vec![0, 1], vec![0], vec![2.5])?;
    let mut c: Vec<(String, Csr<f64>)> = vec![
        ("awk:empty-0x0".into(), Csr::zeros(0, 0)?),
        ("awk:empty-5x0".into(), Csr::zeros(5, 0)?),
        ("awk:empty-0x5".into(), Csr::zeros(0, 5)?),
        ("awk:all-rows-empty".into(), gen::all_rows_empty(1000)?),
        ("awk:1x1".into(), one),
        ("awk:1x1-empty".into(), Csr::zeros(1, 1)?),
        (
            "awk:one-huge-row-300000".into(),
            gen::one_huge_row(300_000)?,
        ),
        ("awk:tall-thin-200000x4".into(), gen::tall_thin(200_000, 4)?),
        (
            "awk:lp-like-2000x16000".into(),
            gen::lp_like(2000, 16_000, 3)?,
        ),
        (
            "awk:mixed-lengths-3000".into(),
            gen::mixed_lengths(3000, 4)?,
        ),
        (
            "awk:many-empty-rows".into(),
            gen::many_empty_rows(5000, 0.5, 5)?,
        ),
        (
            "awk:power-law-20000".into(),
            gen::power_law(20_000, 8.0, 6)?,
        ),
        (
            "awk:uniform-257-rows".into(),
            gen::uniform_random(257, 300, 5, 7)?,
        ),
        ("awk:stencil2d-37x29".into(), gen::stencil_2d(37, 29)?),
    ];
    // Rows around the CSR-Adaptive thresholds (1024/1536 nonzeros per block, x2, x3)
    // and around warp (32) and work-group (256, 1024) widths.
    let lens = [
        0, 1, 31, 32, 33, 255, 256, 257, 1023, 1024, 1025, 1535, 1536, 1537, 3071, 3072, 3073, 3,
        4609, 9000, 0, 2, 6145, 5,
    ];
    c.push((
        "awk:adaptive-thresholds".into(),
        rows_of_lengths(&lens, 10_000)?,
    ));
    let lens: Vec<usize> = (0..1025).map(|i| 1 + i % 4).collect();
    c.push(("awk:1025-short-rows".into(), rows_of_lengths(&lens, 50)?));
    let lens: Vec<usize> = (0..4099).map(|i| [0, 33, 1, 64, 7][i % 5]).collect();
    c.push((
        "awk:4099-rows-warp-widths".into(),
        rows_of_lengths(&lens, 4096)?,
    ));
    Ok(c)
}

/// Kernels cycled over the non-empty bins of a scheme: every kernel meets every
/// bin position across schemes without a random generator.
fn cycled_plan(b: &Binning, offset: usize) -> Plan {
    let all = KernelId::all();
    Plan {
        scheme: b.scheme,
        kernels: b
            .nonempty_bins()
            .enumerate()
            .map(|(i, bin)| (bin, all[(i + offset) % all.len()]))
            .collect(),
    }
}

struct Checker<'a> {
    engine: &'a Engine,
    plans: bool,
    runs: usize,
    failures: Vec<String>,
}

impl Checker<'_> {
    fn record<T: DeviceScalar>(
        &mut self,
        what: String,
        a: &Csr<T>,
        x: &[T],
        y_ref: &[T],
        y: Result<Vec<T>>,
    ) {
        self.runs += 1;
        match y {
            Ok(y) => {
                let c = compare(a, x, &y, y_ref);
                if !c.ok() {
                    let r = c.worst_row;
                    self.failures.push(format!(
                        "{what} {}: row {r} got {} want {} (max rel err {:.3e}, bound ratio {:.3e})",
                        T::NAME,
                        y.get(r).map_or(f64::NAN, |v| v.to_f64()),
                        y_ref.get(r).map_or(f64::NAN, |v| v.to_f64()),
                        c.max_rel_err,
                        c.worst_bound_ratio
                    ));
                }
            }
            Err(e) => self
                .failures
                .push(format!("{what} {}: error: {e:#}", T::NAME)),
        }
    }

    fn matrix<T: DeviceScalar>(&mut self, name: &str, a64: &Csr<f64>) -> Result<()> {
        let a: Csr<T> = a64.cast();
        let x: Vec<T> = (0..a.ncols())
            .map(|i| T::from_f64(((i * 7919 % 2001) as f64 - 1000.0) / 1000.0 + 0.0005))
            .collect();
        let y_ref = spmv_ref(&a, &x)?;
        let m = self
            .engine
            .upload(&a)
            .with_context(|| format!("{name}: upload"))?;
        for k in registry() {
            let y = self
                .engine
                .spmv(&m, k.id, &x)
                .map(|r| r.0)
                .map_err(Into::into);
            self.record(format!("{name} {}", k.name), &a, &x, &y_ref, y);
        }
        if !self.plans {
            return Ok(());
        }
        for (si, scheme) in Scheme::all().into_iter().enumerate() {
            let b = Binning::new(a.row_ptr(), scheme);
            let plan = cycled_plan(&b, si);
            for mode in [LaunchMode::PerBin, LaunchMode::Grouped, LaunchMode::Fused] {
                let y = self
                    .engine
                    .prepare_binned(&m, &b, &plan, mode)
                    .and_then(|pp| self.engine.execute(&m, &pp, &x))
                    .map(|r| r.0)
                    .map_err(Into::into);
                self.record(
                    format!("{name} plan u={scheme} {mode:?}"),
                    &a,
                    &x,
                    &y_ref,
                    y,
                );
            }
        }
        Ok(())
    }

    fn both(&mut self, name: &str, a: &Csr<f64>, precision: &sparse::Precisions) -> Result<()> {
        if precision.contains(sparse::Precision::F32) {
            self.matrix::<f32>(name, a)?;
        }
        if precision.contains(sparse::Precision::F64) {
            if self.engine.info().fp64 {
                self.matrix::<f64>(name, a)?;
            } else {
                self.failures.push(format!("{name}: the device has no f64"));
            }
        }
        Ok(())
    }
}

/// A matrix to check, built when its turn comes (big files are not all held at once).
type Case = Box<dyn FnOnce() -> Result<(String, Csr<f64>)>>;

/// Runs `spmv check`.
pub fn run(args: Args) -> Result<()> {
    let files = crate::bench::collect_files(&args.paths)?;
    let gens = args
        .gens
        .iter()
        .map(|g| crate::bench::parse_gen(g))
        .collect::<Result<Vec<_>>>()?;
    if files.is_empty() && gens.is_empty() && !args.awkward {
        bail!("nothing to check: give matrix files, folders, --gen FAMILY:NNZ or --awkward");
    }
    let engine = Engine::with_config(&args.engine.config(args.device.as_deref()))?;
    let info = engine.info().clone();
    eprintln!(
        "# check on {} / {} (driver {}); merge tile {} x {} items (f64)",
        info.platform,
        info.name,
        info.driver,
        engine.params(engine::Precision::F64).mt_wg,
        engine.params(engine::Precision::F64).mt_items
    );
    let mut ck = Checker {
        engine: &engine,
        plans: !args.no_plans,
        runs: 0,
        failures: Vec::new(),
    };
    let mut matrices = 0;
    let mut errors = Vec::new();
    let opts = ReadOptions {
        complex_real_part: true,
    };
    let mut cases: Vec<Case> = Vec::new();
    for f in files {
        cases.push(Box::new(move || {
            let a =
                read_path::<f64>(&f, &opts).with_context(|| format!("reading {}", f.display()))?;
            Ok((crate::bench::matrix_name(&f), a))
        }));
    }
    for (fam, nnz) in gens {
        cases.push(Box::new(move || {
            Ok((format!("gen:{fam}:{nnz}"), fam.generate(nnz, 1)?))
        }));
    }
    if args.awkward {
        for c in awkward_cases()? {
            cases.push(Box::new(move || Ok(c)));
        }
    }
    for case in cases {
        let before = ck.failures.len();
        match case().and_then(|(name, a)| ck.both(&name, &a, &args.precision).map(|_| name)) {
            Ok(name) => {
                matrices += 1;
                let bad = ck.failures.len() - before;
                println!("{} {name}", if bad == 0 { "ok  " } else { "FAIL" });
            }
            Err(e) => errors.push(format!("{e:#}")),
        }
    }
    for f in &ck.failures {
        println!("mismatch: {f}");
    }
    for e in &errors {
        println!("error: {e}");
    }
    println!(
        "checked {matrices} matrices, {} runs ({} kernels{}, precision {}): {} mismatches, {} matrices not checked",
        ck.runs,
        registry().len(),
        if ck.plans { " + one plan per scheme in each launch mode" } else { "" },
        args.precision,
        ck.failures.len(),
        errors.len()
    );
    if !ck.failures.is_empty() || !errors.is_empty() {
        bail!("{} mismatches, {} errors", ck.failures.len(), errors.len());
    }
    Ok(())
}
