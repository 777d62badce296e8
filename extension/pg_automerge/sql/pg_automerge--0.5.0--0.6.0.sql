-- pg_automerge 0.5.0 → 0.6.0. The reliability step checks that an upgraded database's
-- catalog equals a fresh install's.
--
-- 0.6.0 refuses changes whose marks break the mark order of a save (and operations keyed
-- as another kind of object than their own), which 0.5.0 stored; no save replaces stored
-- bytes off the write path (the compactor, automerge_compact, automerge_repair) unless it
-- loads. The compactor leaves a value it cannot save safely as it is, warns once, and
-- counts it: automerge_compactor_status() shows the count. Documents can be edited from
-- SQL (automerge_set, _insert, _delete, _set_counter, _increment, _splice, _update).

CREATE FUNCTION "automerge_compactor_status"() RETURNS TABLE (
	"compacted" bigint,
	"rows_left_unsafe" bigint
)
STRICT VOLATILE PARALLEL RESTRICTED
LANGUAGE c
AS 'MODULE_PATHNAME', 'automerge_compactor_status_wrapper';

-- Edits from SQL: each makes one Automerge change by the backend's actor, stamped with
-- change_time or the transaction's start; the _change
-- variants return the change instead of the document.
CREATE FUNCTION "automerge_set"(
	"doc" automerge,
	"path" TEXT[],
	"value" jsonb,
	"message" TEXT DEFAULT NULL,
	"change_time" timestamp with time zone DEFAULT NULL,
	"plain_strings" bool DEFAULT false
) RETURNS automerge
VOLATILE
LANGUAGE c
AS 'MODULE_PATHNAME', 'automerge_set_wrapper';

CREATE FUNCTION "automerge_insert"(
	"doc" automerge,
	"path" TEXT[],
	"value" jsonb,
	"insert_after" bool DEFAULT false,
	"message" TEXT DEFAULT NULL,
	"change_time" timestamp with time zone DEFAULT NULL,
	"plain_strings" bool DEFAULT false
) RETURNS automerge
VOLATILE
LANGUAGE c
AS 'MODULE_PATHNAME', 'automerge_insert_wrapper';

CREATE FUNCTION "automerge_delete"(
	"doc" automerge,
	"path" TEXT[],
	"message" TEXT DEFAULT NULL,
	"change_time" timestamp with time zone DEFAULT NULL
) RETURNS automerge
VOLATILE
LANGUAGE c
AS 'MODULE_PATHNAME', 'automerge_delete_wrapper';

CREATE FUNCTION "automerge_set_counter"(
	"doc" automerge,
	"path" TEXT[],
	"value" bigint DEFAULT 0,
	"message" TEXT DEFAULT NULL,
	"change_time" timestamp with time zone DEFAULT NULL
) RETURNS automerge
VOLATILE
LANGUAGE c
AS 'MODULE_PATHNAME', 'automerge_set_counter_wrapper';

CREATE FUNCTION "automerge_increment"(
	"doc" automerge,
	"path" TEXT[],
	"by" bigint DEFAULT 1,
	"message" TEXT DEFAULT NULL,
	"change_time" timestamp with time zone DEFAULT NULL
) RETURNS automerge
VOLATILE
LANGUAGE c
AS 'MODULE_PATHNAME', 'automerge_increment_wrapper';

CREATE FUNCTION "automerge_splice"(
	"doc" automerge,
	"path" TEXT[],
	"pos" bigint,
	"delete_count" bigint,
	"text" TEXT DEFAULT '',
	"message" TEXT DEFAULT NULL,
	"change_time" timestamp with time zone DEFAULT NULL
) RETURNS automerge
VOLATILE
LANGUAGE c
AS 'MODULE_PATHNAME', 'automerge_splice_wrapper';

CREATE FUNCTION "automerge_mark"(
	"doc" automerge,
	"path" TEXT[],
	"start_pos" bigint,
	"end_pos" bigint,
	"name" TEXT,
	"value" jsonb DEFAULT 'true',
	"expand" TEXT DEFAULT 'after',
	"message" TEXT DEFAULT NULL,
	"change_time" timestamp with time zone DEFAULT NULL
) RETURNS automerge
VOLATILE
LANGUAGE c
AS 'MODULE_PATHNAME', 'automerge_mark_wrapper';

CREATE FUNCTION "automerge_unmark"(
	"doc" automerge,
	"path" TEXT[],
	"start_pos" bigint,
	"end_pos" bigint,
	"name" TEXT,
	"expand" TEXT DEFAULT 'after',
	"message" TEXT DEFAULT NULL,
	"change_time" timestamp with time zone DEFAULT NULL
) RETURNS automerge
VOLATILE
LANGUAGE c
AS 'MODULE_PATHNAME', 'automerge_unmark_wrapper';

CREATE FUNCTION "automerge_split_block"(
	"doc" automerge,
	"path" TEXT[],
	"pos" bigint,
	"block" jsonb DEFAULT '{"type": "paragraph", "parents": [], "attrs": {}}',
	"message" TEXT DEFAULT NULL,
	"change_time" timestamp with time zone DEFAULT NULL
) RETURNS automerge
VOLATILE
LANGUAGE c
AS 'MODULE_PATHNAME', 'automerge_split_block_wrapper';

