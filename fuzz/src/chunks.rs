//! Automerge bytes as a list of chunks, so that mutations can reach what lies behind a
//! chunk's checksum: a mutated chunk is written back with the length and checksum that
//! Automerge checks, and a change that was deflated is deflated again.
//!
//! A chunk is four magic bytes, four checksum bytes (the start of the SHA-256 of the chunk
//! type, the uLEB128 length and the data), the type and the length, then the data. A
//! deflated change (type 2) carries the checksum of the change it inflates to (type 1).

use std::io::{Read, Write};

use flate2::read::DeflateDecoder;
use flate2::write::DeflateEncoder;
use pg_automerge_core::format::AUTOMERGE_MAGIC;
use sha2::{Digest, Sha256};

pub const DOCUMENT: u8 = 0;
pub const CHANGE: u8 = 1;
pub const DEFLATED_CHANGE: u8 = 2;
pub const BUNDLE: u8 = 3;

/// Inflating a seed's deflated change past this is not worth mutating.
const MAX_INFLATED: u64 = 16 << 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    pub chunk_type: u8,
    /// For a deflated change, the inflated data: it is deflated again when written.
    pub data: Vec<u8>,
}

/// Splits `bytes` into chunks, inflating deflated changes; `None` unless the bytes are
/// exactly a sequence of well-framed chunks.
pub fn split(mut bytes: &[u8]) -> Option<Vec<Chunk>> {
    let mut chunks = Vec::new();
    while !bytes.is_empty() {
        let rest = bytes.strip_prefix(&AUTOMERGE_MAGIC[..])?.get(4..)?;
        let (&chunk_type, rest) = rest.split_first()?;
        let (len, rest) = read_uleb(rest)?;
        let len = usize::try_from(len).ok().filter(|&len| len <= rest.len())?;
        let (data, after) = rest.split_at(len);
        let data = if chunk_type == DEFLATED_CHANGE {
            let mut inflated = Vec::new();
            DeflateDecoder::new(data).take(MAX_INFLATED).read_to_end(&mut inflated).ok()?;
            inflated
        } else {
            data.to_vec()
        };
        chunks.push(Chunk { chunk_type, data });
        bytes = after;
    }
    Some(chunks)
}

/// Writes chunks back with lengths and checksums that match their data.
pub fn join(chunks: &[Chunk]) -> Vec<u8> {
    let mut out = Vec::new();
    for chunk in chunks {
        let (checksum, data) = if chunk.chunk_type == DEFLATED_CHANGE {
            let mut deflate = DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
            deflate.write_all(&chunk.data).expect("writing to a Vec");
            (checksum(CHANGE, &chunk.data), deflate.finish().expect("writing to a Vec"))
        } else {
            (checksum(chunk.chunk_type, &chunk.data), chunk.data.clone())
        };
        out.extend_from_slice(&AUTOMERGE_MAGIC);
        out.extend_from_slice(&checksum);
        out.push(chunk.chunk_type);
        write_uleb(&mut out, data.len() as u64);
        out.extend_from_slice(&data);
    }
    out
}

fn checksum(chunk_type: u8, data: &[u8]) -> [u8; 4] {
    let mut hasher = Sha256::new();
    hasher.update([chunk_type]);
    let mut len = Vec::new();
    write_uleb(&mut len, data.len() as u64);
    hasher.update(&len);
    hasher.update(data);
    hasher.finalize()[..4].try_into().expect("SHA-256 is 32 bytes")
}

pub fn write_uleb(out: &mut Vec<u8>, mut value: u64) {
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

pub fn write_sleb(out: &mut Vec<u8>, mut value: i64) {
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        let done = (value == 0 && byte & 0x40 == 0) || (value == -1 && byte & 0x40 != 0);
        if done {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

fn read_uleb(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let mut value = 0u64;
    for (i, &byte) in bytes.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((value, &bytes[i + 1..]));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_and_joins_real_bytes_unchanged() {
        for sample in fixtures::samples() {
            let saved = sample.doc.save();
            let chunks = split(&saved).expect("a save is well framed");
            assert_eq!(join(&chunks), saved, "{}", sample.name);
            for mut change in sample.doc.get_changes(&[]) {
                let raw = change.raw_bytes().to_vec();
                assert_eq!(join(&split(&raw).unwrap()), raw);
                // A deflated change inflates to the change; written back, it loads.
                let bytes = change.bytes().into_owned();
                let rejoined = join(&split(&bytes).unwrap());
                assert_eq!(automerge::Change::from_bytes(rejoined).unwrap().hash(), change.hash());
            }
        }
    }

    #[test]
    fn a_changed_chunk_gets_a_valid_checksum() {
        let saved = fixtures::samples()[1].doc.save();
        let mut chunks = split(&saved).unwrap();
        chunks.push(chunks[0].clone());
        let doubled = join(&chunks);
        assert!(automerge::Automerge::load(&doubled).is_ok());
        assert!(split(&saved[..saved.len() - 1]).is_none());
    }

    #[test]
    fn leb128_round_trips() {
        let mut out = Vec::new();
        write_uleb(&mut out, 300);
        assert_eq!(out, [0xac, 0x02]);
        assert_eq!(read_uleb(&out), Some((300, &[][..])));
        out.clear();
        write_sleb(&mut out, -1);
        assert_eq!(out, [0x7f]);
    }
}
