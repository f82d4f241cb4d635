//! The MCP tools' answers on a small catalogue (no engine; the HTTP transport and the official
//! Python SDK are exercised by `tests/python/test_mcp.py`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use super::estimate::*;
use super::language::language_code;
use super::tools::*;
use super::McpData;
use crate::billing;
use crate::catalog::Catalog;
use crate::engine::{LanguageCost as Measured, ModelLanguages};

fn entry(id: &str, maker: &str, ctx: usize, input: &str, output: &str, commercial: bool) -> String {
    format!(
        "[[model]]\nid = \"{id}\"\nname = \"{id}\"\nmaker = \"{maker}\"\nfamily = \"llama\"\nparameters = \"1M\"\n\
         context_length = {ctx}\nquantization = \"Q8_0\"\nlicense = \"MIT\"\nlicense_url = \"https://example.invalid\"\n\
         commercial_use = {commercial}\ninput_modalities = [\"text\"]\ncreated = 1700000000\n\
         pricing = {{ input = \"{input}\", output = \"{output}\" }}\nsources = [{{ path = \"{id}.gguf\" }}]\n\n"
    )
}

/// Two speech models, as `models.toml` lists them.
const AUDIO: &str = r#"
[[audio_model]]
id = "stt"
name = "STT"
maker = "Acme"
kind = "transcription"
parameters = "74M"
license = "MIT"
license_url = "https://example.invalid"
commercial_use = true
created = 0
pricing = { per_minute = "0.0006" }
path = "stt"
fetch = "scripts/fetch-weights whisper"

[[audio_model]]
id = "tts"
name = "TTS"
maker = "Acme"
kind = "speech"
parameters = "16M"
license = "MIT"
license_url = "https://example.invalid"
commercial_use = true
created = 0
pricing = { per_million_characters = "15.00" }
path = "tts.onnx"
fetch = "scripts/fetch-weights piper"
voices = ["joe"]
"#;

fn data() -> McpData {
    let text = [
        entry("cheap", "Acme", 2048, "0.02", "0.04", true),
        entry("mid", "Acme", 8192, "0.10", "0.20", true),
        entry("nc", "Other", 4096, "0.05", "0.10", false),
    ]
    .concat()
        + AUDIO;
    let catalog = Catalog::parse(&text).unwrap();
    let mut languages = BTreeMap::new();
    languages.insert(
        "mid".to_owned(),
        ModelLanguages {
            tokenizer: Some("gguf:mid.gguf".into()),
            languages: Some(
                [
                    (
                        "eng".to_owned(),
                        Measured {
                            chars: 1000,
                            tokens: 250,
                            tokens_per_1000_chars: 250.0,
                            multiplier: 1.0,
                        },
                    ),
                    (
                        "fra".to_owned(),
                        Measured {
                            chars: 1000,
                            tokens: 400,
                            tokens_per_1000_chars: 400.0,
                            multiplier: 1.6,
                        },
                    ),
                ]
                .into(),
            ),
            reason: None,
        },
    );
    McpData::new(
        Arc::new(catalog),
        Arc::new(languages),
        None,
        Arc::new(PathBuf::from("/nonexistent-weights")),
        PathBuf::from("/nonexistent-tokenizers"),
        &["model", "messages"],
        "{}".into(),
    )
}

