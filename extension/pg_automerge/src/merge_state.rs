//! `automerge_merge_state`, the transition type of `merge_agg`: a real type rather than
//! `internal`, because sharding engines push an aggregate down to their nodes only when its
//! state can travel between servers as a value (Citus 14 requires a combine function and a
//! transition type that is not a pseudo-type, and ships the state with the type's send and
//! receive functions).
//!
//! While an aggregate runs, the state is a PostgreSQL *expanded object*: the loaded document
//! (`pg_automerge_core::aggregate::MergeState`) in a memory context of its own, which the
//! executor keeps from row to row without copying, and which the transition and combine
//! functions change in place. Flattened (into a tuple for a parallel worker's leader, or by
//! the send and output functions) it is the document's `save()` bytes: the state's binary
//! form is Automerge's, its text form `\x` and hex digits as `bytea` prints. Input and
//! receive load what they are given, so a state that is not a document is refused there.

use std::ffi::{CStr, CString};

use pg_automerge_core::aggregate::MergeState;
use pg_automerge_core::{save, text_form, Error};
use pgrx::callconv::{Arg, ArgAbi, BoxRet, FcInfo};
use pgrx::datum::Datum;
use pgrx::nullable::Nullable;
use pgrx::pgrx_sql_entity_graph::metadata::{
    ArgumentError, ReturnsError, ReturnsRef, SqlMappingRef, SqlTranslatable, TypeOrigin,
};
use pgrx::prelude::*;
use pgrx::{pg_sys, FromDatum, Internal, IntoDatum, PgMemoryContexts};

use crate::errors::OrRaise;
use crate::gucs;

/// An `automerge_merge_state` datum as Postgres passed it or as we return it: flat (a
/// varlena of saved bytes) or a pointer to an expanded state.
pub struct MergeStateDatum(pg_sys::Datum);

/// The expanded form: Postgres' header first (its functions find it by the datum's pointer),
/// then what we hold, dropped when the object's memory context is deleted.
#[repr(C)]
struct Expanded {
    header: pg_sys::ExpandedObjectHeader,
    held: *mut Held,
}

struct Held {
    state: MergeState,
    /// The saved bytes of `state`, made when Postgres asks for the flat size and kept for
    /// the flattening that follows; cleared whenever the state changes.
    flat: Option<Vec<u8>>,
}

static METHODS: pg_sys::ExpandedObjectMethods = pg_sys::ExpandedObjectMethods {
    get_flat_size: Some(flat_size),
    flatten_into: Some(flatten_into),
};

impl MergeStateDatum {
    /// A new expanded state holding `state`, in a memory context of its own below `parent`
    /// (an aggregate's context, so that the executor keeps it as it is).
    pub fn expanded(state: MergeState, parent: pg_sys::MemoryContext) -> MergeStateDatum {
        // SAFETY: the context is new, the struct is allocated in it and initialised before
        // Postgres reads it; EOH_init_header fills in the header and its pointers.
        unsafe {
            let context = pg_sys::AllocSetContextCreateInternal(
                parent,
                c"automerge_merge_state".as_ptr(),
                pg_sys::ALLOCSET_DEFAULT_MINSIZE as usize,
                pg_sys::ALLOCSET_DEFAULT_INITSIZE as usize,
                pg_sys::ALLOCSET_DEFAULT_MAXSIZE as usize,
            );
            let held =
                PgMemoryContexts::For(context).leak_and_drop_on_delete(Held { state, flat: None });
            let expanded = pg_sys::MemoryContextAlloc(context, std::mem::size_of::<Expanded>())
                .cast::<Expanded>();
            std::ptr::addr_of_mut!((*expanded).held).write(held);
            pg_sys::EOH_init_header(std::ptr::addr_of_mut!((*expanded).header), &METHODS, context);
            MergeStateDatum(pg_sys::Datum::from((*expanded).header.eoh_rw_ptr.as_mut_ptr()))
        }
    }

    /// The state this datum holds when it is one of our expanded objects, and whether we
    /// may change it (a read-write pointer).
    fn expanded_state(&mut self) -> Option<(&mut Held, bool)> {
        // SAFETY: a datum of this type is a varlena; an expanded one points at an
        // ExpandedObjectHeader, which for this type is always the head of an `Expanded`.
        unsafe {
            let varlena = self.0.cast_mut_ptr::<pg_sys::varlena>();
            if !pgrx::varlena::varatt_is_1b_e(varlena) {
                return None;
            }
            let tag = u32::from(pgrx::varlena::vartag_external(varlena));
            if !pgrx::varlena::vartag_is_expanded(tag) {
                return None;
            }
            let header = pg_sys::DatumGetEOHP(self.0);
            if !std::ptr::eq((*header).eoh_methods, &METHODS) {
                error!("automerge_merge_state: an expanded value of another type");
            }
            let held = &mut *(*header.cast::<Expanded>()).held;
            Some((held, tag == pg_sys::vartag_external::VARTAG_EXPANDED_RW))
        }
    }

