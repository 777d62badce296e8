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

use crate::Error;

/// The version this build writes. It reads every version up to this one.
pub const FORMAT_VERSION: u8 = 3;

/// The first bytes of every Automerge chunk, which a stored payload must start with.
pub const AUTOMERGE_MAGIC: [u8; 4] = [0x85, 0x6f, 0x4a, 0x83];

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

fn encode_clock(clock: &ActorClock) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&to_u32(clock.len()).to_le_bytes());
    for (actor, (seq, hash)) in clock {
        out.extend_from_slice(&to_u32(actor.to_bytes().len()).to_le_bytes());
        out.extend_from_slice(actor.to_bytes());
        out.extend_from_slice(&seq.to_le_bytes());
        out.extend_from_slice(&hash.0);
    }
    out
}

/// A root table as format version 2 kept it (for tests that write such values).
pub fn encode_root_table(root: &RootOps) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&to_u32(root.len()).to_le_bytes());
    for (key, ops) in root {
        out.extend_from_slice(&to_u32(key.len()).to_le_bytes());
        out.extend_from_slice(key.as_bytes());
        out.extend_from_slice(&to_u32(ops.len()).to_le_bytes());
        for (counter, actor) in ops {
            out.extend_from_slice(&counter.to_le_bytes());
            out.extend_from_slice(&to_u32(actor.to_bytes().len()).to_le_bytes());
            out.extend_from_slice(actor.to_bytes());
        }
    }
    out
}

/// Reads a table's bytes in order, failing (as corrupt, naming `table`) past their end.
struct TableReader<'a> {
    bytes: &'a [u8],
    table: &'static str,
}

impl<'a> TableReader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Error> {
        let (head, rest) = self.bytes.split_at_checked(n).ok_or_else(|| self.corrupt())?;
        self.bytes = rest;
        Ok(head)
    }

    fn u32(&mut self) -> Result<usize, Error> {
        Ok(read_u32(self.take(4)?, 0) as usize)
    }

    fn u64(&mut self) -> Result<u64, Error> {
        Ok(read_u64(self.take(8)?, 0))
    }

    fn actor(&mut self) -> Result<ActorId, Error> {
        let len = self.u32()?;
        Ok(ActorId::from(self.take(len)?))
    }

    fn corrupt(&self) -> Error {
        Error::CorruptStoredValue(format!("bad {}", self.table))
    }

    fn finish(self) -> Result<(), Error> {
        if self.bytes.is_empty() {
            Ok(())
        } else {
            Err(self.corrupt())
        }
    }
}

fn decode_clock(bytes: &[u8]) -> Result<ActorClock, Error> {
    let mut reader = TableReader { bytes, table: "actor table" };
    let mut clock = ActorClock::new();
    for _ in 0..reader.u32()? {
        let actor = reader.actor()?;
        let seq = reader.u64()?;
        let hash = ChangeHash(reader.take(HASH_LEN)?.try_into().expect("32 bytes"));
        clock.insert(actor, (seq, hash));
    }
    reader.finish()?;
    Ok(clock)
}

fn decode_root(bytes: &[u8]) -> Result<RootOps, Error> {
    let mut reader = TableReader { bytes, table: "root table" };
    let mut root = RootOps::new();
    for _ in 0..reader.u32()? {
        let len = reader.u32()?;
        let key = std::str::from_utf8(reader.take(len)?).map_err(|_| reader.corrupt())?.to_string();
        let mut ops = Vec::new();
        for _ in 0..reader.u32()? {
            let counter = reader.u64()?;
            ops.push((counter, reader.actor()?));
        }
        root.insert(key, ops);
    }
    reader.finish()?;
    Ok(root)
}

fn to_u32(n: usize) -> u32 {
    u32::try_from(n).expect("an automerge value larger than 4 GiB cannot be stored")
}

fn read_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

