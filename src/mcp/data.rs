//! What the MCP tools read, shared by every session: the catalogue, language costs, the engine
//! (for token counts), the OpenAPI document, and tokenizers read on first use.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use crate::catalog::embedding::EmbeddingModelEntry;
use crate::catalog::{Catalog, ModelEntry};
use crate::engine::{
    tokenizer_for, ChatInput, ChatMessage, ModelLanguages, PromptFormat, SharedEngine,
    TextTokenizer,
};

/// A tokenizer and where it came from (`gguf:<file>`, `tokenizer.json:<dir>`).
type SourcedTokenizer = (String, TextTokenizer);
/// A GGUF file's prompt format and the file (`gguf:<file>`).
type SourcedFormat = (String, PromptFormat);
/// Things read once per model id and kept (`None`: there is none).
type Cache<T> = Mutex<HashMap<String, Option<Arc<T>>>>;

/// `key`'s entry of `cache`, built (once) by `build` when absent.
fn cached<T>(cache: &Cache<T>, key: &str, build: impl FnOnce() -> Option<T>) -> Option<Arc<T>> {
    let hit = cache
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(key)
        .cloned();
    match hit {
        Some(t) => t,
        None => {
            let t = build().map(Arc::new);
            cache
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(key.to_owned(), t.clone());
            t
        }
    }
}

/// What the tools read. Shared by every MCP session.
pub struct McpData {
    pub catalog: Arc<Catalog>,
    /// Measured language costs by model id.
    pub languages: Arc<BTreeMap<String, ModelLanguages>>,
    /// The running engine (`None` for `mcp --stdio`, which runs no model).
    pub engine: Option<SharedEngine>,
    pub weights_dir: Arc<PathBuf>,
    /// Reference tokenizers (`data/tokenizers`) for models whose weights are not here.
    pub tokenizers_dir: PathBuf,
    /// Request fields the API accepts (`supported_parameters` of model records).
    pub accepted_parameters: &'static [&'static str],
    /// The OpenAPI document of `/v1` (JSON text).
    pub openapi: String,
    /// Tokenizers read so far, by model id (with their provenance).
    tokenizers: Cache<SourcedTokenizer>,
    /// Prompt formats (tokenizer and chat template) read from GGUF files so far, by model id.
    formats: Cache<SourcedFormat>,
    /// Embedding models' tokenizers (`tokenizer.json`, no truncation) read so far, by model id.
    embedding_tokenizers: Cache<tokenizers::Tokenizer>,
}

impl McpData {
    /// Data for the tools.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        catalog: Arc<Catalog>,
        languages: Arc<BTreeMap<String, ModelLanguages>>,
        engine: Option<SharedEngine>,
        weights_dir: Arc<PathBuf>,
        tokenizers_dir: PathBuf,
        accepted_parameters: &'static [&'static str],
        openapi: String,
    ) -> Self {
        Self {
            catalog,
            languages,
            engine,
            weights_dir,
            tokenizers_dir,
            accepted_parameters,
            openapi,
            tokenizers: Mutex::new(HashMap::new()),
            formats: Mutex::new(HashMap::new()),
            embedding_tokenizers: Mutex::new(HashMap::new()),
        }
    }

    /// Prompt tokens of `input` as a request for `m` is billed (its chat template and tokenizer,
    /// BOS included), read from its GGUF file here without loading the model; `None` when the
    /// file is not on this machine or cannot be read.
    pub(super) fn template_count(
        &self,
        m: &ModelEntry,
        input: &ChatInput,
    ) -> Option<(String, usize)> {
        let f = cached(&self.formats, &m.id, || {
            let path = m.local_path(&self.weights_dir).filter(|p| p.is_file())?;
            let name = path.file_name()?.to_string_lossy().into_owned();
            let format = PromptFormat::open(&path, m.chat_template.as_deref()).ok()?;
            Some((format!("gguf:{name}"), format))
        })?;
        let ids = f.1.ids(&m.id, input, usize::MAX).ok()?;
        Some((f.0.clone(), ids.len()))
    }

    /// Tokens of `text` as embedding model `m` bills them (its tokenizer, special tokens
    /// included), with the tokenizer's provenance; `None` when its weights are not here.
    pub(super) fn embedding_count(
        &self,
        m: &EmbeddingModelEntry,
        text: &str,
    ) -> Option<(String, usize)> {
        let dir = self.weights_dir.join(&m.path);
        let t = cached(&self.embedding_tokenizers, &m.id, || {
            let mut t = tokenizers::Tokenizer::from_file(dir.join("tokenizer.json")).ok()?;
            t.with_truncation(None).ok()?;
            t.with_padding(None);
            Some(t)
        })?;
        let n = t.encode(text, true).ok()?.len();
        Some((format!("tokenizer.json:{}", m.path), n))
    }

    /// Tokens of the messages' text with `m`'s own (or reference) tokenizer, read once and
    /// kept; `None` when there is none.
    pub(super) fn tokenizer_count(
        &self,
        m: &ModelEntry,
        chat: &[ChatMessage],
    ) -> Option<(String, usize)> {
        let t = cached(&self.tokenizers, &m.id, || {
            tokenizer_for(m, &self.weights_dir, &self.tokenizers_dir).ok()
        })?;
        let mut n = 0;
        for c in chat {
            n += t.1.count(&c.content).ok()?;
        }
        Some((t.0.clone(), n))
    }
}
