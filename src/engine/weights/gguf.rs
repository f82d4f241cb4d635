//! GGUF file access: typed metadata reads and tensor loading (tensors stay in their stored type).
//!
//! Source: the GGUF format (ggml `docs/gguf.md`); tensors through `candle_core::quantized`.

use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use candle_core::quantized::{gguf_file, QTensor};

use super::store::{RopeLayout, TensorStore};
use candle_core::Device;

/// An open GGUF file: parsed header plus a reader for tensor data.
pub struct GgufFile {
    pub path: PathBuf,
    pub content: gguf_file::Content,
    reader: BufReader<File>,
    device: Device,
}

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

    pub fn metadata(&self) -> &HashMap<String, gguf_file::Value> {
        &self.content.metadata
    }
}

impl TensorStore for GgufFile {
    fn device(&self) -> Device {
        self.device.clone()
    }

    fn get(&self, key: &str) -> Option<&gguf_file::Value> {
        self.content.metadata.get(key)
    }

    fn has_tensor(&self, name: &str) -> bool {
        self.content.tensor_infos.contains_key(name)
    }

    fn qtensor(&mut self, name: &str) -> anyhow::Result<QTensor> {
        self.content
            .tensor(&mut self.reader, name, &self.device)
            .map_err(|e| anyhow::anyhow!("tensor `{name}` in `{}`: {e}", self.path.display()))
    }

    fn rope_layout(&self) -> RopeLayout {
        RopeLayout::LlamaCpp
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
