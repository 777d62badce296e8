//! The cost of counting: the loads of load_system_allocator with the extension's allocator.

use pg_automerge_core::memory::CountingAllocator;

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

fn load(c: &mut criterion::Criterion) {
    benches::allocator_bench(c, benches::OURS);
}

criterion::criterion_group! {
    name = allocator;
    config = benches::criterion();
    targets = load
}
criterion::criterion_main!(allocator);
