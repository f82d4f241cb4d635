//! Image input for the models that read images. So far: decoding a request's image with its
//! size bounded before any pixel is decoded (`decode`), resampling exactly as Pillow does
//! (`resize`), and each family's preprocessing to the encoder's pixel values (`preprocess`:
//! Gemma 3, Idefics3/SmolVLM), all checked against `transformers`' Pillow image processors
//! (`tests/data/vision/`, `scripts/vision-fixtures.py`). The vision encoders and projectors
//! build on these.
//!
//! Owns: images from bytes to pixel values. May use: the `image` crate, std. Never: HTTP, money,
//! tokenizers.

pub mod decode;
pub mod preprocess;
pub mod resize;

pub use decode::{decode, ImageError, ImageLimits};
pub use resize::{resize, Filter, Rgb8};
