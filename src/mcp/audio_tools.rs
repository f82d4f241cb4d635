//! The MCP price tools for speech models: their rows of `get_prices` and their
//! `estimate_cost` (seconds of audio for transcription, characters for speech), by the rules
//! `billing` charges with.

use super::data::McpData;
use super::estimate::{Estimate, EstimateArgs};
use super::tools::AudioPriceRow;
use crate::billing;
use crate::catalog::audio::{AudioKind, AudioModelEntry, UnitPrice};
use crate::catalog::record::AudioModelRecord;
use crate::money::Micros;

impl McpData {
    /// The speech models' rows of `get_prices`.
    pub fn audio_prices(&self) -> Vec<AudioPriceRow> {
        self.catalog
            .audio
            .iter()
            .map(|m| {
                let r = AudioModelRecord::of(m, Ok(()));
                AudioPriceRow {
                    id: r.id,
                    kind: r.kind,
                    pricing: r.pricing,
                    commercial_use: m.commercial_use,
                }
            })
            .collect()
    }

    /// `estimate_cost` when `a.model` is a speech model; `None` for any other id.
    pub fn estimate_audio(&self, a: &EstimateArgs) -> Option<Result<Estimate, String>> {
        self.catalog.audio_model(&a.model).map(|m| estimate(m, a))
    }
}

/// `estimate_cost` for speech model `m`.
///
/// # Errors
/// A transcription without `audio_seconds` (or negative), a speech estimate without `input`.
fn estimate(m: &AudioModelEntry, a: &EstimateArgs) -> Result<Estimate, String> {
    let zero = UnitPrice(Micros(0));
    let record = AudioModelRecord::of(m, Ok(()));
    let (cost, counted_by, seconds, characters) = match m.kind {
        AudioKind::Transcription => {
            let s = a
                .audio_seconds
                .filter(|s| s.is_finite() && *s >= 0.0)
                .ok_or("Give `audio_seconds` (the audio's length) for a transcription model.")?;
            // Whole milliseconds, as the decoder counts them; billed in whole seconds.
            let ms = (s * 1000.0).ceil() as u64;
            let cost = billing::transcription_micros(m.pricing.per_minute.unwrap_or(zero), ms);
            (
                cost,
                "seconds of audio, rounded up",
                Some(ms.div_ceil(1000)),
                None,
            )
        }
        AudioKind::Speech => {
            let text = a
                .input
                .as_deref()
                .ok_or("Give `input` (the text to speak) for a speech model.")?;
            let n = text.chars().count() as u64;
            let price = m.pricing.per_million_characters.unwrap_or(zero);
            (
                billing::speech_micros(price, n),
                "characters of input",
                None,
                Some(n),
            )
        }
    };
    Ok(Estimate {
        model: m.id.clone(),
        prompt_tokens: 0,
        completion_tokens: 0,
        counted_by: counted_by.into(),
        tokenizer: None,
        cost_micros: cost,
        cost_usd: cost.usd(),
        input_micros_per_mtok: 0,
        output_micros_per_mtok: 0,
        rule: record.pricing.rule,
        language: None,
        language_detected: false,
        language_multiplier: None,
        context_length: 0,
        fits_context: true,
        hold_micros: cost,
        warning: None,
        commercial_use: m.commercial_use,
        audio_seconds: seconds,
        input_characters: characters,
    })
}
