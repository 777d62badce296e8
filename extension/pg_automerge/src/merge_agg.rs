//! `merge_agg(automerge)`: the merge of every document in a group. Its state is an
//! `automerge_merge_state` (`merge_state.rs`): the loaded document with the counts of its
//! load estimate (`pg_automerge_core::aggregate`), changed in place from row to row.
//! Parallel query and Citus run partial aggregates (in parallel workers, on every worker
//! node) and ship their states as saved bytes to the combine. Each step checks the running
//! estimate of the state plus the incoming document against `pg_automerge.max_load_memory`
//! before it loads anything.

use pg_automerge_core::aggregate::MergeState;
use pg_automerge_core::save;
use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::datum::StoredDoc;
use crate::errors::OrRaise;
use crate::gucs;
use crate::merge_state::MergeStateDatum;

/// The aggregate's memory context, where a state must live to outlive each call.
fn aggregate_context(fcinfo: pg_sys::FunctionCallInfo, function: &str) -> pg_sys::MemoryContext {
    let mut context = std::ptr::null_mut();
    // SAFETY: fcinfo is this call's, as Postgres passed it.
    if unsafe { pg_sys::AggCheckCallContext(fcinfo, &mut context) } == 0 {
        error!("{function} can only be called as part of merge_agg");
    }
    context
}

#[pg_extern(immutable, parallel_safe)]
fn automerge_merge_state_add(
    state: Option<MergeStateDatum>,
    doc: Option<StoredDoc<'_>>,
    fcinfo: pg_sys::FunctionCallInfo,
) -> Option<MergeStateDatum> {
    const FUNCTION: &str = "automerge_merge_state_add";
    let context = aggregate_context(fcinfo, FUNCTION);
    // NULLs leave the state as it is, so that only NULLs give NULL.
    let Some(doc) = doc else { return state };
    let limit = gucs::load_limit();
    Some(match state {
        Some(state) => state.update(FUNCTION, context, |merged| merged.add(doc.stored(), limit)),
        None => MergeStateDatum::expanded(
            MergeState::first(doc.stored(), limit).or_raise(FUNCTION),
            context,
        ),
    })
}

#[pg_extern(immutable, parallel_safe)]
fn automerge_merge_state_combine(
    left: Option<MergeStateDatum>,
    right: Option<MergeStateDatum>,
    fcinfo: pg_sys::FunctionCallInfo,
) -> Option<MergeStateDatum> {
    const FUNCTION: &str = "automerge_merge_state_combine";
    let context = aggregate_context(fcinfo, FUNCTION);
    let Some(mut right) = right else { return left };
    // Take the right document out, so that its memory does not live on beside the merge.
    let other = right.take(FUNCTION);
    Some(match left {
        Some(left) => {
            left.update(FUNCTION, context, |merged| merged.combine(other, gucs::load_limit()))
        }
        None => MergeStateDatum::expanded(other, context),
    })
}

#[pg_extern(immutable, strict, parallel_safe)]
fn automerge_merge_state_result(mut state: MergeStateDatum) -> StoredDoc<'static> {
    state.with_state("automerge_merge_agg", |merged| {
        StoredDoc::owned(
            save::to_stored(&merged.doc, gucs::write_settings()).or_raise("automerge_merge_agg"),
        )
    })
}

extension_sql!(
    r#"
CREATE AGGREGATE merge_agg(automerge) (
    SFUNC = automerge_merge_state_add,
    STYPE = automerge_merge_state,
    FINALFUNC = automerge_merge_state_result,
    COMBINEFUNC = automerge_merge_state_combine,
    PARALLEL = SAFE
);
COMMENT ON AGGREGATE merge_agg(automerge) IS 'the merge of every document in the group';
"#,
    name = "merge_agg",
    requires = [
        "automerge_type",
        "automerge_merge_state_type",
        automerge_merge_state_add,
        automerge_merge_state_combine,
        automerge_merge_state_result
    ],
);

