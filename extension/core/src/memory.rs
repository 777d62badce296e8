//! Counting what the Rust heap holds. `CountingAllocator` wraps the system allocator and
//! keeps the bytes allocated now, the peak since the last reset, and the bytes freed since
//! the last trim; the extension installs it as its `#[global_allocator]`. A backend runs
//! one thread, so relaxed atomics are enough and cost a few instructions per call.
//!
//! Loads are counted here too (`timed_load`), since every path that loads a document goes
//! through this crate.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

static ALLOCATED: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static FREED_SINCE_TRIM: AtomicUsize = AtomicUsize::new(0);
static LOADS: AtomicU64 = AtomicU64::new(0);
static LOAD_NANOS: AtomicU64 = AtomicU64::new(0);

pub struct CountingAllocator;

impl CountingAllocator {
    fn added(size: usize) {
        let now = ALLOCATED.fetch_add(size, Relaxed) + size;
        PEAK.fetch_max(now, Relaxed);
    }

    fn removed(size: usize) {
        ALLOCATED.fetch_sub(size, Relaxed);
        FREED_SINCE_TRIM.fetch_add(size, Relaxed);
    }
}

// SAFETY: every call is passed on to the system allocator unchanged; only counters change.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            Self::added(layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            Self::added(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        Self::removed(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            Self::removed(layout.size());
            Self::added(new_size);
        }
        new
    }
}

/// What the counters say now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub allocated_bytes: usize,
    pub peak_allocated_bytes: usize,
    pub loads: u64,
    pub load_time: Duration,
}

pub fn usage() -> Usage {
    Usage {
        allocated_bytes: ALLOCATED.load(Relaxed),
        peak_allocated_bytes: PEAK.load(Relaxed),
        loads: LOADS.load(Relaxed),
        load_time: Duration::from_nanos(LOAD_NANOS.load(Relaxed)),
    }
}

/// Starts a new measurement: the peak becomes what is allocated now; loads count from zero.
pub fn reset() {
    PEAK.store(ALLOCATED.load(Relaxed), Relaxed);
    LOADS.store(0, Relaxed);
    LOAD_NANOS.store(0, Relaxed);
}

/// Bytes freed since the last call, which starts the count again.
pub fn take_freed_since_trim() -> usize {
    FREED_SINCE_TRIM.swap(0, Relaxed)
}

/// Runs a load, counting it and its time.
pub fn timed_load<T>(load: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let result = load();
    LOADS.fetch_add(1, Relaxed);
    LOAD_NANOS.fetch_add(started.elapsed().as_nanos() as u64, Relaxed);
    result
}
