//! A vision model loaded from llama.cpp's `mmproj` GGUF (`general.architecture = clip`): the
//! family's preprocessing, the SigLIP encoder and the projector, from an image's pixels to the
//! rows that replace its image tokens in the text model's input.
//!
//! Owns: which family an `mmproj` is and how many tokens an image costs in it. May use:
//! `super::{preprocess, encoder, projector, resize}`, the weights' GGUF reader, candle. Never:
//! tokenizers, HTTP, money.

use std::path::Path;

use candle_core::{Device, Tensor};

use super::encoder::Siglip;
use super::preprocess::{gemma3, idefics3, idefics3_grid, Normalize, Tiled};
use super::projector::Projector;
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
}

/// An image's tiles as the text model sees them: `rows x cols` tiles then a global one, or a
/// single tile when `rows == 0`.
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

/// A loaded `mmproj`: preprocessing settings, encoder and projector (f32, CPU).
pub struct VisionModel {
    pub layout: Layout,
    pub normalize: Normalize,
    encoder: Siglip,
    projector: Projector,
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
            encoder,
            projector,
        })
    }

    /// The encoder's square input side, pixels.
    pub fn tile_size(&self) -> usize {
        self.encoder.shape.image_size
    }

    /// Tokens each tile becomes in the text model.
    pub fn tokens_per_tile(&self) -> usize {
        self.projector.tokens_per_tile(self.encoder.shape.side())
    }

    /// The text model's embedding width the projector writes.
    pub fn text_width(&self) -> usize {
        self.projector.text_width()
    }

    /// The grid a `width x height` image is cut into, from its size alone.
    pub fn grid(&self, width: usize, height: usize) -> Grid {
        match self.layout {
            Layout::Stretch => Grid { rows: 0, cols: 0 },
            Layout::Tiles { longest } => {
                let (rows, cols) = idefics3_grid(width, height, longest, self.tile_size());
                Grid { rows, cols }
            }
        }
    }

    /// Image tokens a `width x height` image costs, from its size alone.
    pub fn tokens(&self, width: usize, height: usize) -> usize {
        self.grid(width, height).tiles() * self.tokens_per_tile()
    }

    /// What the family's chat template writes for an image part; `expansion` replaces it.
    pub fn placeholder(&self) -> &'static str {
        match self.layout {
            Layout::Stretch => "<start_of_image>",
            Layout::Tiles { .. } => "<image>",
        }
    }

    /// The token whose positions the image's rows fill.
    pub fn image_token(&self) -> &'static str {
        match self.layout {
            Layout::Stretch => "<image_soft_token>",
            Layout::Tiles { .. } => "<image>",
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
    /// then the global image (`Idefics3Processor`, `get_image_prompt_string`).
    pub fn expansion(&self, grid: Grid) -> String {
        let n = self.tokens_per_tile();
        let tokens = self.image_token().repeat(n);
        match self.layout {
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

    /// The family's pixel values for `image`: each tile `[3, S, S]`.
    pub fn preprocess(&self, image: &Rgb8) -> Tiled {
        match self.layout {
            Layout::Stretch => Tiled {
                tiles: vec![gemma3(image, self.tile_size(), &self.normalize)],
                rows: 0,
                cols: 0,
            },
            Layout::Tiles { longest } => {
                idefics3(image, longest, self.tile_size(), &self.normalize)
            }
        }
    }

    /// The embeddings of preprocessed tiles: `[tiles · tokens_per_tile, text width]`, in the
    /// order their image tokens take in the prompt (tiles row-major, then the global image).
    ///
    /// # Errors
    /// A tile of the wrong size, or candle's errors.
    pub fn embed(&self, tiles: &[Vec<f32>]) -> candle_core::Result<Tensor> {
        let refs: Vec<&[f32]> = tiles.iter().map(Vec::as_slice).collect();
        let hidden = self.encoder.forward(&refs)?;
        self.projector
            .forward(&hidden, tiles.len(), self.encoder.shape.side())
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
                let got = model.embed(&tiles).expect("embed");
                let got = got.flatten_all().unwrap().to_vec1::<f32>().unwrap();
                let err = relative(&got, &want);
                eprintln!("{name}: features from reference pixels, relative error {err:.2e}");
                assert!(err < 1e-3, "{name}: {err}");

                let bytes =
                    std::fs::read(dir.join(item["file"].as_str().expect("file"))).expect("image");
                let image = super::super::decode(&bytes, &super::super::ImageLimits::default())
                    .expect("decode");
                let ours = model.preprocess(&image);
                let tokens = model.tokens(image.width, image.height);
                assert_eq!(
                    tokens,
                    want.len() / model.text_width(),
                    "{name}: token count"
                );
                let got = model.embed(&ours.tiles).expect("embed");
                let got = got.flatten_all().unwrap().to_vec1::<f32>().unwrap();
                let err = relative(&got, &want);
                eprintln!("{name}: features from our pixels, relative error {err:.2e}");
                assert!(err < 1e-3, "{name}: {err}");
            }
        }
    }
}
