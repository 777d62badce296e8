//! The stored layout of an `automerge` value.
//!
//! A small header goes in front of the Automerge bytes so that heads, counts and the
//! cost estimate of a load can be read without loading the document, and so that the
//! layout can change in later versions while old values stay readable. All integers
//! are little-endian.
//!
//! Version 2 (written by 0.3.0 and later) keeps, beside the summary, what lets reads and
//! small writes skip the load: the document's JSON, each actor's latest change, and the
//! operations behind each root key's value.
//!
//! | offset   | size | field                                                   |
//! |----------|------|---------------------------------------------------------|
//! | 0        | 1    | format version (2)                                      |
//! | 1        | 1    | flags: bit 0 set when the JSON is kept                  |
//! | 2        | 2    | reserved (0)                                            |
//! | 4        | 4    | header length `h`: fixed part and heads                 |
//! | 8        | 8    | number of changes                                       |
//! | 16       | 8    | number of operations                                    |
//! | 24       | 4    | number of heads `n`                                     |
//! | 28       | 8    | largest operation counter                               |
//! | 36       | 4    | changes appended after the last save                    |
//! | 40       | 4    | JSON length `j` (0 when not kept)                       |
//! | 44       | 4    | actor table length `a`                                  |
//! | 48       | 4    | root table length `r`                                   |
//! | 52       | 32·n | the heads (change hashes), sorted                       |
//! | h        | j    | the document as JSON text (UTF-8), when kept            |
//! | h+j      | a    | actor table: count (4), then per actor its id's length  |
//! |          |      | (4), the id, its latest change's sequence number (8)    |
//! |          |      | and hash (32), sorted by id                             |
//! | h+j+a    | r    | root table: count (4), then per root key its length (4) |
//! |          |      | and UTF-8 bytes, and the operations whose values it     |
//! |          |      | shows: count (4), then per operation its counter (8),   |
//! |          |      | actor id length (4) and actor id; sorted by key         |
//! | h+j+a+r  | rest | payload: an Automerge `save()`, then any change chunks  |
//! |          |      | appended since                                          |
//!
//! Version 1 (0.1.0 and 0.2.0; read, never written): the first 28 bytes as above with
//! flags 0, the heads at 28, the payload (a `save()`) at `h`.

use std::collections::BTreeMap;

use automerge::{ActorId, ChangeHash};

use crate::Error;

/// The version this build writes. It reads every version up to this one.
pub const FORMAT_VERSION: u8 = 2;

/// The first bytes of every Automerge chunk, which a stored payload must start with.
pub const AUTOMERGE_MAGIC: [u8; 4] = [0x85, 0x6f, 0x4a, 0x83];

const V1_FIXED_LEN: usize = 28;
const FIXED_HEADER_LEN: usize = 52;
const HASH_LEN: usize = 32;
const FLAG_JSON: u8 = 1;

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

/// What format 2 keeps beside the summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept<'a> {
    /// The largest operation counter in the document.
    pub max_op: u64,
    /// Change chunks appended to the payload since its `save()`.
    pub appended_changes: u32,
    /// The document as JSON, when kept and current.
    pub json: Option<&'a str>,
    pub clock: ActorClock,
    pub root: RootOps,
}

impl Kept<'_> {
    /// Whether `hash` is the latest change of one of the document's actors.
    pub fn is_latest_change(&self, hash: &ChangeHash) -> bool {
        self.clock.values().any(|(_, latest)| latest == hash)
    }
}

/// A stored value split into its header fields and the Automerge bytes, borrowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredValue<'a> {
    pub version: u8,
    pub summary: Summary,
    /// `None` for a version 1 value, which keeps nothing else.
    pub kept: Option<Kept<'a>>,
    pub payload: &'a [u8],
}

/// Writes the stored form (the current version) of a document's Automerge bytes.
pub fn encode(summary: &Summary, kept: &Kept<'_>, payload: &[u8]) -> Vec<u8> {
    let header_len = FIXED_HEADER_LEN + HASH_LEN * summary.heads.len();
    let json = kept.json.unwrap_or("").as_bytes();
    let actors = encode_clock(&kept.clock);
    let root = encode_root(&kept.root);
    let mut out =
        Vec::with_capacity(header_len + json.len() + actors.len() + root.len() + payload.len());
    out.push(FORMAT_VERSION);
    out.push(if kept.json.is_some() { FLAG_JSON } else { 0 });
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&to_u32(header_len).to_le_bytes());
    out.extend_from_slice(&summary.change_count.to_le_bytes());
    out.extend_from_slice(&summary.op_count.to_le_bytes());
    out.extend_from_slice(&to_u32(summary.heads.len()).to_le_bytes());
    out.extend_from_slice(&kept.max_op.to_le_bytes());
    out.extend_from_slice(&kept.appended_changes.to_le_bytes());
    out.extend_from_slice(&to_u32(json.len()).to_le_bytes());
    out.extend_from_slice(&to_u32(actors.len()).to_le_bytes());
    out.extend_from_slice(&to_u32(root.len()).to_le_bytes());
    for head in &summary.heads {
        out.extend_from_slice(&head.0);
    }
    out.extend_from_slice(json);
    out.extend_from_slice(&actors);
    out.extend_from_slice(&root);
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

