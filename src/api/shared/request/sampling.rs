//! The sampler fields beyond OpenAI's (`top_k`, `min_p`, `repetition_penalty`, as vLLM,
//! llama.cpp's server and OpenRouter accept them), OpenAI's `logit_bias`, and the fields tollgate
//! does not implement but accepts when their value asks for nothing (`store: false`,
//! `service_tier: "auto"`, `modalities: ["text"]`, `metadata: {}`).
//!
//! Types and ranges are field errors (422); a no-op field with a value that asks for something
//! is 400 `unsupported_value` naming it. `logit_bias` token ids are checked against the model's
//! vocabulary after the prompt is prepared (`api::shared::text`), before anything is held.

use serde_json::Value;

use super::validator::Validator;
use crate::api::shared::codes::Code;
use crate::api::shared::error::ApiError;

/// Most `logit_bias` entries one request may carry.
pub const MAX_LOGIT_BIAS: usize = 1024;

/// The fields accepted only with the value that asks for nothing, and that value's description.
pub const NO_OP_FIELDS: [(&str, &str); 4] = [
    ("store", "false"),
    ("service_tier", "\"auto\" or \"default\""),
    ("modalities", "[\"text\"]"),
    ("metadata", "{}"),
];

/// The sampler settings of this module, parsed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExtraSampling {
    /// 0: off (`top_k` absent, 0 or -1).
    pub top_k: usize,
    pub min_p: f32,
    /// 1: off.
    pub repetition_penalty: f32,
    /// (token id, bias), in body order.
    pub logit_bias: Vec<(u32, f32)>,
}

impl Validator<'_> {
    /// `top_k` (integer >= -1; -1 and 0 turn it off), `min_p` in [0, 1],
    /// `repetition_penalty` in (0, 10], `logit_bias` (`{"<token id>": bias in [-100, 100]}`).
    pub(super) fn extra_sampling(&mut self) -> ExtraSampling {
        let top_k = match self.present("top_k") {
            None => 0,
            Some(v) => match v.as_i64() {
                Some(k) if k >= -1 => usize::try_from(k).unwrap_or(0),
                _ => {
                    self.err("top_k", "must be an integer >= -1 (-1 or 0 turn it off)");
                    0
                }
            },
        };
        let min_p = self.number("min_p", 0.0, 1.0).unwrap_or(0.0) as f32;
        let repetition_penalty = match self.number("repetition_penalty", 0.0, 10.0) {
            Some(r) if r > 0.0 => r as f32,
            Some(_) => {
                self.err("repetition_penalty", "must be greater than 0");
                1.0
            }
            None => 1.0,
        };
        ExtraSampling {
            top_k,
            min_p,
            repetition_penalty,
            logit_bias: self.logit_bias(),
        }
    }

    fn logit_bias(&mut self) -> Vec<(u32, f32)> {
        let Some(v) = self.present("logit_bias") else {
            return Vec::new();
        };
        let Value::Object(map) = v else {
            self.err("logit_bias", "must be an object of token ids to biases");
            return Vec::new();
        };
        if map.len() > MAX_LOGIT_BIAS {
            self.err(
                "logit_bias",
                &format!("must have at most {MAX_LOGIT_BIAS} entries"),
            );
            return Vec::new();
        }
        let mut out = Vec::with_capacity(map.len());
        for (k, b) in map {
            let Ok(id) = k.parse::<u32>() else {
                self.err(
                    &format!("logit_bias.{k}"),
                    "keys must be token ids (decimal integers)",
                );
                continue;
            };
            match b.as_f64() {
                Some(x) if (-100.0..=100.0).contains(&x) => out.push((id, x as f32)),
                _ => self.err(
                    &format!("logit_bias.{k}"),
                    "must be a number between -100 and 100",
                ),
            }
        }
        out
    }

    /// The no-op fields (`NO_OP_FIELDS`): `Ok` when each is absent or asks for nothing.
    ///
    /// # Errors
    /// 400 `unsupported_value` naming the first field with another value.
    pub(super) fn no_op_fields(&self) -> Result<(), ApiError> {
        for (key, wanted) in NO_OP_FIELDS {
            let Some(v) = self.present(key) else {
                continue;
            };
            let no_op = match key {
                "store" => v == &Value::Bool(false),
                "service_tier" => matches!(v.as_str(), Some("auto" | "default")),
                "modalities" => v.as_array().is_some_and(|a| a.iter().all(|m| m == "text")),
                _ => v.as_object().is_some_and(serde_json::Map::is_empty),
            };
            if !no_op {
                return Err(ApiError::bad(
                    key.to_owned(),
                    Code::UnsupportedValue,
                    format!("`{key}` is accepted only as {wanted}: tollgate does not implement other values."),
                ));
            }
        }
        Ok(())
    }
}

/// The first `logit_bias` id at or past `vocab_size`, as a 400 naming `logit_bias`.
///
/// # Errors
/// 400 `invalid_value` with the id and the vocabulary size.
pub fn check_logit_bias(bias: &[(u32, f32)], vocab_size: usize) -> Result<(), ApiError> {
    match bias.iter().find(|(id, _)| *id as usize >= vocab_size) {
        Some((id, _)) => Err(ApiError::bad(
            "logit_bias",
            Code::InvalidValue,
            format!("Token id {id} in `logit_bias` is not in the model's vocabulary of {vocab_size} tokens."),
        )),
        None => Ok(()),
    }
}
