//! Core level, no Postgres: what `pg_automerge_core` does for each SQL function, against the
//! automerge crate doing the same work from the same bytes. Peak heap is recorded beside.

use automerge::{Automerge, ChangeHash, ReadDoc, ROOT};
use benches::{
    configure, criterion, fixtures, forks, record_peak, selected, Author, ClientWrite, Fixture,
    AUTOMERGE, OURS,
};
use criterion::{BenchmarkId, Criterion};
use fixtures::generated::Kind;
use pg_automerge_core::load::load_stored;
use pg_automerge_core::memory::CountingAllocator;
use pg_automerge_core::save::to_stored;
use pg_automerge_core::settings::WriteSettings;
use pg_automerge_core::writes::stored_from_client_bytes;
use pg_automerge_core::{
    conflicts, diff, format, history, html, integrity, json, markdown, spans, writes, Error,
};

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

const NO_LIMIT: WriteSettings = WriteSettings::UNLIMITED;

/// A fixture as the extension stores it.
fn stored(fixture: &Fixture) -> Vec<u8> {
    stored_from_client_bytes(&fixture.save, NO_LIMIT).unwrap()
}

/// Benchmarks one operation for both variants on every fixture, and records their peaks.
fn compare<I>(
    c: &mut Criterion,
    group: &str,
    fixtures: &[Fixture],
    input: impl Fn(&Fixture) -> I,
    ours: impl Fn(&I) -> Box<dyn std::any::Any>,
    automerge: impl Fn(&I) -> Box<dyn std::any::Any>,
) {
    let mut bench_group = c.benchmark_group(format!("core/{group}"));
    configure(&mut bench_group);
    for fixture in fixtures {
        let input = input(fixture);
        let name = fixture.name();
        for (variant, work) in [(OURS, &ours as &dyn Fn(&I) -> _), (AUTOMERGE, &automerge)] {
            if selected(&format!("core/{group}/{variant}/{name}")) {
                record_peak(&format!("core/{group}"), variant, &name, || work(&input));
            }
            bench_group.bench_with_input(BenchmarkId::new(variant, &name), &input, |b, input| {
                b.iter(|| work(input))
            });
        }
    }
    bench_group.finish();
}

/// The fixtures that pass `keep`.
fn only(fixtures: &[Fixture], keep: impl Fn(&Fixture) -> bool) -> Vec<Fixture> {
    fixtures.iter().filter(|f| keep(f)).cloned().collect()
}

