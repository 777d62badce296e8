//! The stored layout's tests: the header as documented, round trips, older versions and
//! refusals of inconsistent headers.

use super::*;
use proptest::prelude::*;

fn summary(heads: usize) -> Summary {
    Summary {
        change_count: 7,
        op_count: 1234,
        heads: (0..heads).map(|i| ChangeHash([i as u8; 32])).collect(),
    }
}

fn kept(json: Option<&KeptJsonBuf>) -> Kept<'_> {
    let clock = [
        (ActorId::from([1u8; 16]), (3, ChangeHash([9; 32]))),
        (ActorId::from(&[2u8][..]), (1, ChangeHash([8; 32]))),
    ];
    let root =
        [("title".to_string(), vec![(7, ActorId::from([1u8; 16]))]), ("x".to_string(), vec![])];
    let structure = crate::structure::Structure::of_root_table(&root.into_iter().collect());
    Kept {
        max_op: 99,
        appended_changes: 2,
        json: json.map(KeptJsonBuf::as_kept),
        clock: clock.into_iter().collect(),
        structure: Some(Cow::Owned(structure.encode(2))),
    }
}

fn text(json: &str) -> KeptJsonBuf {
    KeptJsonBuf::new(JsonLayout::Text, json.as_bytes().to_vec())
}

const PAYLOAD: &[u8] = &[0x85, 0x6f, 0x4a, 0x83, 1, 2, 3];
const ACTORS_LEN: usize = 4 + (4 + 1 + 8 + 32) + (4 + 16 + 8 + 32);

#[test]
fn header_layout_is_as_documented() {
    let json = text("{}");
    let kept = kept(Some(&json));
    let index_len = kept.structure.as_ref().unwrap().len();
    let stored = encode(&summary(2), &kept, PAYLOAD);
    assert_eq!(stored[0], FORMAT_VERSION);
    assert_eq!(stored[1], 1, "JSON kept, as text, uncompressed");
    assert_eq!(&stored[4..8], &(56u32 + 64).to_le_bytes());
    assert_eq!(&stored[8..16], &7u64.to_le_bytes());
    assert_eq!(&stored[16..24], &1234u64.to_le_bytes());
    assert_eq!(&stored[24..28], &2u32.to_le_bytes());
    assert_eq!(&stored[28..36], &99u64.to_le_bytes());
    assert_eq!(&stored[36..40], &2u32.to_le_bytes());
    assert_eq!(&stored[40..44], &(ACTORS_LEN as u32).to_le_bytes());
    assert_eq!(&stored[44..48], &2u32.to_le_bytes());
    assert_eq!(&stored[48..52], &2u32.to_le_bytes());
    assert_eq!(&stored[52..56], &(index_len as u32).to_le_bytes());
    let json_at = 56 + 64 + ACTORS_LEN;
    assert_eq!(&stored[json_at..json_at + 2], b"{}");
    assert_eq!(&stored[json_at + 2..json_at + 2 + index_len], kept.structure.unwrap().as_ref());
    assert_eq!(&stored[json_at + 2 + index_len..], PAYLOAD);
}

#[test]
fn large_json_is_compressed_and_reads_back() {
    let long = format!("{{\"text\":\"{}\"}}", "automerge ".repeat(1000));
    let json = KeptJsonBuf::new(JsonLayout::Jsonb, long.clone().into_bytes());
    let stored = encode(&summary(1), &kept(Some(&json)), PAYLOAD);
    assert_eq!(stored[1], FLAG_JSON | FLAG_JSONB | FLAG_LZ4);
    assert!(stored.len() < long.len() / 4, "{} bytes stored", stored.len());
    let kept = decode(&stored).unwrap().kept.unwrap().json.unwrap();
    assert_eq!(kept.layout, JsonLayout::Jsonb);
    assert_eq!(kept.raw_len, long.len());
    assert_eq!(kept.raw().unwrap(), long.as_bytes());
    // A corrupt compressed section is refused, not read past its end.
    let mut broken = stored.clone();
    let json_at = 56 + 32 + ACTORS_LEN;
    broken[json_at] ^= 0xff;
    broken[json_at + 1] ^= 0xff;
    let value = decode(&broken).unwrap();
    assert!(value.kept.unwrap().json.unwrap().raw().is_err());
}

