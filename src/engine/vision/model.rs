//! A vision model loaded from llama.cpp's `mmproj` GGUF (`general.architecture = clip`): the
//! family's preprocessing, the encoder (SigLIP, or Qwen2.5-VL's windowed ViT) and the projector,
//! from an image's pixels to the rows that replace its image tokens in the text model's input.
//!
//! Owns: which family an `mmproj` is and how many tokens an image costs in it. May use:
//! `super::{preprocess, encoder, projector, qwen, resize}`, the weights' GGUF reader, candle. Never:
//! tokenizers, HTTP, money.

use std::path::Path;

use candle_core::{Device, Tensor};

use super::decode::{ImageError, ImageLimits};
use super::encoder::Siglip;
use super::preprocess::{
    gemma3_fit, idefics3_fit, idefics3_grid, idefics3_tiles, qwen2vl_fit, smart_resize, to_chw,
    Normalize, Tiled,
};
use super::projector::Projector;
use super::qwen::{QwenVit, MERGE};
use super::resize::Rgb8;
use crate::engine::weights::gguf::{f32_array, GgufFile};
use crate::engine::weights::store::TensorStore;

/// How a family turns an image into encoder tiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Gemma 3: one tile, the image stretched to the encoder's square.
    Stretch,
    /// Idefics3/SmolVLM: resized to `longest` pixels on its longer side, cut into encoder-sized
    /// tiles (row-major) plus a global image when it spans more than one.
    Tiles {
        /// `clip.vision.preproc_image_size`, pixels.
        longest: usize,
    },
    /// Qwen2.5-VL: the aspect kept, each side a multiple of 28 pixels, the area within
    /// `min_pixels..=max_pixels`; one token per 28x28 pixels.
    Dynamic {
        min_pixels: usize,
        max_pixels: usize,
    },
}

/// Qwen2.5-VL's smallest image, pixels (its `preprocessor_config.json`: 4 tokens).
pub const QWEN_MIN_PIXELS: usize = 56 * 56;
/// Qwen2.5-VL's largest image, pixels: `Qwen2VLImageProcessor`'s default of 1,280 tokens. The
/// published configs allow 16,384 tokens (12,845,056 pixels), minutes of encoder time on a CPU
/// for one image; larger images are scaled down to this, as `smart_resize` does.
pub const QWEN_MAX_PIXELS: usize = 28 * 28 * 1280;

/// An image's tiles as the text model sees them: `rows x cols` tiles then a global one, or a
/// single tile when `rows == 0`. For `Layout::Dynamic`, `rows x cols` 14-pixel patches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grid {
    pub rows: usize,
    pub cols: usize,
}

impl Grid {
    /// Encoder tiles: `rows · cols + 1` (the global image), or 1.
    pub fn tiles(&self) -> usize {
        if self.rows == 0 {
            1
        } else {
            self.rows * self.cols + 1
        }
    }
}

/// The encoder and projector of a family.
enum Tower {
    Siglip {
        encoder: Siglip,
        projector: Projector,
    },
    Qwen(QwenVit),
}

/// A loaded `mmproj`: preprocessing settings, encoder and projector (f32, CPU).
pub struct VisionModel {
    pub layout: Layout,
    pub normalize: Normalize,
    tower: Tower,
}

impl VisionModel {
    /// Open and load an `mmproj` GGUF.
    ///
    /// # Errors
    /// A file that is not a readable GGUF, not a vision `clip` file, or of an unsupported
    /// projector type, or missing tensors; each names the file.
    pub fn open(path: &Path) -> anyhow::Result<Self> {
        let mut file = GgufFile::open(path, &Device::Cpu)?;
        Self::load(&mut file).map_err(|e| anyhow::anyhow!("`{}`: {e}", path.display()))
    }

