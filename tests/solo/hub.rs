//! Weights fetched on first use from the Hugging Face hub through `hf-hub`, against a local
//! stand-in server that serves files in the hub's URL layout (`/{repo}/resolve/{rev}/{file}`,
//! with the `etag`, `x-repo-commit` and range headers hf-hub reads). `HF_ENDPOINT` and
//! `HF_HOME` point hf-hub at it. A source that fails is a short 404 `model_not_available` (what
//! was tried goes to the log), and nothing is charged. A safetensors repository (SmolLM2 converted by the test
//! into a Hugging Face checkpoint: bf16 safetensors, `config.json`, `tokenizer.json`) is fetched
//! file by file and served too.

use crate::common;

use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use common::*;
use tollgate::catalog::Catalog;

/// Serve `root/{repo}/{file}` as `/{repo}/resolve/main/{file}`, honouring `Range: bytes=a-b`.
async fn hub_file(
    State(root): State<Arc<PathBuf>>,
    Path(path): Path<String>,
    headers: HeaderMap,
) -> Response {
    let Some((repo, file)) = path.split_once("/resolve/main/") else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let Ok(bytes) = tokio::fs::read(root.join(repo).join(file)).await else {
        return (StatusCode::NOT_FOUND, "Entry not found").into_response();
    };
    let total = bytes.len();
    let range = headers
        .get("range")
        .and_then(|v| v.to_str().ok())
        .and_then(|r| r.strip_prefix("bytes="))
        .map(|r| {
            let (a, b) = r.split_once('-').unwrap_or((r, ""));
            let start: usize = a.parse().unwrap_or(0);
            let end: usize = b.parse().map_or(total - 1, |e: usize| e.min(total - 1));
            (start, end)
        });
    // hf-hub stores blobs by etag, so each file needs its own (the hub uses content hashes).
    let id = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(path.as_bytes()));
    let etag = format!("\"{id}-{total}\"");
    let common_headers = [
        ("etag", etag.as_str()),
        ("x-repo-commit", "0123456789abcdef0123456789abcdef01234567"),
        ("accept-ranges", "bytes"),
    ];
    match range {
        Some((start, end)) => {
            let part = bytes[start..=end].to_vec();
            // Large bodies arrive at about 25 MB/s, so a test can watch a download's progress.
            let body = if part.len() > 8 << 20 {
                let chunks: Vec<Vec<u8>> = part.chunks(1 << 20).map(<[u8]>::to_vec).collect();
                axum::body::Body::from_stream(futures::StreamExt::then(
                    futures::stream::iter(chunks),
                    |c| async move {
                        tokio::time::sleep(std::time::Duration::from_millis(40)).await;
                        Ok::<_, std::io::Error>(c)
                    },
                ))
            } else {
                axum::body::Body::from(part)
            };
            let mut r = (StatusCode::PARTIAL_CONTENT, common_headers, body).into_response();
            r.headers_mut().insert(
                "content-range",
                format!("bytes {start}-{end}/{total}").parse().unwrap(),
            );
            r
        }
        None => (StatusCode::OK, common_headers, bytes).into_response(),
    }
}

