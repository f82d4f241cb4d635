//! `Micros`: an amount of US dollars in integer micro-USD (1 micro = 1e-6 USD), the only money
//! type (`docs/reference/costs.md`). Plain data: any module may use it; the ledger stores it as a
//! SQLite integer. It owns the one USD parser (`parse_usd`) and the renderings (`Display` for
//! text, `usd_decimal` for CSV, `usd` for JSON numbers, which are renderings only).

use std::fmt;
use std::iter::Sum;
use std::ops::{Add, AddAssign, Neg, Sub, SubAssign};

use serde::{Deserialize, Serialize};

/// Integer micro-USD. Arithmetic is `i64`'s: the amounts the service handles are far below
/// its range (9.2e12 USD); the ledger's `CHECK` constraints refuse a negative balance.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Micros(pub i64);

/// A USD amount that `Micros::parse_usd` refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a US-dollar amount (digits, an optional `-`, at most 6 decimals)")]
pub struct ParseUsdError(pub String);

impl Micros {
    /// Nothing.
    pub const ZERO: Self = Self(0);

    /// Parse a US-dollar amount: an optional `-`, digits, and at most 6 decimals (`12`,
    /// `0.000015`, `-3.5`), exactly (no floating point). The one USD parser of the crate.
    ///
    /// # Errors
    /// Anything else, or an amount beyond `i64` micros.
    pub fn parse_usd(s: &str) -> Result<Self, ParseUsdError> {
        let bad = || ParseUsdError(s.to_owned());
        let t = s.trim();
        let (neg, digits) = t.strip_prefix('-').map_or((false, t), |d| (true, d));
        let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
        if int.is_empty()
            || (digits.contains('.') && frac.is_empty())
            || frac.len() > 6
            || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit())
        {
            return Err(bad());
        }
        let micros: i64 = format!("{int}{frac:0<6}").parse().map_err(|_| bad())?;
        Ok(Self(if neg { -micros } else { micros }))
    }

    /// The amount in US dollars as a float, for JSON `*_usd` fields only (a rendering: the
    /// integer is the exact value).
    pub fn usd(self) -> f64 {
        self.0 as f64 / 1e6
    }

    /// The exact amount in US dollars with 6 decimals and no sign for positives: `0.000015`,
    /// `-3.500000` (CSV and other machine-read text).
    pub fn usd_decimal(self) -> String {
        let sign = if self.0 < 0 { "-" } else { "" };
        let a = self.0.unsigned_abs();
        format!("{sign}{}.{:06}", a / 1_000_000, a % 1_000_000)
    }

    /// `self + other`, or `None` on overflow.
    pub fn checked_add(self, other: Self) -> Option<Self> {
        self.0.checked_add(other.0).map(Self)
    }
}

/// Compares with a plain count of micros (readable checks: `balance == 750`).
impl PartialEq<i64> for Micros {
    fn eq(&self, other: &i64) -> bool {
        self.0 == *other
    }
}

/// `$0.000015`, `-$3.500000`: exact, for people.
impl fmt::Display for Micros {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.usd_decimal();
        match d.strip_prefix('-') {
            Some(rest) => write!(f, "-${rest}"),
            None => write!(f, "${d}"),
        }
    }
}

impl Add for Micros {
    type Output = Self;
    fn add(self, o: Self) -> Self {
        Self(self.0 + o.0)
    }
}

impl Sub for Micros {
    type Output = Self;
    fn sub(self, o: Self) -> Self {
        Self(self.0 - o.0)
    }
}

impl Neg for Micros {
    type Output = Self;
    fn neg(self) -> Self {
        Self(-self.0)
    }
}

impl AddAssign for Micros {
    fn add_assign(&mut self, o: Self) {
        self.0 += o.0;
    }
}

impl SubAssign for Micros {
    fn sub_assign(&mut self, o: Self) {
        self.0 -= o.0;
    }
}

impl Sum for Micros {
    fn sum<I: Iterator<Item = Self>>(iter: I) -> Self {
        Self(iter.map(|m| m.0).sum())
    }
}

impl<'a> Sum<&'a Micros> for Micros {
    fn sum<I: Iterator<Item = &'a Micros>>(iter: I) -> Self {
        Self(iter.map(|m| m.0).sum())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_exactly_and_renders_exactly() {
        assert_eq!(Micros::parse_usd("12"), Ok(Micros(12_000_000)));
        assert_eq!(Micros::parse_usd("0.000015"), Ok(Micros(15)));
        assert_eq!(Micros::parse_usd(" -3.5 "), Ok(Micros(-3_500_000)));
        for bad in [
            "",
            "-",
            ".5",
            "1.",
            "1.0000001",
            "1e3",
            "1,5",
            "--1",
            "+1",
            "99999999999999999",
        ] {
            assert!(Micros::parse_usd(bad).is_err(), "{bad}");
        }
        assert_eq!(Micros(15).to_string(), "$0.000015");
        assert_eq!(Micros(-3_500_000).to_string(), "-$3.500000");
        assert_eq!(Micros(1_234_567).usd_decimal(), "1.234567");
        assert!((Micros(1_500_000).usd() - 1.5).abs() < 1e-12);
        assert_eq!([Micros(1), Micros(2)].iter().sum::<Micros>(), Micros(3));
    }
}
