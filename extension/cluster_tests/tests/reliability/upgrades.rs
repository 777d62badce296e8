//! The extension's SQL versions on a cluster: the frozen install script of a released
//! version, and the upgrade of every older release, must each define exactly what a fresh
//! `CREATE EXTENSION` of the current version does.

use anyhow::{ensure, Result};
use cluster_tests::server::Server;
use cluster_tests::{line_differences, versions, RELIABILITY_PRIMARY};

/// What the extension defines, one line per object, in a form that two databases can be
/// compared by: every function (with its full definition, or an aggregate's parts), operator,
/// type, cast and operator class in schema `public` (row types of tables left out).
const CATALOG: &str = "\\t on
\\a
SELECT line FROM (
  SELECT CASE WHEN p.prokind = 'a' THEN format(
           'aggregate %s(%s) sfunc %s stype %s combine %s serial %s deserial %s final %s parallel %s',
           p.proname, pg_get_function_identity_arguments(p.oid), a.aggtransfn, a.aggtranstype::regtype,
           a.aggcombinefn, a.aggserialfn, a.aggdeserialfn, a.aggfinalfn, p.proparallel)
         ELSE pg_get_functiondef(p.oid) || format(' secdef %s', p.prosecdef) END AS line
  FROM pg_proc p LEFT JOIN pg_aggregate a ON a.aggfnoid = p.oid
  WHERE p.pronamespace = 'public'::regnamespace
  UNION ALL
  SELECT format('operator %s(%s, %s) -> %s %s com %s neg %s rest %s join %s merges %s hashes %s',
           oprname, oprleft::regtype, oprright::regtype, oprresult::regtype, oprcode,
           oprcom::regoperator, oprnegate::regoperator, oprrest, oprjoin, oprcanmerge, oprcanhash)
  FROM pg_operator WHERE oprnamespace = 'public'::regnamespace
  UNION ALL
  SELECT format('type %s %s len %s byval %s align %s storage %s in %s out %s recv %s send %s elem %s category %s',
           t.typname, t.typtype, t.typlen, t.typbyval, t.typalign, t.typstorage, t.typinput,
           t.typoutput, t.typreceive, t.typsend, t.typelem::regtype, t.typcategory)
  FROM pg_type t LEFT JOIN pg_type e ON e.oid = t.typelem
  WHERE t.typnamespace = 'public'::regnamespace AND t.typrelid = 0 AND coalesce(e.typrelid, 0) = 0
  UNION ALL
  SELECT format('cast %s -> %s %s context %s method %s', castsource::regtype, casttarget::regtype,
           castfunc::regprocedure, castcontext, castmethod)
  FROM pg_cast WHERE castsource::regtype::text = 'automerge' OR casttarget::regtype::text = 'automerge'
  UNION ALL
  SELECT format('opclass %s %s default %s for %s: %s; %s', c.opcname, m.amname, c.opcdefault,
           c.opcintype::regtype,
           (SELECT string_agg(format('%s %s', o.amopstrategy, o.amopopr::regoperator), ', ' ORDER BY o.amopstrategy)
              FROM pg_amop o WHERE o.amopfamily = c.opcfamily),
           (SELECT string_agg(format('%s %s', r.amprocnum, r.amproc::regprocedure), ', ' ORDER BY r.amprocnum)
              FROM pg_amproc r WHERE r.amprocfamily = c.opcfamily))
  FROM pg_opclass c JOIN pg_am m ON m.oid = c.opcmethod WHERE c.opcnamespace = 'public'::regnamespace
) catalog ORDER BY line;
";

/// The current version's catalog, from a fresh `CREATE EXTENSION` in a database of its own.
fn fresh_catalog(primary: &Server) -> Result<String> {
    primary.psql(
        "postgres",
        "DROP DATABASE IF EXISTS fresh_install; CREATE DATABASE fresh_install;",
    )?;
    primary.psql("fresh_install", "CREATE EXTENSION pg_automerge;")?;
    primary.psql("fresh_install", CATALOG)
}

