//! What one request may ask the server to hold: at most `--max-messages` messages (or
//! Responses input items), `--max-content-parts` content parts over all of them and
//! `--max-prompt-chars` characters of their text. Counted by a streaming pass over the raw
//! body (serde visitors, no JSON tree), before anything is parsed, templated or tokenized, so a
//! refused request costs its body and nothing more. A body this pass cannot read (bad JSON,
//! wrong types) passes here and is refused by the real parse with its usual error.

use std::cell::Cell;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::api::shared::codes::Code;
use crate::api::shared::error::ApiError;
use crate::api::shared::server::HttpLimits;

/// Visitor methods that accept and skip every JSON type a visitor does not look into, so the
/// pass fails only on bad JSON syntax and a counted field of an odd type cannot stop the count.
macro_rules! skip_others {
    ($($kind:ident),*) => { $(skip_others!(@ $kind);)* };
    (@ scalars) => {
        fn visit_bool<E>(self, _: bool) -> Result<(), E> { Ok(()) }
        fn visit_i64<E>(self, _: i64) -> Result<(), E> { Ok(()) }
        fn visit_u64<E>(self, _: u64) -> Result<(), E> { Ok(()) }
        fn visit_f64<E>(self, _: f64) -> Result<(), E> { Ok(()) }
        fn visit_unit<E>(self) -> Result<(), E> { Ok(()) }
    };
    (@ str) => {
        fn visit_str<E>(self, _: &str) -> Result<(), E> { Ok(()) }
    };
    (@ seq) => {
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok(())
        }
    };
    (@ map) => {
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Ok(())
        }
    };
}

/// Check the list under the top-level key `field` (`messages` or `input`) against `limits`.
///
/// # Errors
/// 400 with `param` = `field`: `too_many_messages`, `too_many_content_parts` or
/// `prompt_too_long`, naming the limit.
pub fn check(body: &[u8], field: &'static str, limits: &HttpLimits) -> Result<(), ApiError> {
    let counts = Counts {
        limits,
        messages: Cell::new(0),
        parts: Cell::new(0),
        chars: Cell::new(0),
        exceeded: Cell::new(None),
    };
    let mut de = serde_json::Deserializer::from_slice(body);
    let _ = de.deserialize_map(TopLevel {
        field,
        counts: &counts,
    });
    match counts.exceeded.get() {
        None => Ok(()),
        Some(what) => Err(what.error(field, limits)),
    }
}

/// Which limit a request went over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Exceeded {
    Messages,
    Parts,
    Chars,
}

impl Exceeded {
    fn error(self, field: &'static str, l: &HttpLimits) -> ApiError {
        let (code, message) = match self {
            Self::Messages => (
                Code::TooManyMessages,
                format!("`{field}` may hold at most {} items.", l.max_messages),
            ),
            Self::Parts => (
                Code::TooManyContentParts,
                format!(
                    "`{field}` may hold at most {} content parts in all.",
                    l.max_content_parts
                ),
            ),
            Self::Chars => (
                Code::PromptTooLong,
                format!(
                    "The text in `{field}` may be at most {} characters in all.",
                    l.max_prompt_chars
                ),
            ),
        };
        ApiError::BadRequest {
            param: Some(field.into()),
            code,
            message,
        }
    }
}

/// Running totals; the first limit exceeded stops the pass.
struct Counts<'a> {
    limits: &'a HttpLimits,
    messages: Cell<usize>,
    parts: Cell<usize>,
    chars: Cell<usize>,
    exceeded: Cell<Option<Exceeded>>,
}

impl Counts<'_> {
    /// Add `n` to the total `what` limits; past the limit, record `what` and return the error
    /// that ends the pass.
    fn add<E: serde::de::Error>(&self, what: Exceeded, n: usize) -> Result<(), E> {
        let (total, max) = match what {
            Exceeded::Messages => (&self.messages, self.limits.max_messages),
            Exceeded::Parts => (&self.parts, self.limits.max_content_parts),
            Exceeded::Chars => (&self.chars, self.limits.max_prompt_chars),
        };
        total.set(total.get().saturating_add(n));
        if total.get() > max {
            self.exceeded.set(Some(what));
            return Err(E::custom("request size limit"));
        }
        Ok(())
    }

    fn text<E: serde::de::Error>(&self, s: &str) -> Result<(), E> {
        self.add(Exceeded::Chars, s.chars().count())
    }
}

