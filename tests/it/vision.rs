//! Image input on tiny models of each vision family against `transformers`
//! (`tests/data/vision/`, made by `scripts/fixtures/vision-fixtures.py`): the text model's last-position
//! logits with the image features in place of the image tokens, and the first greedy tokens,
//! for three images of different sizes and aspect ratios.

use crate::common;

use std::path::{Path, PathBuf};

use base64::Engine as _;
use candle_core::Device;
use common::*;
use serde_json::{json, Value};
use tollgate::api::shared::image_fetch::ImageUrls;
use tollgate::engine::model::attention::{KvType, SeqCache};
use tollgate::engine::model::{mrope_position, ImageGrid, InputRows, StepSeq, Transformer};
use tollgate::engine::vision::{decode, ImageLimits, VisionModel};
use tollgate::engine::weights::gguf::GgufFile;

fn dir(family: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/vision")
        .join(family)
}

fn floats(path: &Path) -> Vec<f32> {
    std::fs::read(path)
        .expect("bin")
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

fn argmax(logits: &[f32]) -> u32 {
    (0..logits.len())
        .max_by(|&a, &b| logits[a].total_cmp(&logits[b]).then(b.cmp(&a)))
        .expect("logits") as u32
}

/// The image tokens' positions as runs of consecutive positions: `(first, len)`.
fn runs(positions: &[usize]) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    for &p in positions {
        match out.last_mut() {
            Some((first, len)) if *first + *len == p => *len += 1,
            _ => out.push((p, 1)),
        }
    }
    out
}

/// The logits after the prompt and the greedy continuation, with `features` (`[n][hidden]`)
/// in place of the image tokens.
fn run(
    model: &Transformer,
    ids: &[u32],
    positions: &[usize],
    features: &[f32],
    bidirectional: bool,
    grids: &[ImageGrid],
    steps: usize,
) -> (Vec<f32>, Vec<u32>) {
    let hidden = model.config.hidden;
    let mut inputs = Vec::new();
    let mut used = 0;
    for (first, len) in runs(positions) {
        inputs.push(InputRows {
            at: first,
            rows: &features[used * hidden..(used + len) * hidden],
            before: 0,
            bidirectional,
        });
        used += len;
    }
    assert_eq!(
        used * hidden,
        features.len(),
        "features for every image token"
    );
    // f32 rows: this compares against transformers' f32 forward within 1e-4, a check of the
    // architecture, not of the f16 cache's rounding (benchmarks.md has that).
    let mut cache = SeqCache::new(model.config.n_layers, KvType::F32);
    let mut logits = model
        .forward(&mut [StepSeq {
            cache: &mut cache,
            tokens: ids,
            logits: 1,
            inputs: &inputs,
            grids,
        }])
        .expect("prefill")
        .remove(0);
    let first = logits.clone();
    let mut greedy = Vec::new();
    for _ in 0..steps {
        let tok = argmax(&logits);
        greedy.push(tok);
        logits = model
            .forward(&mut [StepSeq {
                cache: &mut cache,
                tokens: &[tok],
                logits: 1,
                inputs: &[],
                grids,
            }])
            .expect("decode")
            .remove(0);
    }
    (first, greedy)
}

/// One family's fixture: its vision and text models and `reference.json`.
struct Fixture {
    dir: PathBuf,
    vision: VisionModel,
    model: Transformer,
    reference: Value,
}

impl Fixture {
    fn open(family: &str) -> Self {
        let dir = dir(family);
        let text = std::fs::read_to_string(dir.join("reference.json")).expect("json");
        let reference: Value = serde_json::from_str(&text).expect("json");
        let mut vision = VisionModel::open(&dir.join("mmproj.gguf")).expect("mmproj");
        // Qwen2.5-VL's fixture keeps its images small with its own pixel range.
        let pre = &reference["model"]["preprocessor"];
        if let (Some(min), Some(max)) = (pre["min_pixels"].as_u64(), pre["max_pixels"].as_u64()) {
            vision = vision.with_pixel_range(min as usize, max as usize);
        }
        let mut file = GgufFile::open(&dir.join("model.gguf"), &Device::Cpu).expect("gguf");
        let model = Transformer::load(&mut file).expect("text model");
        Self {
            dir,
            vision,
            model,
            reference,
        }
    }

