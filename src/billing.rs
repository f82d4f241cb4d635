//! Billing rules: the cost of a request from its token counts and the model's list prices, the
//! hold reserved at admission, and the usage record written at settlement.
//! May use: `catalog` (prices), `ledger`'s record types (never its database calls). Never: HTTP,
//! SQL, candle.
//!
//! Rounding rule: `cost_micros = ceil(((prompt_tokens - cached_tokens) * input_price +
//! cached_tokens * cached_input_price + completion_tokens * output_price) / 1_000_000)`, all in
//! integers, with prices in micro-USD per 1M tokens (`cached_tokens` are prompt tokens the
//! prefix cache supplied; `Pricing::cached_input` gives their price). A request is never
//! under-charged by rounding and over-charged by less than one micro-USD.
//!
//! Speech (`PricedUnits`): a transcription costs `ceil(seconds * per_minute / 60)` with the
//! audio's length in whole seconds rounded up; speech synthesis `ceil(characters *
//! per_million_characters / 1_000_000)`. Both are known before the model runs, so the hold is
//! the exact charge.

use crate::catalog::audio::UnitPrice;
use crate::catalog::{PricePerMTok, Pricing};
use crate::money::Micros;

/// Cost of `prompt_tokens` input tokens, `cached_tokens` of them from the prefix cache (at
/// most `prompt_tokens`), and `completion_tokens` output tokens. Saturates at `i64::MAX`
/// micros (unreachable with real token counts).
pub fn cost_micros(
    pricing: &Pricing,
    prompt_tokens: u64,
    cached_tokens: u64,
    completion_tokens: u64,
) -> Micros {
    let cached = cached_tokens.min(prompt_tokens);
    let num = i128::from(prompt_tokens - cached) * i128::from(pricing.input.0)
        + i128::from(cached) * i128::from(pricing.cached_input().0)
        + i128::from(completion_tokens) * i128::from(pricing.output.0);
    let micros = (num + 999_999).div_euclid(1_000_000);
    Micros(i64::try_from(micros).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::PricePerMTok;

    #[test]
    fn affordable_output_tokens_is_the_largest_hold_that_fits() {
        let p = Pricing {
            input: PricePerMTok(150_000),
            cached_input: None,
            output: PricePerMTok(600_000),
        };
        for (prompt, choices, avail) in [(20, 1, 100_000), (3000, 2, 1_234), (7, 3, 1), (0, 1, 0)] {
            let t = affordable_output_tokens(&p, prompt, choices, Micros(avail));
            if t > 0 {
                assert!(hold_micros(&p, prompt, t * choices) <= Micros(avail));
            }
            assert!(hold_micros(&p, prompt, (t + 1) * choices) > Micros(avail));
        }
        assert_eq!(
            affordable_output_tokens(&p, 1_000_000, 1, Micros(149_999)),
            0
        );
        let free = Pricing {
            output: PricePerMTok(0),
            ..p
        };
        assert_eq!(
            affordable_output_tokens(&free, 5, 1, Micros(10)),
            usize::MAX
        );
    }

    /// A new account's starter balance (`tollgate accounts create`, `--signup-starter-usd`).
    const STARTER: Micros = Micros(100_000);

    #[test]
    fn a_starter_balance_pays_a_default_sdk_call_on_every_commercial_model() {
        // Without `max_tokens` the hold used to cover the whole context: 402 on the larger
        // models. Now the output is cut to the balance (`metering::PaidRequest::fit_to_balance`),
        // so a 1,000-token prompt with a starter balance gets at least 1,024 output tokens on
        // every commercial model of the catalogue.
        let catalog = crate::catalog::Catalog::load(std::path::Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/models.toml"
        )))
        .unwrap();
        let mut whole_context_refused = 0;
        for m in catalog.models.iter().filter(|m| m.commercial_use) {
            let fits = affordable_output_tokens(&m.pricing, 1_000, 1, STARTER);
            assert!(fits >= 1_024, "{}: {fits} tokens", m.id);
            let rest = m.context_length.saturating_sub(1_000);
            whole_context_refused += usize::from(hold_micros(&m.pricing, 1_000, rest) > STARTER);
        }
        assert!(whole_context_refused > 0, "the old rule refused none");
    }

    #[test]
    fn cost_rounds_up_to_whole_micros() {
        let p = Pricing {
            input: PricePerMTok(20_000),
            cached_input: None,
            output: PricePerMTok(40_000),
        };
        assert_eq!(cost_micros(&p, 0, 0, 0), Micros(0));
        // 37 * 0.02 + 9 * 0.04 = 0.74 + 0.36 = 1.1 micros -> 2
        assert_eq!(cost_micros(&p, 37, 0, 9), Micros(2));
        // exactly 1M input tokens at 0.02 USD/M = 20_000 micros
        assert_eq!(cost_micros(&p, 1_000_000, 0, 0), Micros(20_000));
        assert_eq!(cost_micros(&p, 1, 0, 0), Micros(1));
    }

    #[test]
    fn audio_is_billed_by_whole_seconds_and_characters_rounding_up() {
        // 0.006 USD a minute = 100 micros a second.
        let per_minute = UnitPrice(Micros(6_000));
        assert_eq!(transcription_micros(per_minute, 0), Micros(0));
        assert_eq!(transcription_micros(per_minute, 1), Micros(100));
        assert_eq!(transcription_micros(per_minute, 1000), Micros(100));
        assert_eq!(transcription_micros(per_minute, 1001), Micros(200));
        assert_eq!(transcription_micros(per_minute, 60_000), Micros(6_000));
        // 0.001 USD a minute: 7 s = 116.67 micros -> 117.
        assert_eq!(
            transcription_micros(UnitPrice(Micros(1_000)), 7_000),
            Micros(117)
        );
        // 15 USD per 1M characters: 1 char = 15 micros; 333 chars = 4995.
        assert_eq!(speech_micros(UnitPrice(Micros(15_000_000)), 1), Micros(15));
        assert_eq!(
            speech_micros(UnitPrice(Micros(15_000_000)), 333),
            Micros(4_995)
        );
        // 0.5 USD per 1M: 3 chars = 1.5 micros -> 2.
        assert_eq!(speech_micros(UnitPrice(Micros(500_000)), 3), Micros(2));
    }

    #[test]
    fn cached_tokens_cost_the_cached_input_price() {
        let mut p = Pricing {
            input: PricePerMTok(20_000),
            cached_input: None,
            output: PricePerMTok(40_000),
        };
        // Default: a tenth of the input price. 1M prompt tokens, 600k cached:
        // 400k * 0.02 + 600k * 0.002 = 8_000 + 1_200 micros.
        assert_eq!(p.cached_input(), PricePerMTok(2_000));
        assert_eq!(cost_micros(&p, 1_000_000, 600_000, 0), Micros(9_200));
        // 300 prompt tokens, 288 cached, 10 out: (12 * 20_000 + 288 * 2_000 + 10 * 40_000)
        // = 1_216_000 -> 1.216 micros -> 2.
        assert_eq!(cost_micros(&p, 300, 288, 10), Micros(2));
        p.cached_input = Some(PricePerMTok(0));
        assert_eq!(cost_micros(&p, 1_000_000, 1_000_000, 0), Micros(0));
        // Never more cached than prompt tokens.
        assert_eq!(cost_micros(&p, 10, 50, 0), Micros(0));
    }
}

