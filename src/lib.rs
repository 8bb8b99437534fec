//! warpalloc
