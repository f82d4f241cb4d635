//! Reader of CTranslate2 model files (`model.bin`), as faster-whisper ships Whisper.
//!
//! Layout (CTranslate2 `src/models/model.cc`, binary version 6), all little-endian:
//! `u32 version`, `u16 len` + spec name, `u32 revision`, `u32 n_vars`; then per variable
//! `u16 len` + name (NUL-terminated), `u8 rank`, `rank x u32` dims, `u8 dtype` (0 f32, 1 i8,
//! 2 i16, 3 i32, 4 f16, 5 bf16), `u32 nbytes`, data; then `u32 n_aliases` and pairs of names
//! (alias, target). Scalars (rank 0) carry settings such as `decoder/num_heads`.

use std::collections::HashMap;

use candle_core::{DType, Device, Tensor};

/// One variable of a CTranslate2 file.
#[derive(Debug, Clone)]
pub struct Variable {
    /// Dimensions, outermost first (`[]` for a scalar).
    pub dims: Vec<usize>,
    /// Element type code (0 f32, 1 i8, 2 i16, 3 i32, 4 f16, 5 bf16).
    pub dtype: u8,
    /// Raw little-endian element bytes.
    pub data: Vec<u8>,
}

/// Why a CTranslate2 file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum Ct2Error {
    #[error("CTranslate2 file ends inside {0}")]
    Truncated(&'static str),
    #[error("CTranslate2 binary version {0} is not supported (6 is)")]
    Version(u32),
    #[error("CTranslate2 variable {name}: {why}")]
    Variable { name: String, why: String },
    #[error("missing CTranslate2 variable {0}")]
    Missing(String),
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

/// A parsed CTranslate2 model: its spec name (`WhisperSpec`) and variables by name, aliases
/// resolved (an alias maps to a copy of its target).
#[derive(Debug)]
pub struct Ct2Model {
    pub spec: String,
    pub vars: HashMap<String, Variable>,
}

struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], Ct2Error> {
        let end = self.at.checked_add(n).ok_or(Ct2Error::Truncated(what))?;
        let s = self.b.get(self.at..end).ok_or(Ct2Error::Truncated(what))?;
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self, what: &'static str) -> Result<u8, Ct2Error> {
        Ok(self.take(1, what)?[0])
    }
    fn u16(&mut self, what: &'static str) -> Result<u16, Ct2Error> {
        let s = self.take(2, what)?;
        Ok(u16::from_le_bytes([s[0], s[1]]))
    }
    fn u32(&mut self, what: &'static str) -> Result<u32, Ct2Error> {
        let s = self.take(4, what)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn name(&mut self, what: &'static str) -> Result<String, Ct2Error> {
        let n = self.u16(what)? as usize;
        let s = self.take(n, what)?;
        let s = s.strip_suffix(&[0]).unwrap_or(s);
        Ok(String::from_utf8_lossy(s).into_owned())
    }
}

fn dtype_size(code: u8) -> Option<usize> {
    match code {
        0 | 3 => Some(4),
        1 => Some(1),
        2 | 4 | 5 => Some(2),
        _ => None,
    }
}

impl Ct2Model {
    /// Parse a whole file's bytes.
    ///
    /// # Errors
    /// `Truncated`, `Version` (not 6), `Variable` (unknown dtype or a byte count that does not
    /// match the dims).
    pub fn parse(bytes: &[u8]) -> Result<Self, Ct2Error> {
        let mut c = Cursor { b: bytes, at: 0 };
        let version = c.u32("the header")?;
        if version != 6 {
            return Err(Ct2Error::Version(version));
        }
        let spec = c.name("the spec name")?;
        let _revision = c.u32("the header")?;
        let n_vars = c.u32("the header")?;
        let mut vars = HashMap::new();
        for _ in 0..n_vars {
            let name = c.name("a variable name")?;
            let rank = c.u8("a variable rank")?;
            let dims = (0..rank)
                .map(|_| c.u32("variable dims").map(|d| d as usize))
                .collect::<Result<Vec<_>, _>>()?;
            let dtype = c.u8("a variable dtype")?;
            let nbytes = c.u32("a variable size")? as usize;
            let data = c.take(nbytes, "variable data")?.to_vec();
            let bad = |why: String| Ct2Error::Variable {
                name: name.clone(),
                why,
            };
            let size = dtype_size(dtype).ok_or_else(|| bad(format!("unknown dtype {dtype}")))?;
            let elems: usize = dims.iter().product();
            if elems * size != nbytes {
                return Err(bad(format!("{nbytes} bytes for dims {dims:?}")));
            }
            vars.insert(name, Variable { dims, dtype, data });
        }
        let n_aliases = c.u32("the alias count")?;
        for _ in 0..n_aliases {
            let alias = c.name("an alias")?;
            let target = c.name("an alias target")?;
            let v = vars
                .get(&target)
                .cloned()
                .ok_or_else(|| Ct2Error::Missing(target.clone()))?;
            vars.insert(alias, v);
        }
        Ok(Self { spec, vars })
    }

