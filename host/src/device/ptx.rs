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
//! many as given (the rest is zero), in PTX's literal forms: integers in
//! decimal, hex (`0x`), octal (a leading `0`) or binary (`0b`), with an
//! optional `U`, negative too; floats as decimal (`1.5`, `-2e3`) or their
//! bits in hex (`0f3F800000`, an `.f32`'s; `0d3FF0000000000000`, an
//! `.f64`'s), each converted to the element's precision. An integer other
//! than 0 for a float element, or a float for an integer one, is an error
//! rather than a guess. An array without a length (`x[] = {...}`) has as
//! many elements as its initialiser. A symbolic initialiser (`generic(sym)`)
//! is kept as zero bytes and marked: the emulated device cannot relocate
//! it. Module-scope `.const` variables are read too (the driver finds them
//! by name as well); `/* */` comments are skipped, and a name declared
//! twice is an error.

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

/// An element type: its bytes, and whether it is a float (`.f32`, `.f64`).
#[derive(Clone, Copy)]
struct Element {
    bytes: usize,
    float: bool,
}

/// The element type of a PTX type (`.b8`, `.u32`, `.f64`...); floats of 32
/// and 64 bits only (`.f16` takes no initialiser).
fn element(ty: &str) -> Option<Element> {
    let float = ty.starts_with('f');
    let bits: usize = ty
        .strip_prefix(['b', 'u', 's', 'f'])
        .and_then(|b| b.parse().ok())?;
    let known = if float {
        matches!(bits, 32 | 64)
    } else {
        matches!(bits, 8 | 16 | 32 | 64)
    };
    known.then_some(Element {
        bytes: bits / 8,
        float,
    })
}

/// A PTX literal as written.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Literal {
    /// An integer (two's complement for a negative one).
    Int(u64),
    /// A float's value (decimal, or `0f`/`0d` bits).
    Float(f64),
}

/// A literal (PTX ISA, "Constants"), or `None` if `v` is none: an integer
/// in decimal, hex, octal or binary, with an optional `U` and sign; a
/// float in decimal or as its bits (`0f` + 8 hex digits, `0d` + 16).
fn literal(v: &str) -> Option<Literal> {
    let (negative, digits) = match v.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, v),
    };
    let hex_bits = |prefix: [&str; 2], len: usize| {
        prefix
            .iter()
            .find_map(|p| digits.strip_prefix(p))
            .filter(|b| b.len() == len)
            .and_then(|b| u64::from_str_radix(b, 16).ok())
    };
    let float = if let Some(bits) = hex_bits(["0f", "0F"], 8) {
        Some(f64::from(f32::from_bits(bits as u32)))
    } else if let Some(bits) = hex_bits(["0d", "0D"], 16) {
        Some(f64::from_bits(bits))
    } else if digits.contains(['.', 'e', 'E'])
        && !digits.starts_with("0x")
        && !digits.starts_with("0X")
        && digits.starts_with(|c: char| c.is_ascii_digit() || c == '.')
    {
        digits.parse::<f64>().ok()
    } else {
        None
    };
    if let Some(f) = float {
        return Some(Literal::Float(if negative { -f } else { f }));
    }
    let digits = digits.strip_suffix(['U', 'u']).unwrap_or(digits);
    let (radix, body) = if let Some(h) = digits.strip_prefix("0x").or(digits.strip_prefix("0X")) {
        (16, h)
    } else if let Some(b) = digits.strip_prefix("0b").or(digits.strip_prefix("0B")) {
        (2, b)
    } else if digits.len() > 1 && digits.starts_with('0') {
        (8, &digits[1..])
    } else {
        (10, digits)
    };
    if body.is_empty() || !body.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let n = u64::from_str_radix(body, radix).ok()?;
    Some(Literal::Int(if negative { n.wrapping_neg() } else { n }))
}

