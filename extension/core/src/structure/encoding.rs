//! The index's stored form: one stream per field (ids as differences from their
//! neighbours, map keys as indexes into a table of key strings), so that like values sit
//! together, then zstd over all of it. Objects go in id order, so equal indexes encode
//! equally. Ids that repeat (the parent siblings share, the id where a run cut by an
//! insertion goes on) are written as their place among the recently written ones.
//!
//! Encoding version 3 writes that; version 2, which wrote every id as a difference and
//! used DEFLATE (zstd encodes the same streams in about half the time, which appended
//! writes pay), still reads.

use rustc_hash::FxHashMap;
use std::io::Read;
use std::rc::Rc;

use automerge::ActorId;
use flate2::read::DeflateDecoder;
#[cfg(test)]
use flate2::write::DeflateEncoder;

use super::{
    Body, ElemState, KeyName, MapKeys, ObjKind, Object, Objects, OpId, ParentKey, Run, Structure,
    ValueKind, ValueOp, Values, ROOT,
};
use crate::leb128;

const ENCODING_VERSION: u8 = 3;
/// The version before recently used ids, still read.
const DIFFERENCES_VERSION: u8 = 2;

/// How many recently used ids an id may be written as the place of.
const RECENT: usize = 16;
/// In version 3's parent stream: the parent is the object written just before.
const PARENT_PREVIOUS: u64 = RECENT as u64;
/// In version 3's parent and run start streams: the id follows, written out.
const WRITTEN_OUT: u64 = RECENT as u64 + 1;

/// DEFLATE makes at most about 1,032 bytes of each byte it reads; zstd can make more, but
/// not of an index, whose streams are never that uniform. A raw length beyond this is
/// corrupt, and is refused before anything is allocated for it (the write then loads).
const MAX_INFLATION: usize = 1100;

/// zstd's default level: higher levels cost a write more than they save.
const ZSTD_LEVEL: i32 = 3;

/// The streams, in the order they are written.
#[derive(Default)]
struct Streams {
    actors: Vec<u8>,
    keys: Vec<u8>,
    obj_counter: Vec<u8>,
    obj_actor: Vec<u8>,
    obj_code: Vec<u8>,
    parent_tag: Vec<u8>,
    parent_obj: Vec<u8>,
    parent_key: Vec<u8>,
    key_count: Vec<u8>,
    key_index: Vec<u8>,
    value_count: Vec<u8>,
    value_counter: Vec<u8>,
    value_actor: Vec<u8>,
    value_kind: Vec<u8>,
    run_count: Vec<u8>,
    run_actor: Vec<u8>,
    run_start: Vec<u8>,
    run_len: Vec<u8>,
    run_state: Vec<u8>,
    run_width: Vec<u8>,
    run_kind: Vec<u8>,
}

macro_rules! each_stream {
    ($streams:expr, $f:expr) => {{
        let s = $streams;
        for stream in [
            &mut s.actors,
            &mut s.keys,
            &mut s.obj_counter,
            &mut s.obj_actor,
            &mut s.obj_code,
            &mut s.parent_tag,
            &mut s.parent_obj,
            &mut s.parent_key,
            &mut s.key_count,
            &mut s.key_index,
            &mut s.value_count,
            &mut s.value_counter,
            &mut s.value_actor,
            &mut s.value_kind,
            &mut s.run_count,
            &mut s.run_actor,
            &mut s.run_start,
            &mut s.run_len,
            &mut s.run_state,
            &mut s.run_width,
            &mut s.run_kind,
        ] {
            $f(stream);
        }
    }};
}

const PARENT_NONE: u8 = 0;
const PARENT_KEY: u8 = 1;
/// A list or text element that holds the object its own insertion made.
const PARENT_OWN_ELEMENT: u8 = 2;
const PARENT_ELEMENT: u8 = 3;

const STATE_HIDDEN: u8 = 0;
const STATE_SHOWN: u8 = 1;
const STATE_VALUES: u8 = 2;

fn uleb(out: &mut Vec<u8>, value: u64) {
    leb128::write_uleb(out, value);
}

fn sleb(out: &mut Vec<u8>, value: i64) {
    leb128::write_sleb(out, value);
}

fn difference(value: u64, from: u64) -> i64 {
    value.wrapping_sub(from) as i64
}

