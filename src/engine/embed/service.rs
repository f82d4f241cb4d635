//! `Embedder`: the worker that serves embedding requests. Models load on first use and stay
//! loaded (memory-mapped weights); requests queue to one worker thread, which runs the queued
//! requests of one model together, so many small requests share forward passes the way many
//! inputs of one request do (`EmbeddingModel::embed` packs the rows end to end, without
//! padding).
//!
//! Owns: the model cache, the queue and its thread. May use: the `EmbeddingEncoder` seam
//! (`EmbeddingModel`, or `FakeEncoder` for `Embedder::fake`), tokio's oneshot channels. Never:
//! HTTP, money.
//!
//! Sharing the CPU: candle runs each forward on rayon's global pool, as the text engine does,
//! so an embedding batch and a text generation step share the cores at the same priority.
//! One forward is at most `super::MAX_BATCH_TOKENS` tokens, so a text step waits at most one
//! forward (tens to hundreds of milliseconds).

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};

use tokio::sync::oneshot;

use super::seam::EmbeddingEncoder;
use super::{EmbedError, EmbeddingModel, FakeEncoder};

/// Rows the worker takes from the queue at once (one or more requests of one model).
pub const MAX_ROUND_ROWS: usize = 256;

/// The vectors of one job, in its row order.
type Reply = oneshot::Sender<Result<Vec<Vec<f32>>, EmbedError>>;

/// One request's rows, waiting for the worker.
struct Job {
    model: Arc<dyn EmbeddingEncoder>,
    rows: Vec<Vec<u32>>,
    reply: Reply,
}

/// What the clones of one `Embedder` share.
#[derive(Default)]
struct Shared {
    /// Where models come from: `None` reads sentence-transformers folders; `Some` is the FAKE
    /// encoder for every folder (`Embedder::fake`).
    fake: Option<(usize, usize)>,
    models: Mutex<HashMap<PathBuf, Arc<dyn EmbeddingEncoder>>>,
    queue: Mutex<VecDeque<Job>>,
    queued: Condvar,
    /// The worker thread, started with the first job (a server that never embeds starts
    /// none); `Err` when the thread could not be spawned.
    worker: OnceLock<Result<(), String>>,
}

/// The embedding worker (module doc). Cheap to clone: clones share the worker and the loaded
/// models.
#[derive(Clone, Default)]
pub struct Embedder(Arc<Shared>);

impl Embedder {
    /// A worker with no model loaded and no thread started.
    pub fn new() -> Self {
        Self::default()
    }

    /// FAKE: a worker whose every folder is a `FakeEncoder` of `dimensions` and `max_tokens`
    /// (no weights read), for HTTP tests of the embeddings path without weights.
    pub fn fake(dimensions: usize, max_tokens: usize) -> Self {
        Self(Arc::new(Shared {
            fake: Some((dimensions, max_tokens)),
            ..Shared::default()
        }))
    }

    /// Whether the sentence-transformers folder `dir` can be served here; `Err` with a short
    /// reason (no paths).
    pub fn available(&self, dir: &Path) -> Result<(), String> {
        match self.loaded(dir) {
            Some(_) => Ok(()),
            None if self.0.fake.is_some() => Ok(()),
            None => super::weights_present(dir),
        }
    }

    fn loaded(&self, dir: &Path) -> Option<Arc<dyn EmbeddingEncoder>> {
        let models = self.0.models.lock().unwrap_or_else(PoisonError::into_inner);
        models.get(dir).cloned()
    }

    /// The model in `dir`, loaded on first use. Blocking (reads configuration, maps the
    /// weights): call from a blocking task.
    ///
    /// # Errors
    /// `Load`.
    pub fn model(&self, dir: &Path) -> Result<Arc<dyn EmbeddingEncoder>, EmbedError> {
        if let Some(m) = self.loaded(dir) {
            return Ok(m);
        }
        let model: Arc<dyn EmbeddingEncoder> = match self.0.fake {
            Some((dimensions, max_tokens)) => Arc::new(FakeEncoder::new(dimensions, max_tokens)),
            None => Arc::new(EmbeddingModel::load(dir)?),
        };
        let mut models = self.0.models.lock().unwrap_or_else(PoisonError::into_inner);
        // Two first requests may both load; the first stored wins and the other is dropped.
        Ok(models.entry(dir.to_owned()).or_insert(model).clone())
    }

    /// Queue `rows` (from `model.tokenize`) for `model`; the receiver gets one unit-length
    /// vector per row, in order, or the error of the forward pass. A stopped worker reads as
    /// a closed channel.
    pub fn submit(
        &self,
        model: Arc<dyn EmbeddingEncoder>,
        rows: Vec<Vec<u32>>,
    ) -> oneshot::Receiver<Result<Vec<Vec<f32>>, EmbedError>> {
        let (reply, rx) = oneshot::channel();
        if let Err(e) = self.start() {
            // The receiver reads the error; nothing was queued.
            let _ = reply.send(Err(EmbedError::Forward(e)));
            return rx;
        }
        let job = Job { model, rows, reply };
        self.0
            .queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push_back(job);
        self.0.queued.notify_one();
        rx
    }

    fn start(&self) -> Result<(), String> {
        let shared = self.0.clone();
        self.0
            .worker
            .get_or_init(|| {
                std::thread::Builder::new()
                    .name("embeddings".into())
                    .spawn(move || work(&shared))
                    .map(drop)
                    .map_err(|e| format!("could not start the embedding thread: {e}"))
            })
            .clone()
    }
}

/// The worker's loop: take a round of jobs, embed their rows together, answer each.
fn work(shared: &Shared) {
    loop {
        let mut round = next_round(shared);
        let model = round[0].model.clone();
        let counts: Vec<usize> = round.iter().map(|j| j.rows.len()).collect();
        let rows: Vec<Vec<u32>> = round
            .iter_mut()
            .flat_map(|j| std::mem::take(&mut j.rows))
            .collect();
        match model.embed(&rows) {
            Ok(vectors) => {
                let mut vectors = vectors.into_iter();
                for (job, count) in round.into_iter().zip(counts) {
                    let mine = vectors.by_ref().take(count).collect();
                    let _ = job.reply.send(Ok(mine));
                }
            }
            Err(e) => {
                let message = e.to_string();
                for job in round {
                    let _ = job.reply.send(Err(EmbedError::Forward(message.clone())));
                }
            }
        }
    }
}

/// The first queued job and the others of the same model queued behind it, up to
/// `MAX_ROUND_ROWS` rows in all (the first job is taken whatever its size). Waits for one.
fn next_round(shared: &Shared) -> Vec<Job> {
    let mut queue = shared.queue.lock().unwrap_or_else(PoisonError::into_inner);
    let first = loop {
        match queue.pop_front() {
            Some(job) => break job,
            None => {
                queue = shared
                    .queued
                    .wait(queue)
                    .unwrap_or_else(PoisonError::into_inner);
            }
        }
    };
    let mut rows = first.rows.len();
    let mut round = vec![first];
    let mut rest = VecDeque::with_capacity(queue.len());
    while let Some(job) = queue.pop_front() {
        if Arc::ptr_eq(&job.model, &round[0].model) && rows + job.rows.len() <= MAX_ROUND_ROWS {
            rows += job.rows.len();
            round.push(job);
        } else {
            rest.push_back(job);
        }
    }
    *queue = rest;
    round
}
