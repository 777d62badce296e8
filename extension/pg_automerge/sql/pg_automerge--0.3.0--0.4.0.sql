-- pg_automerge 0.3.0 → 0.4.0.
--
-- 0.4.0 refuses changes that would store a document Automerge cannot load again (22P03,
-- with the loader rule they break in the DETAIL), on every write path. Values that 0.3.0
-- stored from such changes are refused by writes that load them (XX001); the two functions
-- below find and mend them.

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
