//! `merge_agg(automerge)`: the merge of every document in a group. Its state is the loaded
//! document with the counts of its load estimate (`pg_automerge_core::aggregate`), kept in
//! the aggregate's memory context (and dropped with it); parallel query runs partial
//! aggregates in workers and ships their states as saved bytes. Each step checks the
//! running estimate of the state plus the incoming document against
//! `pg_automerge.max_load_memory` before it loads anything.

use pg_automerge_core::aggregate::MergeState;
use pg_automerge_core::document;
use pgrx::prelude::*;
use pgrx::{pg_sys, Internal, PgMemoryContexts};

use crate::datum::StoredDoc;
use crate::errors::OrRaise;
use crate::gucs;

/// The aggregate's memory context: the state must outlive each call.
fn aggregate_context(fcinfo: pg_sys::FunctionCallInfo, function: &str) -> PgMemoryContexts {
    let mut context = std::ptr::null_mut();
    // SAFETY: fcinfo is this call's, as Postgres passed it.
    if unsafe { pg_sys::AggCheckCallContext(fcinfo, &mut context) } == 0 {
        error!("{function} can only be called as part of merge_agg");
    }
    PgMemoryContexts::For(context)
}

/// A new state holding `merged`, allocated in `context` and dropped when it is reset.
fn new_state(merged: MergeState, mut context: PgMemoryContexts) -> Internal {
    Internal::from(Some(pg_sys::Datum::from(context.leak_and_drop_on_delete(merged))))
}

/// The merge a state holds, if it holds one.
fn state_of(state: &mut Internal) -> Option<&mut MergeState> {
    // SAFETY: an initialized state of this aggregate always holds a MergeState.
    unsafe { state.get_mut::<MergeState>() }
}

#[pg_extern(immutable, parallel_safe)]
fn automerge_merge_agg_transition(
    mut state: Internal,
    doc: Option<StoredDoc<'_>>,
    fcinfo: pg_sys::FunctionCallInfo,
) -> Internal {
    const FUNCTION: &str = "automerge_merge_agg_transition";
    // NULLs leave the state as it is, so that only NULLs give NULL.
    let Some(doc) = doc else { return state };
    let limit = gucs::load_limit();
    match state_of(&mut state) {
        Some(merged) => {
            merged.add(doc.stored(), limit).or_raise(FUNCTION);
            state
        }
        None => new_state(
            MergeState::first(doc.stored(), limit).or_raise(FUNCTION),
            aggregate_context(fcinfo, FUNCTION),
        ),
    }
}

#[pg_extern(immutable, parallel_safe)]
fn automerge_merge_agg_combine(
    mut left: Internal,
    mut right: Internal,
    fcinfo: pg_sys::FunctionCallInfo,
) -> Internal {
    const FUNCTION: &str = "automerge_merge_agg_combine";
    let Some(other) = state_of(&mut right) else { return left };
    // Take the right document out, so that its memory does not live on beside the merge.
    let other = std::mem::replace(other, MergeState::empty());
    match state_of(&mut left) {
        Some(merged) => {
            merged.combine(other, gucs::load_limit()).or_raise(FUNCTION);
            left
        }
        None => new_state(other, aggregate_context(fcinfo, FUNCTION)),
    }
}

#[pg_extern(immutable, strict, parallel_safe)]
fn automerge_merge_agg_serialize(mut state: Internal) -> Vec<u8> {
    state_of(&mut state)
        .map(|merged| document::save(&merged.doc).or_raise("automerge_merge_agg_serialize"))
        .unwrap_or_default()
}

/// Postgres calls this in a per-row context and hands the result to the combine function,
/// which moves what it keeps into the aggregate's context.
#[pg_extern(immutable, strict, parallel_safe)]
fn automerge_merge_agg_deserialize(bytes: &[u8], _unused: Internal) -> Internal {
    let merged = MergeState::from_saved(bytes, gucs::load_limit())
        .or_raise("automerge_merge_agg_deserialize");
    new_state(merged, PgMemoryContexts::CurrentMemoryContext)
}

#[pg_extern(immutable, parallel_safe)]
fn automerge_merge_agg_final(mut state: Internal) -> Option<StoredDoc<'static>> {
    state_of(&mut state).map(|merged| {
        StoredDoc::owned(
            document::to_stored(&merged.doc, gucs::write_settings())
                .or_raise("automerge_merge_agg"),
        )
    })
}

