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

/// The ```rust blocks of the README's section `heading`.
fn rust_blocks(readme: &str, heading: &str) -> Vec<Vec<String>> {
    let start = readme.find(heading).expect("the section");
    let rest = &readme[start + heading.len()..];
    let section = &rest[..rest.find("\n## ").unwrap_or(rest.len())];
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
        // The chunks between `// …` lines, blank edges trimmed.
        let mut chunks: Vec<Vec<String>> = vec![Vec::new()];
        for line in block {
            if line.trim() == "// …" {
                chunks.push(Vec::new());
            } else {
                chunks.last_mut().expect("a chunk").push(line.clone());
            }
        }
        for chunk in &mut chunks {
            while chunk.first().is_some_and(|l| l.is_empty()) {
                chunk.remove(0);
            }
            while chunk.last().is_some_and(|l| l.is_empty()) {
                chunk.pop();
            }
        }
        chunks.retain(|c| !c.is_empty());
        // One file holds every chunk, in order.
        let found = SOURCES.iter().any(|source| {
            let text = std::fs::read_to_string(root.join(source)).expect("an example file");
            let lines: Vec<&str> = text.lines().collect();
            let mut at = 0;
            chunks.iter().all(|chunk| match find(&lines, chunk, at) {
                Some(i) => {
                    at = i + chunk.len();
                    true
                }
                None => false,
            })
        });
        assert!(
            found,
            "snippet {n} of \"Your first project\" is not, line for line and in order, in any of \
             {SOURCES:?}; the chunks:\n{chunks:#?}"
        );
    }
}
