//! Image input for the models that read images: decoding a request's image with its size
//! bounded before any pixel is decoded (`decode`), resampling exactly as Pillow does
//! (`resize`), each family's preprocessing to the encoder's pixel values (`preprocess`: Gemma 3,
//! Idefics3/SmolVLM), the SigLIP encoder (`encoder`) and the projectors (`projector`), put
//! together from llama.cpp's `mmproj` GGUF in `model::VisionModel`, and placed in a prompt
//! (`prompt`). All of it is checked
//! against `transformers` on tiny models of each family (`tests/data/vision/`,
//! `scripts/vision-fixtures.py`).
//!
//! Owns: images from bytes to the text model's input rows. May use: the `image` crate, candle,
//! the text encoders' ops (`engine::embed`), the weights' GGUF reader, the engine's prompt types,
//! std. Never: HTTP, money,
//! tokenizers.

pub mod decode;
pub mod encoder;
pub mod model;
pub mod preprocess;
pub mod projector;
pub mod prompt;
pub mod resize;

pub use decode::{decode, ImageError, ImageLimits};
pub use model::{Grid, Layout, VisionModel};
pub use prompt::{Images, PlaceError};
pub use resize::{resize, Filter, Rgb8};
