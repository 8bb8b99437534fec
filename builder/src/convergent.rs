//! Checks that rustc marked the kernels' functions `convergent`.
//!
//! A warp collective (`shfl.sync`, `vote.sync`, `match.any.sync`,
//! `redux.sync`, `bar.warp.sync`) must not be moved into or out of control
//! flow: LLVM's `llvm.nvvm.*` intrinsics for them are `convergent`, and so
//! must be every function that calls one, or LLVM may sink or duplicate a
//! call of that function into a divergent branch — on a GPU a hang or a
//! wrong result that no CPU simulation shows. rustc marks every function of
//! a GPU target `convergent` (LLVM then drops the mark where no collective
//! is reached) since rust-lang/rust#153995 (April 2026); with an older
//! nightly the functions that hold the allocator's collectives are not
//! marked. The check reads the user's objects (bitcode) as text (`opt -S`,
//! a tenth of a second for the device crate's) and refuses a function that
//! calls a collective intrinsic and is not `convergent`.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use crate::BuildError;
use crate::toolchain::{Toolchain, capture};

/// The first function of `objects` that calls a warp collective and is not
/// marked `convergent`, as `(object, function)`; `None` when there is none.
pub(crate) fn unmarked(
    tc: &Toolchain,
    objects: &[&Path],
) -> Result<Option<(String, String)>, BuildError> {
    for object in objects {
        let ir = capture(
            Command::new(tc.tool("opt"))
                .arg("-S")
                .arg(object)
                .arg("-o")
                .arg("-"),
        )?;
        if let Some(function) = first_unmarked(&ir) {
            return Ok(Some((object.display().to_string(), function)));
        }
    }
    Ok(None)
}

/// The first function defined in the textual IR `ir` whose body calls an
/// `llvm.nvvm` warp collective and whose attributes lack `convergent`.
fn first_unmarked(ir: &str) -> Option<String> {
    // `attributes #N = { ... }`: which groups say `convergent`.
    let groups: BTreeMap<&str, bool> = ir
        .lines()
        .filter_map(|l| l.strip_prefix("attributes "))
        .filter_map(|l| l.split_once(" = "))
        .map(|(id, attrs)| (id, attrs.split_whitespace().any(|a| a == "convergent")))
        .collect();
    let mut lines = ir.lines();
    while let Some(line) = lines.next() {
        let Some(header) = line.strip_prefix("define ") else {
            continue;
        };
        let name = header
            .split_once('@')
            .map(|(_, rest)| rest.split(['(', ' ']).next().unwrap_or(rest))
            .unwrap_or(header)
            .trim_matches('"')
            .to_owned();
        // The function's own attributes: inline, or a group `#N` before `{`.
        let before_body = header.rsplit_once(')').map_or(header, |(_, tail)| tail);
        let marked = before_body.split_whitespace().any(|w| {
            w == "convergent" || (w.starts_with('#') && groups.get(w).copied().unwrap_or(false))
        });
        let mut collective = false;
        for body in lines.by_ref() {
            if body.starts_with('}') {
                break;
            }
            collective |= calls_collective(body);
        }
        if collective && !marked {
            return Some(name);
        }
    }
    None
}

/// Whether an IR line calls one of the `llvm.nvvm` warp collectives.
fn calls_collective(line: &str) -> bool {
    const COLLECTIVES: &[&str] = &[
        "@llvm.nvvm.shfl.sync",
        "@llvm.nvvm.vote.",
        "@llvm.nvvm.match.",
        "@llvm.nvvm.redux.sync",
        "@llvm.nvvm.bar.warp.sync",
    ];
    line.contains("call") && COLLECTIVES.iter().any(|c| line.contains(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MARKED: &str = r#"
define internal i32 @_ZN4slab8allocate(i32 %0) unnamed_addr #1 {
start:
  %1 = tail call i32 @llvm.nvvm.vote.ballot.sync(i32 %0, i1 true)
  ret i32 %1
}

define void @plain() unnamed_addr #3 {
  ret void
}

attributes #1 = { convergent nounwind "target-cpu"="sm_75" }
attributes #3 = { nounwind "target-cpu"="sm_75" }
"#;

    #[test]
    fn a_function_that_calls_a_collective_must_be_convergent() {
        assert_eq!(first_unmarked(MARKED), None);
        // An older nightly: the same function, its group without the mark.
        let old = MARKED.replace("{ convergent nounwind", "{ nounwind");
        assert_eq!(first_unmarked(&old).as_deref(), Some("_ZN4slab8allocate"));
        // A mark written inline counts, and a function with no collective
        // needs none.
        let inline = old.replace("unnamed_addr #1 {", "unnamed_addr convergent #1 {");
        assert_eq!(first_unmarked(&inline), None);
        let none = old.replace("@llvm.nvvm.vote.ballot.sync", "@some_function");
        assert_eq!(first_unmarked(&none), None);
    }

    #[test]
    fn every_collective_is_one() {
        for call in [
            "%3 = call i32 @llvm.nvvm.shfl.sync.idx.i32(i32 -1, i32 %v, i32 0, i32 31)",
            "tail call void @llvm.nvvm.bar.warp.sync(i32 %m)",
            "%4 = tail call i32 @llvm.nvvm.match.any.sync.i32(i32 %m, i32 %k)",
            "%5 = tail call i32 @llvm.nvvm.redux.sync.or(i32 %v, i32 %m)",
        ] {
            assert!(calls_collective(call), "{call}");
        }
        assert!(!calls_collective(
            "declare i32 @llvm.nvvm.vote.ballot.sync(i32, i1) #7"
        ));
    }
}