/// Cost of a transcription of `audio_ms` milliseconds of audio at `per_minute` micro-USD per
/// minute: the audio is billed in whole seconds rounded up, and
/// `cost_micros = ceil(seconds * per_minute / 60)`. Saturates at `i64::MAX`.
pub fn transcription_micros(per_minute: UnitPrice, audio_ms: u64) -> Micros {
    let seconds = i128::from(audio_ms.div_ceil(1000));
    let micros = (seconds * i128::from(per_minute.0 .0) + 59).div_euclid(60);
    Micros(i64::try_from(micros).unwrap_or(i64::MAX))
}

/// Cost of speaking `characters` input characters at `per_million` micro-USD per 1M
/// characters: `cost_micros = ceil(characters * per_million / 1_000_000)`.
pub fn speech_micros(per_million: UnitPrice, characters: u64) -> Micros {
    let num = i128::from(characters) * i128::from(per_million.0 .0);
    let micros = (num + 999_999).div_euclid(1_000_000);
    Micros(i64::try_from(micros).unwrap_or(i64::MAX))
}

/// What a unit-priced request bills, with its model's list price (`None`: free); metering
/// prices it (`Units::priced`) before it holds anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Units {
    /// Milliseconds of decoded audio, at a price per minute, billed by the whole second
    /// (`transcription_micros`).
    AudioMs {
        ms: u64,
        per_minute: Option<UnitPrice>,
    },
    /// Input characters spoken, at a price per million (`speech_micros`).
    Characters {
        count: u64,
        per_million: Option<UnitPrice>,
    },
    /// Input tokens embedded, at the chat rule's input price per 1M tokens (`cost_micros`
    /// with no cached or output tokens).
    InputTokens {
        count: u64,
        per_million: PricePerMTok,
    },
}

impl Units {
    /// The units with their exact cost (micros, rounded up as the two price rules say).
    pub fn priced(self) -> PricedUnits {
        let free = UnitPrice(Micros::ZERO);
        match self {
            Self::AudioMs { ms, per_minute } => PricedUnits {
                audio_ms: ms,
                input_characters: 0,
                input_tokens: 0,
                cost: transcription_micros(per_minute.unwrap_or(free), ms),
            },
            Self::Characters { count, per_million } => PricedUnits {
                audio_ms: 0,
                input_characters: count,
                input_tokens: 0,
                cost: speech_micros(per_million.unwrap_or(free), count),
            },
            Self::InputTokens { count, per_million } => PricedUnits {
                audio_ms: 0,
                input_characters: 0,
                input_tokens: count,
                cost: cost_micros(
                    &Pricing {
                        input: per_million,
                        cached_input: None,
                        output: PricePerMTok(0),
                    },
                    count,
                    0,
                    0,
                ),
            },
        }
    }
}

