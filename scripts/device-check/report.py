#!/usr/bin/env python3
"""Turns the GPU check's outputs (run.sh) into device-check.json and a
markdown table, device-check.md, for BENCHMARKS.md.

Every alloc/free row of warpalloc's bench is paired with the same case of
CUDA's device malloc (baseline.jsonl) and, when run.sh ran it, of the peer
allocator Gallatin (gallatin.jsonl, the same JSON lines with
"impl":"gallatin"): warpalloc ÷ CUDA malloc and warpalloc ÷ Gallatin."""
import json
import re
import sys
from pathlib import Path

# What a table cell shows when there is no figure.
NONE = "—"
# run.sh's exit status for a case its time budget left no time for.
SKIPPED = 254


def load(path):
    try:
        text = Path(path).read_text()
        return json.loads(text) if text.strip() else None
    except (OSError, ValueError) as e:
        return {"error": f"{path}: {e}"}


def lines(path):
    out = []
    try:
        for line in Path(path).read_text().splitlines():
            line = line.strip()
            if line.startswith("{"):
                out.append(json.loads(line))
    except (OSError, ValueError) as e:
        out.append({"error": f"{path}: {e}"})
    return out


def bench_rows(out, prefix="bench-"):
    """The rows of every bench-CASE.json (one process per case, run.sh), and
    the cases that gave none: a timeout (exit 124) or a failure. With
    prefix "candidate-bench-", the candidate build's."""
    rows, missing = [], []
    for path in sorted(out.glob(f"{prefix}*.json")):
        name = path.stem[len(prefix):]
        code = file_exit(path.with_suffix(".err"))
        got = load(path) or {}
        case_rows = got.get("rows", []) if isinstance(got, dict) else []
        rows.extend(case_rows)
        if code != 0 or not case_rows:
            missing.append(f"{name} ({exit_text(code)}, {len(case_rows)} rows)")
    return {"rows": rows, "missing": missing}


def exit_text(code):
    """What run.sh's recorded exit status of a case means."""
    if code in (124, 137):
        return "timed out"
    if code == SKIPPED:
        return "skipped: run.sh's time budget was spent"
    return f"exit {code}"


def case_exits(path):
    """The exit status of each case of a baseline.err or gallatin.err (run.sh
    appends "ARGS exit N" after each), by the key `peer_key` gives its row."""
    exits = {}
    try:
        text = Path(path).read_text()
    except OSError:
        return exits
    for line in text.splitlines():
        m = re.fullmatch(r"(alloc_free (\d+) (\d+)|mixed|ceiling) exit (-?\d+)", line.strip())
        if not m:
            continue
        key = (int(m.group(2)), int(m.group(3))) if m.group(2) else m.group(1)
        exits[key] = int(m.group(4))
    return exits


def peer_key(line):
    """The key of a baseline.cu / gallatin-bench JSON line: (threads, size)
    for alloc_free, "mixed" for mixed, None for the others."""
    if line.get("case") == "alloc_free":
        return (line.get("threads"), line.get("size"))
    if line.get("case") == "mixed":
        return "mixed"
    return None


def peer(got, err):
    """A peer's JSON lines by key (`peer_key`) and its cases' exit statuses."""
    return {"rows": {peer_key(b): b for b in got if peer_key(b) is not None},
            "exits": case_exits(err)}


def peer_cell(p, key, threads=None):
    """A peer's pairs per second for `key` (its nulls and bad blocks noted,
    and its thread count when it is not `threads`), or why there is none; and
    the figure itself (None when there is none)."""
    if p is None:
        return NONE, None
    b = p["rows"].get(key)
    if b is None:
        code = p["exits"].get(key)
        return (f"{NONE} ({exit_text(code)})" if code not in (None, 0) else NONE), None
    pps = b.get("pairs_per_second")
    notes = []
    tries = (b.get("pairs") or 0) + (b.get("nulls") or 0)
    if b.get("nulls") and tries:
        notes.append(f"{100 * b['nulls'] / tries:.1f} % nulls")
    if b.get("bad"):
        notes.append(f"{b['bad']} bad")
    if threads is not None and b.get("threads") != threads:
        notes.append(f"{b.get('threads')} threads")
    text = rate(pps) if pps else NONE
    return (f"{text} ({', '.join(notes)})" if notes else text), (pps or None)


def peer_threads(peers, key):
    """The thread count of a peer's case: its key's, or the JSON line's for mixed."""
    if isinstance(key, tuple):
        return key[0]
    return next((x["rows"][key].get("threads") for x in peers if key in x["rows"]), NONE)


def ratio(a, b):
    return f"{a / b:.2f}×" if a and b else NONE


