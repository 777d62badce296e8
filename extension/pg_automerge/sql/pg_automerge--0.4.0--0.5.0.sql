-- pg_automerge 0.4.0 → 0.5.0. The reliability step checks that an upgraded database's
-- catalog equals a fresh install's.
--
-- 0.5.0 stores values in format version 3: the document's JSON kept as PostgreSQL's
-- binary jsonb (compressed by the extension), the header and actor table first, so that
-- reads hand the jsonb to the operators without parsing it and header reads fetch one
-- TOAST chunk. Values of earlier versions keep reading and are rewritten in version 3 by
-- their next write (or automerge_compact). TOAST no longer compresses the type: new
-- columns are created with STORAGE external; existing columns keep what they had until
-- ALTER TABLE ... ALTER COLUMN ... SET STORAGE EXTERNAL (see docs/storage-format.md).

ALTER TYPE automerge SET (STORAGE = external);

-- 0.5.0 also answers what changed and who changed it: automerge_changes_meta lists the changes
-- without their bytes, automerge_get_change returns one change by its hash, and
-- automerge_contains tells whether a merge of a document or of changes would add nothing;
-- automerge_diff returns what changed between two points of history as the JS client's
-- patches; automerge_conflicts lists every concurrent value at a key or index; and
-- automerge_markdown and automerge_html turn rich text into CommonMark and safe HTML.

CREATE FUNCTION "automerge_changes_meta"(
	"doc" automerge,
	"since" TEXT[] DEFAULT NULL
) RETURNS TABLE (
	"hash" TEXT,
	"actor" TEXT,
	"seq" bigint,
	"start_op" bigint,
	"op_count" bigint,
	"time" timestamp with time zone,
	"message" TEXT,
	"deps" TEXT[]
)
IMMUTABLE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'automerge_changes_meta_wrapper';

CREATE FUNCTION "automerge_get_change"(
	"doc" automerge,
	"hash" TEXT
) RETURNS bytea
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'automerge_get_change_wrapper';

CREATE FUNCTION "automerge_contains"(
	"doc" automerge,
	"other" automerge
) RETURNS bool
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'automerge_contains_wrapper';

CREATE FUNCTION "automerge_contains"(
	"doc" automerge,
	"changes" bytea
) RETURNS bool
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'automerge_contains_changes_wrapper';

CREATE FUNCTION "automerge_diff"(
	"doc" automerge,
	"from_heads" TEXT[]
) RETURNS jsonb
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'automerge_diff_wrapper';

CREATE FUNCTION "automerge_diff"(
	"doc" automerge,
	"from_heads" TEXT[],
	"to_heads" TEXT[]
) RETURNS jsonb
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'automerge_diff_to_wrapper';

CREATE FUNCTION "automerge_conflicts"(
	"doc" automerge,
	"path" TEXT[]
) RETURNS TABLE (
	"value" jsonb,
	"op_id" TEXT,
	"winner" bool
)
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'automerge_conflicts_wrapper';

CREATE FUNCTION "automerge_markdown"(
	"doc" automerge,
	"path" TEXT[]
) RETURNS TEXT
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'automerge_markdown_wrapper';

CREATE FUNCTION "automerge_markdown"(
	"doc" automerge,
	"path" TEXT[],
	"heads" TEXT[]
) RETURNS TEXT
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'automerge_markdown_at_wrapper';

CREATE FUNCTION "automerge_html"(
	"doc" automerge,
	"path" TEXT[]
) RETURNS TEXT
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'automerge_html_wrapper';

CREATE FUNCTION "automerge_html"(
	"doc" automerge,
	"path" TEXT[],
	"heads" TEXT[]
) RETURNS TEXT
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'automerge_html_at_wrapper';

-- 0.5.0 gives merge_agg a transition type of its own, automerge_merge_state, in place of
-- internal: Citus pushes an aggregate down to its workers only when the state is a real
-- type it can ship between nodes (see docs/scaling.md). The aggregate and its functions are
-- made again with functions of new names (the library keeps the old C symbols, which refuse
-- with a hint to update); a state travels as the merged document's Automerge bytes, so the
-- serialize and deserialize functions that internal needed are gone.

