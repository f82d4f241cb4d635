//! Image resampling as Pillow computes it (`Image.resize` on 8-bit RGB with the bilinear,
//! bicubic and Lanczos filters, `libImaging/Resample.c`), because the vision models' reference
//! preprocessing (`transformers`' `*ImageProcessorPil`) resizes through Pillow: a model's
//! image features are only comparable when the pixels are.
//!
//! Pillow's method: a separable convolution, one pass per axis, each output pixel a
//! weighted sum of the input pixels under the filter stretched by the scale (so downscaling
//! averages, antialiased); weights are normalised to sum to 1, turned into 22-bit fixed point,
//! and every pass rounds and clamps to 8 bits, so the intermediate image is 8-bit too.
//!
//! The order of the passes matters by one 8-bit step here and there, so it is Pillow 13.0's
//! (`ImagingResampleInner` in its `Resample.c`): horizontal first, unless the height shrinks by
//! more than twice as many pixels as the width, then vertical first. Pillow 12 and older always
//! ran the horizontal pass first.
//!
//! Owns: the resampler. May use: std. Never: candle, decoding, HTTP.

/// Fraction bits of the fixed-point weights (Pillow's `PRECISION_BITS`, `32 - 8 - 2`).
const PRECISION_BITS: u32 = 22;

/// An 8-bit RGB image, row-major, 3 bytes a pixel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rgb8 {
    pub width: usize,
    pub height: usize,
    /// `width * height * 3` bytes.
    pub data: Vec<u8>,
}

/// Resampling filters (Pillow's `Image.Resampling`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Filter {
    /// Triangle, support 1 (Gemma 3's `resample=2`).
    Bilinear,
    /// Keys cubic with a = -0.5, support 2 (Qwen2-VL's `resample=3`).
    Bicubic,
    /// Lanczos with three lobes, support 3 (Idefics3's `resample=1`).
    Lanczos,
}

impl Filter {
    fn support(self) -> f64 {
        match self {
            Self::Bilinear => 1.0,
            Self::Bicubic => 2.0,
            Self::Lanczos => 3.0,
        }
    }

    fn weight(self, x: f64) -> f64 {
        let x = x.abs();
        match self {
            Self::Bilinear => (1.0 - x).max(0.0),
            Self::Bicubic => {
                const A: f64 = -0.5;
                if x < 1.0 {
                    ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
                } else if x < 2.0 {
                    (((x - 5.0) * x + 8.0) * x - 4.0) * A
                } else {
                    0.0
                }
            }
            Self::Lanczos => {
                if x < 3.0 {
                    sinc(x) * sinc(x / 3.0)
                } else {
                    0.0
                }
            }
        }
    }
}

fn sinc(x: f64) -> f64 {
    if x == 0.0 {
        1.0
    } else {
        let px = x * std::f64::consts::PI;
        px.sin() / px
    }
}

/// For each output index along one axis: the first input index it reads and its fixed-point
/// weights (one per input index read).
struct Taps {
    first: Vec<usize>,
    weights: Vec<Vec<i32>>,
}

/// The taps that map `input` samples onto `output` ones under `filter`.
fn taps(input: usize, output: usize, filter: Filter) -> Taps {
    let scale = input as f64 / output as f64;
    let stretch = scale.max(1.0);
    let support = filter.support() * stretch;
    let mut first = Vec::with_capacity(output);
    let mut weights = Vec::with_capacity(output);
    for o in 0..output {
        let center = (o as f64 + 0.5) * scale;
        // Truncation toward zero then clamping, as the C casts do.
        let lo = ((center - support + 0.5) as i64).max(0) as usize;
        let hi = ((center + support + 0.5) as i64).min(input as i64) as usize;
        let w: Vec<f64> = (lo..hi)
            .map(|i| filter.weight((i as f64 - center + 0.5) / stretch))
            .collect();
        let sum: f64 = w.iter().sum();
        let fixed = w
            .iter()
            .map(|&k| {
                let k = if sum == 0.0 { k } else { k / sum };
                let scaled = k * f64::from(1u32 << PRECISION_BITS);
                // Round half away from zero, as `(int)(±0.5 + k * 2^22)` does.
                (if k < 0.0 { scaled - 0.5 } else { scaled + 0.5 }) as i32
            })
            .collect();
        first.push(lo);
        weights.push(fixed);
    }
    Taps { first, weights }
}

/// A weighted sum of 8-bit samples in fixed point, rounded and clamped to 8 bits.
#[inline]
fn clamp8(acc: i64) -> u8 {
    (acc >> PRECISION_BITS).clamp(0, 255) as u8
}

