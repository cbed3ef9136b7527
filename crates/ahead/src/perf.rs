//! The kernel's performance events (`perf_event_open(2)`), as far as ahead
//! uses them: `ahead trace` samples the page faults of a program's threads
//! (crates/ahead-preload), and `ahead bench fast` counts the CPU cycles of
//! each side of its comparison.

use std::os::fd::{FromRawFd, OwnedFd};

/// `struct perf_event_attr` up to `sample_max_stack`
/// (`PERF_ATTR_SIZE_VER5`, Linux 4.8), which every later kernel takes.
/// Field names are the kernel's (`type` is `kind`); `flags` holds the
/// kernel's bit fields, `disabled` as bit 0.
#[repr(C)]
#[derive(Default, Debug, Clone, Copy)]
#[allow(missing_docs)]
pub struct Attr {
    pub kind: u32,
    pub size: u32,
    pub config: u64,
    pub sample_period: u64,
    pub sample_type: u64,
    pub read_format: u64,
    pub flags: u64,
    pub wakeup_events: u32,
    pub bp_type: u32,
    pub config1: u64,
    pub config2: u64,
    pub branch_sample_type: u64,
    pub sample_regs_user: u64,
    pub sample_stack_user: u32,
    pub clockid: i32,
    pub sample_regs_intr: u64,
    pub aux_watermark: u32,
    pub sample_max_stack: u16,
    pub reserved: u16,
}

/// `PERF_TYPE_HARDWARE`.
pub const TYPE_HARDWARE: u32 = 0;
/// `PERF_TYPE_SOFTWARE`.
pub const TYPE_SOFTWARE: u32 = 1;
/// `PERF_COUNT_HW_CPU_CYCLES`.
pub const COUNT_HW_CPU_CYCLES: u64 = 0;
/// `PERF_COUNT_SW_PAGE_FAULTS`.
pub const COUNT_SW_PAGE_FAULTS: u64 = 2;
/// The `inherit` bit of [`Attr::flags`]: threads the counted thread
/// starts afterwards are counted too, added in when they exit.
pub const FLAG_INHERIT: u64 = 1 << 1;
/// The `exclude_kernel` bit of [`Attr::flags`].
pub const FLAG_EXCLUDE_KERNEL: u64 = 1 << 5;
/// The `exclude_hv` bit of [`Attr::flags`].
pub const FLAG_EXCLUDE_HV: u64 = 1 << 6;
/// The `use_clockid` bit of [`Attr::flags`].
pub const FLAG_USE_CLOCKID: u64 = 1 << 25;

impl Attr {
    /// An event of `kind` and `config`, everything else zero, its size
    /// filled in.
    pub fn new(kind: u32, config: u64) -> Attr {
        Attr {
            kind,
            size: std::mem::size_of::<Attr>() as u32,
            config,
            ..Attr::default()
        }
    }
}

/// Opens the event `attr` on thread `tid` (0: the calling thread), on any
/// CPU, in no group, closed on exec.
pub fn open(attr: &Attr, tid: libc::pid_t) -> std::io::Result<OwnedFd> {
    const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;
    // SAFETY: `attr` is a valid attribute structure whose `size` the
    // caller left as `Attr::new` set it (the structure's own size); the
    // kernel reads at most that many bytes.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr as *const Attr,
            tid,
            -1,
            -1,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a descriptor perf_event_open just returned, ours alone.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

#[cfg(test)]
mod tests {
    use super::Attr;

    #[test]
    fn the_attribute_is_the_size_kernels_take() {
        // PERF_ATTR_SIZE_VER5.
        assert_eq!(std::mem::size_of::<Attr>(), 112);
        assert_eq!(Attr::new(0, 0).size, 112);
    }
}