    /// The reference's prompt ids and image-token positions for `item`, the features our
    /// own preprocessing and encoder give its image, and its runs as grids where the family
    /// has multimodal RoPE.
    fn prompt(&self, item: &Value) -> (Vec<u32>, Vec<usize>, Vec<f32>, Vec<ImageGrid>) {
        let file = self.dir.join(item["file"].as_str().expect("file"));
        let image =
            decode(&std::fs::read(file).expect("png"), &ImageLimits::default()).expect("decode");
        let tiled = self.vision.preprocess(&image).expect("preprocess");
        let features = self.vision.embed(&tiled).expect("embed");
        let features = features.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let ids = serde_json::from_value(item["input_ids"].clone()).expect("ids");
        let positions: Vec<usize> =
            serde_json::from_value(item["image_token_positions"].clone()).expect("positions");
        let grid = self.vision.grid(image.width, image.height).expect("grid");
        let grids = match self.vision.token_cols(grid) {
            Some(cols) => runs(&positions)
                .into_iter()
                .map(|(at, len)| ImageGrid { at, len, cols })
                .collect(),
            None => Vec::new(),
        };
        (ids, positions, features, grids)
    }
}

/// The worst difference of `got` from `want`, relative to `want`'s largest magnitude.
fn relative(got: &[f32], want: &[f32]) -> f32 {
    let scale = want.iter().fold(0f32, |m, x| m.max(x.abs()));
    let worst = got
        .iter()
        .zip(want)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    worst / scale
}

/// For Gemma 3 (bidirectional image blocks, 4 tokens an image), SmolVLM (Idefics3 tiles
/// plus a global image, 16 tokens a tile) and Qwen2.5-VL (windowed encoder, multimodal RoPE
/// over the image grid), on the square, landscape and portrait images: the
/// image features from our own preprocessing and encoder give `transformers`' last-position
/// logits within 1e-4 of their largest magnitude, and its 5 greedy tokens.
#[test]
fn logits_and_greedy_tokens_match_transformers() {
    for (family, bidirectional) in [("gemma3", true), ("smolvlm", false), ("qwen25vl", false)] {
        let f = Fixture::open(family);
        for item in f.reference["images"].as_array().expect("images") {
            let name = format!("{family}/{}", item["name"].as_str().unwrap_or("?"));
            let (ids, positions, features, grids) = f.prompt(item);
            let greedy_want: Vec<u32> =
                serde_json::from_value(item["greedy"].clone()).expect("greedy");
            let want = floats(&f.dir.join(item["logits"]["file"].as_str().expect("logits")));
            let (got, greedy) = run(
                &f.model,
                &ids,
                &positions,
                &features,
                bidirectional,
                &grids,
                5,
            );
            let err = relative(&got, &want);
            eprintln!("{name}: logits relative error {err:.2e}");
            assert!(err < 1e-4, "{name}: logits off by {err}");
            assert_eq!(greedy, greedy_want, "{name}: greedy tokens");
        }
    }
}

/// Gemma 3's image block must be bidirectional: attending causally inside it changes the
/// logits by far more than the tolerance above (so the test above can tell).
#[test]
fn gemma3_image_blocks_are_bidirectional() {
    let f = Fixture::open("gemma3");
    let (ids, positions, features, _) = f.prompt(&f.reference["images"][0]);
    let (both_ways, _) = run(&f.model, &ids, &positions, &features, true, &[], 0);
    let (causal, _) = run(&f.model, &ids, &positions, &features, false, &[], 0);
    let diff = relative(&causal, &both_ways);
    eprintln!("gemma3: causal vs bidirectional image block, relative {diff:.2e}");
    assert!(diff > 1e-3);
}

