//! A request's images in its prompt: their headers read with their size bounded
//! (`super::decode::probe`, no pixel decoded), the template's placeholders expanded into each
//! image's tokens (`VisionModel::expansion`, from the size alone), the runs of image tokens
//! found once the prompt is tokenized, and, once the request's money is held, each image
//! decoded within the server's decode budget, resized to what its model reads and encoded into
//! the rows of its runs (`PendingImages::encode`).
//!
//! Owns: matching images to placeholders and runs, the per-request decode bound. May use:
//! `super::{decode, model, budget}`, the engine's prompt types. Never: tokenizers, HTTP, money.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use super::budget::{Busy, DecodeBudget};
use super::decode::{decode, probe, ImageError, ImageLimits};
use super::model::{Grid, VisionModel};
use crate::engine::text::chat::InputImage;

/// A run of image tokens in a prompt and the rows that replace their embeddings.
#[derive(Debug, Clone)]
pub struct PromptImage {
    /// Index in `Prompt::token_ids` of the run's first token.
    pub at: usize,
    /// The run's tokens.
    pub len: usize,
    /// `[len][hidden]` f32; empty until `Engine::encode_images`.
    pub rows: Arc<[f32]>,
    /// The run's tokens attend to each other both ways (Gemma 3).
    pub bidirectional: bool,
    /// The run as a grid this many tokens wide, for multimodal RoPE (Qwen2.5-VL:
    /// `model::mrope_position`); `None` where positions are token indices.
    pub cols: Option<usize>,
    /// A hash of the image's rows, so the prefix cache never takes one image's KV rows for
    /// another's (`Prompt::cache_key`).
    pub hash: u64,
}

impl PromptImage {
    /// The run's positions in the prompt.
    pub fn range(&self) -> std::ops::Range<usize> {
        self.at..self.at + self.len
    }
}

/// An image as sent (encoded), with the bytes it takes from its decode to its encoding
/// (`Probe::decode_bytes` and `VisionModel::work_bytes`).
type Source = (Arc<[u8]>, u64);

/// A request's images, their headers read, with the grid each is cut into.
pub struct Images {
    /// Each image as sent.
    sources: Vec<Source>,
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
    /// No room in the server's decode budget came free in time.
    #[error("{0}")]
    Busy(Busy),
}

impl Images {
    /// Read the headers of `images` within `limits` (each image's) and `request_bytes` (the
    /// bytes all of them take to decode, together): sizes, grids and costs, no pixel decoded.
    ///
    /// # Errors
    /// `PlaceError::Image` naming the first image that fails, or the one whose decode passes
    /// `request_bytes` (`ImageError::RequestTooLarge`).
    pub fn read(
        vision: &VisionModel,
        images: &[InputImage],
        limits: &ImageLimits,
        request_bytes: u64,
    ) -> Result<Self, PlaceError> {
        let mut out = Self {
            sources: Vec::with_capacity(images.len()),
            grids: Vec::with_capacity(images.len()),
            hashes: Vec::with_capacity(images.len()),
        };
        let mut total = 0u64;
        for (index, image) in images.iter().enumerate() {
            let failed = |error| PlaceError::Image { index, error };
            let head = probe(&image.bytes, limits).map_err(failed)?;
            total = total.saturating_add(head.decode_bytes);
            if total > request_bytes {
                return Err(failed(ImageError::RequestTooLarge {
                    bytes: total,
                    limit: request_bytes,
                }));
            }
            let grid = vision
                .grid(head.width as usize, head.height as usize)
                .map_err(failed)?;
            out.grids.push(grid);
            let mut h = std::collections::hash_map::DefaultHasher::new();
            image.bytes.hash(&mut h);
            out.hashes.push(h.finish());
            let cost = head.decode_bytes.saturating_add(vision.work_bytes(grid));
            out.sources.push((image.bytes.clone(), cost));
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
        Ok(expand_grids(vision, &pieces, &self.grids))
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
        let mut pending = Vec::with_capacity(self.sources.len());
        let images = self.sources.into_iter().zip(self.hashes);
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

/// `text` (split at its image placeholders into `pieces`, one more than `grids`) with each
/// placeholder replaced by the tokens of the image of that grid.
fn expand_grids(vision: &VisionModel, pieces: &[&str], grids: &[Grid]) -> String {
    let mut out = String::with_capacity(pieces.iter().map(|p| p.len()).sum());
    for (i, piece) in pieces.iter().enumerate() {
        out.push_str(piece);
        if let Some(grid) = grids.get(i) {
            out.push_str(&vision.expansion(*grid));
        }
    }
    out
}

/// `text` with each of the template's image placeholders replaced by the tokens of the
/// family's cheapest image (`VisionModel::min_grid`): the prompt's fewest tokens whatever
/// the images turn out to be, for a balance and context check before any is fetched.
///
/// # Errors
/// `PlaceError::Count` when the placeholders are not `images`.
pub fn expand_at_least(
    vision: &VisionModel,
    text: &str,
    images: usize,
) -> Result<String, PlaceError> {
    let pieces: Vec<&str> = text.split(vision.placeholder()).collect();
    let placed = pieces.len() - 1;
    if placed != images {
        return Err(PlaceError::Count {
            placed,
            sent: images,
        });
    }
    Ok(expand_grids(
        vision,
        &pieces,
        &vec![vision.min_grid(); images],
    ))
}

/// A prompt's images, waiting for the encoder, still encoded as sent: each with the bytes its
/// decode takes and the indices of its runs in `Prompt::images`. Kept apart so decoding and
/// the encoder, the expensive part (seconds for a large image on a CPU), run only once the
/// request's money is held (`Engine::encode_images`).
#[derive(Clone)]
pub struct PendingImages(Arc<Vec<(Source, std::ops::Range<usize>)>>);

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

    /// One image after another: reserve its bytes in `budget` (its decode and its fitted
    /// pixels), decode it within `limits`, resize it to what the model reads
    /// (`VisionModel::fit`) and drop the full-size pixels, preprocess and encode it, free the
    /// reservation, and give each of its runs in `placed` (the `Prompt::images` that
    /// `Images::place` returned with these) its `[len][text width]` rows. So a request holds
    /// one image's pixels at a time, and the server no more than `budget` allows.
    ///
    /// # Errors
    /// `PlaceError::Busy` when the budget had no room in time; `PlaceError::Image` for an image
    /// whose pixels cannot be decoded; `PlaceError::Encoder` when the encoder fails or `placed`
    /// is not the list these images were placed in.
    pub fn encode(
        &self,
        vision: &VisionModel,
        placed: &mut [PromptImage],
        budget: &DecodeBudget,
        limits: &ImageLimits,
    ) -> Result<(), PlaceError> {
        let width = vision.text_width();
        for (index, ((bytes, cost), runs)) in self.0.iter().enumerate() {
            let room = budget.acquire(*cost).map_err(PlaceError::Busy)?;
            let failed = |error| PlaceError::Image { index, error };
            let fitted = vision
                .fit(&decode(bytes, limits).map_err(failed)?)
                .map_err(failed)?;
            let tiled = vision.preprocess_fitted(&fitted);
            drop(fitted);
            let rows = vision
                .embed(&tiled)
                .and_then(|t| t.flatten_all()?.to_vec1::<f32>())
                .map_err(|e| PlaceError::Encoder(e.to_string()))?;
            drop((tiled, room));
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
