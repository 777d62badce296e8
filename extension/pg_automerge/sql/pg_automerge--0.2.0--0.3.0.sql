-- pg_automerge 0.2.0 → 0.3.0.
--
-- 0.3.0 writes the storage format version 2, which keeps each document's JSON (so jsonb
-- reads need no load) and lets small incremental writes append changes without a load;
-- values written by 0.2.0 (format version 1) read as before. New: the settings
-- pg_automerge.keep_jsonb and pg_automerge.append_limit (no SQL objects), and the three
-- functions below. The reliability step checks that an upgraded database's catalog
-- equals a fresh install's.

CREATE FUNCTION "automerge_storage"(
	"doc" automerge
) RETURNS TABLE (
	"format_version" INT,
	"stored_bytes" bigint,
	"payload_bytes" bigint,
	"jsonb_bytes" bigint,
	"appended_changes" bigint
)
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'automerge_storage_wrapper';

CREATE FUNCTION "automerge_compact"(
	"doc" automerge
) RETURNS automerge
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'automerge_compact_wrapper';

CREATE FUNCTION "automerge_has_changes"(
	"doc" automerge,
	"heads" TEXT[]
) RETURNS bool
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'automerge_has_changes_wrapper';