/// Qwen2.5-VL's positions: `mrope_position` gives `transformers`' `get_rope_index` for every
/// prompt token of the three images, and plain token positions instead change the logits by
/// far more than the tolerance above (so the logits test can tell).
#[test]
fn qwen25vl_positions_follow_the_image_grid() {
    let f = Fixture::open("qwen25vl");
    for item in f.reference["images"].as_array().expect("images") {
        let name = item["name"].as_str().unwrap_or("?");
        let (ids, positions, features, grids) = f.prompt(item);
        let want = &item["mrope_position_ids"];
        let axis =
            |a: &str| -> Vec<usize> { serde_json::from_value(want[a].clone()).expect("ids") };
        let (t, h, w) = (axis("t"), axis("h"), axis("w"));
        for k in 0..ids.len() {
            assert_eq!(
                mrope_position(&grids, k),
                [t[k], h[k], w[k]],
                "{name}: token {k}"
            );
        }
        let (grid, _) = run(&f.model, &ids, &positions, &features, false, &grids, 0);
        let (flat, _) = run(&f.model, &ids, &positions, &features, false, &[], 0);
        let diff = relative(&flat, &grid);
        eprintln!("qwen25vl/{name}: token-index positions vs M-RoPE, relative {diff:.2e}");
        assert!(diff > 1e-3, "{name}: {diff}");
    }
}

/// The tiny models as catalogue entries (`tests/data/vision/models.toml`): `gemma3`,
/// `smolvlm` and `qwen25vl` read images, `text-only` is the Gemma 3 model without its vision
/// part.
fn data_url(path: &Path) -> String {
    let bytes = std::fs::read(path).expect("image");
    format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(bytes)
    )
}

fn image_chat(model: &str, url: &str) -> String {
    json!({
        "model": model,
        "max_tokens": 5,
        "temperature": 0,
        "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": url, "detail": "auto"}},
            {"type": "text", "text": "Describe this."}
        ]}]
    })
    .to_string()
}

fn balance(s: &TestServer) -> i64 {
    s.ledger.account(s.account).unwrap().balance_micros.0
}

/// Through the HTTP API, for the three families and the three images: a chat request with a
/// `data:` URL image returns 200, `prompt_tokens` is the reference prompt's (image tokens
/// included), the 5 tokens are the reference's greedy ones, and the charge is exactly the
/// catalogue price of those tokens; the same image sent twice is served from the prefix cache
/// and answered the same. (Qwen2.5-VL's tiny byte-level vocabulary writes its greedy tokens as
/// partial UTF-8, so its text is compared by the logits test instead, token by token.)
#[tokio::test(flavor = "multi_thread")]
async fn chat_with_an_image_is_answered_and_billed() {
    let s = vision_server();
    for family in ["gemma3", "smolvlm", "qwen25vl"] {
        let dir = dir(family);
        let text = std::fs::read_to_string(dir.join("reference.json")).expect("json");
        let reference: Value = serde_json::from_str(&text).expect("json");
        for item in reference["images"].as_array().expect("images") {
            let name = format!("{family}/{}", item["name"].as_str().unwrap_or("?"));
            let url = data_url(&dir.join(item["file"].as_str().expect("file")));
            let mut answers = Vec::new();
            for _ in 0..2 {
                let before = balance(&s);
                let (status, _, v) = s
                    .post("/v1/chat/completions", &image_chat(family, &url), &[])
                    .await;
                assert_eq!(status, 200, "{name}: {v}");
                let usage = &v["usage"];
                assert_eq!(usage["prompt_tokens"], item["n_tokens"], "{name}: {usage}");
                assert_eq!(usage["completion_tokens"], 5, "{name}");
                let cached = usage["prompt_tokens_details"]["cached_tokens"]
                    .as_u64()
                    .unwrap_or(0);
                let pricing = s.state.models.catalog.get(family).unwrap().pricing;
                let want = tollgate::billing::cost_micros(
                    &pricing,
                    usage["prompt_tokens"].as_u64().unwrap(),
                    cached,
                    5,
                );
                assert_eq!(before - balance(&s), want.0, "{name}: charge");
                answers.push((v["choices"][0]["message"]["content"].clone(), cached));
            }
            let pieces: String = item["greedy_pieces"]
                .as_array()
                .expect("pieces")
                .iter()
                .map(|p| p.as_str().unwrap_or(""))
                // Special tokens (`<row_6_col_1>`) are not written into the text.
                .filter(|p| !(p.starts_with('<') && p.ends_with('>')))
                .map(|p| p.replace('\u{2581}', " "))
                .collect();
            assert_eq!(
                answers[0].0, answers[1].0,
                "{name}: the cached prompt answers the same"
            );
            if family != "qwen25vl" {
                assert_eq!(
                    answers[0].0.as_str().unwrap_or("").trim_start(),
                    pieces.trim_start(),
                    "{name}"
                );
            }
            assert!(
                answers[1].1 > 0,
                "{name}: the second request reuses the prefix cache"
            );
        }
    }
}