    /// The saved bytes of a flat datum.
    fn flat_bytes(&self) -> &[u8] {
        // SAFETY: a flat datum of this type is a varlena, possibly toasted or packed.
        unsafe {
            let varlena = pg_sys::pg_detoast_datum_packed(self.0.cast_mut_ptr());
            pgrx::varlena::varlena_to_byte_slice(varlena)
        }
    }

    /// Moves the merge out of this datum when we may change it; otherwise a copy (loaded
    /// from the flat bytes, or cloned from a read-only expanded state).
    pub fn take(&mut self, function: &'static str) -> MergeState {
        match self.expanded_state() {
            Some((held, true)) => {
                held.flat = None;
                std::mem::replace(&mut held.state, MergeState::empty())
            }
            Some((held, false)) => held.state.clone(),
            None => {
                MergeState::from_saved(self.flat_bytes(), gucs::load_limit()).or_raise(function)
            }
        }
    }

    /// Runs `change` on the state in place when this is a read-write expanded state, and
    /// returns this datum; otherwise makes a new expanded state below `context` from a copy.
    pub fn update(
        mut self,
        function: &'static str,
        context: pg_sys::MemoryContext,
        change: impl FnOnce(&mut MergeState) -> Result<(), Error>,
    ) -> MergeStateDatum {
        if let Some((held, true)) = self.expanded_state() {
            held.flat = None;
            change(&mut held.state).or_raise(function);
            return self;
        }
        let mut state = self.take(function);
        change(&mut state).or_raise(function);
        MergeStateDatum::expanded(state, context)
    }

    /// Reads the merge, from the expanded state or by loading the flat bytes.
    pub fn with_state<T>(
        &mut self,
        function: &'static str,
        read: impl FnOnce(&MergeState) -> T,
    ) -> T {
        match self.expanded_state() {
            Some((held, _)) => read(&held.state),
            None => read(&self.take(function)),
        }
    }

    /// The state's saved bytes, as the send and output functions give them.
    fn saved(&mut self) -> Vec<u8> {
        match self.expanded_state() {
            Some((held, _)) => saved_of(held).to_vec(),
            None => self.flat_bytes().to_vec(),
        }
    }
}

fn saved_of(held: &mut Held) -> &[u8] {
    let state = &held.state;
    held.flat.get_or_insert_with(|| save::save(&state.doc).or_raise("automerge_merge_state"))
}

#[pg_guard]
unsafe extern "C-unwind" fn flat_size(header: *mut pg_sys::ExpandedObjectHeader) -> usize {
    // SAFETY: Postgres passes the header of one of our objects.
    let held = unsafe { &mut *(*header.cast::<Expanded>()).held };
    pg_sys::VARHDRSZ + saved_of(held).len()
}

#[pg_guard]
unsafe extern "C-unwind" fn flatten_into(
    header: *mut pg_sys::ExpandedObjectHeader,
    result: *mut std::ffi::c_void,
    allocated_size: usize,
) {
    // SAFETY: Postgres passes the header of one of our objects and `allocated_size` bytes
    // at `result`, the size `flat_size` returned.
    unsafe {
        let held = &mut *(*header.cast::<Expanded>()).held;
        let saved = saved_of(held);
        assert_eq!(allocated_size, pg_sys::VARHDRSZ + saved.len(), "flat size changed");
        let varlena = result.cast::<pg_sys::varlena>();
        pgrx::varlena::set_varsize_4b(varlena, allocated_size as i32);
        let data = result.cast::<u8>().add(pg_sys::VARHDRSZ);
        std::ptr::copy_nonoverlapping(saved.as_ptr(), data, saved.len());
    }
}

/// A new expanded state loaded from saved bytes (checked as any input is), in the current
/// memory context.
fn loaded(bytes: &[u8], function: &'static str) -> MergeStateDatum {
    let state = MergeState::from_saved(bytes, gucs::load_limit()).or_raise(function);
    // SAFETY: CurrentMemoryContext is always a valid context.
    MergeStateDatum::expanded(state, unsafe { pg_sys::CurrentMemoryContext })
}

