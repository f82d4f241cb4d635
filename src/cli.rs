//! Command line (clap): `tollgate serve`, `tollgate models`.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::app::{EngineKind, ServeConfig};

#[derive(Debug, Parser)]
#[command(
    name = "tollgate",
    version,
    about = "OpenAI-compatible chat completions on open-weight models, with a prepaid ledger"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the HTTP server.
    Serve(ServeArgs),
    /// Print the catalogue: id, maker, licence flag, prices, whether weights are present.
    Models {
        #[arg(long, env = "TOLLGATE_MODELS", default_value = "models.toml")]
        models: PathBuf,
        #[arg(long, env = "TOLLGATE_WEIGHTS", default_value = "weights")]
        weights: PathBuf,
    },
}

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "TOLLGATE_BIND", default_value = "127.0.0.1:8080")]
    pub bind: SocketAddr,
    /// The catalogue file.
    #[arg(long, env = "TOLLGATE_MODELS", default_value = "models.toml")]
    pub models: PathBuf,
    /// Directory that catalogue weight paths are relative to.
    #[arg(long, env = "TOLLGATE_WEIGHTS", default_value = "weights")]
    pub weights: PathBuf,
    /// Model ids to load at start-up (comma-separated); default: every catalogue model.
    #[arg(long, env = "TOLLGATE_LOAD", value_delimiter = ',')]
    pub load: Vec<String>,
    /// Compute threads for inference (sets candle's and rayon's pools). Default: all cores.
    #[arg(long, env = "TOLLGATE_THREADS")]
    pub threads: Option<usize>,
    /// `cpu` or `cuda` (needs a build with `--features cuda`).
    #[arg(long, env = "TOLLGATE_DEVICE", default_value = "cpu")]
    pub device: String,
    /// `candle` (real models) or `fake` (deterministic test engine, no model).
    #[arg(long, env = "TOLLGATE_ENGINE", value_enum, default_value = "candle")]
    pub engine: EngineKind,
    /// Requests that may wait for the engine; more get 429 `engine_overloaded`.
    #[arg(long, env = "TOLLGATE_QUEUE_DEPTH", default_value_t = 64)]
    pub queue_depth: usize,
    /// Most sequences decoded together in one batch.
    #[arg(long, env = "TOLLGATE_MAX_BATCH", default_value_t = 16)]
    pub max_batch: usize,
    /// Most tokens per forward step (decode tokens plus prefill chunks).
    #[arg(long, env = "TOLLGATE_STEP_TOKENS", default_value_t = 256)]
    pub step_tokens: usize,
}

impl ServeArgs {
    pub fn config(&self) -> ServeConfig {
        ServeConfig {
            bind: self.bind,
            catalog: self.models.clone(),
            weights: self.weights.clone(),
            load: self.load.clone(),
            device: self.device.clone(),
            engine: self.engine,
            queue_depth: self.queue_depth,
            max_batch: self.max_batch,
            step_tokens: self.step_tokens,
        }
    }
}

/// Set the compute thread count for candle and rayon. Must run before any other thread exists
/// (candle sizes its pool once, from the environment).
pub fn set_compute_threads(threads: Option<usize>) {
    let n = threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, std::num::NonZero::get))
        .max(1);
    // SAFETY-free in edition 2021: called from `main` before the runtime or any thread starts.
    std::env::set_var("CANDLE_NUM_THREADS", n.to_string());
    std::env::set_var("RAYON_NUM_THREADS", n.to_string());
}