/// The last [`RECENT`] ids written, the latest first; the writer and the reader keep the
/// same list, so an id found there is written as its place. A ring: a write decodes and
/// encodes one for every run of a long text, and putting one first moves nothing.
struct Recent<T> {
    items: [T; RECENT],
    /// Where the latest is.
    first: usize,
    len: usize,
}

impl<T: Copy + PartialEq + Default> Recent<T> {
    fn new() -> Recent<T> {
        Recent { items: [T::default(); RECENT], first: 0, len: 0 }
    }

    fn at(&self, place: usize) -> usize {
        (self.first + place) % RECENT
    }

    fn place(&self, item: T) -> Option<usize> {
        (0..self.len).find(|place| self.items[self.at(*place)] == item)
    }

    /// The item at `place` (as read back), which it drops: who reads an id there puts it
    /// first again, or the id after it.
    fn take(&mut self, place: u64) -> Option<T> {
        let place = usize::try_from(place).ok().filter(|place| *place < self.len)?;
        let item = self.items[self.at(place)];
        self.forget(place);
        Some(item)
    }

    /// Puts `item` first, dropping the oldest when full. An item already there stays
    /// where it is: who puts one found there forgets it first.
    fn put(&mut self, item: T) {
        self.first = self.at(RECENT - 1);
        self.items[self.first] = item;
        self.len = (self.len + 1).min(RECENT);
    }

    /// Drops the item at `place` (which is there), moving the later ones up.
    fn forget(&mut self, place: usize) {
        for newer in (1..=place).rev() {
            self.items[self.at(newer)] = self.items[self.at(newer - 1)];
        }
        self.first = self.at(1);
        self.len -= 1;
    }
}

impl Structure {
    /// The stored form, of an index that includes the first `includes` of the changes
    /// appended to the document since its last save.
    pub fn encode(&self, includes: u32) -> Vec<u8> {
        let mut s = Streams::default();
        uleb(&mut s.actors, self.actors.len() as u64);
        for (actor, latest) in self.actors.iter().zip(&self.latest_max_op) {
            uleb(&mut s.actors, actor.to_bytes().len() as u64);
            s.actors.extend_from_slice(actor.to_bytes());
            uleb(&mut s.actors, latest.map_or(0, |max_op| max_op + 1));
        }
        let mut keys: FxHashMap<KeyName, u64> = FxHashMap::default();
        let mut key_index =
            |s: &mut Streams, key: &KeyName, out: fn(&mut Streams) -> &mut Vec<u8>| {
                let next = keys.len() as u64;
                let index = *keys.entry(key.clone()).or_insert_with(|| {
                    uleb(&mut s.keys, key.len() as u64);
                    s.keys.extend_from_slice(key.as_bytes());
                    next
                });
                uleb(out(s), index);
            };
        let mut ids: Vec<&OpId> = self.objects.keys().collect();
        ids.sort();
        let mut previous = ROOT;
        let mut parents = Recent::new();
        for obj in ids {
            let object = &self.objects[obj];
            uleb(&mut s.obj_counter, obj.counter - previous.counter);
            uleb(&mut s.obj_actor, u64::from(obj.actor));
            let body = match object.body {
                Body::Map(_) => 0,
                Body::Seq(_) => 1,
                Body::Opaque => 2,
            };
            s.obj_code.push(object.kind.code() | body << 4);
            match &object.parent {
                None => s.parent_tag.push(PARENT_NONE),
                Some((parent, key)) => {
                    match parents.place(*parent) {
                        Some(place) => {
                            uleb(&mut s.parent_obj, place as u64);
                            parents.forget(place);
                        }
                        None if *parent == previous => uleb(&mut s.parent_obj, PARENT_PREVIOUS),
                        None => {
                            uleb(&mut s.parent_obj, WRITTEN_OUT);
                            sleb(&mut s.parent_obj, difference(parent.counter, obj.counter));
                            uleb(&mut s.parent_obj, u64::from(parent.actor));
                        }
                    }
                    parents.put(*parent);
                    match key {
                        ParentKey::Map(key) => {
                            s.parent_tag.push(PARENT_KEY);
                            key_index(&mut s, key, |s| &mut s.parent_key);
                        }
                        ParentKey::Elem(elem) if elem == obj => {
                            s.parent_tag.push(PARENT_OWN_ELEMENT)
                        }
                        ParentKey::Elem(elem) => {
                            s.parent_tag.push(PARENT_ELEMENT);
                            sleb(&mut s.parent_key, difference(elem.counter, obj.counter));
                            uleb(&mut s.parent_key, u64::from(elem.actor));
                        }
                    }
                }
            }
            let values = |s: &mut Streams, values: &[ValueOp]| {
                uleb(&mut s.value_count, values.len() as u64);
                for value in values {
                    sleb(&mut s.value_counter, difference(value.id.counter, obj.counter));
                    uleb(&mut s.value_actor, u64::from(value.id.actor));
                    s.value_kind.push(value.kind.code());
                }
            };
            match &object.body {
                Body::Map(map) => {
                    uleb(&mut s.key_count, map.len() as u64);
                    for (key, current) in map.iter() {
                        key_index(&mut s, key, |s| &mut s.key_index);
                        values(&mut s, current);
                    }
                }
                Body::Seq(runs) => {
                    uleb(&mut s.run_count, runs.len() as u64);
                    let mut end = obj.counter;
                    let mut ends = Recent::new();
                    for run in runs {
                        uleb(&mut s.run_actor, u64::from(run.actor));
                        match ends.place((run.actor, run.start)) {
                            Some(place) => {
                                uleb(&mut s.run_start, place as u64);
                                ends.forget(place);
                            }
                            None => {
                                uleb(&mut s.run_start, WRITTEN_OUT);
                                sleb(&mut s.run_start, difference(run.start, end));
                            }
                        }
                        end = run.start + run.len;
                        ends.put((run.actor, end));
                        uleb(&mut s.run_len, run.len);
                        match &run.state {
                            ElemState::Hidden => s.run_state.push(STATE_HIDDEN),
                            ElemState::Shown { width, kind } => {
                                s.run_state.push(STATE_SHOWN);
                                uleb(&mut s.run_width, u64::from(*width));
                                s.run_kind.push(kind.code());
                            }
                            ElemState::Values { width, values: current } => {
                                s.run_state.push(STATE_VALUES);
                                uleb(&mut s.run_width, u64::from(*width));
                                values(&mut s, current);
                            }
                        }
                    }
                }
                Body::Opaque => {}
            }
            previous = *obj;
        }
        let mut raw = Vec::new();
        each_stream!(&mut s, |stream: &mut Vec<u8>| {
            uleb(&mut raw, stream.len() as u64);
            raw.append(stream);
        });
        let mut out = vec![ENCODING_VERSION];
        uleb(&mut out, u64::from(includes));
        uleb(&mut out, raw.len() as u64);
        out.extend(zstd::bulk::compress(&raw, ZSTD_LEVEL).expect("compressing in memory"));
        out
    }

