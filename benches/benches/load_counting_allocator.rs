//! The cost of counting: the load of load_system_allocator with the extension's allocator.

use criterion::{criterion_group, criterion_main, Criterion};
use pg_automerge_core::memory::CountingAllocator;

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

fn load(c: &mut Criterion) {
    let bytes = benches::edited_text();
    c.bench_function("load edited text, counting allocator", |b| b.iter(|| benches::load(&bytes)));
}

criterion_group!(allocator, load);
criterion_main!(allocator);
