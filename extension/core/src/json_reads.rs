//! The document's JSON as reads return it: the JSON the value keeps, read back, else the
//! JSON of its load ([`json::document`]). The `jsonb` cast reads a value that keeps its
//! JSON as `jsonb` straight from its header in the adapter; these are for the others.

use std::borrow::Cow;

use serde_json::Value as Json;

use crate::format::{self, JsonLayout, StoredValue};
use crate::kept_json::{self, JsonCodec};
use crate::load::load_stored;
use crate::{json, Error};

/// The document as JSON text, for a value that keeps none in `codec`'s layout: kept text
/// as it is, any other kept JSON read back, else from a load.
pub fn json_text<'a>(
    value: &StoredValue<'a>,
    codec: &'static dyn JsonCodec,
) -> Result<Cow<'a, str>, Error> {
    match value.kept.as_ref().and_then(|kept| kept.json) {
        Some(json) if json.layout == JsonLayout::Text => match json.raw()? {
            Cow::Borrowed(raw) => std::str::from_utf8(raw)
                .map(Cow::Borrowed)
                .map_err(|_| Error::CorruptStoredValue("kept JSON is not UTF-8".into())),
            Cow::Owned(raw) => String::from_utf8(raw)
                .map(Cow::Owned)
                .map_err(|_| Error::CorruptStoredValue("kept JSON is not UTF-8".into())),
        },
        Some(json) => Ok(Cow::Owned(kept_json::decode(&json, codec)?.to_string())),
        None => Ok(Cow::Owned(json::document(&load_stored(value)?, None)?.to_string())),
    }
}

/// The JSON a stored value keeps, read back; `None` when it keeps none.
pub fn kept(stored: &[u8], codec: &'static dyn JsonCodec) -> Result<Option<Json>, Error> {
    let json = format::decode(stored)?.kept.and_then(|kept| kept.json);
    json.map(|json| kept_json::decode(&json, codec)).transpose()
}