#[test]
fn list_models_filters_and_sorts() {
    let d = data();
    let all = d.list_models(&ListModelsArgs::default()).unwrap();
    assert_eq!(all.count, 3);
    let by_price = d
        .list_models(&ListModelsArgs {
            sort: Some(SortKey::Price),
            ..Default::default()
        })
        .unwrap();
    let ids: Vec<&str> = by_price.models.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, ["cheap", "nc", "mid"]);
    let acme_cheap = d
        .list_models(&ListModelsArgs {
            maker: Some("acme".into()),
            max_input_price: Some(0.05),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(
        acme_cheap
            .models
            .iter()
            .map(|m| m.id.as_str())
            .collect::<Vec<_>>(),
        ["cheap"]
    );
    let commercial = d
        .list_models(&ListModelsArgs {
            commercial_use: Some(true),
            min_context: Some(4000),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(
        commercial
            .models
            .iter()
            .map(|m| m.id.as_str())
            .collect::<Vec<_>>(),
        ["mid"]
    );
    assert_eq!(commercial.models[0].input_micros_per_mtok, 100_000);
    assert!(d
        .list_models(&ListModelsArgs {
            max_input_price: Some(0.000_000_1),
            ..Default::default()
        })
        .unwrap_err()
        .contains("max_input_price"));
    assert!(d
        .list_models(&ListModelsArgs {
            modality: Some("audio".into()),
            ..Default::default()
        })
        .is_err());
}

#[test]
fn estimates_use_the_ledger_rule_and_say_how_tokens_were_counted() {
    let d = data();
    let given = d
        .estimate_cost(&EstimateArgs {
            model: "mid".into(),
            prompt: None,
            messages: None,
            prompt_tokens: Some(1234),
            expected_output_tokens: Some(567),
            language: Some("fra".into()),
            audio_seconds: None,
            input: None,
            max_tokens: None,
            n: None,
        })
        .unwrap();
    let pricing = &d.catalog.get("mid").unwrap().pricing;
    assert_eq!(
        given.cost_micros,
        billing::cost_micros(pricing, 1234, 0, 567)
    );
    assert_eq!(given.counted_by, "given");
    assert_eq!(given.language_multiplier, Some(1.6));
    // No tokenizer here: French text at its measured 400 tokens per 1,000 characters.
    let text = "é".repeat(1000);
    let fr = d
        .estimate_cost(&EstimateArgs {
            model: "mid".into(),
            prompt: Some(text.clone()),
            messages: None,
            prompt_tokens: None,
            expected_output_tokens: None,
            language: Some("fra".into()),
            audio_seconds: None,
            input: None,
            max_tokens: None,
            n: None,
        })
        .unwrap();
    assert_eq!((fr.prompt_tokens, fr.completion_tokens), (400, 256));
    assert_eq!(fr.counted_by, "measured characters per token (fra)");
    // Nothing measured for `cheap`: a rough 4 characters per token, said so.
    let rough = d
        .estimate_cost(&EstimateArgs {
            model: "cheap".into(),
            prompt: Some("abcdefghi".into()),
            messages: None,
            prompt_tokens: None,
            expected_output_tokens: Some(0),
            language: None,
            audio_seconds: None,
            input: None,
            max_tokens: None,
            n: None,
        })
        .unwrap();
    assert_eq!(
        (rough.prompt_tokens, rough.counted_by.as_str()),
        (3, "4 characters per token")
    );
    assert!(d
        .estimate_cost(&EstimateArgs {
            model: "nope".into(),
            prompt: Some("x".into()),
            messages: None,
            prompt_tokens: None,
            expected_output_tokens: None,
            language: None,
            audio_seconds: None,
            input: None,
            max_tokens: None,
            n: None,
        })
        .unwrap_err()
        .contains("No model `nope`"));
}

#[test]
fn speech_models_are_priced_per_second_and_per_character() {
    let d = data();
    let prices = d.get_prices();
    let ids: Vec<(&str, &str, i64)> = prices
        .audio_prices
        .iter()
        .map(|r| (r.id.as_str(), r.pricing.unit, r.pricing.micros_per_unit))
        .collect();
    assert_eq!(
        ids,
        [("stt", "minute", 600), ("tts", "1M characters", 15_000_000)]
    );
    let args = |model: &str, secs: Option<f64>, input: Option<&str>| EstimateArgs {
        model: model.into(),
        prompt: None,
        messages: None,
        prompt_tokens: None,
        expected_output_tokens: None,
        language: None,
        audio_seconds: secs,
        input: input.map(str::to_owned),
        max_tokens: None,
        n: None,
    };
    // 61.2 s -> 62 billed seconds -> ceil(62 * 600 / 60) = 620 micros.
    let stt = d.estimate_cost(&args("stt", Some(61.2), None)).unwrap();
    assert_eq!((stt.cost_micros.0, stt.audio_seconds), (620, Some(62)));
    // 7 characters at 15 USD per 1M -> ceil(7 * 15 = 105) = 105 micros.
    let tts = d
        .estimate_cost(&args("tts", None, Some("héllo, ")))
        .unwrap();
    assert_eq!((tts.cost_micros.0, tts.input_characters), (105, Some(7)));
    assert!(d
        .estimate_cost(&args("stt", None, None))
        .unwrap_err()
        .contains("audio_seconds"));
    assert!(d
        .estimate_cost(&args("tts", Some(3.0), None))
        .unwrap_err()
        .contains("input"));
}

#[test]
fn language_costs_and_the_reference_answer() {
    let d = data();
    let l = d
        .language_costs(&LanguageArgs {
            model: Some("mid".into()),
            language: Some("FRA".into()),
            ..Default::default()
        })
        .unwrap();
    let langs = l.models[0].languages.as_ref().unwrap();
    assert_eq!(langs.keys().collect::<Vec<_>>(), ["fra"]);
    assert_eq!(langs["fra"].multiplier, 1.6);
    let all = d.language_costs(&LanguageArgs::default()).unwrap();
    assert_eq!(all.models.len(), 3);
    assert_eq!(all.models[0].reason.as_deref(), Some("not measured yet"));
    let hits = d.search_reference(&SearchArgs {
        query: "idempotency".into(),
        limit: None,
    });
    assert_eq!(hits.results[0].id, "idempotency");
    let page = d.get_reference("errors").unwrap();
    assert!(page.markdown.contains("INSUFFICIENT_BALANCE"));
    assert_eq!(page.uri, "tollgate://reference/errors");
    assert!(d.get_reference("nope").unwrap_err().contains("errors"));
    let prices = d.get_prices();
    assert_eq!(prices.prices.len(), 3);
    assert_eq!(prices.prices[0].input_per_million_usd, "0.02");
    assert_eq!(
        d.get_model("mid").unwrap().pricing.output_micros_per_mtok,
        200_000
    );
}

#[test]
fn language_codes_are_iso_639_1_or_3_and_unknown_ones_are_refused() {
    assert_eq!(language_code("ja").unwrap(), "jpn");
    assert_eq!(language_code("JPN").unwrap(), "jpn");
    assert_eq!(language_code("pt-BR").unwrap(), "por");
    assert_eq!(language_code("zh_Hans").unwrap(), "cmn");
    assert_eq!(language_code("zho").unwrap(), "cmn");
    let e = language_code("xx").unwrap_err();
    assert!(
        e.contains("Unknown language `xx`") && e.contains("ja"),
        "{e}"
    );
    let d = data();
    let fr = d
        .language_costs(&LanguageArgs {
            model: Some("mid".into()),
            language: Some("fr".into()),
            ..Default::default()
        })
        .unwrap();
    let langs = fr.models[0].languages.as_ref().unwrap();
    assert_eq!(langs.keys().collect::<Vec<_>>(), ["fra"]);
    assert!(d
        .language_costs(&LanguageArgs {
            model: None,
            language: Some("klingon".into()),
            ..Default::default()
        })
        .is_err());
}

/// Without `language`, the text's language is detected, so French text is counted at French's
/// measured rate (not English's) and Japanese is named.
#[test]
fn the_language_of_the_text_is_detected_when_not_given() {
    let d = data();
    let text =
        "Bonjour, je voudrais savoir combien coûte la traduction de ce long document en anglais.";
    let fr = d
        .estimate_cost(&EstimateArgs {
            model: "mid".into(),
            prompt: Some(text.into()),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(
        (fr.language.as_deref(), fr.language_detected),
        (Some("fra"), true)
    );
    assert_eq!(fr.counted_by, "measured characters per token (fra)");
    assert_eq!(fr.language_multiplier, Some(1.6));
    let ja = d
        .estimate_cost(&EstimateArgs {
            model: "cheap".into(),
            prompt: Some("東京の天気はどうですか。明日は雨が降るでしょうか。".into()),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(ja.language.as_deref(), Some("jpn"));
    // whatlang names Arabic by its macrolanguage; the measured code is Standard Arabic's.
    let ar = d
        .estimate_cost(&EstimateArgs {
            model: "cheap".into(),
            prompt: Some(
                "مرحبا، أريد أن أعرف كم تكلفة ترجمة هذه الوثيقة الطويلة إلى اللغة الإنجليزية."
                    .into(),
            ),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(ar.language.as_deref(), Some("arb"));
    let given = d
        .estimate_cost(&EstimateArgs {
            model: "mid".into(),
            prompt: Some(text.into()),
            language: Some("en".into()),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(
        (given.language.as_deref(), given.language_detected),
        (Some("eng"), false)
    );
}

/// The hold a request reserves (what a 402 is measured against) and the context check.
#[test]
fn estimates_report_the_hold_and_whether_the_prompt_fits() {
    let d = data();
    let pricing = d.catalog.get("cheap").unwrap().pricing;
    let est = |prompt: u64, max_tokens: Option<u64>| {
        d.estimate_cost(&EstimateArgs {
            model: "cheap".into(),
            prompt_tokens: Some(prompt),
            expected_output_tokens: Some(10),
            max_tokens,
            ..Default::default()
        })
        .unwrap()
    };
    let e = est(1000, Some(100));
    assert_eq!(e.context_length, 2048);
    assert!(e.fits_context && e.warning.is_none());
    assert_eq!(e.hold_micros, billing::hold_micros(&pricing, 1000, 100));
    // Without max_tokens the hold covers the rest of the context.
    assert_eq!(
        est(1000, None).hold_micros,
        billing::hold_micros(&pricing, 1000, 1048)
    );
    let over = est(5000, None);
    assert!(!over.fits_context);
    assert!(over.warning.unwrap().contains("context_length_exceeded"));
    assert!(!est(2000, Some(100)).fits_context);
    // Without max_tokens a request near the end of the context is served, its output cut.
    let cut = est(2040, None);
    assert!(cut.fits_context, "{:?}", cut.warning);
    assert!(cut.warning.unwrap().contains("Only 8 output tokens"));
    assert_eq!(cut.completion_tokens, 8);
    // n choices: the prompt once, the output and the hold's output part per choice.
    let two = d
        .estimate_cost(&EstimateArgs {
            model: "cheap".into(),
            prompt_tokens: Some(1000),
            expected_output_tokens: Some(10),
            max_tokens: Some(100),
            n: Some(2),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(two.completion_tokens, 20);
    assert_eq!(two.cost_micros, billing::cost_micros(&pricing, 1000, 0, 20));
    assert_eq!(two.hold_micros, billing::hold_micros(&pricing, 1000, 200));
    for bad in [
        EstimateArgs {
            n: Some(9),
            ..Default::default()
        },
        EstimateArgs {
            max_tokens: Some(0),
            ..Default::default()
        },
    ] {
        let bad = EstimateArgs {
            model: "cheap".into(),
            prompt_tokens: Some(1),
            ..bad
        };
        assert!(d.estimate_cost(&bad).is_err());
    }
}

#[test]
fn list_models_says_whether_each_model_is_servable_here() {
    let d = data();
    let all = d.list_models(&ListModelsArgs::default()).unwrap();
    assert!(all.models.iter().all(|m| !m.available));
    assert_eq!(
        all.models[0].unavailable_reason.as_deref(),
        Some("no weights on this server")
    );
}

/// Optional arguments are plain optional properties (one type, not `[T, "null"]`), so clients
/// that build arguments from the schema send numbers and booleans as such.
#[test]
fn optional_arguments_are_not_nullable() {
    fn schema<T: schemars::JsonSchema>() -> serde_json::Value {
        schemars::generate::SchemaSettings::draft2020_12()
            .into_generator()
            .into_root_schema_for::<T>()
            .to_value()
    }
    for s in [
        schema::<ListModelsArgs>(),
        schema::<EstimateArgs>(),
        schema::<LanguageArgs>(),
        schema::<SearchArgs>(),
    ] {
        let text = s.to_string();
        assert!(
            !text.contains("\"null\"") && !text.contains("null]") && !text.contains("null,"),
            "{text}"
        );
        assert!(
            s["properties"].as_object().is_some_and(|p| !p.is_empty()),
            "{text}"
        );
    }
    let e = schema::<EstimateArgs>();
    assert_eq!(e["properties"]["prompt_tokens"]["type"], "integer");
    assert_eq!(e["properties"]["audio_seconds"]["type"], "number");
    assert_eq!(
        schema::<ListModelsArgs>()["properties"]["commercial_use"]["type"],
        "boolean"
    );
}

/// `language_costs` pages through the catalogue: a default page, `next_offset` until the end.
#[test]
fn language_costs_are_paged() {
    let d = data();
    let first = d
        .language_costs(&LanguageArgs {
            limit: Some(2),
            ..Default::default()
        })
        .unwrap();
    let ids: Vec<&str> = first.models.iter().map(|m| m.model.as_str()).collect();
    assert_eq!(
        (ids, first.total, first.next_offset),
        (vec!["cheap", "mid"], 3, Some(2))
    );
    let last = d
        .language_costs(&LanguageArgs {
            limit: Some(2),
            offset: first.next_offset,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(last.models.len(), 1);
    assert_eq!(
        (last.models[0].model.as_str(), last.next_offset),
        ("nc", None)
    );
}

/// Every origin names its port (`:*` for a bare host), so rmcp has no portless entry to warn
/// about at start-up and the meaning cannot change under a future rmcp.
#[test]
fn allowed_origins_name_their_ports() {
    let hosts = [
        "localhost".to_string(),
        "127.0.0.1:8080".into(),
        "::1".into(),
    ];
    assert_eq!(
        super::allowed_origins(&hosts),
        [
            "http://localhost:*",
            "https://localhost:*",
            "http://127.0.0.1:8080",
            "https://127.0.0.1:8080",
            "http://[::1]:*",
            "https://[::1]:*",
        ]
    );
}