/// The C functions of 0.4.0's `merge_agg`, whose state was `internal`: a database still on
/// 0.4.0's SQL calls them with the new library until `ALTER EXTENSION pg_automerge UPDATE`
/// replaces the aggregate. They refuse with the way out instead of reading a state of
/// another shape; no SQL of 0.5.0 names them.
macro_rules! replaced_by_the_update {
    ($($symbol:ident, $finfo:ident;)*) => {$(
        #[no_mangle]
        pub extern "C" fn $finfo() -> &'static pg_sys::Pg_finfo_record {
            const VERSION_1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
            &VERSION_1
        }

        #[no_mangle]
        #[pg_guard]
        pub unsafe extern "C-unwind" fn $symbol(_fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
            crate::errors::raise_sqlstate(
                pgrx::PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                "merge_agg was defined by an older version of pg_automerge".to_string(),
                Some("Run ALTER EXTENSION pg_automerge UPDATE."),
                "merge_agg",
            )
        }
    )*};
}

replaced_by_the_update! {
    automerge_merge_agg_transition_wrapper, pg_finfo_automerge_merge_agg_transition_wrapper;
    automerge_merge_agg_combine_wrapper, pg_finfo_automerge_merge_agg_combine_wrapper;
    automerge_merge_agg_serialize_wrapper, pg_finfo_automerge_merge_agg_serialize_wrapper;
    automerge_merge_agg_deserialize_wrapper, pg_finfo_automerge_merge_agg_deserialize_wrapper;
    automerge_merge_agg_final_wrapper, pg_finfo_automerge_merge_agg_final_wrapper;
}

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

    /// Parallel workers each merge their share of the rows and ship their states to the
    /// leader, which combines them: the answer is what one backend merging every row
    /// gives. EXPLAIN ANALYZE shows the plan was parallel and that workers ran it; the
    /// leader takes no share, so every state it combines crossed from a worker.
    #[pg_test]
    fn parallel_workers_merge_what_one_backend_merges() {
        Spi::run("CREATE TABLE forks (doc automerge)").unwrap();
        let mut expected = AutoCommit::load(&sample("project").save()).unwrap();
        // Enough rows to fill pages for both workers.
        for actor in 1..=300u16 {
            let mut id = [0u8; 16];
            id[..2].copy_from_slice(&actor.to_be_bytes());
            let mut fork = AutoCommit::load(&sample("project").save())
                .unwrap()
                .with_actor(automerge::ActorId::from(id));
            fork.put(ROOT, format!("k{actor}"), actor as i64).unwrap();
            expected.merge(&mut fork.clone()).unwrap();
            Spi::run_with_args("INSERT INTO forks VALUES ($1)", &[fork.save().into()]).unwrap();
        }
        Spi::run("ANALYZE forks").unwrap();
        let merge = "SELECT automerge_heads(m), m::jsonb::text \
                     FROM (SELECT merge_agg(doc) AS m FROM forks) merged";
        Spi::run("SET LOCAL max_parallel_workers_per_gather = 0").unwrap();
        let serial = Spi::get_two::<Vec<String>, String>(merge).unwrap();
        Spi::run(
            "SET LOCAL parallel_setup_cost = 0; SET LOCAL parallel_tuple_cost = 0; \
             SET LOCAL min_parallel_table_scan_size = 0; \
             SET LOCAL max_parallel_workers_per_gather = 2; \
             SET LOCAL parallel_leader_participation = off",
        )
        .unwrap();
        let plan: Vec<String> = Spi::connect(|client| {
            client
                .select(
                    &format!("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) {merge}"),
                    None,
                    &[],
                )
                .unwrap()
                .map(|row| row.get::<String>(1).unwrap().unwrap())
                .collect()
        });
        let plan = plan.join("\n");
        for node in ["Finalize Aggregate", "Gather", "Partial Aggregate", "Parallel Seq Scan"] {
            assert!(plan.contains(node), "no {node}:\n{plan}");
        }
        let launched = plan
            .lines()
            .find_map(|line| line.trim().strip_prefix("Workers Launched: "))
            .and_then(|count| count.parse::<u32>().ok());
        assert!(launched.is_some_and(|count| count > 0), "no worker ran it:\n{plan}");
        let parallel = Spi::get_two::<Vec<String>, String>(merge).unwrap();
        assert_eq!(parallel, serial);
        let mut heads = serial.0.unwrap();
        heads.sort();
        let mut expected_heads = pg_automerge_core::heads::to_hex(&expected.get_heads());
        expected_heads.sort();
        assert_eq!(heads, expected_heads);
    }
}