#[test]
fn round_trips_with_and_without_json() {
    for json in [Some(text("{\"title\":\"é\"}")), None] {
        let stored = encode(&summary(3), &kept(json.as_ref()), PAYLOAD);
        let value = decode(&stored).unwrap();
        assert_eq!(value.version, FORMAT_VERSION);
        assert_eq!(value.summary, summary(3));
        assert_eq!(value.kept, Some(kept(json.as_ref())));
        assert_eq!(value.payload, PAYLOAD);
    }
}

#[test]
fn reads_version_1_values() {
    let mut doc = automerge::AutoCommit::new();
    automerge::transaction::Transactable::put(&mut doc, automerge::ROOT, "title", "old").unwrap();
    let doc = doc.document().clone();
    let stored = fixtures::legacy::format_version_1(&doc);
    let value = decode(&stored).unwrap();
    let (summary, _, _) = crate::save::summarize(&doc);
    assert_eq!((value.version, &value.summary, &value.kept), (1, &summary, &None));
    assert_eq!(value.payload, doc.save());
    let header = Header::read(&&stored[..]).unwrap();
    assert_eq!(Header::len_from(&stored).unwrap(), 28 + 32);
    assert_eq!((header.version, &header.summary), (1, &summary));
    assert_eq!(header.json(&stored).unwrap(), None);
    let text = crate::json_reads::json_text(&value, &crate::kept_json::TextJson).unwrap();
    assert_eq!(text, r#"{"title":"old"}"#);
}

#[test]
fn reads_version_2_values() {
    let json = text("{\"title\":\"old\"}");
    let current = encode(&summary(2), &kept(Some(&json)), PAYLOAD);
    let stored = fixtures::legacy::format_version_2(&current);
    let value = decode(&stored).unwrap();
    assert_eq!(value.version, 2);
    assert_eq!(
        (value.summary, value.kept, value.payload),
        (summary(2), Some(kept(Some(&json))), PAYLOAD)
    );
    let header = Header::read(&&stored[..]).unwrap();
    assert_eq!(header.json_end(), 52 + 64 + 15, "the JSON comes right after the heads");
    assert_eq!(header.json(&stored[..header.json_end()]).unwrap(), Some(json.as_kept()));
    assert_eq!(header.clock(&stored).unwrap(), kept(None).clock);
}

#[test]
fn refuses_a_newer_version() {
    let mut stored = encode(&summary(1), &kept(None), PAYLOAD);
    stored[0] = FORMAT_VERSION + 1;
    assert!(matches!(
        decode(&stored),
        Err(Error::UnsupportedFormatVersion { found, supported: FORMAT_VERSION })
            if found == FORMAT_VERSION + 1
    ));
}

#[test]
fn refuses_inconsistent_headers() {
    let good = encode(&summary(3), &kept(Some(&text("{}"))), PAYLOAD);
    let actors_at = 56 + 96;
    let with = |edit: &dyn Fn(&mut Vec<u8>)| {
        let mut v = good.clone();
        edit(&mut v);
        v
    };
    let mut cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", vec![]),
        ("truncated header", good[..20].to_vec()),
        ("truncated heads", good[..60].to_vec()),
        ("version 0", with(&|v| v[0] = 0)),
        ("flags", with(&|v| v[1] = 8)),
        ("JSON length without the flag", with(&|v| v[1] = 0)),
        ("raw length of uncompressed JSON", with(&|v| v[48] = 3)),
        (
            "raw length beyond what LZ4 can make",
            with(&|v| {
                v[1] |= FLAG_LZ4;
                v[48..52].copy_from_slice(&u32::MAX.to_le_bytes());
            }),
        ),
        ("head count", with(&|v| v[24] = 200)),
        ("huge head count", with(&|v| v[24..28].copy_from_slice(&u32::MAX.to_le_bytes()))),
        ("header length", with(&|v| v[4] = 29)),
        ("JSON length", with(&|v| v[44..48].copy_from_slice(&u32::MAX.to_le_bytes()))),
        ("actor count", with(&|v| v[actors_at] = 9)),
        (
            "actor id length",
            with(&|v| v[actors_at + 4..actors_at + 8].copy_from_slice(&u32::MAX.to_le_bytes())),
        ),
        ("version 1 with flags", {
            let mut v = fixtures::legacy::format_version_1(&automerge::Automerge::new());
            v[1] = 1;
            v
        }),
        ("version 2 with the JSONB flag", {
            let mut v = fixtures::legacy::format_version_2(&good);
            v[1] |= FLAG_JSONB;
            v
        }),
    ];
    cases.push(("no payload", good[..good.len() - PAYLOAD.len()].to_vec()));
    cases.push((
        "payload magic",
        with(&|v| {
            let at = v.len() - PAYLOAD.len();
            v[at] = 0;
        }),
    ));
    for (what, bytes) in cases {
        assert!(matches!(decode(&bytes), Err(Error::CorruptStoredValue(_))), "{what} was accepted");
    }
}