DROP AGGREGATE merge_agg(automerge);
DROP FUNCTION automerge_merge_agg_transition(internal, automerge);
DROP FUNCTION automerge_merge_agg_combine(internal, internal);
DROP FUNCTION automerge_merge_agg_serialize(internal);
DROP FUNCTION automerge_merge_agg_deserialize(bytea, internal);
DROP FUNCTION automerge_merge_agg_final(internal);

CREATE TYPE automerge_merge_state; -- a shell type: its I/O functions are defined next

CREATE FUNCTION "automerge_merge_state_in"(
	"input" cstring
) RETURNS automerge_merge_state
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'automerge_merge_state_in_wrapper';

CREATE FUNCTION "automerge_merge_state_out"(
	"state" automerge_merge_state
) RETURNS cstring
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'automerge_merge_state_out_wrapper';

CREATE FUNCTION "automerge_merge_state_recv"(
	"buf" internal
) RETURNS automerge_merge_state
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'automerge_merge_state_recv_wrapper';

CREATE FUNCTION "automerge_merge_state_send"(
	"state" automerge_merge_state
) RETURNS bytea
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'automerge_merge_state_send_wrapper';

CREATE TYPE automerge_merge_state (
    INPUT = automerge_merge_state_in,
    OUTPUT = automerge_merge_state_out,
    RECEIVE = automerge_merge_state_recv,
    SEND = automerge_merge_state_send,
    INTERNALLENGTH = VARIABLE,
    STORAGE = external
);
COMMENT ON TYPE automerge_merge_state IS 'the state of merge_agg: the merge so far, as Automerge bytes';

CREATE FUNCTION "automerge_merge_state_add"(
	"state" automerge_merge_state,
	"doc" automerge
) RETURNS automerge_merge_state
IMMUTABLE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'automerge_merge_state_add_wrapper';

CREATE FUNCTION "automerge_merge_state_combine"(
	"left" automerge_merge_state,
	"right" automerge_merge_state
) RETURNS automerge_merge_state
IMMUTABLE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'automerge_merge_state_combine_wrapper';

CREATE FUNCTION "automerge_merge_state_result"(
	"state" automerge_merge_state
) RETURNS automerge
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'automerge_merge_state_result_wrapper';

CREATE AGGREGATE merge_agg(automerge) (
    SFUNC = automerge_merge_state_add,
    STYPE = automerge_merge_state,
    FINALFUNC = automerge_merge_state_result,
    COMBINEFUNC = automerge_merge_state_combine,
    PARALLEL = SAFE
);
COMMENT ON AGGREGATE merge_agg(automerge) IS 'the merge of every document in the group';

-- 0.5.0 sorts documents by abbreviated keys: ORDER BY doc, sort-based grouping and merge
-- joins read each document's header about once instead of twice per comparison.
CREATE FUNCTION "automerge_sortsupport"(
	"ssup" internal
) RETURNS void
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'automerge_sortsupport_wrapper';
ALTER OPERATOR FAMILY automerge_btree_ops USING btree
    ADD FUNCTION 2 (automerge, automerge) automerge_sortsupport(internal);

-- automerge_storage(doc) gains structure_bytes: what the structure index takes, the index
-- that lets writes of text, lists and nested fields append without a load. A function's
-- result columns cannot change in place: it is dropped and created again (a view that uses
-- it must be dropped first and created again after).
DROP FUNCTION "automerge_storage"(automerge);

CREATE FUNCTION "automerge_storage"(
	"doc" automerge
) RETURNS TABLE (
	"format_version" INT,
	"stored_bytes" bigint,
	"payload_bytes" bigint,
	"jsonb_bytes" bigint,
	"appended_changes" bigint,
	"estimated_load_bytes" bigint,
	"structure_bytes" bigint
)
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'automerge_storage_wrapper';

-- automerge_appended_changes(doc): how many changes follow the value's last save, read
-- from its header alone; the background compactor looks for values with some.
CREATE FUNCTION "automerge_appended_changes"(
	"doc" automerge
) RETURNS INT
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'automerge_appended_changes_wrapper';
