//! Builds `kernels-tests` (and through it `warpalloc-device`) to PTX with
//! warpalloc-builder, for `warpalloc::ptx`. One `sm_75` module: ptxas and the
//! driver accept it for every later architecture (sm_90 included).

use std::path::PathBuf;

use warpalloc_builder::{Arch, PtxBuilder, declarations};

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let Some(out_dir) = std::env::var_os("OUT_DIR").map(PathBuf::from) else {
        eprintln!("error: OUT_DIR is not set (not run by cargo?)");
        std::process::exit(1);
    };
    let ptx = match PtxBuilder::new("kernels-tests")
        .arch(Arch::Sm75)
        .out_file(out_dir.join("kernels_tests.ptx"))
        .build()
    {
        Ok(ptx) => ptx,
        Err(e) => {
            eprintln!("error: building kernels-tests to PTX: {e}");
            std::process::exit(1);
        }
    };
    let decls = out_dir.join("kernels_tests_declarations.ptx");
    let text = match std::fs::read_to_string(&ptx.path) {
        Ok(t) => declarations(&t),
        Err(e) => {
            eprintln!("error: reading {}: {e}", ptx.path.display());
            std::process::exit(1);
        }
    };
    if std::fs::read_to_string(&decls).ok().as_deref() != Some(text.as_str())
        && let Err(e) = std::fs::write(&decls, text)
    {
        eprintln!("error: writing {}: {e}", decls.display());
        std::process::exit(1);
    }
    let list = |names: &[String]| names.iter().map(|n| format!("{n:?}, ")).collect::<String>();
    let names = format!(
        "/// The `.entry` kernels of [`KERNELS_TESTS`], in file order.\n\
         pub const KERNEL_NAMES: &[&str] = &[{}];\n\
         /// The visible globals of [`KERNELS_TESTS`] (for `cuModuleGetGlobal`).\n\
         pub const GLOBAL_NAMES: &[&str] = &[{}];\n\
         /// The architecture [`KERNELS_TESTS`] targets.\n\
         pub const ARCH: &str = {:?};\n",
        list(&ptx.kernels),
        list(&ptx.globals),
        ptx.arch.as_str(),
    );
    let names_file = out_dir.join("kernels_tests_names.rs");
    if std::fs::read_to_string(&names_file).ok().as_deref() != Some(names.as_str())
        && let Err(e) = std::fs::write(&names_file, names)
    {
        eprintln!("error: writing {}: {e}", names_file.display());
        std::process::exit(1);
    }
}
