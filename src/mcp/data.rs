//! What the MCP tools read, shared by every session: the catalogue, language costs, the engine
//! (for token counts), the OpenAPI document, and tokenizers read on first use.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use crate::catalog::{Catalog, ModelEntry};
use crate::engine::languages::{tokenizer_for, ModelLanguages, TextTokenizer};
use crate::engine::{ChatMessage, SharedEngine};

/// A tokenizer and where it came from (`gguf:<file>`, `tokenizer.json:<dir>`).
type SourcedTokenizer = (String, TextTokenizer);

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
    tokenizers: Mutex<HashMap<String, Option<Arc<SourcedTokenizer>>>>,
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
        }
    }

    /// Tokens of the messages' text with `m`'s own (or reference) tokenizer, read once and
    /// kept; `None` when there is none.
    pub(super) fn tokenizer_count(
        &self,
        m: &ModelEntry,
        chat: &[ChatMessage],
    ) -> Option<(String, usize)> {
        let cached = self
            .tokenizers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&m.id)
            .cloned();
        let t = match cached {
            Some(t) => t,
            None => {
                let t = tokenizer_for(m, &self.weights_dir, &self.tokenizers_dir)
                    .ok()
                    .map(Arc::new);
                self.tokenizers
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(m.id.clone(), t.clone());
                t
            }
        }?;
        let mut n = 0;
        for c in chat {
            n += t.1.count(&c.content).ok()?;
        }
        Some((t.0.clone(), n))
    }
}
