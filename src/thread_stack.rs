//! Hands an idle thread's stack pages back to the kernel.
//!
//! A pod sync runs deep (CRI calls through grpcio, status generation) and touches
//! tens of KiB of its worker's stack. Those pages stay resident while the worker waits
//! for its next update, which is almost all of its life: about 60 KiB per pod, a
//! quarter of litelet's memory at 110 pods. Before a worker blocks, it drops the pages
//! below its current frame; the next sync faults in zeroed pages again, a few
//! microseconds per sync.

/// Kept below the caller's frame: room for what runs next (this call, the channel
/// receive) without faulting pages straight back in.
const KEEP_BELOW: usize = 16 * 1024;

/// Drops the calling thread's stack pages below its current frame (minus
/// [`KEEP_BELOW`]). Never call it on the main thread (its stack bounds come from
/// `/proc/self/maps`, too slow for a hot path); failures only cost memory and are
/// logged at debug level.
pub fn release_unused_stack() {
    #[cfg(target_os = "linux")]
    if let Err(err) = linux::release_below(KEEP_BELOW) {
        log::debug!("cannot release unused stack pages: {err}");
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use std::io;

    use nix::libc;

    /// The calling thread's usable stack: lowest address (above the guard page) and
    /// size.
    fn stack_bounds() -> io::Result<(usize, usize)> {
        // SAFETY: the attribute object is initialised by pthread_getattr_np before it
        // is read and destroyed exactly once; the out-pointers are valid locals.
        unsafe {
            let mut attr: libc::pthread_attr_t = std::mem::zeroed();
            let rc = libc::pthread_getattr_np(libc::pthread_self(), &mut attr);
            if rc != 0 {
                return Err(io::Error::from_raw_os_error(rc));
            }
            let mut low: *mut libc::c_void = std::ptr::null_mut();
            let mut size: libc::size_t = 0;
            let rc = libc::pthread_attr_getstack(&attr, &mut low, &mut size);
            libc::pthread_attr_destroy(&mut attr);
            if rc != 0 {
                return Err(io::Error::from_raw_os_error(rc));
            }
            Ok((low as usize, size))
        }
    }

    pub(super) fn release_below(keep: usize) -> io::Result<()> {
        let here = 0u8;
        let frame = std::hint::black_box(&here) as *const u8 as usize;
        let (low, size) = stack_bounds()?;
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
            .map_err(|_| io::Error::other("no page size"))?;
        if frame < low || frame > low + size {
            return Err(io::Error::other("frame outside the reported stack"));
        }
        // One page above the reported bottom stays out of reach of any guard page.
        let start = (low + page).next_multiple_of(page);
        let end = frame.saturating_sub(keep) / page * page;
        if end <= start {
            return Ok(());
        }
        // SAFETY: [start, end) lies inside this thread's own stack, below the live
        // frames (the stack grows down and `keep` bytes below this frame are spared),
        // so no live value is there; MADV_DONTNEED on private anonymous memory only
        // makes later reads see zeroed pages, which unused stack may hold.
        let rc =
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        /// Resident KiB of the mapping that holds `addr`, from /proc/self/smaps.
        fn resident_kib_of_mapping_at(addr: usize) -> u64 {
            let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
            let mut inside = false;
            for line in smaps.lines() {
                let first = line.split_whitespace().next().unwrap_or("");
                if let Some((from, to)) = first.split_once('-') {
                    if let (Ok(from), Ok(to)) = (
                        usize::from_str_radix(from, 16),
                        usize::from_str_radix(to, 16),
                    ) {
                        inside = (from..to).contains(&addr);
                        continue;
                    }
                }
                if inside {
                    if let Some(kib) = line.strip_prefix("Rss:") {
                        return kib.trim().trim_end_matches("kB").trim().parse().unwrap();
                    }
                }
            }
            panic!("no mapping holds {addr:#x}");
        }

        /// Touches about `kib` KiB of stack below the caller.
        #[inline(never)]
        fn touch_stack(kib: usize) -> u8 {
            let mut block = [0u8; 4096];
            std::hint::black_box(&mut block);
            if kib <= 4 {
                return block[7];
            }
            touch_stack(kib - 4).wrapping_add(block[9])
        }

        #[test]
        fn a_deep_call_leaves_little_resident_stack_once_released() {
            let measured = std::thread::Builder::new()
                .stack_size(1024 * 1024)
                .spawn(|| {
                    let here = 0u8;
                    let frame = std::hint::black_box(&here) as *const u8 as usize;
                    std::hint::black_box(touch_stack(400));
                    let before = resident_kib_of_mapping_at(frame);
                    release_below(16 * 1024).unwrap();
                    let after = resident_kib_of_mapping_at(frame);
                    // The stack still works after the release.
                    std::hint::black_box(touch_stack(40));
                    (before, after)
                })
                .unwrap()
                .join()
                .unwrap();
            let (before, after) = measured;
            assert!(before >= 400, "the deep call touched {before} KiB");
            assert!(after <= 64, "{after} KiB stay resident after the release");
        }
    }
}
