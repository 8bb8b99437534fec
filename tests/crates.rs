//! The crates match their users: the `warpalloc` library a program depends
//! on pulls in no command-line machinery and builds no kernels.

use std::process::Command;

#[test]
fn the_library_pulls_in_no_cli_dependencies_and_builds_no_kernels() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "tree",
            "-p",
            "warpalloc",
            "-e",
            "normal,build",
            "--prefix",
            "none",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo tree");
    let tree = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{tree}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(tree.starts_with("warpalloc v"), "{tree}");
    for unwanted in [
        "clap ",
        "serde ",
        "serde_json ",
        "indicatif ",
        "warpalloc-builder ",
        "warpalloc-kernels-tests ",
        "warpalloc-tool ",
    ] {
        assert!(
            !tree.lines().any(|l| l.starts_with(unwanted)),
            "the library depends on {unwanted}:\n{tree}"
        );
    }
    assert!(
        !std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/warpalloc/build.rs")).exists(),
        "the library has a build script"
    );
}
