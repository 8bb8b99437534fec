//! What a PTX file exports: `.entry` kernels, `.visible .func`s and `.visible` globals.

/// The symbols a PTX module makes visible to the host.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PtxSymbols {
    /// `.entry` kernels, in file order.
    pub kernels: Vec<String>,
    /// `.visible .func` device functions (exported `#[no_mangle]` non-kernels).
    pub functions: Vec<String>,
    /// `.visible .global` / `.visible .const` variables (what `cuModuleGetGlobal` finds).
    pub globals: Vec<String>,
}

/// Scans PTX text for its visible entries, functions and globals.
pub fn symbols(ptx: &str) -> PtxSymbols {
    let mut s = PtxSymbols::default();
    for line in ptx.lines() {
        let line = line.trim_start();
        // `.entry` is visible from the host even without `.visible`.
        let (visible, rest) = match line.strip_prefix(".visible") {
            Some(r) => (true, r.trim_start()),
            None => (false, line),
        };
        if let Some(r) = rest.strip_prefix(".entry") {
            if let Some(name) = name_before_paren(r) {
                push_unique(&mut s.kernels, name);
            }
        } else if !visible {
            continue;
        } else if let Some(r) = rest.strip_prefix(".func") {
            let mut r = r.trim_start();
            // Skip a return-value parameter list: `.func (.param .b32 r) name(`.
            if r.starts_with('(') {
                match r.find(')') {
                    Some(i) => r = &r[i + 1..],
                    None => continue,
                }
            }
            if let Some(name) = name_before_paren(r) {
                push_unique(&mut s.functions, name);
            }
        } else if rest.starts_with(".global") || rest.starts_with(".const") {
            let decl = rest.split(['=', ';']).next().unwrap_or("");
            let decl = decl.split('[').next().unwrap_or("");
            if let Some(name) = decl.split_whitespace().last().filter(|n| is_ident(n)) {
                push_unique(&mut s.globals, name);
            }
        }
    }
    s
}

/// A function defined (with a body) in a PTX module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PtxFunction {
    /// Its name.
    pub name: String,
    /// Whether it is an `.entry` (kernel).
    pub entry: bool,
    /// The text between its braces.
    pub body: String,
    /// The functions it calls (`call` / `call.uni`), in order, without duplicates.
    pub calls: Vec<String>,
}

/// Every function of a PTX module that has a body (declarations are skipped).
pub fn functions(ptx: &str) -> Vec<PtxFunction> {
    let mut out = Vec::new();
    // (name, entry) of the last header seen, until its body or `;`.
    let mut pending: Option<(String, bool)> = None;
    let mut current: Option<PtxFunction> = None;
    for line in ptx.lines() {
        if let Some(f) = current.as_mut() {
            if line.starts_with('}') {
                if let Some(f) = current.take() {
                    out.push(f);
                }
                continue;
            }
            if let Some(callee) = callee(line)
                && !f.calls.iter().any(|c| c == callee)
            {
                f.calls.push(callee.to_owned());
            }
            f.body.push_str(line);
            f.body.push('\n');
            continue;
        }
        let t = line.trim_start();
        let rest = [".visible", ".weak", ".extern"]
            .iter()
            .find_map(|p| t.strip_prefix(p))
            .map_or(t, str::trim_start);
        if let Some(r) = rest.strip_prefix(".entry") {
            pending = name_before_paren(r).map(|n| (n.to_owned(), true));
        } else if let Some(r) = rest.strip_prefix(".func") {
            let mut r = r.trim_start();
            if r.starts_with('(') {
                r = r.find(')').map_or("", |i| &r[i + 1..]);
            }
            pending = name_before_paren(r).map(|n| (n.to_owned(), false));
        } else if line.starts_with('{') {
            if let Some((name, entry)) = pending.take() {
                current = Some(PtxFunction {
                    name,
                    entry,
                    body: String::new(),
                    calls: Vec::new(),
                });
            }
        } else if t.starts_with(';') || (pending.is_some() && t.trim_end().ends_with(';')) {
            pending = None;
        }
    }
    out
}

