//! Llama 3.x tool calls (`ToolFormat::Llama3`) against Llama 3's real vocabulary: the
//! vocabulary-only GGUF `ggml-vocab-llama-bpe.gguf` from the `llama-cpp-python` 0.3.36 sdist
//! (`scripts/fetch-weights llama3-vocab`; no weights, so no generation). The call grammar of
//! each `tool_choice` accepts Meta's format, `{"name": ..., "parameters": {...}}` (after
//! `<|python_tag|>` or bare under `auto`), token by token as the model would emit it, refuses a
//! name that was not offered, and ends there; the parser reads the same text back as the call.

use std::sync::Arc;

use serde_json::json;
use tollgate::engine::constrain::grammar::{Grammar, GrammarEnv};
use tollgate::engine::constrain::tools::parse::parse_all;
use tollgate::engine::constrain::tools::{ToolFormat, ToolSyntax};
use tollgate::engine::text::chat::ToolChoice;
use tollgate::engine::text::tokenizer::ModelTokenizer;
use tollgate::engine::weights::gguf::GgufFile;
use tollgate::engine::ToolSpec;

fn vocab() -> Arc<ModelTokenizer> {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("weights/ggml-vocab-llama-bpe.gguf");
    assert!(
        path.exists(),
        "{} missing: scripts/fetch-weights llama3-vocab",
        path.display()
    );
    let file = GgufFile::open(&path, &candle_core::Device::Cpu).expect("gguf");
    Arc::new(ModelTokenizer::from_gguf(&file).expect("tokenizer"))
}

fn weather() -> ToolSpec {
    ToolSpec {
        name: "get_weather".into(),
        description: Some("Weather now".into()),
        parameters: json!({"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}),
    }
}

/// Feed `text` token by token as generated tokens; `false` at the first token the grammar
/// refuses once it is active.
fn feed(g: &mut Grammar, tok: &ModelTokenizer, text: &str) -> bool {
    for id in tok.encode(text).expect("encode") {
        if g.is_active() {
            if !g.allows(id, &tok.stop_ids) || !g.consume(id) {
                return false;
            }
        } else {
            g.observe(id, Some(&tok.decode(&[id])), tok);
        }
    }
    true
}

#[test]
fn llama3_calls_follow_the_grammar_on_the_real_vocabulary() {
    let tok = vocab();
    let env = GrammarEnv::new(tok.clone()).expect("env");
    let call = r#"{"name": "get_weather", "parameters": {"location": "Paris"}}"#;
    let compile = |choice: ToolChoice| {
        let (spec, start) = ToolFormat::Llama3
            .grammar(&[weather()], &choice, true, None)
            .expect("grammar");
        env.compile(spec, start).expect("compile")
    };
    for choice in [
        ToolChoice::Required,
        ToolChoice::Function("get_weather".into()),
    ] {
        let mut g = compile(choice.clone());
        assert!(g.is_active(), "{choice:?} constrains from the first token");
        assert!(feed(&mut g, &tok, call), "{choice:?}");
        assert!(g.is_finished(), "{choice:?}: one call, then the end");
        let mut bad = compile(choice);
        assert!(!feed(
            &mut bad,
            &tok,
            r#"{"name": "get_time", "parameters": {}}"#
        ));
    }
    for text in [format!("<|python_tag|>{call}"), call.to_owned()] {
        let mut g = compile(ToolChoice::Auto);
        assert!(!g.is_active());
        assert!(feed(&mut g, &tok, &text), "{text}");
        assert!(g.is_active() && g.is_finished(), "{text}");
    }
    let mut text_answer = compile(ToolChoice::Auto);
    assert!(feed(&mut text_answer, &tok, "It is sunny in Paris today."));
    assert!(!text_answer.is_active());

    let syntax = ToolSyntax {
        format: ToolFormat::Llama3,
        names: vec!["get_weather".into()],
    };
    let (content, calls) = parse_all(&syntax, &format!("<|python_tag|>{call}"));
    assert_eq!(content, "");
    assert_eq!(
        calls,
        vec![(
            "get_weather".to_owned(),
            r#"{"location": "Paris"}"#.to_owned()
        )]
    );
}
