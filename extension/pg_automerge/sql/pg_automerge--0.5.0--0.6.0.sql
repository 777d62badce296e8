-- pg_automerge 0.5.0 → 0.6.0. The reliability step checks that an upgraded database's
-- catalog equals a fresh install's.
--
-- 0.6.0 refuses changes whose marks break the mark order of a save (and operations keyed
-- as another kind of object than their own), which 0.5.0 stored; no save replaces stored
-- bytes off the write path (the compactor, automerge_compact, automerge_repair) unless it
-- loads. The compactor leaves a value it cannot save safely as it is, warns once, and
-- counts it: automerge_compactor_status() shows the count.

CREATE FUNCTION "automerge_compactor_status"() RETURNS TABLE (
	"compacted" bigint,
	"rows_left_unsafe" bigint
)
STRICT VOLATILE PARALLEL RESTRICTED
LANGUAGE c
AS 'MODULE_PATHNAME', 'automerge_compactor_status_wrapper';
