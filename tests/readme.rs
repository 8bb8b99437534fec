//! The README's "Your first project" shows code that compiles: each of its
//! Rust snippets is an excerpt of the example's files
//! (`examples/first-project/`, which the README's test command builds with
//! and without `--features gpu` and runs), line for line and in order, with
//! `// …` marking what is left out.

use std::path::Path;

/// The example's files a snippet may come from.
const SOURCES: &[&str] = &[
    "examples/first-project/kernels/src/lib.rs",
    "examples/first-project/host/src/main.rs",
];

/// The ```rust blocks of the README's section `heading` (up to the next
/// heading of any level).
fn rust_blocks(readme: &str, heading: &str) -> Vec<Vec<String>> {
    let start = readme.find(heading).expect("the section");
    let rest = &readme[start + heading.len()..];
    // To the next heading, a subsection's included.
    let section = &rest[..rest.find("\n##").unwrap_or(rest.len())];
    let mut blocks = Vec::new();
    let mut current: Option<Vec<String>> = None;
    for line in section.lines() {
        match (&mut current, line.trim_end()) {
            (None, "```rust") => current = Some(Vec::new()),
            (Some(_), "```") => blocks.extend(current.take()),
            (Some(block), text) => block.push(text.to_string()),
            (None, _) => {}
        }
    }
    blocks
}

/// Where `chunk` (whole lines) occurs in `lines` at or after `from`.
fn find(lines: &[&str], chunk: &[String], from: usize) -> Option<usize> {
    (from..=lines.len().saturating_sub(chunk.len())).find(|&at| {
        chunk
            .iter()
            .zip(&lines[at..])
            .all(|(want, have)| want == have)
    })
}

/// The chunks of a snippet between its `// …` lines, blank edges trimmed.
fn chunks(block: &[String]) -> Vec<Vec<String>> {
    block
        .split(|l| l.trim() == "// …")
        .map(|chunk| {
            let first = chunk.iter().position(|l| !l.is_empty());
            let last = chunk.iter().rposition(|l| !l.is_empty());
            match (first, last) {
                (Some(first), Some(last)) => chunk[first..=last].to_vec(),
                _ => Vec::new(),
            }
        })
        .filter(|c| !c.is_empty())
        .collect()
}

/// Whether every chunk occurs in `lines`, whole lines, each after the one
/// before.
fn in_order(lines: &[&str], chunks: &[Vec<String>]) -> bool {
    let mut at = 0;
    chunks.iter().all(|chunk| match find(lines, chunk, at) {
        Some(i) => {
            at = i + chunk.len();
            true
        }
        None => false,
    })
}

#[test]
fn the_first_project_snippets_are_the_example_s_code() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let blocks = rust_blocks(&readme, "## Your first project");
    assert!(
        blocks.len() >= 2,
        "the kernel crate's and the host's snippets"
    );
    for (n, block) in blocks.iter().enumerate() {
        let chunks = chunks(block);
        // One file holds every chunk, in order.
        let found = SOURCES.iter().any(|source| {
            let text = std::fs::read_to_string(root.join(source)).expect("an example file");
            let lines: Vec<&str> = text.lines().collect();
            in_order(&lines, &chunks)
        });
        assert!(
            found,
            "snippet {n} of \"Your first project\" is not, line for line and in order, in any of \
             {SOURCES:?}; the chunks:\n{chunks:#?}"
        );
    }
}

/// A program that launches on its own streams needs one call the launcher
/// makes for it: the README says where (after a temporary refusal, before
/// the next launch) and that `Heap::launch` does it.
#[test]
fn the_readme_says_when_own_streams_call_forget_refusal() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let paragraph = readme
        .split("\n\n")
        .find(|p| p.starts_with("When you launch on your own streams"))
        .expect("the README's paragraph on launching on your own streams");
    for needed in [
        "heap.forget_refusal()?",
        "before the next launch",
        "`Heap::launch`",
    ] {
        assert!(
            paragraph.contains(needed),
            "the own-streams paragraph does not say {needed:?}:\n{paragraph}"
        );
    }
    // The call it names is the API's.
    let _: fn(&warpalloc::Heap) -> Result<bool, warpalloc::HostError> =
        warpalloc::Heap::forget_refusal;
}

/// `cargo xtask` shows its own build: the alias does not pass `--quiet`
/// (which kept a fresh machine's first `cargo xtask run` silent for about a
/// minute while xtask built). It builds xtask from the committed lockfile
/// (`--locked`), as every build of the test command does.
#[test]
fn the_xtask_alias_shows_its_build() {
    let config =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/.cargo/config.toml"))
            .expect(".cargo/config.toml");
    let alias = config
        .lines()
        .find(|l| l.trim_start().starts_with("xtask"))
        .expect("the xtask alias");
    assert!(alias.contains("run --locked --package xtask"), "{alias}");
    assert!(
        !alias.contains("--quiet") && !alias.split_whitespace().any(|w| w == "-q" || w == "\"-q"),
        "the xtask alias hides xtask's build: {alias}"
    );
}

/// Each Rust snippet of the README's section `heading` is an excerpt of
/// the test `test` in `tests/heap.rs` (indentation aside), chunk by chunk
/// (`// …` between chunks) and in order: code that runs.
fn assert_snippets_in_test(heading: &str, test: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let blocks = rust_blocks(&readme, heading);
    assert!(!blocks.is_empty(), "the section's snippets");
    let text = std::fs::read_to_string(root.join("tests/heap.rs")).expect("tests/heap.rs");
    let start = text.find(&format!("fn {test}(")).expect("the test");
    let body: Vec<String> = text[start..]
        .lines()
        .take_while(|l| *l != "}")
        .map(|l| l.trim().to_string())
        .collect();
    let body: Vec<&str> = body.iter().map(String::as_str).collect();
    for block in blocks {
        // Indentation aside: each line trimmed, blank ones dropped.
        let chunks: Vec<Vec<String>> = chunks(&block)
            .into_iter()
            .map(|chunk| {
                chunk
                    .iter()
                    .map(|l| l.trim().to_string())
                    .filter(|l| !l.is_empty())
                    .collect()
            })
            .collect();
        assert!(
            in_order(&body, &chunks),
            "a snippet of {heading:?} is not, line for line and in order, in tests/heap.rs's \
             {test}; the chunks:\n{chunks:#?}"
        );
    }
}

/// The README's "Memory pressure" code runs: it is
/// `the_readme_memory_pressure_code_runs`'s.
#[test]
fn the_memory_pressure_snippets_are_a_test_s_code() {
    assert_snippets_in_test(
        "### Memory pressure",
        "the_readme_memory_pressure_code_runs",
    );
}

/// The README's "Sizing a pool from a run" code runs: it is
/// `a_pool_sized_from_a_profile_needs_no_rpc`'s.
#[test]
fn the_pool_sizing_snippet_is_a_test_s_code() {
    assert_snippets_in_test(
        "### Sizing a pool from a run",
        "a_pool_sized_from_a_profile_needs_no_rpc",
    );
}
