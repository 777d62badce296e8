//! LEB128, the variable-length numbers of Automerge's binary format (automerge 0.12,
//! `storage/parse/leb128.rs`): seven bits a byte, low bits first, the high bit set on every
//! byte but the last; a signed number carries its sign in bit 6 of its last byte.
//!
//! The one home of reading and writing them: the estimate and the chunk framing
//! ([`crate::chunk`]) read them here, and the fixtures, the fuzzer and the tests write the
//! bytes they build with [`write_uleb`] and [`write_sleb`].

/// An unsigned number of at most ten bytes, read a byte at a time from `next`; one too
/// large for 64 bits saturates. `None` when the bytes end first, or run past ten.
pub fn read_uleb(mut next: impl FnMut() -> Option<u8>) -> Option<u64> {
    let mut value = 0u64;
    let mut shift = 0u32;
    loop {
        let b = next()?;
        let bits = u64::from(b & 0x7f);
        if shift < 64 {
            if shift == 63 && bits > 1 {
                value = u64::MAX;
            } else {
                value |= bits << shift;
            }
        }
        if b & 0x80 == 0 {
            return Some(value);
        }
        shift += 7;
        if shift >= 70 {
            return None;
        }
    }
}

/// A signed number of at most ten bytes, read a byte at a time from `next`.
pub fn read_sleb(mut next: impl FnMut() -> Option<u8>) -> Option<i64> {
    let mut value = 0i64;
    let mut shift = 0u32;
    loop {
        let b = next()?;
        if shift < 64 {
            value |= i64::from(b & 0x7f) << shift;
        }
        shift += 7;
        if b & 0x80 == 0 {
            if shift < 64 && b & 0x40 != 0 {
                value |= -1i64 << shift;
            }
            return Some(value);
        }
        if shift >= 70 {
            return None;
        }
    }
}

/// The unsigned number `bytes` start with, as [`read_uleb`] reads it, and the bytes after.
pub fn split_uleb(bytes: &[u8]) -> Option<(u64, &[u8])> {
    // Most numbers the structure index reads are below 128: one byte, no loop.
    if let Some((&byte, rest)) = bytes.split_first() {
        if byte < 0x80 {
            return Some((u64::from(byte), rest));
        }
    }
    let mut rest = bytes.iter();
    let value = read_uleb(|| rest.next().copied())?;
    Some((value, rest.as_slice()))
}

/// Appends `value` as an unsigned LEB128 number.
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

/// Appends `value` as a signed LEB128 number.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_back_as_written() {
        for value in [0, 1, 127, 128, 300, u64::from(u32::MAX), u64::MAX] {
            let mut out = Vec::new();
            write_uleb(&mut out, value);
            out.push(0xaa);
            assert_eq!(split_uleb(&out), Some((value, &[0xaa][..])));
        }
        for value in [0, -1, 63, -64, 64, -65, i64::MIN, i64::MAX] {
            let mut out = Vec::new();
            write_sleb(&mut out, value);
            let mut bytes = out.into_iter();
            assert_eq!(read_sleb(|| bytes.next()), Some(value));
        }
    }

    #[test]
    fn numbers_too_large_saturate_and_too_long_are_refused() {
        // Ten bytes whose last holds more than the 64th bit.
        let mut big = vec![0xff; 9];
        big.push(0x7f);
        assert_eq!(split_uleb(&big), Some((u64::MAX, &[][..])));
        assert_eq!(split_uleb(&[0x80; 10]), None);
        assert_eq!(split_uleb(&[0x80, 0x80]), None);
        assert_eq!(split_uleb(&[]), None);
    }
}
