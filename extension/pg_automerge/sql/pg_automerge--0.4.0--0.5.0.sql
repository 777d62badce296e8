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