#[pg_extern(immutable, strict, parallel_safe)]
fn automerge_merge_state_in(input: &CStr) -> MergeStateDatum {
    const FUNCTION: &str = "automerge_merge_state_in";
    let text =
        input.to_str().map_err(|_| Error::InvalidText("not valid UTF-8".into())).or_raise(FUNCTION);
    loaded(&text_form::parse(text).or_raise(FUNCTION), FUNCTION)
}

#[pg_extern(immutable, strict, parallel_safe)]
fn automerge_merge_state_out(mut state: MergeStateDatum) -> CString {
    CString::new(text_form::format(&state.saved())).expect("hex digits contain no NUL")
}

#[pg_extern(immutable, strict, parallel_safe)]
fn automerge_merge_state_recv(mut buf: Internal) -> MergeStateDatum {
    // SAFETY: Postgres passes a receive function the StringInfo of the incoming message.
    let buf = unsafe { buf.get_mut::<pg_sys::StringInfoData>() }
        .expect("a receive function gets a StringInfo");
    let (start, end) = (buf.cursor as usize, buf.len as usize);
    // SAFETY: `data` holds `len` bytes, and `cursor` is within them.
    let bytes =
        unsafe { std::slice::from_raw_parts(buf.data.add(start).cast::<u8>(), end - start) };
    buf.cursor = buf.len;
    loaded(bytes, "automerge_merge_state_recv")
}

#[pg_extern(immutable, strict, parallel_safe)]
fn automerge_merge_state_send(mut state: MergeStateDatum) -> Vec<u8> {
    state.saved()
}

extension_sql!(
    r#"
CREATE TYPE automerge_merge_state; -- a shell type: its I/O functions are defined next
"#,
    name = "automerge_merge_state_shell_type",
    creates = [Type(MergeStateDatum)],
);

extension_sql!(
    r#"
CREATE TYPE automerge_merge_state (
    INPUT = automerge_merge_state_in,
    OUTPUT = automerge_merge_state_out,
    RECEIVE = automerge_merge_state_recv,
    SEND = automerge_merge_state_send,
    INTERNALLENGTH = VARIABLE,
    STORAGE = external
);
COMMENT ON TYPE automerge_merge_state IS 'the state of merge_agg: the merge so far, as Automerge bytes';
"#,
    name = "automerge_merge_state_type",
    requires = [
        "automerge_merge_state_shell_type",
        automerge_merge_state_in,
        automerge_merge_state_out,
        automerge_merge_state_recv,
        automerge_merge_state_send
    ],
);

unsafe impl SqlTranslatable for MergeStateDatum {
    const TYPE_IDENT: &'static str = pgrx::pgrx_resolved_type!(MergeStateDatum);
    const TYPE_ORIGIN: TypeOrigin = TypeOrigin::ThisExtension;
    const ARGUMENT_SQL: Result<SqlMappingRef, ArgumentError> =
        Ok(SqlMappingRef::As("automerge_merge_state"));
    const RETURN_SQL: Result<ReturnsRef, ReturnsError> =
        Ok(ReturnsRef::One(SqlMappingRef::As("automerge_merge_state")));
}

impl FromDatum for MergeStateDatum {
    unsafe fn from_polymorphic_datum(
        datum: pg_sys::Datum,
        is_null: bool,
        _typoid: pg_sys::Oid,
    ) -> Option<Self> {
        (!is_null && !datum.is_null()).then_some(MergeStateDatum(datum))
    }
}

unsafe impl<'fcx> ArgAbi<'fcx> for MergeStateDatum {
    unsafe fn unbox_arg_unchecked(arg: Arg<'_, 'fcx>) -> Self {
        let index = arg.index();
        unsafe { arg.unbox_arg_using_from_datum() }
            .unwrap_or_else(|| panic!("argument {index} must not be null"))
    }

    unsafe fn unbox_nullable_arg(arg: Arg<'_, 'fcx>) -> Nullable<Self> {
        unsafe { arg.unbox_arg_using_from_datum() }.into()
    }
}

impl IntoDatum for MergeStateDatum {
    fn into_datum(self) -> Option<pg_sys::Datum> {
        Some(self.0)
    }

    fn type_oid() -> pg_sys::Oid {
        pgrx::regtypein("automerge_merge_state")
    }
}

unsafe impl BoxRet for MergeStateDatum {
    unsafe fn box_into<'fcx>(self, fcinfo: &mut FcInfo<'fcx>) -> Datum<'fcx> {
        unsafe { fcinfo.return_raw_datum(self.0) }
    }
}
