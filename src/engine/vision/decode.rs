//! Decoding an image sent with a request (PNG, JPEG, WebP, GIF's first frame) into 8-bit RGB,
//! with its size checked from the header before any pixel is decoded (`probe`): a small file
//! that declares a huge image is refused without allocating it, and the bytes its decode
//! takes are known before it runs (`Probe::decode_bytes`, what `super::budget` reserves).
//!
//! Owns: the format list and the size limits. May use: the `image` crate. Never: candle, HTTP.

use std::io::Cursor;

use image::{ColorType, ImageDecoder, ImageFormat, ImageReader};

use super::resize::Rgb8;

/// What one image may be. The defaults (`ImageLimits::default`) are the server's.
#[derive(Debug, Clone, Copy)]
pub struct ImageLimits {
    /// Encoded bytes.
    pub max_bytes: usize,
    /// Width or height, in pixels.
    pub max_side: u32,
    /// Width times height.
    pub max_pixels: u64,
}

impl Default for ImageLimits {
    /// 20 MB encoded (OpenAI's limit per image), 8,192 pixels a side, 33.5 megapixels (100 MB
    /// of RGB once decoded).
    fn default() -> Self {
        Self {
            max_bytes: 20 * 1024 * 1024,
            max_side: 8192,
            max_pixels: 8192 * 4096,
        }
    }
}

/// What an image's header says, read without decoding a pixel (`probe`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    pub format: ImageFormat,
    /// Pixels.
    pub width: u32,
    pub height: u32,
    /// Bytes its decode holds at its peak: the decoder's frame in its own colour type (up to
    /// 16 bits and 4 channels a pixel) plus the 8-bit RGB copy when that type is not RGB8.
    pub decode_bytes: u64,
}

/// Why an image could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ImageError {
    #[error("the image is {bytes} bytes, more than {limit}")]
    TooManyBytes { bytes: usize, limit: usize },
    #[error("the image is {width}x{height} pixels, more than the limit of {max_side} a side and {max_pixels} in all")]
    TooLarge {
        width: u32,
        height: u32,
        max_side: u32,
        max_pixels: u64,
    },
    /// The request's images up to this one take more bytes to decode than one request may.
    #[error("the request's images take {bytes} bytes to decode, more than the limit of {limit} for one request")]
    RequestTooLarge { bytes: u64, limit: u64 },
    #[error("the image is not PNG, JPEG, WebP or GIF")]
    UnsupportedFormat,
    #[error("the image could not be decoded: {0}")]
    Unreadable(String),
    #[error("the image is {width}x{height} pixels: one side is more than 200 times the other")]
    Shape { width: usize, height: usize },
}

/// Read `bytes`' header: its format, size and the bytes its decode takes, refusing anything
/// over `limits` without decoding a pixel.
///
/// # Errors
/// `TooManyBytes`, `UnsupportedFormat`, `TooLarge`, `Unreadable` (no readable header, or no
/// pixels).
pub fn probe(bytes: &[u8], limits: &ImageLimits) -> Result<Probe, ImageError> {
    if bytes.len() > limits.max_bytes {
        return Err(ImageError::TooManyBytes {
            bytes: bytes.len(),
            limit: limits.max_bytes,
        });
    }
    let format = image::guess_format(bytes).map_err(|_| ImageError::UnsupportedFormat)?;
    if !matches!(
        format,
        ImageFormat::Png | ImageFormat::Jpeg | ImageFormat::WebP | ImageFormat::Gif
    ) {
        return Err(ImageError::UnsupportedFormat);
    }
    let decoder = ImageReader::with_format(Cursor::new(bytes), format)
        .into_decoder()
        .map_err(unreadable)?;
    let (width, height) = decoder.dimensions();
    if width == 0 || height == 0 {
        return Err(ImageError::Unreadable("the image has no pixels".into()));
    }
    let pixels = u64::from(width) * u64::from(height);
    if width > limits.max_side || height > limits.max_side || pixels > limits.max_pixels {
        return Err(ImageError::TooLarge {
            width,
            height,
            max_side: limits.max_side,
            max_pixels: limits.max_pixels,
        });
    }
    let native = decoder.total_bytes();
    let rgb = if decoder.color_type() == ColorType::Rgb8 {
        0
    } else {
        pixels * 3
    };
    Ok(Probe {
        format,
        width,
        height,
        decode_bytes: native.saturating_add(rgb),
    })
}

fn unreadable(e: image::ImageError) -> ImageError {
    ImageError::Unreadable(e.to_string())
}