fn encode_root(root: &RootOps) -> Vec<u8> {
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

/// How many leading bytes of a stored value hold its header (fixed part and heads), read
/// from its first [`HEADER_PREFIX_LEN`] bytes. Lets callers fetch only a header from TOAST.
pub fn header_len(prefix: &[u8]) -> Option<usize> {
    let fixed = match prefix.first()? {
        1 => V1_FIXED_LEN,
        _ => FIXED_HEADER_LEN,
    };
    (prefix.len() >= fixed).then(|| read_u32(prefix, 4) as usize)
}

/// How many leading bytes hold the header and the kept JSON, read from the first
/// [`HEADER_PREFIX_LEN`] bytes; `None` when the value keeps no JSON (or is not version 2).
pub fn json_end(prefix: &[u8]) -> Option<usize> {
    if prefix.len() < FIXED_HEADER_LEN || prefix[0] != 2 || prefix[1] & FLAG_JSON == 0 {
        return None;
    }
    (read_u32(prefix, 4) as usize).checked_add(read_u32(prefix, 40) as usize)
}

/// The bytes to fetch first to learn the header's length.
pub const HEADER_PREFIX_LEN: usize = FIXED_HEADER_LEN;

/// Reads only the header: what `decode` checks, but without the payload.
pub fn decode_header(header: &[u8]) -> Result<(u8, Summary), Error> {
    let fields = split(header)?;
    Ok((fields.version, fields.summary))
}

/// The JSON a value keeps, from its leading bytes (at least [`json_end`] of them); `None`
/// when it keeps none.
pub fn decode_json(leading: &[u8]) -> Result<Option<&str>, Error> {
    let fields = split(leading)?;
    match fields.json_len {
        Some(len) => {
            let json = leading
                .get(fields.header_len..fields.header_len + len)
                .ok_or_else(|| Error::CorruptStoredValue("shorter than its JSON".into()))?;
            std::str::from_utf8(json)
                .map(Some)
                .map_err(|_| Error::CorruptStoredValue("kept JSON is not UTF-8".into()))
        }
        None => Ok(None),
    }
}

/// Reads a stored value's header and checks that it is consistent, without loading the
/// document. Fails on anything this build did not write or cannot read.
pub fn decode(stored: &[u8]) -> Result<StoredValue<'_>, Error> {
    let corrupt = |what: &str| Error::CorruptStoredValue(what.to_string());
    let fields = split(stored)?;
    let mut at = fields.header_len;
    let mut section = |len: usize| -> Result<&[u8], Error> {
        let bytes = stored
            .get(at..at.saturating_add(len))
            .ok_or_else(|| corrupt("shorter than its sections"))?;
        at += len;
        Ok(bytes)
    };
    let kept = match fields.v2 {
        None => None,
        Some(v2) => {
            let json = section(fields.json_len.unwrap_or(0))?;
            let json = match fields.json_len {
                Some(_) => {
                    Some(std::str::from_utf8(json).map_err(|_| corrupt("kept JSON is not UTF-8"))?)
                }
                None => None,
            };
            let clock = decode_clock(section(v2.actors_len)?)?;
            let root = decode_root(section(v2.root_len)?)?;
            Some(Kept {
                max_op: v2.max_op,
                appended_changes: v2.appended_changes,
                json,
                clock,
                root,
            })
        }
    };
    let payload = &stored[at..];
    if !payload.starts_with(&AUTOMERGE_MAGIC) {
        return Err(corrupt("payload is not Automerge data"));
    }
    Ok(StoredValue { version: fields.version, summary: fields.summary, kept, payload })
}

/// The header's fields, checked.
struct Fields {
    version: u8,
    summary: Summary,
    header_len: usize,
    /// The JSON's length, when kept.
    json_len: Option<usize>,
    v2: Option<V2Fields>,
}

struct V2Fields {
    max_op: u64,
    appended_changes: u32,
    actors_len: usize,
    root_len: usize,
}