/// Images are refused by name: to a text-only model (`image_not_supported`), as a remote URL
/// (`image_url_not_allowed`), unreadable (`invalid_image`); and no balance moves.
#[tokio::test(flavor = "multi_thread")]
async fn bad_images_are_refused_by_part_and_cost_nothing() {
    let s = vision_server();
    let png = data_url(&dir("images").join("square.png"));
    let before = balance(&s);
    let cases = [
        ("text-only", png.as_str(), "image_not_supported"),
        (
            "gemma3",
            "https://127.0.0.1/cat.png",
            "image_url_not_allowed",
        ),
        ("gemma3", "data:image/png;base64,aGVsbG8=", "invalid_image"),
    ];
    for (model, url, code) in cases {
        let (status, _, v) = s
            .post("/v1/chat/completions", &image_chat(model, url), &[])
            .await;
        assert_eq!(status, 400, "{model} {url}: {v}");
        assert_eq!(v["error"]["code"], code, "{v}");
        assert_eq!(v["error"]["param"], "messages[0].content[0]", "{v}");
    }
    assert_eq!(balance(&s), before);
}

/// The vision encoder runs only for money already held: an account that cannot pay for an
/// image request gets 402 and its image is never encoded (the model was loaded to count the
/// prompt); a paying request's image is encoded exactly once.
#[tokio::test(flavor = "multi_thread")]
async fn images_are_encoded_only_after_the_hold() {
    let s = vision_server();
    let (_, poor) = s.account_with("poor@example.com", 0);
    let png = data_url(&dir("images").join("square.png"));
    let body = image_chat("gemma3", &png);
    let auth = format!("Bearer {poor}");
    let (status, _, v) = s
        .post("/v1/chat/completions", &body, &[("authorization", &auth)])
        .await;
    assert_eq!(status, 402, "{v}");
    let encoded = |s: &TestServer| {
        s.engine
            .stats()
            .iter()
            .find(|m| m.model == "gemma3")
            .map(|m| m.images_encoded)
    };
    assert_eq!(encoded(&s), Some(0), "loaded, and nothing encoded");
    let (status, _, v) = s.post("/v1/chat/completions", &body, &[]).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(encoded(&s), Some(1));
}

/// The Responses API takes the same image as an `input_image` part: 200, the reference
/// prompt's tokens as `input_tokens`, and the reference's greedy text.
#[tokio::test(flavor = "multi_thread")]
async fn responses_take_input_image() {
    let s = vision_server();
    let dir = dir("gemma3");
    let text = std::fs::read_to_string(dir.join("reference.json")).expect("json");
    let reference: Value = serde_json::from_str(&text).expect("json");
    let item = &reference["images"][1];
    let url = data_url(&dir.join(item["file"].as_str().expect("file")));
    let body = json!({
        "model": "gemma3",
        "max_output_tokens": 5,
        "temperature": 0,
        "input": [{"role": "user", "content": [
            {"type": "input_image", "image_url": url, "detail": "high"},
            {"type": "input_text", "text": "Describe this."}
        ]}]
    })
    .to_string();
    let (status, _, v) = s.post("/v1/responses", &body, &[]).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["usage"]["input_tokens"], item["n_tokens"], "{v}");
    assert_eq!(v["usage"]["output_tokens"], 5, "{v}");
}

