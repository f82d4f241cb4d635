//! Weight buffers on transparent huge pages (Linux `madvise(MADV_HUGEPAGE)`).
//!
//! Owns: allocating the packed layout's large buffers so that the kernel backs them with 2 MiB
//! pages where it can. A model's matrices are streamed from memory once per step; on 4 KiB
//! pages a 1.5B Q4_K_M model spans about 250,000 pages, far beyond the TLB, so the kernels'
//! loads and prefetches wait on page walks (a software prefetch that misses the TLB walks the
//! page tables before it can fetch). Many distributions set transparent huge pages to
//! `madvise` (`/sys/kernel/mm/transparent_hugepage/enabled`), so anonymous memory gets huge
//! pages only when asked. Measured with `cargo bench --bench kernels` on Q4_K 655360x1536
//! (566 MiB, beyond the caches) at 16 rows, AVX-512, THP `madvise` against `always`: 206
//! against 262 GMAC/s on two threads, 82 against 133 on one (README, issue 18).
//!
//! Advice only: where the kernel has no transparent huge pages, has them set to `never`, or
//! cannot find free 2 MiB pages, the buffer is the same buffer on small pages. Nothing is
//! read or written differently.
//! May use: std and libc only. Never: the model, candle.

/// Bytes of a transparent huge page on x86-64 and most aarch64 kernels; buffers smaller than
/// this are not worth a system call.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
const HUGE: usize = 2 << 20;

/// A `Vec` of `len` copies of `T::default()` (zeroes for the integer and float types the
/// packed layout holds), its memory advised for huge pages before anything touches it, so the
/// first writes fault in 2 MiB pages.
pub fn zeroed<T: Copy + Default>(len: usize) -> Vec<T> {
    let mut v: Vec<T> = Vec::with_capacity(len);
    advise(v.as_ptr().cast(), len * std::mem::size_of::<T>());
    v.resize(len, T::default());
    v
}

/// A `Vec` holding `parts` one after another, advised as `zeroed` is.
pub fn concat<T: Copy + Default>(parts: &[&[T]]) -> Vec<T> {
    let len = parts.iter().map(|p| p.len()).sum();
    let mut v: Vec<T> = Vec::with_capacity(len);
    advise(v.as_ptr().cast(), len * std::mem::size_of::<T>());
    for p in parts {
        v.extend_from_slice(p);
    }
    v
}

/// Ask for huge pages on the whole 4 KiB pages inside `bytes` bytes at `ptr` (a fresh,
/// untouched allocation); a no-op for small buffers and off Linux.
#[cfg(target_os = "linux")]
fn advise(ptr: *const u8, bytes: usize) {
    if bytes < HUGE {
        return;
    }
    const PAGE: usize = 4096;
    let start = (ptr as usize).next_multiple_of(PAGE);
    let end = (ptr as usize + bytes) / PAGE * PAGE;
    if end > start {
        // SAFETY: `[start, end)` lies inside one live allocation of ours, page-aligned;
        // MADV_HUGEPAGE changes how the kernel backs the pages, never their contents, and a
        // failure (no THP in this kernel) leaves the memory as it was, so its result is
        // ignored.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn advise(_ptr: *const u8, _bytes: usize) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_hold_what_a_plain_vec_would() {
        let z: Vec<u8> = zeroed(3 << 20);
        assert_eq!(z.len(), 3 << 20);
        assert!(z.iter().all(|&b| b == 0));
        let f: Vec<f32> = zeroed(5);
        assert_eq!(f, vec![0.0; 5]);
        let big: Vec<u8> = (0..(3u32 << 20)).map(|i| (i % 251) as u8).collect();
        let c = concat(&[&[1u8, 2][..], &big, &[3u8][..]]);
        assert_eq!(c.len(), big.len() + 3);
        assert_eq!((&c[..2], c[c.len() - 1]), (&[1u8, 2][..], 3));
        assert_eq!(&c[2..c.len() - 1], &big[..]);
    }
}