    /// Load from an open `mmproj` store.
    ///
    /// # Errors
    /// As `open`.
    pub fn load(store: &mut GgufFile) -> anyhow::Result<Self> {
        let arch = store.architecture()?;
        anyhow::ensure!(
            arch == "clip" && store.bool_or("clip.has_vision_encoder", false),
            "not a vision projector file (architecture `{arch}`; expected an mmproj GGUF)"
        );
        let channels = |key: &str| -> anyhow::Result<[f32; 3]> {
            let v = store
                .get(key)
                .and_then(f32_array)
                .ok_or_else(|| anyhow::anyhow!("metadata `{key}` is missing"))?;
            <[f32; 3]>::try_from(v.as_slice())
                .map_err(|_| anyhow::anyhow!("metadata `{key}` has {} values, not 3", v.len()))
        };
        let normalize = Normalize {
            mean: channels("clip.vision.image_mean")?,
            std: channels("clip.vision.image_std")?,
        };
        if store.string("clip.projector_type")? == "qwen2.5vl_merger" {
            return Ok(Self {
                layout: Layout::Dynamic {
                    min_pixels: QWEN_MIN_PIXELS,
                    max_pixels: QWEN_MAX_PIXELS,
                },
                normalize,
                tower: Tower::Qwen(QwenVit::load(store)?),
            });
        }
        let encoder = Siglip::load(store)?;
        let shape = encoder.shape;
        let projector = Projector::load(store, shape.side(), shape.hidden, shape.eps)?;
        let layout = match projector {
            Projector::Gemma3 { .. } => Layout::Stretch,
            Projector::Idefics3 { .. } => Layout::Tiles {
                longest: store.usize_or("clip.vision.preproc_image_size", shape.image_size),
            },
        };
        Ok(Self {
            layout,
            normalize,
            tower: Tower::Siglip { encoder, projector },
        })
    }

    /// This model with another pixel range for `Layout::Dynamic` (nothing for the others): the
    /// preprocessor's `min_pixels` and `max_pixels`.
    pub fn with_pixel_range(mut self, min: usize, max: usize) -> Self {
        if let Layout::Dynamic { .. } = self.layout {
            self.layout = Layout::Dynamic {
                min_pixels: min,
                max_pixels: max,
            };
        }
        self
    }

    /// The encoder's square input side, pixels; for `Layout::Dynamic`, the side of the
    /// 2x2 patches that make one token (28).
    pub fn tile_size(&self) -> usize {
        match &self.tower {
            Tower::Siglip { encoder, .. } => encoder.shape.image_size,
            Tower::Qwen(vit) => vit.patch_size * MERGE,
        }
    }

    /// Tokens each tile becomes in the text model (1 for `Layout::Dynamic`: a token per
    /// `tile_size` square).
    pub fn tokens_per_tile(&self) -> usize {
        match &self.tower {
            Tower::Siglip { encoder, projector } => projector.tokens_per_tile(encoder.shape.side()),
            Tower::Qwen(_) => 1,
        }
    }

    /// The text model's embedding width the projector writes.
    pub fn text_width(&self) -> usize {
        match &self.tower {
            Tower::Siglip { projector, .. } => projector.text_width(),
            Tower::Qwen(vit) => vit.text_width(),
        }
    }

    /// The grid a `width x height` image is cut into, from its size alone.
    ///
    /// # Errors
    /// `ImageError::Shape` for an image `Layout::Dynamic` cannot take (one side more than
    /// 200 times the other).
    pub fn grid(&self, width: usize, height: usize) -> Result<Grid, ImageError> {
        Ok(match self.layout {
            Layout::Stretch => Grid { rows: 0, cols: 0 },
            Layout::Tiles { longest } => {
                let (rows, cols) = idefics3_grid(width, height, longest, self.tile_size());
                Grid { rows, cols }
            }
            Layout::Dynamic {
                min_pixels,
                max_pixels,
            } => {
                let (h, w) = smart_resize(height, width, self.tile_size(), min_pixels, max_pixels)
                    .ok_or(ImageError::Shape { width, height })?;
                let patch = self.tile_size() / MERGE;
                Grid {
                    rows: h / patch,
                    cols: w / patch,
                }
            }
        })
    }

    /// Image tokens an image of `grid` costs.
    pub fn image_tokens(&self, grid: Grid) -> usize {
        match self.layout {
            Layout::Dynamic { .. } => grid.rows * grid.cols / (MERGE * MERGE),
            _ => grid.tiles() * self.tokens_per_tile(),
        }
    }

    /// For a family with multimodal RoPE (`Layout::Dynamic`), the width in tokens of an image of
    /// `grid` (its tokens are one run, row-major); `None` for the others.
    pub fn token_cols(&self, grid: Grid) -> Option<usize> {
        match self.layout {
            Layout::Dynamic { .. } => Some(grid.cols / MERGE),
            _ => None,
        }
    }

    /// Image tokens a `width x height` image costs, from its size alone.
    ///
    /// # Errors
    /// As `grid`.
    pub fn tokens(&self, width: usize, height: usize) -> Result<usize, ImageError> {
        Ok(self.image_tokens(self.grid(width, height)?))
    }

