//! What the emulated device needs from a PTX module's text: its entry points
//! and its module-scope `.global` variables, with their alignment, size and
//! initial bytes — so that an emulated module's globals are exactly what the
//! driver would allocate for the same PTX.
//!
//! ```text
//!   .visible .global .align 8 .b8 WARPALLOC_HEAP[789312] = {};
//!   .visible .global .align 8 .b8 WARPALLOC_HEAP_LAYOUT[112] = {1, 0, 80, ...};
//!   .global .align 4 .u32 counter = 7;
//!   .visible .entry churn(
//! ```
//!
//! Initialisers are little-endian values of the declared element type, as
//! many as given (the rest is zero): integers (decimal or `0x`), and floats
//! as PTX writes them, their bits in hex (`0f3F800000`, `0d3FF0000000000000`).
//! An array without a length (`x[] = {...}`) has as many elements as its
//! initialiser. A symbolic initialiser (`generic(sym)`) is kept as zero
//! bytes and marked: the emulated device cannot relocate it. Module-scope
//! `.const` variables are read too (the driver finds them by name as well).

/// A module-scope `.global` variable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PtxGlobal {
    /// Its name.
    pub name: String,
    /// Whether it is `.visible` (found by name, as `cuModuleGetGlobal` does).
    pub visible: bool,
    /// Its alignment in bytes.
    pub align: usize,
    /// Its size in bytes.
    pub size: usize,
    /// Its initial bytes (at most `size`; the rest is zero).
    pub init: Vec<u8>,
    /// Whether the initialiser names symbols (kept as zeroes).
    pub symbolic: bool,
}

/// The parts of a PTX module the emulated device uses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PtxModule {
    /// Module-scope globals, in file order.
    pub globals: Vec<PtxGlobal>,
    /// `.entry` names, in file order.
    pub entries: Vec<String>,
}

impl PtxModule {
    /// The global `name`, if declared.
    pub fn global(&self, name: &str) -> Option<&PtxGlobal> {
        self.globals.iter().find(|g| g.name == name)
    }
}

/// Bytes of one element of a PTX type (`.b8`, `.u32`, `.f64`...).
fn type_size(ty: &str) -> Option<usize> {
    let bits: usize = ty
        .strip_prefix(['b', 'u', 's', 'f'])
        .and_then(|b| b.parse().ok())?;
    matches!(bits, 8 | 16 | 32 | 64).then_some(bits / 8)
}

/// A literal: an integer, decimal (possibly negative) or `0x` hex, or a
/// float's bits in hex (`0f` + 8 digits, `0d` + 16 digits).
fn number(v: &str) -> Option<u64> {
    if let Some(bits) = v
        .strip_prefix("0f")
        .or_else(|| v.strip_prefix("0F"))
        .filter(|b| b.len() == 8)
        .or_else(|| {
            v.strip_prefix("0d")
                .or_else(|| v.strip_prefix("0D"))
                .filter(|b| b.len() == 16)
        })
    {
        u64::from_str_radix(bits, 16).ok()
    } else if let Some(hex) = v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        u64::from_str_radix(hex, 16).ok()
    } else if let Ok(n) = v.parse::<i64>() {
        Some(n as u64)
    } else {
        v.parse::<u64>().ok()
    }
}

/// Parses one declaration (the text from `.global` up to `;`).
fn parse_global(decl: &str, visible: bool) -> Result<PtxGlobal, String> {
    let (head, init) = match decl.split_once('=') {
        Some((h, i)) => (h.trim(), Some(i.trim())),
        None => (decl.trim(), None),
    };
    let mut align = None;
    let mut elem = None;
    let mut name_part = None;
    let mut words = head.split_whitespace().peekable();
    while let Some(w) = words.next() {
        match w {
            ".global" | ".const" | ".visible" | ".weak" | ".extern" | ".common" => {}
            ".align" => {
                align = words.next().and_then(|a| a.parse::<usize>().ok());
                if align.is_none() {
                    return Err(format!("bad .align in `{decl}`"));
                }
            }
            _ if w.starts_with('.') && elem.is_none() => {
                elem = type_size(&w[1..]);
                if elem.is_none() {
                    return Err(format!("unknown type {w} in `{decl}`"));
                }
            }
            _ => name_part = Some(w),
        }
    }
    let elem = elem.ok_or_else(|| format!("no type in `{decl}`"))?;
    let name_part = name_part.ok_or_else(|| format!("no name in `{decl}`"))?;
    // `None`: an array whose length is its initialiser's.
    let (name, count) = match name_part.split_once('[') {
        Some((n, rest)) => match rest.trim_end_matches(']') {
            "" => (n, None),
            len => (
                n,
                Some(
                    len.parse::<usize>()
                        .map_err(|_| format!("bad array length in `{decl}`"))?,
                ),
            ),
        },
        None => (name_part, Some(1)),
    };
    let mut g = PtxGlobal {
        name: name.to_string(),
        visible,
        align: align.unwrap_or(elem),
        size: match count {
            Some(n) => elem
                .checked_mul(n)
                .ok_or_else(|| format!("the size of `{decl}` overflows"))?,
            None => 0,
        },
        init: Vec::new(),
        symbolic: false,
    };
    if let Some(init) = init {
        // One pass over the bytes (no sub-slices of the long list: Miri's
        // borrow tracking makes those quadratic).
        let mut token = String::new();
        for &b in init.as_bytes().iter().chain(b",") {
            match b {
                b',' | b'}' => {
                    let v = token.trim();
                    if !v.is_empty() {
                        match number(v) {
                            Some(n) => g.init.extend_from_slice(&n.to_le_bytes()[..elem]),
                            None => {
                                g.symbolic = true;
                                g.init.extend(std::iter::repeat_n(0, elem));
                            }
                        }
                    }
                    token.clear();
                }
                b'{' => {}
                _ => token.push(char::from(b)),
            }
        }
        if count.is_none() {
            g.size = g.init.len();
        }
        if g.init.len() > g.size {
            return Err(format!("more initial values than elements in `{decl}`"));
        }
    }
    if !g.align.is_power_of_two() {
        return Err(format!("alignment {} is not a power of two", g.align));
    }
    Ok(g)
}

