//! Chunk framing, the outer layer of Automerge's binary format (automerge 0.12,
//! `storage/chunk.rs`): bytes are a concatenation of chunks, each four magic bytes, a
//! four-byte checksum (the start of the SHA-256 of the type, the uLEB128 length and the
//! data), a type, the uLEB128 length of the data, then the data.
//!
//! The one home of that vocabulary: the estimate, the loaders, the writes and the repair
//! split input with it here, and the fixtures (with them the fuzzer and the tests) build
//! their chunks with these types.

use crate::{leb128, Error};

/// The four bytes every chunk starts with (kept in `format`, which checks them first).
pub use crate::format::AUTOMERGE_MAGIC;

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
