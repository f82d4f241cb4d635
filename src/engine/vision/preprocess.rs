//! Each vision family's image preprocessing, as `transformers`' Pillow image processors compute
//! it: Gemma 3 stretches the image to the encoder's square (`Gemma3ImageProcessorPil`,
//! bilinear); Idefics3 and SmolVLM resize to a longest edge, round up to whole tiles, and cut
//! the image into tiles plus a downscaled global image (`Idefics3ImageProcessorPil`, Lanczos);
//! Qwen2.5-VL keeps the aspect at a multiple of 28 pixels a side within a pixel budget
//! (`Qwen2VLImageProcessorPil`, bicubic).
//! Every resize is Pillow's on 8-bit pixels (`super::resize`); then each value is rescaled to
//! [0, 1] and normalised, `(x / 255 - mean) / std`, in the same float steps.
//!
//! Owns: the geometry and the normalisation. May use: `super::resize`, std. Never: candle,
//! decoding, HTTP.

use super::resize::{resize, Filter, Rgb8};

/// The normalisation of a family (`image_mean`, `image_std`), per channel.
#[derive(Debug, Clone, Copy)]
pub struct Normalize {
    pub mean: [f32; 3],
    pub std: [f32; 3],
}

/// Pixels as the encoder takes them: `[3, height, width]` (channel-major) f32.
pub fn to_chw(img: &Rgb8, n: &Normalize) -> Vec<f32> {
    let plane = img.width * img.height;
    let mut out = vec![0f32; 3 * plane];
    for (i, px) in img.data.chunks_exact(3).enumerate() {
        for c in 0..3 {
            // transformers rescales in f64 and stores f32, then normalises in f32.
            let x = (f64::from(px[c]) * (1.0 / 255.0)) as f32;
            out[c * plane + i] = (x - n.mean[c]) / n.std[c];
        }
    }
    out
}

/// Gemma 3: the image stretched to `size x size` (no aspect kept), bilinear.
pub fn gemma3(img: &Rgb8, size: usize, n: &Normalize) -> Vec<f32> {
    to_chw(&gemma3_fit(img, size), n)
}

/// Gemma 3's one resize: the `size x size` image its encoder reads.
pub fn gemma3_fit(img: &Rgb8, size: usize) -> Rgb8 {
    resize(img, size, size, Filter::Bilinear)
}

/// An image cut for Idefics3/SmolVLM: tiles row-major, then the global image; `rows` and `cols`
/// are 0 when the image fits one tile (then `tiles` holds it alone). For Qwen2.5-VL, one
/// `[3, rows·14, cols·14]` image of `rows x cols` patches.
#[derive(Debug, Clone)]
pub struct Tiled {
    /// Each `[3, tile, tile]`.
    pub tiles: Vec<Vec<f32>>,
    pub rows: usize,
    pub cols: usize,
}

/// The side lengths after scaling the longer side to `longest`, the other by the aspect
/// ratio, rounded down then up to even (`_resize_output_size_rescale_to_max_len`), then capped
/// at 4,096 a side (`_resize_output_size_scale_below_upper_bound`). Returns `(width, height)`.
fn longest_edge_size(width: usize, height: usize, longest: usize) -> (usize, usize) {
    let aspect = width as f64 / height as f64;
    let (mut w, mut h) = if width >= height {
        let h = (longest as f64 / aspect) as usize;
        (longest, h + h % 2)
    } else {
        let w = (longest as f64 * aspect) as usize;
        (w + w % 2, longest)
    };
    (w, h) = (w.max(1), h.max(1));
    const CAP: usize = 4096;
    let aspect = w as f64 / h as f64;
    if w >= h && w > CAP {
        (w, h) = (CAP, (CAP as f64 / aspect) as usize);
    } else if h > w && h > CAP {
        (w, h) = ((CAP as f64 * aspect) as usize, CAP);
    }
    (w.max(1), h.max(1))
}

/// The sides rounded up to whole tiles, the second derived from the first by the aspect ratio
/// (`resize_for_vision_encoder`). Returns `(width, height)`.
fn whole_tiles_size(width: usize, height: usize, tile: usize) -> (usize, usize) {
    let aspect = width as f64 / height as f64;
    if width >= height {
        let w = width.div_ceil(tile) * tile;
        let h = ((w as f64 / aspect) as usize).div_ceil(tile) * tile;
        (w, h)
    } else {
        let h = height.div_ceil(tile) * tile;
        let w = ((h as f64 * aspect) as usize).div_ceil(tile) * tile;
        (w, h)
    }
}