    /// Variable `name` as an f32 tensor of its dims on `device` (f16 and bf16 widened).
    ///
    /// # Errors
    /// `Missing`, `Variable` (an integer dtype), candle errors.
    pub fn tensor(&self, name: &str, device: &Device) -> Result<Tensor, Ct2Error> {
        let v = self
            .vars
            .get(name)
            .ok_or_else(|| Ct2Error::Missing(name.to_string()))?;
        let dtype = match v.dtype {
            0 => DType::F32,
            4 => DType::F16,
            5 => DType::BF16,
            other => {
                return Err(Ct2Error::Variable {
                    name: name.into(),
                    why: format!("dtype {other} is not a float"),
                })
            }
        };
        let t = Tensor::from_raw_buffer(&v.data, dtype, &v.dims, device)?;
        Ok(t.to_dtype(DType::F32)?)
    }

    /// Scalar integer setting `name` (i8/i16/i32), e.g. `decoder/num_heads`.
    ///
    /// # Errors
    /// `Missing`, `Variable` (not an integer scalar).
    pub fn int(&self, name: &str) -> Result<i64, Ct2Error> {
        let v = self
            .vars
            .get(name)
            .ok_or_else(|| Ct2Error::Missing(name.to_string()))?;
        let d = &v.data;
        match (v.dtype, d.len()) {
            (1, 1) => Ok(i64::from(d[0] as i8)),
            (2, 2) => Ok(i64::from(i16::from_le_bytes([d[0], d[1]]))),
            (3, 4) => Ok(i64::from(i32::from_le_bytes([d[0], d[1], d[2], d[3]]))),
            _ => Err(Ct2Error::Variable {
                name: name.into(),
                why: "not an integer scalar".into(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn push_name(out: &mut Vec<u8>, s: &str) {
        out.extend(((s.len() + 1) as u16).to_le_bytes());
        out.extend(s.as_bytes());
        out.push(0);
    }

    /// A two-variable file with an alias, written by the layout in the module doc.
    fn tiny() -> Vec<u8> {
        let mut b = Vec::new();
        b.extend(6u32.to_le_bytes());
        push_name(&mut b, "WhisperSpec");
        b.extend(3u32.to_le_bytes());
        b.extend(2u32.to_le_bytes());
        push_name(&mut b, "w");
        b.push(2);
        b.extend(2u32.to_le_bytes());
        b.extend(1u32.to_le_bytes());
        b.push(4);
        b.extend(4u32.to_le_bytes());
        b.extend(half::f16::from_f32(1.5).to_le_bytes());
        b.extend(half::f16::from_f32(-2.0).to_le_bytes());
        push_name(&mut b, "heads");
        b.push(0);
        b.push(2);
        b.extend(2u32.to_le_bytes());
        b.extend(8i16.to_le_bytes());
        b.extend(1u32.to_le_bytes());
        push_name(&mut b, "alias");
        push_name(&mut b, "w");
        b
    }

    #[test]
    fn reads_variables_scalars_and_aliases() {
        let m = Ct2Model::parse(&tiny()).unwrap();
        assert_eq!(m.spec, "WhisperSpec");
        let t = m.tensor("alias", &Device::Cpu).unwrap();
        assert_eq!(t.dims(), &[2, 1]);
        assert_eq!(
            t.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            [1.5, -2.0]
        );
        assert_eq!(m.int("heads").unwrap(), 8);
        assert!(matches!(
            m.tensor("nope", &Device::Cpu),
            Err(Ct2Error::Missing(_))
        ));
    }

    #[test]
    fn truncated_and_wrong_sizes_are_errors_not_panics() {
        let b = tiny();
        for cut in [0, 3, 10, 30, b.len() - 1] {
            assert!(Ct2Model::parse(&b[..cut]).is_err(), "cut at {cut}");
        }
        let mut bad = b.clone();
        bad[0] = 5;
        assert!(matches!(Ct2Model::parse(&bad), Err(Ct2Error::Version(5))));
    }
}
