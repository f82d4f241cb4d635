//! Progress of the slow steps before a model can run: fetching its weights from the hub (bytes
//! of the file's total, logged every few seconds with an estimate of the time left) and loading
//! them. The loader writes a shared table; `/health`, `/v1/models` and the dashboard read
//! snapshots of it, so a model being prepared shows as such instead of a request just hanging.
//!
//! Owns: the table of models being prepared and the download log lines. May use: hf-hub's
//! `Progress` trait. Never: HTTP.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

pub use crate::catalog::record::{Preparation, Stage};

/// How often a running download logs its progress.
pub const LOG_EVERY: Duration = Duration::from_secs(5);

struct Entry {
    stage: Stage,
    file: Option<String>,
    bytes: u64,
    total: u64,
    started: Instant,
}

impl Entry {
    fn snapshot(&self, model: &str) -> Preparation {
        let percent = (self.stage == Stage::Downloading && self.total > 0)
            .then(|| u8::try_from((self.bytes.min(self.total) * 100) / self.total).unwrap_or(100));
        Preparation {
            model: model.to_owned(),
            stage: self.stage,
            file: self.file.clone(),
            bytes: self.bytes,
            total_bytes: self.total,
            percent,
            elapsed_ms: u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX),
        }
    }
}

/// The models being prepared now (cheap to clone: one shared table).
#[derive(Clone, Default)]
pub struct Preparing(Arc<Mutex<BTreeMap<String, Entry>>>);

impl Preparing {
    fn with<T>(&self, f: impl FnOnce(&mut BTreeMap<String, Entry>) -> T) -> T {
        f(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Every model being prepared, by id.
    #[must_use]
    pub fn snapshot(&self) -> Vec<Preparation> {
        self.with(|t| t.iter().map(|(m, e)| e.snapshot(m)).collect())
    }

    /// Mark `model` as being prepared (loading) until the returned guard drops.
    #[must_use]
    pub fn start(&self, model: &str) -> Guard {
        self.with(|t| {
            t.insert(
                model.to_owned(),
                Entry {
                    stage: Stage::Loading,
                    file: None,
                    bytes: 0,
                    total: 0,
                    started: Instant::now(),
                },
            )
        });
        Guard {
            table: self.clone(),
            model: model.to_owned(),
        }
    }

    /// A download observer for `model` (hf-hub's `Progress`): it moves the model to
    /// `Downloading` while a file arrives and back to `Loading` when it ends.
    #[must_use]
    pub fn download(&self, model: &str) -> Download {
        Download {
            table: self.clone(),
            model: model.to_owned(),
            file: String::new(),
            bytes: 0,
            total: 0,
            started: Instant::now(),
            logged: Instant::now(),
        }
    }

    fn set(&self, model: &str, stage: Stage, file: Option<&str>, bytes: u64, total: u64) {
        self.with(|t| {
            if let Some(e) = t.get_mut(model) {
                e.stage = stage;
                e.file = file.map(str::to_owned);
                e.bytes = bytes;
                e.total = total;
            }
        });
    }
}

/// Removes its model from the table when dropped (loaded, failed or panicked alike).
pub struct Guard {
    table: Preparing,
    model: String,
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.table.with(|t| t.remove(&self.model));
    }
}

/// One file's download of one model: updates the table and logs bytes, total and the time
/// left every `LOG_EVERY`.
pub struct Download {
    table: Preparing,
    model: String,
    file: String,
    bytes: u64,
    total: u64,
    started: Instant,
    logged: Instant,
}

impl Download {
    /// Put this download's bytes so far in the table.
    fn publish(&self) {
        let file = Some(self.file.as_str());
        self.table.set(
            &self.model,
            Stage::Downloading,
            file,
            self.bytes,
            self.total,
        );
    }

    /// Seconds left at the average rate so far (`None` before any byte arrived).
    fn eta_s(&self) -> Option<u64> {
        let secs = self.started.elapsed().as_secs_f64();
        (self.bytes > 0 && secs > 0.0).then(|| {
            let rate = self.bytes as f64 / secs;
            (self.total.saturating_sub(self.bytes) as f64 / rate).ceil() as u64
        })
    }
}

impl hf_hub::api::Progress for Download {
    // hf-hub calls `init` again (then `update` with the bytes already on disk) for each
    // attempt at the same file: count afresh, and log the start once.
    fn init(&mut self, size: usize, filename: &str) {
        if self.file != filename {
            self.file = filename.to_owned();
            self.started = Instant::now();
            self.logged = self.started;
            tracing::info!(model = %self.model, file = %self.file, total_bytes = size, "downloading");
        }
        self.bytes = 0;
        self.total = size as u64;
        self.publish();
    }

    fn update(&mut self, size: usize) {
        self.bytes += size as u64;
        self.publish();
        if self.logged.elapsed() >= LOG_EVERY {
            self.logged = Instant::now();
            let percent = (self.bytes * 100).checked_div(self.total).unwrap_or(0);
            tracing::info!(model = %self.model, file = %self.file, bytes = self.bytes,
                total_bytes = self.total, percent, eta_s = self.eta_s(), "downloading");
        }
    }

    fn finish(&mut self) {
        tracing::info!(model = %self.model, file = %self.file, bytes = self.bytes,
            ms = self.started.elapsed().as_millis() as u64, "downloaded");
        self.table.set(&self.model, Stage::Loading, None, 0, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hf_hub::api::Progress;

    fn get(table: &Preparing, model: &str) -> Option<Preparation> {
        table.snapshot().into_iter().find(|p| p.model == model)
    }

    #[test]
    fn a_download_reports_its_fraction_then_loading_then_nothing() {
        let table = Preparing::default();
        let guard = table.start("m");
        assert_eq!(get(&table, "m").unwrap().stage, Stage::Loading);
        assert_eq!(get(&table, "m").unwrap().percent, None);
        let mut d = table.download("m");
        d.init(1000, "model.gguf");
        d.update(250);
        let p = get(&table, "m").unwrap();
        assert_eq!(
            (p.stage, p.bytes, p.total_bytes, p.percent),
            (Stage::Downloading, 250, 1000, Some(25))
        );
        assert_eq!(p.file.as_deref(), Some("model.gguf"));
        d.update(750);
        assert_eq!(get(&table, "m").unwrap().percent, Some(100));
        assert_eq!(d.eta_s(), Some(0));
        d.finish();
        assert_eq!(get(&table, "m").unwrap().stage, Stage::Loading);
        assert_eq!(table.snapshot().len(), 1);
        drop(guard);
        assert!(table.snapshot().is_empty());
    }

    #[test]
    fn a_download_of_a_model_not_being_prepared_changes_nothing() {
        let table = Preparing::default();
        let mut d = table.download("m");
        d.init(10, "f");
        d.update(5);
        assert!(table.snapshot().is_empty());
    }
}