#[tokio::test]
async fn weights_are_fetched_from_the_hub_on_first_use_and_a_dead_source_is_a_404() {
    // The stand-in hub holds SmolLM2 under `test-org/SmolLM2-GGUF`.
    let hub_dir = tempfile::tempdir().unwrap();
    let repo_dir = hub_dir.path().join("test-org/SmolLM2-GGUF");
    std::fs::create_dir_all(&repo_dir).unwrap();
    std::fs::copy(
        weights_dir().join("SmolLM2-135M-Instruct.Q4_1.gguf"),
        repo_dir.join("smol.gguf"),
    )
    .unwrap();
    export_hf(
        &weights_dir().join("SmolLM2-135M-Instruct.Q4_1.gguf"),
        &hub_dir.path().join("test-org/SmolLM2-HF"),
    );
    let app = axum::Router::new()
        .route("/{*path}", axum::routing::get(hub_file))
        .with_state(Arc::new(hub_dir.path().to_owned()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hub = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let hf_home = tempfile::tempdir().unwrap();
    // Every test of this binary holds `ALONE`, so setting the process environment is safe here.
    let _alone = crate::ALONE.lock().await;
    std::env::set_var("HF_ENDPOINT", format!("http://{hub}"));
    std::env::set_var("HF_HOME", hf_home.path());

    let text = [
        entry("hub-smol", 8192, "\"text\"", true)
            .replace("sources = [{ path = \"hub-smol.gguf\" }]", "sources = [{ path = \"absent.gguf\" }, { hf_repo = \"test-org/SmolLM2-GGUF\", hf_file = \"smol.gguf\" }]"),
        entry("hub-smol-hf", 8192, "\"text\"", true).replace(
            "sources = [{ path = \"hub-smol-hf.gguf\" }]",
            "sources = [{ hf_repo = \"test-org/SmolLM2-HF\" }]",
        ),
        entry("dead-source", 8192, "\"text\"", true)
            .replace("sources = [{ path = \"dead-source.gguf\" }]", "sources = [{ path = \"absent.gguf\" }, { hf_repo = \"test-org/missing-GGUF\", hf_file = \"nope.gguf\" }]"),
    ]
    .concat();
    let catalog = Catalog::parse(&text).unwrap();
    let s = on_demand_server(catalog, 0);
    assert!(
        s.engine.loaded().is_empty(),
        "nothing is loaded before the first request"
    );

    let body = chat_body(
        "hub-smol",
        Some("You are a helpful assistant."),
        "What is the capital of France?",
        r#""temperature":0,"max_tokens":20"#,
    );
    // While the first request waits, the download shows in /health and /v1/models.
    let request = {
        let (url, key, body) = (s.url("/v1/chat/completions"), s.key.clone(), body.clone());
        tokio::spawn(async move {
            let r = reqwest::Client::new()
                .post(url)
                .bearer_auth(key)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            (
                r.status().as_u16(),
                r.json::<serde_json::Value>().await.unwrap(),
            )
        })
    };
    let mut seen = None;
    for _ in 0..400 {
        let (_, _, health) = get(&s.url("/health")).await;
        let (_, _, record) = get(&s.url("/v1/models/hub-smol")).await;
        let p = &health["preparing"][0];
        if p["stage"] == "downloading" && p["percent"].as_u64().is_some_and(|x| x < 100) {
            assert_eq!(record["preparing"]["stage"], "downloading", "{record}");
            seen = Some(p.clone());
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    let seen = seen.expect("the download showed in /health while it ran");
    assert_eq!(seen["model"], "hub-smol", "{seen}");
    assert_eq!(seen["file"], "smol.gguf", "{seen}");
    assert!(seen["total_bytes"].as_u64().unwrap() > 90_000_000, "{seen}");
    let (st, v) = request.await.unwrap();
    assert_eq!(st, 200, "{v}");
    assert!(
        v["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .contains("Paris"),
        "{v}"
    );
    assert_eq!(s.engine.loaded().len(), 1);
    let (_, _, health) = get(&s.url("/health")).await;
    assert_eq!(health["preparing"], serde_json::json!([]), "{health}");
    let cached: Vec<_> = walk(hf_home.path())
        .into_iter()
        .filter(|p| p.ends_with("smol.gguf"))
        .collect();
    assert!(!cached.is_empty(), "the file landed in HF_HOME's cache");

    // The same model as a safetensors checkpoint, fetched file by file.
    let body = body.replace("\"hub-smol\"", "\"hub-smol-hf\"");
    let (st, _, v) = s.post("/v1/chat/completions", &body, &[]).await;
    assert_eq!(st, 200, "{v}");
    assert!(
        v["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .contains("Paris"),
        "{v}"
    );
    let files: Vec<String> = walk(hf_home.path())
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("SmolLM2-HF"))
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    for want in ["config.json", "tokenizer.json", "model.safetensors"] {
        assert!(files.iter().any(|f| f == want), "{want} fetched: {files:?}");
    }

    let before = s.ledger.account(s.account).unwrap().balance_micros;
    let (st, _, v) = s
        .post(
            "/v1/chat/completions",
            &chat_body("dead-source", None, "hi", ""),
            &[],
        )
        .await;
    assert_eq!(
        (st, v["error"]["type"].as_str(), v["error"]["code"].as_str()),
        (404, Some("not_found_error"), Some("model_not_available")),
        "{v}"
    );
    // Short, for the client: what was tried (paths, the hub's URL) is in the server log only.
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with("The model `dead-source` has no weights on this server")
            && !msg.contains("absent.gguf")
            && !msg.contains("http"),
        "{msg}"
    );
    assert_eq!(
        s.ledger.account(s.account).unwrap().balance_micros,
        before,
        "not charged"
    );
}

fn walk(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// Convert a llama-architecture GGUF file into a Hugging Face checkpoint directory: tensors
/// dequantized to bf16 under `transformers` names with q/k rows un-permuted (llama.cpp permutes
/// them for adjacent-pair RoPE), `config.json`, and `tokenizer.json` / `tokenizer_config.json`
/// from the GGUF vocabulary and template.
fn export_hf(gguf: &std::path::Path, out: &std::path::Path) {
    use candle_core::{DType, Device, Tensor};
    use tollgate::engine::text::tokenizer::ModelTokenizer;
    use tollgate::engine::weights::gguf::GgufFile;
    use tollgate::engine::weights::store::TensorStore;

    std::fs::create_dir_all(out).unwrap();
    let mut file = GgufFile::open(gguf, &Device::Cpu).unwrap();
    assert_eq!(file.architecture().unwrap(), "llama");
    let n = |k: &str| file.usize(&format!("llama.{k}")).unwrap();
    let (hidden, layers, heads, kv_heads) = (
        n("embedding_length"),
        n("block_count"),
        n("attention.head_count"),
        n("attention.head_count_kv"),
    );
    let head_dim = hidden / heads;
    let context_length = n("context_length");
    let names: Vec<String> = file.content.tensor_infos.keys().cloned().collect();
    let mut tensors = std::collections::HashMap::new();
    for name in names {
        let t = file.tensor_f32(&name).unwrap();
        let hf = match name.as_str() {
            "token_embd.weight" => "model.embed_tokens.weight".to_owned(),
            "output_norm.weight" => "model.norm.weight".to_owned(),
            "output.weight" => "lm_head.weight".to_owned(),
            _ => {
                let rest = name.strip_prefix("blk.").unwrap();
                let (l, rest) = rest.split_once('.').unwrap();
                let hf = match rest {
                    "attn_q.weight" => "self_attn.q_proj.weight",
                    "attn_k.weight" => "self_attn.k_proj.weight",
                    "attn_v.weight" => "self_attn.v_proj.weight",
                    "attn_output.weight" => "self_attn.o_proj.weight",
                    "attn_norm.weight" => "input_layernorm.weight",
                    "ffn_norm.weight" => "post_attention_layernorm.weight",
                    "ffn_gate.weight" => "mlp.gate_proj.weight",
                    "ffn_up.weight" => "mlp.up_proj.weight",
                    "ffn_down.weight" => "mlp.down_proj.weight",
                    other => panic!("unexpected tensor {other}"),
                };
                format!("model.layers.{l}.{hf}")
            }
        };
        // GGUF row (head, 2i + j) holds Hugging Face row (head, j * half + i).
        let t = match name.rsplit('.').nth(1) {
            Some("attn_q") => unpermute(&t, heads, head_dim),
            Some("attn_k") => unpermute(&t, kv_heads, head_dim),
            _ => t,
        };
        tensors.insert(hf, t.to_dtype(DType::BF16).unwrap());
    }
    candle_core::safetensors::save(&tensors, out.join("model.safetensors")).unwrap();
    let config = serde_json::json!({
        "model_type": "llama", "hidden_size": hidden, "num_hidden_layers": layers,
        "num_attention_heads": heads, "num_key_value_heads": kv_heads,
        "rms_norm_eps": file.f32_or("llama.attention.layer_norm_rms_epsilon", 1e-5),
        "rope_theta": file.f32_or("llama.rope.freq_base", 10_000.0),
        "max_position_embeddings": context_length,
        "tie_word_embeddings": !tensors.contains_key("lm_head.weight"),
    });
    std::fs::write(out.join("config.json"), config.to_string()).unwrap();
    let tok = ModelTokenizer::from_gguf(&file).unwrap();
    std::fs::write(
        out.join("tokenizer.json"),
        tok.tokenizer.to_string(false).unwrap(),
    )
    .unwrap();
    let tok_config = serde_json::json!({
        "bos_token": tok.bos_text, "eos_token": tok.eos_text, "add_bos_token": tok.add_bos,
        "chat_template": file.string("tokenizer.chat_template").unwrap(),
    });
    std::fs::write(out.join("tokenizer_config.json"), tok_config.to_string()).unwrap();

    fn unpermute(t: &Tensor, heads: usize, head_dim: usize) -> Tensor {
        let cols = t.dims()[1];
        // [heads, half, 2, cols] -> [heads, 2, half, cols]
        t.reshape((heads, head_dim / 2, 2, cols))
            .unwrap()
            .transpose(1, 2)
            .unwrap()
            .reshape((heads * head_dim, cols))
            .unwrap()
    }
}
