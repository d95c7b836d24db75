//! Finding the models folder from any working directory: a relative folder name
//! (the default `models`) is looked up in the working directory, then in the
//! repository above it, then in the repository above the executable, then in the
//! repository this crate was built from.

use std::path::{Path, PathBuf};

/// The models folder found, and where it was found (for logs and /models; the
/// absolute path itself is not meant to be shown to clients).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelsDir {
    /// The folder (may not exist when nothing was found).
    pub path: PathBuf,
    /// How it was found, in words (`working directory`, ...).
    pub found: &'static str,
}

/// The repository root this crate was built from (two folders above it).
pub fn built_in_repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Whether `dir` looks like this repository's root: it holds `kernels/` beside
/// the models folder, so that an unrelated `models` folder higher up is not taken.
fn is_repo_with(dir: &Path, given: &Path) -> bool {
    dir.join(given).is_dir() && dir.join("kernels").is_dir()
}

/// Resolves the models folder `given`. In order:
/// 1. an absolute `given` is taken as it is;
/// 2. `given` under the working directory `cwd`, when it is a folder;
/// 3. `given` under the nearest ancestor of `cwd` that is this repository
///    (holds `given` and `kernels/`);
/// 4. the same under the nearest such ancestor of the executable `exe`
///    (`target/release/server` finds the checkout it was built in);
/// 5. `given` under `built_in` (the repository the binary was compiled from,
///    [`built_in_repo_root`]), when it is there;
/// 6. otherwise `given` under `cwd` as it is, missing (the rule baseline plans).
pub fn resolve_models_dir(
    given: &Path,
    cwd: Option<&Path>,
    exe: Option<&Path>,
    built_in: Option<&Path>,
) -> ModelsDir {
    let at = |path: PathBuf, found| ModelsDir { path, found };
    if given.is_absolute() {
        return at(given.to_path_buf(), "as given");
    }
    if let Some(c) = cwd {
        if c.join(given).is_dir() {
            return at(c.join(given), "working directory");
        }
        if let Some(a) = c.ancestors().skip(1).find(|a| is_repo_with(a, given)) {
            return at(a.join(given), "repository above the working directory");
        }
    }
    if let Some(e) = exe.and_then(Path::parent) {
        if let Some(a) = e.ancestors().find(|a| is_repo_with(a, given)) {
            return at(a.join(given), "repository above the executable");
        }
    }
    if let Some(b) = built_in {
        if b.join(given).is_dir() {
            return at(b.join(given), "repository the binary was built from");
        }
    }
    let base = cwd.map_or_else(PathBuf::new, Path::to_path_buf);
    at(base.join(given), "not found")
}

impl ModelsDir {
    /// [`resolve_models_dir`] with this process's working directory and
    /// executable, and [`built_in_repo_root`].
    pub fn search(given: &Path) -> ModelsDir {
        let cwd = std::env::current_dir().ok();
        let exe = std::env::current_exe().ok();
        let root = built_in_repo_root();
        resolve_models_dir(given, cwd.as_deref(), exe.as_deref(), Some(&root))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake repository: root/{models,kernels}, root/sub/deep, root/target/release.
    fn repo(name: &str) -> PathBuf {
        let r = std::env::temp_dir().join(format!("models-dir-{}-{name}", std::process::id()));
        for d in ["models", "kernels", "sub/deep", "target/release"] {
            std::fs::create_dir_all(r.join(d)).unwrap();
        }
        r
    }

    #[test]
    fn the_search_order_is_cwd_then_ancestors_then_exe_then_built_in() {
        let r = repo("order");
        let m = Path::new("models");
        let got = resolve_models_dir(m, Some(&r), None, None);
        assert_eq!(
            (got.path, got.found),
            (r.join("models"), "working directory")
        );
        let got = resolve_models_dir(m, Some(&r.join("sub/deep")), None, None);
        assert_eq!(got.path, r.join("models"));
        assert_eq!(got.found, "repository above the working directory");
        let elsewhere = std::env::temp_dir();
        let exe = r.join("target/release/server");
        let got = resolve_models_dir(m, Some(&elsewhere), Some(&exe), None);
        assert_eq!(got.path, r.join("models"));
        assert_eq!(got.found, "repository above the executable");
        let got = resolve_models_dir(m, Some(&elsewhere), None, Some(&r));
        assert_eq!(got.found, "repository the binary was built from");
        let got = resolve_models_dir(Path::new("no-such-models"), Some(&r), Some(&exe), Some(&r));
        assert_eq!(got.found, "not found");
        assert_eq!(got.path, r.join("no-such-models"));
        let abs = r.join("anything");
        assert_eq!(resolve_models_dir(&abs, Some(&r), None, None).path, abs);
        std::fs::remove_dir_all(r).ok();
    }

    #[test]
    fn an_unrelated_models_folder_above_is_not_taken() {
        let r = repo("unrelated");
        std::fs::remove_dir_all(r.join("kernels")).unwrap();
        let got = resolve_models_dir(Path::new("models"), Some(&r.join("sub")), None, None);
        assert_eq!(got.found, "not found");
        std::fs::remove_dir_all(r).ok();
    }

    #[test]
    fn the_built_in_root_is_this_repository() {
        let root = built_in_repo_root();
        assert!(root.join("kernels").is_dir() && root.join("models").is_dir());
    }
}
