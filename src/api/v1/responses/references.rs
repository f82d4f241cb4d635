//! `item_reference` input items (`{"type": "item_reference", "id": "msg_..."}`), which the
//! Vercel AI SDK sends for the earlier turns of a conversation whose responses were stored:
//! each is replaced by the output item it names, read from this account's stored responses,
//! before the body is parsed. An output item's id names its response and place
//! (`output::item_source`), so one stored response is read per response referenced.
//!
//! A reference to an item of another account, an expired or deleted response, or an id
//! tollgate did not make is 404 `item_not_found` naming `input[i]`; nothing is charged.

use std::collections::HashMap;

use axum::body::Bytes;
use serde_json::Value;

use super::output::item_source;
use crate::api::shared::error::{ApiError, FieldError};
use crate::api::shared::state::AppState;
use crate::ids::AccountId;

/// `body` with every `item_reference` input item replaced by the stored item it names; the
/// body unchanged (not re-serialized) when it has none.
///
/// # Errors
/// 404 `item_not_found`; 422 for a reference without a string `id`; ledger errors (503).
pub(super) async fn resolve(
    state: &AppState,
    body: Bytes,
    account: AccountId,
) -> Result<Bytes, ApiError> {
    // Most bodies have no reference: skip the parse (the request parser reads the body anyway).
    const MARK: &[u8] = b"item_reference";
    if !body.windows(MARK.len()).any(|w| w == MARK) {
        return Ok(body);
    }
    let Ok(mut value) = serde_json::from_slice::<Value>(&body) else {
        return Ok(body); // The parser reports the syntax error.
    };
    let Some(items) = value.get_mut("input").and_then(Value::as_array_mut) else {
        return Ok(body);
    };
    if !items.iter().any(is_reference) {
        return Ok(body);
    }
    let mut outputs: HashMap<String, Option<Vec<Value>>> = HashMap::new();
    for (j, item) in items.iter_mut().enumerate() {
        if !is_reference(item) {
            continue;
        }
        let Some(id) = item.get("id").and_then(Value::as_str).map(str::to_owned) else {
            return Err(ApiError::Validation(vec![FieldError {
                param: format!("input[{j}].id"),
                message: "is required: the id of an output item of a stored response".into(),
            }]));
        };
        let missing = || ApiError::ItemNotFound {
            id: id.clone(),
            param: format!("input[{j}]"),
        };
        let (response, index) = item_source(&id).ok_or_else(missing)?;
        if !outputs.contains_key(&response) {
            let stored = output_of(state, &response, account).await?;
            outputs.insert(response.clone(), stored);
        }
        let found = outputs
            .get(&response)
            .and_then(Option::as_ref)
            .and_then(|o| o.get(index))
            .filter(|o| o["id"] == id.as_str())
            .ok_or_else(missing)?;
        *item = found.clone();
    }
    Ok(Bytes::from(value.to_string()))
}

fn is_reference(item: &Value) -> bool {
    item.get("type").and_then(Value::as_str) == Some("item_reference")
}

/// The `output` items of `account`'s stored response `id`, if it has one.
async fn output_of(
    state: &AppState,
    id: &str,
    account: AccountId,
) -> Result<Option<Vec<Value>>, ApiError> {
    let saved = (state.accounts.service)
        .saved_response(id.to_owned(), account)
        .await?;
    Ok(saved.and_then(|s| {
        let object: Value = serde_json::from_str(&s.body).ok()?;
        object["output"].as_array().cloned()
    }))
}
