//! Hands an idle pod worker's stack pages back to the kernel.
//!
//! A pod sync touches about 64 KiB of its worker's stack (measured on a real cluster
//! with 100 pods: every worker thread held exactly that), and a thread keeps every
//! stack page it once touched until it ends. A worker spends almost all its life
//! waiting for the next update, and there is one per pod, so those pages were most of
//! litelet's stack memory. After each sync the worker marks the part of its stack
//! below its waiting frame as unused (`MADV_DONTNEED`); the next sync faults zeroed
//! pages back in, about sixteen minor faults.
//!
//! The stack's low end is the thread's real one, asked of pthread
//! (`pthread_getattr_np` + `pthread_attr_getstack`), not derived from the size the
//! thread was spawned with: the C library rounds that size and keeps its guard page,
//! TLS and thread descriptor in the same block, so a requested size is only a guess
//! (and a wrong one would release memory that is not this stack's). The requested size
//! is the fallback when pthread cannot say.

use std::ffi::c_void;
use std::sync::OnceLock;

/// Kept below the caller's frame: room for the `madvise` call itself and the x86-64
/// red zone.
const BELOW_CALLER: usize = 4 * 1024;

/// Kept above the stack's end: glibc puts the guard page there, and the thread's TLS
/// and descriptor share the block, so the usable stack is a little less than its size.
const ABOVE_END: usize = 64 * 1024;

/// Where a thread's stack starts, taken in the thread's first frame, and the lowest
/// address that may be released.
#[derive(Clone, Copy, Debug)]
pub struct StackTop {
    address: usize,
    low: usize,
}

impl StackTop {
    /// Call first thing in a thread spawned with `stack_size(size)`.
    #[inline(always)]
    pub fn here(size: usize) -> StackTop {
        let marker = 0u8;
        let address = std::ptr::addr_of!(marker) as usize;
        let low = match real_stack_low(page_size()) {
            Some(low) if low < address => low,
            _ => address.saturating_sub(size).saturating_add(ABOVE_END),
        };
        StackTop { address, low }
    }

    /// Releases the pages between this thread's stack end and the caller's frame.
    /// Must be called on the thread that made `self`.
    #[inline(never)]
    pub fn release_unused(&self) {
        let marker = 0u8;
        let here = std::ptr::addr_of!(marker) as usize;
        let Some((start, len)) = range_between(self.low, self.address, here, page_size()) else {
            return;
        };
        // SAFETY: the range lies below this frame by BELOW_CALLER and at or above
        // `self.low`, within this thread's own stack mapping (pthread's bounds above the
        // guard, or the requested size less ABOVE_END). Nothing lives below the stack
        // pointer, so dropping those pages loses no data: the kernel gives zeroed pages
        // when a later call reaches that deep again.
        let rc = unsafe { nix::libc::madvise(start as *mut c_void, len, nix::libc::MADV_DONTNEED) };
        if rc != 0 {
            log::debug!(
                "releasing idle stack pages: {}",
                std::io::Error::last_os_error()
            );
        }
    }
}

fn page_size() -> usize {
    static PAGE: OnceLock<usize> = OnceLock::new();
    *PAGE.get_or_init(|| {
        nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
            .ok()
            .flatten()
            .and_then(|p| usize::try_from(p).ok())
            .filter(|p| p.is_power_of_two())
            .unwrap_or(4096)
    })
}

/// The lowest releasable address of the calling thread's stack: pthread's low end,
/// above the guard area and one spare page (older glibc counted the guard inside the
/// stack it reports). `None` when pthread cannot tell.
fn real_stack_low(page: usize) -> Option<usize> {
    use nix::libc;
    // SAFETY: `attr` is initialised by pthread_getattr_np before any read and
    // destroyed exactly once after it succeeded; the out-pointers are valid locals.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return None;
        }
        let mut addr: *mut c_void = std::ptr::null_mut();
        let mut size: usize = 0;
        let mut guard: usize = 0;
        let stack = libc::pthread_attr_getstack(&attr, &mut addr, &mut size);
        let guarded = libc::pthread_attr_getguardsize(&attr, &mut guard);
        libc::pthread_attr_destroy(&mut attr);
        if stack != 0 || guarded != 0 || addr.is_null() || size == 0 {
            return None;
        }
        (addr as usize).checked_add(guard)?.checked_add(page)
    }
}

/// The page-aligned range to release, if any: from the stack's end (plus
/// `ABOVE_END`) up to `BELOW_CALLER` under the frame at `here`, for a stack of the
/// requested `size` below `top`.
#[cfg(test)]
fn unused_range(top: usize, size: usize, here: usize, page: usize) -> Option<(usize, usize)> {
    let low = top.checked_sub(size)?.checked_add(ABOVE_END)?;
    range_between(low, top, here, page)
}