/// Decode `bytes` to RGB (alpha dropped, as Pillow's `convert("RGB")` does), refusing anything
/// over `limits` before decoding its pixels (`probe`).
///
/// # Errors
/// `TooManyBytes`, `UnsupportedFormat`, `TooLarge` (from the header), `Unreadable`.
pub fn decode(bytes: &[u8], limits: &ImageLimits) -> Result<Rgb8, ImageError> {
    let Probe {
        format,
        width,
        height,
        ..
    } = probe(bytes, limits)?;
    let pixels = u64::from(width) * u64::from(height);
    let mut caps = image::Limits::default();
    caps.max_image_width = Some(width);
    caps.max_image_height = Some(height);
    // The decoded frame at 16 bits and 4 channels at most, plus the decoder's own buffers.
    caps.max_alloc = Some(pixels * 8 + (16 << 20));
    let mut r = ImageReader::with_format(Cursor::new(bytes), format);
    r.limits(caps);
    let img = r.decode().map_err(unreadable)?.into_rgb8();
    Ok(Rgb8 {
        width: img.width() as usize,
        height: img.height() as usize,
        data: img.into_raw(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(format: ImageFormat, w: u32, h: u32) -> Vec<u8> {
        let img = image::RgbaImage::from_fn(w, h, |x, y| {
            image::Rgba([
                (x * 40) as u8,
                (y * 60) as u8,
                90,
                if x == 0 { 0 } else { 255 },
            ])
        });
        let mut out = Cursor::new(Vec::new());
        let dynamic = image::DynamicImage::ImageRgba8(img);
        let dynamic = if format == ImageFormat::Jpeg {
            image::DynamicImage::ImageRgb8(dynamic.to_rgb8())
        } else {
            dynamic
        };
        dynamic.write_to(&mut out, format).expect("encode");
        out.into_inner()
    }

    /// Every accepted format decodes to RGB of its size; the lossless ones give the pixels
    /// back with alpha dropped.
    #[test]
    fn the_four_formats_decode_to_rgb() {
        for format in [
            ImageFormat::Png,
            ImageFormat::Jpeg,
            ImageFormat::WebP,
            ImageFormat::Gif,
        ] {
            let img = decode(&encoded(format, 5, 3), &ImageLimits::default()).expect("decode");
            assert_eq!(
                (img.width, img.height, img.data.len()),
                (5, 3, 45),
                "{format:?}"
            );
            if matches!(format, ImageFormat::Png | ImageFormat::WebP) {
                // Pixel (2, 1): (80, 60, 90), its alpha gone.
                assert_eq!(&img.data[(5 + 2) * 3..(5 + 2) * 3 + 3], &[80, 60, 90]);
            }
        }
    }

    /// A PNG whose header declares 100,000 x 100,000 pixels is refused from the header alone;
    /// other formats, truncated files and oversized files are refused with their own errors.
    #[test]
    fn hostile_images_are_refused_before_decoding() {
        let mut png = encoded(ImageFormat::Png, 1, 1);
        // IHDR's width and height (bytes 16..24), then its CRC over type and data (12..29).
        png[16..20].copy_from_slice(&100_000u32.to_be_bytes());
        png[20..24].copy_from_slice(&100_000u32.to_be_bytes());
        let mut crc = flate2::Crc::new();
        crc.update(&png[12..29]);
        png[29..33].copy_from_slice(&crc.sum().to_be_bytes());
        let err = decode(&png, &ImageLimits::default()).unwrap_err();
        assert!(
            matches!(err, ImageError::TooLarge { width: 100_000, .. }),
            "{err:?}"
        );
        let gif = encoded(ImageFormat::Gif, 40, 40);
        assert!(matches!(
            decode(&gif[..gif.len() - 20], &ImageLimits::default()),
            Err(ImageError::Unreadable(_))
        ));
        assert_eq!(
            decode(b"%PDF-1.4", &ImageLimits::default()),
            Err(ImageError::UnsupportedFormat)
        );
        let whole = encoded(ImageFormat::Png, 40, 40);
        assert!(matches!(
            decode(&whole[..whole.len() / 2], &ImageLimits::default()),
            Err(ImageError::Unreadable(_))
        ));
        let small = ImageLimits {
            max_bytes: 100,
            ..ImageLimits::default()
        };
        assert!(matches!(
            decode(&whole, &small),
            Err(ImageError::TooManyBytes { limit: 100, .. })
        ));
    }

    /// The fixture JPEG (the landscape PNG at quality 90, `scripts/fixtures/vision-fixtures.py`) decodes
    /// to the PNG's size and, on average, its pixels (JPEG is lossy and decoders round
    /// differently: Pillow's decode is 6.5 off on average).
    #[test]
    fn a_jpeg_decodes_close_to_its_source() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/vision/images/");
        let read = |f: &str| {
            let bytes = std::fs::read(format!("{dir}{f}")).expect("image");
            decode(&bytes, &ImageLimits::default()).expect("decode")
        };
        let (jpeg, png) = (read("landscape.jpg"), read("landscape.png"));
        assert_eq!((jpeg.width, jpeg.height), (png.width, png.height));
        let total: u64 = jpeg
            .data
            .iter()
            .zip(&png.data)
            .map(|(a, b)| u64::from(a.abs_diff(*b)))
            .sum();
        let mean = total as f64 / png.data.len() as f64;
        assert!(mean < 10.0, "mean difference {mean}");
    }
}
