//! Published chat templates with tool support (Qwen2.5, Qwen3, Hermes 2 Pro, Llama 3.1/3.2/3.3,
//! Mistral Nemo, Command R7B; from llama.cpp's `models/templates` in the `llama-cpp-python`
//! 0.3.36 sdist) render one tool conversation (system, user, an assistant tool call, the `tool`
//! result, an answer, a user turn) exactly as `transformers`' `apply_chat_template` does:
//! `tools`, arguments as objects, `tojson` with Python's separators and no HTML escaping, and
//! `strftime_now`. The expected texts are in `tests/fixtures/templates`, made by
//! `scripts/fixtures/template-fixtures.py`.

use serde_json::Value;
use tollgate::engine::text::template::ChatTemplate;
use tollgate::engine::{ChatMessage, Role, ToolCall, ToolSpec};

fn fixtures() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/templates")
}

fn role(r: &str) -> Role {
    match r {
        "system" => Role::System,
        "user" => Role::User,
        "assistant" => Role::Assistant,
        "tool" => Role::Tool,
        other => panic!("fixture role {other}"),
    }
}

fn message(m: &Value) -> ChatMessage {
    let calls = m["tool_calls"].as_array().into_iter().flatten();
    ChatMessage {
        tool_calls: calls
            .map(|c| ToolCall {
                id: c["id"].as_str().unwrap().to_owned(),
                name: c["function"]["name"].as_str().unwrap().to_owned(),
                arguments: c["function"]["arguments"].clone(),
            })
            .collect(),
        tool_call_id: m["tool_call_id"].as_str().map(str::to_owned),
        ..ChatMessage::text(
            role(m["role"].as_str().unwrap()),
            m["content"].as_str().unwrap_or(""),
        )
    }
}

fn tool(t: &Value) -> ToolSpec {
    let f = &t["function"];
    ToolSpec {
        name: f["name"].as_str().unwrap().to_owned(),
        description: f["description"].as_str().map(str::to_owned),
        parameters: f["parameters"].clone(),
    }
}

#[test]
fn tool_conversations_render_as_transformers_does() {
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("manifest.json")).unwrap())
            .unwrap();
    let messages: Vec<ChatMessage> = manifest["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(message)
        .collect();
    let tools: Vec<ToolSpec> = manifest["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(tool)
        .collect();
    let now = chrono::NaiveDateTime::parse_from_str(
        manifest["date"].as_str().unwrap(),
        "%Y-%m-%dT%H:%M:%S",
    )
    .unwrap();
    let entries = manifest["templates"].as_array().unwrap();
    assert!(entries.len() >= 8, "{} fixtures", entries.len());
    let mut failures = Vec::new();
    for e in entries {
        let name = e["name"].as_str().unwrap();
        let text = std::fs::read_to_string(fixtures().join(format!("{name}.jinja"))).unwrap();
        let want = std::fs::read_to_string(fixtures().join(format!("{name}.expected"))).unwrap();
        let t = ChatTemplate::new(Some(&text), "fixture").unwrap();
        let got = t.render_at(
            &messages,
            &tools,
            e["bos_token"].as_str().unwrap(),
            e["eos_token"].as_str().unwrap(),
            now,
        );
        match got {
            Ok(got) if got == want => {}
            Ok(got) => {
                let at = got
                    .bytes()
                    .zip(want.bytes())
                    .position(|(a, b)| a != b)
                    .unwrap_or(got.len().min(want.len()));
                let lo = at.saturating_sub(60);
                failures.push(format!(
                    "{name}: differs at byte {at}\n  got:  {:?}\n  want: {:?}",
                    got.get(lo..(at + 60).min(got.len())).unwrap_or(""),
                    want.get(lo..(at + 60).min(want.len())).unwrap_or("")
                ));
            }
            Err(err) => failures.push(format!("{name}: {err}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