/// `DeserializeSeed` for visitors that take whatever JSON type comes.
macro_rules! seed_any {
    ($($visitor:ident),*) => {$(
        impl<'de> DeserializeSeed<'de> for $visitor<'_, '_> {
            type Value = ();
            fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
                d.deserialize_any(self)
            }
        }
    )*};
}

seed_any!(List, Item);

/// The top-level object: only `field` is looked into.
struct TopLevel<'c, 'a> {
    field: &'static str,
    counts: &'c Counts<'a>,
}

impl<'de> Visitor<'de> for TopLevel<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if key == self.field {
                map.next_value_seed(List(self.counts, Exceeded::Messages))?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }

    skip_others!(scalars, str, seq);
}

/// `messages` / `input` (each element counted as `Messages`) or a message's `content` (each
/// counted as `Parts`): a list of items, a string (Responses `input`, string content), or one
/// object (looked into as an item).
struct List<'c, 'a>(&'c Counts<'a>, Exceeded);

impl<'de> Visitor<'de> for List<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list or a string")
    }

    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<(), E> {
        self.0.text(s)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(Item(self.0))?.is_some() {
            self.0.add(self.1, 1)?;
        }
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        Item(self.0).visit_map(map)
    }

    skip_others!(scalars);
}

/// One message, input item or content part: its `content` and `text` are counted, the rest
/// skipped.
struct Item<'c, 'a>(&'c Counts<'a>);

impl<'de> Visitor<'de> for Item<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a message")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match key.as_ref() {
                "content" => map.next_value_seed(List(self.0, Exceeded::Parts))?,
                // A part's text (`{type: "text" | "input_text", text}`).
                "text" => map.next_value_seed(Item(self.0))?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }

    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<(), E> {
        self.0.text(s)
    }

    skip_others!(scalars, seq);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> HttpLimits {
        HttpLimits {
            max_messages: 3,
            max_content_parts: 4,
            max_prompt_chars: 20,
            ..HttpLimits::default()
        }
    }

    fn code(body: &str, field: &'static str) -> Option<&'static str> {
        check(body.as_bytes(), field, &limits())
            .err()
            .map(|e| e.parts().2.as_str())
    }

    #[test]
    fn counts_messages_parts_and_characters() {
        let ok = r#"{"model":"m","messages":[{"role":"user","content":"héllo"},
            {"role":"user","content":[{"type":"text","text":"abc"},{"type":"image_url","image_url":{"url":"x"}}]}]}"#;
        assert_eq!(code(ok, "messages"), None);
        let many =
            r#"{"messages":[{"content":"a"},{"content":"b"},{"content":"c"},{"content":"d"}]}"#;
        assert_eq!(code(many, "messages"), Some("too_many_messages"));
        let parts = r#"{"messages":[{"content":[{"text":"a"},{"text":"b"},{"text":"c"}]},{"content":[{"text":"d"},{"text":"e"}]}]}"#;
        assert_eq!(code(parts, "messages"), Some("too_many_content_parts"));
        let long =
            r#"{"messages":[{"content":"0123456789"},{"content":[{"text":"0123456789a"}]}]}"#;
        assert_eq!(code(long, "messages"), Some("prompt_too_long"));
        let e = check(long.as_bytes(), "messages", &limits()).unwrap_err();
        assert_eq!(e.parts().3.as_deref(), Some("messages"));
    }

    #[test]
    fn responses_input_string_and_items_count() {
        assert_eq!(
            code(r#"{"input":"012345678901234567890"}"#, "input"),
            Some("prompt_too_long")
        );
        let items = r#"{"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]},{"type":"function_call_output","output":"x"},{},{}]}"#;
        assert_eq!(code(items, "input"), Some("too_many_messages"));
    }

    #[test]
    fn unreadable_bodies_pass_to_the_real_parse() {
        for body in [
            "",
            "[",
            "{\"messages\": 5}",
            "{\"messages\":[1,true,null]}",
            "nope",
            "[1]",
        ] {
            assert_eq!(code(body, "messages"), None, "{body}");
        }
    }

    #[test]
    fn odd_types_do_not_stop_the_count() {
        let body = r#"{"messages":[{"content":[{"text":5},{"text":[1]},7,"s"]},{"content":{"a":1}},{},{}]}"#;
        assert_eq!(code(body, "messages"), Some("too_many_messages"));
    }

    #[test]
    fn other_fields_are_not_counted() {
        let body = r#"{"tools":[{"content":"0123456789012345678901234"}],"messages":[{"content":"x","name":"0123456789012345678901234"}]}"#;
        assert_eq!(code(body, "messages"), None);
    }
}