    /// The stored form read back, and how many of the changes appended since the last
    /// save it includes (`None`: all of them, as version 2 kept it); `None` (the writes
    /// load) when it does not read.
    pub fn decode(bytes: &[u8]) -> Option<(Structure, Option<u32>)> {
        let (version, includes, rest) = split_header(bytes)?;
        let (raw_len, compressed) = leb128::split_uleb(rest)?;
        let raw_len = usize::try_from(raw_len).ok()?;
        if raw_len > compressed.len().saturating_mul(MAX_INFLATION) {
            return None;
        }
        let raw = match version {
            DIFFERENCES_VERSION => {
                let mut raw = Vec::with_capacity(raw_len);
                DeflateDecoder::new(compressed)
                    .take(raw_len as u64 + 1)
                    .read_to_end(&mut raw)
                    .ok()?;
                raw
            }
            _ => zstd::bulk::decompress(compressed, raw_len).ok()?,
        };
        if raw.len() != raw_len {
            return None;
        }
        let mut all = Reader(&raw);
        let mut s = Streams::default();
        let mut ok = true;
        each_stream!(&mut s, |stream: &mut Vec<u8>| {
            match all.uleb().and_then(|len| all.take(len)) {
                Some(bytes) => stream.extend_from_slice(bytes),
                None => ok = false,
            }
        });
        if !ok || !all.0.is_empty() {
            return None;
        }
        Some((read_streams(&s, version)?, includes))
    }

    /// How many of the changes appended since the last save the stored form includes, as
    /// [`Structure::decode`] says, read from its header alone.
    pub fn includes(bytes: &[u8]) -> Option<Option<u32>> {
        split_header(bytes).map(|(_, includes, _)| includes)
    }
}

