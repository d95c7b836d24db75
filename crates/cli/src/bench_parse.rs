//! `spmv bench-parse`: Matrix Market parse throughput beside `scipy.io.mmread` on
//! the same files in the same run, and the analysis overhead (features + binning)
//! in SpMV-equivalents. Prints figures; asserts nothing.

use anyhow::{bail, Context};
use sparse::gen::Family;
use sparse::mm::{gunzip, read_bytes, ReadOptions};
use sparse::spmv::spmv_ref;
use sparse::{Binning, Features, Scheme};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// Arguments of `spmv bench-parse`.
#[derive(clap::Args)]
pub struct Args {
    /// Matrix Market files, or folders from which the largest `--largest` files are
    /// taken (default: the shared matrices folder, ../shared/matrices or
    /// $SPMV_SHARED_DIR/matrices).
    paths: Vec<PathBuf>,
    /// How many of the largest files to take from each folder.
    #[arg(long, default_value_t = 5)]
    largest: usize,
    /// Timed repetitions per measurement; the best is reported.
    #[arg(long, default_value_t = 5)]
    repeat: usize,
    /// Skip the scipy comparison.
    #[arg(long)]
    no_scipy: bool,
    /// Also generate a stencil, a power-law graph and a road-like matrix of about
    /// this many nonzeros, written as Matrix Market text (0: none). The analysis
    /// overhead target (under 0.5 SpMV-equivalents) is for matrices above 1M nonzeros.
    #[arg(long, default_value_t = 2_000_000)]
    generated: usize,
}

/// The generator families benchmarked with `--generated`.
const GENERATED: [Family; 3] = [Family::Stencil3d27, Family::PowerLaw, Family::RoadLike];

/// The shared matrices folder the defaults come from.
pub(crate) fn default_dir() -> PathBuf {
    match std::env::var_os("SPMV_SHARED_DIR") {
        Some(d) => PathBuf::from(d).join("matrices"),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/matrices"),
    }
}

/// Expands folders into their largest Matrix Market files.
fn collect_files(args: &Args) -> anyhow::Result<Vec<PathBuf>> {
    let paths = if args.paths.is_empty() {
        vec![default_dir()]
    } else {
        args.paths.clone()
    };
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut files: Vec<(u64, PathBuf)> = std::fs::read_dir(&p)
                .with_context(|| format!("listing {}", p.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| sparse::mm::is_matrix_file(f))
                .filter_map(|f| Some((f.metadata().ok()?.len(), f)))
                .collect();
            files.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
            out.extend(files.into_iter().take(args.largest).map(|f| f.1));
        } else if p.is_file() {
            out.push(p);
        } else {
            bail!(
                "{} is neither a file nor a folder (default: the shared matrices folder)",
                p.display()
            );
        }
    }
    if out.is_empty() {
        bail!("no .mtx or .mtx.gz files found");
    }
    Ok(out)
}

