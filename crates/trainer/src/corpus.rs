//! The training corpus: real matrices from a folder, stand-ins generated from the
//! statistics of the whole SuiteSparse collection, and the generator families.
//! `training-data/manifest.json` says what the default corpus is.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use sparse::gen::Family;
use sparse::Csr;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// How to build one corpus matrix.
#[derive(Debug, Clone)]
pub enum Spec {
    /// A Matrix Market file (`.mtx` or `.mtx.gz`).
    File(PathBuf),
    /// A stand-in for a collection matrix, scaled to a nonzero budget.
    Standin {
        /// Its statistics.
        stats: Box<sparse::gen::standin::MatrixStats>,
        /// Nonzero budget.
        nnz_budget: usize,
        /// Generator seed.
        seed: u64,
    },
    /// A member of a generator family.
    Generator {
        /// The family.
        family: Family,
        /// About this many nonzeros.
        nnz: usize,
        /// Generator seed.
        seed: u64,
    },
}

/// One matrix of the corpus.
#[derive(Debug, Clone)]
pub struct Item {
    /// Unique name (file stem, `standin:Group/Name`, `gen:family:nnz:seed`).
    pub name: String,
    /// `suitesparse`, `standin:<Group/Name>` or `generator:<family>`.
    pub source: String,
    /// Problem kind, for stratified splitting (the collection's kind, or the family).
    pub kind: String,
    /// How to build it.
    pub spec: Spec,
}

impl Item {
    /// Builds (reads or generates) the matrix.
    pub fn load(&self) -> Result<Csr<f64>> {
        match &self.spec {
            // Complex collection matrices are timed on their real part: the kernels'
            // cost depends on the pattern, not on the values.
            Spec::File(p) => sparse::mm::read_path::<f64>(
                p,
                &sparse::mm::ReadOptions {
                    complex_real_part: true,
                },
            )
            .with_context(|| format!("reading {}", p.display())),
            Spec::Standin {
                stats,
                nnz_budget,
                seed,
            } => {
                let opts = sparse::gen::standin::StandinOptions {
                    nnz_budget: Some(*nnz_budget as u64),
                    seed: *seed,
                };
                let (m, _report) = sparse::gen::standin::standin(stats, &opts)
                    .with_context(|| format!("stand-in for {}", self.name))?;
                Ok(m)
            }
            Spec::Generator { family, nnz, seed } => family
                .generate(*nnz, *seed)
                .with_context(|| format!("generating {}", self.name)),
        }
    }

    /// Whether this is a real collection matrix (the held-out goals are measured on these).
    pub fn is_real(&self) -> bool {
        matches!(self.spec, Spec::File(_))
    }
}

/// The default corpus, as read from `training-data/manifest.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    /// What this corpus is for, in words.
    pub description: String,
    /// Folder of real matrices, relative to the repository root (overridden by `--matrices`).
    pub real_dir: String,
    /// Folder used when `real_dir` does not exist (a fresh clone without ../shared).
    pub real_fallback_dir: String,
    /// Collection statistics file, relative to the repository root.
    pub stats_file: String,
    /// How many stand-ins to generate (stratified over kinds and sizes).
    pub standins: usize,
    /// Nonzero budget of each stand-in (collection matrices larger than this are scaled down).
    pub standin_nnz_budget: usize,
    /// Generator families' sizes in nonzeros (every corpus family at each size).
    pub generator_nnz: Vec<usize>,
    /// Seed of every random choice.
    pub seed: u64,
}

/// The repository root (two levels above this crate).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

impl Manifest {
    /// Reads the manifest; a relative path is taken from the repository root.
    pub fn load(path: &Path) -> Result<Manifest> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading corpus manifest {}", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
    }

    /// The default manifest file.
    pub fn default_path() -> PathBuf {
        repo_root().join("training-data/manifest.json")
    }
}

