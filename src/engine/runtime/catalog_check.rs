//! The catalogue test: every entry of `models.toml` can be served by this engine from its
//! publisher's files. For each entry it resolves, from the published GGUF header facts
//! (`tests/data/catalog_files.json`), the family (`Family::of`), the tokenizer kind and
//! pre-tokenizer (`PreTokenizer::for_pre`, conformance-tested against llama.cpp's fixtures),
//! the chat template (the file's own, or the built-in the entry names) and the context
//! (LongRoPE where the entry claims more than the original context). Where a weights file is on
//! this machine its real header is read and must agree with the recorded facts, and the
//! tokenizer and template are built from it as the engine builds them. Where the model's
//! published chat template is among llama.cpp's `models/templates`, it is compiled and rendered.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use candle_core::Device;
use serde::Deserialize;

use crate::catalog::{Catalog, ModelEntry};
use crate::engine::model::Family;
use crate::engine::text::chat::{ChatMessage, Role};
use crate::engine::text::pretokenize::PreTokenizer;
use crate::engine::text::prompt::PromptFormat;
use crate::engine::text::template::ChatTemplate;
use crate::engine::weights::gguf::GgufFile;
use crate::engine::weights::store::TensorStore;

/// The header facts of an entry's published GGUF file.
#[derive(Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
struct FileFacts {
    architecture: String,
    tokenizer: String,
    pre: Option<String>,
    /// `None`: not known, so the entry must name a built-in template.
    chat_template: Option<bool>,
    context_length: usize,
    longrope: bool,
    template_fixture: Option<String>,
}

#[derive(Deserialize)]
struct FactsFile {
    models: BTreeMap<String, FileFacts>,
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn facts() -> BTreeMap<String, FileFacts> {
    let text = std::fs::read_to_string(root().join("tests/data/catalog_files.json")).unwrap();
    serde_json::from_str::<FactsFile>(&text).unwrap().models
}

/// Why the engine could not serve a model with these facts, if it could not.
fn unservable(m: &ModelEntry, f: &FileFacts) -> Option<String> {
    if Family::of(&f.architecture).is_none() {
        return Some(format!("architecture `{}` has no family", f.architecture));
    }
    match f.tokenizer.as_str() {
        "gpt2" => {
            let pre = f.pre.as_deref().unwrap_or("default");
            if PreTokenizer::for_pre(pre).is_none() {
                return Some(format!("pre-tokenizer `{pre}` is refused"));
            }
        }
        "llama" | "gemma" => {}
        other => return Some(format!("tokenizer kind `{other}` is refused")),
    }
    if f.chat_template != Some(true) && m.chat_template.is_none() && !m.base {
        return Some("the file may carry no chat template and the entry names no built-in".into());
    }
    if m.context_length > f.context_length {
        return Some(format!(
            "claims {} tokens of context, the file {}",
            m.context_length, f.context_length
        ));
    }
    None
}

/// The facts of a local GGUF file, read from its header as the engine reads it; the tokenizer
/// and template are built as `candle_engine::load` builds them.
fn read_local(path: &Path, m: &ModelEntry) -> FileFacts {
    let file = GgufFile::open(path, &Device::Cpu).unwrap();
    let arch = file.architecture().unwrap();
    let template = file.string("tokenizer.chat_template").ok();
    PromptFormat::of_gguf(&file, m.chat_template.as_deref())
        .unwrap_or_else(|e| panic!("{}: tokenizer or template does not build: {e:#}", m.id));
    FileFacts {
        tokenizer: file.string("tokenizer.ggml.model").unwrap().to_owned(),
        pre: file.string("tokenizer.ggml.pre").ok().map(str::to_owned),
        chat_template: Some(template.is_some()),
        context_length: file.usize(&format!("{arch}.context_length")).unwrap(),
        longrope: file.has_tensor("rope_factors_long.weight"),
        architecture: arch,
        template_fixture: None,
    }
}

/// A published template compiles and renders a user turn with the model's special tokens.
fn renders(fixture: &Path, arch: &str) -> Result<(), String> {
    let text = std::fs::read_to_string(fixture).map_err(|e| e.to_string())?;
    let t = ChatTemplate::new(Some(&text), arch).map_err(|e| format!("{e:#}"))?;
    let hello = [ChatMessage::text(Role::User, "Hello there")];
    let out = t.render(&hello, &[], "<s>", "</s>")?;
    out.contains("Hello there")
        .then_some(())
        .ok_or_else(|| format!("rendered without the message: {out:?}"))
}

#[test]
fn every_catalogue_entry_is_servable_from_its_published_files() {
    let catalog = Catalog::load(&root().join("models.toml")).unwrap();
    let facts = facts();
    let ids: Vec<&str> = catalog.models.iter().map(|m| m.id.as_str()).collect();
    let recorded: Vec<&str> = facts.keys().map(String::as_str).collect();
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    assert_eq!(
        sorted, recorded,
        "tests/data/catalog_files.json lists exactly the catalogue"
    );
    let weights = root().join("weights");
    let templates = weights.join("llama-vocab/templates");
    let (mut problems, mut read, mut rendered) = (Vec::new(), 0, 0);
    for m in &catalog.models {
        let f = &facts[&m.id];
        if let Some(why) = unservable(m, f) {
            problems.push(format!("{}: {why}", m.id));
        }
        if m.context_length > 4096 && m.family == "phi3" && !f.longrope && f.context_length > 4096 {
            problems.push(format!("{}: long context without LongRoPE factors", m.id));
        }
        let local: Option<PathBuf> = m.local_path(&weights).filter(|p| p.is_file());
        if let Some(path) = local {
            let mut real = read_local(&path, m);
            real.template_fixture.clone_from(&f.template_fixture);
            if &real != f {
                problems.push(format!("{}: header {real:?} differs from {f:?}", m.id));
            }
            read += 1;
        }
        if let Some(name) = &f.template_fixture {
            if let Err(e) = renders(&templates.join(name), &f.architecture) {
                problems.push(format!("{}: published template {name}: {e}", m.id));
            }
            rendered += 1;
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // CI has SmolLM2, Gemma 3 270M and Qwen2.5-Coder on disk.
    assert!(read >= 2, "only {read} local files read");
    assert!(rendered >= 20, "{rendered} published templates rendered");
}

/// The eight entries that could not load before (their pre-tokenizers were refused) resolve to
/// a served pre-tokenizer now.
#[test]
fn the_formerly_refused_pre_tokenizers_are_served() {
    let facts = facts();
    for id in [
        "falcon3-1b-instruct",
        "falcon3-3b-instruct",
        "falcon3-7b-instruct",
        "aya-expanse-8b",
        "command-r-08-2024",
        "phi-4-mini-instruct",
        "olmo-2-7b-instruct",
        "olmo-2-13b-instruct",
    ] {
        let pre = facts[id].pre.as_deref().unwrap();
        assert!(PreTokenizer::for_pre(pre).is_some(), "{id}: {pre}");
    }
}
