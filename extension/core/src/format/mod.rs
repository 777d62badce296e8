//! The stored layout of an `automerge` value.
//!
//! A small header goes in front of the Automerge bytes so that heads, counts and the
//! cost estimate of a load can be read without loading the document, and so that the
//! layout can change in later versions while old values stay readable. All integers
//! are little-endian.
//!
//! Version 3 (written by 0.5.0 and later) orders the sections by who reads them: the
//! header and the actor table (heads, counts, "has these changes") come first, so that
//! such reads fetch one TOAST chunk; then the kept JSON, which `jsonb` reads fetch
//! without the rest; then what only writes need. The type is stored `external` (TOAST
//! never compresses it, so a prefix is fetched chunk by chunk), and the JSON section is
//! compressed here instead, with LZ4, when large.
//!
//! | offset    | size | field                                                    |
//! |-----------|------|----------------------------------------------------------|
//! | 0         | 1    | format version (3)                                       |
//! | 1         | 1    | flags: bit 0 JSON kept, bit 1 it is PostgreSQL's binary  |
//! |           |      | `jsonb` (else UTF-8 text), bit 2 it is LZ4-compressed    |
//! | 2         | 2    | reserved (0)                                             |
//! | 4         | 4    | header length `h`: fixed part and heads                  |
//! | 8         | 8    | number of changes                                        |
//! | 16        | 8    | number of operations                                     |
//! | 24        | 4    | number of heads `n`                                      |
//! | 28        | 8    | largest operation counter                                |
//! | 36        | 4    | changes appended after the last save                     |
//! | 40        | 4    | actor table length `a`                                   |
//! | 44        | 4    | JSON section length `j` (0 when not kept)                |
//! | 48        | 4    | JSON length once decompressed (`j` when not compressed)  |
//! | 52        | 4    | root table length `r`                                    |
//! | 56        | 32·n | the heads (change hashes), sorted                        |
//! | h         | a    | actor table: count (4), then per actor its id's length   |
//! |           |      | (4), the id, its latest change's sequence number (8)     |
//! |           |      | and hash (32), sorted by id                              |
//! | h+a       | j    | the document's JSON, when kept                           |
//! | h+a+j     | r    | root table: count (4), then per root key its length (4)  |
//! |           |      | and UTF-8 bytes, and the operations whose values it      |
//! |           |      | shows: count (4), then per operation its counter (8),    |
//! |           |      | actor id length (4) and actor id; sorted by key          |
//! | h+a+j+r   | rest | payload: an Automerge `save()`, then any change chunks   |
//! |           |      | appended since                                           |
//!
//! Version 2 (0.3.0 and 0.4.0; read, never written): a 52-byte fixed part (as above to
//! offset 40, then `j` at 40, `a` at 44, `r` at 48; flag bit 0 only), the heads at 52,
//! then the JSON as text, the actor table, the root table and the payload.
//!
//! Version 1 (0.1.0 and 0.2.0; read, never written): the first 28 bytes as above with
//! flags 0, the heads at 28, the payload (a `save()`) at `h`.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ops::Range;

use automerge::{ActorId, ChangeHash};

use crate::chunk::AUTOMERGE_MAGIC;
use crate::Error;

mod tables;

pub use tables::encode_root_table;
use tables::{decode_clock, decode_root, encode_clock, read_u32, read_u64, to_u32};

/// The version this build writes. It reads every version up to this one.
pub const FORMAT_VERSION: u8 = 3;

/// How many bytes of a stored value to fetch first: one TOAST chunk (of an 8 kB page),
/// which holds the fixed header, the heads and usually the actor table.
pub const FIRST_FETCH: usize = 1996;

const V1_FIXED_LEN: usize = 28;
const V2_FIXED_LEN: usize = 52;
const FIXED_HEADER_LEN: usize = 56;
const HASH_LEN: usize = 32;
const FLAG_JSON: u8 = 1;
const FLAG_JSONB: u8 = 2;
const FLAG_LZ4: u8 = 4;

/// JSON sections shorter than this are kept uncompressed: TOAST would keep such a value
/// inline too, and a small read should not pay a decompression.
const COMPRESS_FROM: usize = 2048;

