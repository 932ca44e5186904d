//! One watch event, a JSON line `{"type": …, "object": …}` as a recorded
//! trace holds it (`proxyd replay`'s input: the watch's event types, plus
//! `SYNC`), into an [`Event`].
//!
//! The fast path decodes the whole line in one pass, borrowing strings, into
//! an EndpointSlice-shaped object (a Service fits too: its `spec` is kept as
//! raw text). Only when that fails does the slow path look closer, to tell a
//! malformed line (an error) from an object of another kind whose fields do
//! not fit an EndpointSlice (skipped or tracked, not an error).

use serde::Deserialize;
use serde_json::value::RawValue;

use super::{KindAndMeta, Str, WireObject};

/// What a watch event does to its object.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Action {
    /// `ADDED`.
    Added,
    /// `MODIFIED`.
    Modified,
    /// `DELETED`.
    Deleted,
}

/// One decoded line.
#[derive(Debug)]
#[allow(
    clippy::large_enum_variant,
    reason = "lives for one line and is moved once; boxing would allocate per event on the hot path"
)]
pub enum Event<'a> {
    /// `SYNC` (a trace's own type): apply the pending changes.
    Sync,
    /// `BOOKMARK`: ignored.
    Bookmark,
    /// `ADDED`/`MODIFIED`/`DELETED` of an object.
    Object(Action, WireObject<'a>),
}

/// Why a line is not a usable watch event (the caller adds the line number).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DecodeError(pub String);

#[derive(Deserialize)]
struct FastLine<'a> {
    #[serde(rename = "type", borrow, default)]
    ty: Option<Str<'a>>,
    #[serde(borrow, default)]
    object: Option<WireObject<'a>>,
}

#[derive(Deserialize)]
struct RawLine<'a> {
    #[serde(rename = "type", borrow, default)]
    ty: Option<Str<'a>>,
    #[serde(borrow, default)]
    object: Option<&'a RawValue>,
}

fn action(ty: &str) -> Result<Option<Action>, DecodeError> {
    match ty {
        "ADDED" => Ok(Some(Action::Added)),
        "MODIFIED" => Ok(Some(Action::Modified)),
        "DELETED" => Ok(Some(Action::Deleted)),
        "SYNC" | "BOOKMARK" => Ok(None),
        "" => Err(DecodeError("missing event type".into())),
        other => Err(DecodeError(format!("unknown event type {other:?}"))),
    }
}

/// Decodes one line (already trimmed, not empty).
pub fn decode_line(line: &[u8]) -> Result<Event<'_>, DecodeError> {
    // Validating UTF-8 once per line is much cheaper than per string.
    let line = std::str::from_utf8(line).map_err(|e| DecodeError(format!("not a watch event: {e}")))?;
    match serde_json::from_str::<FastLine<'_>>(line) {
        Ok(ev) => {
            let ty = ev.ty.as_deref().unwrap_or_default();
            match (action(ty)?, ev.object) {
                (None, _) if ty == "SYNC" => Ok(Event::Sync),
                (None, _) => Ok(Event::Bookmark),
                (Some(a), Some(obj)) => Ok(Event::Object(a, obj)),
                (Some(_), None) => Err(DecodeError(format!("{ty} event without an object"))),
            }
        }
        Err(fast) => slow_path(line, fast),
    }
}

fn slow_path(line: &str, fast: serde_json::Error) -> Result<Event<'_>, DecodeError> {
    let raw: RawLine<'_> = serde_json::from_str(line).map_err(|e| DecodeError(format!("not a watch event: {e}")))?;
    let ty = raw.ty.as_deref().unwrap_or_default();
    let Some(act) = action(ty)? else {
        return Ok(if ty == "SYNC" { Event::Sync } else { Event::Bookmark });
    };
    let Some(object) = raw.object else {
        return Err(DecodeError(format!("{ty} event without an object")));
    };
    let km: KindAndMeta<'_> =
        serde_json::from_str(object.get()).map_err(|e| DecodeError(format!("object is not a JSON object: {e}")))?;
    if km.kind.as_deref() == Some("EndpointSlice") {
        return Err(DecodeError(format!("invalid EndpointSlice: {fast}")));
    }
    Ok(Event::Object(act, km.into_object()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(line: &str) -> String {
        match decode_line(line.as_bytes()) {
            Err(e) => e.0,
            Ok(ev) => panic!("{line}: expected an error, got {ev:?}"),
        }
    }

    #[test]
    fn good_lines() {
        assert!(matches!(decode_line(br#"{"type":"SYNC"}"#), Ok(Event::Sync)));
        assert!(matches!(
            decode_line(br#"{"type":"BOOKMARK","object":{"kind":"EndpointSlice","metadata":{"resourceVersion":"5"}}}"#),
            Ok(Event::Bookmark)
        ));
        assert!(matches!(
            decode_line(br#"{"type":"SYNC","object":{"kind":"EndpointSlice","ports":"x"}}"#),
            Ok(Event::Sync)
        ));
        let Ok(Event::Object(Action::Deleted, o)) = decode_line(
            br#"{"type":"DELETED","object":{"kind":"EndpointSlice","metadata":{"name":"a","namespace":"b"}}}"#,
        ) else {
            panic!()
        };
        assert_eq!(o.kind(), "EndpointSlice");
    }

    #[test]
    fn odd_services_and_other_kinds_are_objects_not_errors() {
        let Ok(Event::Object(Action::Added, o)) = decode_line(
            br#"{"type":"ADDED","object":{"kind":"Service","metadata":{"name":"s","namespace":"n","labels":{"a":1}},"ports":"x"}}"#,
        ) else {
            panic!()
        };
        assert_eq!(o.kind(), "Service");
        assert!(o.metadata.is_none(), "metadata that does not fit is dropped");
        let Ok(Event::Object(_, o)) = decode_line(br#"{"type":"ADDED","object":{"kind":"Endpoints","subsets":[]}}"#)
        else {
            panic!()
        };
        assert_eq!(o.kind(), "Endpoints");
    }

    #[test]
    fn bad_lines_are_errors() {
        assert!(err(r#"{"type":"ADDED","object":"#).starts_with("not a watch event"));
        assert!(err("[1,2]").starts_with("not a watch event"));
        assert_eq!(err(r#"{"object":{}}"#), "missing event type");
        assert_eq!(
            err(r#"{"type":"ERROR","object":{"kind":"Status"}}"#),
            "unknown event type \"ERROR\""
        );
        assert_eq!(err(r#"{"type":"ADDED"}"#), "ADDED event without an object");
        assert_eq!(
            err(r#"{"type":"MODIFIED","object":null}"#),
            "MODIFIED event without an object"
        );
        assert!(err(r#"{"type":"ADDED","object":[1]}"#).starts_with("object is not a JSON object"));
        assert!(
            err(r#"{"type":"ADDED","object":{"kind":"EndpointSlice","ports":[{"port":"x"}]}}"#)
                .starts_with("invalid EndpointSlice")
        );
        assert!(err(r#"{"type":5}"#).starts_with("not a watch event"));
        assert!(err("{\"type\":\"SYNC\"} junk").starts_with("not a watch event"));
        assert!(err("\u{0}").starts_with("not a watch event"));
    }

    #[test]
    fn invalid_utf8_is_an_error_not_a_panic() {
        assert!(decode_line(b"{\"type\":\"SY\xffNC\"}").is_err());
    }
}