/// The tile grid of a `width x height` image once rounded to whole tiles: `(rows, cols)`, or
/// `(0, 0)` when it fits one tile.
fn grid_of(width: usize, height: usize, tile: usize) -> (usize, usize) {
    if width <= tile && height <= tile {
        (0, 0)
    } else {
        (height.div_ceil(tile), width.div_ceil(tile))
    }
}

/// The `(rows, cols)` grid `idefics3` cuts a `width x height` image into, from the sizes alone
/// (no pixels touched): `(0, 0)` for a single image without a global one.
pub fn idefics3_grid(width: usize, height: usize, longest: usize, tile: usize) -> (usize, usize) {
    let (w, h) = longest_edge_size(width, height, longest);
    let (w, h) = whole_tiles_size(w, h, tile);
    grid_of(w, h, tile)
}

/// Idefics3/SmolVLM: resize to `longest` on the longer side, round up to whole `tile`s, cut
/// into tiles and add the global image (all Lanczos).
pub fn idefics3(img: &Rgb8, longest: usize, tile: usize, n: &Normalize) -> Tiled {
    idefics3_tiles(&idefics3_fit(img, longest), tile, n)
}

/// Idefics3's first resize: `longest` pixels on the longer side (`longest_edge_size`).
pub fn idefics3_fit(img: &Rgb8, longest: usize) -> Rgb8 {
    let (w, h) = longest_edge_size(img.width, img.height, longest);
    resize(img, w, h, Filter::Lanczos)
}

/// Idefics3's steps after `idefics3_fit`: round up to whole `tile`s, cut into tiles and add
/// the global image.
pub fn idefics3_tiles(img: &Rgb8, tile: usize, n: &Normalize) -> Tiled {
    let (w, h) = whole_tiles_size(img.width, img.height, tile);
    let img = resize(img, w, h, Filter::Lanczos);
    let (rows, cols) = grid_of(w, h, tile);
    if rows == 0 {
        return Tiled {
            tiles: vec![to_chw(&img, n)],
            rows: 0,
            cols: 0,
        };
    }
    let mut tiles = Vec::with_capacity(rows * cols + 1);
    for r in 0..rows {
        for c in 0..cols {
            let mut data = Vec::with_capacity(tile * tile * 3);
            for y in r * tile..(r + 1) * tile {
                let at = (y * img.width + c * tile) * 3;
                data.extend_from_slice(&img.data[at..at + tile * 3]);
            }
            let crop = Rgb8 {
                width: tile,
                height: tile,
                data,
            };
            tiles.push(to_chw(&crop, n));
        }
    }
    tiles.push(to_chw(&resize(&img, tile, tile, Filter::Lanczos), n));
    Tiled { tiles, rows, cols }
}

/// Qwen2-VL's and Qwen2.5-VL's target size for a `height x width` image (`smart_resize` of
/// `transformers`' `image_processing_pil_qwen2_vl.py`): each side rounded to a multiple of
/// `factor` (half to even, as Python's `round`), then scaled down to at most `max_pixels` or up
/// to at least `min_pixels` keeping the aspect. Returns `(height, width)`, or `None` when one
/// side is more than 200 times the other (transformers refuses those).
pub fn smart_resize(
    height: usize,
    width: usize,
    factor: usize,
    min_pixels: usize,
    max_pixels: usize,
) -> Option<(usize, usize)> {
    let (h, w, f) = (height as f64, width as f64, factor as f64);
    if height == 0 || width == 0 || h.max(w) / h.min(w) > 200.0 {
        return None;
    }
    let mut hb = (h / f).round_ties_even() * f;
    let mut wb = (w / f).round_ties_even() * f;
    if hb * wb > max_pixels as f64 {
        let beta = (h * w / max_pixels as f64).sqrt();
        hb = f.max((h / beta / f).floor() * f);
        wb = f.max((w / beta / f).floor() * f);
    } else if hb * wb < min_pixels as f64 {
        let beta = (min_pixels as f64 / (h * w)).sqrt();
        hb = (h * beta / f).ceil() * f;
        wb = (w * beta / f).ceil() * f;
    }
    Some((hb as usize, wb as usize))
}

/// Qwen2.5-VL: the image resized (bicubic) to `height x width` (from `smart_resize`),
/// normalised, `[3, height, width]`.
pub fn qwen2vl(img: &Rgb8, height: usize, width: usize, n: &Normalize) -> Vec<f32> {
    to_chw(&qwen2vl_fit(img, height, width), n)
}

