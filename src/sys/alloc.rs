//! The static binary's allocator: a bump arena for the short processes
//! every runtime call starts (a hook, the runtime wrapper, a CDI hook), the
//! C library's `malloc` beyond it.
//!
//! musl's allocator maps and unmaps memory for every few allocations (a
//! system call pair and fresh page faults each time), which a process that
//! lives 2 ms pays for out of all proportion. The arena is static memory
//! (`.bss`: no page exists until it is touched) handed out in order and
//! never reused, except that the most recent allocation can grow, shrink
//! or be freed in place, which is what a growing `Vec` or `String` does.
//! Once it is spent, allocations go to [`System`] and are freed there, so a
//! long command (`doctor` walking an image, `cdi generate`) only ever holds
//! the arena's size more than it would.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A bump arena of `N` bytes in front of [`System`].
pub struct Arena<const N: usize> {
    /// Offset of the first free byte.
    next: AtomicUsize,
    memory: UnsafeCell<Memory<N>>,
}

/// The arena's bytes, aligned for any allocation the arena serves itself.
#[repr(C, align(4096))]
struct Memory<const N: usize>([u8; N]);

/// The largest alignment the arena serves; larger ones go to [`System`].
const MAX_ALIGN: usize = 4096;

// SAFETY: the arena hands out disjoint ranges of `memory`, each reserved
// with a compare-and-swap on `next`, so no two callers on any threads
// ever get overlapping bytes; `memory` itself is only ever addressed
// through those ranges.
unsafe impl<const N: usize> Sync for Arena<N> {}

impl<const N: usize> Arena<N> {
    /// An empty arena.
    pub const fn new() -> Self {
        Arena {
            next: AtomicUsize::new(0),
            memory: UnsafeCell::new(Memory([0; N])),
        }
    }

    fn base(&self) -> *mut u8 {
        self.memory.get().cast::<u8>()
    }

    /// `ptr`'s offset in the arena, if it is one of the arena's.
    fn offset_of(&self, ptr: *mut u8) -> Option<usize> {
        let offset = (ptr as usize).wrapping_sub(self.base() as usize);
        (offset < N).then_some(offset)
    }

    /// Reserves `size` bytes aligned to `align`; `None` when they do not fit.
    fn bump(&self, size: usize, align: usize) -> Option<*mut u8> {
        if align > MAX_ALIGN {
            return None;
        }
        let mut next = self.next.load(Ordering::Relaxed);
        loop {
            let start = next.checked_add(align - 1)? & !(align - 1);
            let end = start.checked_add(size)?;
            if end > N {
                return None;
            }
            match self
                .next
                .compare_exchange_weak(next, end, Ordering::Relaxed, Ordering::Relaxed)
            {
                // SAFETY: `start + size <= N`, so the result stays inside `memory`.
                Ok(_) => return Some(unsafe { self.base().add(start) }),
                Err(now) => next = now,
            }
        }
    }

