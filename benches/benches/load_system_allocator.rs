//! The baseline of load_counting_allocator: the same load with the system allocator.

use criterion::{criterion_group, criterion_main, Criterion};

fn load(c: &mut Criterion) {
    let bytes = benches::edited_text();
    c.bench_function("load edited text, system allocator", |b| b.iter(|| benches::load(&bytes)));
}

criterion_group!(allocator, load);
criterion_main!(allocator);