/// A request priced by units known before it runs (speech, embeddings): what is billed and its
/// cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PricedUnits {
    /// Milliseconds of audio transcribed (0 for speech synthesis).
    pub audio_ms: u64,
    /// Characters spoken (0 for transcription).
    pub input_characters: u64,
    /// Tokens embedded (0 for speech).
    pub input_tokens: u64,
    /// The exact cost (`transcription_micros` or `speech_micros`), held and then charged.
    pub cost: Micros,
}

/// The usage record of a unit-priced request `m` ended as `ending` (the ledger charges 0 for a
/// `Failed` one). Pure: writes nothing.
pub fn units_usage_record(
    m: &Metered,
    units: &PricedUnits,
    ending: Ending,
) -> crate::ledger::UsageRecord {
    let tokens = usize::try_from(units.input_tokens).unwrap_or(usize::MAX);
    let mut u = usage_record(m, tokens, 0, 0, ending);
    u.audio_ms = i64::try_from(units.audio_ms).unwrap_or(i64::MAX);
    u.input_characters = i64::try_from(units.input_characters).unwrap_or(i64::MAX);
    u.cost_micros = units.cost;
    u
}

/// What a metered request is, for closing its hold.
#[derive(Debug, Clone)]
pub struct Metered {
    pub request_id: String,
    pub account_id: crate::ledger::AccountId,
    pub key_id: Option<crate::ledger::KeyId>,
    pub model: String,
    pub pricing: Pricing,
    pub started: std::time::Instant,
}

/// The worst-case cost reserved at admission: every prompt token plus `max_new_tokens` output
/// tokens, by the same rounding rule as the charge.
pub fn hold_micros(pricing: &Pricing, prompt_tokens: usize, max_new_tokens: usize) -> Micros {
    cost_micros(pricing, prompt_tokens as u64, 0, max_new_tokens as u64)
}

/// The most output tokens per choice that `available` micros pay for after the prompt, with
/// `choices` choices sharing it: the largest `t` with
/// `hold_micros(pricing, prompt_tokens, t * choices) <= available` (the rounding is upward, so
/// this is `(available * 10^6 - prompt_tokens * input) / (choices * output)`, rounded down).
/// 0 when the prompt alone is not covered; `usize::MAX` when output tokens are free.
pub fn affordable_output_tokens(
    pricing: &Pricing,
    prompt_tokens: usize,
    choices: usize,
    available: Micros,
) -> usize {
    let budget = i128::from(available.0) * 1_000_000
        - i128::try_from(prompt_tokens).unwrap_or(i128::MAX) * i128::from(pricing.input.0);
    if budget < 0 {
        return 0;
    }
    let per_token = i128::try_from(choices.max(1)).unwrap_or(1) * i128::from(pricing.output.0);
    if per_token <= 0 {
        return usize::MAX;
    }
    usize::try_from(budget / per_token).unwrap_or(usize::MAX)
}

/// How a generation ended, as billing sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Completed (stop or length): charge the tokens.
    Completed,
    /// The client went away: charge the prompt and the tokens produced before the cancel.
    Cancelled,
    /// The engine failed: release the hold, charge nothing.
    Failed,
}

/// The usage record of `m` after `prompt_tokens` in (`cached_tokens` of them from the prefix
/// cache) and `completion_tokens` out, ended as `ending`, costed by `cost_micros` (the ledger
/// clamps the charge to the hold and charges 0 for a `Failed` ending). Pure: writes nothing.
pub fn usage_record(
    m: &Metered,
    prompt_tokens: usize,
    cached_tokens: usize,
    completion_tokens: usize,
    ending: Ending,
) -> crate::ledger::UsageRecord {
    use crate::ledger::{UsageRecord, UsageStatus};
    UsageRecord {
        request_id: m.request_id.clone(),
        account_id: m.account_id,
        key_id: m.key_id,
        model: m.model.clone(),
        prompt_tokens: i64::try_from(prompt_tokens).unwrap_or(i64::MAX),
        cached_tokens: i64::try_from(cached_tokens).unwrap_or(i64::MAX),
        completion_tokens: i64::try_from(completion_tokens).unwrap_or(i64::MAX),
        audio_ms: 0,
        input_characters: 0,
        cost_micros: cost_micros(
            &m.pricing,
            prompt_tokens as u64,
            cached_tokens as u64,
            completion_tokens as u64,
        ),
        status: match ending {
            Ending::Completed => UsageStatus::Ok,
            Ending::Cancelled => UsageStatus::Cancelled,
            Ending::Failed => UsageStatus::Failed,
        },
        latency_ms: i64::try_from(m.started.elapsed().as_millis()).unwrap_or(i64::MAX),
    }
}
