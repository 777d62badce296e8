//! The stored layout of an `automerge` value.
//!
//! A small header goes in front of the Automerge bytes so that heads, counts and the
//! cost estimate of a load can be read without loading the document, and so that the
//! layout can change in later versions while old values stay readable. All integers
//! are little-endian.
//!
//! Version 1:
//!
//! | offset   | size | field                                           |
//! |----------|------|-------------------------------------------------|
//! | 0        | 1    | format version (1)                              |
//! | 1        | 1    | flags (0; reserved)                             |
//! | 2        | 2    | reserved (0)                                    |
//! | 4        | 4    | header length `h`: where the payload starts     |
//! | 8        | 8    | number of changes                               |
//! | 16       | 8    | number of operations                            |
//! | 24       | 4    | number of heads `n`                             |
//! | 28       | 32·n | the heads (change hashes), sorted               |
//! | h        | rest | payload: the document's Automerge `save()`      |

use automerge::ChangeHash;

use crate::Error;

/// The version this build writes. It reads every version up to this one.
pub const FORMAT_VERSION: u8 = 1;

/// The first bytes of every Automerge chunk, which a stored payload must start with.
pub const AUTOMERGE_MAGIC: [u8; 4] = [0x85, 0x6f, 0x4a, 0x83];

const FIXED_HEADER_LEN: usize = 28;
const HASH_LEN: usize = 32;

/// What the header records about the document in the payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    pub change_count: u64,
    pub op_count: u64,
    /// Sorted, as `Automerge::get_heads` returns them.
    pub heads: Vec<ChangeHash>,
}

/// A stored value split into its header fields and the Automerge bytes, borrowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredValue<'a> {
    pub version: u8,
    pub summary: Summary,
    pub payload: &'a [u8],
}

/// Writes the stored form of a document's `save()` bytes and their summary.
pub fn encode(summary: &Summary, payload: &[u8]) -> Vec<u8> {
    let header_len = FIXED_HEADER_LEN + HASH_LEN * summary.heads.len();
    let mut out = Vec::with_capacity(header_len + payload.len());
    out.push(FORMAT_VERSION);
    out.push(0);
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&to_u32(header_len).to_le_bytes());
    out.extend_from_slice(&summary.change_count.to_le_bytes());
    out.extend_from_slice(&summary.op_count.to_le_bytes());
    out.extend_from_slice(&to_u32(summary.heads.len()).to_le_bytes());
    for head in &summary.heads {
        out.extend_from_slice(&head.0);
    }
    out.extend_from_slice(payload);
    out
}

/// How many leading bytes of a stored value hold its header: the fixed part first, then,
/// once that is read, the whole header. Lets callers fetch only a header from TOAST.
pub fn header_len(prefix: &[u8]) -> Option<usize> {
    if prefix.len() < FIXED_HEADER_LEN {
        return None;
    }
    Some(read_u32(prefix, 4) as usize)
}

/// The bytes to fetch first to learn the header's length.
pub const HEADER_PREFIX_LEN: usize = FIXED_HEADER_LEN;

/// Reads only the header: what `decode` checks, but without the payload.
pub fn decode_header(header: &[u8]) -> Result<(u8, Summary), Error> {
    let (version, summary, _) = split(header)?;
    Ok((version, summary))
}

/// Reads a stored value's header and checks that it is consistent, without loading the
/// document. Fails on anything this build did not write or cannot read.
pub fn decode(stored: &[u8]) -> Result<StoredValue<'_>, Error> {
    let (version, summary, header_len) = split(stored)?;
    let payload = &stored[header_len..];
    if !payload.starts_with(&AUTOMERGE_MAGIC) {
        return Err(Error::CorruptStoredValue("payload is not Automerge data".into()));
    }
    Ok(StoredValue { version, summary, payload })
}