/// `v`'s bytes as an element of `elem` (little-endian), or why not.
fn element_bytes(v: &str, elem: Element) -> Result<Option<Vec<u8>>, String> {
    let Some(lit) = literal(v) else {
        // Not a literal: a symbol's address (`generic(sym)`, `sym`, or
        // LLVM's `0xFF(generic(sym))` byte form), which is kept as zeroes;
        // anything that starts as a number is a literal this cannot read.
        let symbol = v.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_' || c == '$')
            || v.contains("generic(");
        return if symbol {
            Ok(None)
        } else {
            Err(format!("an initial value PTX does not write so: `{v}`"))
        };
    };
    let bits = match (lit, elem.float, elem.bytes) {
        (Literal::Float(f), true, 4) => u64::from((f as f32).to_bits()),
        (Literal::Float(f), true, _) => f.to_bits(),
        (Literal::Int(0), true, _) => 0,
        (Literal::Int(_), true, _) => {
            return Err(format!(
                "an integer initial value `{v}` for a float element: write its bits (0f…, 0d…)"
            ));
        }
        (Literal::Float(_), false, _) => {
            return Err(format!(
                "a float initial value `{v}` for an integer element"
            ));
        }
        (Literal::Int(n), false, _) => n,
    };
    Ok(Some(bits.to_le_bytes()[..elem.bytes].to_vec()))
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
                elem = element(&w[1..]);
                if elem.is_none() {
                    return Err(format!("unknown type {w} in `{decl}`"));
                }
            }
            // `x [4]`: the length apart from the name.
            _ if w.starts_with('[') && name_part.is_some() => {
                name_part = name_part.map(|n: String| n + w);
            }
            _ if name_part.is_some() => {
                return Err(format!("more than one name in `{decl}`"));
            }
            _ => name_part = Some(w.to_string()),
        }
    }
    let elem = elem.ok_or_else(|| format!("no type in `{decl}`"))?;
    let name_part = name_part.ok_or_else(|| format!("no name in `{decl}`"))?;
    let name_part = name_part.as_str();
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
        align: align.unwrap_or(elem.bytes),
        size: match count {
            Some(n) => elem
                .bytes
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
                        match element_bytes(v, elem).map_err(|why| format!("{why} in `{decl}`"))? {
                            Some(bytes) => g.init.extend_from_slice(&bytes),
                            None => {
                                g.symbolic = true;
                                g.init.extend(std::iter::repeat_n(0, elem.bytes));
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

/// Whether the statement `stmt` declares a module-scope variable (`.global`
/// or `.const`, not `.extern`), and if so whether it is visible.
fn declares(stmt: &str) -> Option<bool> {
    let mut visible = false;
    for word in stmt.split_whitespace() {
        match word {
            ".visible" | ".weak" | ".common" => visible = true,
            ".extern" => return None,
            ".global" | ".const" => return Some(visible),
            _ => return None,
        }
    }
    None
}

/// `ptx` without its `/* */` comments (each kept as a space; its lines
/// kept, so that a line's `//` comment stays a line's).
fn without_block_comments(ptx: &str) -> String {
    let mut out = String::with_capacity(ptx.len());
    let mut rest = ptx;
    while let Some(at) = rest.find("/*") {
        // A `//` comment before it on its line holds it: that line is kept.
        let line_start = rest[..at].rfind('\n').map_or(0, |i| i + 1);
        if rest[line_start..at].contains("//") {
            let end = rest[at..].find('\n').map_or(rest.len(), |i| at + i);
            out.push_str(&rest[..end]);
            rest = &rest[end..];
            continue;
        }
        out.push_str(&rest[..at]);
        match rest[at + 2..].find("*/") {
            Some(end) => {
                let comment = &rest[at..at + 2 + end + 2];
                out.push(' ');
                out.extend(std::iter::repeat_n('\n', comment.matches('\n').count()));
                rest = &rest[at + 2 + end + 2..];
            }
            None => {
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// The entry points and module-scope globals of `ptx`.
pub fn parse(ptx: &str) -> Result<PtxModule, String> {
    let mut module = PtxModule::default();
    let mut depth = 0usize;
    let mut pending: Option<(String, bool)> = None;
    let ptx = without_block_comments(ptx);
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
            // Each declaration the line ends (`;`), then one it starts.
            let mut pieces: Vec<&str> = code.split(';').collect();
            let open = pieces.pop().unwrap_or("").trim();
            let mut declared = false;
            for piece in pieces {
                if let Some(visible) = declares(piece) {
                    module.globals.push(parse_global(piece, visible)?);
                    declared = true;
                }
            }
            if let Some(visible) = declares(open) {
                pending = Some((open.to_string(), visible));
                continue;
            }
            // An initialiser's braces are no scope.
            if declared {
                continue;
            }
            let mut words = code.split_whitespace();
            let first = words.next().unwrap_or("");
            let rest = match first {
                ".visible" | ".weak" | ".common" => words.next().unwrap_or(""),
                other => other,
            };
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
    for (i, g) in module.globals.iter().enumerate() {
        if module.globals[..i].iter().any(|h| h.name == g.name) {
            return Err(format!("`{}` is declared twice", g.name));
        }
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

    /// PTX's literal forms, each read as the element's value (a review,
    /// 2026-12-07: `010` was read as ten, an `0f` literal in an `.f64` as
    /// the f32's bits zero-extended, and decimal floats as symbols).
    #[test]
    fn literals_are_read_in_every_form_ptx_writes() {
        let m = parse(
            ".global .u32 octal = 010;
             .global .u32 binary = 0b101;
             .global .u32 suffixed = 7U;
             .global .s32 negative = -2;
             .global .u16 hex = 0xBEEF;
             .global .f32 decimal[2] = {-1.0, 2.5e1};
             .global .f64 widened = 0f3F800000;
             .global .f32 narrowed = 0d3FF8000000000000;
             .global .f32 zero = 0;
             .common .global .align 4 .u32 shared_one = 3;
             .global .align 4 .u32 spaced [2] = {1, 2};
             /* .global .u32 commented = 1;
                .global .u32 also_commented = 2; */
             .global .u32 after = 5; /* { */
             .global .u32 last = 6;",
        )
        .expect("parses");
        let value = |name: &str| {
            m.global(name)
                .unwrap_or_else(|| panic!("{name}"))
                .init
                .clone()
        };
        assert_eq!(value("octal"), 8u32.to_le_bytes());
        assert_eq!(value("binary"), 5u32.to_le_bytes());
        assert_eq!(value("suffixed"), 7u32.to_le_bytes());
        assert_eq!(value("negative"), (-2i32).to_le_bytes());
        assert_eq!(value("hex"), 0xBEEFu16.to_le_bytes());
        assert_eq!(value("decimal")[..4], (-1.0f32).to_le_bytes());
        assert_eq!(value("decimal")[4..], 25.0f32.to_le_bytes());
        assert_eq!(value("widened"), 1.0f64.to_le_bytes());
        assert_eq!(value("narrowed"), 1.5f32.to_le_bytes());
        assert_eq!(value("zero"), [0; 4]);
        let shared = m.global("shared_one").expect("a .common global");
        assert!(shared.visible);
        assert_eq!(shared.init, 3u32.to_le_bytes());
        let spaced = m.global("spaced").expect("a length apart from the name");
        assert_eq!((spaced.size, spaced.init.len()), (8, 8));
        assert!(m.global("commented").is_none() && m.global("also_commented").is_none());
        assert_eq!(value("after"), 5u32.to_le_bytes());
        assert_eq!(value("last"), 6u32.to_le_bytes(), "a brace in a comment");
        for symbolic in ["generic(anon_1)", "anon_1", "0xFF(generic(anon_1))"] {
            let m = parse(&format!(".global .u64 t = {symbolic};")).expect("parses");
            assert!(m.global("t").expect("t").symbolic, "{symbolic}");
        }
    }

    #[test]
    fn bad_declarations_are_errors() {
        for (ptx, why) in [
            (".global .f32 x = 1;", "an integer for a float"),
            (".global .u32 x = 1.5;", "a float for an integer"),
            (".global .u32 x = 09;", "not an octal digit"),
            (".global .u32 x = 0b2;", "not a binary digit"),
            (".global .u32 x = 1; .global .u32 x = 2;", "declared twice"),
            (".global .u32 x y;", "two names"),
        ] {
            assert!(parse(ptx).is_err(), "{why}: {ptx}");
        }
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
