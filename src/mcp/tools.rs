//! What each MCP tool answers, as plain functions over [`McpData`] (no protocol here, so they are
//! unit-tested directly). Inputs and outputs are `schemars` types: the tools' JSON Schemas.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::data::McpData;
use crate::catalog::record::{usd_per_million, ModelRecord};
use crate::catalog::{ModelEntry, PricePerMTok};
use crate::reference;

/// Most characters of prompt text `estimate_cost` counts (the API's body limit is 4 MiB).
pub const MAX_ESTIMATE_CHARS: usize = 1 << 20;
/// Most characters of a `search_reference` query.
pub const MAX_QUERY_CHARS: usize = 256;

/// The ledger's rounding rule, stated in every cost answer.
pub const COST_RULE: &str = "cost_micros = ceil((prompt_tokens * input_micros_per_mtok + completion_tokens * output_micros_per_mtok) / 1_000_000), in integers; 1 micro = 1e-6 USD";

/// `list_models` input.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = super::schema::optional_not_null)]
pub struct ListModelsArgs {
    /// Only models by this maker (case-insensitive), e.g. `Meta`.
    pub maker: Option<String>,
    /// Only this family (case-insensitive), e.g. `llama`.
    pub family: Option<String>,
    /// Only models that read this input modality: `text` or `image`.
    pub modality: Option<String>,
    /// Highest input price in USD per 1M tokens, e.g. 0.1 (at most 6 decimals).
    pub max_input_price: Option<f64>,
    /// Highest output price in USD per 1M tokens.
    pub max_output_price: Option<f64>,
    /// true: only models whose licence allows commercial serving (requests for the others get
    /// 403); false: only the others.
    pub commercial_use: Option<bool>,
    /// Smallest context window, in tokens.
    pub min_context: Option<usize>,
    /// Order: `id` (default), `price` (input, then output; cheapest first), `price_desc`,
    /// `context` (largest first).
    pub sort: Option<SortKey>,
    /// Only models of this kind: `chat` (chat and text completions) or `embedding`
    /// (`POST /v1/embeddings`). Default: both.
    pub kind: Option<String>,
}

/// `list_models` order.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum SortKey {
    Id,
    Price,
    PriceDesc,
    Context,
}

/// One model in a list.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ModelSummary {
    pub id: String,
    /// `chat` or `embedding`.
    pub kind: &'static str,
    pub name: String,
    pub maker: String,
    pub family: String,
    /// Parameter count, e.g. `135M`.
    pub parameters: String,
    /// Tokens.
    pub context_length: usize,
    pub input_modalities: Vec<String>,
    /// USD per 1M input tokens (exact decimal).
    pub input_per_million_usd: String,
    /// USD per 1M output tokens (exact decimal).
    pub output_per_million_usd: String,
    /// Micro-USD per 1M input tokens (what the ledger charges by).
    pub input_micros_per_mtok: i64,
    /// Micro-USD per 1M output tokens.
    pub output_micros_per_mtok: i64,
    pub commercial_use: bool,
    /// Servable here now (loaded, or its weights on this machine or fetchable).
    pub available: bool,
    /// Why not, when `available` is false.
    pub unavailable_reason: Option<String>,
}

/// `list_models` output.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ModelList {
    pub count: usize,
    pub models: Vec<ModelSummary>,
}

/// `get_model` input.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelId {
    /// A model id, as in `GET /v1/models`.
    pub id: String,
}

/// `get_prices` output.
#[derive(Debug, Serialize, JsonSchema)]
pub struct PriceList {
    /// Always `USD`.
    pub currency: &'static str,
    /// What the prices are per.
    pub unit: &'static str,
    /// How a request's cost is computed from them.
    pub rule: &'static str,
    pub prices: Vec<PriceRow>,
    /// Speech models: per minute of audio (transcription) or per 1M input characters (speech).
    pub audio_prices: Vec<AudioPriceRow>,
    /// Embedding models: per 1M input tokens.
    pub embedding_prices: Vec<EmbeddingPriceRow>,
}

