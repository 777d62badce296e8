//! Equality: two documents with the same heads are the same state. `=` and `<>` compare
//! the heads in the stored headers, without loading. A hash operator class makes
//! `DISTINCT`, `GROUP BY`, hash joins and `REPLICA IDENTITY FULL` work. A btree class
//! orders documents by their sorted heads: an order that says nothing about content, but
//! is total and agrees with `=`, which is what `count(DISTINCT doc)`, sort-based grouping
//! and merge joins need. Sorts compare abbreviated keys, so that
//! ordering many large documents reads each one's header about once.

use std::cmp::Ordering;
use std::ffi::c_int;

use pgrx::prelude::*;
use pgrx::Internal;

use crate::datum::DocHeader;
use crate::errors::OrRaise;

fn compare(left: &DocHeader<'_>, right: &DocHeader<'_>) -> Ordering {
    left.summary.heads.cmp(&right.summary.heads)
}

#[pg_extern(immutable, strict, parallel_safe)]
fn automerge_cmp(left: DocHeader<'_>, right: DocHeader<'_>) -> i32 {
    compare(&left, &right) as i32
}

#[pg_extern(immutable, strict, parallel_safe)]
fn automerge_eq(left: DocHeader<'_>, right: DocHeader<'_>) -> bool {
    compare(&left, &right).is_eq()
}

#[pg_extern(immutable, strict, parallel_safe)]
fn automerge_ne(left: DocHeader<'_>, right: DocHeader<'_>) -> bool {
    compare(&left, &right).is_ne()
}

#[pg_extern(immutable, strict, parallel_safe)]
fn automerge_lt(left: DocHeader<'_>, right: DocHeader<'_>) -> bool {
    compare(&left, &right).is_lt()
}

#[pg_extern(immutable, strict, parallel_safe)]
fn automerge_le(left: DocHeader<'_>, right: DocHeader<'_>) -> bool {
    compare(&left, &right).is_le()
}

#[pg_extern(immutable, strict, parallel_safe)]
fn automerge_gt(left: DocHeader<'_>, right: DocHeader<'_>) -> bool {
    compare(&left, &right).is_gt()
}

#[pg_extern(immutable, strict, parallel_safe)]
fn automerge_ge(left: DocHeader<'_>, right: DocHeader<'_>) -> bool {
    compare(&left, &right).is_ge()
}

/// A sort's support: the abbreviated key of a document is the first eight bytes of its
/// smallest head, read from its header once as the sort takes the tuple in; the headers
/// are read again only for documents whose keys tie (equal documents, or one in 2^64).
#[pg_extern(immutable, strict, parallel_safe)]
fn automerge_sortsupport(mut ssup: Internal) {
    // SAFETY: Postgres passes a sort support function its SortSupportData.
    let ssup = unsafe { ssup.get_mut::<pg_sys::SortSupportData>() }
        .expect("a sort support function gets its SortSupportData");
    ssup.comparator = Some(compare_datums);
    if ssup.abbreviate {
        ssup.comparator = Some(compare_keys);
        ssup.abbrev_converter = Some(abbreviate);
        ssup.abbrev_abort = Some(keep_abbreviating);
        ssup.abbrev_full_comparator = Some(compare_datums);
    }
}

/// Reads a sorted document's heads, raising what a bad value raises in `automerge_cmp`.
unsafe fn heads_of(datum: pg_sys::Datum) -> Vec<automerge::ChangeHash> {
    // SAFETY: a sort hands its comparators non-null values of the sorted column's type.
    unsafe { DocHeader::read(datum) }.or_raise("automerge_cmp").summary.heads
}

#[pg_guard]
unsafe extern "C-unwind" fn compare_datums(
    left: pg_sys::Datum,
    right: pg_sys::Datum,
    _ssup: pg_sys::SortSupport,
) -> c_int {
    unsafe { heads_of(left).cmp(&heads_of(right)) as c_int }
}