/// The entry points and module-scope globals of `ptx`.
pub fn parse(ptx: &str) -> Result<PtxModule, String> {
    let mut module = PtxModule::default();
    let mut depth = 0usize;
    let mut pending: Option<(String, bool)> = None;
    for line in ptx.lines() {
        let code = line.split("//").next().unwrap_or("").trim();
        if let Some((text, visible)) = pending.as_mut() {
            text.push(' ');
            text.push_str(code);
            if code.contains(';') {
                let (text, visible) = (text.clone(), *visible);
                pending = None;
                let decl = text.split(';').next().unwrap_or("");
                module.globals.push(parse_global(decl, visible)?);
            }
            continue;
        }
        if depth == 0 {
            let mut words = code.split_whitespace();
            let first = words.next().unwrap_or("");
            let (visible, rest) = match first {
                ".visible" | ".weak" => (true, words.next().unwrap_or("")),
                ".extern" => (false, ""),
                other => (false, other),
            };
            if rest == ".global" || rest == ".const" {
                if code.contains(';') {
                    let decl = code.split(';').next().unwrap_or("");
                    module.globals.push(parse_global(decl, visible)?);
                } else {
                    pending = Some((code.to_string(), visible));
                }
                continue;
            }
            if rest == ".entry"
                && let Some(name) = words.next()
            {
                let name = name.split('(').next().unwrap_or(name);
                module.entries.push(name.to_string());
            }
        }
        depth += code.matches('{').count();
        depth = depth.saturating_sub(code.matches('}').count());
    }
    if pending.is_some() {
        return Err("a .global declaration does not end".into());
    }
    Ok(module)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PTX: &str = r#"
.version 8.0
.target sm_75
.address_size 64

.global .align 8 .b8 anon_1[48] = {255, 255, 15, 0, 0, 0, 0, 0, 0, 0, 16};
.visible .global .align 8 .b8 WARPALLOC_HEAP[789312] = {};
.visible .global .align 8 .u64 WORDS[3] = {1, 0x10, 18446744073709551615};
.visible .global .align 4 .u32 counter = 7;
.global .align 8 .u64 table[2] = {generic(anon_1), 0};
.extern .global .align 4 .u32 outside;
.visible .global .align 4 .f32 one = 0f3F800000;
.visible .global .align 8 .f64 halves[2] = {0d3FE0000000000000, 0d3FF8000000000000};
.visible .global .align 1 .b8 message[] = {104, 105, 0};
.visible .const .align 4 .u32 limit = 9;

	// .globl	churn
.visible .entry churn(
	.param .u64 churn_param_0
)
{
	.reg .b32 	%r<3>;
	ld.global.u32 %r1, [counter];
	{ .reg .b32 inner; }
	ret;
}
.entry hidden()
{
	ret;
}
"#;

    #[test]
    fn globals_and_entries() {
        let m = parse(PTX).expect("parses");
        assert_eq!(m.entries, ["churn", "hidden"]);
        let heap = m.global("WARPALLOC_HEAP").expect("heap");
        assert_eq!((heap.align, heap.size, heap.visible), (8, 789_312, true));
        assert!(heap.init.is_empty());
        let anon = m.global("anon_1").expect("anon");
        assert!(!anon.visible);
        assert_eq!(anon.size, 48);
        assert_eq!(anon.init[..4], [255, 255, 15, 0]);
        assert_eq!(anon.init.len(), 11);
        let words = m.global("WORDS").expect("words");
        assert_eq!(words.size, 24);
        assert_eq!(words.init[8], 0x10);
        assert_eq!(words.init[16..24], [0xff; 8]);
        let counter = m.global("counter").expect("counter");
        assert_eq!(
            (counter.size, counter.init.as_slice()),
            (4, &[7u8, 0, 0, 0][..])
        );
        assert!(m.global("table").expect("table").symbolic);
        assert!(m.global("outside").is_none(), "an .extern declares nothing");
        let one = m.global("one").expect("one");
        assert_eq!(one.init, 1.0f32.to_le_bytes());
        let halves = m.global("halves").expect("halves");
        assert_eq!(halves.init[..8], 0.5f64.to_le_bytes());
        assert_eq!(halves.init[8..], 1.5f64.to_le_bytes());
        let message = m.global("message").expect("message");
        assert_eq!((message.size, message.init.as_slice()), (3, &b"hi\0"[..]));
        let limit = m.global("limit").expect("a .const variable");
        assert_eq!(
            (limit.size, limit.init.as_slice()),
            (4, &[9u8, 0, 0, 0][..])
        );
    }

    #[test]
    fn bad_declarations_are_errors() {
        assert!(parse(".global .align 3 .b8 x[4];").is_err());
        assert!(parse(".global .q7 x;").is_err());
        assert!(parse(".global .align 4 .b8 x[2] = {1, 2, 3};").is_err());
        assert!(parse(".global .align 4 .b8 x[2] = {1,").is_err());
        assert!(
            parse(".global .align 8 .u64 x[4611686018427387904];").is_err(),
            "a size that overflows is an error, not a wrapped size"
        );
    }
}