fn benches(c: &mut Criterion) {
    let all = fixtures(true);
    let histories = only(&all, |f| !f.spec.compacted);

    compare(
        c,
        "load",
        &all,
        |f| (stored(f), f.save.clone()),
        |(stored, _)| Box::new(load_stored(&format::decode(stored).unwrap()).unwrap()),
        |(_, save)| Box::new(Automerge::load(save).unwrap()),
    );
    compare(
        c,
        "read title",
        &histories,
        |f| (stored(f), f.save.clone()),
        |(stored, _)| {
            Box::new(
                load_stored(&format::decode(stored).unwrap())
                    .unwrap()
                    .get(ROOT, "title")
                    .unwrap()
                    .map(|v| v.0.to_string()),
            )
        },
        |(_, save)| {
            Box::new(
                Automerge::load(save).unwrap().get(ROOT, "title").unwrap().map(|v| v.0.to_string()),
            )
        },
    );
    compare(
        c,
        "to jsonb",
        &histories,
        |f| (stored(f), f.save.clone()),
        |(stored, _)| {
            Box::new(
                json::document(&load_stored(&format::decode(stored).unwrap()).unwrap(), None)
                    .unwrap(),
            )
        },
        |(_, save)| {
            let doc = Automerge::load(save).unwrap();
            Box::new(serde_json::to_value(automerge::AutoSerde::from(&doc)).unwrap())
        },
    );
    compare(
        c,
        "save",
        &histories,
        |f| Automerge::load(&f.save).unwrap(),
        |doc| Box::new(to_stored(doc, WriteSettings::UNLIMITED).unwrap()),
        |doc| Box::new(doc.save()),
    );
    compare(
        c,
        "history",
        &histories,
        |f| (stored(f), f.save.clone()),
        |(stored, _)| {
            Box::new(
                history::changes(&load_stored(&format::decode(stored).unwrap()).unwrap(), None)
                    .unwrap()
                    .len(),
            )
        },
        |(_, save)| Box::new(Automerge::load(save).unwrap().get_changes(&[]).len()),
    );
    // Issue 19's reads, each from a change half-way through the history.
    let middle = |f: &Fixture| -> (Vec<u8>, Vec<u8>, ChangeHash) {
        let changes = Automerge::load(&f.save)
            .unwrap()
            .get_changes_meta(&[])
            .into_iter()
            .map(|change| change.hash)
            .collect::<Vec<_>>();
        (stored(f), f.save.clone(), changes[changes.len() / 2])
    };
    compare(
        c,
        "changes meta",
        &histories,
        |f| (stored(f), f.save.clone()),
        |(stored, _)| {
            Box::new(
                history::changes_meta(
                    &load_stored(&format::decode(stored).unwrap()).unwrap(),
                    None,
                )
                .unwrap()
                .len(),
            )
        },
        |(_, save)| Box::new(Automerge::load(save).unwrap().get_changes_meta(&[]).len()),
    );
    compare(
        c,
        "get change",
        &histories,
        middle,
        |(stored, _, hash)| {
            Box::new(
                history::change(&load_stored(&format::decode(stored).unwrap()).unwrap(), hash)
                    .unwrap(),
            )
        },
        |(_, save, hash)| Box::new(Automerge::load(save).unwrap().get_change_by_hash(hash)),
    );
    compare(
        c,
        "contains an earlier version",
        &histories,
        middle,
        |(stored, _, hash)| {
            Box::new(history::contains_document(&stored.as_slice(), &[*hash]).unwrap())
        },
        |(_, save, hash)| {
            Box::new(Automerge::load(save).unwrap().get_change_by_hash(hash).is_some())
        },
    );
    compare(
        c,
        "diff from half-way",
        &histories,
        middle,
        |(stored, _, hash)| {
            let doc = diff::load_stored_for_diff(&format::decode(stored).unwrap()).unwrap();
            Box::new(diff::diff(&doc, &[*hash], None).unwrap())
        },
        |(_, save, hash)| {
            let doc = Automerge::load(save).unwrap();
            Box::new(doc.diff(&[*hash], &doc.get_heads()).len())
        },
    );
    compare(
        c,
        "conflicts",
        &histories,
        |f| (stored(f), f.save.clone()),
        |(stored, _)| {
            Box::new(
                conflicts::conflicts(
                    &load_stored(&format::decode(stored).unwrap()).unwrap(),
                    &["title".into()],
                )
                .unwrap(),
            )
        },
        |(_, save)| Box::new(Automerge::load(save).unwrap().get_all(ROOT, "title").unwrap().len()),
    );
    compare(
        c,
        "spans",
        &only(&histories, |f| f.spec.kind != Kind::MapList),
        |f| (stored(f), f.save.clone()),
        |(stored, _)| {
            Box::new(
                spans::spans(
                    &load_stored(&format::decode(stored).unwrap()).unwrap(),
                    &["content".into()],
                    None,
                )
                .unwrap(),
            )
        },
        |(_, save)| {
            let doc = Automerge::load(save).unwrap();
            let text = doc.get(ROOT, "content").unwrap().unwrap().1;
            Box::new(doc.spans(text).unwrap().count())
        },
    );
    // The renderings walk the spans as `spans` does; the automerge variant is that walk.
    type Render = fn(&Automerge, &[String], Option<&[ChangeHash]>) -> Result<String, Error>;
    for (group, render) in [("markdown", markdown::markdown as Render), ("html", html::html)] {
        compare(
            c,
            group,
            &only(&histories, |f| f.spec.kind != Kind::MapList),
            |f| (stored(f), f.save.clone()),
            |(stored, _)| {
                Box::new(
                    render(
                        &load_stored(&format::decode(stored).unwrap()).unwrap(),
                        &["content".into()],
                        None,
                    )
                    .unwrap(),
                )
            },
            |(_, save)| {
                let doc = Automerge::load(save).unwrap();
                let text = doc.get(ROOT, "content").unwrap().unwrap().1;
                Box::new(doc.spans(text).unwrap().count())
            },
        );
    }
    compare(
        c,
        "upsert full save",
        &histories,
        |f| {
            let (left, right) = forks(&f.save);
            let stored = |save: &[u8]| stored_from_client_bytes(save, NO_LIMIT).unwrap();
            ((stored(&left), stored(&right)), (left, right))
        },
        |((left, right), _)| Box::new(writes::merge(left, right, NO_LIMIT).unwrap()),
        |(_, (left, right))| {
            let mut doc = Automerge::load(left).unwrap();
            doc.merge(&mut Automerge::load(right).unwrap()).unwrap();
            Box::new(doc.save())
        },
    );
    compare(
        c,
        "incremental write",
        &histories,
        // The same change every iteration: each applies it to the stored value as it was.
        |f| (stored(f), f.save.clone(), Author::new(&f.save).retitle().1),
        |(stored, _, change)| Box::new(writes::apply(stored, change, NO_LIMIT).unwrap()),
        |(_, save, change)| {
            let mut doc = Automerge::load(save).unwrap();
            doc.load_incremental(change).unwrap();
            Box::new(doc.save())
        },
    );
    // What the loader-rule checks cost on the path that loads: a client's edit applied to
    // the loaded document and saved, with the checks (the incoming operations' keys before
    // the apply, the added changes after it, and for a mark the mark order of the
    // document's save: 0.6.0) and without them (as 0.3.0 did). Both load and save the same
    // way, so the ratio is the checks alone.
    let texts = only(&histories, |f| f.spec.kind != Kind::MapList);
    let edit = |checked: bool| {
        move |(save, change): &(Vec<u8>, Vec<u8>)| -> Box<dyn std::any::Any> {
            let mut doc = Automerge::load(save).unwrap();
            let before = doc.get_heads();
            let marks = checked.then(|| {
                let parsed = automerge::Change::from_bytes(change.clone()).unwrap();
                integrity::check_incoming(&doc, &[parsed]).unwrap()
            });
            doc.load_incremental(change).unwrap();
            if checked {
                integrity::check_added(&doc, &before, marks).unwrap();
            }
            Box::new(doc.save())
        }
    };
    compare(
        c,
        "text edit with loader-rule checks",
        &texts,
        |f| (f.save.clone(), Author::new(&f.save).type_into_content()),
        edit(true),
        edit(false),
    );
    compare(
        c,
        "mark with loader-rule checks",
        &texts,
        |f| (f.save.clone(), Author::new(&f.save).client_write(ClientWrite::Mark)),
        edit(true),
        edit(false),
    );
}

criterion::criterion_group! {
    name = core;
    config = criterion();
    targets = benches
}
criterion::criterion_main!(core);
