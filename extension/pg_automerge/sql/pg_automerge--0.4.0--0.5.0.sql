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
