//! Wire shapes of `POST /v1/embeddings`: OpenAI's embedding list, plus the `service` cost
//! block every paid JSON response carries. Typed; built by the handler's `render`.

use base64::Engine as _;
use serde::Serialize;
use utoipa::ToSchema;

use super::request::EncodingFormat;
use crate::api::shared::schema::ServiceCost;

/// The response: one embedding per input, in input order.
#[derive(Debug, Serialize, ToSchema)]
pub struct EmbeddingList {
    /// Always `list`.
    pub object: &'static str,
    pub data: Vec<Embedding>,
    /// The catalogue id of the model that made the vectors.
    pub model: String,
    pub usage: EmbeddingUsage,
    pub service: ServiceCost,
}

/// One input's vector.
#[derive(Debug, Serialize, ToSchema)]
pub struct Embedding {
    /// Always `embedding`.
    pub object: &'static str,
    /// Position of the input in `input`.
    pub index: usize,
    pub embedding: Vector,
}

/// A unit-length vector (`dimensions` long): numbers for `encoding_format: "float"`, else the
/// little-endian f32 bytes in base64.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub enum Vector {
    Float(Vec<f32>),
    Base64(String),
}

impl Vector {
    /// `v` written as `format` asks.
    pub fn of(v: Vec<f32>, format: EncodingFormat) -> Self {
        match format {
            EncodingFormat::Float => Self::Float(v),
            EncodingFormat::Base64 => {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                Self::Base64(base64::engine::general_purpose::STANDARD.encode(bytes))
            }
        }
    }
}

/// Tokens read: every token of every input, special tokens included (what is billed).
#[derive(Debug, Serialize, ToSchema)]
pub struct EmbeddingUsage {
    pub prompt_tokens: u64,
    /// Equals `prompt_tokens` (no output tokens).
    pub total_tokens: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_is_the_little_endian_floats() {
        let Vector::Base64(s) = Vector::of(vec![1.0, -0.5], EncodingFormat::Base64) else {
            panic!("base64 asked")
        };
        let bytes = base64::engine::general_purpose::STANDARD.decode(s).unwrap();
        assert_eq!(bytes, [0, 0, 128, 63, 0, 0, 0, 191]);
    }
}