/// The page-aligned range to release, if any: from `low` up to `BELOW_CALLER` under
/// the frame at `here`, which must lie below `top`.
fn range_between(low: usize, top: usize, here: usize, page: usize) -> Option<(usize, usize)> {
    let low = low.checked_add(page - 1)? & !(page - 1);
    let high = here.checked_sub(BELOW_CALLER)? & !(page - 1);
    (here <= top && high > low).then(|| (low, high - low))
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: usize = 1024;
    const PAGE: usize = 4 * KIB;

    #[test]
    fn the_released_range_stays_inside_the_stack_and_below_the_caller() {
        let top = 0x7000_0000_0000 + 300 * KIB; // not page aligned on purpose
        let size = 512 * KIB;
        let here = top - 3 * KIB;
        let (start, len) = unused_range(top, size, here, PAGE).unwrap();
        assert_eq!(start % PAGE, 0);
        assert_eq!(len % PAGE, 0);
        assert!(start >= top - size + ABOVE_END);
        assert!(start + len <= here - BELOW_CALLER);
        // Most of the stack is released.
        assert!(len >= size - ABOVE_END - BELOW_CALLER - 2 * PAGE);
    }

    #[test]
    fn nothing_is_released_when_the_caller_is_deep_or_the_values_are_odd() {
        let top = 0x7000_0000_0000;
        // The caller is already near the end: nothing left below it to give back.
        assert_eq!(unused_range(top, 512 * KIB, top - 446 * KIB, PAGE), None);
        // A frame above the recorded top is not this thread's.
        assert_eq!(unused_range(top, 512 * KIB, top + 4 * KIB, PAGE), None);
        assert_eq!(unused_range(100, 512 * KIB, 50, PAGE), None);
    }

    /// Resident KiB of the mapping that holds `address` (from /proc/self/smaps).
    fn resident_kib_of_mapping_at(address: usize) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        for line in smaps.lines() {
            let range = line.split_whitespace().next().unwrap_or("");
            if let Some((lo, hi)) = range.split_once('-') {
                if let (Ok(lo), Ok(hi)) =
                    (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
                {
                    inside = lo <= address && address < hi;
                    continue;
                }
            }
            if inside {
                if let Some(kib) = line.strip_prefix("Rss:") {
                    return kib.trim().trim_end_matches(" kB").trim().parse().unwrap();
                }
            }
        }
        panic!("no mapping holds {address:#x}");
    }

    #[inline(never)]
    fn touch_stack(kib: usize) -> u8 {
        let mut buf = [0u8; 1024];
        buf[kib % 1024] = kib as u8;
        let below = if kib > 1 { touch_stack(kib - 1) } else { 0 };
        std::hint::black_box(&mut buf);
        buf[kib % 1024].wrapping_add(below)
    }

    /// The mapping (from /proc/self/maps) that holds `address`: (start, end).
    fn mapping_at(address: usize) -> (usize, usize) {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        for line in maps.lines() {
            let range = line.split_whitespace().next().unwrap_or("");
            if let Some((lo, hi)) = range.split_once('-') {
                let lo = usize::from_str_radix(lo, 16).unwrap();
                let hi = usize::from_str_radix(hi, 16).unwrap();
                if lo <= address && address < hi {
                    return (lo, hi);
                }
            }
        }
        panic!("no mapping holds {address:#x}");
    }

    /// The released range starts at the thread's real stack end, whatever size the
    /// caller claims: just above the guard page of the stack mapping (the guard is
    /// its own PROT_NONE mapping), neither below it nor tens of KiB above it.
    #[test]
    fn the_bounds_are_the_threads_real_ones() {
        let size = 512 * KIB;
        for claimed in [size, 64 * KIB, 8 * 1024 * KIB] {
            let handle = std::thread::Builder::new()
                .stack_size(size)
                .spawn(move || {
                    let top = StackTop::here(claimed);
                    let marker = 0u8;
                    let here = std::ptr::addr_of!(marker) as usize;
                    let (start, _len) =
                        range_between(top.low, top.address, here, page_size()).unwrap();
                    (top.address, start)
                })
                .unwrap();
            let (address, start) = handle.join().unwrap();
            let (map_lo, map_hi) = mapping_at(address);
            assert!(address < map_hi);
            assert!(
                start >= map_lo,
                "claimed {claimed}: release starts at {start:#x}, below the stack {map_lo:#x}"
            );
            assert!(
                start - map_lo <= 3 * page_size(),
                "claimed {claimed}: release starts {} KiB above the stack's end",
                (start - map_lo) / KIB
            );
        }
    }

    #[test]
    fn released_stack_pages_leave_the_resident_set() {
        let size = 512 * KIB;
        let handle = std::thread::Builder::new()
            .stack_size(size)
            .spawn(move || {
                let top = StackTop::here(size);
                std::hint::black_box(touch_stack(256));
                let before = resident_kib_of_mapping_at(top.address);
                top.release_unused();
                let after = resident_kib_of_mapping_at(top.address);
                (before, after)
            })
            .unwrap();
        let (before, after) = handle.join().unwrap();
        assert!(before >= 256, "touching 256 KiB left {before} KiB resident");
        assert!(
            after + 200 <= before,
            "{before} KiB resident before the release, {after} KiB after"
        );
    }

    #[test]
    fn a_thread_keeps_working_after_its_stack_pages_are_released() {
        fn deep(n: u32) -> u64 {
            let buf = [n as u8; 1024];
            if n == 0 {
                return buf.iter().map(|b| *b as u64).sum();
            }
            deep(n - 1) + buf[7] as u64
        }
        let size = 512 * KIB;
        let handle = std::thread::Builder::new()
            .stack_size(size)
            .spawn(move || {
                let top = StackTop::here(size);
                let mut sums = Vec::new();
                for _ in 0..3 {
                    sums.push(deep(200));
                    top.release_unused();
                }
                sums
            })
            .unwrap();
        let sums = handle.join().unwrap();
        assert_eq!(sums, vec![deep(200); 3]);
    }
}
