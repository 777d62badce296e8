//! The document's JSON kept as PostgreSQL's binary `jsonb`: built, read back and patched by
//! PostgreSQL's own functions (`jsonb_in`, `jsonb_out`, `jsonb_set`, `jsonb_insert`,
//! `jsonb_delete_path`), so that the `jsonb` cast hands the kept bytes to the operators as
//! they are, with no parse.
//! The core decides what the JSON is and when it changes (see
//! `pg_automerge_core::kept_json`); this is how it is written down.

use std::ffi::CStr;

use pg_automerge_core::format::{JsonLayout, KeptJson};
use pg_automerge_core::json_edit::{splice_str, JsonEdit, Step};
use pg_automerge_core::kept_json::JsonCodec;
use pg_automerge_core::Error;
use pgrx::{pg_sys, IntoDatum};
use serde_json::Value as Json;

/// The codec of what this extension stores.
pub static JSONB: JsonbCodec = JsonbCodec;

pub struct JsonbCodec;

impl JsonCodec for JsonbCodec {
    fn layout(&self) -> JsonLayout {
        JsonLayout::Jsonb
    }

    fn encode(&self, json: &Json) -> Result<Vec<u8>, Error> {
        let datum = jsonb_from_text(&json.to_string());
        Ok(take_bytes(datum))
    }

    fn decode(&self, raw: &[u8]) -> Result<Json, Error> {
        let datum = jsonb_datum(raw);
        // SAFETY: `jsonb_out` of a jsonb datum returns a palloc'd C string.
        let text = unsafe {
            let cstring = pgrx::direct_function_call_as_datum(pg_sys::jsonb_out, &[Some(datum)])
                .expect("jsonb_out returns a string");
            let text = CStr::from_ptr(cstring.cast_mut_ptr()).to_string_lossy().into_owned();
            pg_sys::pfree(cstring.cast_mut_ptr());
            pg_sys::pfree(datum.cast_mut_ptr());
            text
        };
        serde_json::from_str(&text)
            .map_err(|err| Error::CorruptStoredValue(format!("kept jsonb does not read: {err}")))
    }

    /// Each edit through PostgreSQL's own path functions (`jsonb_set`, `jsonb_insert`,
    /// `jsonb_delete_path`), so that the JSON is never printed or parsed whole; a splice
    /// or an increment reads the one value it changes.
    fn patch(&self, raw: &[u8], edits: &[JsonEdit]) -> Result<Option<Vec<u8>>, Error> {
        let mut datum = jsonb_datum(raw);
        for edit in edits {
            let path = path_datum(edit.path());
            datum = match edit {
                JsonEdit::Set(_, value) => {
                    let value = jsonb_from_text(&value.to_string());
                    call(pg_sys::jsonb_set, datum, &[path, value, true.into_datum().unwrap()])
                }
                JsonEdit::Insert(_, value) => {
                    let value = jsonb_from_text(&value.to_string());
                    call(pg_sys::jsonb_insert, datum, &[path, value, false.into_datum().unwrap()])
                }
                JsonEdit::Remove(_) => call(pg_sys::jsonb_delete_path, datum, &[path]),
                JsonEdit::Splice(_, at, delete, text) => {
                    let found = extract_path(datum, path);
                    let Some(mut string) = found.as_deref().and_then(scalar_string) else {
                        return Ok(None);
                    };
                    if !splice_str(&mut string, *at, *delete, text) {
                        return Ok(None);
                    }
                    let Some(value) = jsonb_of_string(&string) else { return Ok(None) };
                    call(pg_sys::jsonb_set, datum, &[path, value, false.into_datum().unwrap()])
                }
                JsonEdit::Increment(..) => {
                    let Some(found) = extract_path(datum, path) else { return Ok(None) };
                    let mut value = self.decode(&found)?;
                    if !edit.at(&[]).apply(&mut value) {
                        return Ok(None);
                    }
                    let value = jsonb_from_text(&value.to_string());
                    call(pg_sys::jsonb_set, datum, &[path, value, false.into_datum().unwrap()])
                }
            };
        }
        Ok(Some(take_bytes(datum)))
    }
}

