//! The type's input and output: text (`\x` and hex digits, as `bytea` prints) and binary
//! (the Automerge bytes themselves). Both directions carry what a client's Automerge
//! library saves and loads; the stored header is ours and never leaves the server.
//! Input is validated by loading it, so nothing that is not a complete document is stored.

use std::ffi::{CStr, CString};

use pg_automerge_core::{format, text_form, writes, Error};
use pgrx::prelude::*;
use pgrx::{pg_sys, Internal};

use crate::datum::StoredDoc;
use crate::errors::OrRaise;
use crate::gucs;

#[pg_extern(immutable, strict, parallel_safe)]
fn automerge_in(input: &CStr) -> StoredDoc<'static> {
    let text = input
        .to_str()
        .map_err(|_| Error::InvalidText("not valid UTF-8".into()))
        .or_raise("automerge_in");
    let bytes = text_form::parse(text).or_raise("automerge_in");
    StoredDoc::owned(
        writes::stored_from_client_bytes(&bytes, gucs::write_settings()).or_raise("automerge_in"),
    )
}

#[pg_extern(immutable, strict, parallel_safe)]
fn automerge_out(doc: StoredDoc<'_>) -> CString {
    let bytes = format::client_bytes(doc.stored()).or_raise("automerge_out");
    CString::new(text_form::format(bytes)).expect("hex digits contain no NUL")
}

#[pg_extern(immutable, strict, parallel_safe)]
fn automerge_recv(mut buf: Internal) -> StoredDoc<'static> {
    // SAFETY: Postgres passes a receive function the StringInfo of the incoming message.
    let buf = unsafe { buf.get_mut::<pg_sys::StringInfoData>() }
        .expect("a receive function gets a StringInfo");
    let start = buf.cursor as usize;
    let end = buf.len as usize;
    // SAFETY: `data` holds `len` bytes, and `cursor` is within them.
    let bytes =
        unsafe { std::slice::from_raw_parts(buf.data.add(start).cast::<u8>(), end - start) };
    buf.cursor = buf.len;
    StoredDoc::owned(
        writes::stored_from_client_bytes(bytes, gucs::write_settings()).or_raise("automerge_recv"),
    )
}

/// The binary output, and also the `automerge → bytea` cast: the Automerge bytes.
#[pg_extern(immutable, strict, parallel_safe)]
fn automerge_send(doc: StoredDoc<'_>) -> Vec<u8> {
    format::client_bytes(doc.stored()).or_raise("automerge_send").to_vec()
}

