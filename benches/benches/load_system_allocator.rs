//! The baseline of load_counting_allocator: the same loads with the system allocator.

fn load(c: &mut criterion::Criterion) {
    benches::allocator_bench(c, benches::SYSTEM_ALLOCATOR);
}

criterion::criterion_group! {
    name = allocator;
    config = benches::criterion();
    targets = load
}
criterion::criterion_main!(allocator);