/// The stored form's encoding version, how many appended changes it includes, and the rest.
fn split_header(bytes: &[u8]) -> Option<(u8, Option<u32>, &[u8])> {
    let (&version, rest) = bytes.split_first()?;
    match version {
        ENCODING_VERSION => {
            let (includes, rest) = leb128::split_uleb(rest)?;
            Some((version, Some(u32::try_from(includes).ok()?), rest))
        }
        DIFFERENCES_VERSION => Some((version, None, rest)),
        _ => None,
    }
}

fn read_streams(s: &Streams, version: u8) -> Option<Structure> {
    let recent_ids = version >= ENCODING_VERSION;
    let mut actors_stream = Reader(&s.actors);
    let (mut actors, mut latest_max_op) = (Vec::new(), Vec::new());
    for _ in 0..actors_stream.uleb()? {
        let len = actors_stream.uleb()?;
        actors.push(ActorId::from(actors_stream.take(len)?));
        latest_max_op.push(actors_stream.uleb()?.checked_sub(1));
    }
    let mut keys_stream = Reader(&s.keys);
    let mut keys = Vec::new();
    while !keys_stream.0.is_empty() {
        keys.push(Rc::<str>::from(keys_stream.string()?));
    }
    let actor_count = actors.len() as u64;
    let actor = |r: &mut Reader<'_>| r.uleb().filter(|a| *a < actor_count.max(1)).map(|a| a as u32);
    let key = |r: &mut Reader<'_>| keys.get(usize::try_from(r.uleb()?).ok()?).cloned();
    let [mut obj_counter, mut obj_actor, mut obj_code, mut parent_tag, mut parent_obj, mut parent_key] =
        [&s.obj_counter, &s.obj_actor, &s.obj_code, &s.parent_tag, &s.parent_obj, &s.parent_key]
            .map(|stream| Reader(stream));
    let [mut key_count, mut key_index, mut value_count, mut value_counter, mut value_actor, mut value_kind] =
        [
            &s.key_count,
            &s.key_index,
            &s.value_count,
            &s.value_counter,
            &s.value_actor,
            &s.value_kind,
        ]
        .map(|stream| Reader(stream));
    let [mut run_count, mut run_actor, mut run_start, mut run_len, mut run_state, mut run_width, mut run_kind] =
        [
            &s.run_count,
            &s.run_actor,
            &s.run_start,
            &s.run_len,
            &s.run_state,
            &s.run_width,
            &s.run_kind,
        ]
        .map(|stream| Reader(stream));
    // Each object takes at least a byte of its counter stream.
    let mut objects = Objects::with_capacity_and_hasher(s.obj_counter.len(), Default::default());
    let (mut previous, mut previous_parent) = (ROOT, 0u64);
    let mut parents = Recent::new();
    while !obj_counter.0.is_empty() {
        let obj = OpId {
            counter: previous.counter.checked_add(obj_counter.uleb()?)?,
            actor: actor(&mut obj_actor)?,
        };
        let code = obj_code.byte()?;
        let kind = ObjKind::from_code(code & 0xf)?;
        let parent = match parent_tag.byte()? {
            PARENT_NONE => None,
            tag => {
                let parent = if recent_ids {
                    let parent = match parent_obj.uleb()? {
                        PARENT_PREVIOUS => previous,
                        WRITTEN_OUT => {
                            let counter = obj.counter.wrapping_add(parent_obj.sleb()? as u64);
                            OpId { counter, actor: actor(&mut parent_obj)? }
                        }
                        place => parents.take(place)?,
                    };
                    parents.put(parent);
                    parent
                } else {
                    let counter = previous_parent.wrapping_add(parent_obj.sleb()? as u64);
                    previous_parent = counter;
                    OpId { counter, actor: actor(&mut parent_obj)? }
                };
                let key = match tag {
                    PARENT_KEY => ParentKey::Map(key(&mut parent_key)?),
                    PARENT_OWN_ELEMENT => ParentKey::Elem(obj),
                    PARENT_ELEMENT => {
                        let counter = obj.counter.wrapping_add(parent_key.sleb()? as u64);
                        ParentKey::Elem(OpId { counter, actor: actor(&mut parent_key)? })
                    }
                    _ => return None,
                };
                Some((parent, key))
            }
        };
        let mut values = || -> Option<Values> {
            let count = value_count.uleb()?;
            let mut values = Values::new();
            for _ in 0..count {
                let counter = obj.counter.wrapping_add(value_counter.sleb()? as u64);
                let id = OpId { counter, actor: actor(&mut value_actor)? };
                values.push(ValueOp { id, kind: ValueKind::from_code(value_kind.byte()?)? });
            }
            Some(values)
        };
        let body = match code >> 4 {
            0 => {
                let count = key_count.uleb()?;
                let mut map = Vec::with_capacity(count.min(key_index.0.len() as u64) as usize);
                for _ in 0..count {
                    let key = key(&mut key_index)?;
                    map.push((key, values()?));
                }
                // Keys were written in order; a value that says otherwise is corrupt.
                if !map.is_sorted_by(|(a, _): &(Rc<str>, _), (b, _)| a < b) {
                    return None;
                }
                Body::Map(MapKeys(map))
            }
            1 => {
                let count = run_count.uleb()?;
                // Each run takes at least a byte of the actor stream.
                let mut runs = Vec::with_capacity(count.min(run_actor.0.len() as u64) as usize);
                let mut end = obj.counter;
                let mut ends = Recent::new();
                for _ in 0..count {
                    let actor = actor(&mut run_actor)?;
                    // Version 2 wrote every start out.
                    let code = if recent_ids { run_start.uleb()? } else { WRITTEN_OUT };
                    let start = match code {
                        WRITTEN_OUT => end.wrapping_add(run_start.sleb()? as u64),
                        place => match ends.take(place)? {
                            (known_actor, start) if known_actor == actor => start,
                            _ => return None,
                        },
                    };
                    let len = run_len.uleb()?;
                    end = start.checked_add(len)?;
                    ends.put((actor, end));
                    let state = match run_state.byte()? {
                        STATE_HIDDEN => ElemState::Hidden,
                        STATE_SHOWN => ElemState::Shown {
                            width: u32::try_from(run_width.uleb()?).ok()?,
                            kind: ValueKind::from_code(run_kind.byte()?)?,
                        },
                        STATE_VALUES => ElemState::Values {
                            width: u32::try_from(run_width.uleb()?).ok()?,
                            values: Box::new(values()?),
                        },
                        _ => return None,
                    };
                    runs.push(Run { actor, start, len, state });
                }
                Body::Seq(runs)
            }
            2 => Body::Opaque,
            _ => return None,
        };
        objects.insert(obj, Object { kind, parent, body });
        previous = obj;
    }
    Some(Structure { actors, latest_max_op, objects })
}