/// Options that decide the corpus (the manifest's values, possibly overridden).
#[derive(Debug, Clone)]
pub struct CorpusOptions {
    /// Folder of real matrices, if any.
    pub real_dir: Option<PathBuf>,
    /// Collection statistics file for stand-ins, if any.
    pub stats_file: Option<PathBuf>,
    /// Number of stand-ins.
    pub standins: usize,
    /// Their nonzero budget.
    pub standin_nnz_budget: usize,
    /// Generator sizes.
    pub generator_nnz: Vec<usize>,
    /// Seed.
    pub seed: u64,
}

impl CorpusOptions {
    /// Options from a manifest read from `manifest_path`, resolving its folders
    /// against the folder above the manifest's own (the repository root for
    /// `training-data/manifest.json`, wherever the repository or image lives), and
    /// falling back, with a note, when the real folder is missing.
    pub fn from_manifest(
        m: &Manifest,
        manifest_path: &Path,
        matrices_override: Option<PathBuf>,
    ) -> CorpusOptions {
        let root = manifest_path
            .parent()
            .and_then(Path::parent)
            .map(Path::to_path_buf)
            .unwrap_or_else(repo_root);
        let real = matrices_override.unwrap_or_else(|| {
            let p = root.join(&m.real_dir);
            if p.is_dir() {
                p
            } else {
                eprintln!(
                    "corpus: {} not found, using the bundled fixtures {}",
                    p.display(),
                    m.real_fallback_dir
                );
                root.join(&m.real_fallback_dir)
            }
        });
        CorpusOptions {
            real_dir: Some(real),
            stats_file: Some(root.join(&m.stats_file)),
            standins: m.standins,
            standin_nnz_budget: m.standin_nnz_budget,
            generator_nnz: m.generator_nnz.clone(),
            seed: m.seed,
        }
    }
}

/// The columns of a folder's `index.csv` this module reads (others are ignored).
#[derive(serde::Deserialize)]
struct IndexLine {
    file: String,
    kind: String,
}

/// Kinds of the matrices in a folder's `index.csv` (`file` and `kind` columns),
/// when present; unreadable lines are skipped.
fn folder_kinds(dir: &Path) -> HashMap<String, String> {
    let Ok(mut r) = csv::Reader::from_path(dir.join("index.csv")) else {
        return HashMap::new();
    };
    r.deserialize::<IndexLine>()
        .flatten()
        .map(|l| (l.file, l.kind))
        .collect()
}

/// The name of a matrix file: its file name without `.mtx` / `.mtx.gz`.
pub fn stem(p: &Path) -> String {
    let n = p.file_name().and_then(|n| n.to_str()).unwrap_or("matrix");
    n.trim_end_matches(".gz")
        .trim_end_matches(".mtx")
        .to_string()
}

/// The real matrices of a folder as corpus items.
pub fn real_items(dir: &Path) -> Result<Vec<Item>> {
    let kinds = folder_kinds(dir);
    Ok(sparse::mm::matrix_files(dir)?
        .into_iter()
        .map(|p| {
            let file = p
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("")
                .to_string();
            Item {
                name: stem(&p),
                source: "suitesparse".into(),
                kind: kinds
                    .get(&file)
                    .cloned()
                    .unwrap_or_else(|| "unknown".into()),
                spec: Spec::File(p),
            }
        })
        .collect())
}