/// Qwen2.5-VL's one resize: bicubic to `height x width` (from `smart_resize`).
pub fn qwen2vl_fit(img: &Rgb8, height: usize, width: usize) -> Rgb8 {
    resize(img, width, height, Filter::Bicubic)
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{fixture, floats};
    use super::*;

    const HALF: Normalize = Normalize {
        mean: [0.5; 3],
        std: [0.5; 3],
    };

    fn image(dir: &std::path::Path, item: &serde_json::Value) -> Rgb8 {
        let bytes = std::fs::read(dir.join(item["file"].as_str().expect("file"))).expect("png");
        super::super::decode(&bytes, &super::super::ImageLimits::default()).expect("decode")
    }

    fn assert_close(got: &[f32], want: &[f32], what: &str) {
        assert_eq!(got.len(), want.len(), "{what}");
        let worst = got
            .iter()
            .zip(want)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(worst <= 1e-6, "{what}: worst difference {worst}");
    }

    /// Gemma 3's pixel values for the three fixture images (square, landscape, portrait) are
    /// transformers' (`scripts/fixtures/vision-fixtures.py`), exactly.
    #[test]
    fn gemma3_pixels_match_transformers() {
        let (dir, reference) = fixture("gemma3");
        for item in reference["images"].as_array().expect("images") {
            let name = item["name"].as_str().unwrap_or("?");
            let got = gemma3(&image(&dir, item), 64, &HALF);
            let want = floats(&dir.join(item["pixel_values"]["file"].as_str().expect("file")));
            assert_close(&got, &want, name);
        }
    }

    /// Idefics3's tiles, grid and global image for the three fixture images are transformers'.
    #[test]
    fn idefics3_tiles_match_transformers() {
        let (dir, reference) = fixture("smolvlm");
        for item in reference["images"].as_array().expect("images") {
            let name = item["name"].as_str().unwrap_or("?");
            let got = idefics3(&image(&dir, item), 128, 64, &HALF);
            assert_eq!(
                got.rows as u64,
                item["rows"].as_u64().expect("rows"),
                "{name}"
            );
            assert_eq!(
                got.cols as u64,
                item["cols"].as_u64().expect("cols"),
                "{name}"
            );
            assert_eq!(
                got.tiles.len() as u64,
                item["tiles"].as_u64().expect("n"),
                "{name}"
            );
            let want = floats(&dir.join(item["pixel_values"]["file"].as_str().expect("file")));
            assert_close(&got.tiles.concat(), &want, name);
            let (w, h) = (
                item["width"].as_u64().expect("w") as usize,
                item["height"].as_u64().expect("h") as usize,
            );
            assert_eq!(idefics3_grid(w, h, 128, 64), (got.rows, got.cols), "{name}");
        }
    }

    /// The size rules on their own: even rounding, the 4,096 cap, whole tiles, and an image
    /// that fits one tile staying whole.
    #[test]
    fn idefics3_geometry() {
        assert_eq!(longest_edge_size(120, 48, 128), (128, 52));
        assert_eq!(longest_edge_size(50, 130, 128), (50, 128));
        assert_eq!(longest_edge_size(3, 9000, 10_000), (1, 4096));
        assert_eq!(whole_tiles_size(128, 52, 64), (128, 64));
        let small = Rgb8 {
            width: 40,
            height: 30,
            data: vec![128; 40 * 30 * 3],
        };
        let t = idefics3(&small, 64, 64, &HALF);
        assert_eq!((t.rows, t.cols, t.tiles.len()), (0, 0, 1));
        // 40x30 becomes 64x48, then one whole 64x64 tile.
        assert_eq!(t.tiles[0].len(), 3 * 64 * 64);
    }

    /// `smart_resize` as transformers computes it: ties round to even (70 px is 2.5 units of
    /// 28: 56, not 84), the pixel budget scales both sides, and extreme aspects are refused.
    #[test]
    fn qwen_smart_resize() {
        assert_eq!(
            smart_resize(70, 70, 28, 56 * 56, 28 * 28 * 1280),
            Some((56, 56))
        );
        assert_eq!(
            smart_resize(42, 98, 28, 56 * 56, 28 * 28 * 1280),
            Some((56, 112))
        );
        assert_eq!(smart_resize(64, 64, 28, 19600, 50176), Some((140, 140)));
        assert_eq!(smart_resize(48, 120, 28, 19600, 50176), Some((112, 224)));
        // 4000x3000 within 1,280 tokens: both sides scaled by the same factor, floored.
        assert_eq!(
            smart_resize(3000, 4000, 28, 3136, 1_003_520),
            Some((840, 1148))
        );
        assert_eq!(smart_resize(10, 2010, 28, 3136, 1_003_520), None);
        assert_eq!(smart_resize(0, 10, 28, 3136, 1_003_520), None);
    }
}