/// One model's list prices.
#[derive(Debug, Serialize, JsonSchema)]
pub struct PriceRow {
    pub id: String,
    pub input_per_million_usd: String,
    pub output_per_million_usd: String,
    pub input_micros_per_mtok: i64,
    pub output_micros_per_mtok: i64,
    /// false: requests get 403 (the licence forbids commercial serving).
    pub commercial_use: bool,
}

/// One speech model's list price.
#[derive(Debug, Serialize, JsonSchema)]
pub struct AudioPriceRow {
    pub id: String,
    /// `transcription` or `speech`.
    pub kind: &'static str,
    pub pricing: crate::catalog::record::AudioPricingRecord,
    /// false: requests get 403.
    pub commercial_use: bool,
}

/// One embedding model's list price.
#[derive(Debug, Serialize, JsonSchema)]
pub struct EmbeddingPriceRow {
    pub id: String,
    pub pricing: crate::catalog::record::EmbeddingPricingRecord,
    /// false: requests get 403.
    pub commercial_use: bool,
}

/// A chat message for `estimate_cost`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MessageArg {
    /// `system`, `developer`, `user` or `assistant`.
    pub role: String,
    pub content: String,
}

/// `language_costs` input.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = super::schema::optional_not_null)]
pub struct LanguageArgs {
    /// One model (default: every model).
    pub model: Option<String>,
    /// One language, ISO 639-1 or 639-3 (default: every measured language).
    pub language: Option<String>,
    /// Most models in one answer (default 10, at most 50); see `next_offset`.
    pub limit: Option<usize>,
    /// Models to skip, in catalogue order (default 0).
    pub offset: Option<usize>,
}

/// One language's measurement.
#[derive(Debug, Serialize, JsonSchema)]
pub struct LanguageCost {
    /// Tokens per 1,000 characters of the text.
    pub tokens_per_1000_chars: f64,
    /// Tokens vs English for the same passages.
    pub multiplier: f64,
}

/// One model's language costs.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ModelLanguageCosts {
    pub model: String,
    /// Provenance of the tokenizer measured with.
    pub tokenizer: Option<String>,
    /// By ISO 639-3 code; null when not measured (see `reason`).
    pub languages: Option<BTreeMap<String, LanguageCost>>,
    pub reason: Option<String>,
}

/// `language_costs` output.
#[derive(Debug, Serialize, JsonSchema)]
pub struct LanguageCosts {
    /// The text measured on.
    pub corpus: &'static str,
    pub models: Vec<ModelLanguageCosts>,
    /// Models that match, over all pages.
    pub total: usize,
    /// The `offset` of the next page, when there is one.
    pub next_offset: Option<usize>,
}

/// `search_reference` input.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = super::schema::optional_not_null)]
pub struct SearchArgs {
    /// Words to look for, e.g. `idempotency retry` or `402`.
    pub query: String,
    /// Most results (default 5).
    pub limit: Option<usize>,
}

/// A matching reference page.
#[derive(Debug, Serialize, JsonSchema)]
pub struct SearchHit {
    /// Page id, for `get_reference`.
    pub id: String,
    pub title: String,
    /// The resource URI of the page.
    pub uri: String,
    pub score: u32,
    pub snippet: String,
}

/// `search_reference` output.
#[derive(Debug, Serialize, JsonSchema)]
pub struct SearchResults {
    pub results: Vec<SearchHit>,
}

/// `get_reference` input.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PageId {
    /// Page id: `endpoints`, `requests`, `errors`, `idempotency`, `limits`, `costs`,
    /// `examples` or `mcp`.
    pub id: String,
}

/// `get_reference` output.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ReferencePage {
    pub id: String,
    pub title: String,
    pub uri: String,
    pub markdown: String,
}

/// The resource URI of a reference page.
pub fn page_uri(id: &str) -> String {
    format!("tollgate://reference/{id}")
}

fn price_limit(usd: Option<f64>, field: &str) -> Result<Option<PricePerMTok>, String> {
    usd.map(|x| PricePerMTok::parse(&format!("{x}")).map_err(|e| format!("`{field}`: {e}")))
        .transpose()
}

