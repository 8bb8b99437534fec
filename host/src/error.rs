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
         LD_LIBRARY_PATH); the CPU simulator still runs every kernel"
    )]
    NoDriver,
    /// The driver loaded but sees no GPU.
    #[error("the CUDA driver sees no GPU ({0}); the CPU simulator still runs every kernel")]
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
    /// The module's `WARPALLOC_HEAP` has another layout than this program's
    /// device heap: they were built from different warpalloc versions.
    #[error(
        "the module's WARPALLOC_HEAP is {found} bytes, this program's device heap {expected}:          rebuild the kernels with this warpalloc"
    )]
    HeapLayout {
        /// Bytes in the module.
        found: usize,
        /// Bytes expected.
        expected: usize,
    },
}

impl HostError {
    pub(crate) fn driver(call: &'static str) -> impl FnOnce(DriverError) -> HostError {
        move |source| HostError::Driver { call, source }
    }
}
