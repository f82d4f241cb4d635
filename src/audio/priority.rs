//! Thread priority for audio work: nice 10 on the calling thread (see `audio`'s module doc).

/// Lower the calling thread's priority to nice 10 (Linux: nice is per thread). Best effort:
/// elsewhere, or if refused, the thread keeps its priority.
pub fn lower_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: `setpriority` takes plain integers and reads no memory of ours; `PRIO_PROCESS`
    // with id 0 names the calling thread on Linux. Its result is only advisory here.
    unsafe {
        let _ = libc::setpriority(libc::PRIO_PROCESS, 0, 10);
    }
}