/// What the header records about the document in the payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    pub change_count: u64,
    pub op_count: u64,
    /// Sorted, as `Automerge::get_heads` returns them.
    pub heads: Vec<ChangeHash>,
}

/// Each actor's latest change: its sequence number and hash. With it a write can tell
/// that a change is new and follows what the document has, without loading it.
pub type ActorClock = BTreeMap<ActorId, (u64, ChangeHash)>;

/// For each key of the root map, the operations (counter, actor) whose values it shows:
/// one, or several where concurrent writes conflict. With it a write can check that a put
/// on a root key replaces exactly what is there, without loading.
pub type RootOps = BTreeMap<String, Vec<(u64, ActorId)>>;

/// How the kept JSON is written down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonLayout {
    /// UTF-8 JSON text (versions 2 and 3; what the core's tests and tools keep).
    Text,
    /// The data of a PostgreSQL `jsonb` datum (version 3; what the extension keeps), built
    /// and read by PostgreSQL's own functions in the adapter.
    Jsonb,
}

/// The kept JSON as stored, borrowed: possibly compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeptJson<'a> {
    pub layout: JsonLayout,
    /// Its length once decompressed; `bytes.len()` when not compressed.
    pub raw_len: usize,
    compressed: bool,
    bytes: &'a [u8],
}

impl<'a> KeptJson<'a> {
    /// The JSON's bytes, decompressed when stored compressed.
    pub fn raw(&self) -> Result<Cow<'a, [u8]>, Error> {
        if !self.compressed {
            return Ok(Cow::Borrowed(self.bytes));
        }
        let mut raw = vec![0; self.raw_len];
        self.decompress_into(&mut raw)?;
        Ok(Cow::Owned(raw))
    }

    /// Writes the JSON's bytes into `out`, which is [`raw_len`](Self::raw_len) long: so that
    /// the adapter can decompress straight into memory PostgreSQL owns.
    pub fn decompress_into(&self, out: &mut [u8]) -> Result<(), Error> {
        if !self.compressed {
            out.copy_from_slice(self.bytes);
            return Ok(());
        }
        match lz4_flex::block::decompress_into(self.bytes, out) {
            Ok(len) if len == self.raw_len => Ok(()),
            _ => Err(Error::CorruptStoredValue("kept JSON does not decompress".into())),
        }
    }

    /// How many bytes the JSON takes in the stored value.
    pub fn stored_len(&self) -> usize {
        self.bytes.len()
    }
}

/// The kept JSON ready to be stored: compressed when that pays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptJsonBuf {
    layout: JsonLayout,
    raw_len: usize,
    compressed: bool,
    bytes: Vec<u8>,
}

impl KeptJsonBuf {
    pub fn new(layout: JsonLayout, raw: Vec<u8>) -> KeptJsonBuf {
        let raw_len = raw.len();
        if raw_len >= COMPRESS_FROM {
            let compressed = lz4_flex::block::compress(&raw);
            if compressed.len() < raw_len {
                return KeptJsonBuf { layout, raw_len, compressed: true, bytes: compressed };
            }
        }
        KeptJsonBuf { layout, raw_len, compressed: false, bytes: raw }
    }

    pub fn as_kept(&self) -> KeptJson<'_> {
        KeptJson {
            layout: self.layout,
            raw_len: self.raw_len,
            compressed: self.compressed,
            bytes: &self.bytes,
        }
    }
}

/// What versions 2 and 3 keep beside the summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept<'a> {
    /// The largest operation counter in the document.
    pub max_op: u64,
    /// Change chunks appended to the payload since its `save()`.
    pub appended_changes: u32,
    /// The document as JSON, when kept and current.
    pub json: Option<KeptJson<'a>>,
    pub clock: ActorClock,
    /// The [`Structure`](crate::structure::Structure) index in its stored form, when kept.
    pub structure: Option<Cow<'a, [u8]>>,
}

impl Kept<'_> {
    /// Whether `hash` is the latest change of one of the document's actors.
    pub fn is_latest_change(&self, hash: &ChangeHash) -> bool {
        is_latest_change(&self.clock, hash)
    }
}