fn read_u64(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn summary(heads: usize) -> Summary {
        Summary {
            change_count: 7,
            op_count: 1234,
            heads: (0..heads).map(|i| ChangeHash([i as u8; 32])).collect(),
        }
    }

    fn kept(json: Option<&KeptJsonBuf>) -> Kept<'_> {
        let clock = [
            (ActorId::from([1u8; 16]), (3, ChangeHash([9; 32]))),
            (ActorId::from(&[2u8][..]), (1, ChangeHash([8; 32]))),
        ];
        let root =
            [("title".to_string(), vec![(7, ActorId::from([1u8; 16]))]), ("x".to_string(), vec![])];
        let structure = crate::structure::Structure::of_root_table(&root.into_iter().collect());
        Kept {
            max_op: 99,
            appended_changes: 2,
            json: json.map(KeptJsonBuf::as_kept),
            clock: clock.into_iter().collect(),
            structure: Some(Cow::Owned(structure.encode(2))),
        }
    }

    fn text(json: &str) -> KeptJsonBuf {
        KeptJsonBuf::new(JsonLayout::Text, json.as_bytes().to_vec())
    }

    const PAYLOAD: &[u8] = &[0x85, 0x6f, 0x4a, 0x83, 1, 2, 3];
    const ACTORS_LEN: usize = 4 + (4 + 1 + 8 + 32) + (4 + 16 + 8 + 32);

    #[test]
    fn header_layout_is_as_documented() {
        let json = text("{}");
        let kept = kept(Some(&json));
        let index_len = kept.structure.as_ref().unwrap().len();
        let stored = encode(&summary(2), &kept, PAYLOAD);
        assert_eq!(stored[0], FORMAT_VERSION);
        assert_eq!(stored[1], 1, "JSON kept, as text, uncompressed");
        assert_eq!(&stored[4..8], &(56u32 + 64).to_le_bytes());
        assert_eq!(&stored[8..16], &7u64.to_le_bytes());
        assert_eq!(&stored[16..24], &1234u64.to_le_bytes());
        assert_eq!(&stored[24..28], &2u32.to_le_bytes());
        assert_eq!(&stored[28..36], &99u64.to_le_bytes());
        assert_eq!(&stored[36..40], &2u32.to_le_bytes());
        assert_eq!(&stored[40..44], &(ACTORS_LEN as u32).to_le_bytes());
        assert_eq!(&stored[44..48], &2u32.to_le_bytes());
        assert_eq!(&stored[48..52], &2u32.to_le_bytes());
        assert_eq!(&stored[52..56], &(index_len as u32).to_le_bytes());
        let json_at = 56 + 64 + ACTORS_LEN;
        assert_eq!(&stored[json_at..json_at + 2], b"{}");
        assert_eq!(&stored[json_at + 2..json_at + 2 + index_len], kept.structure.unwrap().as_ref());
        assert_eq!(&stored[json_at + 2 + index_len..], PAYLOAD);
    }

    #[test]
    fn large_json_is_compressed_and_reads_back() {
        let long = format!("{{\"text\":\"{}\"}}", "automerge ".repeat(1000));
        let json = KeptJsonBuf::new(JsonLayout::Jsonb, long.clone().into_bytes());
        let stored = encode(&summary(1), &kept(Some(&json)), PAYLOAD);
        assert_eq!(stored[1], FLAG_JSON | FLAG_JSONB | FLAG_LZ4);
        assert!(stored.len() < long.len() / 4, "{} bytes stored", stored.len());
        let kept = decode(&stored).unwrap().kept.unwrap().json.unwrap();
        assert_eq!(kept.layout, JsonLayout::Jsonb);
        assert_eq!(kept.raw_len, long.len());
        assert_eq!(kept.raw().unwrap(), long.as_bytes());
        // A corrupt compressed section is refused, not read past its end.
        let mut broken = stored.clone();
        let json_at = 56 + 32 + ACTORS_LEN;
        broken[json_at] ^= 0xff;
        broken[json_at + 1] ^= 0xff;
        let value = decode(&broken).unwrap();
        assert!(value.kept.unwrap().json.unwrap().raw().is_err());
    }

    #[test]
    fn round_trips_with_and_without_json() {
        for json in [Some(text("{\"title\":\"é\"}")), None] {
            let stored = encode(&summary(3), &kept(json.as_ref()), PAYLOAD);
            let value = decode(&stored).unwrap();
            assert_eq!(value.version, FORMAT_VERSION);
            assert_eq!(value.summary, summary(3));
            assert_eq!(value.kept, Some(kept(json.as_ref())));
            assert_eq!(value.payload, PAYLOAD);
        }
    }

    #[test]
    fn reads_version_1_values() {
        let mut doc = automerge::AutoCommit::new();
        automerge::transaction::Transactable::put(&mut doc, automerge::ROOT, "title", "old")
            .unwrap();
        let doc = doc.document().clone();
        let stored = fixtures::legacy::format_version_1(&doc);
        let value = decode(&stored).unwrap();
        let (summary, _, _) = crate::document::summarize(&doc);
        assert_eq!((value.version, &value.summary, &value.kept), (1, &summary, &None));
        assert_eq!(value.payload, doc.save());
        let header = Header::read(&&stored[..]).unwrap();
        assert_eq!(Header::len_from(&stored).unwrap(), 28 + 32);
        assert_eq!((header.version, &header.summary), (1, &summary));
        assert_eq!(header.json(&stored).unwrap(), None);
        let text = crate::document::json_text(&stored, &crate::kept_json::TextJson).unwrap();
        assert_eq!(text, r#"{"title":"old"}"#);
    }

    #[test]
    fn reads_version_2_values() {
        let json = text("{\"title\":\"old\"}");
        let current = encode(&summary(2), &kept(Some(&json)), PAYLOAD);
        let stored = fixtures::legacy::format_version_2(&current);
        let value = decode(&stored).unwrap();
        assert_eq!(value.version, 2);
        assert_eq!(
            (value.summary, value.kept, value.payload),
            (summary(2), Some(kept(Some(&json))), PAYLOAD)
        );
        let header = Header::read(&&stored[..]).unwrap();
        assert_eq!(header.json_end(), 52 + 64 + 15, "the JSON comes right after the heads");
        assert_eq!(header.json(&stored[..header.json_end()]).unwrap(), Some(json.as_kept()));
        assert_eq!(header.clock(&stored).unwrap(), kept(None).clock);
    }

    #[test]
    fn refuses_a_newer_version() {
        let mut stored = encode(&summary(1), &kept(None), PAYLOAD);
        stored[0] = FORMAT_VERSION + 1;
        assert!(matches!(
            decode(&stored),
            Err(Error::UnsupportedFormatVersion { found, supported: FORMAT_VERSION })
                if found == FORMAT_VERSION + 1
        ));
    }

    #[test]
    fn refuses_inconsistent_headers() {
        let good = encode(&summary(3), &kept(Some(&text("{}"))), PAYLOAD);
        let actors_at = 56 + 96;
        let with = |edit: &dyn Fn(&mut Vec<u8>)| {
            let mut v = good.clone();
            edit(&mut v);
            v
        };
        let mut cases: Vec<(&str, Vec<u8>)> = vec![
            ("empty", vec![]),
            ("truncated header", good[..20].to_vec()),
            ("truncated heads", good[..60].to_vec()),
            ("version 0", with(&|v| v[0] = 0)),
            ("flags", with(&|v| v[1] = 8)),
            ("JSON length without the flag", with(&|v| v[1] = 0)),
            ("raw length of uncompressed JSON", with(&|v| v[48] = 3)),
            (
                "raw length beyond what LZ4 can make",
                with(&|v| {
                    v[1] |= FLAG_LZ4;
                    v[48..52].copy_from_slice(&u32::MAX.to_le_bytes());
                }),
            ),
            ("head count", with(&|v| v[24] = 200)),
            ("huge head count", with(&|v| v[24..28].copy_from_slice(&u32::MAX.to_le_bytes()))),
            ("header length", with(&|v| v[4] = 29)),
            ("JSON length", with(&|v| v[44..48].copy_from_slice(&u32::MAX.to_le_bytes()))),
            ("actor count", with(&|v| v[actors_at] = 9)),
            (
                "actor id length",
                with(&|v| v[actors_at + 4..actors_at + 8].copy_from_slice(&u32::MAX.to_le_bytes())),
            ),
            ("version 1 with flags", {
                let mut v = fixtures::legacy::format_version_1(&automerge::Automerge::new());
                v[1] = 1;
                v
            }),
            ("version 2 with the JSONB flag", {
                let mut v = fixtures::legacy::format_version_2(&good);
                v[1] |= FLAG_JSONB;
                v
            }),
        ];
        cases.push(("no payload", good[..good.len() - PAYLOAD.len()].to_vec()));
        cases.push((
            "payload magic",
            with(&|v| {
                let at = v.len() - PAYLOAD.len();
                v[at] = 0;
            }),
        ));
        for (what, bytes) in cases {
            assert!(
                matches!(decode(&bytes), Err(Error::CorruptStoredValue(_))),
                "{what} was accepted"
            );
        }
    }

    #[test]
    fn the_header_the_clock_and_the_json_alone_can_be_read() {
        let json = text("[1]");
        let stored = encode(&summary(2), &kept(Some(&json)), PAYLOAD);
        let len = Header::len_from(&stored).unwrap();
        assert_eq!(len, 56 + 64);
        let header = Header::parse(&stored[..len]).unwrap();
        assert_eq!((header.version, &header.summary), (FORMAT_VERSION, &summary(2)));
        assert!(Header::parse(&stored[..len - 1]).is_err());
        assert_eq!(header.clock_end(), len + ACTORS_LEN);
        assert_eq!(header.clock(&stored[..header.clock_end()]).unwrap(), kept(None).clock);
        assert!(header.clock(&stored[..header.clock_end() - 1]).is_err());
        let end = header.json_end();
        assert_eq!(header.json(&stored[..end]).unwrap(), Some(json.as_kept()));
        assert!(header.json(&stored[..end - 1]).is_err());
    }

    /// A prefix source that records how far it was asked to read.
    struct Counting<'a> {
        bytes: &'a [u8],
        furthest: std::cell::Cell<usize>,
    }

    impl<'a> Prefix<'a> for Counting<'a> {
        fn prefix(&self, len: usize) -> &'a [u8] {
            self.furthest.set(self.furthest.get().max(len));
            (&self.bytes).prefix(len)
        }
    }

    #[test]
    fn a_header_read_fetches_one_first_chunk_unless_the_heads_pass_it() {
        let json = text(&"1".repeat(10_000));
        for (heads, furthest) in [(1, FIRST_FETCH), (100, 56 + 3200)] {
            let stored = encode(&summary(heads), &kept(Some(&json)), PAYLOAD);
            let source = Counting { bytes: &stored, furthest: Default::default() };
            let header = Header::read(&source).unwrap();
            assert_eq!(header.summary, summary(heads));
            assert_eq!(source.furthest.get(), furthest, "{heads} heads");
        }
    }

    proptest! {
        #[test]
        fn round_trips(
            change_count in any::<u64>(),
            op_count in any::<u64>(),
            max_op in any::<u64>(),
            heads in proptest::collection::vec(any::<[u8; 32]>(), 0..8),
            actors in proptest::collection::btree_map(proptest::collection::vec(any::<u8>(), 0..20), (any::<u64>(), any::<[u8; 32]>()), 0..5),
            json in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..5000)),
            jsonb in any::<bool>(),
            tail in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let summary = Summary {
                change_count,
                op_count,
                heads: heads.into_iter().map(ChangeHash).collect(),
            };
            let layout = if jsonb { JsonLayout::Jsonb } else { JsonLayout::Text };
            let json = json.map(|json| KeptJsonBuf::new(layout, json));
            let clock = actors.into_iter().map(|(actor, (seq, hash))| (ActorId::from(actor), (seq, ChangeHash(hash)))).collect();
            let kept = Kept { max_op, appended_changes: 0, json: json.as_ref().map(KeptJsonBuf::as_kept), clock, structure: None };
            let mut payload = AUTOMERGE_MAGIC.to_vec();
            payload.extend(tail);
            let stored = encode(&summary, &kept, &payload);
            let decoded = decode(&stored).unwrap();
            prop_assert_eq!(decoded.version, FORMAT_VERSION);
            prop_assert_eq!(decoded.summary, summary);
            prop_assert_eq!(decoded.kept, Some(kept));
            prop_assert_eq!(decoded.payload, &payload[..]);
        }

        #[test]
        fn never_panics_on_garbage(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            if let Ok(value) = decode(&bytes) {
                let _ = value.kept.and_then(|kept| kept.json).map(|json| json.raw());
            }
            let _ = Header::len_from(&bytes);
            let _ = Header::read(&&bytes[..]);
        }
    }
}