fn split(stored: &[u8]) -> Result<Fields, Error> {
    let corrupt = |what: &str| Error::CorruptStoredValue(what.to_string());
    let version = *stored.first().ok_or_else(|| corrupt("shorter than its header"))?;
    let fixed_len = match version {
        0 => return Err(corrupt("format version 0")),
        1 => V1_FIXED_LEN,
        2 => FIXED_HEADER_LEN,
        _ => {
            return Err(Error::UnsupportedFormatVersion {
                found: version,
                supported: FORMAT_VERSION,
            })
        }
    };
    if stored.len() < fixed_len {
        return Err(corrupt("shorter than its header"));
    }
    let known_flags = if version == 1 { 0 } else { FLAG_JSON };
    if stored[1] & !known_flags != 0 || stored[2..4] != [0, 0] {
        return Err(corrupt("unknown flags"));
    }
    let header_len = read_u32(stored, 4) as usize;
    let change_count = read_u64(stored, 8);
    let op_count = read_u64(stored, 16);
    let head_count = read_u32(stored, 24) as usize;
    let expected_len = head_count
        .checked_mul(HASH_LEN)
        .and_then(|len| len.checked_add(fixed_len))
        .ok_or_else(|| corrupt("impossible number of heads"))?;
    if header_len != expected_len || header_len > stored.len() {
        return Err(corrupt("header length does not match its heads"));
    }
    let heads = stored[fixed_len..header_len]
        .chunks_exact(HASH_LEN)
        .map(|hash| ChangeHash(hash.try_into().expect("chunks_exact yields 32 bytes")))
        .collect();
    let (json_len, v2) = match version {
        1 => (None, None),
        _ => {
            let json_len = read_u32(stored, 40) as usize;
            if stored[1] & FLAG_JSON == 0 && json_len != 0 {
                return Err(corrupt("JSON without its flag"));
            }
            let v2 = V2Fields {
                max_op: read_u64(stored, 28),
                appended_changes: read_u32(stored, 36),
                actors_len: read_u32(stored, 44) as usize,
                root_len: read_u32(stored, 48) as usize,
            };
            ((stored[1] & FLAG_JSON != 0).then_some(json_len), Some(v2))
        }
    };
    Ok(Fields {
        version,
        summary: Summary { change_count, op_count, heads },
        header_len,
        json_len,
        v2,
    })
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

    fn kept(json: Option<&str>) -> Kept<'_> {
        let clock = [
            (ActorId::from([1u8; 16]), (3, ChangeHash([9; 32]))),
            (ActorId::from(&[2u8][..]), (1, ChangeHash([8; 32]))),
        ];
        let root =
            [("title".to_string(), vec![(7, ActorId::from([1u8; 16]))]), ("x".to_string(), vec![])];
        Kept {
            max_op: 99,
            appended_changes: 2,
            json,
            clock: clock.into_iter().collect(),
            root: root.into_iter().collect(),
        }
    }

    const PAYLOAD: &[u8] = &[0x85, 0x6f, 0x4a, 0x83, 1, 2, 3];

    #[test]
    fn header_layout_is_as_documented() {
        let stored = encode(&summary(2), &kept(Some("{}")), PAYLOAD);
        assert_eq!(stored[0], FORMAT_VERSION);
        assert_eq!(stored[1], 1);
        assert_eq!(&stored[4..8], &(52u32 + 64).to_le_bytes());
        assert_eq!(&stored[8..16], &7u64.to_le_bytes());
        assert_eq!(&stored[16..24], &1234u64.to_le_bytes());
        assert_eq!(&stored[24..28], &2u32.to_le_bytes());
        assert_eq!(&stored[28..36], &99u64.to_le_bytes());
        assert_eq!(&stored[36..40], &2u32.to_le_bytes());
        assert_eq!(&stored[40..44], &2u32.to_le_bytes());
        let actors_len = 4 + (4 + 1 + 8 + 32) + (4 + 16 + 8 + 32);
        assert_eq!(&stored[44..48], &(actors_len as u32).to_le_bytes());
        let root_len = 4 + (4 + 5 + 4 + 8 + 4 + 16) + (4 + 1 + 4);
        assert_eq!(&stored[48..52], &(root_len as u32).to_le_bytes());
        assert_eq!(&stored[52 + 64..52 + 66], b"{}");
        assert_eq!(&stored[52 + 66 + actors_len + root_len..], PAYLOAD);
    }

    #[test]
    fn round_trips_with_and_without_json() {
        for json in [Some("{\"title\":\"é\"}"), None] {
            let stored = encode(&summary(3), &kept(json), PAYLOAD);
            let value = decode(&stored).unwrap();
            assert_eq!(value.version, FORMAT_VERSION);
            assert_eq!(value.summary, summary(3));
            assert_eq!(value.kept, Some(kept(json)));
            assert_eq!(value.payload, PAYLOAD);
            assert_eq!(json_end(&stored[..HEADER_PREFIX_LEN]).is_some(), json.is_some());
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
        let (summary, _) = crate::document::summarize(&doc);
        assert_eq!((value.version, &value.summary, &value.kept), (1, &summary, &None));
        assert_eq!(value.payload, doc.save());
        let header = header_len(&stored[..HEADER_PREFIX_LEN]).unwrap();
        assert_eq!(header, 28 + 32);
        assert_eq!(json_end(&stored[..HEADER_PREFIX_LEN]), None);
        assert_eq!(decode_header(&stored[..header]).unwrap(), (1, summary));
        assert_eq!(decode_json(&stored).unwrap(), None);
        assert_eq!(crate::document::json_text(&stored).unwrap(), r#"{"title":"old"}"#);
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
        let good = encode(&summary(3), &kept(Some("{}")), PAYLOAD);
        let actors_at = 52 + 96 + 2;
        let mut cases: Vec<(&str, Vec<u8>)> = vec![
            ("empty", vec![]),
            ("truncated header", good[..20].to_vec()),
            ("truncated heads", good[..60].to_vec()),
            ("version 0", {
                let mut v = good.clone();
                v[0] = 0;
                v
            }),
            ("flags", {
                let mut v = good.clone();
                v[1] = 2;
                v
            }),
            ("JSON length without the flag", {
                let mut v = good.clone();
                v[1] = 0;
                v
            }),
            ("head count", {
                let mut v = good.clone();
                v[24] = 200;
                v
            }),
            ("huge head count", {
                let mut v = good.clone();
                v[24..28].copy_from_slice(&u32::MAX.to_le_bytes());
                v
            }),
            ("header length", {
                let mut v = good.clone();
                v[4] = 29;
                v
            }),
            ("JSON length", {
                let mut v = good.clone();
                v[40..44].copy_from_slice(&u32::MAX.to_le_bytes());
                v
            }),
            ("actor count", {
                let mut v = good.clone();
                v[actors_at] = 9;
                v
            }),
            ("actor id length", {
                let mut v = good.clone();
                v[actors_at + 4..actors_at + 8].copy_from_slice(&u32::MAX.to_le_bytes());
                v
            }),
            ("root key count", {
                let mut v = good.clone();
                v[actors_at + 4 + 45 + 60] = 9;
                v
            }),
            ("root key not UTF-8", {
                let mut v = good.clone();
                v[actors_at + 4 + 45 + 60 + 8] = 0xff;
                v
            }),
            ("version 1 with flags", {
                let mut v = fixtures::legacy::format_version_1(&automerge::Automerge::new());
                v[1] = 1;
                v
            }),
        ];
        cases.push(("no payload", good[..good.len() - PAYLOAD.len()].to_vec()));
        cases.push(("payload magic", {
            let mut v = good.clone();
            let at = v.len() - PAYLOAD.len();
            v[at] = 0;
            v
        }));
        for (what, bytes) in cases {
            assert!(
                matches!(decode(&bytes), Err(Error::CorruptStoredValue(_))),
                "{what} was accepted"
            );
        }
    }

    #[test]
    fn the_header_and_json_alone_can_be_read() {
        let stored = encode(&summary(2), &kept(Some("[1]")), PAYLOAD);
        let len = header_len(&stored[..HEADER_PREFIX_LEN]).unwrap();
        assert_eq!(len, 52 + 64);
        assert_eq!(decode_header(&stored[..len]).unwrap(), (FORMAT_VERSION, summary(2)));
        assert!(decode_header(&stored[..len - 1]).is_err());
        let end = json_end(&stored[..HEADER_PREFIX_LEN]).unwrap();
        assert_eq!(decode_json(&stored[..end]).unwrap(), Some("[1]"));
        assert!(decode_json(&stored[..end - 1]).is_err());
    }

    proptest! {
        #[test]
        fn round_trips(
            change_count in any::<u64>(),
            op_count in any::<u64>(),
            max_op in any::<u64>(),
            heads in proptest::collection::vec(any::<[u8; 32]>(), 0..8),
            actors in proptest::collection::btree_map(proptest::collection::vec(any::<u8>(), 0..20), (any::<u64>(), any::<[u8; 32]>()), 0..5),
            json in proptest::option::of(".{0,20}"),
            tail in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let summary = Summary {
                change_count,
                op_count,
                heads: heads.into_iter().map(ChangeHash).collect(),
            };
            let clock = actors.into_iter().map(|(actor, (seq, hash))| (ActorId::from(actor), (seq, ChangeHash(hash)))).collect();
            let kept = Kept { max_op, appended_changes: 0, json: json.as_deref(), clock, root: RootOps::new() };
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
            let _ = decode(&bytes);
            let _ = decode_json(&bytes);
            let _ = json_end(&bytes);
            let _ = header_len(&bytes);
        }
    }
}
