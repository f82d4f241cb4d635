//! GGUF file access: typed metadata reads and tensor loading with requantization of slow types.
//!
//! Source: the GGUF format (ggml `docs/gguf.md`); tensors through `candle_core::quantized`.

use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use candle_core::quantized::{gguf_file, GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Tensor};

/// An open GGUF file: parsed header plus a reader for tensor data.
pub struct GgufFile {
    pub path: PathBuf,
    pub content: gguf_file::Content,
    reader: BufReader<File>,
    device: Device,
}

/// Tensor types whose candle 0.11 CPU kernels are scalar (about 1 GMAC/s); they are
/// requantized to Q8_0 at load until our own kernels land (issue "Engine performance").
const SLOW_TYPES: [GgmlDType; 3] = [GgmlDType::Q4_1, GgmlDType::Q5_0, GgmlDType::Q5_1];

impl GgufFile {
    /// Open and parse the header of `path`.
    ///
    /// # Errors
    /// I/O errors and malformed headers, with the path in the message.
    pub fn open(path: &Path, device: &Device) -> anyhow::Result<Self> {
        let file = File::open(path)
            .map_err(|e| anyhow::anyhow!("failed to open `{}`: {e}", path.display()))?;
        let mut reader = BufReader::new(file);
        let content = gguf_file::Content::read(&mut reader).map_err(|e| {
            anyhow::anyhow!("`{}` is not a readable GGUF file: {e}", path.display())
        })?;
        Ok(Self {
            path: path.to_owned(),
            content,
            reader,
            device: device.clone(),
        })
    }

    /// The device tensors are loaded to.
    pub fn device(&self) -> candle_core::Device {
        self.device.clone()
    }

    pub fn metadata(&self) -> &HashMap<String, gguf_file::Value> {
        &self.content.metadata
    }

    /// `general.architecture`, e.g. `llama`, `qwen2`, `gemma3`.
    pub fn architecture(&self) -> anyhow::Result<String> {
        Ok(self.string("general.architecture")?.to_owned())
    }

    pub fn get(&self, key: &str) -> Option<&gguf_file::Value> {
        self.content.metadata.get(key)
    }

    pub fn string(&self, key: &str) -> anyhow::Result<&str> {
        let v = self
            .get(key)
            .ok_or_else(|| anyhow::anyhow!("GGUF metadata `{key}` is missing"))?;
        Ok(v.to_string()
            .map_err(|e| anyhow::anyhow!("GGUF metadata `{key}`: {e}"))?
            .as_str())
    }

    /// An unsigned integer of any width.
    pub fn usize(&self, key: &str) -> anyhow::Result<usize> {
        let v = self
            .get(key)
            .ok_or_else(|| anyhow::anyhow!("GGUF metadata `{key}` is missing"))?;
        value_usize(v).ok_or_else(|| anyhow::anyhow!("GGUF metadata `{key}` is not an integer"))
    }

    pub fn usize_or(&self, key: &str, default: usize) -> usize {
        self.get(key).and_then(value_usize).unwrap_or(default)
    }

    pub fn f32_or(&self, key: &str, default: f32) -> f32 {
        self.get(key)
            .and_then(|v| {
                v.to_f32()
                    .ok()
                    .or_else(|| v.to_f64().ok().map(|f| f as f32))
            })
            .unwrap_or(default)
    }

    pub fn bool_or(&self, key: &str, default: bool) -> bool {
        self.get(key)
            .and_then(|v| v.to_bool().ok())
            .unwrap_or(default)
    }

    pub fn has_tensor(&self, name: &str) -> bool {
        self.content.tensor_infos.contains_key(name)
    }

    /// Load a tensor as stored in the file.
    pub fn qtensor(&mut self, name: &str) -> anyhow::Result<QTensor> {
        self.content
            .tensor(&mut self.reader, name, &self.device)
            .map_err(|e| anyhow::anyhow!("tensor `{name}` in `{}`: {e}", self.path.display()))
    }

    /// Load a tensor dequantized to f32 (norm weights, biases).
    pub fn tensor_f32(&mut self, name: &str) -> anyhow::Result<Tensor> {
        Ok(self.qtensor(name)?.dequantize(&self.device)?)
    }

    /// Load a weight matrix for `x @ W^T`, requantizing types with scalar CPU kernels to Q8_0.
    /// Returns the matmul and whether it was requantized.
    pub fn matmul(&mut self, name: &str) -> anyhow::Result<(QMatMul, bool)> {
        let q = self.qtensor(name)?;
        let (q, requantized) = requantize_if_slow(q, &self.device)?;
        Ok((QMatMul::from_qtensor(q)?, requantized))
    }
}

/// Requantize Q4_1/Q5_0/Q5_1 to Q8_0 on CPU (about 0.5 s for a 135M model); other types pass.
///
/// # Errors
/// candle errors from dequantize/quantize.
pub fn requantize_if_slow(q: QTensor, device: &Device) -> anyhow::Result<(QTensor, bool)> {
    if device.is_cpu() && SLOW_TYPES.contains(&q.dtype()) {
        let f = q.dequantize(device)?;
        Ok((QTensor::quantize(&f, GgmlDType::Q8_0)?, true))
    } else {
        Ok((q, false))
    }
}

fn value_usize(v: &gguf_file::Value) -> Option<usize> {
    use gguf_file::Value as V;
    match v {
        V::U8(x) => Some(usize::from(*x)),
        V::U16(x) => Some(usize::from(*x)),
        V::U32(x) => usize::try_from(*x).ok(),
        V::U64(x) => usize::try_from(*x).ok(),
        V::I8(x) => usize::try_from(*x).ok(),
        V::I16(x) => usize::try_from(*x).ok(),
        V::I32(x) => usize::try_from(*x).ok(),
        V::I64(x) => usize::try_from(*x).ok(),
        _ => None,
    }
}

/// Read a GGUF array of strings.
pub fn string_array(v: &gguf_file::Value) -> Option<Vec<String>> {
    v.to_vec()
        .ok()?
        .iter()
        .map(|x| x.to_string().ok().cloned())
        .collect()
}

/// Read a GGUF array of integers (any width) as i64.
pub fn int_array(v: &gguf_file::Value) -> Option<Vec<i64>> {
    use gguf_file::Value as V;
    v.to_vec()
        .ok()?
        .iter()
        .map(|x| match x {
            V::I32(i) => Some(i64::from(*i)),
            V::U32(i) => Some(i64::from(*i)),
            V::I8(i) => Some(i64::from(*i)),
            V::U8(i) => Some(i64::from(*i)),
            V::I16(i) => Some(i64::from(*i)),
            V::U16(i) => Some(i64::from(*i)),
            V::I64(i) => Some(*i),
            V::U64(i) => i64::try_from(*i).ok(),
            _ => None,
        })
        .collect()
}

/// Read a GGUF array of floats as f32.
pub fn f32_array(v: &gguf_file::Value) -> Option<Vec<f32>> {
    v.to_vec().ok()?.iter().map(|x| x.to_f32().ok()).collect()
}