/// The header's fields and length, checked.
fn split(stored: &[u8]) -> Result<(u8, Summary, usize), Error> {
    let corrupt = |what: &str| Error::CorruptStoredValue(what.to_string());
    if stored.len() < FIXED_HEADER_LEN {
        return Err(corrupt("shorter than its header"));
    }
    let version = stored[0];
    if version == 0 {
        return Err(corrupt("format version 0"));
    }
    if version > FORMAT_VERSION {
        return Err(Error::UnsupportedFormatVersion { found: version, supported: FORMAT_VERSION });
    }
    if stored[1] != 0 || stored[2..4] != [0, 0] {
        return Err(corrupt("unknown flags"));
    }
    let header_len = read_u32(stored, 4) as usize;
    let change_count = read_u64(stored, 8);
    let op_count = read_u64(stored, 16);
    let head_count = read_u32(stored, 24) as usize;
    let expected_len = head_count
        .checked_mul(HASH_LEN)
        .and_then(|len| len.checked_add(FIXED_HEADER_LEN))
        .ok_or_else(|| corrupt("impossible number of heads"))?;
    if header_len != expected_len || header_len > stored.len() {
        return Err(corrupt("header length does not match its heads"));
    }
    let heads = stored[FIXED_HEADER_LEN..header_len]
        .chunks_exact(HASH_LEN)
        .map(|hash| ChangeHash(hash.try_into().expect("chunks_exact yields 32 bytes")))
        .collect();
    Ok((version, Summary { change_count, op_count, heads }, header_len))
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

    const PAYLOAD: &[u8] = &[0x85, 0x6f, 0x4a, 0x83, 1, 2, 3];

    #[test]
    fn header_layout_is_as_documented() {
        let stored = encode(&summary(2), PAYLOAD);
        assert_eq!(stored[0], FORMAT_VERSION);
        assert_eq!(&stored[4..8], &(28u32 + 64).to_le_bytes());
        assert_eq!(&stored[8..16], &7u64.to_le_bytes());
        assert_eq!(&stored[16..24], &1234u64.to_le_bytes());
        assert_eq!(&stored[24..28], &2u32.to_le_bytes());
        assert_eq!(&stored[28 + 64..], PAYLOAD);
    }

    #[test]
    fn refuses_a_newer_version() {
        let mut stored = encode(&summary(1), PAYLOAD);
        stored[0] = FORMAT_VERSION + 1;
        assert!(matches!(
            decode(&stored),
            Err(Error::UnsupportedFormatVersion { found, supported: FORMAT_VERSION })
                if found == FORMAT_VERSION + 1
        ));
    }

    #[test]
    fn refuses_inconsistent_headers() {
        let good = encode(&summary(3), PAYLOAD);
        let mut cases: Vec<(&str, Vec<u8>)> = vec![
            ("empty", vec![]),
            ("truncated header", good[..20].to_vec()),
            ("truncated heads", good[..40].to_vec()),
            ("version 0", { let mut v = good.clone(); v[0] = 0; v }),
            ("flags", { let mut v = good.clone(); v[1] = 1; v }),
            ("head count", { let mut v = good.clone(); v[24] = 200; v }),
            ("huge head count", { let mut v = good.clone(); v[24..28].copy_from_slice(&u32::MAX.to_le_bytes()); v }),
            ("header length", { let mut v = good.clone(); v[4] = 29; v }),
            ("payload magic", { let mut v = good.clone(); let at = 28 + 96; v[at] = 0; v }),
        ];
        cases.push(("no payload", good[..28 + 96].to_vec()));
        for (what, bytes) in cases {
            assert!(
                matches!(decode(&bytes), Err(Error::CorruptStoredValue(_))),
                "{what} was accepted"
            );
        }
    }

    #[test]
    fn the_header_alone_can_be_read() {
        let stored = encode(&summary(2), PAYLOAD);
        let len = header_len(&stored[..HEADER_PREFIX_LEN]).unwrap();
        assert_eq!(len, 28 + 64);
        assert_eq!(decode_header(&stored[..len]).unwrap(), (FORMAT_VERSION, summary(2)));
        assert!(decode_header(&stored[..len - 1]).is_err());
    }

    proptest! {
        #[test]
        fn round_trips(
            change_count in any::<u64>(),
            op_count in any::<u64>(),
            heads in proptest::collection::vec(any::<[u8; 32]>(), 0..8),
            tail in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let summary = Summary {
                change_count,
                op_count,
                heads: heads.into_iter().map(ChangeHash).collect(),
            };
            let mut payload = AUTOMERGE_MAGIC.to_vec();
            payload.extend(tail);
            let stored = encode(&summary, &payload);
            let decoded = decode(&stored).unwrap();
            prop_assert_eq!(decoded.version, FORMAT_VERSION);
            prop_assert_eq!(decoded.summary, summary);
            prop_assert_eq!(decoded.payload, &payload[..]);
        }

        #[test]
        fn never_panics_on_garbage(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode(&bytes);
        }
    }
}