#[test]
fn the_header_the_clock_and_the_json_alone_can_be_read() {
    let json = text("[1]");
    let stored = encode(&summary(2), &kept(Some(&json)), PAYLOAD);
    let len = Header::len_from(&stored).unwrap();
    assert_eq!(len, 56 + 64);
    let header = Header::parse(&stored[..len]).unwrap();
    assert_eq!((header.version, &header.summary), (FORMAT_VERSION, &summary(2)));
    assert!(Header::parse(&stored[..len - 1]).is_err());
    assert_eq!(header.clock_end(), len + ACTORS_LEN);
    assert_eq!(header.clock(&stored[..header.clock_end()]).unwrap(), kept(None).clock);
    assert!(header.clock(&stored[..header.clock_end() - 1]).is_err());
    let end = header.json_end();
    assert_eq!(header.json(&stored[..end]).unwrap(), Some(json.as_kept()));
    assert!(header.json(&stored[..end - 1]).is_err());
}

/// A prefix source that records how far it was asked to read.
struct Counting<'a> {
    bytes: &'a [u8],
    furthest: std::cell::Cell<usize>,
}

impl<'a> Prefix<'a> for Counting<'a> {
    fn prefix(&self, len: usize) -> &'a [u8] {
        self.furthest.set(self.furthest.get().max(len));
        (&self.bytes).prefix(len)
    }
}

#[test]
fn a_header_read_fetches_one_first_chunk_unless_the_heads_pass_it() {
    let json = text(&"1".repeat(10_000));
    for (heads, furthest) in [(1, FIRST_FETCH), (100, 56 + 3200)] {
        let stored = encode(&summary(heads), &kept(Some(&json)), PAYLOAD);
        let source = Counting { bytes: &stored, furthest: Default::default() };
        let header = Header::read(&source).unwrap();
        assert_eq!(header.summary, summary(heads));
        assert_eq!(source.furthest.get(), furthest, "{heads} heads");
    }
}

proptest! {
    #[test]
    fn round_trips(
        change_count in any::<u64>(),
        op_count in any::<u64>(),
        max_op in any::<u64>(),
        heads in proptest::collection::vec(any::<[u8; 32]>(), 0..8),
        actors in proptest::collection::btree_map(proptest::collection::vec(any::<u8>(), 0..20), (any::<u64>(), any::<[u8; 32]>()), 0..5),
        json in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..5000)),
        jsonb in any::<bool>(),
        tail in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let summary = Summary {
            change_count,
            op_count,
            heads: heads.into_iter().map(ChangeHash).collect(),
        };
        let layout = if jsonb { JsonLayout::Jsonb } else { JsonLayout::Text };
        let json = json.map(|json| KeptJsonBuf::new(layout, json));
        let clock = actors.into_iter().map(|(actor, (seq, hash))| (ActorId::from(actor), (seq, ChangeHash(hash)))).collect();
        let kept = Kept { max_op, appended_changes: 0, json: json.as_ref().map(KeptJsonBuf::as_kept), clock, structure: None };
        let mut payload = AUTOMERGE_MAGIC.to_vec();
        payload.extend(tail);
        let stored = encode(&summary, &kept, &payload);
        let decoded = decode(&stored).unwrap();
        prop_assert_eq!(decoded.version, FORMAT_VERSION);
        prop_assert_eq!(decoded.summary, summary);
        prop_assert_eq!(decoded.kept, Some(kept));
        prop_assert_eq!(decoded.payload, &payload[..]);
    }

    #[test]
    fn never_panics_on_garbage(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        if let Ok(value) = decode(&bytes) {
            let _ = value.kept.and_then(|kept| kept.json).map(|json| json.raw());
        }
        let _ = Header::len_from(&bytes);
        let _ = Header::read(&&bytes[..]);
    }
}
