//! `CandleEngine`: loads models (a GGUF file, or a Hugging Face directory of safetensors,
//! `config.json` and `tokenizer.json`) and runs them on one dedicated engine thread.
//!
//! All models share one thread because candle's CPU thread pool is process-global (two forwards
//! at once would serialise and spin). Models named at start-up load before the server listens,
//! so a bad weights file fails start-up; other catalogue models load on first use (their weights
//! found or fetched by `resolve`), on the requesting thread, and are then handed to the engine
//! thread.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Instant;

use candle_core::Device;

use super::draft;
use super::front::Front;
use super::loader::{load, vision_part, weights_bytes};
use super::prepare::{constrained_prompt, place_error, prompt_floor};
use super::scheduler::{self, ChoiceTx, Job};
use super::tenants::{Book, Refusal, TenantLimits};
use super::thread::{Cmd, Limits, Runtime};
use crate::catalog::Catalog;
use crate::engine::error::EngineError;
use crate::engine::model::attention::KvTypes;
use crate::engine::seam::{Engine, GenerateRequest, Generation, LoadedModel, ModelStats, Prompt};
use crate::engine::text::chat::ChatInput;
use crate::engine::vision::{ImageBounds, ImageConfig};
use crate::engine::weights::progress::Preparing;
use crate::engine::weights::resolve;

/// What to load and how to run it.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// (catalogue id, weights file, catalogue context length) for each model to load at start.
    pub models: Vec<(String, PathBuf, usize)>,
    pub device: Device,
    /// Jobs that may wait in the admission queue; more get `Overloaded`.
    pub queue_depth: usize,
    /// Jobs one account may have waiting, and sequences one key may have waiting and running
    /// (`tenants::TenantLimits`); 0 takes `TenantLimits::for_queue`'s default for each.
    pub queued_per_account: usize,
    pub sequences_per_key: usize,
    /// `scheduler::Limits::interleave_ms` (0: off).
    pub interleave_ms: u64,
    pub limits_max_batch: usize,
    pub limits_step_tokens: usize,
    /// Most decode and draft tokens per step for speculative decoding (0: off); see
    /// `scheduler::Limits::speculative_tokens`.
    pub speculative_tokens: usize,
    /// A step's weight read in rows, for whether drafts pay in a batch (`WEIGHT_READ_ROWS`
    /// in the server; a test of outputs sets it high so every draft is tried).
    pub weight_read_rows: usize,
    /// Load each model's catalogue `draft` beside it when its weights are on the machine.
    pub draft_models: bool,
    /// How each model's KV cache stores keys and values (a draft model's as its target's).
    pub kv_cache: KvTypes,
    /// Catalogue and weights directory for loading other models on first use (`None`: only the
    /// models above are served).
    pub on_demand: Option<(Arc<Catalog>, PathBuf)>,
    /// Most bytes of weights resident at once (0: no limit). Loading past it first evicts the
    /// least recently used idle models.
    pub memory_budget: u64,
    /// Bytes of KV cache the running sequences may reserve (0: no limit); see
    /// `scheduler::Limits::kv_cache_bytes`.
    pub kv_cache_budget: u64,
    /// Bytes of KV blocks each model's prefix cache keeps (0: no prefix cache); see
    /// `prefix_cache`.
    pub prefix_cache_budget: u64,
    /// The bounds on request images: one request's decode bytes and the server's decode
    /// budget (`vision::budget`).
    pub images: ImageConfig,
}

/// Real inference with candle.
pub struct CandleEngine {
    /// Loaded models; the index is the engine thread's runtime index (`None`: evicted).
    fronts: RwLock<Vec<Option<Arc<Front>>>>,
    tx: SyncSender<Cmd>,
    device: Device,
    on_demand: Option<(Arc<Catalog>, PathBuf)>,
    /// Serialises on-demand loads (so indexes stay in step with the engine thread).
    load_lock: Mutex<()>,
    memory_budget: u64,
    started: Instant,
    /// `EngineConfig::draft_models`.
    draft_models: bool,
    /// `EngineConfig::kv_cache`.
    kv_cache: KvTypes,
    /// Models being fetched or loaded on demand now.
    preparing: Preparing,
    /// The bounds on request images and the server's decode budget.
    images: ImageBounds,
    /// The tenants' places in the queue and the batch (`tenants`).
    book: Arc<Book>,
    /// `drain` was called: new jobs are refused.
    draining: AtomicBool,
}

