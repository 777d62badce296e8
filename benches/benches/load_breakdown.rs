//! Where a load's time and memory go (`cargo xtask bench --load-breakdown`): per fixture,
//! the automerge crate's whole load beside what public APIs separate of it (the heads'
//! check, inflating the columns, rebuilding and hashing every change), and beside the
//! passes over the save's columns alone that the core makes without an op set, and what
//! reads do after a load (the JSON walk) or instead of one (the kept JSON). The report
//! divides each by the load measured in the same run. Peak heap is recorded beside; the
//! fixture's counts and the heap a loaded document keeps go to the storage file.

use automerge::{Automerge, LoadOptions, ReadDoc, VerificationMode};
use benches::load_phases::{
    self, CHANGES, HASHES, INFLATED, JSON, KEPT_JSON, OP_PASS, OWNERS, STREAMED, STRUCTURE,
    UNCHECKED, UNCOMPRESSED, WHOLE,
};
use benches::{
    configure, criterion, fixtures, js_fixtures, record_peak, record_storage, selected, Fixture,
};
use criterion::{BenchmarkId, Criterion};
use pg_automerge_core::chunk::{self, CHANGE};
use pg_automerge_core::doc_ops::DocumentOps;
use pg_automerge_core::kept_json::TextJson;
use pg_automerge_core::memory::{self, CountingAllocator};
use pg_automerge_core::settings::WriteSettings;
use pg_automerge_core::structure::Structure;
use pg_automerge_core::{estimate, json, json_reads, op_owners, writes};

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// What the phases start from, prepared untimed.
struct Input {
    save: Vec<u8>,
    /// The same document saved with no column deflated.
    uncompressed: Vec<u8>,
    doc: Automerge,
    /// Each change's chunk data: what its hash is the SHA-256 of, with its type and length.
    changes: Vec<Vec<u8>>,
    /// The save as the extension stores it, with its kept JSON (as text: the core has no
    /// PostgreSQL `jsonb`).
    stored: Vec<u8>,
}

type Work = fn(&Input) -> Box<dyn std::any::Any>;

/// What each phase of [`load_phases::PHASES`] runs.
const WORK: [(&str, Work); 12] = [
    (WHOLE, |i| Box::new(Automerge::load(&i.save).unwrap())),
    (UNCHECKED, |i| {
        let options = LoadOptions::new().verification_mode(VerificationMode::DontCheck);
        Box::new(Automerge::load_with_options(&i.save, options).unwrap())
    }),
    (UNCOMPRESSED, |i| Box::new(Automerge::load(&i.uncompressed).unwrap())),
    (CHANGES, |i| Box::new(i.doc.get_changes(&[]).len())),
    (HASHES, |i| {
        Box::new(i.changes.iter().map(|data| chunk::checksum(CHANGE, data)).collect::<Vec<_>>())
    }),
    (STREAMED, |i| Box::new(estimate::client_rows(&i.save).unwrap().doc_ops)),
    (INFLATED, |i| Box::new(DocumentOps::read(&i.save).unwrap().actors.len())),
    (OP_PASS, |i| {
        let ops = DocumentOps::read(&i.save).unwrap();
        Box::new(ops.iter().map(|op| op.unwrap().id.0).fold(0, u64::max))
    }),
    (STRUCTURE, |i| Box::new(Structure::of_save(&i.save).unwrap())),
    (OWNERS, |i| {
        op_owners::check(&i.save).unwrap();
        Box::new(())
    }),
    (JSON, |i| Box::new(json::document(&i.doc, None).unwrap())),
    (KEPT_JSON, |i| Box::new(json_reads::kept(&i.stored, &TextJson).unwrap())),
];

fn input(fixture: &Fixture) -> Input {
    let name = fixture.name();
    let before = memory::usage().allocated_bytes;
    let doc = Automerge::load(&fixture.save).unwrap();
    let kept = memory::usage().allocated_bytes.saturating_sub(before);
    let stats = doc.stats();
    for (measure, value) in [
        ("saved_bytes", fixture.save.len()),
        ("ops", stats.num_ops as usize),
        ("changes", stats.num_changes as usize),
        ("kept_after_load_bytes", kept),
    ] {
        record_storage(&name, benches::AUTOMERGE, measure, Some(value as i64));
    }
    let changes = doc
        .get_changes(&[])
        .iter()
        .map(|change| {
            let data = chunk::split_first(change.raw_bytes()).unwrap().1.to_vec();
            // What is hashed is exactly what the change's hash is taken over.
            assert_eq!(chunk::checksum(CHANGE, &data), change.hash().0[..4]);
            data
        })
        .collect();
    Input {
        uncompressed: doc.save_nocompress(),
        stored: writes::stored_from_client_bytes(&fixture.save, WriteSettings::UNLIMITED).unwrap(),
        save: fixture.save.clone(),
        changes,
        doc,
    }
}

fn breakdown(c: &mut Criterion) {
    assert!(WORK.iter().map(|w| w.0).eq(load_phases::PHASES.iter().map(|p| p.0)));
    let group_name = format!("core/{}", load_phases::OPERATION);
    let mut group = c.benchmark_group(&group_name);
    configure(&mut group);
    for fixture in fixtures(true).iter().chain(&js_fixtures()) {
        let name = fixture.name();
        let selected = |phase: &str| selected(&format!("{group_name}/{phase}/{name}"));
        // A profile of one phase on one fixture (`--profile-time`) prepares nothing else.
        if !WORK.iter().any(|(phase, _)| selected(phase)) {
            continue;
        }
        let input = input(fixture);
        for (phase, work) in WORK.into_iter().filter(|(phase, _)| selected(phase)) {
            record_peak(&group_name, phase, &name, || work(&input));
            group.bench_with_input(BenchmarkId::new(phase, &name), &input, |b, input| {
                b.iter(|| work(input))
            });
        }
    }
    group.finish();
}

criterion::criterion_group! {
    name = load_breakdown;
    config = criterion();
    targets = breakdown
}
criterion::criterion_main!(load_breakdown);