/// Whether `hash` is the latest change of one of `clock`'s actors.
pub fn is_latest_change(clock: &ActorClock, hash: &ChangeHash) -> bool {
    clock.values().any(|(_, latest)| latest == hash)
}

/// A stored value decoded once: its header fields, what it keeps, and the Automerge bytes,
/// borrowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredValue<'a> {
    pub version: u8,
    pub summary: Summary,
    /// `None` for a version 1 value, which keeps nothing else.
    pub kept: Option<Kept<'a>>,
    pub payload: &'a [u8],
}

impl StoredValue<'_> {
    /// Whether the value is known, from its header alone, to contain every change in
    /// `hashes`: each is one of its heads or the latest change of one of its actors (a change
    /// hash names its whole history, so the value then has their ancestors too).
    pub fn contains(&self, hashes: &[ChangeHash]) -> bool {
        let clock = self.kept.as_ref().map(|kept| &kept.clock);
        header_contains(&self.summary.heads, clock, hashes)
    }
}

/// Whether a header's `heads` and actor `clock` (none before version 2) show every change
/// in `hashes`, as [`StoredValue::contains`] asks.
pub fn header_contains(
    heads: &[ChangeHash],
    clock: Option<&ActorClock>,
    hashes: &[ChangeHash],
) -> bool {
    hashes.iter().all(|hash| {
        heads.contains(hash) || clock.is_some_and(|clock| is_latest_change(clock, hash))
    })
}

/// The Automerge bytes of a stored value, as clients load them: no load needed.
pub fn client_bytes(stored: &[u8]) -> Result<&[u8], Error> {
    decode(stored).map(|value| value.payload)
}

/// A stored value whose leading bytes can be had without the rest: a slice in memory, or
/// in the adapter a TOAST pointer whose chunks are fetched as far as asked.
pub trait Prefix<'a> {
    /// The value's first `len` bytes, or all of it when shorter.
    fn prefix(&self, len: usize) -> &'a [u8];
}

impl<'a> Prefix<'a> for &'a [u8] {
    fn prefix(&self, len: usize) -> &'a [u8] {
        &self[..len.min(self.len())]
    }
}

/// A stored value's header, decoded from its first bytes: the summary, and where every
/// section lies, so that each is fetched only by the reads that need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub version: u8,
    pub summary: Summary,
    flags: u8,
    /// Present from version 2 on.
    v2: Option<V2Fields>,
    json: Range<usize>,
    json_raw_len: usize,
    clock: Range<usize>,
    root: Range<usize>,
    payload_at: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct V2Fields {
    max_op: u64,
    appended_changes: u32,
}

impl Header {
    /// How many leading bytes hold the header (fixed part and heads), from at least the
    /// fixed part; `None` when `prefix` is shorter than that.
    pub fn len_from(prefix: &[u8]) -> Option<usize> {
        let fixed = match prefix.first()? {
            1 => V1_FIXED_LEN,
            2 => V2_FIXED_LEN,
            _ => FIXED_HEADER_LEN,
        };
        (prefix.len() >= fixed).then(|| read_u32(prefix, 4) as usize)
    }