// The binary layout of a `jsonb` scalar (PostgreSQL's `jsonb.h`, unchanged since 9.4): a
// one-element array container flagged as a scalar, one entry, then the element's data.
const JB_FSCALAR: u32 = 0x1000_0000;
const JB_FARRAY: u32 = 0x4000_0000;
const JENTRY_TYPEMASK: u32 = 0x7000_0000;
const JENTRY_ISSTRING: u32 = 0x0000_0000;
const JENTRY_HAS_OFF: u32 = 0x8000_0000;
const JENTRY_OFFLENMASK: u32 = 0x0FFF_FFFF;

/// The string a `jsonb` scalar holds, read from its data without printing and parsing it
/// (a long text's splice would otherwise escape and unescape the whole text); `None` for
/// any other value.
fn scalar_string(data: &[u8]) -> Option<String> {
    let word = |at: usize| Some(u32::from_ne_bytes(data.get(at..at + 4)?.try_into().ok()?));
    let (header, entry) = (word(0)?, word(4)?);
    if header != 1 | JB_FSCALAR | JB_FARRAY || entry & JENTRY_TYPEMASK != JENTRY_ISSTRING {
        return None;
    }
    // The first element's entry holds its length, whether or not it is flagged an offset.
    let len = (entry & JENTRY_OFFLENMASK) as usize;
    String::from_utf8(data.get(8..8 + len)?.to_vec()).ok()
}

/// A `jsonb` datum of one string, laid out as `jsonb_in` lays it out; `None` past the
/// largest string `jsonb` holds.
fn jsonb_of_string(string: &str) -> Option<pg_sys::Datum> {
    let len = u32::try_from(string.len()).ok().filter(|len| *len <= JENTRY_OFFLENMASK)?;
    let built: Result<_, Error> = palloc_jsonb(8 + string.len(), |data| {
        data[..4].copy_from_slice(&(1 | JB_FSCALAR | JB_FARRAY).to_ne_bytes());
        data[4..8].copy_from_slice(&(JENTRY_ISSTRING | JENTRY_HAS_OFF | len).to_ne_bytes());
        data[8..].copy_from_slice(string.as_bytes());
        Ok(())
    });
    built.ok()
}

/// The data of the value at `path` in the `jsonb` datum, the one value a splice or an
/// increment reads; `None` when the path is not there.
fn extract_path(datum: pg_sys::Datum, path: pg_sys::Datum) -> Option<Vec<u8>> {
    // SAFETY: a jsonb datum and a text[] path; the result may be null.
    let found = unsafe {
        pgrx::direct_function_call_as_datum(pg_sys::jsonb_extract_path, &[Some(datum), Some(path)])
    };
    found.map(take_bytes)
}

/// A path as the `text[]` that the jsonb path functions take.
fn path_datum(path: &[Step]) -> pg_sys::Datum {
    let steps: Vec<String> = path
        .iter()
        .map(|step| match step {
            Step::Key(key) => key.clone(),
            Step::Index(index) => index.to_string(),
        })
        .collect();
    steps.into_datum().expect("an array is never null")
}

/// A `jsonb` datum in palloc'd memory holding `raw`, the data of a kept `jsonb`.
fn jsonb_datum(raw: &[u8]) -> pg_sys::Datum {
    let copied: Result<_, Error> = palloc_jsonb(raw.len(), |data| {
        data.copy_from_slice(raw);
        Ok(())
    });
    copied.expect("a copy cannot fail")
}

/// The kept `jsonb` as a `jsonb` datum, decompressed straight into palloc'd memory: what
/// the cast returns, with no parse and no Rust heap.
pub fn kept_datum(json: &KeptJson<'_>) -> Result<pg_sys::Datum, Error> {
    palloc_jsonb(json.raw_len, |data| json.decompress_into(data))
}

