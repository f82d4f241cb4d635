//! The public record of a catalogue model, as `GET /v1/models` and the MCP server show it:
//! OpenAI's model object (`id`, `object`, `created`, `owned_by`) plus an OpenRouter-style
//! superset with exact prices, the licence flag and measured language costs. Also an
//! `utoipa::ToSchema`, so the OpenAPI document describes exactly what is sent.

use std::collections::BTreeMap;

use serde::Serialize;
use utoipa::ToSchema;

use super::audio::{AudioKind, AudioModelEntry, UnitPrice};
use super::embedding::{EmbeddingModelEntry, EMBEDDING_RULE};
use super::{ModelEntry, PricePerMTok};

/// `GET /v1/models`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ModelList {
    /// Always `list`.
    #[schema(example = "list")]
    pub object: &'static str,
    pub data: Vec<ListedModel>,
}

/// An entry of `GET /v1/models`: a chat model, a speech model or an embedding model (told
/// apart by `kind`, which chat models do not have: `transcription`, `speech`, `embedding`).
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub enum ListedModel {
    Chat(ModelRecord),
    Audio(AudioModelRecord),
    Embedding(EmbeddingModelRecord),
}

/// A speech model: OpenAI's model object plus its kind, unit price, voices and licence.
#[derive(Debug, Serialize, ToSchema, schemars::JsonSchema)]
pub struct AudioModelRecord {
    /// Model id, used as `model` in `/v1/audio/...` requests.
    pub id: String,
    /// Always `model`.
    pub object: &'static str,
    /// Unix seconds.
    pub created: i64,
    pub owned_by: String,
    pub name: String,
    /// `transcription` (`/v1/audio/transcriptions`, `/v1/audio/translations`) or `speech`
    /// (`/v1/audio/speech`).
    pub kind: &'static str,
    /// Parameter count, e.g. `74M`.
    pub parameters: String,
    pub architecture: AudioArchitecture,
    pub pricing: AudioPricingRecord,
    /// The `voice` names a speech model takes (OpenAI's names are aliases of the first).
    pub voices: Vec<String>,
    pub license: License,
    /// Servable here now (its weights and helpers are on this machine).
    pub available: bool,
    /// Why not, when `available` is false.
    pub unavailable_reason: Option<String>,
}

/// What a speech model reads and writes.
#[derive(Debug, Serialize, ToSchema, schemars::JsonSchema)]
pub struct AudioArchitecture {
    pub input_modalities: Vec<&'static str>,
    pub output_modalities: Vec<&'static str>,
}

/// A speech model's list price per unit.
#[derive(Debug, Serialize, ToSchema, schemars::JsonSchema)]
pub struct AudioPricingRecord {
    /// `minute` (of audio, billed in whole seconds rounded up) or `1M characters` (of input).
    pub unit: &'static str,
    /// USD per unit, exact decimal string.
    #[schema(example = "0.0006")]
    pub per_unit_usd: String,
    /// Micro-USD per unit: what the ledger charges by.
    pub micros_per_unit: i64,
    /// How a request's cost follows from the price, in integer micro-USD.
    pub rule: &'static str,
    /// Always `USD`.
    pub currency: &'static str,
}

/// The cost rule of transcriptions (`billing::transcription_micros`).
pub const TRANSCRIPTION_RULE: &str =
    "cost_micros = ceil(ceil(audio_ms / 1000) * micros_per_unit / 60): whole seconds of decoded audio, rounded up";
/// The cost rule of speech (`billing::speech_micros`).
pub const SPEECH_RULE: &str =
    "cost_micros = ceil(input_characters * micros_per_unit / 1_000_000): Unicode characters of `input`";

impl AudioModelRecord {
    /// The record of `m`; `available` is `Err` with a short reason when it is not servable.
    pub fn of(m: &AudioModelEntry, available: Result<(), String>) -> Self {
        let (kind, unit, price, rule, input, output) = match m.kind {
            AudioKind::Transcription => (
                "transcription",
                "minute",
                m.pricing.per_minute,
                TRANSCRIPTION_RULE,
                "audio",
                "text",
            ),
            AudioKind::Speech => (
                "speech",
                "1M characters",
                m.pricing.per_million_characters,
                SPEECH_RULE,
                "text",
                "audio",
            ),
        };
        let price = price.unwrap_or(UnitPrice(crate::money::Micros(0)));
        Self {
            id: m.id.clone(),
            object: "model",
            created: m.created,
            owned_by: m.maker.clone(),
            name: m.name.clone(),
            kind,
            parameters: m.parameters.clone(),
            architecture: AudioArchitecture {
                input_modalities: vec![input],
                output_modalities: vec![output],
            },
            pricing: AudioPricingRecord {
                unit,
                per_unit_usd: usd_per_unit(price),
                micros_per_unit: price.0 .0,
                rule,
                currency: "USD",
            },
            voices: m.voices.clone(),
            license: License {
                name: m.license.clone(),
                url: m.license_url.clone(),
                commercial_use: m.commercial_use,
                attribution: None,
                use_policy: None,
            },
            available: available.is_ok(),
            unavailable_reason: available.err(),
        }
    }
}