fn summary(m: &ModelEntry, available: Result<(), String>) -> ModelSummary {
    ModelSummary {
        available: available.is_ok(),
        unavailable_reason: available.err(),
        id: m.id.clone(),
        kind: "chat",
        name: m.name.clone(),
        maker: m.maker.clone(),
        family: m.family.clone(),
        parameters: m.parameters.clone(),
        context_length: m.context_length,
        input_modalities: m.input_modalities.clone(),
        input_per_million_usd: usd_per_million(m.pricing.input),
        output_per_million_usd: usd_per_million(m.pricing.output),
        input_micros_per_mtok: m.pricing.input.0,
        output_micros_per_mtok: m.pricing.output.0,
        commercial_use: m.commercial_use,
    }
}

impl McpData {
    pub(super) fn model(&self, id: &str) -> Result<&ModelEntry, String> {
        self.catalog.get(id).ok_or_else(|| {
            format!(
                "No model `{id}`; `list_models` gives the ids (e.g. `{}`).",
                self.catalog.models.first().map_or("", |m| m.id.as_str())
            )
        })
    }

    /// Whether `m` is loaded, and whether it is servable here (`Err`: the short reason).
    fn availability(&self, m: &ModelEntry) -> (bool, Result<(), String>) {
        let loaded = self
            .engine
            .as_ref()
            .is_some_and(|e| e.loaded().iter().any(|l| l.id == m.id));
        let available = if loaded {
            Ok(())
        } else {
            crate::engine::availability(m, &self.weights_dir).map_err(|(short, _)| short)
        };
        (loaded, available)
    }

    /// `list_models`.
    ///
    /// # Errors
    /// A price with more than 6 decimals or negative; an unknown modality.
    pub fn list_models(&self, a: &ListModelsArgs) -> Result<ModelList, String> {
        let max_in = price_limit(a.max_input_price, "max_input_price")?;
        let max_out = price_limit(a.max_output_price, "max_output_price")?;
        if let Some(m) = a.modality.as_deref() {
            if m != "text" && m != "image" {
                return Err(format!("`modality` is `text` or `image`, not `{m}`."));
            }
        }
        let (chat, embedding) = match a.kind.as_deref() {
            None => (true, true),
            Some("chat") => (true, false),
            Some("embedding") => (false, true),
            Some(k) => return Err(format!("`kind` is `chat` or `embedding`, not `{k}`.")),
        };
        let eq = |want: &Option<String>, have: &str| {
            want.as_deref().is_none_or(|w| w.eq_ignore_ascii_case(have))
        };
        let models: Vec<&ModelEntry> = self
            .catalog
            .models
            .iter()
            .filter(|m| eq(&a.maker, &m.maker) && eq(&a.family, &m.family))
            .filter(|m| {
                a.modality
                    .as_ref()
                    .is_none_or(|x| m.input_modalities.contains(x))
            })
            .filter(|m| max_in.is_none_or(|p| m.pricing.input <= p))
            .filter(|m| max_out.is_none_or(|p| m.pricing.output <= p))
            .filter(|m| a.commercial_use.is_none_or(|c| m.commercial_use == c))
            .filter(|m| a.min_context.is_none_or(|c| m.context_length >= c))
            .filter(|_| chat)
            .collect();
        let mut rows: Vec<ModelSummary> = models
            .into_iter()
            .map(|m| summary(m, self.availability(m).1))
            .collect();
        if embedding {
            rows.extend(self.embedding_summaries(a, max_in));
        }
        let price = |m: &ModelSummary| (m.input_micros_per_mtok, m.output_micros_per_mtok);
        match a.sort.unwrap_or(SortKey::Id) {
            SortKey::Id => rows.sort_by(|x, y| x.id.cmp(&y.id)),
            SortKey::Price => rows.sort_by(|x, y| price(x).cmp(&price(y)).then(x.id.cmp(&y.id))),
            SortKey::PriceDesc => {
                rows.sort_by(|x, y| price(y).cmp(&price(x)).then(x.id.cmp(&y.id)));
            }
            SortKey::Context => rows.sort_by(|x, y| {
                y.context_length
                    .cmp(&x.context_length)
                    .then(x.id.cmp(&y.id))
            }),
        }
        Ok(ModelList {
            count: rows.len(),
            models: rows,
        })
    }