/// The tenant caps of `config`: its own where set, the defaults for its queue and batch else.
fn tenant_limits(config: &EngineConfig) -> TenantLimits {
    let mut t = TenantLimits::for_queue(config.queue_depth, config.limits_max_batch.max(1));
    if config.queued_per_account > 0 {
        t.queued_per_account = config.queued_per_account;
    }
    if config.sequences_per_key > 0 {
        t.sequences_per_key = config.sequences_per_key;
    }
    t
}

impl CandleEngine {
    /// Load the configured models and start the engine thread.
    ///
    /// # Errors
    /// The first model that fails to load (missing file, unsupported architecture or tokenizer).
    pub fn start(config: EngineConfig) -> Result<Self, EngineError> {
        // The book bounds the jobs in flight; the channel only carries them to the engine
        // thread, which takes them off at once, with room for load and control commands.
        let (tx, rx) = sync_channel::<Cmd>(config.queue_depth.max(1) + 16);
        let book = Book::new(tenant_limits(&config));
        let limits = Limits {
            max_batch: config.limits_max_batch.max(1),
            step_tokens: config.limits_step_tokens.max(1),
            kv_cache_bytes: usize::try_from(config.kv_cache_budget).unwrap_or(usize::MAX),
            prefix_cache_bytes: usize::try_from(config.prefix_cache_budget).unwrap_or(usize::MAX),
            speculative_tokens: config.speculative_tokens,
            weight_read_rows: config.weight_read_rows,
            interleave_ms: config.interleave_ms,
        };
        let mut runtimes = Vec::new();
        let mut fronts = Vec::new();
        for (id, path, ctx) in &config.models {
            let entry = config.on_demand.as_ref().and_then(|(c, _)| c.get(id));
            let builtin = entry.and_then(|e| e.chat_template.as_deref());
            let mmproj = match (entry, &config.on_demand) {
                (Some(entry), Some((_, dir))) => {
                    vision_part(entry, dir, (&Preparing::default(), id))?
                }
                _ => None,
            };
            let pixels = entry.and_then(|e| e.image_pixels);
            let vision = mmproj.as_deref().map(|p| (p, pixels));
            let kv = config.kv_cache.of(id);
            let (mut rt, front) = load(id, path, *ctx, builtin, vision, (&config.device, kv))?;
            if let (Some(entry), Some((catalog, dir)), true) =
                (entry, &config.on_demand, config.draft_models)
            {
                let on = (&config.device, kv);
                let d = draft::load_draft(catalog, entry, dir, on, &rt.tokenizer)?;
                rt = rt.with_draft(d);
            }
            runtimes.push(rt);
            fronts.push(Some(Arc::new(front)));
        }
        std::thread::Builder::new()
            .name("tollgate-engine".into())
            .spawn(move || scheduler::run(runtimes, &rx, limits))
            .map_err(|e| EngineError::Load {
                model: "*".into(),
                message: format!("cannot spawn engine thread: {e}"),
            })?;
        Ok(Self {
            fronts: RwLock::new(fronts),
            tx,
            device: config.device,
            on_demand: config.on_demand,
            load_lock: Mutex::new(()),
            memory_budget: config.memory_budget,
            started: Instant::now(),
            draft_models: config.draft_models,
            kv_cache: config.kv_cache,
            preparing: Preparing::default(),
            images: ImageBounds::new(config.images),
            book,
            draining: AtomicBool::new(false),
        })
    }

