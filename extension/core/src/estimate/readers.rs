//! Bytes read one at a time, from a slice or an inflating stream, and the LEB128 numbers
//! in them: what the column reading of the estimate reads through.

use std::io::{ErrorKind, Read};

use flate2::bufread::DeflateDecoder;

use crate::leb128;

/// An unsigned LEB128 number (see [`leb128::read_uleb`]).
pub(super) fn uleb(src: &mut impl Bytes) -> Option<u64> {
    leb128::read_uleb(|| src.byte())
}

/// A signed LEB128 number (see [`leb128::read_sleb`]).
pub(super) fn sleb(src: &mut impl Bytes) -> Option<i64> {
    leb128::read_sleb(|| src.byte())
}

/// Bytes read one at a time, from a slice or an inflating stream.
pub(super) trait Bytes {
    fn byte(&mut self) -> Option<u8>;
    /// Skips up to `n` bytes; returns how many there were.
    fn skip(&mut self, n: u64) -> u64;
}

/// A reader that can start a second reader at an earlier position of the same bytes.
pub(super) trait Rewind: Bytes + Sized {
    fn pos(&self) -> u64;
    fn rewind(&self, pos: u64) -> Self;
}

pub(super) struct Cursor<'a> {
    data: &'a [u8],
    pub(super) pos: usize,
}

impl<'a> Cursor<'a> {
    pub(super) fn new(data: &'a [u8]) -> Self {
        Cursor { data, pos: 0 }
    }

    pub(super) fn take(&mut self, n: u64) -> Option<&'a [u8]> {
        let n = usize::try_from(n).ok()?;
        let end = self.pos.checked_add(n).filter(|end| *end <= self.data.len())?;
        let taken = &self.data[self.pos..end];
        self.pos = end;
        Some(taken)
    }
}

impl Bytes for Cursor<'_> {
    fn byte(&mut self) -> Option<u8> {
        let b = *self.data.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }

    fn skip(&mut self, n: u64) -> u64 {
        let left = (self.data.len() - self.pos) as u64;
        let n = n.min(left);
        self.pos += n as usize;
        n
    }
}

impl Rewind for Cursor<'_> {
    fn pos(&self) -> u64 {
        self.pos as u64
    }

    fn rewind(&self, pos: u64) -> Self {
        Cursor { data: self.data, pos: (pos as usize).min(self.data.len()) }
    }
}

/// At most `left` bytes of another reader.
pub(super) struct Limited<'s, S> {
    pub(super) inner: &'s mut S,
    pub(super) left: u64,
}

impl<S: Bytes> Bytes for Limited<'_, S> {
    fn byte(&mut self) -> Option<u8> {
        if self.left == 0 {
            return None;
        }
        let b = self.inner.byte()?;
        self.left -= 1;
        Some(b)
    }

    fn skip(&mut self, n: u64) -> u64 {
        let skipped = self.inner.skip(n.min(self.left));
        self.left -= skipped;
        skipped
    }
}

pub(super) const INFLATE_BUFFER: usize = 16 << 10;

/// Raw DEFLATE data inflated through a fixed buffer. A corrupt stream ends where the
/// damage is, as Automerge's own inflating does (it then refuses the chunk).
pub(super) struct Inflate<'a> {
    compressed: &'a [u8],
    decoder: DeflateDecoder<&'a [u8]>,
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    /// Bytes handed out or skipped.
    pos: u64,
    ended: bool,
}

impl<'a> Inflate<'a> {
    pub(super) fn new(compressed: &'a [u8]) -> Self {
        Inflate {
            compressed,
            decoder: DeflateDecoder::new(compressed),
            buf: vec![0; INFLATE_BUFFER].into_boxed_slice(),
            start: 0,
            end: 0,
            pos: 0,
            ended: false,
        }
    }

    /// Everything inflated so far.
    pub(super) fn produced(&self) -> u64 {
        self.pos + (self.end - self.start) as u64
    }
}

impl Bytes for Inflate<'_> {
    fn byte(&mut self) -> Option<u8> {
        if self.start == self.end && !self.refill() {
            return None;
        }
        let b = self.buf[self.start];
        self.start += 1;
        self.pos += 1;
        Some(b)
    }

    fn skip(&mut self, n: u64) -> u64 {
        let mut skipped = 0u64;
        while skipped < n {
            if self.start == self.end && !self.refill() {
                break;
            }
            let step = ((self.end - self.start) as u64).min(n - skipped);
            self.start += step as usize;
            self.pos += step;
            skipped += step;
        }
        skipped
    }
}

impl Inflate<'_> {
    fn refill(&mut self) -> bool {
        if self.ended {
            return false;
        }
        // A few kilobytes of DEFLATE can take seconds to inflate.
        crate::interrupts::check();
        loop {
            match self.decoder.read(&mut self.buf) {
                Ok(0) => {
                    self.ended = true;
                    return false;
                }
                Ok(n) => {
                    self.start = 0;
                    self.end = n;
                    return true;
                }
                Err(err) if err.kind() == ErrorKind::Interrupted => {}
                Err(_) => {
                    self.ended = true;
                    return false;
                }
            }
        }
    }
}

impl Rewind for Inflate<'_> {
    fn pos(&self) -> u64 {
        self.pos
    }

    fn rewind(&self, pos: u64) -> Self {
        let mut again = Inflate::new(self.compressed);
        again.skip(pos);
        again
    }
}
