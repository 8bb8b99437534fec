//! The panic handler for nvptx64 kernels: `trap`, which aborts the kernel
//! and makes the launch fail with an error the host sees. Device code keeps
//! panicking paths off the hot path (a bounds check pulls in `core`'s
//! formatting), so this is reached only on a bug.

#[panic_handler]
fn panic(_info: &core::panic::PanicInfo<'_>) -> ! {
    // SAFETY: `trap` takes no operands and touches no memory; it ends the
    // kernel, which is the defined outcome of a device panic.
    unsafe { core::arch::asm!("trap;", options(noreturn, nostack)) }
}
