//! Parsing and validating `POST /v1/chat/completions` bodies.
//!
//! Order of checks: JSON syntax (400 `invalid_json`) -> unknown top-level fields (400
//! `unsupported_parameter`, `param` = the first, `details.unsupported` = all of them) -> every
//! field's type and range (422 with all field errors in `details.errors`) -> what the fields
//! mean together (400 with `param`: tool schemas, tool names, `tool_choice`, `tool_call_id`,
//! `response_format` schemas). `null` counts as absent everywhere, as in OpenAI's API: at the
//! top level and inside messages. Inside a message, fields OpenAI does not define (client
//! metadata such as `provider_specific_fields`) are ignored; the top level stays strict.
//!
//! Before the field checks, `bounds` refuses more tools, or larger or deeper schemas, than a
//! request may have (400 naming the field), so nothing oversized is cloned or compiled.
//!
//! Submodules: `messages` (the conversation), `tools` (`tools`, `tool_choice`,
//! `parallel_tool_calls`, `response_format`, and the legacy `functions` / `function_call`),
//! `sampling` (`top_k`, `min_p`, `repetition_penalty`, `logit_bias`, and the fields accepted
//! only with a value that asks for nothing), `bounds` (the size limits of tools, schemas and
//! metadata).

pub mod bounds;
mod messages;
pub mod sampling;
pub mod size;
mod tools;
pub mod validator;

pub use validator::ImagePart;
use validator::Validator;

use super::codes::Code;
use super::error::ApiError;
use crate::engine::{ChatInput, SamplingParams};

/// The accepted top-level fields; anything else is `unsupported_parameter`.
/// Most choices one request may ask for (`n`).
pub const MAX_CHOICES: u64 = 8;

pub const ACCEPTED_PARAMETERS: [&str; 32] = [
    "model",
    "messages",
    "stream",
    "stream_options",
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "seed",
    "stop",
    "presence_penalty",
    "frequency_penalty",
    "n",
    "user",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "response_format",
    "logprobs",
    "top_logprobs",
    "top_k",
    "min_p",
    "repetition_penalty",
    "logit_bias",
    "functions",
    "function_call",
    "reasoning_effort",
    "store",
    "service_tier",
    "modalities",
    "metadata",
    "prediction",
];

/// The fields a model record lists as `supported_parameters`: the accepted ones less those
/// accepted only as no-ops (`sampling::NO_OP_FIELDS`).
pub static SUPPORTED_PARAMETERS: std::sync::LazyLock<Vec<&'static str>> =
    std::sync::LazyLock::new(|| {
        ACCEPTED_PARAMETERS
            .into_iter()
            .filter(|p| !sampling::NO_OP_FIELDS.iter().any(|(f, _)| f == p))
            .collect()
    });

