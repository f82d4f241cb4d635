//! A request's images in its prompt: decoded with their size bounded (`super::decode`), the
//! template's placeholders expanded into each image's tokens (`VisionModel::expansion`), and,
//! once the prompt is tokenized, the encoder's rows for each run of image tokens.
//!
//! Owns: matching images to placeholders and runs. May use: `super::{decode, model}`, the
//! engine's prompt types. Never: tokenizers, HTTP, money.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use super::decode::{decode, ImageError, ImageLimits};
use super::model::{Grid, VisionModel};
use super::resize::Rgb8;
use crate::engine::{InputImage, PromptImage};

/// A request's images, decoded, with the grid each is cut into.
pub struct Images {
    decoded: Vec<Rgb8>,
    grids: Vec<Grid>,
    /// A hash of each image's encoded bytes (for the prefix cache's key).
    hashes: Vec<u64>,
}

/// Why a request's images do not fit its prompt.
#[derive(Debug, thiserror::Error)]
pub enum PlaceError {
    /// Image `index` cannot be read or is too large.
    #[error("image {index}: {error}")]
    Image { index: usize, error: ImageError },
    /// The rendered template holds another number of image placeholders than there are images
    /// (a template that drops images, or text that writes a placeholder itself).
    #[error("the chat template placed {placed} image(s) for {sent} sent")]
    Count { placed: usize, sent: usize },
    /// The tokenized prompt's image tokens are not the images' (a tokenizer that splits the
    /// image token).
    #[error("the prompt has {found} image tokens where the images take {expected}")]
    Tokens { found: usize, expected: usize },
    #[error("the vision encoder failed: {0}")]
    Encoder(String),
}

impl Images {
    /// Decode `images` within `limits`.
    ///
    /// # Errors
    /// `PlaceError::Image` naming the first image that fails.
    pub fn read(
        vision: &VisionModel,
        images: &[InputImage],
        limits: &ImageLimits,
    ) -> Result<Self, PlaceError> {
        let mut out = Self {
            decoded: Vec::with_capacity(images.len()),
            grids: Vec::with_capacity(images.len()),
            hashes: Vec::with_capacity(images.len()),
        };
        for (index, image) in images.iter().enumerate() {
            let rgb =
                decode(&image.bytes, limits).map_err(|error| PlaceError::Image { index, error })?;
            out.grids.push(vision.grid(rgb.width, rgb.height));
            let mut h = std::collections::hash_map::DefaultHasher::new();
            image.bytes.hash(&mut h);
            out.hashes.push(h.finish());
            out.decoded.push(rgb);
        }
        Ok(out)
    }

    /// `text` with each of the template's image placeholders replaced by its image's tokens.
    ///
    /// # Errors
    /// `PlaceError::Count` when the placeholders are not one per image.
    pub fn expand(&self, vision: &VisionModel, text: &str) -> Result<String, PlaceError> {
        let pieces: Vec<&str> = text.split(vision.placeholder()).collect();
        let placed = pieces.len() - 1;
        if placed != self.grids.len() {
            return Err(PlaceError::Count {
                placed,
                sent: self.grids.len(),
            });
        }
        let mut out = String::with_capacity(text.len());
        for (i, piece) in pieces.iter().enumerate() {
            out.push_str(piece);
            if let Some(grid) = self.grids.get(i) {
                out.push_str(&vision.expansion(*grid));
            }
        }
        Ok(out)
    }

    /// Encode each image and pair its rows with its runs of `image_token` in `ids`, in order:
    /// one `PromptImage` per run.
    ///
    /// # Errors
    /// `PlaceError::Tokens` when the runs do not add up to the images' tokens; `Encoder`.
    pub fn place(
        &self,
        vision: &VisionModel,
        ids: &[u32],
        image_token: u32,
    ) -> Result<Vec<PromptImage>, PlaceError> {
        let mut runs: Vec<(usize, usize)> = Vec::new();
        for (i, &id) in ids.iter().enumerate() {
            if id != image_token {
                continue;
            }
            match runs.last_mut() {
                Some((first, len)) if *first + *len == i => *len += 1,
                _ => runs.push((i, 1)),
            }
        }
        let found: usize = runs.iter().map(|r| r.1).sum();
        let per_tile = vision.tokens_per_tile();
        let expected: usize = self.grids.iter().map(|g| g.tiles() * per_tile).sum();
        if found != expected {
            return Err(PlaceError::Tokens { found, expected });
        }
        let width = vision.text_width();
        let mut runs = runs.into_iter();
        let mut out = Vec::new();
        for (k, image) in self.decoded.iter().enumerate() {
            let tiles = vision.preprocess(image).tiles;
            let rows = vision
                .embed(&tiles)
                .and_then(|t| t.flatten_all()?.to_vec1::<f32>())
                .map_err(|e| PlaceError::Encoder(e.to_string()))?;
            let mut used = 0;
            while used * width < rows.len() {
                let Some((at, len)) = runs.next() else {
                    return Err(PlaceError::Tokens { found, expected });
                };
                let end = (used + len) * width;
                let Some(slice) = rows.get(used * width..end) else {
                    return Err(PlaceError::Tokens { found, expected });
                };
                out.push(PromptImage {
                    at,
                    len,
                    rows: Arc::from(slice),
                    bidirectional: vision.bidirectional(),
                    hash: self.hashes[k],
                });
                used += len;
            }
        }
        Ok(out)
    }
}