/// A fresh `jsonb` varlena of `len` data bytes in palloc'd memory, its data written by
/// `fill`.
fn palloc_jsonb(
    len: usize,
    fill: impl FnOnce(&mut [u8]) -> Result<(), Error>,
) -> Result<pg_sys::Datum, Error> {
    // SAFETY: a fresh varlena of the right size, whose data `fill` writes before use.
    unsafe {
        let varlena = pg_sys::palloc(pg_sys::VARHDRSZ + len).cast::<pg_sys::varlena>();
        pgrx::varlena::set_varsize_4b(varlena, (pg_sys::VARHDRSZ + len) as i32);
        let data = std::slice::from_raw_parts_mut(varlena.cast::<u8>().add(pg_sys::VARHDRSZ), len);
        fill(data)?;
        Ok(pg_sys::Datum::from(varlena))
    }
}

/// JSON text parsed by `jsonb_in`, from a NUL-terminated copy in palloc'd memory.
pub fn jsonb_from_text(text: &str) -> pg_sys::Datum {
    let bytes = text.as_bytes();
    // SAFETY: `jsonb_in` reads a NUL-terminated string and returns a jsonb datum.
    unsafe {
        let cstring = pg_sys::palloc(bytes.len() + 1).cast::<u8>();
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), cstring, bytes.len());
        *cstring.add(bytes.len()) = 0;
        let datum = pgrx::direct_function_call_as_datum(
            pg_sys::jsonb_in,
            &[Some(pg_sys::Datum::from(cstring))],
        )
        .expect("jsonb_in returns a value");
        pg_sys::pfree(cstring.cast());
        datum
    }
}

/// `function(json, rest…)`; `json` is freed unless returned (the jsonb functions return
/// their input as it is when they change nothing).
fn call(
    function: unsafe fn(pg_sys::FunctionCallInfo) -> pg_sys::Datum,
    json: pg_sys::Datum,
    rest: &[pg_sys::Datum],
) -> pg_sys::Datum {
    let args: Vec<Option<pg_sys::Datum>> =
        std::iter::once(json).chain(rest.iter().copied()).map(Some).collect();
    // SAFETY: valid datums of the types `function` takes; none is null.
    unsafe {
        let result = pgrx::direct_function_call_as_datum(function, &args)
            .expect("jsonb functions of non-null arguments return a value");
        if result != json {
            pg_sys::pfree(json.cast_mut_ptr());
        }
        result
    }
}

/// The data of a `jsonb` datum, copied out; the datum is freed.
fn take_bytes(datum: pg_sys::Datum) -> Vec<u8> {
    // SAFETY: a non-null, untoasted jsonb datum that this module made.
    unsafe {
        let varlena: *mut pg_sys::varlena = datum.cast_mut_ptr();
        let bytes = pgrx::varlena::varlena_to_byte_slice(varlena).to_vec();
        pg_sys::pfree(varlena.cast());
        bytes
    }
}

#[cfg(any(test, feature = "pg_test"))]
#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use super::{jsonb_from_text, jsonb_of_string, scalar_string, take_bytes};

    /// The scalar strings a splice reads and writes are laid out as `jsonb_in` lays them
    /// out, escapes and characters outside ASCII included, and nothing else reads as one.
    #[pg_test]
    fn scalar_strings_are_laid_out_as_jsonb_in_lays_them_out() {
        for string in ["", "plain", "quote \" backslash \\ newline \n", "Ship 🚀 plän", "\u{fffc}"]
        {
            let quoted = serde_json::to_string(string).unwrap();
            let from_text = take_bytes(jsonb_from_text(&quoted));
            assert_eq!(take_bytes(jsonb_of_string(string).unwrap()), from_text, "{quoted}");
            assert_eq!(scalar_string(&from_text).as_deref(), Some(string));
        }
        for other in ["1", "true", "null", "[\"a\"]", "{\"a\": \"b\"}"] {
            assert_eq!(scalar_string(&take_bytes(jsonb_from_text(other))), None, "{other}");
        }
        assert_eq!(scalar_string(&[1, 0]), None);
    }
}