def peer_missing(p, want):
    """The cases of `want` a peer gave no row for, and why."""
    out = []
    for key in want:
        if key in p["rows"]:
            continue
        code = p["exits"].get(key)
        name = f"{key[0]} × {key[1]} B" if isinstance(key, tuple) else key
        out.append(f"{name} ({exit_text(code) if code is not None else 'not run'})")
    return out


def trailing_exit(text):
    """run.sh's "exit N", the line it appends to a step's output when the
    step ends: (the lines before it, N), or (every line, None) when the
    last line is not one (the step did not end: the GPU machine's limit
    cut it, say)."""
    lines = text.strip().splitlines()
    if lines and re.fullmatch(r"exit -?\d+", lines[-1].strip()):
        return lines[:-1], int(lines[-1].split()[-1])
    return lines, None


def file_exit(path):
    """The exit status run.sh appended to the file at `path` (`trailing_exit`),
    or None when the file is missing or ends without one."""
    try:
        return trailing_exit(Path(path).read_text())[1]
    except OSError:
        return None


def first_project(path):
    """The first project's run (run.sh's first-project.txt): its exit status
    (run.sh's last line, "exit N") and its last lines before it; None when it
    did not run."""
    try:
        text, code = trailing_exit(path.read_text(errors="replace"))
    except OSError:
        return None
    return {"exit": code, "tail": text[-12:]}


def sanitizer_summary(path):
    """compute-sanitizer's ERROR SUMMARY line and the exit status (run.sh's
    "exit N" line) of a vmm-control-*.txt or a sanitized stress run's log,
    or None when there is no such file."""
    try:
        text = Path(path).read_text()
    except OSError:
        return None
    summary = re.findall(r"ERROR SUMMARY: (\d+) errors?", text)
    return {
        "errors": int(summary[-1]) if summary else None,
        "exit": trailing_exit(text)[1],
        "out_of_bounds": text.count("Invalid __global__ write") + text.count("Invalid __global__ read"),
    }


def sanitizer_texts(v):
    """A sanitizer_summary's error count and exit as the report prints them."""
    errors = "no ERROR SUMMARY" if v["errors"] is None else str(v["errors"])
    status = "no exit status" if v["exit"] is None else exit_text(v["exit"])
    return errors, status


# warpalloc's slab geometry, as device/src/size_class.rs computes it (the
# bench JSON does not report it): 2 MiB slabs, a 16-byte header, one bit per
# block, the first block aligned to the block's power of two (4 KiB at most).
SLAB_SIZE = 2 << 20
HEADER_BYTES = 16
MIN_BLOCK = 16
MAX_DATA_ALIGN = 4096


def block_size(n):
    """The block (class) size of an n-byte request: a multiple of 16 of the
    form {4, 6, 7, 8} << k."""
    y = max(n, MIN_BLOCK)
    step = 1 << ((y - 1).bit_length() - 3)
    c = 8 * step
    for c in (4 * step, 6 * step, 7 * step, 8 * step):
        if c >= y:
            break
    return (c + 15) & ~15