    /// What the family's chat template writes for an image part; `expansion` replaces it.
    pub fn placeholder(&self) -> &'static str {
        match self.layout {
            Layout::Stretch => "<start_of_image>",
            Layout::Tiles { .. } => "<image>",
            Layout::Dynamic { .. } => "<|vision_start|><|image_pad|><|vision_end|>",
        }
    }

    /// The token whose positions the image's rows fill.
    pub fn image_token(&self) -> &'static str {
        match self.layout {
            Layout::Stretch => "<image_soft_token>",
            Layout::Tiles { .. } => "<image>",
            Layout::Dynamic { .. } => "<|image_pad|>",
        }
    }

    /// Whether an image's tokens attend to each other both ways (Gemma 3) or causally.
    pub fn bidirectional(&self) -> bool {
        self.layout == Layout::Stretch
    }

    /// The prompt text an image of `grid` takes in place of `placeholder`, as `transformers`'
    /// processors write it: Gemma 3's `\n\n<start_of_image>`, the image tokens and
    /// `<end_of_image>\n\n` (`Gemma3Processor`); Idefics3's tiles row by row, each
    /// `<fake_token_around_image><row_R_col_C>` and its image tokens, a newline after each row,
    /// then the global image (`Idefics3Processor`, `get_image_prompt_string`); Qwen2.5-VL's
    /// `<|image_pad|>` once per token between `<|vision_start|>` and `<|vision_end|>`
    /// (`Qwen2_5_VLProcessor`).
    pub fn expansion(&self, grid: Grid) -> String {
        let n = self.tokens_per_tile();
        let tokens = self.image_token().repeat(n);
        match self.layout {
            Layout::Dynamic { .. } => format!(
                "<|vision_start|>{}<|vision_end|>",
                self.image_token().repeat(self.image_tokens(grid))
            ),
            Layout::Stretch => format!("\n\n<start_of_image>{tokens}<end_of_image>\n\n"),
            Layout::Tiles { .. } => {
                const FAKE: &str = "<fake_token_around_image>";
                let global = format!("{FAKE}<global-img>{tokens}{FAKE}");
                if grid.rows == 0 {
                    return global;
                }
                let mut text = String::new();
                for r in 1..=grid.rows {
                    for c in 1..=grid.cols {
                        text.push_str(&format!("{FAKE}<row_{r}_col_{c}>{tokens}"));
                    }
                    text.push('\n');
                }
                text.push('\n');
                text.push_str(&global);
                text
            }
        }
    }

    /// The family's pixel values for `image`: each tile `[3, S, S]`; for `Layout::Dynamic`
    /// one `[3, rows·14, cols·14]` image of `rows x cols` patches. The same as
    /// `preprocess_fitted(&fit(image)?)`.
    ///
    /// # Errors
    /// As `grid`.
    pub fn preprocess(&self, image: &Rgb8) -> Result<Tiled, ImageError> {
        Ok(self.preprocess_fitted(&self.fit(image)?))
    }

    /// The family's first resize of a decoded image, the one that makes it the size its
    /// encoder reads (Gemma 3: the square; Idefics3: the longest edge; Qwen2.5-VL: the
    /// `smart_resize` size). Once an image is fitted its full-size pixels can go: every later
    /// step reads the fitted image only (`preprocess_fitted`).
    ///
    /// # Errors
    /// As `grid`.
    pub fn fit(&self, image: &Rgb8) -> Result<Rgb8, ImageError> {
        Ok(match self.layout {
            Layout::Stretch => gemma3_fit(image, self.tile_size()),
            Layout::Tiles { longest } => idefics3_fit(image, longest),
            Layout::Dynamic { .. } => {
                let Grid { rows, cols } = self.grid(image.width, image.height)?;
                let patch = self.tile_size() / MERGE;
                qwen2vl_fit(image, rows * patch, cols * patch)
            }
        })
    }

    /// The pixel values of an image `fit` returned.
    pub fn preprocess_fitted(&self, fitted: &Rgb8) -> Tiled {
        match self.layout {
            Layout::Stretch => Tiled {
                tiles: vec![to_chw(fitted, &self.normalize)],
                rows: 0,
                cols: 0,
            },
            Layout::Tiles { .. } => idefics3_tiles(fitted, self.tile_size(), &self.normalize),
            Layout::Dynamic { .. } => {
                let patch = self.tile_size() / MERGE;
                Tiled {
                    tiles: vec![to_chw(fitted, &self.normalize)],
                    rows: fitted.height / patch,
                    cols: fitted.width / patch,
                }
            }
        }
    }

    /// Bytes an image of `grid` takes once decoded and fitted, whatever size it was sent at:
    /// its fitted 8-bit RGB and its f32 pixel values (`preprocess_fitted`), 15 bytes a pixel
    /// the encoder reads. With `Probe::decode_bytes`, what the decode budget reserves for it.
    pub fn work_bytes(&self, grid: Grid) -> u64 {
        let pixels = match self.layout {
            Layout::Dynamic { .. } => {
                let patch = self.tile_size() / MERGE;
                grid.rows * patch * grid.cols * patch
            }
            _ => grid.tiles() * self.tile_size() * self.tile_size(),
        };
        pixels as u64 * 15
    }

    /// The grid of the image that costs the fewest tokens in this family, for a prompt's
    /// lower bound before an image's size is known (a remote image not fetched yet): Gemma 3's
    /// one tile; Idefics3's single row of tiles (an image far wider than tall) and its global
    /// image; Qwen2.5-VL's `min_pixels` in 28-pixel tokens, rounded down.
    pub fn min_grid(&self) -> Grid {
        match self.layout {
            Layout::Stretch => Grid { rows: 0, cols: 0 },
            Layout::Tiles { longest } => {
                let (rows, cols) = idefics3_grid(longest, 1, longest, self.tile_size());
                Grid { rows, cols }
            }
            Layout::Dynamic { min_pixels, .. } => {
                let tokens = (min_pixels / (self.tile_size() * self.tile_size())).max(1);
                Grid {
                    rows: MERGE,
                    cols: MERGE * tokens,
                }
            }
        }
    }

    /// The most pixels an image sent to this model may have: 16 times the area its encoder
    /// reads (a 4x downscale a side, past which a larger image adds nothing the model sees),
    /// within 2048² and 4096² (a 12-megapixel phone photo fits every family; 8192x4096, the
    /// server-wide limit, fits none). Gemma 3 at 896: 12,845,056; SmolVLM at 2,048 and
    /// Qwen2.5-VL at 1,280 tokens: 16,777,216 and 16,056,320.
    pub fn max_input_pixels(&self) -> u64 {
        let area = match self.layout {
            Layout::Stretch => self.tile_size() * self.tile_size(),
            Layout::Tiles { longest } => longest * longest,
            Layout::Dynamic { max_pixels, .. } => max_pixels,
        };
        (16 * area as u64).clamp(2048 * 2048, 4096 * 4096)
    }

    /// `server`'s limits narrowed to this model's pixel cap (`max_input_pixels`).
    pub fn limits(&self, server: &ImageLimits) -> ImageLimits {
        ImageLimits {
            max_pixels: server.max_pixels.min(self.max_input_pixels()),
            ..*server
        }
    }

    /// The embeddings of a preprocessed image: `[image tokens, text width]`, in the order its
    /// image tokens take in the prompt (tiles row-major, then the global image; Qwen2.5-VL's
    /// tokens row-major).
    ///
    /// # Errors
    /// A tile of the wrong size, or candle's errors.
    pub fn embed(&self, image: &Tiled) -> candle_core::Result<Tensor> {
        match &self.tower {
            Tower::Siglip { encoder, projector } => {
                let refs: Vec<&[f32]> = image.tiles.iter().map(Vec::as_slice).collect();
                let hidden = encoder.forward(&refs)?;
                projector.forward(&hidden, refs.len(), encoder.shape.side())
            }
            Tower::Qwen(vit) => match image.tiles.as_slice() {
                [pixels] => vit.forward(pixels, image.rows, image.cols),
                _ => candle_core::bail!("vision: Qwen2.5-VL takes one image, not tiles"),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{fixture, floats};
    use super::*;

    /// The worst difference relative to the reference's largest magnitude.
    fn relative(got: &[f32], want: &[f32]) -> f32 {
        assert_eq!(got.len(), want.len());
        let scale = want.iter().fold(0f32, |m, x| m.max(x.abs()));
        let worst = got
            .iter()
            .zip(want)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        worst / scale
    }

    /// For both families and the three fixture images (square, landscape, portrait), the
    /// projected image features from `transformers`' own pixel values, and from ours, match
    /// `get_image_features` within 1e-3 of their largest magnitude (Gemma 3's projection is
    /// stored in f16, so its features are the least exact).
    #[test]
    fn features_match_transformers() {
        for family in ["gemma3", "smolvlm"] {
            let (dir, reference) = fixture(family);
            let model = VisionModel::open(&dir.join("mmproj.gguf")).expect("mmproj");
            for item in reference["images"].as_array().expect("images") {
                let name = format!("{family}/{}", item["name"].as_str().unwrap_or("?"));
                let want = floats(&dir.join(item["features"]["file"].as_str().expect("f")));
                let pixels = floats(&dir.join(item["pixel_values"]["file"].as_str().expect("p")));
                let per_tile = 3 * model.tile_size() * model.tile_size();
                let tiles: Vec<Vec<f32>> = pixels.chunks(per_tile).map(<[f32]>::to_vec).collect();
                let tiled = Tiled {
                    tiles,
                    rows: 0,
                    cols: 0,
                };
                let got = model.embed(&tiled).expect("embed");
                let got = got.flatten_all().unwrap().to_vec1::<f32>().unwrap();
                let err = relative(&got, &want);
                eprintln!("{name}: features from reference pixels, relative error {err:.2e}");
                assert!(err < 1e-3, "{name}: {err}");

                let bytes =
                    std::fs::read(dir.join(item["file"].as_str().expect("file"))).expect("image");
                let image = super::super::decode(&bytes, &super::super::ImageLimits::default())
                    .expect("decode");
                let ours = model.preprocess(&image).expect("preprocess");
                let tokens = model.tokens(image.width, image.height).expect("tokens");
                assert_eq!(
                    tokens,
                    want.len() / model.text_width(),
                    "{name}: token count"
                );
                let got = model.embed(&ours).expect("embed");
                let got = got.flatten_all().unwrap().to_vec1::<f32>().unwrap();
                let err = relative(&got, &want);
                eprintln!("{name}: features from our pixels, relative error {err:.2e}");
                assert!(err < 1e-3, "{name}: {err}");
            }
        }
    }

    /// Qwen2.5-VL on the three fixture images (`scripts/fixtures/vision-fixtures-qwen.py`): the grid,
    /// the resized image (byte for byte, Pillow's bicubic), the window order, and the features
    /// from our own pixels within 1e-4 of `get_image_features` (f32 throughout).
    #[test]
    fn qwen25vl_features_match_transformers() {
        let (dir, reference) = fixture("qwen25vl");
        let pre = &reference["model"]["preprocessor"];
        let range = |k: &str| pre[k].as_u64().expect("pixels") as usize;
        let model = VisionModel::open(&dir.join("mmproj.gguf"))
            .expect("mmproj")
            .with_pixel_range(range("min_pixels"), range("max_pixels"));
        for item in reference["images"].as_array().expect("images") {
            let name = item["name"].as_str().unwrap_or("?");
            let bytes =
                std::fs::read(dir.join(item["file"].as_str().expect("file"))).expect("image");
            let image = super::super::decode(&bytes, &super::super::ImageLimits::default())
                .expect("decode");
            let grid = model.grid(image.width, image.height).expect("grid");
            let thw = &item["image_grid_thw"];
            assert_eq!(
                [grid.rows as u64, grid.cols as u64],
                [thw[1].as_u64().unwrap(), thw[2].as_u64().unwrap()],
                "{name}: grid"
            );
            let resized = std::fs::read(dir.join(item["resized"]["file"].as_str().expect("r")))
                .expect("resized");
            let ours = super::super::resize(
                &image,
                grid.cols * 14,
                grid.rows * 14,
                super::super::Filter::Bicubic,
            );
            assert!(ours.data == resized, "{name}: resized pixels differ");
            let order: Vec<usize> =
                serde_json::from_value(item["window_index"].clone()).expect("order");
            let (got, _) = super::super::qwen::window_order(grid.rows / 2, grid.cols / 2);
            assert_eq!(got, order, "{name}: window order");
            let want = floats(&dir.join(item["features"]["file"].as_str().expect("f")));
            let tokens = model.tokens(image.width, image.height).expect("tokens");
            assert_eq!(tokens, want.len() / model.text_width(), "{name}: tokens");
            let tiled = model.preprocess(&image).expect("preprocess");
            let got = model.embed(&tiled).expect("embed");
            let got = got.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            let err = relative(&got, &want);
            eprintln!("qwen25vl/{name}: features from our pixels, relative error {err:.2e}");
            assert!(err < 1e-4, "{name}: {err}");
        }
    }
}