    fn front(&self, model: &str) -> Option<(usize, Arc<Front>)> {
        let fronts = self.fronts.read().unwrap_or_else(PoisonError::into_inner);
        fronts
            .iter()
            .enumerate()
            .find_map(|(i, f)| f.as_ref().filter(|f| f.id == model).map(|f| (i, f.clone())))
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Evict least recently used idle models until `incoming` more bytes fit the budget.
    /// Called under the load lock.
    fn make_room(&self, incoming: u64) -> Result<(), EngineError> {
        if self.memory_budget == 0 {
            return Ok(());
        }
        let mut fronts = self.fronts.write().unwrap_or_else(PoisonError::into_inner);
        loop {
            let resident: u64 = fronts.iter().flatten().map(|f| f.bytes).sum();
            if resident + incoming <= self.memory_budget {
                return Ok(());
            }
            let idle = fronts
                .iter()
                .enumerate()
                .filter_map(|(i, f)| f.as_ref().map(|f| (i, f)))
                .filter(|(_, f)| f.counts.running() == 0 && f.counts.waiting() == 0)
                .min_by_key(|(_, f)| f.last_used.load(Ordering::Relaxed))
                .map(|(i, _)| i);
            let Some(i) = idle else {
                return Err(EngineError::NoRoom {
                    needed: incoming,
                    budget: self.memory_budget,
                });
            };
            tracing::info!(model = %fronts[i].as_ref().map_or("", |f| f.id.as_str()), "evicting to make room");
            fronts[i] = None;
            self.tx
                .send(Cmd::Unload(i))
                .map_err(|_| EngineError::ShutDown)?;
        }
    }

    /// The loaded model, loading it first (fetching its weights if needed) when it is in the
    /// catalogue. Blocking.
    fn ensure_loaded(&self, model: &str) -> Result<(usize, Arc<Front>), EngineError> {
        if let Some(f) = self.front(model) {
            return Ok(f);
        }
        let Some((catalog, weights_dir)) = &self.on_demand else {
            return Err(EngineError::ModelNotLoaded(model.to_owned()));
        };
        let entry = catalog
            .get(model)
            .ok_or_else(|| EngineError::ModelNotLoaded(model.to_owned()))?;
        let _guard = self
            .load_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(f) = self.front(model) {
            return Ok(f);
        }
        let (rt, front) = self.load_first_source(entry, weights_dir)?;
        let front = Arc::new(front);
        let mut fronts = self.fronts.write().unwrap_or_else(PoisonError::into_inner);
        self.tx
            .send(Cmd::Load(Box::new(rt)))
            .map_err(|_| EngineError::ShutDown)?;
        fronts.push(Some(front.clone()));
        Ok((fronts.len() - 1, front))
    }

    /// Load `entry` from the first of its sources that is present (or fetchable) and loads: a
    /// source whose files fail to load (a tokenizer or architecture the engine refuses, a
    /// corrupt file) is logged and the next one is tried. Blocking.
    ///
    /// # Errors
    /// `Load` naming every source tried when files were found but none loaded; `Unavailable`
    /// when no source had files; memory-budget errors at once.
    fn load_first_source(
        &self,
        entry: &crate::catalog::ModelEntry,
        weights_dir: &std::path::Path,
    ) -> Result<(Runtime, Front), EngineError> {
        let _preparing = self.preparing.start(&entry.id);
        let progress = (&self.preparing, entry.id.as_str());
        let mut tried = Vec::new();
        let mut found = false;
        for src in &entry.sources {
            let path = match resolve::try_source(src, weights_dir, progress) {
                Ok(path) => path,
                Err(why) => {
                    tried.push(format!("{}: {why}", src.describe()));
                    continue;
                }
            };
            found = true;
            let mmproj = vision_part(entry, weights_dir, progress)?;
            let vision_bytes = mmproj.as_deref().map_or(0, weights_bytes);
            self.make_room(weights_bytes(&path) + vision_bytes)?;
            let builtin = entry.chat_template.as_deref();
            match load(
                &entry.id,
                &path,
                entry.context_length,
                builtin,
                mmproj.as_deref().map(|p| (p, entry.image_pixels)),
                (&self.device, self.kv_cache.of(&entry.id)),
            ) {
                Ok((rt, front)) => {
                    let on = (&self.device, self.kv_cache.of(&entry.id));
                    let d = match (&self.on_demand, self.draft_models) {
                        (Some((catalog, dir)), true) => {
                            draft::load_draft(catalog, entry, dir, on, &rt.tokenizer)?
                        }
                        _ => None,
                    };
                    return Ok((rt.with_draft(d), front));
                }
                Err(EngineError::Load { message, .. }) => {
                    tracing::warn!(model = %entry.id, source = %src.describe(), error = %message,
                        "weights failed to load; trying the next source");
                    tried.push(format!("{}: {message}", src.describe()));
                }
                Err(e) => return Err(e),
            }
        }
        if found {
            return Err(EngineError::Load {
                model: entry.id.clone(),
                message: tried.join("; "),
            });
        }
        Err(EngineError::Unavailable {
            model: entry.id.clone(),
            tried,
        })
    }
}

impl Engine for CandleEngine {
    fn loaded(&self) -> Vec<LoadedModel> {
        let fronts = self.fronts.read().unwrap_or_else(PoisonError::into_inner);
        fronts
            .iter()
            .flatten()
            .map(|f| LoadedModel {
                id: f.id.clone(),
                context_length: f.context_length,
            })
            .collect()
    }

    fn load(&self, model: &str) -> Result<(), EngineError> {
        // Marked used at once, so a concurrent load does not evict it before `prepare`.
        let (_, f) = self.ensure_loaded(model)?;
        f.last_used.store(self.now_ms(), Ordering::Relaxed);
        Ok(())
    }

