//! A request's images in its prompt: decoded with their size bounded (`super::decode`), the
//! template's placeholders expanded into each image's tokens (`VisionModel::expansion`), the
//! runs of image tokens found once the prompt is tokenized, and, once the request's money is
//! held, the encoder's rows for each run (`PendingImages::encode`).
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
            let grid = vision
                .grid(rgb.width, rgb.height)
                .map_err(|error| PlaceError::Image { index, error })?;
            out.grids.push(grid);
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

    /// Pair each image with its runs of `image_token` in `ids`, in order: one `PromptImage` per
    /// run, its rows left empty, and the images kept for `PendingImages::encode`.
    ///
    /// # Errors
    /// `PlaceError::Tokens` when the runs do not add up to the images' tokens.
    pub fn place(
        self,
        vision: &VisionModel,
        ids: &[u32],
        image_token: u32,
    ) -> Result<(Vec<PromptImage>, PendingImages), PlaceError> {
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
        let expected: usize = self.grids.iter().map(|&g| vision.image_tokens(g)).sum();
        if found != expected {
            return Err(PlaceError::Tokens { found, expected });
        }
        let per_image: Vec<usize> = self.grids.iter().map(|&g| vision.image_tokens(g)).collect();
        let mut runs = runs.into_iter();
        let mut placed = Vec::new();
        let mut pending = Vec::with_capacity(self.decoded.len());
        let images = self.decoded.into_iter().zip(self.hashes);
        for (((image, hash), tokens), &grid) in images.zip(per_image).zip(&self.grids) {
            let first = placed.len();
            let mut used = 0;
            while used < tokens {
                let Some((at, len)) = runs.next() else {
                    return Err(PlaceError::Tokens { found, expected });
                };
                placed.push(PromptImage {
                    at,
                    len,
                    rows: Arc::from(Vec::new()),
                    bidirectional: vision.bidirectional(),
                    cols: vision.token_cols(grid),
                    hash,
                });
                used += len;
            }
            if used != tokens {
                return Err(PlaceError::Tokens { found, expected });
            }
            pending.push((image, first..placed.len()));
        }
        Ok((placed, PendingImages(Arc::new(pending))))
    }
}

/// A prompt's decoded images, waiting for the encoder: each with the indices of its runs in
/// `Prompt::images`. Kept apart so the encoder, the expensive part (seconds for a large image
/// on a CPU), runs only once the request's money is held (`Engine::encode_images`).
#[derive(Clone)]
pub struct PendingImages(Arc<Vec<(Rgb8, std::ops::Range<usize>)>>);

impl std::fmt::Debug for PendingImages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PendingImages({} images)", self.0.len())
    }
}

impl PendingImages {
    /// Images still to encode.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there is nothing to encode.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Preprocess and encode each image, and give each of its runs in `placed` (the
    /// `Prompt::images` that `Images::place` returned with these) its `[len][text width]` rows.
    ///
    /// # Errors
    /// `PlaceError::Encoder` when the encoder fails or `placed` is not the list these images
    /// were placed in.
    pub fn encode(
        &self,
        vision: &VisionModel,
        placed: &mut [PromptImage],
    ) -> Result<(), PlaceError> {
        let width = vision.text_width();
        for (image, runs) in self.0.iter() {
            let tiled = vision
                .preprocess(image)
                .map_err(|e| PlaceError::Encoder(e.to_string()))?;
            let rows = vision
                .embed(&tiled)
                .and_then(|t| t.flatten_all()?.to_vec1::<f32>())
                .map_err(|e| PlaceError::Encoder(e.to_string()))?;
            let Some(runs) = placed.get_mut(runs.clone()) else {
                return Err(PlaceError::Encoder(
                    "the image runs are not the ones these images were placed in".into(),
                ));
            };
            let mut used = 0;
            for run in runs.iter_mut() {
                let end = (used + run.len) * width;
                let Some(slice) = rows.get(used * width..end) else {
                    return Err(PlaceError::Encoder(format!(
                        "the encoder gave {} rows for {} tokens",
                        rows.len() / width.max(1),
                        end / width.max(1)
                    )));
                };
                run.rows = Arc::from(slice);
                used += run.len;
            }
        }
        Ok(())
    }
}
