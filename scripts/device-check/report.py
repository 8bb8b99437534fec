#!/usr/bin/env python3
"""Turns the GPU check's outputs (run.sh) into device-check.json and a
markdown table, device-check.md, for BENCHMARKS.md."""
import json
import sys
from pathlib import Path


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


def bench_rows(out):
    """The rows of every bench-CASE.json (one process per case, run.sh), and
    the cases that gave none: a timeout (exit 124) or a failure."""
    rows, missing = [], []
    for path in sorted(out.glob("bench-*.json")):
        name = path.stem[len("bench-"):]
        err = path.with_suffix(".err")
        code = None
        try:
            last = err.read_text().strip().splitlines()[-1]
            code = int(last.split()[-1]) if last.startswith("exit") else None
        except (OSError, ValueError, IndexError):
            pass
        got = load(path) or {}
        case_rows = got.get("rows", []) if isinstance(got, dict) else []
        rows.extend(case_rows)
        if code != 0 or not case_rows:
            why = "timed out" if code == 124 else f"exit {code}"
            missing.append(f"{name} ({why}, {len(case_rows)} rows)")
    return {"rows": rows, "missing": missing}


def rate(x):
    if x is None:
        return "-"
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= scale:
            return f"{x / scale:.2f} {unit}/s"
    return f"{x:.0f} /s"


def main(out):
    out = Path(out)
    report = {
        "gpu": (out / "gpu.csv").read_text() if (out / "gpu.csv").exists() else None,
        "info": (out / "info.txt").read_text() if (out / "info.txt").exists() else None,
        "stress_rpc": load(out / "stress-rpc.json"),
        "stress_pool": load(out / "stress-pool.json"),
        "bench": bench_rows(out),
        "baseline": lines(out / "baseline.jsonl"),
    }
    (out / "device-check.json").write_text(json.dumps(report, indent=2))

    def exit_code(name):
        try:
            last = (out / name).read_text().strip().splitlines()[-1]
            return int(last.split()[-1]) if last.startswith("exit") else None
        except (OSError, ValueError, IndexError):
            return None

    rpc_exit = exit_code("stress-rpc.err")
    served = (report["stress_rpc"] or {}).get("rpc_allocs", 0)
    if rpc_exit == 124:
        deadlock = "NOT shown: the RPC-mode stress run hit its timeout (a kernel spinning on the mailbox while the server maps memory may hang)"
    elif rpc_exit == 0 and served:
        deadlock = f"shown: the RPC-mode stress run finished with {served} ALLOC requests served (memory mapped) while its kernels ran"
    else:
        deadlock = f"not decided: the RPC-mode stress run exited with {rpc_exit} after {served} ALLOC requests"
    report["mapping_while_a_kernel_runs"] = deadlock
    (out / "device-check.json").write_text(json.dumps(report, indent=2))

    md = ["# GPU check", "", "```", (report["gpu"] or "").strip(), "```", "",
          f"Mapping memory while a kernel spins on the mailbox: {deadlock}.", ""]
    for name in ("stress_rpc", "stress_pool"):
        s = report[name] or {}
        md.append(f"## {name}: {'OK' if s.get('ok') else 'FAILED'}")
        md.append("")
        md.append("| kernel | threads | allocs | nulls | corrupt | allocs/s | problems |")
        md.append("|---|---|---|---|---|---|---|")
        for k in s.get("kernels", []):
            md.append(f"| {k['kernel']} | {k['threads']} | {k['allocs']} | {k['nulls']} | {k['corrupt']} | "
                      f"{rate(k['ops_per_second'])} | {'; '.join(k['problems'])} |")
        if s.get("problems"):
            md.append("")
            md.append("problems: " + "; ".join(s["problems"]))
        md.append("")

    base = {(b.get("threads"), b.get("size")): b for b in report["baseline"] if b.get("case") == "alloc_free"}
    ceiling = next((b for b in report["baseline"] if b.get("op") == "random atomicOr"), None)
    ceil = ceiling["ops_per_second"] if ceiling else None
    md.append("## alloc/free pairs per second: warpalloc vs CUDA malloc")
    md.append("")
    md.append("| case | mode | threads | size | warpalloc cold | warpalloc warm | CUDA malloc | ratio | % of atomicOr ceiling | map/req |")
    md.append("|---|---|---|---|---|---|---|---|---|---|")
    for r in (report["bench"] or {}).get("rows", []):
        one_size = r["min_bytes"] == r["max_bytes"]
        size = r["min_bytes"] if one_size else None
        size_text = f"{r['min_bytes']} B" if one_size else f"{r['min_bytes']}-{r['max_bytes']} B"
        b = base.get((r["threads"], size)) if r["case"] == "alloc_free" else None
        if r["case"].startswith("mixed"):
            b = next((x for x in report["baseline"] if x.get("case") == "mixed"), None)
        warm = r["warm_pairs_per_second"] or r["cold_pairs_per_second"]
        cuda = b["pairs_per_second"] if b else None
        ratio = f"{warm / cuda:.2f}×" if cuda else "-"
        pct = f"{100 * warm / ceil:.1f}%" if ceil else "-"
        mpr = f"{r['mapped_per_requested']:.2f}" if r.get("mapped_per_requested") else "-"
        md.append(f"| {r['case']} | {r['mode']} | {r['threads']} | {size_text} | {rate(r['cold_pairs_per_second'])} | "
                  f"{rate(r['warm_pairs_per_second'])} | {rate(cuda)} | {ratio} | {pct} | {mpr} |")
    if report["bench"]["missing"]:
        md.append("")
        md.append("bench cases without all their rows: " + "; ".join(report["bench"]["missing"]))
    md.append("")
    md.append("## atomics ceiling")
    md.append("")
    for b in report["baseline"]:
        if b.get("case") == "ceiling":
            md.append(f"- {b['op']}: {rate(b['ops_per_second'])} ({b['threads']} threads)")
    (out / "device-check.md").write_text("\n".join(md) + "\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "out")