def usable_blocks(n):
    """Blocks in one slab of the class of an n-byte request (None for a
    request that bypasses slabs)."""
    if not 0 < n < SLAB_SIZE // 2:
        return None
    block = block_size(n)
    words = -(-(SLAB_SIZE // block) // 32)
    align = min(block & -block, MAX_DATA_ALIGN)
    data = -(-(HEADER_BYTES + 4 * words) // align) * align
    return (SLAB_SIZE - data) // block


def rate(x):
    if x is None:
        return "-"
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= scale:
            return f"{x / scale:.2f} {unit}/s"
    return f"{x:.0f} /s"


def chart_svg(pairs):
    """An SVG line chart of alloc/free pairs per second against threads
    (log-log), a colour per size: warpalloc solid, CUDA malloc dotted,
    Gallatin dashed. None when there is nothing to draw."""
    series = {}
    for p in pairs:
        if p["case"] not in ("alloc_free",) or p["size"] is None or p.get("mode") == "pool":
            continue
        for who, key in (("warpalloc", "warpalloc_pairs_per_second"),
                         ("CUDA malloc", "cuda_malloc_pairs_per_second"),
                         ("Gallatin", "gallatin_pairs_per_second")):
            if p.get(key):
                series.setdefault((p["size"], who), []).append((p["threads"], p[key]))
    points = [pt for pts in series.values() for pt in pts]
    if not points:
        return None
    import math
    w, h, left, right, top, bottom = 900, 560, 90, 210, 40, 50
    xs = [math.log10(t) for t, _ in points]
    ys = [math.log10(v) for _, v in points]
    x0, x1 = min(xs) - 0.1, max(xs) + 0.1
    y0, y1 = math.floor(min(ys)), math.ceil(max(ys))
    sx = lambda t: left + (math.log10(t) - x0) / (x1 - x0) * (w - left - right)
    sy = lambda v: h - bottom - (math.log10(v) - y0) / (y1 - y0) * (h - top - bottom)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w / 2}" y="22" text-anchor="middle" font-size="15">alloc/free pairs per second (warm), 4 rounds, 256 threads a block</text>',
           f'<line x1="{left}" y1="{h - bottom}" x2="{w - right}" y2="{h - bottom}" stroke="black"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{h - bottom}" stroke="black"/>',
           f'<text x="{(left + w - right) / 2}" y="{h - 12}" text-anchor="middle">threads</text>']
    for e in range(y0, y1 + 1):
        y = sy(10 ** e)
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{w - right}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{rate(10 ** e)}</text>')
    for t in sorted({t for t, _ in points}):
        x = sx(t)
        out.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{h - bottom}" stroke="#eee"/>')
        out.append(f'<text x="{x:.1f}" y="{h - bottom + 16}" text-anchor="middle">{t}</text>')
    colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]
    dashes = {"warpalloc": "", "CUDA malloc": ' stroke-dasharray="2,3"', "Gallatin": ' stroke-dasharray="7,4"'}
    sizes = sorted({size for size, _ in series})
    legend_y = top + 10
    for (size, who), pts in sorted(series.items(), key=lambda kv: (kv[0][0], kv[0][1] != "warpalloc", kv[0][1])):
        colour = colours[sizes.index(size) % len(colours)]
        pts = sorted(pts)
        path = " ".join(f"{sx(t):.1f},{sy(v):.1f}" for t, v in pts)
        width = 2.5 if who == "warpalloc" else 1.5
        out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="{width}"{dashes[who]}/>')
        for t, v in pts:
            out.append(f'<circle cx="{sx(t):.1f}" cy="{sy(v):.1f}" r="3" fill="{colour}"/>')
        lx = w - right + 15
        out.append(f'<line x1="{lx}" y1="{legend_y}" x2="{lx + 24}" y2="{legend_y}" stroke="{colour}" stroke-width="{width}"{dashes[who]}/>')
        out.append(f'<text x="{lx + 30}" y="{legend_y + 4}">{size} B {who}</text>')
        legend_y += 17
    out.append("</svg>")
    return "\n".join(out) + "\n"


# Issue 20's drift target: at 300 rounds a thread, each kernel's allocs/s at
# least this share of its figure at 10 rounds, with no null and no refusal.
DRIFT_SHARE = 0.8


# The bench's fill cases (`fill_case`, `footprint_case`): their "cold" rate
# is allocations per second of the launch that fills the heap, not pairs.
FILL_CASES = ("fragmentation", "footprint", "out of memory", "spill off", "spill")


def drift_verdicts(drift, exits):
    """Each drift kernel's verdict against issue 20's target: its allocs/s at
    300 rounds ÷ at 10 (at least DRIFT_SHARE), its nulls at 300, the 300-round
    run's refusals; a kernel missing from either run, or a run that did not
    end (run.sh's exit status), fails with why."""
    short, long = drift.get(10) or {}, drift.get(300) or {}
    # run.sh writes each run's .err with its exit status: none, not run.
    if all(exits.get(r) is None for r in (10, 300)):
        return {}
    verdicts = {}
    for rounds, run in ((10, short), (300, long)):
        if not run.get("kernels"):
            why = exit_text(exits.get(rounds)) if exits.get(rounds) not in (None, 0) else "no rows"
            verdicts[f"{rounds} rounds"] = {"pass": False, "why": f"the {rounds}-round run gave no rows ({why})"}
    if verdicts:
        return verdicts
    base = {k["kernel"]: k for k in short["kernels"]}
    refusals = long.get("refusals", 0)
    for k in long["kernels"]:
        b = base.get(k["kernel"])
        share = k["ops_per_second"] / b["ops_per_second"] if b and b["ops_per_second"] else None
        why = []
        if share is None:
            why.append("no 10-round figure")
        elif share < DRIFT_SHARE:
            why.append(f"{share:.2f}× its 10-round allocs/s (target ≥ {DRIFT_SHARE})")
        if k["nulls"]:
            why.append(f"{k['nulls']} nulls")
        if refusals:
            why.append(f"{refusals} refusals in the run")
        verdicts[k["kernel"]] = {"share": share, "nulls": k["nulls"], "refusals": refusals,
                                 "pass": not why, "why": "; ".join(why)}
    # A kernel of the 10-round run that the 300-round run lacks (it died,
    # or was cut) fails too.
    for name in base:
        if name not in verdicts:
            verdicts[name] = {"share": None, "nulls": None, "refusals": refusals,
                              "pass": False, "why": "no 300-round figure"}
    return verdicts


