//! The static binary's allocator: a size-class arena for the short
//! processes every runtime call starts (a hook, the runtime wrapper, a CDI
//! hook), the C library's `malloc` beyond it.
//!
//! musl's allocator maps and unmaps memory for every few allocations (a
//! system call pair and fresh page faults each time), which a process that
//! lives 2 ms pays for out of all proportion. A page touched for the first
//! time costs a fault too, so the arena reuses what is freed: it is static
//! memory (`.bss`: no page exists until it is touched) cut into blocks of
//! power-of-two sizes ([`MIN_BLOCK`] to [`MAX_BLOCK`]), a freed block goes
//! on its size's free list and the next allocation of that size takes it
//! back, so a start that reads twenty files reuses one buffer's pages.
//! Fresh blocks are handed out in order. Larger allocations, and all of
//! them once the arena is spent, go to [`System`] and are freed there, so
//! a long command (`doctor` walking an image, `cdi generate`) only ever
//! holds the arena's size more than it would.
//!
//! The free lists are changed under a flag that is tried, never waited for:
//! an allocation that finds it taken (another thread's, or a signal
//! handler's) takes a fresh block instead, and a free that finds it taken
//! leaves its block spent. So the allocator cannot deadlock, in a signal
//! handler or in a child after `fork`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The smallest block: room for a free list's link, at its alignment.
pub const MIN_BLOCK: usize = 16;

/// The largest block the arena cuts; larger allocations are [`System`]'s.
pub const MAX_BLOCK: usize = 128 * 1024;

/// How many block sizes there are, [`MIN_BLOCK`] to [`MAX_BLOCK`].
const CLASSES: usize = (MAX_BLOCK / MIN_BLOCK).trailing_zeros() as usize + 1;

/// The largest alignment a fresh block is given: a page. Blocks are
/// aligned to their own size up to it, which is at least what any layout
/// of their size class asks for.
const MAX_ALIGN: usize = 4096;

/// Marks an empty free list (offsets are stored plus one).
const EMPTY: usize = 0;

/// A size-class arena of `N` bytes in front of [`System`].
pub struct Arena<const N: usize> {
    /// Offset of the first byte never handed out.
    next: AtomicUsize,
    /// Set while a free list is being changed.
    busy: AtomicBool,
    /// Each class's first free block, as its offset plus one; a free
    /// block's first word holds the next one's, the same way.
    free: UnsafeCell<[usize; CLASSES]>,
    memory: UnsafeCell<Memory<N>>,
}

/// The arena's bytes, aligned for any block the arena cuts.
#[repr(C, align(4096))]
struct Memory<const N: usize>([u8; N]);

// SAFETY: fresh blocks are disjoint ranges of `memory`, each reserved with
// a compare-and-swap on `next`; the free lists, and the links written in
// free blocks, are only read or written by the one caller that set `busy`
// (acquire on setting it, release on clearing it), and a block is on a
// list only while no caller owns it. `memory` is otherwise only addressed
// through the blocks handed out.
unsafe impl<const N: usize> Sync for Arena<N> {}

/// The size class of `layout`: the index of the smallest block that holds
/// it at its alignment; `None` when it needs more than [`MAX_BLOCK`].
fn class(layout: Layout) -> Option<usize> {
    let need = layout.size().max(layout.align()).max(MIN_BLOCK);
    if need > MAX_BLOCK {
        return None;
    }
    let block = need.next_power_of_two();
    Some((block / MIN_BLOCK).trailing_zeros() as usize)
}

/// The size of class `class`'s blocks.
const fn block_size(class: usize) -> usize {
    MIN_BLOCK << class
}

