//! `PricePerMTok`: a token price in integer micro-USD per 1M tokens, parsed exactly from the
//! decimal USD strings of `models.toml`.

use serde::Deserialize;

/// Micro-USD (1e-6 USD) per 1M tokens, parsed exactly from a decimal string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct PricePerMTok(pub i64);

impl PricePerMTok {
    /// Parse a non-negative decimal USD amount with at most 6 decimals, e.g. `"0.15"` -> 150000.
    ///
    /// # Errors
    /// Signs, exponents, more than 6 decimals, empty parts or overflow.
    pub fn parse(s: &str) -> Result<Self, String> {
        match crate::money::Micros::parse_usd(s) {
            Ok(m) if m.0 >= 0 && !s.trim_start().starts_with('-') => Ok(Self(m.0)),
            _ => Err(format!(
                "`{s}` is not a USD amount like \"0.15\" (at most 6 decimals)"
            )),
        }
    }

    /// The price in USD, for display only.
    pub fn usd(self) -> f64 {
        self.0 as f64 / 1e6
    }
}

impl<'de> Deserialize<'de> for PricePerMTok {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::parse(&s).map_err(serde::de::Error::custom)
    }
}