/// Best wall time of `repeat` runs of `f`, in seconds.
fn best_of<R>(repeat: usize, mut f: impl FnMut() -> R) -> f64 {
    (0..repeat.max(1))
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(f());
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

/// One file's measurements.
struct Row {
    name: String,
    text_mb: f64,
    nnz: usize,
    ours_s: f64,
    ours_gz_s: f64,
    features: f64,
    analysis_u10: f64,
    analysis_single: f64,
    scipy: Option<ScipyTimes>,
}

#[derive(Clone, Copy)]
struct ScipyTimes {
    mmread_s: f64,
    mmread_gz_s: f64,
    tocsr_s: f64,
}

const SCIPY_SCRIPT: &str = r#"
import sys, time, scipy, scipy.io
repeat = int(sys.argv[1])
def best(f):
    b = float("inf")
    for _ in range(repeat):
        t = time.perf_counter(); f(); b = min(b, time.perf_counter() - t)
    return b
args = sys.argv[2:]
for text, raw in zip(args[0::2], args[1::2]):
    m = best(lambda: scipy.io.mmread(text))
    g = best(lambda: scipy.io.mmread(raw))
    c = best(lambda: scipy.io.mmread(text).tocsr())
    print(m, g, c, flush=True)
"#;

/// The scipy version, or why scipy cannot be used.
fn scipy_version() -> Result<String, String> {
    let out = Command::new("python3")
        .args(["-c", "import scipy, scipy.io; print(scipy.__version__)"])
        .output()
        .map_err(|e| format!("python3 cannot be started ({e})"))?;
    if !out.status.success() {
        return Err("python3 cannot import scipy (pip install scipy to compare)".into());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Times scipy on the decompressed copies and on the original files.
fn scipy_times(pairs: &[(PathBuf, PathBuf)], repeat: usize) -> anyhow::Result<Vec<ScipyTimes>> {
    let mut cmd = Command::new("python3");
    cmd.args(["-c", SCIPY_SCRIPT, &repeat.to_string()]);
    for (text, raw) in pairs {
        cmd.arg(text).arg(raw);
    }
    let out = cmd.output().context("running python3")?;
    if !out.status.success() {
        bail!("scipy failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let stdout = String::from_utf8(out.stdout)?;
    stdout
        .lines()
        .map(|l| {
            let v: Vec<f64> = l
                .split_whitespace()
                .map(str::parse)
                .collect::<Result<_, _>>()?;
            anyhow::ensure!(v.len() == 3, "unexpected scipy output line {l:?}");
            Ok(ScipyTimes {
                mmread_s: v[0],
                mmread_gz_s: v[1],
                tocsr_s: v[2],
            })
        })
        .collect()
}

/// Reads a file and its decompressed text.
fn load(path: &Path) -> anyhow::Result<(Vec<u8>, Vec<u8>)> {
    let raw = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let text = if raw.starts_with(&[0x1f, 0x8b]) {
        gunzip(&raw)?
    } else {
        raw.clone()
    };
    Ok((raw, text))
}

/// A generated matrix as Matrix Market text and its gzip compression.
fn generate(family: Family, nnz: usize) -> anyhow::Result<(String, Vec<u8>, Vec<u8>)> {
    let a = family.generate(nnz, 42)?;
    let mut text = Vec::new();
    sparse::mm::write(&a, &mut text)?;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, &text)?;
    let name = format!("gen:{}:{}", family.name(), a.nnz());
    Ok((name, gz.finish()?, text))
}

fn measure(name: String, raw: &[u8], text: &[u8], repeat: usize) -> anyhow::Result<Row> {
    let opts = ReadOptions {
        complex_real_part: true,
    };
    let a = read_bytes::<f64>(text, &opts).with_context(|| format!("parsing {name}"))?;
    let ours_s = best_of(repeat, || read_bytes::<f64>(text, &opts).map(|m| m.nnz()));
    let ours_gz_s = best_of(repeat, || read_bytes::<f64>(raw, &opts).map(|m| m.nnz()));
    let x: Vec<f64> = (0..a.ncols())
        .map(|i| 1.0 + (i % 17) as f64 * 0.125)
        .collect();
    let spmv_s = best_of(repeat.max(10), || spmv_ref(&a, &x).map(|y| y.len()));
    let features_s = best_of(repeat, || Features::of(&a).values.len());
    let u10_s = best_of(repeat, || {
        Binning::new(a.row_ptr(), Scheme::Granularity(10)).num_bins()
    });
    let single_s = best_of(repeat, || {
        Binning::new(a.row_ptr(), Scheme::Single).num_bins()
    });
    Ok(Row {
        name,
        text_mb: text.len() as f64 / 1e6,
        nnz: a.nnz(),
        ours_s,
        ours_gz_s,
        features: features_s / spmv_s,
        analysis_u10: (features_s + u10_s) / spmv_s,
        analysis_single: (features_s + single_s) / spmv_s,
        scipy: None,
    })
}

fn geomean(v: impl Iterator<Item = f64>) -> f64 {
    let (s, n) = v.fold((0.0, 0usize), |(s, n), x| (s + x.ln(), n + 1));
    if n == 0 {
        f64::NAN
    } else {
        (s / n as f64).exp()
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let files = collect_files(&args)?;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("Matrix Market parse throughput, MB/s of uncompressed text (best of {}), {threads} hardware threads", args.repeat);
    let tmp = std::env::temp_dir().join(format!("spmv-bench-parse-{}", std::process::id()));
    std::fs::create_dir_all(&tmp)?;
    let (mut rows, pairs) = measure_all(&args, &files, &tmp)?;
    let scipy = if args.no_scipy {
        Err("skipped (--no-scipy)".to_string())
    } else {
        scipy_version()
    };
    match &scipy {
        Ok(v) => {
            println!("baseline: scipy {v} scipy.io.mmread on the same decompressed files (and on the originals for +gz)");
            match scipy_times(&pairs, args.repeat) {
                Ok(t) => rows.iter_mut().zip(t).for_each(|(r, t)| r.scipy = Some(t)),
                Err(e) => println!("note: scipy comparison failed: {e:#}"),
            }
        }
        Err(why) => println!("note: no scipy comparison: {why}"),
    }
    std::fs::remove_dir_all(&tmp).ok();
    print_table(&rows);
    Ok(())
}

/// A decompressed copy written for scipy, and the file it was read from.
type CopyPair = (PathBuf, PathBuf);

/// Measures every file and (with `--generated`) every generated family, and
/// writes the decompressed text of each into `tmp` for scipy: the rows, and
/// the (decompressed copy, original) pairs scipy reads.
fn measure_all(
    args: &Args,
    files: &[PathBuf],
    tmp: &Path,
) -> anyhow::Result<(Vec<Row>, Vec<CopyPair>)> {
    let mut rows = Vec::new();
    let mut pairs = Vec::new();
    for (k, f) in files.iter().enumerate() {
        let (raw, text) = load(f)?;
        let name = f.file_name().map_or_else(
            || f.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        rows.push(measure(name, &raw, &text, args.repeat)?);
        let copy = tmp.join(format!("{k}.mtx"));
        std::fs::write(&copy, &text)?;
        pairs.push((copy, f.clone()));
    }
    if args.generated > 0 {
        for (k, family) in GENERATED.into_iter().enumerate() {
            let (name, raw, text) = generate(family, args.generated)?;
            rows.push(measure(name, &raw, &text, args.repeat)?);
            let (copy, gz) = (
                tmp.join(format!("gen{k}.mtx")),
                tmp.join(format!("gen{k}.mtx.gz")),
            );
            std::fs::write(&copy, &text)?;
            std::fs::write(&gz, &raw)?;
            pairs.push((copy, gz));
        }
    }
    Ok((rows, pairs))
}

/// Prints the table of throughputs and ratios, the geometric mean and the legend.
fn print_table(rows: &[Row]) {
    println!();
    println!(
        "{:<40} {:>8} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7} {:>7} {:>7} {:>7} {:>9}",
        "file",
        "text MB",
        "nnz",
        "ours",
        "ours+gz",
        "scipy",
        "scipy+gz",
        "sp+csr",
        "ratio",
        "ratioGz",
        "feat",
        "an.U10",
        "an.single"
    );
    let na = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.1}"));
    let nr = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.2}"));
    for r in rows {
        let mbps = |s: f64| r.text_mb / s;
        let sp = r.scipy.map(|t| mbps(t.mmread_s));
        let spgz = r.scipy.map(|t| mbps(t.mmread_gz_s));
        let spcsr = r.scipy.map(|t| mbps(t.tocsr_s));
        println!(
            "{:<40} {:>8.2} {:>10} {:>9.1} {:>9.1} {:>9} {:>9} {:>9} {:>7} {:>7} {:>7.3} {:>7.3} {:>9.3}",
            r.name,
            r.text_mb,
            r.nnz,
            mbps(r.ours_s),
            mbps(r.ours_gz_s),
            na(sp),
            na(spgz),
            na(spcsr),
            nr(sp.map(|s| mbps(r.ours_s) / s)),
            nr(spgz.map(|s| mbps(r.ours_gz_s) / s)),
            r.features,
            r.analysis_u10,
            r.analysis_single,
        );
    }
    if rows.iter().all(|r| r.scipy.is_some()) {
        let g = geomean(rows.iter().map(|r| r.scipy.unwrap().mmread_s / r.ours_s));
        let ggz = geomean(
            rows.iter()
                .map(|r| r.scipy.unwrap().mmread_gz_s / r.ours_gz_s),
        );
        println!("geometric mean ratio ours/scipy: {g:.2} on text, {ggz:.2} with gzip (above 1: we are faster)");
    }
    println!();
    println!("ours: sparse::mm::read_bytes::<f64> to a finished CSR (sorted, symmetric expanded);");
    println!(
        "scipy: scipy.io.mmread to COO; sp+csr adds .tocsr(); +gz columns include decompression."
    );
    println!("feat: features time / one reference SpMV; an.U10 / an.single: features + binning with U=10 / a single bin, / one SpMV.");
}