/// The module with every function body emptied: its header, globals and
/// function declarations, each defined function as `{` `}`. Small enough to
/// parse quickly where parsing is slow (the emulated device under Miri), and
/// declaring exactly the same globals and entry points. Like [`functions`],
/// it relies on LLVM's layout: a body's braces stand at the start of their
/// lines.
pub fn declarations(ptx: &str) -> String {
    let mut out = String::new();
    let mut in_body = false;
    for line in ptx.lines() {
        if in_body {
            if line.starts_with('}') {
                in_body = false;
                out.push_str("}\n");
            }
            continue;
        }
        if line.starts_with('{') {
            in_body = true;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// `root` and every function it calls, transitively (those defined in `fns`).
pub fn reachable<'a>(fns: &'a [PtxFunction], root: &str) -> Vec<&'a PtxFunction> {
    let mut seen: Vec<&PtxFunction> = Vec::new();
    let mut todo = vec![root];
    while let Some(name) = todo.pop() {
        if seen.iter().any(|f| f.name == name) {
            continue;
        }
        if let Some(f) = fns.iter().find(|f| f.name == name) {
            seen.push(f);
            todo.extend(f.calls.iter().map(String::as_str));
        }
    }
    seen
}

/// The callee of a `call` instruction: `call.uni (r), name, (a);` → `name`.
fn callee(line: &str) -> Option<&str> {
    let t = line.trim_start();
    let t = t.strip_prefix('@').map_or(t, |p| {
        p.split_once(char::is_whitespace)
            .map_or("", |x| x.1)
            .trim_start()
    });
    let rest = t.strip_prefix("call")?;
    let rest = rest.strip_prefix(".uni").unwrap_or(rest);
    if !rest.starts_with(char::is_whitespace) {
        return None;
    }
    let mut rest = rest.trim_start();
    if rest.starts_with('(') {
        rest = rest
            .split_once(')')?
            .1
            .trim_start()
            .strip_prefix(',')?
            .trim_start();
    }
    let end = rest.find([',', ';', ' ', '\t']).unwrap_or(rest.len());
    let name = &rest[..end];
    is_ident(name).then_some(name)
}

fn name_before_paren(r: &str) -> Option<&str> {
    let r = r.trim_start();
    let end = r
        .find(|c: char| c == '(' || c.is_whitespace() || c == ';')
        .unwrap_or(r.len());
    let name = &r[..end];
    is_ident(name).then_some(name)
}

fn is_ident(n: &str) -> bool {
    !n.is_empty()
        && !n.starts_with('.')
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '$' | '%'))
}

fn push_unique(v: &mut Vec<String>, name: &str) {
    if !v.iter().any(|n| n == name) {
        v.push(name.to_owned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PTX: &str = r#"
//
.version 6.3
.target sm_75
.address_size 64

	// .globl	test_kernel             // -- Begin function test_kernel
.visible .global .align 8 .b8 MY_GLOBAL[8] = {7};
.visible .global .align 4 .u32 COUNTER;
.global .align 4 .u32 hidden;
.visible .const .align 8 .u64 LIMIT = 5;
.extern .func ext(.param .b32 a);
.func (.param .b32 func_retval0) internal_fn(
.visible .func  (.param .b32 func_retval0) exported_fn(
	.param .b32 exported_fn_param_0
)
.visible .func exported_void()
.visible .entry test_kernel(
	.param .u64 .ptr .align 1 test_kernel_param_0,
	.param .u64 test_kernel_param_1
)
.entry other_kernel()
.visible .entry test_kernel(
"#;

    #[test]
    fn finds_entries_functions_globals() {
        let s = symbols(PTX);
        assert_eq!(s.kernels, ["test_kernel", "other_kernel"]);
        assert_eq!(s.functions, ["exported_fn", "exported_void"]);
        assert_eq!(s.globals, ["MY_GLOBAL", "COUNTER", "LIMIT"]);
    }

    const BODIES: &str = "
.func _R_panic
()
;
.visible .entry k1(
	.param .u64 p
)
{
	.reg .b32 %r<2>;
	vote.sync.ballot.b32 %r1, %p1, -1;
	{ // callseq 0, 0
	call.uni helper, ();
	}
	@%p1 call.uni (retval0), _R_panic, (param0);
}
.func helper() // -- Begin function helper
{
	nanosleep.u32 %r1;
	call.uni _R_panic, ();
	ret;
}
.func _R_panic()
{
	trap;
}
.visible .entry k2()
{
	ret;
}
";

    #[test]
    fn function_bodies_and_calls() {
        let fs = functions(BODIES);
        let names: Vec<_> = fs.iter().map(|f| (f.name.as_str(), f.entry)).collect();
        assert_eq!(
            names,
            [
                ("k1", true),
                ("helper", false),
                ("_R_panic", false),
                ("k2", true)
            ]
        );
        assert_eq!(fs[0].calls, ["helper", "_R_panic"]);
        assert!(fs[0].body.contains("vote.sync.ballot"));
        assert!(!fs[0].body.contains("nanosleep"));
        let r: Vec<_> = reachable(&fs, "k1")
            .iter()
            .map(|f| f.name.as_str())
            .collect();
        assert_eq!(r.len(), 3);
        assert!(
            reachable(&fs, "k1")
                .iter()
                .any(|f| f.body.contains("nanosleep"))
        );
        assert_eq!(reachable(&fs, "k2").len(), 1);
        assert!(reachable(&fs, "nope").is_empty());
    }

    #[test]
    fn empty_and_garbage() {
        assert_eq!(symbols(""), PtxSymbols::default());
        assert_eq!(
            symbols(".visible .entry (\n.visible .global ;"),
            PtxSymbols::default()
        );
    }
}
