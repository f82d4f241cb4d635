//! A request's images from the URLs of its `image_url` / `input_image` parts: `data:` URLs
//! (base64 PNG, JPEG, WebP or GIF) decoded to bytes, and `http(s)` URLs fetched only when the
//! operator allows it (`image_fetch`), each fetch in one of the payer's places
//! (`image_fetch::FetchSlots`), with the count and size bounded before any pixel is decoded
//! (`engine::vision::decode` bounds the rest). Every failure is a 400 naming the part.
//!
//! May use: `request`, `error`, `codes`, `image_fetch`, `engine`, `base64`. Never: the ledger,
//! handlers.

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;

use super::codes::Code;
use super::error::ApiError;
use super::image_fetch::{self, FetchError, FetchSlots, ImageUrls};
use super::request::ImagePart;
use crate::engine::ImageLimits;
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

/// Most seconds all of a request's remote images may take to fetch together.
const FETCH_BUDGET: Duration = Duration::from_secs(30);

/// Whether and how a request's remote images are fetched: the server's rules, its fetch
/// places, and the payer whose places the fetches take.
pub struct Remote<'a> {
    pub urls: ImageUrls,
    pub slots: &'a Arc<FetchSlots>,
    /// The payer's name in `slots` (its key, or its account on the session path).
    pub payer: String,
}

/// The bytes of each part's image, in order. `param` names a part in the surface's terms;
/// `remote` says whether and how remote URLs are fetched.
///
/// # Errors
/// 400 `too_many_images` (more than `MAX_IMAGES`), `image_url_not_allowed` (a remote URL when
/// they are off, or one that reaches an internal address), `invalid_image` (not a base64
/// `data:` URL of a supported type; a fetch that fails), `image_too_large` (over the
/// encoded-size limit).
pub async fn input_images(
    parts: &[ImagePart],
    param: &(dyn Fn(&ImagePart) -> String + Sync),
    remote: &Remote<'_>,
) -> Result<Vec<InputImage>, ApiError> {
    if let Some(extra) = parts.get(MAX_IMAGES) {
        return Err(ApiError::bad(
            param(extra),
            Code::TooManyImages,
            format!("A request may have at most {MAX_IMAGES} images."),
        ));
    }
    let started = Instant::now();
    let mut out = Vec::with_capacity(parts.len());
    for part in parts {
        let image = if image_fetch::is_http(&part.url) {
            fetched(&part.url, remote, started).await
        } else {
            data_url(&part.url)
        };
        out.push(image.map_err(|(code, message)| ApiError::bad(param(part), code, message))?);
    }
    Ok(out)
}

/// A remote image, when `remote.urls` allows it, fetched on a blocking thread in one of the
/// payer's places (waiting for one within what is left of the request's `FETCH_BUDGET`).
async fn fetched(
    url: &str,
    remote: &Remote<'_>,
    started: Instant,
) -> Result<InputImage, (Code, String)> {
    if !remote.urls.allow {
        return Err((
            Code::ImageUrlNotAllowed,
            "This server does not fetch images from URLs; send the image inline as a `data:` URL (for example `data:image/png;base64,...`).".into(),
        ));
    }
    let out_of_time = || {
        (
            Code::InvalidImage,
            format!(
                "The request's images took more than {} s to fetch.",
                FETCH_BUDGET.as_secs()
            ),
        )
    };
    let deadline = started + FETCH_BUDGET;
    let Some(slot) = remote.slots.take(&remote.payer, deadline).await else {
        return Err(out_of_time());
    };
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(out_of_time());
    }
    let limit = ImageLimits::default().max_bytes;
    let (url, private) = (url.to_owned(), remote.urls.allow_private);
    let fetched = tokio::task::spawn_blocking(move || {
        let got = image_fetch::fetch(&url, limit, private, left);
        drop(slot);
        got
    })
    .await
    .unwrap_or_else(|_| Err(FetchError::Failed("the fetch stopped unexpectedly".into())));
    match fetched {
        Ok(bytes) => Ok(InputImage {
            bytes: Arc::from(bytes),
        }),
        Err(FetchError::Internal) => Err((
            Code::ImageUrlNotAllowed,
            format!("The image URL is refused: {}.", FetchError::Internal),
        )),
        Err(FetchError::TooLarge(_)) => Err(too_large(limit + 1, limit)),
        Err(e @ FetchError::Failed(_)) => Err((Code::InvalidImage, format!("{e}."))),
    }
}

/// The image of one URL.
fn data_url(url: &str) -> Result<InputImage, (Code, String)> {
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

    fn named(p: &ImagePart) -> String {
        format!("m[{}].c[{}]", p.message, p.part)
    }

    fn remote(urls: ImageUrls) -> Remote<'static> {
        static SLOTS: std::sync::OnceLock<Arc<FetchSlots>> = std::sync::OnceLock::new();
        Remote {
            urls,
            slots: SLOTS.get_or_init(|| FetchSlots::new(4, 2)),
            payer: "key 1".into(),
        }
    }

    async fn code_with(url: &str, urls: ImageUrls) -> Code {
        match input_images(&[part(url)], &named, &remote(urls)).await {
            Err(ApiError::BadRequest { code, param, .. }) => {
                assert_eq!(param.as_deref(), Some("m[0].c[1]"));
                code
            }
            other => panic!("{url}: {other:?}"),
        }
    }

    async fn code(url: &str) -> Code {
        code_with(url, ImageUrls::default()).await
    }

    #[tokio::test]
    async fn data_urls_decode_and_the_rest_is_refused_by_name() {
        let png = [part("data:image/png;base64,iVBORw0KGgo=")];
        let ok = input_images(&png, &named, &remote(ImageUrls::default()))
            .await
            .expect("png");
        assert_eq!(&ok[0].bytes[..4], b"\x89PNG");
        assert_eq!(
            code("https://example.com/cat.png").await,
            Code::ImageUrlNotAllowed
        );
        assert_eq!(
            code("HTTP://example.com/cat.png").await,
            Code::ImageUrlNotAllowed
        );
        assert_eq!(code("file:///etc/passwd").await, Code::InvalidImage);
        assert_eq!(
            code("data:text/plain;base64,aGk=").await,
            Code::InvalidImage
        );
        assert_eq!(code("data:image/png,rawbytes").await, Code::InvalidImage);
        assert_eq!(code("data:image/png;base64,***").await, Code::InvalidImage);
        let huge = format!("data:image/png;base64,{}", "A".repeat(28 * 1024 * 1024));
        assert_eq!(code(&huge).await, Code::ImageTooLarge);
        let many: Vec<ImagePart> = (0..=MAX_IMAGES)
            .map(|_| part("data:image/png;base64,AA=="))
            .collect();
        assert!(matches!(
            input_images(&many, &named, &remote(ImageUrls::default())).await,
            Err(ApiError::BadRequest {
                code: Code::TooManyImages,
                ..
            })
        ));
        // Allowed, a loopback URL is still refused, before anything connects.
        let allowed = ImageUrls {
            allow: true,
            allow_private: false,
        };
        let loopback = code_with("http://127.0.0.1:9/cat.png", allowed).await;
        assert_eq!(loopback, Code::ImageUrlNotAllowed);
    }
}
