//! The MCP tools' answers for embedding models: their rows of `list_models` and `get_prices`,
//! and their `estimate_cost` (input tokens, special tokens included), by the rule `billing`
//! charges with (`Units::InputTokens`).

use super::data::McpData;
use super::estimate::{Estimate, EstimateArgs};
use super::tools::{EmbeddingPriceRow, ListModelsArgs, ModelSummary};
use crate::billing::Units;
use crate::catalog::embedding::{EmbeddingModelEntry, EMBEDDING_RULE};
use crate::catalog::record::usd_per_million;
use crate::catalog::record::EmbeddingModelRecord;
use crate::catalog::PricePerMTok;

impl McpData {
    /// The embedding models `list_models` lists under `a`'s filters (`min_context` against the
    /// longest input; an embedding model has no output price, so any output limit passes).
    pub(super) fn embedding_summaries(
        &self,
        a: &ListModelsArgs,
        max_input: Option<PricePerMTok>,
    ) -> Vec<ModelSummary> {
        let eq = |want: &Option<String>, have: &str| {
            want.as_deref().is_none_or(|w| w.eq_ignore_ascii_case(have))
        };
        self.catalog
            .embedding
            .iter()
            .filter(|m| eq(&a.maker, &m.maker) && eq(&a.family, &m.family))
            .filter(|_| a.modality.as_deref().is_none_or(|x| x == "text"))
            .filter(|m| max_input.is_none_or(|p| m.pricing.input <= p))
            .filter(|m| a.commercial_use.is_none_or(|c| m.commercial_use == c))
            .filter(|m| a.min_context.is_none_or(|c| m.max_input_tokens >= c))
            .map(|m| self.embedding_summary(m))
            .collect()
    }

    fn embedding_summary(&self, m: &EmbeddingModelEntry) -> ModelSummary {
        let available = crate::engine::embedding_weights_present(&self.weights_dir.join(&m.path));
        ModelSummary {
            id: m.id.clone(),
            kind: "embedding",
            name: m.name.clone(),
            maker: m.maker.clone(),
            family: m.family.clone(),
            parameters: m.parameters.clone(),
            context_length: m.max_input_tokens,
            input_modalities: vec!["text".into()],
            input_per_million_usd: usd_per_million(m.pricing.input),
            output_per_million_usd: usd_per_million(PricePerMTok(0)),
            input_micros_per_mtok: m.pricing.input.0,
            output_micros_per_mtok: 0,
            commercial_use: m.commercial_use,
            available: available.is_ok(),
            unavailable_reason: available.err(),
        }
    }

    /// The embedding models' rows of `get_prices`.
    pub fn embedding_prices(&self) -> Vec<EmbeddingPriceRow> {
        self.catalog
            .embedding
            .iter()
            .map(|m| EmbeddingPriceRow {
                id: m.id.clone(),
                pricing: EmbeddingModelRecord::of(m, Ok(())).pricing,
                commercial_use: m.commercial_use,
            })
            .collect()
    }

    /// `estimate_cost` when `a.model` is an embedding model; `None` for any other id.
    pub fn estimate_embedding(&self, a: &EstimateArgs) -> Option<Result<Estimate, String>> {
        self.catalog
            .embedding_model(&a.model)
            .map(|m| self.estimate(m, a))
    }

    /// `estimate_cost` for embedding model `m`: `prompt_tokens` if given, else the tokens of
    /// `input` (or `prompt`) as one input, by the model's tokenizer when its weights are here,
    /// else 4 characters per token plus 2 special tokens.
    ///
    /// # Errors
    /// None of `prompt_tokens`, `input`, `prompt` given.
    fn estimate(&self, m: &EmbeddingModelEntry, a: &EstimateArgs) -> Result<Estimate, String> {
        let text = a.input.as_deref().or(a.prompt.as_deref());
        let (tokens, counted_by, tokenizer) =
            match (a.prompt_tokens, text) {
                (Some(n), _) => (n, "given".to_owned(), None),
                (None, None) => return Err(
                    "Give `input` (the text to embed) or `prompt_tokens` for an embedding model."
                        .into(),
                ),
                (None, Some(t)) => match self.embedding_count(m, t) {
                    Some((source, n)) => (n as u64, "tokenizer".to_owned(), Some(source)),
                    None => (
                        (t.chars().count() as u64).div_ceil(4) + 2,
                        "4 characters per token".to_owned(),
                        None,
                    ),
                },
            };
        let max = u64::try_from(m.max_input_tokens).unwrap_or(u64::MAX);
        let fits = tokens <= max;
        let cost = Units::InputTokens {
            count: tokens,
            per_million: m.pricing.input,
        }
        .priced()
        .cost;
        Ok(Estimate {
            model: m.id.clone(),
            prompt_tokens: tokens,
            completion_tokens: 0,
            counted_by,
            tokenizer,
            cost_micros: cost,
            cost_usd: cost.usd(),
            input_micros_per_mtok: m.pricing.input.0,
            output_micros_per_mtok: 0,
            rule: EMBEDDING_RULE,
            language: None,
            language_detected: false,
            language_multiplier: None,
            context_length: m.max_input_tokens,
            fits_context: fits,
            hold_micros: cost,
            warning: (!fits).then(|| format!(
                "`{}` reads at most {max} tokens per input; a longer one gets 400 `input_too_long` (nothing is truncated).",
                m.id
            )),
            commercial_use: m.commercial_use,
            audio_seconds: None,
            input_characters: None,
        })
    }
}
