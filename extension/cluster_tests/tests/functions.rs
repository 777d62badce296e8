//! What each SQL function shows in psql, on the sample documents, reviewed once and then
//! guarded: a change in any output fails until the new snapshot is reviewed.

use cluster_tests::psql;

fn snapshot(name: &str, sql: &str) {
    insta::with_settings!({ description => sql, omit_expression => true }, {
        insta::assert_snapshot!(name, psql(sql));
    });
}

#[test]
fn type_input_and_output() {
    snapshot(
        "text_output",
        "SELECT name, doc FROM sample_documents WHERE name IN ('empty', 'project') ORDER BY name;",
    );
    snapshot("bytea_cast", "SELECT doc::bytea FROM sample_documents WHERE name = 'empty';");
    snapshot("bad_text", "SELECT 'not hex'::automerge;");
    snapshot("bad_bytes", "SELECT '\\x0102'::bytea::automerge;");
}

#[test]
fn jsonb() {
    snapshot("jsonb_cast", "SELECT name, doc::jsonb FROM sample_documents ORDER BY name;");
    snapshot("jsonb_operators", "SELECT doc->>'title' AS title, doc #> '{items,0}' AS first FROM sample_documents WHERE name = 'todo-list';");
    snapshot(
        "jsonb_at_heads",
        "SELECT automerge_to_jsonb(doc, ARRAY[hash]) FROM sample_documents, automerge_changes(doc) \
         WHERE name = 'todo-list' ORDER BY seq;",
    );
}

#[test]
fn writes() {
    snapshot(
        "merge",
        "SELECT automerge_merge(a.doc, b.doc)::jsonb FROM sample_documents a, sample_documents b \
         WHERE a.name = 'project' AND b.name = 'todo-list';",
    );
    snapshot(
        "merge_operator_and_apply",
        "SELECT (a.doc || b.doc) = automerge_apply(a.doc, b.doc::bytea) AS same FROM sample_documents a, sample_documents b \
         WHERE a.name = 'project' AND b.name = 'meeting-notes';",
    );
    snapshot(
        "apply_missing_dependencies",
        "SELECT e.doc || (SELECT bytes FROM automerge_changes(p.doc) WHERE seq = 3) \
         FROM sample_documents e, sample_documents p WHERE e.name = 'empty' AND p.name = 'project';",
    );
}

#[test]
fn edits() {
    snapshot(
        "edits",
        "WITH e AS (SELECT doc AS before, automerge_splice(automerge_set(automerge_insert( \
         automerge_set(doc, '{status}', '\"done\"'), '{tags,0}', '\"new\"'), '{title}', '\"Launch plan\"'), \
         '{title}', 0, 6, 'Release') AS after FROM sample_documents WHERE name = 'project') \
         SELECT after::jsonb AS edited, \
         automerge_update(after, jsonb_set(before::jsonb, '{priority}', '3'))::jsonb AS updated FROM e;",
    );
    snapshot(
        "edit_refused",
        "SELECT automerge_increment(doc, '{title}') FROM sample_documents WHERE name = 'project';",
    );
}

