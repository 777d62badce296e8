//! How an `automerge` value crosses between Postgres and Rust: a varlena holding the
//! stored form (see `pg_automerge_core::format`), borrowed when Postgres passes it in
//! and copied into a fresh varlena when we return one.

use std::borrow::Cow;

use pgrx::callconv::{Arg, ArgAbi, BoxRet, FcInfo};
use pgrx::datum::Datum;
use pgrx::nullable::Nullable;
use pgrx::pgrx_sql_entity_graph::metadata::{
    ArgumentError, ReturnsError, ReturnsRef, SqlMappingRef, SqlTranslatable, TypeOrigin,
};
use pgrx::prelude::*;
use pgrx::{pg_sys, FromDatum, IntoDatum};

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

unsafe impl SqlTranslatable for StoredDoc<'_> {
    const TYPE_IDENT: &'static str = pgrx::pgrx_resolved_type!(StoredDoc);
    const TYPE_ORIGIN: TypeOrigin = TypeOrigin::ThisExtension;
    const ARGUMENT_SQL: Result<SqlMappingRef, ArgumentError> = Ok(SqlMappingRef::As("automerge"));
    const RETURN_SQL: Result<ReturnsRef, ReturnsError> =
        Ok(ReturnsRef::One(SqlMappingRef::As("automerge")));
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

unsafe impl<'fcx> ArgAbi<'fcx> for StoredDoc<'fcx> {
    unsafe fn unbox_arg_unchecked(arg: Arg<'_, 'fcx>) -> Self {
        let index = arg.index();
        unsafe { arg.unbox_arg_using_from_datum() }
            .unwrap_or_else(|| panic!("argument {index} must not be null"))
    }

    unsafe fn unbox_nullable_arg(arg: Arg<'_, 'fcx>) -> Nullable<Self> {
        unsafe { arg.unbox_arg_using_from_datum() }.into()
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