def drift_table(drift, verdicts):
    """Markdown lines pairing each kernel's stress row at 10 and 300 rounds,
    and the verdicts (`drift_verdicts`)."""
    short, long = drift.get(10) or {}, drift.get(300) or {}
    if not verdicts:
        return ["## drift: not run", ""]
    passed = all(v["pass"] for v in verdicts.values())
    head = f"## drift: {'PASS' if passed else 'FAIL'} (issue 20: at 300 rounds ≥ {DRIFT_SHARE}× the 10-round allocs/s, no null, no refusal)"
    md = [head, ""]
    for name, v in verdicts.items():
        md.append(f"- {name}: {'PASS' if v['pass'] else 'FAIL'}" + (f" — {v['why']}" if v["why"] else ""))
    md.append("")
    if not short.get("kernels") and not long.get("kernels"):
        return md
    md += ["10 and 300 rounds per thread (RPC mode):", "",
          "| kernel | rounds | allocs/s | ÷ 10 rounds | nulls | peak live | peak mapped | mapped ÷ live | problems |",
          "|---|---|---|---|---|---|---|---|---|"]
    base = {k["kernel"]: k for k in short.get("kernels", [])}
    for rounds, run in ((10, short), (300, long)):
        for k in run.get("kernels", []):
            b = base.get(k["kernel"])
            aged = ratio(k["ops_per_second"], b["ops_per_second"]) if b and rounds != 10 else "-"
            live, mapped = k.get("peak_live_bytes", 0), k.get("peak_mapped_bytes", 0)
            md.append(f"| {k['kernel']} | {rounds} | {rate(k['ops_per_second'])} | {aged} | {k['nulls']} | "
                      f"{live / 2**20:.0f} MiB | {mapped / 2**20:.0f} MiB | "
                      f"{(mapped / live) if live else 0:.2f} | {'; '.join(k['problems'])} |")
    for rounds, run in ((10, short), (300, long)):
        if run:
            md.append(f"\n{rounds} rounds: {'OK' if run.get('ok') else 'FAILED'}; {run.get('refusals', 0)} refusals, "
                      f"{run.get('relocations', 0)} granules moved; " + "; ".join(run.get("problems", [])))
    md.append("")
    return md


def clock_note(bench):
    """What timed warpalloc's rows against the peers' CUDA events: the bench
    JSON's `timed_by` per row (absent before 2026-12-07: the host's clock)."""
    rows = [r for r in (bench or {}).get("rows", []) if not r.get("error")]
    clocks = {r.get("timed_by") or "host clock" for r in rows}
    if not clocks:
        return "No warpalloc row ran: nothing timed against the peers' CUDA events."
    if clocks == {"cuda events"}:
        return ("Like for like in time: every implementation's figure is the kernel's time between "
                "two CUDA events on its stream (warpalloc's `timed_by`: cuda events).")
    return ("Not like for like in time: warpalloc's rows timed by " + ", ".join(sorted(clocks)) +
            " — the host's clock around the launch and its synchronisation is a few µs more than "
            "the kernel's time between two CUDA events, the peers' clock (up to a tenth of a "
            "10 240-thread launch).")


def bench_key(r):
    """What makes a bench row the same measurement in two builds."""
    return (r["case"], r["mode"], r["threads"], r["min_bytes"], r["max_bytes"])


def candidate_table(out, bench):
    """The candidate build (`cargo xtask device-check --candidate REV`) beside
    this one: each of its rows with this build's row of the same case, mode,
    threads and sizes, their warm pairs per second (their cold ones where
    either has no warm one; none where either has neither) and the ratio.
    None when no candidate ran."""
    revision_file = out / "candidate-revision.txt"
    if not revision_file.exists():
        return None, []
    revision = revision_file.read_text().strip()
    got = bench_rows(out, "candidate-bench-")
    mine = {bench_key(r): r for r in bench["rows"]}
    pairs = []
    md = [f"## candidate {revision} beside this build", "",
          "Warm pairs per second of both (cold of both where either has no warm figure); each "
          "candidate case ran right after this build's same case.", "",
          "| case | mode | threads | size | this build | candidate | candidate ÷ this build |",
          "|---|---|---|---|---|---|---|"]
    for r in got["rows"]:
        base = mine.get(bench_key(r)) or {}
        # One basis for both: warm where both have it, else cold.
        basis = "warm_pairs_per_second"
        if not (r.get(basis) and base.get(basis)):
            basis = "cold_pairs_per_second"
        theirs, this = r.get(basis), base.get(basis)
        size = f"{r['min_bytes']} B" if r["min_bytes"] == r["max_bytes"] else f"{r['min_bytes']}-{r['max_bytes']} B"
        md.append(f"| {r['case']} | {r['mode']} | {r['threads']} | {size} | "
                  f"{rate(this) if this else NONE} | {rate(theirs) if theirs else NONE} | {ratio(theirs, this)} |")
        pairs.append({"case": r["case"], "mode": r["mode"], "threads": r["threads"],
                      "min_bytes": r["min_bytes"], "max_bytes": r["max_bytes"],
                      "basis": basis[:-len("_pairs_per_second")],
                      "this_pairs_per_second": this or None, "candidate_pairs_per_second": theirs or None,
                      "candidate_per_this": theirs / this if theirs and this else None})
    if not got["rows"] and not got["missing"]:
        md.append("(no candidate case ran)")
    if got["missing"]:
        md += ["", "candidate cases without all their rows: " + "; ".join(got["missing"])]
    md.append("")
    return {"revision": revision, "pairs": pairs, "missing": got["missing"]}, md


