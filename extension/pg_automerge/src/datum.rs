//! How an `automerge` value crosses between Postgres and Rust: a varlena holding the
//! stored form (see `pg_automerge_core::format`), borrowed when Postgres passes it in
//! and copied into a fresh varlena when we return one.

use std::borrow::Cow;

use pg_automerge_core::format::{self, Summary};
use pgrx::callconv::{Arg, ArgAbi, BoxRet, FcInfo};
use pgrx::datum::Datum;
use pgrx::nullable::Nullable;
use pgrx::pgrx_sql_entity_graph::metadata::{
    ArgumentError, ReturnsError, ReturnsRef, SqlMappingRef, SqlTranslatable, TypeOrigin,
};
use pgrx::prelude::*;
use pgrx::{pg_sys, FromDatum, IntoDatum};

use crate::errors::OrRaise;

/// An `automerge` value in its stored form.
pub struct StoredDoc<'a>(Cow<'a, [u8]>);

impl<'a> StoredDoc<'a> {
    pub fn owned(stored: Vec<u8>) -> StoredDoc<'static> {
        StoredDoc(Cow::Owned(stored))
    }

    pub fn stored(&self) -> &[u8] {
        &self.0
    }
}

extension_sql!(
    "CREATE TYPE automerge; -- a shell type: its I/O functions are defined next\n",
    name = "automerge_shell_type",
    creates = [Type(StoredDoc)],
);

/// Both Rust views of an `automerge` argument map to the SQL type and unbox the same way.
macro_rules! automerge_sql_type {
    ($rust:ident) => {
        unsafe impl SqlTranslatable for $rust<'_> {
            const TYPE_IDENT: &'static str = pgrx::pgrx_resolved_type!(StoredDoc);
            const TYPE_ORIGIN: TypeOrigin = TypeOrigin::ThisExtension;
            const ARGUMENT_SQL: Result<SqlMappingRef, ArgumentError> =
                Ok(SqlMappingRef::As("automerge"));
            const RETURN_SQL: Result<ReturnsRef, ReturnsError> =
                Ok(ReturnsRef::One(SqlMappingRef::As("automerge")));
        }

        unsafe impl<'fcx> ArgAbi<'fcx> for $rust<'fcx> {
            unsafe fn unbox_arg_unchecked(arg: Arg<'_, 'fcx>) -> Self {
                let index = arg.index();
                unsafe { arg.unbox_arg_using_from_datum() }
                    .unwrap_or_else(|| panic!("argument {index} must not be null"))
            }

            unsafe fn unbox_nullable_arg(arg: Arg<'_, 'fcx>) -> Nullable<Self> {
                unsafe { arg.unbox_arg_using_from_datum() }.into()
            }
        }
    };
}

automerge_sql_type!(StoredDoc);
automerge_sql_type!(DocHeader);
automerge_sql_type!(LazyDoc);

/// An `automerge` argument not detoasted yet, for reads that may need only its leading
/// bytes (the header, the actor table, the kept JSON) and must not fetch the whole value
/// for them: TOAST fetches a slice of an uncompressed external value chunk by chunk.
pub struct LazyDoc<'a> {
    datum: pg_sys::Datum,
    /// The longest prefix fetched so far, reused by shorter requests.
    fetched: std::cell::Cell<&'a [u8]>,
    whole: std::cell::Cell<bool>,
}

impl<'a> format::Prefix<'a> for LazyDoc<'a> {
    fn prefix(&self, len: usize) -> &'a [u8] {
        let fetched = self.fetched.get();
        // A fetch that returned less than it asked for returned the whole value.
        if len <= fetched.len() || self.whole.get() {
            return fetched.prefix(len);
        }
        // SAFETY: a non-null `automerge` datum is a varlena; the slice is palloc'd in the
        // current memory context, which outlives this call's use of it.
        let bytes = unsafe {
            let asked = i32::try_from(len).unwrap_or(i32::MAX);
            let slice = pg_sys::pg_detoast_datum_slice(self.datum.cast_mut_ptr(), 0, asked);
            pgrx::varlena::varlena_to_byte_slice(slice)
        };
        self.fetched.set(bytes);
        self.whole.set(bytes.len() < len);
        bytes
    }
}