impl<const N: usize> Arena<N> {
    /// An empty arena.
    pub const fn new() -> Self {
        Arena {
            next: AtomicUsize::new(0),
            busy: AtomicBool::new(false),
            free: UnsafeCell::new([EMPTY; CLASSES]),
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

    /// A block of class `class` never handed out before, so all zeros;
    /// `None` when the arena has no room left for one.
    fn fresh(&self, class: usize) -> Option<*mut u8> {
        let size = block_size(class);
        let align = size.min(MAX_ALIGN);
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

    /// Runs `f` on the free lists if no one else is changing them.
    fn with_lists<T>(&self, f: impl FnOnce(&mut [usize; CLASSES]) -> T) -> Option<T> {
        self.busy
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()?;
        // SAFETY: `busy` was false and this caller set it, so no one else
        // reads or writes the lists until it is cleared below.
        let result = f(unsafe { &mut *self.free.get() });
        self.busy.store(false, Ordering::Release);
        Some(result)
    }

    /// A freed block of class `class`, taken off its list.
    fn reuse(&self, class: usize) -> Option<*mut u8> {
        let base = self.base();
        self.with_lists(|lists| {
            let head = lists[class];
            if head == EMPTY {
                return None;
            }
            // SAFETY: `head - 1` is the offset of a free block of at least
            // `MIN_BLOCK` bytes aligned to at least 16 (see `give_back`),
            // whose first word holds the next link; no one owns it.
            let block = unsafe { base.add(head - 1) };
            lists[class] = unsafe { block.cast::<usize>().read() };
            Some(block)
        })
        .flatten()
    }

    /// Puts the block at `offset`, of at least class `class`'s size, on
    /// that class's list; leaves it spent when the lists are busy.
    fn give_back(&self, offset: usize, class: usize) {
        let base = self.base();
        self.with_lists(|lists| {
            // SAFETY: the caller owned the block and gives it up; it is
            // at least `MIN_BLOCK` bytes, aligned to at least 16, so its
            // first word can hold the link.
            unsafe { base.add(offset).cast::<usize>().write(lists[class]) };
            lists[class] = offset + 1;
        });
    }
}

impl<const N: usize> Default for Arena<N> {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: every pointer returned is either an arena block of at least the
// size of `layout`'s class (so at least `layout.size()` bytes), aligned to
// at least `layout.align()` (a class-`k` block is aligned to
// `min(block_size(k), MAX_ALIGN)`, and a layout of class `k` asks for no
// more), owned by no one else; or System's. An arena block is owned by one
// caller from `alloc` to `dealloc`: it is on no free list meanwhile.
// `dealloc` and `realloc` hand System's pointers back to System and never
// give arena memory to it.
unsafe impl<const N: usize> GlobalAlloc for Arena<N> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let block = class(layout).and_then(|class| self.reuse(class).or_else(|| self.fresh(class)));
        match block {
            Some(ptr) => ptr,
            // SAFETY: the caller's layout, as GlobalAlloc requires.
            None => unsafe { System.alloc(layout) },
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let Some(class) = class(layout) else {
            // SAFETY: the caller's layout, as GlobalAlloc requires.
            return unsafe { System.alloc_zeroed(layout) };
        };
        if let Some(ptr) = self.reuse(class) {
            // SAFETY: a block of at least `layout.size()` bytes, owned here.
            unsafe { ptr.write_bytes(0, layout.size()) };
            return ptr;
        }
        // A fresh block is still zero: its pages need not be touched.
        match self.fresh(class) {
            Some(ptr) => ptr,
            // SAFETY: the caller's layout, as GlobalAlloc requires.
            None => unsafe { System.alloc_zeroed(layout) },
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        match (self.offset_of(ptr), class(layout)) {
            (Some(offset), Some(class)) => self.give_back(offset, class),
            // Not the arena's (an arena block always has a class), so
            // System's, with its layout.
            // SAFETY: as GlobalAlloc's contract gives it.
            _ => unsafe { System.dealloc(ptr, layout) },
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if self.offset_of(ptr).is_none() {
            // SAFETY: System's pointer, with its layout, as the caller gives.
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        // SAFETY: `new_size` with the old alignment is a valid layout (the
        // caller's contract).
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // The block holds at least the old layout's class: a size of the
        // same class stays where it is. One of a smaller class moves to a
        // block of that class, so that the rest is freed (a `Vec` read into
        // then shrunk to what it holds keeps no page to itself).
        if matches!((class(new_layout), class(layout)), (Some(new), Some(old)) if new == old) {
            return ptr;
        }
        // SAFETY: the old bytes are copied before the old block is given
        // back, and the two blocks never overlap.
        unsafe {
            let new = self.alloc(new_layout);
            if !new.is_null() {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
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
    fn classes_are_the_smallest_power_of_two_that_holds_size_and_alignment() {
        assert_eq!(class(layout(0, 1)), Some(0));
        assert_eq!(class(layout(16, 8)), Some(0));
        assert_eq!(class(layout(17, 8)), Some(1));
        assert_eq!(class(layout(8, 64)), Some(2), "the alignment counts");
        assert_eq!(class(layout(4096, 1)), Some(8));
        assert_eq!(class(layout(MAX_BLOCK, 8)), Some(CLASSES - 1));
        assert_eq!(class(layout(MAX_BLOCK + 1, 8)), None);
        assert_eq!(block_size(CLASSES - 1), MAX_BLOCK);
    }

    #[test]
    fn hands_out_aligned_disjoint_blocks_then_falls_back_to_the_system() {
        let arena: Box<Arena<4096>> = Box::default();
        // SAFETY (tests): every block is freed with its own layout.
        unsafe {
            let a = arena.alloc(layout(10, 1));
            let b = arena.alloc(layout(64, 64));
            assert_eq!(arena.offset_of(a), Some(0));
            assert_eq!(arena.offset_of(b), Some(64), "aligned to its 64 bytes");
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
            // 128 bytes used; a 4096-byte block no longer fits.
            let page = arena.alloc(layout(4096, 8));
            assert_eq!(arena.offset_of(page), None, "the arena is spent: System's");
            arena.dealloc(page, layout(4096, 8));
            arena.dealloc(b, layout(64, 64));
            arena.dealloc(a, layout(10, 1));
        }
    }

    #[test]
    fn a_freed_block_is_reused_for_its_class_only() {
        let arena: Box<Arena<65536>> = Box::default();
        unsafe {
            let a = arena.alloc(layout(4000, 8));
            a.write_bytes(7, 4000);
            arena.dealloc(a, layout(4000, 8));
            let other = arena.alloc(layout(100, 8));
            assert_ne!(other, a, "another class takes a fresh block");
            let again = arena.alloc(layout(4096, 8));
            assert_eq!(again, a, "the same class takes the freed block");
            let zeroed = arena.alloc_zeroed(layout(3000, 8));
            assert_ne!(zeroed, a);
            assert!(
                (0..3000).all(|i| *zeroed.add(i) == 0),
                "a fresh block is zero"
            );
            arena.dealloc(zeroed, layout(3000, 8));
            arena.dealloc(again, layout(4096, 8));
            let reused = arena.alloc_zeroed(layout(4096, 8));
            assert!(reused == a || reused == zeroed);
            assert!(
                (0..4096).all(|i| *reused.add(i) == 0),
                "a reused block is zeroed"
            );
            arena.dealloc(reused, layout(4096, 8));
            arena.dealloc(other, layout(100, 8));
        }
    }

    #[test]
    fn realloc_stays_within_a_class_and_moves_beyond_it() {
        let arena: Box<Arena<65536>> = Box::default();
        unsafe {
            let a = arena.alloc(layout(20, 8));
            assert_eq!(
                arena.realloc(a, layout(20, 8), 32),
                a,
                "still 32 bytes' class"
            );
            assert_eq!(
                arena.realloc(a, layout(32, 8), 17),
                a,
                "a smaller size stays"
            );
            a.write_bytes(5, 17);
            let moved = arena.realloc(a, layout(17, 8), 200);
            assert_ne!(moved, a);
            assert!((0..17).all(|i| *moved.add(i) == 5), "its bytes came along");
            // The 32-byte block it left is reused by the next of that class.
            assert_eq!(arena.alloc(layout(32, 8)), a);
            // Shrunk to a smaller class, a block moves and frees its own.
            let page = arena.alloc(layout(4096, 8));
            page.write_bytes(6, 40);
            let small = arena.realloc(page, layout(4096, 8), 40);
            assert_ne!(small, page);
            assert!((0..40).all(|i| *small.add(i) == 6));
            assert_eq!(arena.alloc(layout(4000, 8)), page, "the page came back");
            let out = arena.realloc(moved, layout(200, 8), MAX_BLOCK + 1);
            assert_eq!(
                arena.offset_of(out),
                None,
                "beyond the largest class: System's"
            );
            assert!((0..8).all(|i| *out.add(i) == 5));
            arena.dealloc(out, layout(MAX_BLOCK + 1, 8));
            assert_eq!(
                arena.alloc(layout(200, 8)),
                moved,
                "the 256-byte block came back"
            );
        }
    }

    #[test]
    fn busy_lists_neither_block_nor_lose_a_block_to_two_owners() {
        let arena: Box<Arena<65536>> = Box::default();
        unsafe {
            let a = arena.alloc(layout(64, 8));
            arena.busy.store(true, Ordering::SeqCst);
            arena.dealloc(a, layout(64, 8));
            let b = arena.alloc(layout(64, 8));
            assert_ne!(b, a, "while busy, a free leaves its block spent");
            arena.busy.store(false, Ordering::SeqCst);
            arena.dealloc(b, layout(64, 8));
            assert_eq!(arena.alloc(layout(64, 8)), b);
            assert_ne!(
                arena.alloc(layout(64, 8)),
                a,
                "the spent block never comes back"
            );
        }
    }

    #[test]
    fn threads_share_it_without_overlapping_blocks() {
        static ARENA: Arena<{ 1 << 20 }> = Arena::new();
        let threads: Vec<_> = (0..4u8)
            .map(|t| {
                std::thread::spawn(move || {
                    for round in 0..2000usize {
                        let l = layout(16 + (round % 7) * 24, 8);
                        // SAFETY (tests): each block is written, checked
                        // and freed by its own thread, with its layout.
                        unsafe {
                            let p = ARENA.alloc(l);
                            p.write_bytes(t, l.size());
                            std::thread::yield_now();
                            assert!((0..l.size()).all(|i| *p.add(i) == t));
                            ARENA.dealloc(p, l);
                        }
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
    }
}
