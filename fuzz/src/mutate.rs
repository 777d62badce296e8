//! Mutations: byte edits inside a chunk (written back with a valid checksum, so that they
//! reach the column decoders), edits of the chunk list, and raw edits that break framing.

use pg_automerge_core::{chunk, leb128};

use crate::chunks::{self, Chunk};

/// SplitMix64: a seeded generator, so that a run is repeatable from its seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number below `n` (which must not be 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// Numbers that make run lengths, counts, lengths and indexes interesting.
const INTERESTING: &[u64] = &[
    0,
    1,
    2,
    0x3f,
    0x40,
    0x7f,
    0x80,
    0xff,
    0x100,
    0x7fff,
    0xffff,
    1 << 20,
    1 << 24,
    i32::MAX as u64,
    u32::MAX as u64,
    1 << 40,
    i64::MAX as u64,
    u64::MAX,
];

/// A mutant of `input`; `other` is another corpus input to splice from.
pub fn mutate(rng: &mut Rng, input: &[u8], other: &[u8]) -> Vec<u8> {
    match chunks::split(input) {
        Some(mut list) if !list.is_empty() && rng.chance(85) => {
            let rounds = 1 + rng.below(3);
            for _ in 0..rounds {
                mutate_chunks(rng, &mut list, other);
            }
            chunks::join(&list)
        }
        _ => {
            let mut bytes = input.to_vec();
            let rounds = 1 + rng.below(4);
            for _ in 0..rounds {
                mutate_bytes(rng, &mut bytes, other);
            }
            bytes
        }
    }
}

fn mutate_chunks(rng: &mut Rng, list: &mut Vec<Chunk>, other: &[u8]) {
    let at = rng.below(list.len());
    match rng.below(10) {
        0 => {
            let copy = list[at].clone();
            list.insert(rng.below(list.len() + 1), copy);
        }
        1 if list.len() > 1 => {
            list.remove(at);
        }
        2 => {
            let to = rng.below(list.len());
            list.swap(at, to);
        }
        3 => {
            if let Some(theirs) = chunks::split(other).filter(|c| !c.is_empty()) {
                list.insert(rng.below(list.len() + 1), rng.pick(&theirs).clone());
            }
        }
        4 => {
            // A document read as a change, a change deflated, an unknown type.
            list[at].chunk_type = *rng.pick(&[
                chunk::DOCUMENT,
                chunk::CHANGE,
                chunk::COMPRESSED_CHANGE,
                chunk::BUNDLE,
                4,
            ]);
        }
        _ => {
            let other_data = chunks::split(other)
                .and_then(|c| c.first().map(|c| c.data.clone()))
                .unwrap_or_default();
            mutate_bytes(rng, &mut list[at].data, &other_data);
        }
    }
}

/// One edit of `bytes`.
pub fn mutate_bytes(rng: &mut Rng, bytes: &mut Vec<u8>, other: &[u8]) {
    if bytes.is_empty() {
        bytes.push(rng.next_u64() as u8);
        return;
    }
    let at = rng.below(bytes.len());
    match rng.below(11) {
        0 => bytes[at] ^= 1 << rng.below(8),
        1 => {
            let random = rng.next_u64() as u8;
            bytes[at] = *rng.pick(&[0, 1, 0x7f, 0x80, 0xff, random]);
        }
        2 => bytes[at] = bytes[at].wrapping_add(rng.below(5) as u8).wrapping_sub(2),
        3 => {
            let count = 1 + rng.below(8);
            let inserted: Vec<u8> = (0..count).map(|_| rng.next_u64() as u8).collect();
            bytes.splice(at..at, inserted);
        }
        4 => {
            let end = (at + 1 + rng.below(16)).min(bytes.len());
            bytes.drain(at..end);
        }
        5 => {
            let end = (at + 1 + rng.below(32)).min(bytes.len());
            let copy = bytes[at..end].to_vec();
            let to = rng.below(bytes.len() + 1);
            bytes.splice(to..to, copy);
        }
        6 | 7 => {
            // A big number where a count or run length may be: uLEB128 or signed LEB128,
            // inserted or written over what is there.
            let value = *rng.pick(INTERESTING);
            let mut encoded = Vec::new();
            if rng.chance(50) {
                leb128::write_uleb(&mut encoded, value);
            } else {
                leb128::write_sleb(&mut encoded, (value as i64).wrapping_neg());
            }
            let end = if rng.chance(50) { at } else { (at + encoded.len()).min(bytes.len()) };
            bytes.splice(at..end, encoded);
        }
        8 if !other.is_empty() => {
            let from = rng.below(other.len());
            let end = (from + 1 + rng.below(64)).min(other.len());
            bytes.splice(at..at, other[from..end].iter().copied());
        }
        9 if !other.is_empty() => {
            let from = rng.below(other.len());
            let len = (1 + rng.below(16)).min(other.len() - from).min(bytes.len() - at);
            bytes[at..at + len].copy_from_slice(&other[from..from + len]);
        }
        _ => bytes.truncate(at),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_mutants() {
        let saved = fixtures::samples()[1].doc.save();
        let run = |seed| {
            let mut rng = Rng::new(seed);
            (0..50).map(|_| mutate(&mut rng, &saved, &saved)).collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
        assert!(run(7).iter().any(|m| m != &saved), "mutants differ from the input");
    }

    #[test]
    fn most_mutants_keep_valid_checksums() {
        let saved = fixtures::samples()[1].doc.save();
        let mut rng = Rng::new(1);
        let framed =
            (0..200).filter(|_| chunks::split(&mutate(&mut rng, &saved, &saved)).is_some()).count();
        assert!(framed > 100, "only {framed} of 200 mutants are well framed");
    }
}