/// Abbreviated keys in unsigned order (what Postgres's `ssup_datum_unsigned_cmp` does,
/// which pgrx binds as a Rust function only).
unsafe extern "C-unwind" fn compare_keys(
    left: pg_sys::Datum,
    right: pg_sys::Datum,
    _ssup: pg_sys::SortSupport,
) -> c_int {
    left.value().cmp(&right.value()) as c_int
}

/// Big-endian, so that unsigned order of keys is the heads' byte order; no heads (an empty
/// document, first in the order) is 0, which ties only with heads starting with 8 zeros.
#[pg_guard]
unsafe extern "C-unwind" fn abbreviate(
    original: pg_sys::Datum,
    _ssup: pg_sys::SortSupport,
) -> pg_sys::Datum {
    let heads = unsafe { heads_of(original) };
    let key = heads
        .first()
        .map_or(0, |head| u64::from_be_bytes(head.0[..8].try_into().expect("8 bytes")));
    pg_sys::Datum::from(key as usize)
}

/// Heads are SHA-256 hashes: keys are as distinct as the documents, so abbreviation never
/// stops paying.
#[pg_guard]
unsafe extern "C-unwind" fn keep_abbreviating(_tuples: c_int, _ssup: pg_sys::SortSupport) -> bool {
    false
}

/// Heads are SHA-256 hashes, already uniformly distributed: folding their first eight
/// bytes together is a good hash.
fn fold_heads(doc: &DocHeader<'_>) -> u64 {
    doc.summary.heads.iter().fold(0, |acc, head| {
        acc.rotate_left(5) ^ u64::from_le_bytes(head.0[..8].try_into().expect("8 bytes"))
    })
}

#[pg_extern(immutable, strict, parallel_safe)]
fn automerge_hash(doc: DocHeader<'_>) -> i32 {
    fold_heads(&doc) as u32 as i32
}

/// The 64-bit hash Postgres asks for (hash partitioning); with seed 0 its low 32 bits are
/// `automerge_hash`, as Postgres requires.
#[pg_extern(immutable, strict, parallel_safe)]
fn automerge_hash_extended(doc: DocHeader<'_>, seed: i64) -> i64 {
    let folded = fold_heads(&doc);
    if seed == 0 {
        return folded as i64;
    }
    // One splitmix64 round over the seed, mixed in.
    let mut z = (seed as u64).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (folded ^ z ^ (z >> 31)) as i64
}