def events_table(out):
    """The allocator's events counted on the GPU (run.sh's events step:
    `bench --events`, the kernels' events build), a row per bench row, per
    the row's unit (a warp-pair in the one-size cases, a free group with
    mixed sizes, as the simulator's contention test counts). None when the
    step did not run."""
    got = bench_rows(out, "events-")
    if not got["rows"] and not got["missing"]:
        return None, []
    md = ["## the allocator's events on the GPU", "",
          "The warm launch of each case, counted by the kernels' events build (a reduction per "
          "event: its rates are not the allocator's, and none is shown; its timing, and so its "
          "counts, may differ a little from the plain build's). Per warp-pair in the one-size "
          "cases, per free group (a warp's lanes freeing into one slab) with mixed sizes, as the "
          "simulator's contention test counts them; it holds its warm launches to 1.2 scans and "
          "0.1 extra walk rounds (mixed sizes: 0.2 walk rounds and looks).", "",
          "| case | threads | size | counted on | per | of them | scans | slot locks | full | "
          "partial | creation waits | claims | extra walk rounds | looks |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    rows = []
    for r in got["rows"]:
        size = f"{r['min_bytes']} B" if r["min_bytes"] == r["max_bytes"] else f"{r['min_bytes']}-{r['max_bytes']} B"
        e = r.get("events")
        if not e:
            why = r.get("error") or "no events (not the events build: a GPU before sm_80?)"
            # A cell: no column break, no line break.
            why = " ".join(str(why).replace("|", "/").split())
            md.append(f"| {r['case']} | {r['threads']} | {size} | {why} |" + " |" * 10)
            continue
        md.append(f"| {r['case']} | {r['threads']} | {size} | {e['counted_on']} | {e['unit']} | {e['units']} | "
                  f"{e['scans']:.3f} | {e['slot_locks']:.3f} | {e['full_locks']:.3f} | "
                  f"{e['partial_fits']:.3f} | {e['creation_waits']:.3f} | {e['claims']:.3f} | "
                  f"{e['extra_walk_rounds']:.3f} | {e['looks']:.3f} |")
        rows.append(dict(e, case=r["case"], threads=r["threads"],
                         min_bytes=r["min_bytes"], max_bytes=r["max_bytes"]))
    if got["missing"]:
        md += ["", "event cases without all their rows: " + "; ".join(got["missing"])]
    md.append("")
    return {"rows": rows, "missing": got["missing"]}, md


def main(out):
    out = Path(out)
    report = {
        "gpu": (out / "gpu.csv").read_text() if (out / "gpu.csv").exists() else None,
        "info": (out / "info.txt").read_text() if (out / "info.txt").exists() else None,
        "first_project": first_project(out / "first-project.txt"),
        "stress_rpc": load(out / "stress-rpc.json"),
        "stress_pool": load(out / "stress-pool.json"),
        "drift": {rounds: load(out / f"drift-{rounds}.json") for rounds in (10, 300)},
        "bench": bench_rows(out),
        "baseline": lines(out / "baseline.jsonl"),
        # None when run.sh did not run Gallatin (not staged).
        "gallatin": lines(out / "gallatin.jsonl") if (out / "gallatin.jsonl").exists() else None,
        "vmm_control": {when: v for when in ("before", "during")
                        if (v := sanitizer_summary(out / f"vmm-control-{when}.txt")) is not None},
        "sanitized_stress": {name: dict(v, stress=load(out / f"{name}.json"))
                             for name in ("synccheck-stress", "memcheck-stress-pool")
                             if (v := sanitizer_summary(out / f"{name}.log")) is not None},
    }
    (out / "device-check.json").write_text(json.dumps(report, indent=2))

    rpc_exit = file_exit(out / "stress-rpc.err")
    served = (report["stress_rpc"] or {}).get("rpc_allocs", 0)
    if rpc_exit in (124, 137):
        deadlock = "NOT shown: the RPC-mode stress run hit its timeout (a kernel spinning on the mailbox while the server maps memory may hang)"
    elif rpc_exit == 0 and served:
        deadlock = f"shown: the RPC-mode stress run finished with {served} ALLOC requests served (memory mapped) while its kernels ran"
    else:
        deadlock = f"not decided: the RPC-mode stress run exited with {rpc_exit} after {served} ALLOC requests"
    report["mapping_while_a_kernel_runs"] = deadlock
    report["drift_verdicts"] = drift_verdicts(
        report["drift"], {rounds: file_exit(out / f"drift-{rounds}.err") for rounds in (10, 300)})
    (out / "device-check.json").write_text(json.dumps(report, indent=2))

    md = ["# GPU check", "", "```", (report["gpu"] or "").strip(), "```", "",
          f"Mapping memory while a kernel spins on the mailbox: {deadlock}.", ""]
    link = next((l.split(": ", 1)[1] for l in (report["info"] or "").splitlines()
                 if l.startswith("cudarc link check: ")), None)
    if link is not None:
        report["cudarc_link_check"] = link
        md.append(f"cudarc link check (`info --link-check`): {link}")
        md.append("")
    # The JIT warm-ups (run.sh): how long the driver took to compile each
    # module on its first load, a small case included.
    jit = {name: lines_text[-1] for name in ("bench", "events")
           if (f := out / f"jit-{name}.err").exists() and (lines_text := f.read_text().splitlines())}
    if jit:
        report["jit_warm_up"] = jit
        md.append("JIT warm-up (the first load of each module, a 1 024-thread footprint case "
                  "included): " + "; ".join(f"{k} build: {v}" for k, v in jit.items()) + ".")
        md.append("")
    fp = report["first_project"]
    if fp is not None:
        code = fp["exit"]
        verdict = ("OK" if code == 0 else "no exit status" if code is None
                   else "not run" if code == SKIPPED else "FAILED")
        md.append(f"## first project (a user's program through cudarc): {verdict}")
        md.append("")
        if code is not None and code != 0:
            md.append(f"{exit_text(code)}.")
            md.append("")
        if fp["tail"]:
            md.append("Its last lines:")
            md.append("")
            md.append("```")
            md += fp["tail"]
            md.append("```")
        else:
            md.append("It printed nothing.")
        md.append("")
    for name in ("stress_rpc", "stress_pool"):
        s = report[name] or {}
        code = file_exit(out / (name.replace("_", "-") + ".err"))
        md.append(f"## {name}: {'OK' if s.get('ok') else 'FAILED'}")
        md.append("")
        if not s.get("kernels"):
            md.append(f"No rows: {exit_text(code) if code is not None else 'no exit status (not run)'}.")
            md.append("")
            continue
        md.append("| kernel | threads | allocs | nulls | corrupt | allocs/s | problems |")
        md.append("|---|---|---|---|---|---|---|")
        for k in s.get("kernels", []):
            md.append(f"| {k['kernel']} | {k['threads']} | {k['allocs']} | {k['nulls']} | {k['corrupt']} | "
                      f"{rate(k['ops_per_second'])} | {'; '.join(k['problems'])} |")
        if s.get("problems"):
            md.append("")
            md.append("problems: " + "; ".join(s["problems"]))
        md.append("")

    md += drift_table(report["drift"], report["drift_verdicts"])

    cuda_peer = peer(report["baseline"], out / "baseline.err")
    gallatin = peer(report["gallatin"], out / "gallatin.err") if report["gallatin"] is not None else None
    ceiling = next((b for b in report["baseline"] if b.get("op") == "random atomicOr"), None)
    ceil = ceiling["ops_per_second"] if ceiling else None
    title = "warpalloc vs CUDA malloc" + (" and Gallatin" if gallatin else "")
    md.append(f"## alloc/free pairs per second: {title}")
    md.append("")
    head = ["case", "mode", "threads", "size", "warpalloc cold", "warpalloc warm",
            "CUDA malloc", "warpalloc ÷ CUDA malloc"]
    if gallatin:
        head += ["Gallatin", "warpalloc ÷ Gallatin"]
    head += ["slab turnovers per second", "% of atomicOr ceiling", "map/req"]
    md.append("| " + " | ".join(head) + " |")
    md.append("|" + "---|" * len(head))
    pairs, wanted = [], []
    for r in (report["bench"] or {}).get("rows", []):
        one_size = r["min_bytes"] == r["max_bytes"]
        size = r["min_bytes"] if one_size else None
        size_text = f"{r['min_bytes']} B" if one_size else f"{r['min_bytes']}-{r['max_bytes']} B"
        # The pool row is alloc_free too (slabs mapped before the launch), and
        # so are the warmed-up row (slabs published before its first launch)
        # and the spread row (the streams spread between its launches).
        alloc_free = r["case"] in ("alloc_free", "alloc_free pool", "alloc_free warmed up",
                                   "alloc_free spread") and one_size
        key = (r["threads"], size) if alloc_free else "mixed" if r["case"].startswith("mixed") else None
        # A failed case's row (`Row::failed`) has rates of 0 and its error.
        failed = r.get("error")
        warm = None if failed else r["warm_pairs_per_second"] or r["cold_pairs_per_second"]
        cuda_text, cuda = peer_cell(cuda_peer, key, r["threads"]) if key else (NONE, None)
        mine = ([f"FAILED: {failed[:100]}", "-"] if failed else
                [rate(r["cold_pairs_per_second"]), rate(r["warm_pairs_per_second"])])
        cells = [r["case"], r["mode"], str(r["threads"]), size_text, *mine, cuda_text, ratio(warm, cuda)]
        gal = None
        if gallatin:
            gal_text, gal = peer_cell(gallatin, key, r["threads"]) if key else (NONE, None)
            cells += [gal_text, ratio(warm, gal)]
        usable = usable_blocks(size) if alloc_free else None
        turnovers = warm / usable if usable and warm else None
        # The fill rows' rate is allocations a second of their fill launch
        # (no frees): no pair rate to set against the ceiling.
        pct = f"{100 * warm / ceil:.1f}%" if ceil and warm and r["case"] not in FILL_CASES else "-"
        mpr = f"{r['mapped_per_requested']:.2f}" if r.get("mapped_per_requested") else "-"
        cells += [rate(turnovers) if turnovers else NONE, pct, mpr]
        md.append("| " + " | ".join(cells) + " |")
        if key is not None:
            wanted.append(key)
            pairs.append({
                "case": r["case"], "mode": r["mode"], "threads": r["threads"], "size": size,
                "warpalloc_pairs_per_second": warm or None,
                "cuda_malloc_pairs_per_second": cuda,
                "gallatin_pairs_per_second": gal,
                "warpalloc_per_cuda_malloc": warm / cuda if warm and cuda else None,
                "warpalloc_per_gallatin": warm / gal if warm and gal else None,
                "usable_blocks_per_slab": usable,
                "slab_turnovers_per_second": turnovers,
            })
    # The peers' cases warpalloc gave no row for (its case failed or timed
    # out): shown too, so that every measured case is in the table.
    peers = [x for x in (cuda_peer, gallatin) if x]
    extra = {k for x in peers for k in list(x["rows"]) + list(x["exits"]) if k not in ("ceiling", None)}
    for key in sorted(extra - set(wanted), key=lambda k: (isinstance(k, str), k)):
        cuda_text, cuda = peer_cell(cuda_peer, key)
        cells = ["mixed" if key == "mixed" else "alloc_free", NONE,
                 str(peer_threads(peers, key)), "16-8192 B" if key == "mixed" else f"{key[1]} B",
                 NONE, f"{NONE} (no row)", cuda_text, NONE]
        gal = None
        if gallatin:
            gal_text, gal = peer_cell(gallatin, key)
            cells += [gal_text, NONE]
        cells += [NONE, "-", "-"]
        md.append("| " + " | ".join(cells) + " |")
        pairs.append({
            "case": cells[0], "mode": None, "threads": peer_threads(peers, key),
            "size": None if key == "mixed" else key[1],
            "warpalloc_pairs_per_second": None, "cuda_malloc_pairs_per_second": cuda,
            "gallatin_pairs_per_second": gal, "warpalloc_per_cuda_malloc": None,
            "warpalloc_per_gallatin": None, "usable_blocks_per_slab": None,
            "slab_turnovers_per_second": None,
        })
    report["pairs"] = pairs
    report["candidate"], candidate_md = candidate_table(out, report["bench"])
    chart = chart_svg(pairs)
    if chart:
        (out / "alloc-free.svg").write_text(chart)
        md.append("")
        md.append("![alloc/free pairs per second against threads: warpalloc solid, "
                  "CUDA malloc dotted, Gallatin dashed](alloc-free.svg)")
    if report["bench"]["missing"]:
        md.append("")
        md.append("bench cases without all their rows: " + "; ".join(report["bench"]["missing"]))
    wanted = list(dict.fromkeys(wanted))
    for name, p in (("CUDA malloc", cuda_peer), ("Gallatin", gallatin)):
        gone = peer_missing(p, wanted) if p else []
        if gone:
            md.append("")
            md.append(f"{name} cases without a row: " + "; ".join(gone))
    if pairs:
        md.append("")
        md.append("warpalloc's figure in each ratio is its warm run (cold when there is no warm one); "
                  "in the alloc/free rows every implementation runs 4 malloc → write/read a word → free "
                  "rounds per thread, 256 threads a block, and the peers' figures are their warm (second) "
                  "launch.")
        md.append("")
        md.append("The fill rows (" + ", ".join(FILL_CASES) + ") give allocations per second of the "
                  "launch that fills the heap in the cold column: they free nothing while timed.")
        md.append("")
        md.append("The mixed rows run one kernel's work in every implementation: a log-uniform size "
                  "from 8 B to 8 KiB, its first and last words written and checked, 4 rounds a thread; "
                  "the draws of 8 to 15 B (a tenth) are requests of 16 B in warpalloc's kernel (its "
                  "blocks carry a 16-byte tag), of 8 to 15 B in the peers'.")
        md.append("")
        md.append(clock_note(report["bench"]))
    if any(x["slab_turnovers_per_second"] for x in pairs):
        sizes = sorted({x["size"] for x in pairs if x["usable_blocks_per_slab"]})
        held = ", ".join(f"{s} B: {usable_blocks(s)} blocks of {block_size(s)} B" for s in sizes)
        md.append("")
        md.append("Slab turnovers per second: warpalloc's pairs per second ÷ the blocks one 2 MiB slab "
                  f"holds for the size ({held}). The bench JSON does not report those counts: "
                  "report.py computes them with the size-class rule of device/src/size_class.rs "
                  "(2 MiB − 16-byte header − bitfield, the first block aligned), which it must follow "
                  "if that rule changes.")
    if gallatin:
        init = next((b for b in report["gallatin"] if b.get("case") == "init"), None)
        if init:
            md.append("")
            md.append(f"Gallatin: {init.get('variant', '?')}, {init.get('note', '')}; "
                      f"init {init.get('ms', 0):.0f} ms, outside the timed launches.")
    if candidate_md:
        md.append("")
        md += candidate_md
    report["events"], events_md = events_table(out)
    if events_md:
        md.append("")
        md += events_md
    sanitized = report.get("sanitized_stress") or {}
    if sanitized:
        md.append("")
        md.append("## compute-sanitizer on the stress kernels")
        md.append("")
        md.append("64 blocks of 128 threads, 4 rounds each: synccheck in RPC mode, memcheck in pool mode "
                  "with no large blocks (every slab mapped before the launch). Heap traffic: slabs put to "
                  "use and large blocks handed out, summed over the kernels (0: warpalloc served nothing).")
        md.append("")
        md.append("| run | sanitizer errors | exit | stress | kernels | heap traffic |")
        md.append("|---|---|---|---|---|---|")
        for name, v in sanitized.items():
            stress = v.get("stress")
            stress = stress if isinstance(stress, dict) else {}
            kernels = stress.get("kernels", [])
            errors, status = sanitizer_texts(v)
            # No JSON (the run died before printing it): no report, not a verdict.
            verdict = "OK" if stress.get("ok") else "FAILED" if stress and "error" not in stress else "no report"
            traffic = sum(k.get("heap_traffic", 0) for k in kernels)
            md.append(f"| {name} | {errors} | {status} | {verdict} | {len(kernels)} | {traffic} |")
    vmm = report.get("vmm_control") or {}
    if vmm:
        md.append("")
        md.append("## compute-sanitizer memcheck control (vmm_control)")
        md.append("")
        md.append("A kernel's first write into a 2 MiB granule the host maps before the launch "
                  "(expected: no error) or while the kernel runs (memcheck reports it).")
        md.append("")
        for when, v in vmm.items():
            errors, status = sanitizer_texts(v)
            if v["errors"] is not None:
                errors += " error" if v["errors"] == 1 else " errors"
            md.append(f"- mapped {when}: {errors}, {v['out_of_bounds']} invalid accesses reported, {status}")
    (out / "device-check.json").write_text(json.dumps(report, indent=2))
    md.append("")
    md.append("## atomics ceiling")
    md.append("")
    for b in report["baseline"]:
        if b.get("case") == "ceiling":
            md.append(f"- {b['op']}: {rate(b['ops_per_second'])} ({b['threads']} threads)")
    (out / "device-check.md").write_text("\n".join(md) + "\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "out")