/// USD per unit as an exact decimal string, at least two decimals (`"0.0006"`, `"1.00"`).
pub fn usd_per_unit(p: UnitPrice) -> String {
    usd_per_million(PricePerMTok(p.0 .0))
}

/// One model: OpenAI's model object (`id`, `object`, `created`, `owned_by`) plus an
/// OpenRouter-style superset with prices, licence and measured language costs.
#[derive(Debug, Serialize, ToSchema, schemars::JsonSchema)]
pub struct ModelRecord {
    /// Model id, used as `model` in chat requests.
    pub id: String,
    /// Always `model`.
    pub object: &'static str,
    /// Unix seconds.
    pub created: i64,
    /// The maker.
    pub owned_by: String,
    pub name: String,
    pub family: String,
    /// Parameter count, e.g. `135M`.
    pub parameters: String,
    /// Context window, tokens.
    pub context_length: usize,
    /// Weight format served, e.g. `Q4_1`.
    pub quantization: String,
    pub architecture: Architecture,
    pub pricing: ModelPricing,
    pub license: License,
    /// A base (pretrained, not instruction-tuned) model: it continues text rather than answer
    /// chat turns, so the playground does not offer it; the API serves it all the same.
    pub base: bool,
    /// Request fields `POST /v1/chat/completions` accepts for this model.
    pub supported_parameters: Vec<&'static str>,
    /// Tokens per character relative to English, by language code (ISO 639-3), when measured.
    pub languages: Option<std::collections::BTreeMap<String, f64>>,
    /// In memory now.
    pub loaded: bool,
    /// Servable here now: loaded, its weights on this machine (or in the hub cache), or
    /// fetchable from a Hugging Face hub this server reaches.
    pub available: bool,
    /// Why not, when `available` is false (short, no paths), e.g. `no weights on this server`.
    pub unavailable_reason: Option<String>,
    /// Being fetched or loaded now (the first request for it waits for this): the stage, and
    /// for a download the bytes so far, the file's size and the percentage.
    pub preparing: Option<Box<Preparation>>,
}

/// What a model reads and writes.
#[derive(Debug, Serialize, ToSchema, schemars::JsonSchema)]
pub struct Architecture {
    /// `text`, and `image` for models that read images.
    pub input_modalities: Vec<String>,
    pub output_modalities: Vec<&'static str>,
    pub tokenizer: String,
}

/// List prices. Exact decimal strings; the integers are what the ledger charges by.
#[derive(Debug, Serialize, ToSchema, schemars::JsonSchema)]
pub struct ModelPricing {
    /// USD per input token (OpenRouter's form).
    #[schema(example = "0.00000002")]
    pub prompt: String,
    /// USD per output token.
    pub completion: String,
    /// USD per cached input token (a prompt token the prefix cache supplied; OpenRouter's
    /// `input_cache_read`).
    pub input_cache_read: String,
    /// USD per 1M input tokens.
    #[schema(example = "0.02")]
    pub input_per_million_usd: String,
    /// USD per 1M output tokens.
    pub output_per_million_usd: String,
    /// USD per 1M cached input tokens.
    pub cached_input_per_million_usd: String,
    /// Micro-USD per 1M input tokens.
    pub input_micros_per_mtok: i64,
    /// Micro-USD per 1M cached input tokens (the catalogue's `cached_input`, else a tenth of
    /// the input price, rounded down).
    pub cached_input_micros_per_mtok: i64,
    /// Micro-USD per 1M output tokens.
    pub output_micros_per_mtok: i64,
    /// Always `USD`.
    pub currency: &'static str,
}

