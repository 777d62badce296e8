//! Chunk framing, the outer layer of Automerge's binary format (automerge 0.12,
//! `storage/chunk.rs`): bytes are a concatenation of chunks, each four magic bytes, a
//! four-byte checksum (the start of the SHA-256 of the type, the uLEB128 length and the
//! data), a type, the uLEB128 length of the data, then the data.
//!
//! The one home of that vocabulary, the lowest layer of the core above its base: the
//! estimate, the loaders, the writes and the repair split input with it here (a stored
//! payload is a save, then any change chunks appended since), and the fixtures (with them
//! the fuzzer and the tests) build their chunks with these types.

use automerge::Change;

use crate::guard::no_panic;
use crate::{leb128, Error};

/// The four bytes every chunk starts with, which a stored payload must start with too.
pub const AUTOMERGE_MAGIC: [u8; 4] = [0x85, 0x6f, 0x4a, 0x83];

/// A document: the whole history in columns.
pub const DOCUMENT: u8 = 0;
/// One change.
pub const CHANGE: u8 = 1;
/// One change whose data is DEFLATE-compressed (automerge's `ChunkType::Compressed`); its
/// checksum is the change's it inflates to.
pub const COMPRESSED_CHANGE: u8 = 2;
/// Several changes in columns, as `Automerge::bundle` writes them.
pub const BUNDLE: u8 = 3;

fn not_automerge(what: &str) -> Error {
    Error::NotAutomerge(what.into())
}

/// The chunks of `input` in order, each as its type and its whole bytes (header included);
/// a malformed chunk is an error, and the last item.
pub fn chunks(input: &[u8]) -> impl Iterator<Item = Result<(u8, &[u8]), Error>> {
    let mut rest = Some(input);
    std::iter::from_fn(move || {
        let current = rest.filter(|bytes| !bytes.is_empty())?;
        match split_first(current) {
            Ok((chunk_type, _, after)) => {
                rest = Some(after);
                Some(Ok((chunk_type, &current[..current.len() - after.len()])))
            }
            Err(err) => {
                rest = None;
                Some(Err(err))
            }
        }
    })
}

/// Splits off the first chunk: its type, its data and the rest of the input.
pub fn split_first(input: &[u8]) -> Result<(u8, &[u8], &[u8]), Error> {
    if !input.starts_with(&AUTOMERGE_MAGIC[..input.len().min(4)]) {
        return Err(not_automerge("missing the Automerge magic bytes"));
    }
    if input.len() < 9 {
        return Err(not_automerge("truncated chunk header"));
    }
    let chunk_type = input[8];
    let (len, data) =
        leb128::split_uleb(&input[9..]).ok_or_else(|| not_automerge("bad chunk length"))?;
    match usize::try_from(len) {
        Ok(len) if len <= data.len() => Ok((chunk_type, &data[..len], &data[len..])),
        _ => Err(not_automerge("truncated chunk: the chunk runs past the end")),
    }
}

/// The checksum Automerge writes in a chunk's header: the first four bytes of the SHA-256
/// of the chunk type, the uLEB128 length and the data (for a deflated change, of the change
/// it inflates to).
pub fn checksum(chunk_type: u8, data: &[u8]) -> [u8; 4] {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    hasher.update([chunk_type]);
    let mut len = Vec::new();
    leb128::write_uleb(&mut len, data.len() as u64);
    hasher.update(&len);
    hasher.update(data);
    hasher.finalize()[..4].try_into().expect("SHA-256 is 32 bytes")
}

/// `data` framed as a chunk of `chunk_type` (not a deflated change): the magic bytes, its
/// checksum, the type and the length.
pub fn framed(chunk_type: u8, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 16);
    out.extend_from_slice(&AUTOMERGE_MAGIC);
    out.extend_from_slice(&checksum(chunk_type, data));
    out.push(chunk_type);
    leb128::write_uleb(&mut out, data.len() as u64);
    out.extend_from_slice(data);
    out
}

/// `bytes` split after a leading document chunk (a save), when they start with one: the
/// save and what follows it.
pub fn split_save(bytes: &[u8]) -> (&[u8], &[u8]) {
    match chunks(bytes).next() {
        Some(Ok((DOCUMENT, chunk))) => {
            let end = chunk.as_ptr() as usize + chunk.len() - bytes.as_ptr() as usize;
            bytes.split_at(end)
        }
        _ => (&[], bytes),
    }
}

/// How many change chunks follow the document chunk that `bytes` start with, when that is
/// all they hold: the shape of a save, and of a stored payload with changes appended.
pub fn changes_after_a_save(bytes: &[u8]) -> Option<u32> {
    let mut chunks = chunks(bytes);
    if chunks.next()?.ok()?.0 != DOCUMENT {
        return None;
    }
    chunks.try_fold(0u32, |changes, chunk| match chunk {
        Ok((CHANGE | COMPRESSED_CHANGE, _)) => changes.checked_add(1),
        _ => None,
    })
}

/// The changes in `bytes`, when they are nothing but well-formed change chunks.
pub fn parse_changes(bytes: &[u8]) -> Option<Vec<Change>> {
    chunks(bytes).map(|chunk| parse_change(chunk.ok()?.1)).collect()
}

/// One change chunk (plain or compressed) parsed; `None` for any other chunk.
pub fn parse_change(chunk: &[u8]) -> Option<Change> {
    if !matches!(chunk.get(8), Some(&(CHANGE | COMPRESSED_CHANGE))) {
        return None;
    }
    let change = no_panic(|| Change::try_from(chunk)).ok()?.ok()?;
    // Parsing does not check the checksum (the first bytes of the change's hash, also for
    // a compressed chunk); every load does, and refuses the whole payload.
    (chunk.get(4..8)? == &change.hash().0[..4]).then_some(change)
}