/// The horizontal pass: `img` with its width resampled to `width`.
fn horizontal(img: &Rgb8, width: usize, filter: Filter) -> Rgb8 {
    let t = taps(img.width, width, filter);
    let mut data = vec![0u8; width * img.height * 3];
    for y in 0..img.height {
        let row = &img.data[y * img.width * 3..(y + 1) * img.width * 3];
        for (x, (lo, w)) in t.first.iter().zip(&t.weights).enumerate() {
            for c in 0..3 {
                let mut acc: i64 = 1 << (PRECISION_BITS - 1);
                for (j, &k) in w.iter().enumerate() {
                    acc += i64::from(row[(lo + j) * 3 + c]) * i64::from(k);
                }
                data[(y * width + x) * 3 + c] = clamp8(acc);
            }
        }
    }
    Rgb8 {
        width,
        height: img.height,
        data,
    }
}

/// The vertical pass: `img` with its height resampled to `height`.
fn vertical(img: &Rgb8, height: usize, filter: Filter) -> Rgb8 {
    let t = taps(img.height, height, filter);
    let stride = img.width * 3;
    let mut data = vec![0u8; stride * height];
    for (y, (lo, w)) in t.first.iter().zip(&t.weights).enumerate() {
        for i in 0..stride {
            let mut acc: i64 = 1 << (PRECISION_BITS - 1);
            for (j, &k) in w.iter().enumerate() {
                acc += i64::from(img.data[(lo + j) * stride + i]) * i64::from(k);
            }
            data[y * stride + i] = clamp8(acc);
        }
    }
    Rgb8 {
        width: img.width,
        height,
        data,
    }
}

/// `img` resized to `width x height` (both at least 1) as Pillow's `Image.resize` does it.
/// Time and memory are linear in the input and output pixels times the filter width.
pub fn resize(img: &Rgb8, width: usize, height: usize, filter: Filter) -> Rgb8 {
    let (width, height) = (width.max(1), height.max(1));
    // Pillow 13's order (`ImagingResampleInner`): the vertical pass first when the height
    // shrinks by more than twice as many pixels as the width does.
    let shrink_h = img.height as i64 - height as i64;
    let shrink_w = img.width as i64 - width as i64;
    let vertical_first = shrink_h > 0 && shrink_h > 2 * shrink_w;
    let mut cur = img.clone();
    if vertical_first && height != cur.height {
        cur = vertical(&cur, height, filter);
    }
    if width != cur.width {
        cur = horizontal(&cur, width, filter);
    }
    if height != cur.height {
        cur = vertical(&cur, height, filter);
    }
    cur
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;

    fn decode(s: &serde_json::Value) -> Vec<u8> {
        base64::engine::general_purpose::STANDARD
            .decode(s.as_str().expect("base64"))
            .expect("base64")
    }

    /// Every case of `tests/data/vision/resize.json` (Pillow's output, written by
    /// `scripts/fixtures/vision-resize-fixture.py`): the same bytes, for up- and downscaling, one axis
    /// at a time, to 1x1 and with the vertical pass first, with each filter.
    #[test]
    fn resizing_gives_pillows_bytes() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/vision/resize.json");
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("json");
        let dim = |k: &str, v: &serde_json::Value| v[k].as_u64().expect("size") as usize;
        let img = Rgb8 {
            width: dim("width", &doc),
            height: dim("height", &doc),
            data: decode(&doc["rgb"]),
        };
        let cases = doc["cases"].as_array().expect("cases");
        assert_eq!(cases.len(), 24);
        for case in cases {
            let filter = match case["filter"].as_str() {
                Some("bilinear") => Filter::Bilinear,
                Some("bicubic") => Filter::Bicubic,
                Some("lanczos") => Filter::Lanczos,
                other => panic!("filter {other:?}"),
            };
            let (w, h) = (dim("width", case), dim("height", case));
            let got = resize(&img, w, h, filter);
            assert_eq!((got.width, got.height), (w, h));
            let want = decode(&case["rgb"]);
            let off = got.data.iter().zip(&want).filter(|(a, b)| a != b).count();
            assert_eq!(off, 0, "{filter:?} {w}x{h}: {off} bytes differ");
        }
    }

    /// The same size is a copy; weights of each output sum to one (a flat image stays flat).
    #[test]
    fn flat_images_stay_flat_and_same_size_is_a_copy() {
        let img = Rgb8 {
            width: 7,
            height: 5,
            data: [10u8, 200, 77].repeat(35),
        };
        assert_eq!(resize(&img, 7, 5, Filter::Lanczos), img);
        for f in [Filter::Bilinear, Filter::Bicubic, Filter::Lanczos] {
            let out = resize(&img, 19, 3, f);
            assert!(out.data.chunks(3).all(|p| p == [10, 200, 77]), "{f:?}");
        }
    }
}
