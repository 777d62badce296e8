-- pg_automerge 0.3.0 → 0.4.0.
--
-- The reliability step checks that an upgraded database's catalog equals a fresh
-- install's.

-- ---------------------------------------------------------------------------------------
-- Issue 20: automerge_storage(doc) gains estimated_load_bytes, the load estimate that
-- pg_automerge.max_load_memory is checked against, read from the value's header without
-- loading it. A function's result columns cannot change in place: it is dropped and
-- created again (a view that uses it must be dropped first and created again after).
-- merge_agg keeps its signature; its state now counts against max_load_memory.
-- ---------------------------------------------------------------------------------------

DROP FUNCTION "automerge_storage"(automerge);

CREATE FUNCTION "automerge_storage"(
	"doc" automerge
) RETURNS TABLE (
	"format_version" INT,
	"stored_bytes" bigint,
	"payload_bytes" bigint,
	"jsonb_bytes" bigint,
	"appended_changes" bigint,
	"estimated_load_bytes" bigint
)
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'automerge_storage_wrapper';

-- End of issue 20's part.
