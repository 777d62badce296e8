//! How a stored value keeps its document's JSON. The core builds the JSON
//! ([`json::document`](crate::json::document)); a codec writes it down. The extension
//! keeps PostgreSQL's binary `jsonb`, built and patched by PostgreSQL's own functions, so
//! that a read hands it to the operators as it is; the core's tests and tools keep text.

use serde_json::Value as Json;

use crate::format::{JsonLayout, KeptJson, KeptJsonBuf};
use crate::json_edit::JsonEdit;
use crate::Error;

/// Writes the JSON down in one [`JsonLayout`], reads it back, and patches it.
pub trait JsonCodec: Sync {
    fn layout(&self) -> JsonLayout;

    /// The JSON's bytes in this layout.
    fn encode(&self, json: &Json) -> Result<Vec<u8>, Error>;

    /// JSON bytes in this layout, read back.
    fn decode(&self, raw: &[u8]) -> Result<Json, Error>;

    /// The JSON with `edits` made in order; `None` when one of them does not fit it.
    fn patch(&self, raw: &[u8], edits: &[JsonEdit]) -> Result<Option<Vec<u8>>, Error> {
        let mut json = self.decode(raw)?;
        if !edits.iter().all(|edit| edit.apply(&mut json)) {
            return Ok(None);
        }
        self.encode(&json).map(Some)
    }
}

impl std::fmt::Debug for dyn JsonCodec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "JsonCodec({:?})", self.layout())
    }
}

/// JSON kept as UTF-8 text: what format version 2 kept, and what the core keeps without
/// PostgreSQL.
pub struct TextJson;

impl JsonCodec for TextJson {
    fn layout(&self) -> JsonLayout {
        JsonLayout::Text
    }

    fn encode(&self, json: &Json) -> Result<Vec<u8>, Error> {
        Ok(json.to_string().into_bytes())
    }

    fn decode(&self, raw: &[u8]) -> Result<Json, Error> {
        serde_json::from_slice(raw)
            .map_err(|err| Error::CorruptStoredValue(format!("kept JSON does not parse: {err}")))
    }
}

/// The codec that reads `layout`: `codec` when it writes that layout; text needs none.
fn reader(layout: JsonLayout, codec: &'static dyn JsonCodec) -> Option<&'static dyn JsonCodec> {
    match layout {
        _ if codec.layout() == layout => Some(codec),
        JsonLayout::Text => Some(&TextJson),
        JsonLayout::Jsonb => None,
    }
}

/// `json` written down by `codec`, compressed when that pays.
pub fn keep(json: &Json, codec: &dyn JsonCodec) -> Result<KeptJsonBuf, Error> {
    Ok(KeptJsonBuf::new(codec.layout(), codec.encode(json)?))
}

/// The kept JSON read back.
pub fn decode(kept: &KeptJson<'_>, codec: &'static dyn JsonCodec) -> Result<Json, Error> {
    let reader = reader(kept.layout, codec).ok_or_else(|| {
        Error::CorruptStoredValue(format!(
            "kept JSON in the {:?} layout cannot be read here",
            kept.layout
        ))
    })?;
    reader.decode(&kept.raw()?)
}

/// The kept JSON with `edits` made, written by `codec` (a value of an earlier layout moves
/// to `codec`'s); `None` when it cannot be patched (an edit does not fit it, or a layout
/// this build reads only through a load), and the caller must load.
pub fn patched(
    kept: &KeptJson<'_>,
    edits: &[JsonEdit],
    codec: &'static dyn JsonCodec,
) -> Result<Option<KeptJsonBuf>, Error> {
    let raw = kept.raw()?;
    let patched = match reader(kept.layout, codec) {
        Some(reader) if reader.layout() == codec.layout() => reader.patch(&raw, edits)?,
        Some(reader) => match reader.patch(&raw, edits)? {
            Some(text) => Some(codec.encode(&reader.decode(&text)?)?),
            None => None,
        },
        None => None,
    };
    Ok(patched.map(|raw| KeptJsonBuf::new(codec.layout(), raw)))
}