/// A validated chat request.
#[derive(Debug, Clone)]
pub struct ChatRequest {
    pub model: String,
    /// Messages, tools and the output constraint, for `Engine::prepare`.
    pub input: ChatInput,
    pub images: Vec<ImagePart>,
    pub stream: bool,
    pub include_usage: bool,
    pub sampling: SamplingParams,
    /// `max_completion_tokens` if given, else `max_tokens`, with the name of the field used.
    pub max_tokens: Option<(usize, &'static str)>,
    pub stop: Vec<String>,
    /// `n`: choices to generate, 1 to `MAX_CHOICES`.
    pub n: usize,
    /// Tools came as the deprecated `functions` / `function_call`: the answer names its call
    /// the same way (`message.function_call`, one call, `finish_reason: "function_call"`).
    pub legacy_functions: bool,
}

/// Parse a raw body.
///
/// # Errors
/// `InvalidJson`, `UnsupportedParameter`, `Validation`.
pub fn parse(body: &[u8]) -> Result<ChatRequest, ApiError> {
    let obj = validator::top_level(body, &ACCEPTED_PARAMETERS)?;
    bounds::check_chat(&obj)?;
    let mut v = Validator::new(&obj);
    let model = v.string("model", true).unwrap_or_default();
    if model.is_empty() && !v.errors.iter().any(|e| e.param == "model") {
        v.err("model", "must not be empty");
    }
    let (messages, images) = v.messages();
    let legacy_functions = v.present("functions").is_some();
    let (tools, tool_choice) = v.tools_or_functions();
    let parallel = v.bool("parallel_tool_calls").unwrap_or(true) && !legacy_functions;
    let response_format = v.response_format();
    let stream = v.bool("stream").unwrap_or(false);
    let include_usage = v.stream_options(stream);
    let temperature = v.number("temperature", 0.0, 2.0).unwrap_or(1.0);
    let top_p = v.number("top_p", 0.0, 1.0).unwrap_or(1.0);
    let presence_penalty = v.number("presence_penalty", -2.0, 2.0).unwrap_or(0.0);
    let frequency_penalty = v.number("frequency_penalty", -2.0, 2.0).unwrap_or(0.0);
    let max_tokens = v.integer("max_tokens", 1);
    let max_completion = v.integer("max_completion_tokens", 1);
    let seed = v.seed();
    let n = v.integer("n", 1).unwrap_or(1);
    let stop = v.stop();
    let _ = v.string("user", false);
    let logprobs = v.bool("logprobs").unwrap_or(false);
    let top_logprobs = v.integer("top_logprobs", 0);
    let extra = v.extra_sampling();
    let thinking = v.reasoning_effort();
    let prediction = v.prediction();
    if n > MAX_CHOICES {
        v.err("n", "must be an integer between 1 and 8");
    }
    if top_logprobs.is_some_and(|k| k > 20) {
        v.err("top_logprobs", "must be an integer between 0 and 20");
    }
    v.verdict()?;
    v.no_op_fields()?;
    if top_logprobs.is_some() && !logprobs {
        return Err(ApiError::BadRequest {
            param: Some("top_logprobs".into()),
            code: Code::InvalidValue,
            message: "`top_logprobs` needs `logprobs: true`.".into(),
        });
    }
    messages::check_tool_call_ids(&messages)?;
    let constraint = tools::constraint(&tools, tool_choice, parallel, response_format)?;
    let to_usize = |x: u64| usize::try_from(x).unwrap_or(usize::MAX);
    let max_tokens = match (max_completion, max_tokens) {
        (Some(m), _) => Some((to_usize(m), "max_completion_tokens")),
        (None, Some(m)) => Some((to_usize(m), "max_tokens")),
        (None, None) => None,
    };
    let sampling = SamplingParams {
        temperature: temperature as f32,
        top_p: top_p as f32,
        seed,
        presence_penalty: presence_penalty as f32,
        frequency_penalty: frequency_penalty as f32,
        logprobs: logprobs.then(|| to_usize(top_logprobs.unwrap_or(0))),
        top_k: extra.top_k,
        min_p: extra.min_p,
        repetition_penalty: extra.repetition_penalty,
        logit_bias: extra.logit_bias,
    };
    Ok(ChatRequest {
        model,
        input: ChatInput {
            text: None,
            messages,
            tools,
            constraint,
            thinking,
            // Filled from `images` once the model is known to read them (`text::paid_request`).
            images: Vec::new(),
            prediction,
        },
        images,
        stream,
        include_usage,
        sampling,
        max_tokens,
        stop,
        n: to_usize(n),
        legacy_functions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Role;

    fn err(body: &str) -> ApiError {
        parse(body.as_bytes()).unwrap_err()
    }

    #[test]
    fn malformed_json_unknown_field_and_validation_are_distinct() {
        assert!(matches!(err("{"), ApiError::InvalidJson(_)));
        assert!(
            matches!(err(r#"{"model":"m","messages":[],"best_of":2}"#), ApiError::UnsupportedParameter(p) if p == ["best_of"])
        );
        let ApiError::Validation(errs) = err(r#"{"messages":[],"temperature":3,"stop":[1]}"#)
        else {
            panic!()
        };
        let params: Vec<_> = errs.iter().map(|e| e.param.as_str()).collect();
        assert_eq!(params, ["model", "messages", "temperature", "stop"]);
    }

    #[test]
    fn content_parts_join_text_and_record_images() {
        let r = parse(br#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"b"}]}]}"#).unwrap();
        assert_eq!(r.input.messages[0].content, "a\nb");
        assert_eq!(
            r.images,
            vec![ImagePart {
                message: 0,
                part: 1,
                url: "x".into(),
            }]
        );
        use crate::engine::ContentPart;
        assert_eq!(
            r.input.messages[0].parts,
            [
                ContentPart::Text("a".into()),
                ContentPart::Image,
                ContentPart::Text("b".into())
            ]
        );
    }

    #[test]
    fn a_prediction_is_its_text_and_a_malformed_one_names_the_field() {
        let r = parse(br#"{"model":"m","messages":[{"role":"user","content":"x"}],"prediction":{"type":"content","content":[{"type":"text","text":"a "},{"type":"text","text":"b"}]}}"#).unwrap();
        assert_eq!(r.input.prediction.as_deref(), Some("a b"));
        let r = parse(br#"{"model":"m","messages":[{"role":"user","content":"x"}],"prediction":{"type":"content","content":"fn main() {}"}}"#).unwrap();
        assert_eq!(r.input.prediction.as_deref(), Some("fn main() {}"));
        let ApiError::Validation(errs) = err(
            r#"{"model":"m","messages":[{"role":"user","content":"x"}],"prediction":{"type":"text","content":[1]}}"#,
        ) else {
            panic!()
        };
        let params: Vec<_> = errs.iter().map(|e| e.param.as_str()).collect();
        assert_eq!(params, ["prediction.type", "prediction.content[0]"]);
    }

    #[test]
    fn max_completion_tokens_wins_and_nulls_are_absent() {
        let r = parse(br#"{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":5,"max_completion_tokens":7,"temperature":null}"#).unwrap();
        assert_eq!(r.max_tokens, Some((7, "max_completion_tokens")));
        assert!((r.sampling.temperature - 1.0).abs() < f32::EPSILON);
    }

    #[test]
    fn stream_options_need_stream_and_roles_are_checked() {
        let ApiError::Validation(errs) = err(
            r#"{"model":"m","messages":[{"role":"robot","content":"x"},{"role":"user","content":"x","tool_calls":[]}],"stream_options":{"include_usage":true}}"#,
        ) else {
            panic!()
        };
        let params: Vec<_> = errs.iter().map(|e| e.param.as_str()).collect();
        assert_eq!(
            params,
            [
                "messages[0].role",
                "messages[1].tool_calls",
                "stream_options"
            ]
        );
    }

    #[test]
    fn every_unsupported_parameter_is_listed_and_nulls_are_skipped() {
        let e = err(
            r#"{"model":"m","messages":[{"role":"user","content":"x"}],"best_of":2,"tools":null,"audio":{},"metadata":null}"#,
        );
        assert!(matches!(&e, ApiError::UnsupportedParameter(p) if p == &["best_of", "audio"]));
        let body = serde_json::to_value(e.envelope(None)).unwrap();
        assert_eq!(body["error"]["param"], "best_of");
        assert_eq!(
            body["error"]["details"]["unsupported"],
            serde_json::json!(["best_of", "audio"])
        );
    }

    #[test]
    fn the_sdk_conversation_loop_is_accepted() {
        // What `messages.append(resp.choices[0].message)` and `.model_dump()` send back.
        let r = parse(br#"{"model":"m","tools":null,"tool_choice":null,"messages":[
            {"role":"developer","content":"Be brief.","name":null},
            {"role":"user","content":[{"type":"text","text":"Weather in Paris?"}]},
            {"role":"assistant","content":null,"refusal":null,"annotations":[],"audio":null,"function_call":null,
             "tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"location\": \"Paris\"}"}}],
             "provider_specific_fields":{"x":1}},
            {"role":"tool","tool_call_id":"call_1","content":"18C"},
            {"role":"assistant","content":"It is 18C.","refusal":null,"tool_calls":null}]}"#).unwrap();
        let m = &r.input.messages;
        assert_eq!(m.len(), 5);
        assert_eq!(m[0].role, Role::System);
        assert_eq!(m[2].tool_calls[0].arguments["location"], "Paris");
        assert_eq!(m[3].tool_call_id.as_deref(), Some("call_1"));
        assert!(r.input.constraint.is_none());
    }

    #[test]
    fn tool_and_response_format_errors_name_their_param() {
        let bad = |body: &str| match err(body) {
            ApiError::BadRequest { param, code, .. } => (param.unwrap_or_default(), code.as_str()),
            other => panic!("{other:?}"),
        };
        let msgs = r#""model":"m","messages":[{"role":"user","content":"x"}]"#;
        let tool = |name: &str, params: &str| {
            format!(r#"{{"type":"function","function":{{"name":"{name}","parameters":{params}}}}}"#)
        };
        let ok = tool("f", r#"{"type":"object"}"#);
        assert_eq!(
            bad(&format!(
                r#"{{{msgs},"tools":[{ok},{}]}}"#,
                tool("g", r#"{"type":"nope"}"#)
            )),
            (
                "tools[1].function.parameters".into(),
                "invalid_function_parameters"
            )
        );
        assert_eq!(
            bad(&format!(r#"{{{msgs},"tools":[{ok},{ok}]}}"#)),
            ("tools[1].function.name".into(), "duplicate_tool_name")
        );
        assert_eq!(
            bad(&format!(
                r#"{{{msgs},"tools":[{ok}],"tool_choice":{{"type":"function","function":{{"name":"h"}}}}}}"#
            )),
            ("tool_choice".into(), "invalid_tool_choice")
        );
        assert_eq!(
            bad(
                r#"{"model":"m","messages":[{"role":"user","content":"x"},{"role":"tool","tool_call_id":"call_9","content":"r"}]}"#
            ),
            ("messages[1].tool_call_id".into(), "invalid_tool_call_id")
        );
        assert_eq!(
            bad(&format!(
                r#"{{{msgs},"response_format":{{"type":"json_schema","json_schema":{{"name":"x","schema":{{"type":"object","properties":{{"a":{{"type":"strin"}}}}}}}}}}}}"#
            )),
            (
                "response_format.json_schema.schema".into(),
                "invalid_json_schema"
            )
        );
    }

    #[test]
    fn tools_default_to_auto_and_response_format_to_a_json_constraint() {
        use crate::engine::{OutputConstraint, ToolChoice};
        let r = parse(br#"{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"parallel_tool_calls":false}"#).unwrap();
        assert_eq!(
            r.input.constraint,
            Some(OutputConstraint::Tools {
                choice: ToolChoice::Auto,
                parallel: false,
                answer: None
            })
        );
        let r = parse(br#"{"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object"}}"#).unwrap();
        assert!(matches!(
            r.input.constraint,
            Some(OutputConstraint::Json(_))
        ));
        let r = parse(br#"{"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"text"}}"#).unwrap();
        assert!(r.input.constraint.is_none());
    }

    #[test]
    fn peer_samplers_and_logit_bias_are_read_and_checked() {
        let r = parse(br#"{"model":"m","messages":[{"role":"user","content":"x"}],"top_k":40,"min_p":0.05,"repetition_penalty":1.1,"logit_bias":{"42":-100,"7":2.5}}"#).unwrap();
        assert_eq!(r.sampling.top_k, 40);
        assert!((r.sampling.min_p - 0.05).abs() < 1e-6);
        assert!((r.sampling.repetition_penalty - 1.1).abs() < 1e-6);
        assert_eq!(r.sampling.logit_bias, vec![(42, -100.0), (7, 2.5)]);
        let off = parse(br#"{"model":"m","messages":[{"role":"user","content":"x"}],"top_k":-1}"#)
            .unwrap();
        assert_eq!(off.sampling.top_k, 0);
        assert_eq!(off.sampling.repetition_penalty, 1.0);
        let ApiError::Validation(errs) = err(
            r#"{"model":"m","messages":[{"role":"user","content":"x"}],"top_k":-2,"min_p":2,"repetition_penalty":0,"logit_bias":{"x":1,"5":101}}"#,
        ) else {
            panic!()
        };
        let params: Vec<_> = errs.iter().map(|e| e.param.as_str()).collect();
        assert_eq!(
            params,
            [
                "top_k",
                "min_p",
                "repetition_penalty",
                "logit_bias.x",
                "logit_bias.5"
            ]
        );
        assert!(sampling::check_logit_bias(&[(99, 1.0)], 100).is_ok());
        let e = sampling::check_logit_bias(&[(100, 1.0)], 100).unwrap_err();
        assert_eq!(e.parts().3.as_deref(), Some("logit_bias"));
    }

    #[test]
    fn no_op_values_pass_and_others_name_the_field() {
        let msgs = r#""model":"m","messages":[{"role":"user","content":"x"}]"#;
        parse(format!(r#"{{{msgs},"store":false,"service_tier":"auto","modalities":["text"],"metadata":{{}}}}"#).as_bytes()).unwrap();
        for (field, value) in [
            ("store", "true"),
            ("service_tier", r#""flex""#),
            ("modalities", r#"["text","audio"]"#),
            ("metadata", r#"{"a":"b"}"#),
        ] {
            match err(&format!(r#"{{{msgs},"{field}":{value}}}"#)) {
                ApiError::BadRequest { param, code, .. } => {
                    assert_eq!(param.as_deref(), Some(field));
                    assert_eq!(code, Code::UnsupportedValue);
                }
                other => panic!("{field}: {other:?}"),
            }
        }
    }

    #[test]
    fn legacy_functions_are_tools() {
        use crate::engine::{OutputConstraint, ToolChoice};
        let r = parse(br#"{"model":"m","messages":[{"role":"user","content":"x"}],"functions":[{"name":"f","parameters":{"type":"object"}}],"function_call":{"name":"f"}}"#).unwrap();
        assert_eq!(r.input.tools[0].name, "f");
        assert_eq!(
            r.input.constraint,
            Some(OutputConstraint::Tools {
                choice: ToolChoice::Function("f".into()),
                parallel: false,
                answer: None
            })
        );
        let ApiError::Validation(errs) = err(
            r#"{"model":"m","messages":[{"role":"user","content":"x"}],"functions":[{"name":""}],"tools":[],"function_call":"required"}"#,
        ) else {
            panic!()
        };
        let params: Vec<_> = errs.iter().map(|e| e.param.as_str()).collect();
        assert_eq!(params, ["tools", "functions[0].name", "function_call"]);
    }

    #[test]
    fn unknown_keys_at_any_depth_are_named_by_their_path() {
        let e = err(
            r#"{"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object","schema":{"type":"object"}},"tools":[{"type":"function","function":{"name":"f","foo":1},"bar":2}],"stream":true,"stream_options":{"include_usage":true,"baz":true}}"#,
        );
        let ApiError::UnsupportedParameter(paths) = e else {
            panic!("{e:?}")
        };
        assert_eq!(
            paths,
            [
                "tools[0].bar",
                "tools[0].function.foo",
                "response_format.schema",
                "stream_options.baz"
            ]
        );
        parse(br#"{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"include_usage":true,"include_obfuscation":false}}"#).unwrap();
        match err(
            r#"{"model":"m","messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{}}]}]}"#,
        ) {
            ApiError::BadRequest { param, code, .. } => {
                assert_eq!(param.as_deref(), Some("messages[0].content[0].type"));
                assert_eq!(code, Code::UnsupportedContentPart);
            }
            other => panic!("{other:?}"),
        }
    }
}
