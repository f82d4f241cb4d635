//! A request's images from the URLs of its `image_url` / `input_image` parts: `data:` URLs
//! (base64 PNG, JPEG, WebP or GIF) decoded to bytes, with the count and size bounded before any
//! pixel is decoded (`engine::vision::decode` bounds the rest). Remote `http(s)` URLs are
//! refused: this server does not fetch images. Every failure is a 400 naming the part.
//!
//! May use: `request`, `error`, `codes`, `engine`, `base64`. Never: the ledger, handlers.

use std::sync::Arc;

use base64::Engine as _;

use super::codes::Code;
use super::error::ApiError;
use super::request::ImagePart;
use crate::engine::vision::ImageLimits;
use crate::engine::InputImage;

/// Most images in one request.
pub const MAX_IMAGES: usize = 16;

/// The media types a `data:` URL may name.
const TYPES: [&str; 5] = [
    "image/png",
    "image/jpeg",
    "image/jpg",
    "image/webp",
    "image/gif",
];

/// The bytes of each part's image, in order. `param` names a part in the surface's terms.
///
/// # Errors
/// 400 `too_many_images` (more than `MAX_IMAGES`), `image_url_not_allowed` (a remote URL),
/// `invalid_image` (not a base64 `data:` URL of a supported type), `image_too_large` (over the
/// encoded-size limit).
pub fn input_images(
    parts: &[ImagePart],
    param: &dyn Fn(&ImagePart) -> String,
) -> Result<Vec<InputImage>, ApiError> {
    if let Some(extra) = parts.get(MAX_IMAGES) {
        return Err(ApiError::bad(
            param(extra),
            Code::TooManyImages,
            format!("A request may have at most {MAX_IMAGES} images."),
        ));
    }
    parts
        .iter()
        .map(|part| {
            data_url(&part.url).map_err(|(code, message)| ApiError::bad(param(part), code, message))
        })
        .collect()
}

/// The image of one URL.
fn data_url(url: &str) -> Result<InputImage, (Code, String)> {
    let lower = url.get(..8).unwrap_or(url).to_ascii_lowercase();
    if lower.starts_with("http://") || lower.starts_with("https://") {
        return Err((
            Code::ImageUrlNotAllowed,
            "This server does not fetch images from URLs; send the image inline as a `data:` URL (for example `data:image/png;base64,...`).".into(),
        ));
    }
    let invalid = |what: &str| {
        (
            Code::InvalidImage,
            format!("The image must be a base64 `data:` URL of a PNG, JPEG, WebP or GIF image ({what})."),
        )
    };
    let rest = url
        .strip_prefix("data:")
        .ok_or_else(|| invalid("not a `data:` URL"))?;
    let (header, payload) = rest
        .split_once(',')
        .ok_or_else(|| invalid("no `,` after the media type"))?;
    let mut fields = header.split(';');
    let media = fields.next().unwrap_or("").trim().to_ascii_lowercase();
    if !TYPES.contains(&media.as_str()) {
        return Err(invalid(&format!("media type `{media}`")));
    }
    if !fields.any(|f| f.trim().eq_ignore_ascii_case("base64")) {
        return Err(invalid("not base64"));
    }
    let limit = ImageLimits::default().max_bytes;
    // Base64 takes 4 characters for 3 bytes: refuse before decoding what cannot fit.
    if payload.len() / 4 * 3 > limit + 3 {
        return Err(too_large(payload.len() / 4 * 3, limit));
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(payload.trim())
        .map_err(|e| invalid(&format!("bad base64: {e}")))?;
    if bytes.len() > limit {
        return Err(too_large(bytes.len(), limit));
    }
    Ok(InputImage {
        bytes: Arc::from(bytes),
    })
}

fn too_large(bytes: usize, limit: usize) -> (Code, String) {
    (
        Code::ImageTooLarge,
        format!("The image is {bytes} bytes; at most {limit} bytes are accepted."),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(url: &str) -> ImagePart {
        ImagePart {
            message: 0,
            part: 1,
            url: url.into(),
        }
    }

    fn code(url: &str) -> Code {
        match input_images(&[part(url)], &|p| format!("m[{}].c[{}]", p.message, p.part)) {
            Err(ApiError::BadRequest { code, param, .. }) => {
                assert_eq!(param.as_deref(), Some("m[0].c[1]"));
                code
            }
            other => panic!("{url}: {other:?}"),
        }
    }

    #[test]
    fn data_urls_decode_and_the_rest_is_refused_by_name() {
        let ok = input_images(&[part("data:image/png;base64,iVBORw0KGgo=")], &|_| {
            String::new()
        })
        .expect("png");
        assert_eq!(&ok[0].bytes[..4], b"\x89PNG");
        assert_eq!(
            code("https://example.com/cat.png"),
            Code::ImageUrlNotAllowed
        );
        assert_eq!(code("HTTP://example.com/cat.png"), Code::ImageUrlNotAllowed);
        assert_eq!(code("file:///etc/passwd"), Code::InvalidImage);
        assert_eq!(code("data:text/plain;base64,aGk="), Code::InvalidImage);
        assert_eq!(code("data:image/png,rawbytes"), Code::InvalidImage);
        assert_eq!(code("data:image/png;base64,***"), Code::InvalidImage);
        let huge = format!("data:image/png;base64,{}", "A".repeat(28 * 1024 * 1024));
        assert_eq!(code(&huge), Code::ImageTooLarge);
        let many: Vec<ImagePart> = (0..=MAX_IMAGES)
            .map(|_| part("data:image/png;base64,AA=="))
            .collect();
        assert!(matches!(
            input_images(&many, &|_| String::new()),
            Err(ApiError::BadRequest {
                code: Code::TooManyImages,
                ..
            })
        ));
    }
}