CREATE FUNCTION "automerge_update"(
	"doc" automerge,
	"value" jsonb,
	"message" TEXT DEFAULT NULL,
	"change_time" timestamp with time zone DEFAULT NULL,
	"plain_strings" bool DEFAULT false
) RETURNS automerge
VOLATILE
LANGUAGE c
AS 'MODULE_PATHNAME', 'automerge_update_wrapper';

CREATE FUNCTION "automerge_set_change"(
	"doc" automerge,
	"path" TEXT[],
	"value" jsonb,
	"message" TEXT DEFAULT NULL,
	"change_time" timestamp with time zone DEFAULT NULL,
	"plain_strings" bool DEFAULT false
) RETURNS bytea
VOLATILE
LANGUAGE c
AS 'MODULE_PATHNAME', 'automerge_set_change_wrapper';

CREATE FUNCTION "automerge_insert_change"(
	"doc" automerge,
	"path" TEXT[],
	"value" jsonb,
	"insert_after" bool DEFAULT false,
	"message" TEXT DEFAULT NULL,
	"change_time" timestamp with time zone DEFAULT NULL,
	"plain_strings" bool DEFAULT false
) RETURNS bytea
VOLATILE
LANGUAGE c
AS 'MODULE_PATHNAME', 'automerge_insert_change_wrapper';

CREATE FUNCTION "automerge_delete_change"(
	"doc" automerge,
	"path" TEXT[],
	"message" TEXT DEFAULT NULL,
	"change_time" timestamp with time zone DEFAULT NULL
) RETURNS bytea
VOLATILE
LANGUAGE c
AS 'MODULE_PATHNAME', 'automerge_delete_change_wrapper';

CREATE FUNCTION "automerge_set_counter_change"(
	"doc" automerge,
	"path" TEXT[],
	"value" bigint DEFAULT 0,
	"message" TEXT DEFAULT NULL,
	"change_time" timestamp with time zone DEFAULT NULL
) RETURNS bytea
VOLATILE
LANGUAGE c
AS 'MODULE_PATHNAME', 'automerge_set_counter_change_wrapper';

CREATE FUNCTION "automerge_increment_change"(
	"doc" automerge,
	"path" TEXT[],
	"by" bigint DEFAULT 1,
	"message" TEXT DEFAULT NULL,
	"change_time" timestamp with time zone DEFAULT NULL
) RETURNS bytea
VOLATILE
LANGUAGE c
AS 'MODULE_PATHNAME', 'automerge_increment_change_wrapper';

CREATE FUNCTION "automerge_splice_change"(
	"doc" automerge,
	"path" TEXT[],
	"pos" bigint,
	"delete_count" bigint,
	"text" TEXT DEFAULT '',
	"message" TEXT DEFAULT NULL,
	"change_time" timestamp with time zone DEFAULT NULL
) RETURNS bytea
VOLATILE
LANGUAGE c
AS 'MODULE_PATHNAME', 'automerge_splice_change_wrapper';

CREATE FUNCTION "automerge_mark_change"(
	"doc" automerge,
	"path" TEXT[],
	"start_pos" bigint,
	"end_pos" bigint,
	"name" TEXT,
	"value" jsonb DEFAULT 'true',
	"expand" TEXT DEFAULT 'after',
	"message" TEXT DEFAULT NULL,
	"change_time" timestamp with time zone DEFAULT NULL
) RETURNS bytea
VOLATILE
LANGUAGE c
AS 'MODULE_PATHNAME', 'automerge_mark_change_wrapper';

CREATE FUNCTION "automerge_unmark_change"(
	"doc" automerge,
	"path" TEXT[],
	"start_pos" bigint,
	"end_pos" bigint,
	"name" TEXT,
	"expand" TEXT DEFAULT 'after',
	"message" TEXT DEFAULT NULL,
	"change_time" timestamp with time zone DEFAULT NULL
) RETURNS bytea
VOLATILE
LANGUAGE c
AS 'MODULE_PATHNAME', 'automerge_unmark_change_wrapper';

CREATE FUNCTION "automerge_split_block_change"(
	"doc" automerge,
	"path" TEXT[],
	"pos" bigint,
	"block" jsonb DEFAULT '{"type": "paragraph", "parents": [], "attrs": {}}',
	"message" TEXT DEFAULT NULL,
	"change_time" timestamp with time zone DEFAULT NULL
) RETURNS bytea
VOLATILE
LANGUAGE c
AS 'MODULE_PATHNAME', 'automerge_split_block_change_wrapper';

CREATE FUNCTION "automerge_update_change"(
	"doc" automerge,
	"value" jsonb,
	"message" TEXT DEFAULT NULL,
	"change_time" timestamp with time zone DEFAULT NULL,
	"plain_strings" bool DEFAULT false
) RETURNS bytea
VOLATILE
LANGUAGE c
AS 'MODULE_PATHNAME', 'automerge_update_change_wrapper';