#[test]
fn history() {
    snapshot("heads", "SELECT name, automerge_heads(doc), automerge_change_count(doc) FROM sample_documents ORDER BY name;");
    snapshot(
        "changes",
        "SELECT hash, actor, seq, start_op, op_count, time, message, deps, octet_length(bytes) AS bytes \
         FROM automerge_changes((SELECT doc FROM sample_documents WHERE name = 'meeting-notes'));",
    );
    snapshot(
        "save_since",
        "SELECT automerge_save_since(doc, '{}') FROM sample_documents WHERE name = 'meeting-notes';",
    );
    snapshot(
        "changes_meta",
        "SELECT * FROM automerge_changes_meta((SELECT doc FROM sample_documents WHERE name = 'meeting-notes'));",
    );
    snapshot(
        "get_change",
        "SELECT seq, automerge_get_change(doc, hash) = bytes AS same_bytes, \
         automerge_get_change(doc, repeat('ab', 32)) IS NULL AS unknown_is_null \
         FROM sample_documents, automerge_changes(doc) WHERE name = 'project' ORDER BY seq;",
    );
    snapshot(
        "contains",
        "SELECT a.name, b.name AS other, automerge_contains(a.doc, b.doc) AS contains_doc, \
         automerge_contains(a.doc, b.doc::bytea) AS contains_bytes \
         FROM sample_documents a, sample_documents b \
         WHERE a.name IN ('empty', 'project') AND b.name IN ('empty', 'project') ORDER BY 1, 2;",
    );
    snapshot(
        "unknown_heads",
        "SELECT automerge_save_since(doc, ARRAY[repeat('ab', 32)]) FROM sample_documents WHERE name = 'project';",
    );
}

#[test]
fn diff_and_conflicts() {
    snapshot("diff", "SELECT name, automerge_diff(doc, '{}') FROM sample_documents ORDER BY name;");
    snapshot(
        "diff_backwards",
        "SELECT automerge_diff(doc, automerge_heads(doc), ARRAY[(SELECT hash FROM automerge_changes_meta(doc) WHERE seq = 1)]) \
         FROM sample_documents WHERE name = 'project';",
    );
    snapshot(
        "diff_unknown_heads",
        "SELECT automerge_diff(doc, ARRAY[repeat('ab', 32)]) FROM sample_documents WHERE name = 'project';",
    );
    snapshot(
        "conflicts",
        "SELECT c.* FROM sample_documents a, sample_documents b, automerge_conflicts(a.doc || b.doc, '{title}') c \
         WHERE a.name = 'project' AND b.name = 'todo-list';",
    );
    snapshot(
        "conflicts_path_to_nothing",
        "SELECT * FROM automerge_conflicts((SELECT doc FROM sample_documents WHERE name = 'project'), '{missing,key}');",
    );
}

#[test]
fn spans() {
    snapshot("spans", "SELECT automerge_spans(doc, '{content}') FROM sample_documents WHERE name = 'meeting-notes';");
    snapshot("markdown", "SELECT automerge_markdown(doc, '{content}') FROM sample_documents WHERE name = 'meeting-notes';");
    snapshot("html", "SELECT automerge_html(doc, '{content}') FROM sample_documents WHERE name = 'meeting-notes';");
    snapshot(
        "html_not_text",
        "SELECT automerge_html(doc, '{title}') FROM sample_documents WHERE name = 'meeting-notes';",
    );
    snapshot("spans_not_text", "SELECT automerge_spans(doc, '{title}') FROM sample_documents WHERE name = 'meeting-notes';");
}

#[test]
fn aggregate_and_equality() {
    snapshot("merge_agg", "SELECT merge_agg(doc)::jsonb FROM sample_documents;");
    snapshot(
        "equality",
        "SELECT a.name, b.name, a.doc = b.doc AS eq, automerge_cmp(a.doc, b.doc) AS cmp \
         FROM sample_documents a, sample_documents b WHERE a.name <= b.name ORDER BY 1, 2;",
    );
}

#[test]
fn storage() {
    snapshot(
        "storage",
        "SELECT name, s.* FROM sample_documents, automerge_storage(doc) AS s ORDER BY name;",
    );
    snapshot(
        "compact",
        "SELECT name, automerge_compact(doc) = doc AS same_heads, automerge_compact(doc)::bytea = doc::bytea AS same_bytes \
         FROM sample_documents ORDER BY name;",
    );
    // The compactor's counts vary with what it found; their names and types do not.
    snapshot(
        "compactor_status",
        "SELECT pg_typeof(compacted) AS compacted, pg_typeof(rows_left_unsafe) AS rows_left_unsafe \
         FROM automerge_compactor_status();",
    );
}
