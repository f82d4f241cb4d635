//! Speech models of the catalogue (`[[audio_model]]` in `models.toml`): transcription models
//! priced per minute of audio, speech (text-to-speech) models priced per 1M input characters.
//! A separate type from `ModelEntry`, so no token price can be applied to audio by mistake.

use serde::Deserialize;

use crate::money::Micros;

/// A list price in micro-USD per unit (a minute of audio, 1M characters), parsed exactly from
/// a decimal USD string such as `"0.006"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnitPrice(pub Micros);

impl<'de> Deserialize<'de> for UnitPrice {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        match Micros::parse_usd(&s) {
            Ok(m) if m.0 >= 0 && !s.trim_start().starts_with('-') => Ok(Self(m)),
            _ => Err(serde::de::Error::custom(format!(
                "`{s}` is not a USD amount like \"0.006\" (at most 6 decimals)"
            ))),
        }
    }
}

/// What a speech model does, and so which endpoint serves it and how it is priced.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum AudioKind {
    /// Speech to text: `/v1/audio/transcriptions` and `/v1/audio/translations`.
    Transcription,
    /// Text to speech: `/v1/audio/speech`.
    Speech,
}

/// A speech model's list price, as integer micro-USD.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AudioPricing {
    /// Micro-USD per minute of audio (transcription), e.g. `"0.001"` -> 1000.
    #[serde(default)]
    pub per_minute: Option<UnitPrice>,
    /// Micro-USD per 1M input characters (speech), e.g. `"5.00"` -> 5_000_000.
    #[serde(default)]
    pub per_million_characters: Option<UnitPrice>,
}

/// One speech model.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AudioModelEntry {
    /// What clients send as `model`.
    pub id: String,
    pub name: String,
    pub maker: String,
    pub kind: AudioKind,
    /// Parameter count as marketed, e.g. `74M`.
    pub parameters: String,
    pub license: String,
    pub license_url: String,
    pub commercial_use: bool,
    /// Release time, Unix seconds.
    pub created: i64,
    pub pricing: AudioPricing,
    /// Directory (transcription) or file (speech) under the weights directory.
    pub path: String,
    /// The script that fetches `path`, named in errors.
    pub fetch: String,
    /// A speech model's voices (the names `voice` accepts); the first is what OpenAI's voice
    /// names stand for. Empty for transcription models.
    #[serde(default)]
    pub voices: Vec<String>,
}

impl AudioModelEntry {
    /// Checks that the price matches the kind.
    ///
    /// # Errors
    /// A transcription model without `per_minute`, a speech model without
    /// `per_million_characters`, or either with the other's price.
    pub fn validate(&self) -> Result<(), String> {
        let p = &self.pricing;
        match (self.kind, p.per_minute, p.per_million_characters) {
            (AudioKind::Transcription, Some(_), None) | (AudioKind::Speech, None, Some(_)) => {
                Ok(())
            }
            (AudioKind::Transcription, ..) => Err(format!(
                "audio model `{}`: a transcription model is priced by `per_minute` only",
                self.id
            )),
            (AudioKind::Speech, ..) => Err(format!(
                "audio model `{}`: a speech model is priced by `per_million_characters` only",
                self.id
            )),
        }
    }
}