extension_sql!(
    r#"
CREATE OPERATOR = (
    LEFTARG = automerge, RIGHTARG = automerge, FUNCTION = automerge_eq,
    COMMUTATOR = =, NEGATOR = <>, RESTRICT = eqsel, JOIN = eqjoinsel, HASHES, MERGES
);
COMMENT ON OPERATOR = (automerge, automerge) IS 'same heads: the same document state';
CREATE OPERATOR <> (
    LEFTARG = automerge, RIGHTARG = automerge, FUNCTION = automerge_ne,
    COMMUTATOR = <>, NEGATOR = =, RESTRICT = neqsel, JOIN = neqjoinsel
);
CREATE OPERATOR < (
    LEFTARG = automerge, RIGHTARG = automerge, FUNCTION = automerge_lt,
    COMMUTATOR = >, NEGATOR = >=, RESTRICT = scalarltsel, JOIN = scalarltjoinsel
);
CREATE OPERATOR <= (
    LEFTARG = automerge, RIGHTARG = automerge, FUNCTION = automerge_le,
    COMMUTATOR = >=, NEGATOR = >, RESTRICT = scalarlesel, JOIN = scalarlejoinsel
);
CREATE OPERATOR > (
    LEFTARG = automerge, RIGHTARG = automerge, FUNCTION = automerge_gt,
    COMMUTATOR = <, NEGATOR = <=, RESTRICT = scalargtsel, JOIN = scalargtjoinsel
);
CREATE OPERATOR >= (
    LEFTARG = automerge, RIGHTARG = automerge, FUNCTION = automerge_ge,
    COMMUTATOR = <=, NEGATOR = <, RESTRICT = scalargesel, JOIN = scalargejoinsel
);
CREATE OPERATOR CLASS automerge_btree_ops DEFAULT FOR TYPE automerge USING btree AS
    OPERATOR 1 <, OPERATOR 2 <=, OPERATOR 3 =, OPERATOR 4 >=, OPERATOR 5 >,
    FUNCTION 1 automerge_cmp(automerge, automerge),
    FUNCTION 2 automerge_sortsupport(internal);
CREATE OPERATOR CLASS automerge_hash_ops DEFAULT FOR TYPE automerge USING hash AS
    OPERATOR 1 = (automerge, automerge),
    FUNCTION 1 automerge_hash(automerge),
    FUNCTION 2 automerge_hash_extended(automerge, bigint);
"#,
    name = "automerge_equality",
    requires = [
        "automerge_type",
        automerge_cmp,
        automerge_sortsupport,
        automerge_eq,
        automerge_ne,
        automerge_lt,
        automerge_le,
        automerge_gt,
        automerge_ge,
        automerge_hash,
        automerge_hash_extended
    ],
);

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::test_support::with_samples;

    #[pg_test]
    fn same_heads_are_equal() {
        with_samples();
        let equal = Spi::get_one::<bool>(
            "SELECT a.doc = b.doc AND NOT a.doc <> b.doc FROM samples a, samples b \
             WHERE a.name = 'project' AND b.name = 'project'",
        );
        assert_eq!(equal.unwrap(), Some(true));
        let different = Spi::get_one::<bool>(
            "SELECT a.doc <> b.doc FROM samples a, samples b \
             WHERE a.name = 'project' AND b.name = 'todo-list'",
        );
        assert_eq!(different.unwrap(), Some(true));
        // Re-encoding does not change the state: changes equal the save they make.
        let reencoded = Spi::get_one::<bool>(
            "SELECT doc = (SELECT string_agg(bytes, ''::bytea ORDER BY seq) FROM automerge_changes(doc))::automerge \
             FROM samples WHERE name = 'todo-list'",
        );
        assert_eq!(reencoded.unwrap(), Some(true));
    }

    #[pg_test]
    fn distinct_and_group_by_use_the_hash_class() {
        with_samples();
        Spi::run("INSERT INTO samples SELECT name || '-copy', doc FROM samples").unwrap();
        let distinct = Spi::get_one::<i64>("SELECT count(DISTINCT doc) FROM samples");
        assert_eq!(distinct.unwrap(), Some(4));
        let groups = Spi::get_one::<i64>(
            "SELECT count(*) FROM (SELECT doc FROM samples GROUP BY doc HAVING count(*) = 2) g",
        );
        assert_eq!(groups.unwrap(), Some(4));
        let union = Spi::get_one::<i64>(
            "SELECT count(*) FROM (SELECT doc FROM samples UNION SELECT doc FROM samples) u",
        );
        assert_eq!(union.unwrap(), Some(4));
    }

    #[pg_test]
    fn the_order_is_total_and_agrees_with_equality() {
        with_samples();
        let consistent = Spi::get_one::<bool>(
            "SELECT bool_and((a.doc = b.doc) = (automerge_cmp(a.doc, b.doc) = 0) \
                AND (a.doc < b.doc) = (b.doc > a.doc) \
                AND (a.doc <= b.doc) = NOT (a.doc > b.doc) \
                AND automerge_cmp(a.doc, b.doc) = -automerge_cmp(b.doc, a.doc)) \
             FROM samples a, samples b",
        );
        assert_eq!(consistent.unwrap(), Some(true));
    }

    #[pg_test]
    fn replica_identity_full_is_accepted_and_hash_extended_agrees() {
        with_samples();
        Spi::run("ALTER TABLE samples REPLICA IDENTITY FULL").unwrap();
        let agree = Spi::get_one::<bool>(
            "SELECT bool_and((automerge_hash_extended(doc, 0) & 4294967295) = (automerge_hash(doc)::bigint & 4294967295)) \
             FROM samples",
        );
        assert_eq!(agree.unwrap(), Some(true));
    }
}