/// Builds the corpus list (matrices are built lazily by [`Item::load`]).
pub fn build(opts: &CorpusOptions) -> Result<Vec<Item>> {
    let mut items = Vec::new();
    if let Some(dir) = &opts.real_dir {
        if !dir.is_dir() {
            bail!("matrix folder {} does not exist", dir.display());
        }
        items.extend(real_items(dir)?);
    }
    if opts.standins > 0 {
        if let Some(stats) = &opts.stats_file {
            let all = sparse::gen::standin::load_stats(stats)
                .with_context(|| format!("reading collection statistics {}", stats.display()))?;
            for (i, s) in pick_standins(&all, opts.standins, opts.seed)
                .into_iter()
                .enumerate()
            {
                items.push(Item {
                    name: format!("standin:{}/{}", s.group, s.name),
                    source: format!("standin:{}/{}", s.group, s.name),
                    kind: s.kind.clone(),
                    spec: Spec::Standin {
                        stats: Box::new(s.clone()),
                        nnz_budget: opts.standin_nnz_budget,
                        seed: opts.seed.wrapping_add(i as u64),
                    },
                });
            }
        }
    }
    for &nnz in &opts.generator_nnz {
        for (i, fam) in Family::CORPUS.iter().enumerate() {
            let seed = opts
                .seed
                .wrapping_mul(31)
                .wrapping_add(i as u64 + nnz as u64);
            items.push(Item {
                name: format!("gen:{}:{}", fam.name(), nnz),
                source: format!("generator:{}", fam.name()),
                kind: format!("generator:{}", fam.name()),
                spec: Spec::Generator {
                    family: *fam,
                    nnz,
                    seed,
                },
            });
        }
    }
    Ok(items)
}

/// Picks `n` collection matrices spread over kinds and sizes: sorted by
/// (kind, nnz), then taken at evenly spaced positions, so every kind and size
/// range is represented in proportion to the collection.
pub fn pick_standins(
    all: &[sparse::gen::standin::MatrixStats],
    n: usize,
    seed: u64,
) -> Vec<&sparse::gen::standin::MatrixStats> {
    let mut v: Vec<&sparse::gen::standin::MatrixStats> =
        all.iter().filter(|s| s.nnz > 0 && s.rows > 0).collect();
    v.retain(|s| s.row.is_some());
    v.sort_by(|a, b| {
        a.kind
            .cmp(&b.kind)
            .then(a.nnz.cmp(&b.nnz))
            .then(a.id.cmp(&b.id))
    });
    if n >= v.len() {
        return v;
    }
    let step = v.len() as f64 / n as f64;
    let offset = (seed % 1000) as f64 / 1000.0 * step;
    (0..n)
        .map(|i| v[((i as f64 * step + offset) as usize).min(v.len() - 1)])
        .collect()
}

/// Matrices of served requests: the distinct matrix hashes of the request log
/// whose copy the server kept in `dir` (`server --keep-matrices DIR`), as corpus
/// items with source `request`. Hashes without a kept file are counted and skipped.
pub async fn request_items(store: &store::Store, dir: &Path) -> Result<(Vec<Item>, usize)> {
    let mut seen = std::collections::BTreeSet::new();
    let mut after = store::RequestId(0);
    loop {
        let page = store.requests_since(after, 1000).await?;
        let Some(last) = page.last() else { break };
        after = last.id;
        seen.extend(page.into_iter().filter_map(|r| r.record.matrix_hash));
    }
    let mut items = Vec::new();
    let mut missing = 0;
    for hash in seen {
        let p = dir.join(format!("{hash}.mtx"));
        if p.is_file() {
            items.push(Item {
                name: format!("request:{}", &hash[..hash.len().min(16)]),
                source: "request".into(),
                kind: "request".into(),
                spec: Spec::File(p),
            });
        } else {
            missing += 1;
        }
    }
    Ok((items, missing))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folder_kinds_reads_file_and_kind_and_ignores_other_columns() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("index.csv"),
            "file,group,kind,notes\na.mtx.gz,HB,\"structural problem\",\"x, y\"\nb.mtx,G,graph,\n",
        )
        .unwrap();
        let k = folder_kinds(dir.path());
        assert_eq!(k.len(), 2);
        assert_eq!(k["a.mtx.gz"], "structural problem");
        assert_eq!(k["b.mtx"], "graph");
        assert!(folder_kinds(&dir.path().join("none")).is_empty());
    }
}
