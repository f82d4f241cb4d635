//! Image input on tiny models of each vision family against `transformers`
//! (`tests/data/vision/`, made by `scripts/vision-fixtures.py`): the text model's last-position
//! logits with the image features in place of the image tokens, and the first greedy tokens,
//! for three images of different sizes and aspect ratios.

use std::path::{Path, PathBuf};

use candle_core::Device;
use tollgate::engine::model::attention::SeqCache;
use tollgate::engine::model::{InputRows, StepSeq, Transformer};
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
    steps: usize,
) -> (Vec<f32>, Vec<u32>) {
    let hidden = model.config.hidden;
    let mut inputs = Vec::new();
    let mut used = 0;
    for (first, len) in runs(positions) {
        inputs.push(InputRows {
            at: first,
            rows: &features[used * hidden..(used + len) * hidden],
            bidirectional,
        });
        used += len;
    }
    assert_eq!(
        used * hidden,
        features.len(),
        "features for every image token"
    );
    let mut cache = SeqCache::new(model.config.n_layers);
    let mut logits = model
        .forward(&mut [StepSeq {
            cache: &mut cache,
            tokens: ids,
            inputs: &inputs,
        }])
        .expect("prefill")
        .remove(0);
    let first = logits.clone();
    let mut greedy = Vec::new();
    for _ in 0..steps {
        let tok = argmax(&logits);
        greedy.push(tok);
        logits = model
            .forward(&mut [StepSeq::new(&mut cache, &[tok])])
            .expect("decode")
            .remove(0);
    }
    (first, greedy)
}

/// For Gemma 3 (bidirectional image blocks, 4 tokens an image) and SmolVLM (Idefics3 tiles
/// plus a global image, 16 tokens a tile), on the square, landscape and portrait images: the
/// image features from our own preprocessing and encoder give `transformers`' last-position
/// logits within 1e-4 of their largest magnitude, and its 5 greedy tokens.
#[test]
fn logits_and_greedy_tokens_match_transformers() {
    for (family, bidirectional) in [("gemma3", true), ("smolvlm", false)] {
        let dir = dir(family);
        let vision = VisionModel::open(&dir.join("mmproj.gguf")).expect("mmproj");
        let mut file = GgufFile::open(&dir.join("model.gguf"), &Device::Cpu).expect("gguf");
        let model = Transformer::load(&mut file).expect("text model");
        let text = std::fs::read_to_string(dir.join("reference.json")).expect("json");
        let reference: serde_json::Value = serde_json::from_str(&text).expect("json");
        for item in reference["images"].as_array().expect("images") {
            let name = format!("{family}/{}", item["name"].as_str().unwrap_or("?"));
            let bytes = std::fs::read(dir.join(item["file"].as_str().expect("file"))).expect("png");
            let image = decode(&bytes, &ImageLimits::default()).expect("decode");
            let features = vision
                .embed(&vision.preprocess(&image).tiles)
                .expect("embed");
            let features = features.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            let ids: Vec<u32> = serde_json::from_value(item["input_ids"].clone()).expect("ids");
            let positions: Vec<usize> =
                serde_json::from_value(item["image_token_positions"].clone()).expect("positions");
            let greedy_want: Vec<u32> =
                serde_json::from_value(item["greedy"].clone()).expect("greedy");
            let want = floats(&dir.join(item["logits"]["file"].as_str().expect("logits")));
            let (got, greedy) = run(&model, &ids, &positions, &features, bidirectional, 5);
            let scale = want.iter().fold(0f32, |m, x| m.max(x.abs()));
            let worst = got
                .iter()
                .zip(&want)
                .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
            eprintln!("{name}: logits relative error {:.2e}", worst / scale);
            assert!(worst / scale < 1e-4, "{name}: logits off by {worst}");
            assert_eq!(greedy, greedy_want, "{name}: greedy tokens");
        }
    }
}

/// Gemma 3's image block must be bidirectional: attending causally inside it changes the
/// logits by far more than the tolerance above (so the test above can tell).
#[test]
fn gemma3_image_blocks_are_bidirectional() {
    let dir = dir("gemma3");
    let vision = VisionModel::open(&dir.join("mmproj.gguf")).expect("mmproj");
    let mut file = GgufFile::open(&dir.join("model.gguf"), &Device::Cpu).expect("gguf");
    let model = Transformer::load(&mut file).expect("text model");
    let text = std::fs::read_to_string(dir.join("reference.json")).expect("json");
    let reference: serde_json::Value = serde_json::from_str(&text).expect("json");
    let item = &reference["images"][0];
    let bytes = std::fs::read(dir.join(item["file"].as_str().expect("file"))).expect("png");
    let image = decode(&bytes, &ImageLimits::default()).expect("decode");
    let features = vision
        .embed(&vision.preprocess(&image).tiles)
        .expect("embed");
    let features = features.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let ids: Vec<u32> = serde_json::from_value(item["input_ids"].clone()).expect("ids");
    let positions: Vec<usize> =
        serde_json::from_value(item["image_token_positions"].clone()).expect("positions");
    let (both_ways, _) = run(&model, &ids, &positions, &features, true, 0);
    let (causal, _) = run(&model, &ids, &positions, &features, false, 0);
    let scale = both_ways.iter().fold(0f32, |m, x| m.max(x.abs()));
    let diff = both_ways
        .iter()
        .zip(&causal)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    eprintln!(
        "gemma3: causal vs bidirectional image block, relative {:.2e}",
        diff / scale
    );
    assert!(diff / scale > 1e-3);
}
