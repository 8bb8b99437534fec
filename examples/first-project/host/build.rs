//! Builds the kernel crate to PTX: `$OUT_DIR/first_kernels.ptx`.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if let Err(e) = warpalloc_builder::PtxBuilder::new("../kernels")
        .arch(warpalloc_builder::Arch::Sm75)
        .build()
    {
        eprintln!("error: building the kernels to PTX: {e}");
        std::process::exit(1);
    }
}