    /// `get_model`: the record `GET /v1/models/{id}` answers.
    ///
    /// # Errors
    /// Unknown id.
    pub fn get_model(&self, id: &str) -> Result<ModelRecord, String> {
        let m = self.model(id)?;
        let (loaded, available) = self.availability(m);
        let languages = self.languages.get(&m.id).and_then(|l| l.multipliers());
        Ok(ModelRecord::of(
            m,
            self.accepted_parameters,
            languages,
            loaded,
            available,
        ))
    }

    /// `get_prices`.
    pub fn get_prices(&self) -> PriceList {
        PriceList {
            currency: "USD",
            unit: "per 1M tokens, separately for input (prompt) and output (completion) tokens",
            rule: COST_RULE,
            prices: self
                .catalog
                .models
                .iter()
                .map(|m| PriceRow {
                    id: m.id.clone(),
                    input_per_million_usd: usd_per_million(m.pricing.input),
                    output_per_million_usd: usd_per_million(m.pricing.output),
                    input_micros_per_mtok: m.pricing.input.0,
                    output_micros_per_mtok: m.pricing.output.0,
                    commercial_use: m.commercial_use,
                })
                .collect(),
            audio_prices: self.audio_prices(),
            embedding_prices: self.embedding_prices(),
        }
    }

    /// `language_costs`.
    ///
    /// # Errors
    /// Unknown model or language code.
    pub fn language_costs(&self, a: &LanguageArgs) -> Result<LanguageCosts, String> {
        let all: Vec<&ModelEntry> = match a.model.as_deref() {
            Some(id) => vec![self.model(id)?],
            None => self.catalog.models.iter().collect(),
        };
        let (total, offset) = (all.len(), a.offset.unwrap_or(0));
        let limit = a.limit.unwrap_or(10).clamp(1, 50);
        let models: Vec<&ModelEntry> = all.into_iter().skip(offset).take(limit).collect();
        let next_offset = (offset.saturating_add(limit) < total).then(|| offset + limit);
        let lang = a
            .language
            .as_deref()
            .map(super::language::language_code)
            .transpose()?;
        Ok(LanguageCosts {
            corpus: "Universal Declaration of Human Rights (the same articles in each language)",
            models: models
                .into_iter()
                .map(|m| {
                    let l = self.languages.get(&m.id);
                    ModelLanguageCosts {
                        model: m.id.clone(),
                        tokenizer: l.and_then(|l| l.tokenizer.clone()),
                        languages: l.and_then(|l| l.languages.as_ref()).map(|langs| {
                            langs
                                .iter()
                                .filter(|(code, _)| {
                                    lang.as_deref().is_none_or(|w| w == code.as_str())
                                })
                                .map(|(code, c)| {
                                    (
                                        code.clone(),
                                        LanguageCost {
                                            tokens_per_1000_chars: c.tokens_per_1000_chars,
                                            multiplier: c.multiplier,
                                        },
                                    )
                                })
                                .collect()
                        }),
                        reason: match l {
                            Some(l) => l.reason.clone(),
                            None => Some("not measured yet".into()),
                        },
                    }
                })
                .collect(),
            total,
            next_offset,
        })
    }

    /// `search_reference`: the first [`MAX_QUERY_CHARS`] characters of the query.
    pub fn search_reference(&self, a: &SearchArgs) -> SearchResults {
        let query: String = a.query.chars().take(MAX_QUERY_CHARS).collect();
        SearchResults {
            results: reference::search(&query, a.limit.unwrap_or(5).clamp(1, 20))
                .into_iter()
                .map(|h| SearchHit {
                    id: h.id.into(),
                    title: h.title.into(),
                    uri: page_uri(h.id),
                    score: h.score,
                    snippet: h.snippet,
                })
                .collect(),
        }
    }

    /// `get_reference`.
    ///
    /// # Errors
    /// Unknown page id.
    pub fn get_reference(&self, id: &str) -> Result<ReferencePage, String> {
        let p = reference::page(id).ok_or_else(|| {
            let ids: Vec<&str> = reference::PAGES.iter().map(|p| p.id).collect();
            format!("No page `{id}`; pages: {}.", ids.join(", "))
        })?;
        Ok(ReferencePage {
            id: p.id.into(),
            title: p.title.into(),
            uri: page_uri(p.id),
            markdown: p.markdown.into(),
        })
    }
}