    fn prepare(&self, model: &str, input: &ChatInput) -> Result<Prompt, EngineError> {
        let (_, f) = self
            .front(model)
            .ok_or_else(|| EngineError::ModelNotLoaded(model.to_owned()))?;
        f.last_used.store(self.now_ms(), Ordering::Relaxed);
        constrained_prompt(&f, model, input, &self.images)
    }

    fn prompt_floor(&self, model: &str, input: &ChatInput) -> Result<usize, EngineError> {
        let (_, f) = self
            .front(model)
            .ok_or_else(|| EngineError::ModelNotLoaded(model.to_owned()))?;
        prompt_floor(&f, input)
    }

    fn count_prompt_tokens(&self, model: &str, input: &ChatInput) -> Option<usize> {
        let (_, f) = self.front(model)?;
        // A count, not a prompt to run: past the context too (the estimate says by how much).
        crate::engine::text::prompt::prompt_ids(&f.id, &f.tokenizer, &f.template, input, usize::MAX)
            .ok()
            .map(|ids| ids.len())
    }

    fn encode_images(&self, prompt: &mut Prompt) -> Result<(), EngineError> {
        let Some(pending) = prompt.pending_images.take() else {
            return Ok(());
        };
        let (_, f) = self
            .front(&prompt.model)
            .ok_or_else(|| EngineError::ModelNotLoaded(prompt.model.clone()))?;
        let vision = f.vision.as_ref().ok_or(EngineError::NoVision)?;
        let started = Instant::now();
        let limits = vision.limits(&self.images.per_image);
        pending
            .encode(vision, &mut prompt.images, &self.images.decode, &limits)
            .map_err(place_error)?;
        f.counts.encoded(pending.len());
        metrics::histogram!("tollgate_image_encode_seconds", "model" => f.id.clone())
            .record(started.elapsed().as_secs_f64());
        Ok(())
    }

    fn submit(&self, request: GenerateRequest) -> Result<Vec<Generation>, EngineError> {
        if request.prompt.pending_images.is_some() {
            return Err(EngineError::Unencoded);
        }
        if self.draining.load(Ordering::Relaxed) {
            return Err(EngineError::ShutDown);
        }
        let (index, f) = self
            .front(&request.prompt.model)
            .ok_or_else(|| EngineError::ModelNotLoaded(request.prompt.model.clone()))?;
        let place = self
            .book
            .enter(request.tenant, request.n)
            .map_err(|r| match r {
                Refusal::QueueFull => EngineError::Overloaded,
                Refusal::Account(limit) => EngineError::TenantLimit {
                    scope: "the account",
                    limit,
                },
                Refusal::Key(limit) => EngineError::TenantLimit {
                    scope: "the API key",
                    limit,
                },
            })?;
        let mut handles = Vec::with_capacity(request.n.max(1));
        let mut senders: Vec<ChoiceTx> = (0..request.n.max(1))
            .map(|_| {
                let (events_tx, events) = tokio::sync::mpsc::unbounded_channel();
                let (outcome_tx, outcome) = tokio::sync::oneshot::channel();
                handles.push(Generation { events, outcome });
                ChoiceTx {
                    events: events_tx,
                    outcome: outcome_tx,
                }
            })
            .collect();
        let first = senders.remove(0);
        f.counts.queued();
        let job = Job {
            model: index,
            request,
            events: first.events,
            outcome: first.outcome,
            forks: senders,
            queued: Instant::now(),
            place,
        };
        match self.tx.try_send(Cmd::Job(Box::new(job))) {
            Ok(()) => Ok(handles),
            Err(e) => {
                f.counts.refused();
                Err(match e {
                    TrySendError::Full(_) => EngineError::Overloaded,
                    TrySendError::Disconnected(_) => EngineError::ShutDown,
                })
            }
        }
    }

    fn preparing(&self) -> Vec<crate::engine::weights::progress::Preparation> {
        self.preparing.snapshot()
    }

    fn drain(&self) {
        self.draining.store(true, Ordering::Relaxed);
        let _ = self.tx.send(Cmd::Drain);
    }

    fn cancel_running(&self) {
        let _ = self.tx.send(Cmd::CancelRunning);
    }

    fn stats(&self) -> Vec<ModelStats> {
        let fronts = self.fronts.read().unwrap_or_else(PoisonError::into_inner);
        fronts
            .iter()
            .flatten()
            .map(|f| {
                let (draft_tokens, accepted_draft_tokens) = f.counts.drafts();
                ModelStats {
                    model: f.id.clone(),
                    running: f.counts.running(),
                    waiting: f.counts.waiting(),
                    images_encoded: f.counts.images_encoded(),
                    draft_tokens,
                    accepted_draft_tokens,
                }
            })
            .collect()
    }
}