/// The licence and whether it allows serving the model commercially (403 if not), with what
/// the licence requires be shown to users where the model is offered.
#[derive(Debug, Serialize, ToSchema, schemars::JsonSchema)]
pub struct License {
    pub name: String,
    pub url: String,
    pub commercial_use: bool,
    /// The notice the licence requires beside the model (e.g. Llama 3's "Built with Llama"),
    /// if any.
    pub attribution: Option<String>,
    /// The URL of the use policy the licence requires be passed on to users (e.g. Gemma's
    /// Prohibited Use Policy), if any.
    pub use_policy: Option<String>,
}

impl License {
    /// The licence fields of a chat model's catalogue entry.
    pub fn of(m: &ModelEntry) -> Self {
        Self {
            name: m.license.clone(),
            url: m.license_url.clone(),
            commercial_use: m.commercial_use,
            attribution: m.attribution.clone(),
            use_policy: m.use_policy.clone(),
        }
    }
}

impl ModelRecord {
    /// The record of `m`: `supported_parameters` are the request fields the API accepts
    /// (`reasoning_effort` only for a thinking model),
    /// `languages` the measured multipliers vs English by language code, `loaded` whether it is
    /// in memory now and `available` whether it is servable here (`Err` with the short reason
    /// when not).
    pub fn of(
        m: &ModelEntry,
        supported_parameters: &[&'static str],
        languages: Option<BTreeMap<String, f64>>,
        loaded: bool,
        available: Result<(), String>,
    ) -> Self {
        Self {
            id: m.id.clone(),
            object: "model",
            created: m.created,
            owned_by: m.maker.clone(),
            name: m.name.clone(),
            family: m.family.clone(),
            parameters: m.parameters.clone(),
            context_length: m.context_length,
            quantization: m.quantization.clone(),
            architecture: Architecture {
                input_modalities: m.input_modalities.clone(),
                output_modalities: vec!["text"],
                tokenizer: m.tokenizer.clone().unwrap_or_else(|| m.family.clone()),
            },
            pricing: ModelPricing {
                prompt: usd_per_token(m.pricing.input),
                completion: usd_per_token(m.pricing.output),
                input_cache_read: usd_per_token(m.pricing.cached_input()),
                input_per_million_usd: usd_per_million(m.pricing.input),
                output_per_million_usd: usd_per_million(m.pricing.output),
                cached_input_per_million_usd: usd_per_million(m.pricing.cached_input()),
                input_micros_per_mtok: m.pricing.input.0,
                cached_input_micros_per_mtok: m.pricing.cached_input().0,
                output_micros_per_mtok: m.pricing.output.0,
                currency: "USD",
            },
            license: License::of(m),
            base: m.base,
            supported_parameters: supported_parameters
                .iter()
                .filter(|p| m.reasoning || **p != "reasoning_effort")
                .copied()
                .collect(),
            languages,
            loaded,
            available: available.is_ok(),
            unavailable_reason: available.err(),
            preparing: None,
        }
    }
}

/// USD per token as an exact decimal string (OpenRouter's `pricing.prompt` form): micro-USD per
/// 1M tokens times 1e-12.
pub fn usd_per_token(p: PricePerMTok) -> String {
    let (whole, frac) = (p.0 / 1_000_000_000_000, p.0 % 1_000_000_000_000);
    let frac = format!("{frac:012}");
    let frac = frac.trim_end_matches('0');
    if frac.is_empty() {
        whole.to_string()
    } else {
        format!("{whole}.{frac}")
    }
}

/// USD per 1M tokens as an exact decimal string.
pub fn usd_per_million(p: PricePerMTok) -> String {
    let frac = format!("{:06}", p.0 % 1_000_000);
    let frac = frac.trim_end_matches('0');
    let frac = if frac.len() < 2 {
        format!("{frac:0<2}")
    } else {
        frac.to_owned()
    };
    format!("{}.{frac}", p.0 / 1_000_000)
}

/// An embedding model: OpenAI's model object plus its kind, price, vector lengths and licence.
#[derive(Debug, Serialize, ToSchema, schemars::JsonSchema)]
pub struct EmbeddingModelRecord {
    /// Model id, used as `model` in `POST /v1/embeddings`.
    pub id: String,
    /// Always `model`.
    pub object: &'static str,
    /// Unix seconds.
    pub created: i64,
    pub owned_by: String,
    pub name: String,
    /// Always `embedding` (`POST /v1/embeddings`).
    pub kind: &'static str,
    /// Parameter count, e.g. `22M`.
    pub parameters: String,
    /// The most tokens one input may have, special tokens included.
    pub context_length: usize,
    pub architecture: EmbeddingArchitecture,
    /// The vector lengths `dimensions` takes; the first is the default.
    pub dimensions: Vec<usize>,
    pub pricing: EmbeddingPricingRecord,
    pub license: License,
    /// Servable here now (its weights are on this machine).
    pub available: bool,
    /// Why not, when `available` is false.
    pub unavailable_reason: Option<String>,
}

/// What an embedding model reads and writes.
#[derive(Debug, Serialize, ToSchema, schemars::JsonSchema)]
pub struct EmbeddingArchitecture {
    /// `["text"]`.
    pub input_modalities: Vec<&'static str>,
    /// `["embeddings"]` (OpenRouter's term).
    pub output_modalities: Vec<&'static str>,
}

/// An embedding model's list price per input token.
#[derive(Debug, Serialize, ToSchema, schemars::JsonSchema)]
pub struct EmbeddingPricingRecord {
    /// USD per input token (OpenRouter's form).
    #[schema(example = "0.00000001")]
    pub prompt: String,
    /// USD per 1M input tokens.
    #[schema(example = "0.01")]
    pub input_per_million_usd: String,
    /// Micro-USD per 1M input tokens: what the ledger charges by.
    pub input_micros_per_mtok: i64,
    /// How a request's cost is computed.
    pub rule: &'static str,
    /// Always `USD`.
    pub currency: &'static str,
}

impl EmbeddingModelRecord {
    /// The record of `m`; `available` is `Err` with a short reason when it is not servable.
    pub fn of(m: &EmbeddingModelEntry, available: Result<(), String>) -> Self {
        Self {
            id: m.id.clone(),
            object: "model",
            created: m.created,
            owned_by: m.maker.clone(),
            name: m.name.clone(),
            kind: "embedding",
            parameters: m.parameters.clone(),
            context_length: m.max_input_tokens,
            architecture: EmbeddingArchitecture {
                input_modalities: vec!["text"],
                output_modalities: vec!["embeddings"],
            },
            dimensions: m.dimensions.clone(),
            pricing: EmbeddingPricingRecord {
                prompt: usd_per_token(m.pricing.input),
                input_per_million_usd: usd_per_million(m.pricing.input),
                input_micros_per_mtok: m.pricing.input.0,
                rule: EMBEDDING_RULE,
                currency: "USD",
            },
            license: License {
                name: m.license.clone(),
                url: m.license_url.clone(),
                commercial_use: m.commercial_use,
                attribution: m.attribution.clone(),
                use_policy: m.use_policy.clone(),
            },
            available: available.is_ok(),
            unavailable_reason: available.err(),
        }
    }
}

/// What a model being prepared is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Fetching a weights file from the hub.
    Downloading,
    /// Reading the weights into memory (and fetching nothing).
    Loading,
}

