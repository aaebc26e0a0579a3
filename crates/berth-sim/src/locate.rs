//! Finding the trace folder and the files in it.
//!
//! The folder is, in order: `--traces-dir`, the `BERTH_TRACES` environment variable, or
//! `shared/traces/openb` in the nearest ancestor of the current directory, then of the
//! binary, that has one (the repository's layout puts it beside the repository root, at
//! `../shared/traces/openb`). Pod lists are named `openb_pod_list_<name>.csv` there, node lists
//! `openb_node_list_<name>.csv`.

use std::path::{Path, PathBuf};

/// The folder's place relative to an ancestor directory.
pub const RELATIVE: &str = "shared/traces/openb";
/// The node list the FGD experiments use.
pub const DEFAULT_NODES: &str = "gpu_node";
/// The environment variable naming the folder.
pub const ENV: &str = "BERTH_TRACES";

/// Where to look: what the command line, the environment and the process give.
pub struct Search<'a> {
    /// `--traces-dir`.
    pub flag: Option<&'a Path>,
    /// `BERTH_TRACES`.
    pub env: Option<PathBuf>,
    /// The current directory.
    pub cwd: Option<PathBuf>,
    /// The running binary.
    pub exe: Option<PathBuf>,
}

/// The trace folder, or a message that says where it looked.
pub fn traces_dir(search: &Search<'_>) -> Result<PathBuf, String> {
    if let Some(dir) = search.flag {
        return if dir.is_dir() {
            Ok(dir.to_path_buf())
        } else {
            Err(format!("--traces-dir {}: no such directory", dir.display()))
        };
    }
    if let Some(dir) = &search.env {
        return if dir.is_dir() {
            Ok(dir.clone())
        } else {
            Err(format!("{ENV}={}: no such directory", dir.display()))
        };
    }
    let mut looked = Vec::new();
    for start in [&search.cwd, &search.exe].into_iter().flatten() {
        for ancestor in start.ancestors() {
            let candidate = ancestor.join(RELATIVE);
            if candidate.is_dir() {
                return Ok(candidate);
            }
        }
        looked.push(start.display().to_string());
    }
    Err(format!(
        "cannot find the trace folder: --traces-dir is not given, {ENV} is not set, and no \
         {RELATIVE} is in any parent of {}; pass --traces-dir DIR (the folder of \
         openb_pod_list_*.csv)",
        if looked.is_empty() { "the current directory".to_string() } else { looked.join(" or ") }
    ))
}

/// A pod list by name (`default` is `openb_pod_list_default.csv` in `dir`) or by path (a value
/// with a `/` or ending in `.csv`).
pub fn pod_list(dir: Option<&Path>, value: &str) -> Result<(String, PathBuf), String> {
    file(dir, value, "openb_pod_list_", "--trace")
}

/// A node list by name (`gpu_node`, `all_node`) or by path.
pub fn node_list(dir: Option<&Path>, value: &str) -> Result<(String, PathBuf), String> {
    file(dir, value, "openb_node_list_", "--nodes")
}

/// Every pod list in `dir`, by name, sorted.
pub fn all_pod_lists(dir: &Path) -> Result<Vec<String>, String> {
    let entries =
        std::fs::read_dir(dir).map_err(|err| format!("{}: cannot list: {err}", dir.display()))?;
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_prefix("openb_pod_list_")?.strip_suffix(".csv").map(str::to_string)
        })
        .collect();
    names.sort();
    Ok(names)
}

/// Whether `value` names a file by path rather than a trace by name.
pub fn is_path(value: &str) -> bool {
    value.contains(std::path::MAIN_SEPARATOR) || value.contains('/') || value.ends_with(".csv")
}

fn file(
    dir: Option<&Path>,
    value: &str,
    prefix: &str,
    flag: &str,
) -> Result<(String, PathBuf), String> {
    if is_path(value) {
        let path = PathBuf::from(value);
        if !path.is_file() {
            return Err(format!("{flag} {value}: no such file"));
        }
        let stem = path.file_stem().map_or(value.to_string(), |s| s.to_string_lossy().into_owned());
        let name = stem.strip_prefix(prefix).unwrap_or(&stem).to_string();
        return Ok((name, path));
    }
    let Some(dir) = dir else {
        return Err(format!("{flag} {value}: a name needs the trace folder"));
    };
    let path = dir.join(format!("{prefix}{value}.csv"));
    if path.is_file() {
        return Ok((value.to_string(), path));
    }
    let known: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            let mut names: Vec<String> = entries
                .filter_map(Result::ok)
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    name.strip_prefix(prefix)?.strip_suffix(".csv").map(str::to_string)
                })
                .collect();
            names.sort();
            names
        })
        .unwrap_or_default();
    Err(format!(
        "{flag} {value}: there is no {} in {}; known: {}",
        path.file_name().map_or(String::new(), |n| n.to_string_lossy().into_owned()),
        dir.display(),
        if known.is_empty() { "none".to_string() } else { known.join(", ") }
    ))
}