/// The real SmolVLM-256M-Instruct (llama.cpp's GGUF and mmproj, Q8_0) answers about an image,
/// when its files are in `weights/` (they come from the Hugging Face hub, which this project's
/// build machines cannot reach; skipped with a message otherwise).
#[tokio::test(flavor = "multi_thread")]
async fn real_smolvlm_256m_reads_an_image() {
    let weights = weights_dir();
    let files = [
        "SmolVLM-256M-Instruct-Q8_0.gguf",
        "mmproj-SmolVLM-256M-Instruct-Q8_0.gguf",
    ];
    if let Some(missing) = files.iter().find(|f| !weights.join(f).is_file()) {
        eprintln!(
            "skipped: weights/{missing} is not present (ggml-org/SmolVLM-256M-Instruct-GGUF)"
        );
        return;
    }
    let s = on_demand_server(catalog(), 0);
    let url = data_url(&dir("images").join("landscape.png"));
    let (status, _, v) = s
        .post(
            "/v1/chat/completions",
            &image_chat("smolvlm-256m-instruct", &url),
            &[],
        )
        .await;
    assert_eq!(status, 200, "{v}");
    // The image is cut into tiles plus a global image, 64 tokens each.
    assert!(
        v["usage"]["prompt_tokens"].as_u64().unwrap() > 3 * 64,
        "{v}"
    );
    let answer = v["choices"][0]["message"]["content"].as_str().unwrap_or("");
    eprintln!("SmolVLM-256M: {answer:?}");
    assert!(!answer.trim().is_empty());
}

/// An HTTP server on loopback that answers every request with `body` as `image/png`.
fn png_server(body: Vec<u8>) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: image/png\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(&body);
        }
    });
    format!("http://{addr}/square.png")
}

/// Remote image URLs: refused unless the operator allows them; allowed, a URL on a loopback
/// or private address is still refused (and costs nothing); with private addresses allowed too,
/// the image is fetched and read as its `data:` URL is.
#[tokio::test(flavor = "multi_thread")]
async fn remote_image_urls_follow_the_operator_settings() {
    let png = std::fs::read(dir("images").join("square.png")).expect("png");
    let url = png_server(png);
    let off = vision_server();
    let (status, _, v) = off
        .post("/v1/chat/completions", &image_chat("gemma3", &url), &[])
        .await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (400, Some("image_url_not_allowed")),
        "{v}"
    );

    let public_only = vision_server_with(ImageUrls {
        allow: true,
        allow_private: false,
    });
    let before = balance(&public_only);
    for internal in [
        url.as_str(),
        "http://10.0.0.1/cat.png",
        "http://[::1]:9/cat.png",
        "http://169.254.169.254/latest",
    ] {
        let (status, _, v) = public_only
            .post("/v1/chat/completions", &image_chat("gemma3", internal), &[])
            .await;
        assert_eq!(status, 400, "{internal}: {v}");
        assert_eq!(
            v["error"]["code"], "image_url_not_allowed",
            "{internal}: {v}"
        );
        assert_eq!(v["error"]["param"], "messages[0].content[0]", "{v}");
    }
    assert_eq!(balance(&public_only), before);

    let private = vision_server_with(ImageUrls {
        allow: true,
        allow_private: true,
    });
    let (status, _, v) = private
        .post("/v1/chat/completions", &image_chat("gemma3", &url), &[])
        .await;
    assert_eq!(status, 200, "{v}");
    let text = std::fs::read_to_string(dir("gemma3").join("reference.json")).expect("json");
    let reference: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(
        v["usage"]["prompt_tokens"], reference["images"][0]["n_tokens"],
        "{v}"
    );
}
