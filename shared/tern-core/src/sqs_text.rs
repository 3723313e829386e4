//! Text that may go into an SQS message: bodies and message attribute values.
//!
//! SQS refuses a message whose body or attribute values hold a character outside
//! `#x9 | #xA | #xD | #x20-#xD7FF | #xE000-#xFFFD | #x10000-#x10FFFF` (the SQS API
//! reference, `SendMessage`, "MessageBody"; the same rule for string attribute values):
//! the whole `SendMessage` fails with `InvalidMessageContents`. A receiver controls the
//! text of a `Location` header, an error detail and a response excerpt, so every such text
//! Tern copies into a queue message (or a log field) passes through [`clean`] first, and
//! every delivery-message body through [`escape_json`].

use std::borrow::Cow;

/// Most bytes of one receiver-controlled text (an error detail, a `Location`) kept in a
/// queue message or a log field: 1,024 bytes. Large enough to read, small enough that ten
/// of them never crowd a 256 KiB event out of a 1 MiB SQS message.
pub const MAX_TEXT_BYTES: usize = 1024;

/// What [`clean`] puts in place of a character SQS refuses.
pub const REPLACEMENT: char = '\u{FFFD}';

/// Marks a text [`clean`] cut short.
pub const CUT_MARK: &str = "…";

/// True when SQS accepts `c` in a message body or attribute value.
pub fn is_allowed(c: char) -> bool {
    matches!(c,
        '\u{9}' | '\u{A}' | '\u{D}'
        | '\u{20}'..='\u{D7FF}'
        | '\u{E000}'..='\u{FFFD}'
        | '\u{10000}'..='\u{10FFFF}')
}

/// True when every character of `text` is one SQS accepts.
pub fn is_clean(text: &str) -> bool {
    text.chars().all(is_allowed)
}

/// `text` with every character SQS refuses replaced by U+FFFD, cut to at most `max_bytes`
/// bytes of UTF-8 (on a character boundary, ending in [`CUT_MARK`] when cut). Borrows when
/// nothing had to change.
pub fn clean(text: &str, max_bytes: usize) -> Cow<'_, str> {
    if text.len() <= max_bytes && is_clean(text) {
        return Cow::Borrowed(text);
    }
    let budget = if text.len() > max_bytes {
        max_bytes.saturating_sub(CUT_MARK.len())
    } else {
        max_bytes
    };
    let mut out = String::with_capacity(budget.min(text.len()) + CUT_MARK.len());
    for c in text.chars() {
        let c = if is_allowed(c) { c } else { REPLACEMENT };
        if out.len() + c.len_utf8() > budget {
            break;
        }
        out.push(c);
    }
    if text.len() > max_bytes {
        out.push_str(CUT_MARK);
    }
    Cow::Owned(out)
}

/// [`clean`] with [`MAX_TEXT_BYTES`], owned: for an optional receiver-controlled text.
pub fn clean_opt(text: Option<&str>) -> Option<String> {
    text.map(|t| clean(t, MAX_TEXT_BYTES).into_owned())
}

/// A JSON text with every character SQS refuses written as a `\uXXXX` escape. Lossless:
/// such characters can only stand inside JSON strings (they are not JSON whitespace), where
/// the escape means the same character, so a parser reads the same value back. (A payload,
/// whose bytes must arrive unchanged, never holds one: [`crate::Payload`] refuses them.)
pub fn escape_json(json: String) -> String {
    if is_clean(&json) {
        return json;
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if is_allowed(c) {
            out.push(c);
        } else {
            // Every refused character is in the Basic Multilingual Plane: one escape.
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_sqs_character_rule() {
        for c in [
            '\t', '\n', '\r', ' ', '\u{D7FF}', '\u{E000}', '\u{FFFD}', '😀',
        ] {
            assert!(is_allowed(c), "{c:?}");
        }
        for c in ['\u{0}', '\u{7}', '\u{1F}', '\u{FFFE}', '\u{FFFF}'] {
            assert!(!is_allowed(c), "{c:?}");
        }
    }

    #[test]
    fn location_ending_in_u_ffff_is_cleaned() {
        let location = "https://example.com/next\u{FFFF}";
        assert_eq!(
            clean(location, MAX_TEXT_BYTES),
            "https://example.com/next\u{FFFD}"
        );
        assert!(matches!(clean("plain", 10), Cow::Borrowed("plain")));
    }

    #[test]
    fn long_text_is_cut_on_a_character_boundary() {
        let text = "é".repeat(2000);
        let out = clean(&text, 101);
        assert!(out.len() <= 101, "{}", out.len());
        assert!(out.ends_with(CUT_MARK));
        assert!(out.trim_end_matches(CUT_MARK).chars().all(|c| c == 'é'));
    }

    #[test]
    fn json_escape_keeps_the_value() {
        let value = serde_json::json!({"error": "bad\u{FFFF}x\u{FFFE}", "n": 1});
        let body = escape_json(serde_json::to_string(&value).unwrap());
        assert!(is_clean(&body), "{body}");
        assert!(
            body.contains("\\uffff") && body.contains("\\ufffe"),
            "{body}"
        );
        let back: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(back, value);
    }

    proptest! {
        #[test]
        fn clean_is_always_sendable_and_bounded(text in any::<String>(), max in 4usize..2048) {
            let out = clean(&text, max);
            prop_assert!(is_clean(&out));
            prop_assert!(out.len() <= max);
            if text.len() <= max && is_clean(&text) {
                prop_assert_eq!(out.as_ref(), text.as_str());
            }
        }

        #[test]
        fn escaped_json_is_sendable_and_reads_back(text in any::<String>()) {
            let value = serde_json::json!({ "text": text });
            let body = escape_json(serde_json::to_string(&value).unwrap());
            prop_assert!(is_clean(&body));
            let back: serde_json::Value = serde_json::from_str(&body).unwrap();
            prop_assert_eq!(back, value);
        }
    }
}