    /// Moves the end of the allocation at `offset`, the arena's most
    /// recent, to `offset + size`; false when it is not the most recent or
    /// the new end does not fit.
    fn resize_last(&self, offset: usize, old_size: usize, size: usize) -> bool {
        let Some(end) = offset.checked_add(size) else {
            return false;
        };
        end <= N
            && self
                .next
                .compare_exchange(offset + old_size, end, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }
}

impl<const N: usize> Default for Arena<N> {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: every pointer returned is either a fresh, disjoint, suitably
// aligned range of the arena of at least `layout.size()` bytes, or
// System's; `dealloc` and `realloc` hand System's pointers back to System
// and never free arena memory to it. Zeroed memory comes from the default
// `alloc_zeroed`, which writes the zeros.
unsafe impl<const N: usize> GlobalAlloc for Arena<N> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match self.bump(layout.size(), layout.align()) {
            Some(ptr) => ptr,
            // SAFETY: the caller's layout, as GlobalAlloc requires.
            None => unsafe { System.alloc(layout) },
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        match self.offset_of(ptr) {
            // The most recent allocation gives its bytes back; any other
            // arena memory stays spent.
            Some(offset) => {
                self.resize_last(offset, layout.size(), 0);
            }
            // SAFETY: not the arena's, so System's, with its layout.
            None => unsafe { System.dealloc(ptr, layout) },
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let Some(offset) = self.offset_of(ptr) else {
            // SAFETY: System's pointer, with its layout, as the caller gives.
            return unsafe { System.realloc(ptr, layout, new_size) };
        };
        if new_size <= layout.size() {
            self.resize_last(offset, layout.size(), new_size);
            return ptr;
        }
        if self.resize_last(offset, layout.size(), new_size) {
            return ptr;
        }
        // SAFETY: `new_size` with the old alignment is a valid layout (the
        // caller's contract); the old bytes are copied before the old block
        // is given back, and the two blocks never overlap.
        unsafe {
            let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
            let new = self.alloc(new_layout);
            if !new.is_null() {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size());
                self.dealloc(ptr, layout);
            }
            new
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(size: usize, align: usize) -> Layout {
        Layout::from_size_align(size, align).unwrap()
    }

    #[test]
    fn hands_out_aligned_disjoint_blocks_then_falls_back_to_the_system() {
        let arena: Box<Arena<4096>> = Box::default();
        // SAFETY (tests): every block is freed with its own layout.
        unsafe {
            let a = arena.alloc(layout(10, 1));
            let b = arena.alloc(layout(64, 64));
            assert_eq!(arena.offset_of(a), Some(0));
            assert_eq!(arena.offset_of(b), Some(64));
            a.write_bytes(1, 10);
            b.write_bytes(2, 64);
            assert_eq!(*a.add(9), 1);
            let big = arena.alloc(layout(8192, 8));
            assert!(!big.is_null());
            assert_eq!(
                arena.offset_of(big),
                None,
                "too big for the arena: System's"
            );
            big.write_bytes(3, 8192);
            arena.dealloc(big, layout(8192, 8));
            arena.dealloc(b, layout(64, 64));
            arena.dealloc(a, layout(10, 1));
        }
    }

    #[test]
    fn the_last_block_grows_shrinks_and_is_freed_in_place() {
        let arena: Box<Arena<4096>> = Box::default();
        unsafe {
            let a = arena.alloc(layout(16, 8));
            let grown = arena.realloc(a, layout(16, 8), 100);
            assert_eq!(grown, a, "the last block grows in place");
            let b = arena.alloc(layout(8, 8));
            assert_eq!(arena.offset_of(b), Some(104));
            *b = 7;
            // `a` is no longer the last: growing it moves it, keeping its bytes.
            a.write_bytes(5, 100);
            let moved = arena.realloc(a, layout(100, 8), 200);
            assert_ne!(moved, a);
            assert_eq!(*moved.add(99), 5);
            assert_eq!(*b, 7, "the move left the next block alone");
            arena.dealloc(moved, layout(200, 8));
            let c = arena.alloc(layout(8, 8));
            assert_eq!(c, moved, "the freed last block is reused");
        }
    }

    #[test]
    fn a_block_that_outgrows_the_arena_moves_to_the_system() {
        let arena: Box<Arena<4096>> = Box::default();
        unsafe {
            let a = arena.alloc(layout(1000, 8));
            a.write_bytes(9, 1000);
            let moved = arena.realloc(a, layout(1000, 8), 10_000);
            assert_eq!(arena.offset_of(moved), None);
            assert_eq!(*moved.add(999), 9);
            arena.dealloc(moved, layout(10_000, 8));
            // The arena's bytes came back: the next block starts at 0 again.
            assert_eq!(arena.offset_of(arena.alloc(layout(1, 1))), Some(0));
        }
    }
}
