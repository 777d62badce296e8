//! The two tables of the stored header, as bytes: the actor table (each actor's latest
//! change) and the root table that format version 2 kept (the operations whose values the
//! root keys show); and the little-endian integers the header is written in.

use automerge::{ActorId, ChangeHash};

use super::{ActorClock, RootOps, HASH_LEN};
use crate::Error;

pub(super) fn encode_clock(clock: &ActorClock) -> Vec<u8> {
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

pub(super) fn decode_clock(bytes: &[u8]) -> Result<ActorClock, Error> {
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

pub(super) fn decode_root(bytes: &[u8]) -> Result<RootOps, Error> {
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

pub(super) fn to_u32(n: usize) -> u32 {
    u32::try_from(n).expect("an automerge value larger than 4 GiB cannot be stored")
}

pub(super) fn read_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

pub(super) fn read_u64(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}