extension_sql!(
    r#"
CREATE AGGREGATE merge_agg(automerge) (
    SFUNC = automerge_merge_agg_transition,
    STYPE = internal,
    FINALFUNC = automerge_merge_agg_final,
    COMBINEFUNC = automerge_merge_agg_combine,
    SERIALFUNC = automerge_merge_agg_serialize,
    DESERIALFUNC = automerge_merge_agg_deserialize,
    PARALLEL = SAFE
);
COMMENT ON AGGREGATE merge_agg(automerge) IS 'the merge of every document in the group';
"#,
    name = "merge_agg",
    requires = [
        "automerge_type",
        automerge_merge_agg_transition,
        automerge_merge_agg_combine,
        automerge_merge_agg_serialize,
        automerge_merge_agg_deserialize,
        automerge_merge_agg_final
    ],
);

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use automerge::transaction::Transactable;
    use automerge::{AutoCommit, ROOT};
    use pgrx::prelude::*;

    use crate::test_support::{error_of, sample, sqlstate_of};

    #[pg_test]
    fn merges_every_row_and_skips_nulls() {
        Spi::run("CREATE TABLE forks (doc automerge)").unwrap();
        let mut expected = AutoCommit::load(&sample("project").save()).unwrap();
        for actor in 1..=5u8 {
            let mut fork = AutoCommit::load(&sample("project").save())
                .unwrap()
                .with_actor(automerge::ActorId::from([actor + 100; 16]));
            fork.put(ROOT, format!("k{actor}"), actor as i64).unwrap();
            expected.merge(&mut fork.clone()).unwrap();
            Spi::run_with_args("INSERT INTO forks VALUES ($1)", &[fork.save().into()]).unwrap();
        }
        Spi::run("INSERT INTO forks VALUES (NULL)").unwrap();
        let heads =
            Spi::get_one::<Vec<String>>("SELECT automerge_heads(merge_agg(doc)) FROM forks");
        assert_eq!(
            heads.unwrap().unwrap(),
            pg_automerge_core::heads::to_hex(&expected.get_heads())
        );
    }

    #[pg_test]
    fn the_state_counts_against_the_load_limit_as_it_grows() {
        Spi::run("CREATE TABLE forks (doc automerge)").unwrap();
        for actor in 1..=10u8 {
            let mut fork = AutoCommit::load(&sample("project").save())
                .unwrap()
                .with_actor(automerge::ActorId::from([actor + 100; 16]));
            // Large enough that the limit, in whole megabytes, falls between one and all.
            for i in 0..10_000 {
                fork.put(ROOT, format!("k{actor}/{i}"), i as i64).unwrap();
            }
            Spi::run_with_args("INSERT INTO forks VALUES ($1)", &[fork.save().into()]).unwrap();
        }
        let estimate = |sql: &str| Spi::get_one::<i64>(sql).unwrap().unwrap();
        let one = estimate("SELECT max(estimated_load_bytes) FROM forks, automerge_storage(doc)");
        let all = estimate(
            "SELECT estimated_load_bytes FROM automerge_storage((SELECT merge_agg(doc) FROM forks))",
        );
        assert!(all > 4 * one, "one fork {one}, all merged {all}");
        // Each fork alone is admitted; the growing state is not.
        let limit_mb = (one * 3 + (1 << 20) - 1) / (1 << 20);
        Spi::run(&format!("SET LOCAL pg_automerge.max_load_memory = '{limit_mb}MB'")).unwrap();
        assert_eq!(sqlstate_of("SELECT doc || doc FROM forks"), "no error");
        let refused = error_of("SELECT merge_agg(doc) FROM forks").expect("refused");
        assert_eq!(refused.sqlstate, "53400");
        assert!(refused.message.contains("pg_automerge.max_load_memory"), "{refused:?}");
        Spi::run("SET LOCAL pg_automerge.max_load_memory = -1").unwrap();
        assert_eq!(sqlstate_of("SELECT merge_agg(doc) FROM forks"), "no error");
    }

    #[pg_test]
    fn no_rows_or_only_nulls_give_null() {
        let none = Spi::get_one::<bool>(
            "SELECT merge_agg(doc) IS NULL FROM (SELECT NULL::automerge AS doc WHERE false) d",
        );
        assert_eq!(none.unwrap(), Some(true));
        let nulls = Spi::get_one::<bool>(
            "SELECT merge_agg(doc) IS NULL FROM (SELECT NULL::automerge AS doc FROM generate_series(1, 3)) d",
        );
        assert_eq!(nulls.unwrap(), Some(true));
    }

    #[pg_test]
    fn the_planner_runs_it_in_parallel() {
        Spi::run(
            "CREATE TABLE many AS SELECT i, '\\x'::automerge AS doc FROM generate_series(1, 1000) i; \
             ANALYZE many; \
             SET LOCAL parallel_setup_cost = 0; SET LOCAL parallel_tuple_cost = 0; \
             SET LOCAL min_parallel_table_scan_size = 0; SET LOCAL max_parallel_workers_per_gather = 2;",
        )
        .unwrap();
        let plan: Vec<String> = Spi::connect(|client| {
            client
                .select("EXPLAIN (COSTS OFF) SELECT merge_agg(doc) FROM many", None, &[])
                .unwrap()
                .map(|row| row.get::<String>(1).unwrap().unwrap())
                .collect()
        });
        let plan = plan.join("\n");
        assert!(plan.contains("Partial Aggregate"), "{plan}");
        assert!(plan.contains("Finalize Aggregate"), "{plan}");
    }
}
