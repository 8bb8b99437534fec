//! Makefile-style dep-info files (`.d`), as cargo and rustc write them.

use std::path::PathBuf;

/// Every prerequisite named in a dep-info file, in order, without duplicates.
///
/// Lines are `target: dep dep ...`; a space inside a path is written `\ `, a
/// line ending in `\` continues on the next one, and `#` starts a comment
/// (rustc's `# env-dep:` lines).
pub fn parse(text: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    // Join continuation lines first.
    let mut logical = String::new();
    let mut lines = Vec::new();
    for line in text.lines() {
        if let Some(head) = line.strip_suffix('\\').filter(|h| !h.ends_with('\\')) {
            logical.push_str(head);
            logical.push(' ');
        } else {
            logical.push_str(line);
            lines.push(std::mem::take(&mut logical));
        }
    }
    if !logical.is_empty() {
        lines.push(logical);
    }
    for line in lines {
        if line.trim_start().starts_with('#') {
            continue;
        }
        let Some(rest) = after_target(&line) else {
            continue;
        };
        for dep in split_escaped(rest) {
            let p = PathBuf::from(dep);
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    out
}

/// The text after the `target:` part of a rule (the colon is followed by a
/// space or ends the line, so `C:\x` drive letters are not mistaken for it).
fn after_target(line: &str) -> Option<&str> {
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b':' if i + 1 == bytes.len() || bytes[i + 1] == b' ' || bytes[i + 1] == b'\t' => {
                return Some(&line[i + 1..]);
            }
            _ => i += 1,
        }
    }
    None
}

fn split_escaped(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if matches!(chars.peek(), Some(' ' | '#' | '\\')) => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            ' ' | '\t' => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cargo_style() {
        let d = "/t/libk.rlib: /w/dev/src/lib.rs /w/k/src/lib.rs /w/k/src/my\\ file.rs\n";
        assert_eq!(
            parse(d),
            vec![
                PathBuf::from("/w/dev/src/lib.rs"),
                PathBuf::from("/w/k/src/lib.rs"),
                PathBuf::from("/w/k/src/my file.rs"),
            ]
        );
    }

    #[test]
    fn rustc_style_with_comments_and_continuations() {
        let d = "/t/k.d: k/src/lib.rs \\\n  k/src/a.rs\n\nk/src/lib.rs:\nk/src/a.rs:\n\n# env-dep:X=1\n";
        assert_eq!(
            parse(d),
            vec![PathBuf::from("k/src/lib.rs"), PathBuf::from("k/src/a.rs")]
        );
    }

    #[test]
    fn windows_drive_letters() {
        let d = "C:\\t\\libk.rlib: C:\\w\\k\\src\\lib.rs\n";
        assert_eq!(parse(d), vec![PathBuf::from("C:\\w\\k\\src\\lib.rs")]);
    }

    #[test]
    fn garbage_is_empty() {
        assert!(parse("").is_empty());
        assert!(parse("no colon here").is_empty());
    }
}