    /// Decodes the header from the value's leading bytes, which must hold at least
    /// [`len_from`](Self::len_from) of them. Fails on anything this build did not write or
    /// cannot read.
    pub fn parse(bytes: &[u8]) -> Result<Header, Error> {
        let corrupt = |what: &str| Error::CorruptStoredValue(what.to_string());
        let version = *bytes.first().ok_or_else(|| corrupt("shorter than its header"))?;
        let (fixed_len, known_flags) = match version {
            0 => return Err(corrupt("format version 0")),
            1 => (V1_FIXED_LEN, 0),
            2 => (V2_FIXED_LEN, FLAG_JSON),
            3 => (FIXED_HEADER_LEN, FLAG_JSON | FLAG_JSONB | FLAG_LZ4),
            _ => {
                return Err(Error::UnsupportedFormatVersion {
                    found: version,
                    supported: FORMAT_VERSION,
                })
            }
        };
        if bytes.len() < fixed_len {
            return Err(corrupt("shorter than its header"));
        }
        let flags = bytes[1];
        if flags & !known_flags != 0 || bytes[2..4] != [0, 0] {
            return Err(corrupt("unknown flags"));
        }
        let header_len = read_u32(bytes, 4) as usize;
        let head_count = read_u32(bytes, 24) as usize;
        let expected_len = head_count
            .checked_mul(HASH_LEN)
            .and_then(|len| len.checked_add(fixed_len))
            .ok_or_else(|| corrupt("impossible number of heads"))?;
        if header_len != expected_len || header_len > bytes.len() {
            return Err(corrupt("header length does not match its heads"));
        }
        let heads = bytes[fixed_len..header_len]
            .chunks_exact(HASH_LEN)
            .map(|hash| ChangeHash(hash.try_into().expect("chunks_exact yields 32 bytes")))
            .collect();
        let summary =
            Summary { change_count: read_u64(bytes, 8), op_count: read_u64(bytes, 16), heads };
        // Section lengths, in the order of the sections.
        let (lengths, json_raw_len) = match version {
            1 => ([0, 0, 0], 0),
            2 => {
                let (json, clock, root) =
                    (read_u32(bytes, 40), read_u32(bytes, 44), read_u32(bytes, 48));
                ([json, clock, root].map(|len| len as usize), json as usize)
            }
            _ => {
                let (clock, json, root) =
                    (read_u32(bytes, 40), read_u32(bytes, 44), read_u32(bytes, 52));
                ([clock, json, root].map(|len| len as usize), read_u32(bytes, 48) as usize)
            }
        };
        let mut at = header_len;
        let [first, second, root] = lengths.map(|len| {
            let start = at;
            at = at.saturating_add(len);
            start..at
        });
        let (json, clock) = if version == 2 { (first, second) } else { (second, first) };
        if flags & FLAG_JSON == 0 && !json.is_empty() {
            return Err(corrupt("JSON without its flag"));
        }
        // A corrupt length must not make a reader allocate without bound: LZ4 cannot
        // expand a byte to more than 255.
        let bound = json.len().saturating_mul(255).saturating_add(16);
        if (flags & FLAG_LZ4 == 0 && json_raw_len != json.len()) || json_raw_len > bound {
            return Err(corrupt("JSON lengths disagree"));
        }
        let v2 = (version >= 2).then(|| V2Fields {
            max_op: read_u64(bytes, 28),
            appended_changes: read_u32(bytes, 36),
        });
        Ok(Header { version, summary, flags, v2, json, json_raw_len, clock, root, payload_at: at })
    }

    /// Fetches and decodes the header of `value`: one fetch of [`FIRST_FETCH`] bytes for any
    /// value with fewer than about sixty heads.
    pub fn read<'a>(value: &impl Prefix<'a>) -> Result<Header, Error> {
        let first = value.prefix(FIRST_FETCH);
        match Header::len_from(first) {
            Some(len) if len > first.len() => Header::parse(value.prefix(len)),
            _ => Header::parse(first),
        }
    }

    /// How many changes follow the payload's save (none before version 2).
    pub fn appended_changes(&self) -> u32 {
        self.v2.map_or(0, |v2| v2.appended_changes)
    }

    /// Where the kept JSON ends: what a `jsonb` read fetches.
    pub fn json_end(&self) -> usize {
        self.json.end
    }

    /// Where the actor table ends: what a "has these changes" check fetches.
    pub fn clock_end(&self) -> usize {
        self.clock.end
    }

    /// The kept JSON, from at least [`json_end`](Self::json_end) leading bytes of the value;
    /// `None` when the value keeps none.
    pub fn json<'a>(&self, leading: &'a [u8]) -> Result<Option<KeptJson<'a>>, Error> {
        if self.flags & FLAG_JSON == 0 {
            return Ok(None);
        }
        let bytes = section(leading, &self.json)?;
        let layout = match self.flags & FLAG_JSONB {
            0 => JsonLayout::Text,
            _ => JsonLayout::Jsonb,
        };
        Ok(Some(KeptJson {
            layout,
            raw_len: self.json_raw_len,
            compressed: self.flags & FLAG_LZ4 != 0,
            bytes,
        }))
    }

    /// The actor table, from at least [`clock_end`](Self::clock_end) leading bytes; empty
    /// for a version 1 value.
    pub fn clock(&self, leading: &[u8]) -> Result<ActorClock, Error> {
        match self.v2 {
            None => Ok(ActorClock::new()),
            Some(_) => decode_clock(section(leading, &self.clock)?),
        }
    }

    /// The whole value decoded, from all of its bytes.
    pub fn decode<'a>(self, stored: &'a [u8]) -> Result<StoredValue<'a>, Error> {
        let kept = match self.v2 {
            None => None,
            Some(v2) => Some(Kept {
                max_op: v2.max_op,
                appended_changes: v2.appended_changes,
                json: self.json(stored)?,
                clock: self.clock(stored)?,
                structure: self.structure(stored)?,
            }),
        };
        let payload = stored
            .get(self.payload_at..)
            .ok_or_else(|| Error::CorruptStoredValue("shorter than its sections".into()))?;
        if !payload.starts_with(&AUTOMERGE_MAGIC) {
            return Err(Error::CorruptStoredValue("payload is not Automerge data".into()));
        }
        Ok(StoredValue { version: self.version, summary: self.summary, kept, payload })
    }
}

