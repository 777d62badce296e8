-- pg_automerge 0.3.0 → 0.4.0.
--
-- 0.4.0 refuses changes that would store a document Automerge cannot load again (22P03,
-- with the loader rule they break in the DETAIL), on every write path. Values that 0.3.0
-- stored from such changes are refused by writes that load them (XX001); automerge_loads
-- and automerge_repair find and mend them. automerge_storage(doc) gains
-- estimated_load_bytes, the load estimate that pg_automerge.max_load_memory is checked
-- against, read from the value's header without a load; merge_agg keeps its signature, and
-- its state now counts against max_load_memory. The reliability step checks that an
-- upgraded database's catalog equals a fresh install's.

CREATE FUNCTION "automerge_loads"(
	"doc" automerge
) RETURNS bool
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'automerge_loads_wrapper';

CREATE FUNCTION "automerge_repair"(
	"doc" automerge
) RETURNS automerge
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'automerge_repair_wrapper';

-- A function's result columns cannot change in place: it is dropped and created again (a
-- view that uses it must be dropped first and created again after).
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