extension_sql!(
    r#"
CREATE TYPE automerge (
    INPUT = automerge_in,
    OUTPUT = automerge_out,
    RECEIVE = automerge_recv,
    SEND = automerge_send,
    INTERNALLENGTH = VARIABLE,
    -- Documents are large: TOAST moves them out of line but never compresses them (their
    -- Automerge bytes are deflated already, and the kept JSON is compressed by us), so a
    -- read of the header fetches one chunk.
    STORAGE = external,
    CATEGORY = 'U'
);
COMMENT ON TYPE automerge IS 'An Automerge CRDT document';
"#,
    name = "automerge_type",
    requires =
        ["automerge_shell_type", automerge_in, automerge_out, automerge_recv, automerge_send],
);

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::test_support::{hex_of, sample, sqlstate_of};

    #[pg_test]
    fn text_round_trips_a_real_document() {
        let saved = sample("project").save();
        let text = hex_of(&saved);
        let out = Spi::get_one::<String>(&format!("SELECT '{text}'::automerge::text")).unwrap();
        assert_eq!(out.as_deref(), Some(text.as_str()));
    }

    #[pg_test]
    fn every_sample_round_trips_through_text_and_a_table() {
        Spi::run("CREATE TEMP TABLE docs (name text, doc automerge)").unwrap();
        for sample in fixtures::samples() {
            let text = hex_of(&sample.doc.save());
            Spi::run_with_args(
                "INSERT INTO docs VALUES ($1, $2::text::automerge)",
                &[sample.name.into(), text.clone().into()],
            )
            .unwrap();
            let back = Spi::get_one_with_args::<String>(
                "SELECT doc::text FROM docs WHERE name = $1",
                &[sample.name.into()],
            )
            .unwrap();
            assert_eq!(back.as_deref(), Some(text.as_str()), "{}", sample.name);
        }
    }

    #[pg_test]
    fn the_empty_document_is_valid() {
        let empty = hex_of(&automerge::Automerge::new().save());
        let from_save = Spi::get_one::<String>(&format!("SELECT '{empty}'::automerge::text"));
        assert_eq!(from_save.unwrap().as_deref(), Some(empty.as_str()));
        // No bytes at all are the empty document too.
        let from_nothing = Spi::get_one::<String>("SELECT '\\x'::automerge::text");
        assert_eq!(from_nothing.unwrap().as_deref(), Some(empty.as_str()));
    }

    #[pg_test]
    fn changes_are_stored_as_a_document() {
        let doc = sample("todo-list");
        let changes: Vec<u8> =
            doc.get_changes(&[]).iter().flat_map(|c| c.raw_bytes().to_vec()).collect();
        let out =
            Spi::get_one::<String>(&format!("SELECT '{}'::automerge::text", hex_of(&changes)));
        assert_eq!(out.unwrap(), Some(hex_of(&doc.save())));
    }

    #[pg_test]
    fn bad_text_is_invalid_text_representation() {
        for bad in ["hello", "\\x8", "\\xzz"] {
            assert_eq!(sqlstate_of(&format!("SELECT '{bad}'::automerge")), "22P02", "{bad}");
        }
    }

    #[pg_test]
    fn bytes_that_are_not_a_document_are_invalid_binary_representation() {
        let saved = sample("project").save();
        let truncated = hex_of(&saved[..saved.len() / 2]);
        for bad in ["\\x00", "\\x856f4a83", "\\xdeadbeefdeadbeef", truncated.as_str()] {
            assert_eq!(sqlstate_of(&format!("SELECT '{bad}'::automerge")), "22P03", "{bad}");
        }
    }

    #[pg_test]
    fn changes_with_missing_dependencies_are_refused() {
        let doc = sample("todo-list");
        let last = doc.get_changes(&[]).last().unwrap().raw_bytes().to_vec();
        assert_eq!(sqlstate_of(&format!("SELECT '{}'::automerge", hex_of(&last))), "22P03");
    }

    #[pg_test]
    fn binary_copy_round_trips_and_validates() {
        // COPY … (FORMAT binary) goes through the type's send and receive functions.
        Spi::run("CREATE TEMP TABLE src (doc automerge); CREATE TEMP TABLE dst (doc automerge)")
            .unwrap();
        for sample in fixtures::samples() {
            let text = hex_of(&sample.doc.save());
            Spi::run(&format!("INSERT INTO src VALUES ('{text}')")).unwrap();
        }
        let path = std::env::temp_dir().join(format!("pg_automerge_copy_{}", std::process::id()));
        let path = path.display();
        Spi::run(&format!("COPY src TO '{path}' (FORMAT binary)")).unwrap();
        Spi::run(&format!("COPY dst FROM '{path}' (FORMAT binary)")).unwrap();
        let differing = Spi::get_one::<i64>(
            "SELECT count(*) FROM (SELECT doc::text FROM src EXCEPT SELECT doc::text FROM dst) d",
        );
        assert_eq!(differing.unwrap(), Some(0));
        let copied = Spi::get_one::<i64>("SELECT count(*) FROM dst").unwrap();
        assert_eq!(copied, Some(fixtures::samples().len() as i64));

        // One row whose only field is 4 garbage bytes.
        let mut garbage = b"PGCOPY\n\xff\r\n\0".to_vec();
        garbage.extend_from_slice(&[0; 8]); // flags, header extension length
        garbage.extend_from_slice(&1i16.to_be_bytes());
        garbage.extend_from_slice(&4i32.to_be_bytes());
        garbage.extend_from_slice(b"junk");
        garbage.extend_from_slice(&(-1i16).to_be_bytes());
        std::fs::write(path.to_string(), garbage).unwrap();
        assert_eq!(sqlstate_of(&format!("COPY dst FROM '{path}' (FORMAT binary)")), "22P03");
        std::fs::remove_file(path.to_string()).unwrap();
    }
}