impl ObjKind {
    fn code(self) -> u8 {
        match self {
            ObjKind::Map => 0,
            ObjKind::Table => 1,
            ObjKind::List => 2,
            ObjKind::Text => 3,
        }
    }

    fn from_code(code: u8) -> Option<ObjKind> {
        [ObjKind::Map, ObjKind::Table, ObjKind::List, ObjKind::Text].get(code as usize).copied()
    }
}

impl ValueKind {
    fn code(self) -> u8 {
        match self {
            ValueKind::Scalar => 0,
            ValueKind::Counter => 1,
            ValueKind::Unknown => 2,
            ValueKind::Object(kind) => 3 + kind.code(),
        }
    }

    fn from_code(code: u8) -> Option<ValueKind> {
        Some(match code {
            0 => ValueKind::Scalar,
            1 => ValueKind::Counter,
            2 => ValueKind::Unknown,
            other => ValueKind::Object(ObjKind::from_code(other.checked_sub(3)?)?),
        })
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }

    fn uleb(&mut self) -> Option<u64> {
        let (value, rest) = leb128::split_uleb(self.0)?;
        self.0 = rest;
        Some(value)
    }

    fn sleb(&mut self) -> Option<i64> {
        let mut bytes = self.0.iter();
        let value = leb128::read_sleb(|| bytes.next().copied())?;
        self.0 = bytes.as_slice();
        Some(value)
    }

    fn take(&mut self, len: u64) -> Option<&'a [u8]> {
        let len = usize::try_from(len).ok().filter(|len| *len <= self.0.len())?;
        let (taken, rest) = self.0.split_at(len);
        self.0 = rest;
        Some(taken)
    }

    fn string(&mut self) -> Option<String> {
        let len = self.uleb()?;
        String::from_utf8(self.take(len)?.to_vec()).ok()
    }
}

#[cfg(test)]
mod tests;