impl FromDatum for LazyDoc<'_> {
    unsafe fn from_polymorphic_datum(
        datum: pg_sys::Datum,
        is_null: bool,
        _typoid: pg_sys::Oid,
    ) -> Option<Self> {
        (!is_null && !datum.is_null()).then(|| LazyDoc {
            datum,
            fetched: Default::default(),
            whole: Default::default(),
        })
    }
}

/// Only the header of an `automerge` argument, for functions that need nothing else (heads,
/// counts, equality, hashing). It fetches the first bytes alone from TOAST and keeps no
/// detoasted copy: comparison functions run once per pair in a sort and must not leak.
pub struct DocHeader<'a> {
    pub summary: Summary,
    /// Changes appended after the payload's save.
    pub appended_changes: u32,
    _borrow: std::marker::PhantomData<&'a ()>,
}

impl DocHeader<'_> {
    /// Reads the header of a non-null `automerge` datum.
    ///
    /// # Safety
    /// `datum` must be a non-null `automerge` value.
    pub unsafe fn read(datum: pg_sys::Datum) -> Result<format::Header, pg_automerge_core::Error> {
        let varlena: *mut pg_sys::varlena = datum.cast_mut_ptr();
        let prefix = unsafe { prefix_bytes(varlena, format::FIRST_FETCH) };
        let header = match format::Header::len_from(&prefix) {
            Some(len) if len > prefix.len() => unsafe { prefix_bytes(varlena, len) },
            _ => prefix,
        };
        format::Header::parse(&header)
    }
}

/// The first `len` bytes of a varlena's data, copied out; the detoasted slice is freed.
unsafe fn prefix_bytes(varlena: *mut pg_sys::varlena, len: usize) -> Vec<u8> {
    let len = i32::try_from(len).unwrap_or(i32::MAX);
    unsafe {
        let slice = pg_sys::pg_detoast_datum_slice(varlena, 0, len);
        let bytes = pgrx::varlena::varlena_to_byte_slice(slice).to_vec();
        if slice != varlena {
            pg_sys::pfree(slice.cast());
        }
        bytes
    }
}

impl FromDatum for DocHeader<'_> {
    unsafe fn from_polymorphic_datum(
        datum: pg_sys::Datum,
        is_null: bool,
        _typoid: pg_sys::Oid,
    ) -> Option<Self> {
        if is_null || datum.is_null() {
            return None;
        }
        let header = unsafe { Self::read(datum) }.or_raise("automerge header");
        Some(DocHeader {
            appended_changes: header.appended_changes(),
            summary: header.summary,
            _borrow: std::marker::PhantomData,
        })
    }
}

impl FromDatum for StoredDoc<'_> {
    unsafe fn from_polymorphic_datum(
        datum: pg_sys::Datum,
        is_null: bool,
        _typoid: pg_sys::Oid,
    ) -> Option<Self> {
        if is_null || datum.is_null() {
            return None;
        }
        // SAFETY: a non-null `automerge` datum is a varlena, possibly toasted or packed.
        unsafe {
            let varlena = pg_sys::pg_detoast_datum_packed(datum.cast_mut_ptr());
            Some(StoredDoc(Cow::Borrowed(pgrx::varlena::varlena_to_byte_slice(varlena))))
        }
    }
}

impl IntoDatum for StoredDoc<'_> {
    fn into_datum(self) -> Option<pg_sys::Datum> {
        Some(pgrx::rust_byte_slice_to_bytea(&self.0).into_pg().into())
    }

    fn type_oid() -> pg_sys::Oid {
        pgrx::regtypein("automerge")
    }
}

unsafe impl BoxRet for StoredDoc<'_> {
    unsafe fn box_into<'fcx>(self, fcinfo: &mut FcInfo<'fcx>) -> Datum<'fcx> {
        match self.into_datum() {
            Some(datum) => unsafe { fcinfo.return_raw_datum(datum) },
            None => fcinfo.return_null(),
        }
    }
}