impl Header {
    /// The structure index; a version 2 value's root table becomes an index of its root.
    fn structure<'a>(&self, stored: &'a [u8]) -> Result<Option<Cow<'a, [u8]>>, Error> {
        let bytes = section(stored, &self.root)?;
        Ok(match self.version {
            2 => {
                let root = decode_root(bytes)?;
                // The root table followed every appended change.
                let index = crate::structure::Structure::of_root_table(&root);
                let appended = self.v2.map_or(0, |v2| v2.appended_changes);
                Some(Cow::Owned(index.encode(appended)))
            }
            _ if bytes.is_empty() => None,
            _ => Some(Cow::Borrowed(bytes)),
        })
    }
}

fn section<'a>(leading: &'a [u8], range: &Range<usize>) -> Result<&'a [u8], Error> {
    leading
        .get(range.clone())
        .ok_or_else(|| Error::CorruptStoredValue("shorter than its sections".into()))
}

/// Reads a stored value's header and sections and checks that they are consistent, without
/// loading the document.
pub fn decode(stored: &[u8]) -> Result<StoredValue<'_>, Error> {
    Header::parse(stored)?.decode(stored)
}

/// Writes the stored form (the current version) of a document's Automerge bytes.
pub fn encode(summary: &Summary, kept: &Kept<'_>, payload: &[u8]) -> Vec<u8> {
    let header_len = FIXED_HEADER_LEN + HASH_LEN * summary.heads.len();
    let actors = encode_clock(&kept.clock);
    let root = kept.structure.as_deref().unwrap_or_default();
    let (flags, json, raw_len) = match &kept.json {
        None => (0, &[][..], 0),
        Some(json) => {
            let layout = match json.layout {
                JsonLayout::Text => 0,
                JsonLayout::Jsonb => FLAG_JSONB,
            };
            let lz4 = if json.compressed { FLAG_LZ4 } else { 0 };
            (FLAG_JSON | layout | lz4, json.bytes, json.raw_len)
        }
    };
    let mut out =
        Vec::with_capacity(header_len + actors.len() + json.len() + root.len() + payload.len());
    out.push(FORMAT_VERSION);
    out.push(flags);
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&to_u32(header_len).to_le_bytes());
    out.extend_from_slice(&summary.change_count.to_le_bytes());
    out.extend_from_slice(&summary.op_count.to_le_bytes());
    out.extend_from_slice(&to_u32(summary.heads.len()).to_le_bytes());
    out.extend_from_slice(&kept.max_op.to_le_bytes());
    out.extend_from_slice(&kept.appended_changes.to_le_bytes());
    out.extend_from_slice(&to_u32(actors.len()).to_le_bytes());
    out.extend_from_slice(&to_u32(json.len()).to_le_bytes());
    out.extend_from_slice(&to_u32(raw_len).to_le_bytes());
    out.extend_from_slice(&to_u32(root.len()).to_le_bytes());
    for head in &summary.heads {
        out.extend_from_slice(&head.0);
    }
    out.extend_from_slice(&actors);
    out.extend_from_slice(json);
    out.extend_from_slice(root);
    out.extend_from_slice(payload);
    out
}

#[cfg(test)]
mod tests;