/// When the current version is a release, its frozen script (run by hand, as CREATE
/// EXTENSION would) must define exactly what the script pgrx generates from the code does:
/// otherwise the SQL changed without a new version and an upgrade script. xtask skips it
/// while the current version is not released.
#[test]
#[ignore = "needs the clusters that `cargo xtask test --only reliability` provisions"]
fn frozen_script_of_the_current_version_creates_what_create_extension_creates() -> Result<()> {
    let (primary, current) = (Server::from_env(RELIABILITY_PRIMARY), versions::current()?);
    let fresh = fresh_catalog(&primary)?;
    primary.psql(
        "postgres",
        "DROP DATABASE IF EXISTS frozen_script; CREATE DATABASE frozen_script;",
    )?;
    let script =
        versions::install_script(&current)?.replace("MODULE_PATHNAME", "$libdir/pg_automerge");
    primary.psql("frozen_script", &format!("BEGIN;\n{script}\nCOMMIT;"))?;
    let frozen = primary.psql("frozen_script", CATALOG)?;
    ensure!(
        frozen == fresh,
        "the SQL of version {current} changed since it was released: give the workspace a new \
         version and add {}. Differences (- frozen, + current):\n{}",
        versions::upgrade_script_name(&current, "<new version>"),
        line_differences(&frozen, &fresh)
    );
    Ok(())
}

/// For each older release (whose frozen install script xtask put beside the current
/// version's): installs it, writes documents, runs ALTER EXTENSION … UPDATE, and checks that
/// the catalog equals a fresh install's and that the old documents read and merge. xtask
/// skips it while there is no older release.
#[test]
#[ignore = "needs the clusters that `cargo xtask test --only reliability` provisions"]
fn each_older_release_upgrades_to_the_current_one_and_its_documents_read_and_merge() -> Result<()> {
    let (primary, current) = (Server::from_env(RELIABILITY_PRIMARY), versions::current()?);
    let fresh = fresh_catalog(&primary)?;
    for version in versions::released().iter().filter(|v| **v != current) {
        let database = format!("upgrade_from_{}", version.replace(['.', '-'], "_"));
        primary.psql(
            "postgres",
            &format!("DROP DATABASE IF EXISTS {database}; CREATE DATABASE {database};"),
        )?;
        let samples: Vec<String> = fixtures::samples()
            .iter()
            .map(|sample| format!("('{}', '\\x{}')", sample.name, hex::encode(sample.doc.save())))
            .collect();
        primary.psql(
            &database,
            &format!(
                "CREATE EXTENSION pg_automerge VERSION '{version}';\n\
                 CREATE TABLE old_documents (name text PRIMARY KEY, doc automerge NOT NULL);\n\
                 INSERT INTO old_documents VALUES {};\n\
                 UPDATE old_documents SET doc = doc || (SELECT doc FROM old_documents WHERE name = 'project') \
                 WHERE name = 'todo-list';",
                samples.join(", ")
            ),
        )?;
        let before = primary.psql(&database, OLD_DOCUMENT_READS)?;
        primary.psql(&database, "ALTER EXTENSION pg_automerge UPDATE;")?;
        let installed = primary.psql(
            &database,
            "\\t on\nSELECT extversion FROM pg_extension WHERE extname = 'pg_automerge';",
        )?;
        ensure!(
            installed.trim() == current,
            "{version} updated to {}, not {current}",
            installed.trim()
        );
        let upgraded = primary.psql(&database, CATALOG)?;
        ensure!(
            upgraded == fresh,
            "{version} updated to {current} differs from a fresh install (- upgraded, + fresh):\n{}",
            line_differences(&upgraded, &fresh)
        );
        let after = primary.psql(&database, OLD_DOCUMENT_READS)?;
        ensure!(
            before == after,
            "documents written by {version} read differently after the update"
        );
        primary.psql(
            &database,
            "UPDATE old_documents SET doc = doc || (SELECT merge_agg(doc) FROM old_documents) WHERE name = 'empty';",
        )?;
        let merged = primary.psql(
            &database,
            "\\t on\nSELECT automerge_change_count(doc) FROM old_documents WHERE name = 'empty';",
        )?;
        let changes: usize = fixtures::samples().iter().map(|s| s.doc.get_changes(&[]).len()).sum();
        ensure!(
            merged.trim() == changes.to_string(),
            "the merge after the update has {} changes, not {changes}",
            merged.trim()
        );
    }
    Ok(())
}

const OLD_DOCUMENT_READS: &str =
    "SELECT name, automerge_heads(doc), doc::jsonb, encode(sha256(doc::bytea), 'hex') \
    FROM old_documents ORDER BY name;";