/// A snapshot of one model being prepared (fetching or loading its weights), as
/// `engine::weights::progress` reports it: in `/v1/models` and `/health`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema, schemars::JsonSchema)]
pub struct Preparation {
    /// Catalogue id.
    pub model: String,
    pub stage: Stage,
    /// The file being downloaded (`None` while loading).
    pub file: Option<String>,
    /// Bytes of `file` fetched so far, and its size in bytes (both 0 while loading).
    pub bytes: u64,
    pub total_bytes: u64,
    /// Whole percent of the download; `None` while loading (a load reports no fraction).
    pub percent: Option<u8>,
    /// Milliseconds since this model's preparation started.
    pub elapsed_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prices_render_exactly() {
        assert_eq!(usd_per_token(PricePerMTok(20_000)), "0.00000002");
        assert_eq!(usd_per_token(PricePerMTok(5_650_000)), "0.00000565");
        assert_eq!(usd_per_token(PricePerMTok(0)), "0");
        assert_eq!(usd_per_million(PricePerMTok(20_000)), "0.02");
        assert_eq!(usd_per_million(PricePerMTok(5_650_000)), "5.65");
        assert_eq!(usd_per_million(PricePerMTok(2_000_000)), "2.00");
        assert_eq!(usd_per_million(PricePerMTok(1_234_567)), "1.234567");
        assert_eq!(usd_per_unit(UnitPrice(crate::money::Micros(600))), "0.0006");
        assert_eq!(
            usd_per_unit(UnitPrice(crate::money::Micros(1_000_000))),
            "1.00"
        );
    }
}
