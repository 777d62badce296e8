//! The index encoding's tests: round trips, version 2's form, and refusals.

use super::*;
use automerge::transaction::Transactable;
use automerge::{AutoCommit, ObjType, ROOT};
use proptest::prelude::*;
use std::io::Write;

fn sample() -> Vec<u8> {
    let mut doc = AutoCommit::new();
    let text = doc.put_object(ROOT, "text", ObjType::Text).unwrap();
    doc.splice_text(&text, 0, 0, "hello world").unwrap();
    doc.splice_text(&text, 2, 3, "").unwrap();
    let items = doc.put_object(ROOT, "items", ObjType::List).unwrap();
    let item = doc.insert_object(&items, 0, ObjType::Map).unwrap();
    doc.put(&item, "done", true).unwrap();
    Structure::of_save(&doc.save()).unwrap().0.encode(0)
}

#[test]
fn reads_back_what_it_writes() {
    let encoded = sample();
    let (structure, includes) = Structure::decode(&encoded).unwrap();
    assert_eq!(structure.encode(includes.unwrap()), encoded);
    let (_, includes) = Structure::decode(&structure.encode(7)).unwrap();
    assert_eq!(includes, Some(7));
}

/// What version 2 wrote for [`sample`]'s document (DEFLATE, ids as differences).
const SAMPLE_IN_VERSION_2: &str = "02792dcbb10dc2401005d1f9bbeb4b7d70211550003d5008173830041c12d48084e8804e48e9800a2804d97238d29ba2bcdf7c1fb7f2be5f3eabe76ff7da92bba1d5f11cad5e5b1c4ec71aa8570004654d20599a3263c24c8ecc2579961cf02e61be2c02857952086966e07f";

#[test]
fn reads_what_version_2_wrote() {
    let bytes: Vec<u8> = (0..SAMPLE_IN_VERSION_2.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(&SAMPLE_IN_VERSION_2[at..at + 2], 16).unwrap())
        .collect();
    assert_eq!(bytes[0], DIFFERENCES_VERSION);
    // The sample's actor is random: all else is the same.
    let ((old, all), (new, _)) =
        (Structure::decode(&bytes).unwrap(), Structure::decode(&sample()).unwrap());
    assert_eq!((old.objects, old.latest_max_op), (new.objects, new.latest_max_op));
    assert_eq!(all, None, "version 2 was kept up to date");
}

/// Ids that repeat are written as their place among the recent ones, and read back.
#[test]
fn recent_ids_read_back() {
    let mut doc = AutoCommit::new();
    let text = doc.put_object(ROOT, "text", ObjType::Text).unwrap();
    doc.splice_text(&text, 0, 0, "a long run of text typed in one go").unwrap();
    for at in [30, 20, 10, 5, 2] {
        doc.splice_text(&text, at, 1, "xy").unwrap();
    }
    let list = doc.put_object(ROOT, "list", ObjType::List).unwrap();
    for at in 0..20 {
        let item = doc.insert_object(&list, at, ObjType::Map).unwrap();
        doc.put_object(&item, "inner", ObjType::Map).unwrap();
        doc.put_object(&item, "more", ObjType::List).unwrap();
    }
    let structure = Structure::of_save(&doc.save()).unwrap().0;
    assert_eq!(Structure::decode(&structure.encode(0)), Some((structure, Some(0))));
}

#[test]
fn refuses_cut_and_inflated_forms() {
    let encoded = sample();
    for len in 0..encoded.len() {
        assert_eq!(Structure::decode(&encoded[..len]), None, "cut at {len}");
    }
    // A raw length beyond what the bytes can make is refused unread.
    let (_, rest) = leb128::split_uleb(&encoded[1..]).unwrap();
    let (_, compressed) = leb128::split_uleb(rest).unwrap();
    let mut claims_more = vec![ENCODING_VERSION, 0];
    leb128::write_uleb(&mut claims_more, u64::MAX >> 1);
    claims_more.extend_from_slice(compressed);
    assert_eq!(Structure::decode(&claims_more), None);
}

proptest! {
    #[test]
    fn never_panics_on_garbage(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = Structure::decode(&bytes);
        let mut framed = vec![ENCODING_VERSION, 0];
        leb128::write_uleb(&mut framed, bytes.len() as u64);
        framed.extend(zstd::bulk::compress(&bytes, ZSTD_LEVEL).unwrap());
        let _ = Structure::decode(&framed);
        let mut framed = vec![DIFFERENCES_VERSION];
        leb128::write_uleb(&mut framed, bytes.len() as u64);
        let mut encoder = DeflateEncoder::new(framed, flate2::Compression::new(3));
        encoder.write_all(&bytes).unwrap();
        let _ = Structure::decode(&encoder.finish().unwrap());
    }
}
