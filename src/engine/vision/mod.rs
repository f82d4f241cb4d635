//! Image input for the models that read images: decoding a request's image with its size
//! bounded before any pixel is decoded (`decode`), within a server-wide budget of bytes
//! decoded at once (`budget`), resampling exactly as Pillow does
//! (`resize`), each family's preprocessing to the encoder's pixel values (`preprocess`: Gemma 3,
//! Idefics3/SmolVLM, Qwen2.5-VL), the SigLIP encoder (`encoder`) and the projectors
//! (`projector`), Qwen2.5-VL's windowed encoder and merger (`qwen`), put
//! together from llama.cpp's `mmproj` GGUF in `model::VisionModel`, and placed in a prompt
//! (`prompt`). All of it is checked
//! against `transformers` on tiny models of each family (`tests/data/vision/`,
//! `scripts/fixtures/vision-fixtures.py`).
//!
//! Owns: images from bytes to the text model's input rows. May use: the `image` crate, candle,
//! the text encoders' ops (`engine::embed`), the weights' GGUF reader, the engine's prompt types,
//! std. Never: HTTP, money,
//! tokenizers.

pub mod budget;
pub mod decode;
pub mod encoder;
pub mod model;
pub mod preprocess;
pub mod projector;
pub mod prompt;
pub mod qwen;
pub mod resize;

pub use budget::{Busy, DecodeBudget, ImageBounds, ImageConfig};
pub use decode::{decode, probe, ImageError, ImageLimits, Probe};
pub use model::{Grid, Layout, VisionModel};
pub use prompt::{expand_at_least, Images, PendingImages, PlaceError, PromptImage};
pub use resize::{resize, Filter, Rgb8};

/// What the unit tests of these modules share: the fixtures of `tests/data/vision/`.
#[cfg(test)]
mod fixtures {
    use std::path::{Path, PathBuf};

    /// `tests/data/vision/<family>` and its parsed `reference.json`.
    pub fn fixture(family: &str) -> (PathBuf, serde_json::Value) {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/vision")
            .join(family);
        let text = std::fs::read_to_string(dir.join("reference.json")).expect("fixture");
        (dir, serde_json::from_str(&text).expect("json"))
    }

    /// A little-endian f32 array file.
    pub fn floats(path: &Path) -> Vec<f32> {
        std::fs::read(path)
            .expect("bin")
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect()
    }
}
