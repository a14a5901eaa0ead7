//! Shaping helpers shared by the tools: bytes to text a model can read (lossily, with a
//! note, never failing), base64, octal modes, signals and timestamps.

use std::time::{Duration, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

use crate::mcp::error::ToolError;

/// Bytes rendered as text: exact when they are UTF-8, lossy (U+FFFD) otherwise.
pub struct Text {
    /// The text.
    pub text: String,
    /// True when invalid UTF-8 sequences were replaced.
    pub lossy: bool,
}

/// Renders `bytes` as text without ever failing.
pub fn lossy_text(bytes: &[u8]) -> Text {
    match String::from_utf8_lossy(bytes) {
        std::borrow::Cow::Borrowed(text) => Text { text: text.to_owned(), lossy: false },
        std::borrow::Cow::Owned(text) => Text { text, lossy: true },
    }
}

/// The note attached to a result when any of its streams, each named with whether it
/// was rendered lossily ([`Text::lossy`]), was not valid UTF-8.
pub fn lossy_note(streams: &[(&str, bool)]) -> Option<String> {
    let lossy: Vec<&str> = streams.iter().filter_map(|&(name, lossy)| lossy.then_some(name)).collect();
    match lossy.as_slice() {
        [] => None,
        [one] => Some(format!(
            "{one} was not valid UTF-8; invalid bytes are shown as U+FFFD. To see the exact \
             bytes, redirect the output to a file and read it with sandbox_files_read"
        )),
        many => Some(format!(
            "{} were not valid UTF-8; invalid bytes are shown as U+FFFD. To see the exact bytes, \
             redirect the output to a file and read it with sandbox_files_read",
            many.join(" and ")
        )),
    }
}

/// Standard base64 of `bytes`.
pub fn to_base64(bytes: &[u8]) -> String {
    BASE64.encode(bytes)
}

/// Decodes standard base64 (whitespace such as line breaks is ignored).
pub fn from_base64(text: &str) -> Result<Vec<u8>, ToolError> {
    let compact: String = text.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    BASE64.decode(compact.as_bytes()).map_err(|source| ToolError::BadBase64 { source })
}

/// `0644`-style rendering of permission bits.
pub fn format_mode(mode: u32) -> String {
    format!("{:04o}", mode & 0o7777)
}

/// Parses a signal name (`TERM`, `SIGTERM`, `term`) or number (`15`).
pub fn parse_signal(text: &str) -> Result<i32, ToolError> {
    crate::signal::parse(text).map_err(|_| ToolError::BadSignal { got: text.to_owned() })
}

/// RFC 3339 rendering (UTC, milliseconds) of a Unix time in milliseconds.
pub fn rfc3339_ms(unix_ms: i64) -> String {
    let Ok(ms) = u64::try_from(unix_ms) else {
        return "1970-01-01T00:00:00.000Z".to_owned();
    };
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

/// A one-line summary of a tool's arguments from its input schema, for the message a
/// model reads when its arguments did not parse: `command (string, required), cwd (string)`.
pub fn schema_signature(schema: &serde_json::Map<String, serde_json::Value>) -> String {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(|r| r.as_array())
        .map(|r| r.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    let Some(properties) = schema.get("properties").and_then(|p| p.as_object()) else {
        return "no arguments".to_owned();
    };
    if properties.is_empty() {
        return "no arguments".to_owned();
    }
    let mut parts: Vec<String> = properties
        .iter()
        .map(|(name, prop)| {
            let kind = json_type(prop);
            if required.contains(&name.as_str()) {
                format!("{name} ({kind}, required)")
            } else {
                format!("{name} ({kind})")
            }
        })
        .collect();
    // Required arguments first, each group in schema order.
    parts.sort_by_key(|part| !part.ends_with(", required)"));
    parts.join(", ")
}

/// The JSON Schema dialect every tool schema declares. Draft-07 is what the TypeScript
/// SDK's validator (Ajv) speaks natively and what the Python SDK 1.x checks cheapest on
/// each result (its metaschema check runs per call); our schemas use nothing newer.
pub const SCHEMA_DIALECT: &str = "http://json-schema.org/draft-07/schema#";

/// The one pass over every tool schema schemars made, so that strict clients read them
/// quietly and validators check them cheaply:
/// - `$schema` becomes draft-07 ([`SCHEMA_DIALECT`]);
/// - `format`s that draft-07 does not define (schemars' `uint32`, `int64`, `ip`...) go:
///   the TypeScript SDK logs each as "unknown format ignored" (`minimum` already bounds
///   the numbers);
/// - an optional property (not `required`) is a plain single-type property: no `"null"`
///   in its `type` or `enum`, no `"default": null`; absent is how it says "not given"
///   (inputs are `Option`s; outputs skip `None`). A required property keeps its null, so
///   the schema never refuses what atoll sends;
/// - doc comments' line breaks are joined, so a model reads each description as one line.
pub fn tidy_schema(schema: &mut serde_json::Map<String, serde_json::Value>) {
    if schema.contains_key("$schema") {
        schema.insert("$schema".to_owned(), SCHEMA_DIALECT.into());
    }
    tidy(schema);
}

fn tidy(schema: &mut serde_json::Map<String, serde_json::Value>) {
    if schema.get("format").is_some_and(|f| !f.as_str().is_some_and(is_standard_format)) {
        schema.remove("format");
    }
    if let Some(serde_json::Value::String(text)) = schema.get_mut("description")
        && text.contains('\n')
    {
        *text = text.split('\n').map(str::trim).collect::<Vec<_>>().join(" ");
    }
    let required: Vec<String> = schema
        .get("required")
        .and_then(|r| r.as_array())
        .map(|r| r.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect())
        .unwrap_or_default();
    if let Some(serde_json::Value::Object(properties)) = schema.get_mut("properties") {
        for (name, property) in properties.iter_mut() {
            if let Some(property) = property.as_object_mut()
                && !required.contains(name)
            {
                drop_null(property);
            }
        }
    }
    for (key, value) in schema.iter_mut() {
        if key == "description" || key == "enum" || key == "required" {
            continue;
        }
        match value {
            serde_json::Value::Object(inner) => tidy(inner),
            serde_json::Value::Array(items) => {
                for item in items.iter_mut().filter_map(|item| item.as_object_mut()) {
                    tidy(item);
                }
            }
            _ => {}
        }
    }
}

/// Makes a nullable property a plain one: `["integer", "null"]` becomes `"integer"`.
fn drop_null(property: &mut serde_json::Map<String, serde_json::Value>) {
    if property.get("default").is_some_and(|d| d.is_null()) {
        property.remove("default");
    }
    if let Some(serde_json::Value::Array(kinds)) = property.get_mut("type") {
        kinds.retain(|k| !k.is_null() && k.as_str() != Some("null"));
        if let [only] = kinds.as_slice() {
            let only = only.clone();
            property.insert("type".to_owned(), only);
        }
    }
    if let Some(serde_json::Value::Array(values)) = property.get_mut("enum") {
        values.retain(|v| !v.is_null());
    }
    // An optional enum or object comes as `anyOf: [{...}, {"type": "null"}]`: the one
    // branch that is not null takes its place (the property's own keys, such as its
    // description, win over the branch's).
    if let Some(serde_json::Value::Array(branches)) = property.get_mut("anyOf") {
        branches.retain(|b| b.get("type").and_then(|t| t.as_str()) != Some("null"));
        if let [serde_json::Value::Object(only)] = branches.as_slice() {
            let only = only.clone();
            property.remove("anyOf");
            for (key, value) in only {
                property.entry(key).or_insert(value);
            }
        }
    }
}

/// The formats JSON Schema draft-07 defines (its section 7.3); anything else is a
/// name a validator does not know.
fn is_standard_format(format: &str) -> bool {
    matches!(
        format,
        "date-time"
            | "date"
            | "time"
            | "email"
            | "idn-email"
            | "hostname"
            | "idn-hostname"
            | "ipv4"
            | "ipv6"
            | "uri"
            | "uri-reference"
            | "iri"
            | "iri-reference"
            | "uri-template"
            | "json-pointer"
            | "relative-json-pointer"
            | "regex"
    )
}

/// A property's type in words, for summaries: `integer`, `string or integer`.
pub(crate) fn json_type(prop: &serde_json::Value) -> String {
    match prop.get("type") {
        Some(serde_json::Value::String(kind)) => kind.clone(),
        Some(serde_json::Value::Array(kinds)) => {
            kinds.iter().filter_map(|k| k.as_str()).filter(|k| *k != "null").collect::<Vec<_>>().join(" or ")
        }
        _ => match prop.get("enum").or_else(|| prop.get("anyOf")) {
            Some(_) => "one of the listed values".to_owned(),
            None => "value".to_owned(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_utf8_becomes_replacement_characters_and_is_flagged() {
        let text = lossy_text(b"ok \xff\xfe end");
        assert!(text.lossy);
        assert_eq!(text.text, "ok \u{fffd}\u{fffd} end");
        let text = lossy_text("héllo".as_bytes());
        assert!(!text.lossy);
        assert_eq!(text.text, "héllo");
    }

    #[test]
    fn the_lossy_note_names_only_the_lossy_streams() {
        assert_eq!(lossy_note(&[("stdout", false), ("stderr", false)]), None);
        let one = lossy_note(&[("stdout", false), ("stderr", true)]).unwrap();
        assert!(one.starts_with("stderr was not valid UTF-8"), "{one}");
        let both = lossy_note(&[("stdout", true), ("stderr", true)]).unwrap();
        assert!(both.starts_with("stdout and stderr were not valid UTF-8"), "{both}");
    }

    #[test]
    fn modes_render_as_four_octal_digits() {
        assert_eq!(format_mode(0o100644), "0644");
    }

    #[test]
    fn signals_by_name_or_number() {
        assert_eq!(parse_signal("TERM").unwrap(), libc::SIGTERM);
        assert_eq!(parse_signal("sigkill").unwrap(), libc::SIGKILL);
        assert_eq!(parse_signal("2").unwrap(), 2);
        assert!(parse_signal("BOOM").is_err());
        assert!(parse_signal("0").is_err());
    }

    #[test]
    fn base64_round_trips_and_tolerates_line_breaks() {
        let encoded = to_base64(b"\x00\x01binary\xff");
        let wrapped = format!("{}\n{}", &encoded[..4], &encoded[4..]);
        assert_eq!(from_base64(&wrapped).unwrap(), b"\x00\x01binary\xff");
        assert!(from_base64("not base64!").is_err());
    }

    #[test]
    fn signatures_put_required_arguments_first() {
        let schema = serde_json::json!({
            "type": "object",
            "properties": {
                "cwd": {"type": ["string", "null"]},
                "command": {"type": "string"},
                "timeout_ms": {"type": ["integer", "null"]}
            },
            "required": ["command"]
        });
        let signature = schema_signature(schema.as_object().unwrap());
        assert_eq!(signature, "command (string, required), cwd (string), timeout_ms (integer)");
        assert_eq!(
            schema_signature(serde_json::json!({"type": "object"}).as_object().unwrap()),
            "no arguments"
        );
    }

    #[test]
    fn descriptions_are_unwrapped_at_any_depth() {
        let mut schema = serde_json::json!({
            "properties": {"path": {"description": "Absolute path of the file; missing parents are\ncreated."}},
            "oneOf": [{"description": "a\nb"}]
        });
        tidy_schema(schema.as_object_mut().unwrap());
        assert_eq!(
            schema["properties"]["path"]["description"],
            "Absolute path of the file; missing parents are created."
        );
        assert_eq!(schema["oneOf"][0]["description"], "a b");
    }

    #[test]
    fn optional_properties_are_single_typed_and_formats_standard() {
        let mut schema = serde_json::json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
                "code": {"type": ["integer", "null"], "format": "int32"},
                "size": {"type": ["integer", "null"], "format": "uint64", "minimum": 0, "default": null},
                "encoding": {"type": ["string", "null"], "enum": ["utf8", "base64", null], "default": null},
                "inner": {"type": ["object", "null"], "properties": {"n": {"type": ["integer", "null"]}}},
                "bind": {"type": "string", "format": "ip"},
                "at": {"type": "string", "format": "date-time"},
                "net": {"anyOf": [{"type": "string", "enum": ["a", "b"], "description": "branch"}, {"type": "null"}], "description": "own"}
            },
            "required": ["code"]
        });
        tidy_schema(schema.as_object_mut().unwrap());
        assert_eq!(
            schema,
            serde_json::json!({
                "$schema": SCHEMA_DIALECT,
                "type": "object",
                "properties": {
                    "code": {"type": ["integer", "null"]},
                    "size": {"type": "integer", "minimum": 0},
                    "encoding": {"type": "string", "enum": ["utf8", "base64"]},
                    "inner": {"type": "object", "properties": {"n": {"type": "integer"}}},
                "bind": {"type": "string"},
                "at": {"type": "string", "format": "date-time"},
                "net": {"type": "string", "enum": ["a", "b"], "description": "own"}
                },
                "required": ["code"]
            })
        );
    }

    #[test]
    fn timestamps_are_rfc3339() {
        assert_eq!(rfc3339_ms(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
    }
}
