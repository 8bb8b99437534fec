//! Errors of the host side.

use cudarc::driver::DriverError;
use warpalloc_sim::SimError;

/// Why a host operation failed. Messages say what is missing and what still
/// works.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// libcuda could not be loaded.
    #[error(
        "no CUDA driver: libcuda could not be loaded (install the NVIDIA driver, or check \
         LD_LIBRARY_PATH)"
    )]
    NoDriver,
    /// The driver loaded but sees no GPU.
    #[error("the CUDA driver sees no GPU ({0})")]
    NoDevice(String),
    /// A driver call failed.
    #[error("CUDA driver call {call} failed: {source}")]
    Driver {
        /// The call, e.g. `cuModuleLoadData`.
        call: &'static str,
        /// The driver's error.
        #[source]
        source: DriverError,
    },
    /// cudarc panicked inside a driver call (a missing symbol, for instance).
    #[error("the CUDA driver library misbehaved in {call}: {message}")]
    DriverPanic {
        /// The call.
        call: &'static str,
        /// The panic message.
        message: String,
    },
    /// The loaded module lacks a symbol.
    #[error("the PTX module has no {what} `{name}`: was it built from a crate that defines it?")]
    MissingSymbol {
        /// "kernel" or "global".
        what: &'static str,
        /// The symbol.
        name: String,
    },
    /// The PTX text cannot be given to the driver.
    #[error("invalid PTX: {0}")]
    InvalidPtx(String),
    /// The driver's JIT rejected a PTX module, and said why.
    #[error("the CUDA driver rejected the PTX module ({source}); its JIT log: {log}")]
    ModuleRejected {
        /// The driver's error (`cuModuleLoadDataEx`).
        #[source]
        source: DriverError,
        /// What the JIT wrote to its error log (empty if nothing).
        log: String,
    },
    /// A GPU was required but not available.
    #[error("a GPU was required: {0}")]
    GpuRequired(Box<HostError>),
    /// A simulator launch failed.
    #[error(transparent)]
    Simulator(#[from] SimError),
    /// The heap's memory backing failed.
    #[error("memory backing: {0}")]
    Backing(#[from] crate::backing::BackingError),
    /// The RPC server thread could not be started.
    #[error("could not start the RPC server thread: {0}")]
    Server(std::io::Error),
    /// A `HeapConfig` field out of its range: the heap was not made.
    #[error("invalid HeapConfig: {0}")]
    Config(String),
    /// The module's device heap has another layout than this program's
    /// `DeviceHeap`: they were built from different warpalloc sources.
    #[error(
        "the module's WARPALLOC_HEAP does not match this program's device heap ({0}): \
         rebuild the kernels with this warpalloc"
    )]
    HeapLayout(String),
    /// The host could not allocate memory standing for device memory.
    #[error("out of host memory ({0} bytes) for the emulated device")]
    OutOfHostMemory(usize),
    /// A buffer whose size in bytes overflows the address space (on either
    /// device; a review, 2026-12-08: it was reported as the emulated
    /// device's host memory running out, on a GPU too).
    #[error("a buffer of {len} elements of {element} bytes: its size overflows")]
    BufferTooLarge {
        /// Elements asked for.
        len: usize,
        /// Bytes an element.
        element: usize,
    },
    /// Too many heaps live at once on the emulated device.
    #[error("more than {0} heaps live at once on the emulated device")]
    TooManyHeaps(usize),
    /// The module is linked to another heap.
    #[error(
        "the module is linked to another heap (at {0:#x}): a module allocates from one heap; \
         drop that heap first"
    )]
    LinkedElsewhere(u64),
    /// `Heap::launch` on a heap made by `Heap::attach`.
    #[error(
        "this heap was attached to a context, not made with a Launcher: launch with your own code"
    )]
    NoLauncher,
    /// A handle of one kind of device given to a heap on another.
    #[error("{0}")]
    WrongDevice(&'static str),
    /// An emulated stream's worker thread could not be started.
    #[error("could not start an emulated stream's thread: {0}")]
    Stream(std::io::Error),
    /// A launch by name did not run.
    #[error("launching `{kernel}`: {why}")]
    Launch {
        /// The kernel.
        kernel: String,
        /// Why.
        why: String,
    },
    /// A device heap's state is inconsistent (a broken invariant).
    #[error("the device heap is corrupt: {0}")]
    HeapCorrupt(String),
    /// `HeapConfig::spill` on a device whose driver cannot map host memory
    /// into the heap's region.
    #[error(
        "HeapConfig::spill: this device cannot back the heap's region with host memory ({0}); \
         turn spill off, or lower the demand (a limit, a smaller pool)"
    )]
    SpillUnsupported(crate::backing::BackingError),
    /// [`crate::Heap::warm_up`] stopped at a slab the driver failed to map
    /// (or a fault injected on purpose): the slabs published before it
    /// stay published. A limit, the headroom or a dry pool stops it
    /// without an error.
    #[error("warming the heap up stopped after {published} slabs: {why}")]
    WarmUp {
        /// The slabs published before the failure.
        published: u32,
        /// The driver's message.
        why: String,
    },
    /// The RPC server did not take a request in time.
    #[error("the RPC server did not take a request within {0:?}")]
    ServerTimeout(std::time::Duration),
}

impl HostError {
    /// The bytes of a buffer of `len` elements of `T`; `BufferTooLarge`
    /// when they overflow (both devices' buffer allocations).
    pub(crate) fn buffer_bytes<T>(len: usize) -> Result<usize, HostError> {
        len.checked_mul(size_of::<T>())
            .ok_or(HostError::BufferTooLarge {
                len,
                element: size_of::<T>(),
            })
    }

    pub(crate) fn driver(call: &'static str) -> impl FnOnce(DriverError) -> HostError {
        move |source| HostError::Driver { call, source }
    }
}
