//! Loading one model for the engine (`load`): its weights (a GGUF file or a Hugging Face
//! directory), tokenizer, chat template and vision part, as the engine thread's `Runtime` and
//! the request side's `Front`.
//!
//! Owns: turning files into a loaded model. May use: the weights readers, the model, the text
//! and vision types. Never: the engine thread's loop, HTTP.

use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use candle_core::Device;

use super::counters::Counters;
use super::front::Front;
use super::thread::Runtime;
use crate::engine::error::EngineError;
use crate::engine::model::attention::KvType;
use crate::engine::model::Transformer;
use crate::engine::text::hf_files;
use crate::engine::text::prompt::PromptFormat;
use crate::engine::text::template::ChatTemplate;
use crate::engine::text::tokenizer::ModelTokenizer;
use crate::engine::vision::VisionModel;
use crate::engine::weights::gguf::GgufFile;
use crate::engine::weights::progress::Preparing;
use crate::engine::weights::resolve;
use crate::engine::weights::safetensors::{self as st, HfModel, MatrixType};
use crate::engine::weights::store::TensorStore;

/// The vision part (`mmproj`) of a model that reads images: the first of its sources present
/// or fetchable; `None` for a text model.
///
/// # Errors
/// `Load` naming every source tried, when the model reads images and none is found: such a
/// model is refused, never served with its images dropped.
pub(super) fn vision_part(
    entry: &crate::catalog::ModelEntry,
    weights_dir: &std::path::Path,
    progress: (&Preparing, &str),
) -> Result<Option<PathBuf>, EngineError> {
    if !entry.reads_images() {
        return Ok(None);
    }
    let tried = match resolve::first_source(&entry.mmproj, weights_dir, progress) {
        Ok(path) => return Ok(Some(path)),
        Err(tried) => tried,
    };
    Err(EngineError::Load {
        model: entry.id.clone(),
        message: format!(
            "the model reads images, but its vision part (mmproj) was not found; tried: {}",
            if tried.is_empty() {
                "no source".to_owned()
            } else {
                tried.join("; ")
            }
        ),
    })
}

/// Load one model: weights, tokenizer and chat template (the file's, else the built-in
/// `builtin` names, else the architecture's default), serving up to `catalog_ctx` tokens; and
/// its vision part from an `mmproj` file, with the catalogue's `image_pixels` if set; on
/// `device`, its KV caches stored as `kv`.
pub(super) fn load(
    id: &str,
    path: &std::path::Path,
    catalog_ctx: usize,
    builtin: Option<&str>,
    mmproj: Option<(&std::path::Path, Option<[usize; 2]>)>,
    (device, kv): (&Device, KvType),
) -> Result<(Runtime, Front), EngineError> {
    let err = |e: anyhow::Error| EngineError::Load {
        model: id.to_owned(),
        message: format!("{e:#}"),
    };
    let started = Instant::now();
    // A GGUF file's template compiles with its tokenizer; a checkpoint directory's once its
    // architecture is known.
    let (mut store, tokenizer, compiled, own): (Box<dyn TensorStore>, _, _, _) = if path.is_dir() {
        (
            Box::new(HfModel::open(path, device, MatrixType::Q8_0).map_err(err)?),
            ModelTokenizer::from_hf_dir(path).map_err(err)?,
            None,
            hf_files::chat_template(path).map_err(err)?,
        )
    } else {
        let file = GgufFile::open(path, device).map_err(err)?;
        let format = PromptFormat::of_gguf(&file, builtin).map_err(err)?;
        (
            Box::new(file),
            format.tokenizer,
            Some(format.template),
            None,
        )
    };
    let tokenizer = Arc::new(tokenizer);
    let arch = store.architecture().map_err(err)?;
    let template = match compiled {
        Some(template) => template,
        None => ChatTemplate::new(own.as_deref(), builtin.unwrap_or(&arch)).map_err(err)?,
    };
    let file_ctx = store.usize_or(&format!("{arch}.context_length"), 4096);
    let context_length = file_ctx.min(catalog_ctx.max(1));
    let mut model = Transformer::load_for_context(store.as_mut(), context_length).map_err(err)?;
    model.kv_type = kv;
    let context_length = model.config.context_length.min(context_length);
    let vision = match mmproj {
        None => None,
        Some((p, pixels)) => {
            let mut v = VisionModel::open(p).map_err(err)?;
            if let Some([min, max]) = pixels {
                v = v.with_pixel_range(min, max);
            }
            if v.text_width() != model.config.hidden {
                return Err(err(anyhow::anyhow!(
                    "the vision part `{}` writes rows of {} values, the model takes {}",
                    p.display(),
                    v.text_width(),
                    model.config.hidden
                )));
            }
            Some(Arc::new(v))
        }
    };
    tracing::info!(
        model = id, arch = %arch, layers = model.config.n_layers, context_length,
        template = %template.source,
        load_ms = started.elapsed().as_millis() as u64,
        "model loaded"
    );
    let counts = Arc::new(Counters::default());
    let front = Front {
        id: id.to_owned(),
        context_length,
        tokenizer: tokenizer.clone(),
        template,
        counts: counts.clone(),
        bytes: weights_bytes(path),
        last_used: AtomicU64::new(0),
        grammar_env: OnceLock::new(),
        vision,
    };
    Ok((Runtime::new(id, Box::new(model), tokenizer, counts), front))
}

/// Bytes of a weights file, or of a Hugging Face directory's safetensors files.
pub(super) fn weights_bytes(path: &std::path::Path) -> u64 {
    let files = if path.is_dir() {
        st::safetensors_files(path).unwrap_or_default()
    } else {
        vec![path.to_owned()]
    };
    files
        .iter()
        .map(|f| std::fs::metadata(f).map(|m| m.len()).unwrap_or(0))
        .sum()
}
