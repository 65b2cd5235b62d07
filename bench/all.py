"""Run every benchmark in bench/ and print one table: name, figure, budget, ok or gap.

Each script runs as its own process (``sys.executable bench/<name>.py``) with its default
settings unless ``--quick`` (fewer runs, for a smoke check); its full output is printed as
it finishes, then the summary table is printed last. A script that fails shows as ``error``.

    python bench/all.py [--quick] [--only startup,hooks,...]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent

Row = tuple[str, str, str, str]  # name, figure, budget, verdict


def _num(pattern: str, text: str) -> float:
    m = re.search(pattern, text, re.M)
    if m is None:
        raise ValueError(f"no match for {pattern!r}")
    return float(m.group(1))


def _verdict(ok: bool) -> str:
    return "ok" if ok else "gap"


def _ratio_rows(out: str, names: list[str], budget: float) -> list[Row]:
    rows: list[Row] = []
    for name in names:
        m = re.search(rf"^{re.escape(name)}\s+([\d.]+)\s+([\d.]+)(\s+[\d.]+\s+[\d.]+)?\s*$", out, re.M)
        if m is None:
            raise ValueError(f"no line for {name}")
        ms, ratio = float(m.group(1)), float(m.group(2))
        rows.append((name, f"{ratio:.2f}x import click ({ms:.0f} ms)", f"<= {budget:.1f}x", _verdict(ratio <= budget)))
    return rows


def parse_startup(out: str) -> list[Row]:
    rows: list[Row] = []
    for m in re.finditer(r"^(exo .+?)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$", out, re.M):
        name, (ms, ratio, cpu_ms, cpu_ratio) = m.group(1), (float(g) for g in m.groups()[1:])
        rows.append((f"{name} (wall)", f"{ratio:.2f}x import click ({ms:.0f} ms)", "<= 1.3x", _verdict(ratio <= 1.3)))
        rows.append((f"{name} (cpu)", f"{cpu_ratio:.2f}x import click ({cpu_ms:.0f} ms)", "<= 1.3x",
                     _verdict(cpu_ratio <= 1.3)))
    if not rows:
        raise ValueError("no command line")
    return rows


def parse_hooks(out: str) -> list[Row]:
    rows: list[Row] = []
    base = re.search(r"^baseline: python -c pass\s+([\d.]+)\s+[\d.]+\s+([\d.]+)", out, re.M)
    if base is None:
        raise ValueError("no baseline line")
    for name in ["exo hook tool --cli claude", "exo hook stop --cli claude"]:
        m = re.search(rf"^{re.escape(name)}\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$", out, re.M)
        if m is None:
            raise ValueError(f"no line for {name}")
        ms, ratio, cpu_ms, cpu_ratio = (float(g) for g in m.groups())
        rows.append((f"{name} (wall)", f"{ratio:.2f}x python -c pass ({ms:.0f} vs {float(base.group(1)):.0f} ms)",
                     "<= 1.5x", _verdict(ratio <= 1.5)))
        rows.append((f"{name} (cpu)", f"{cpu_ratio:.2f}x python -c pass ({cpu_ms:.0f} vs "
                     f"{float(base.group(2)):.0f} ms)", "<= 1.5x", _verdict(cpu_ratio <= 1.5)))
    return rows


def parse_spawn(out: str) -> list[Row]:
    rows: list[Row] = []
    for block in out.split("-- ")[1:]:
        count = int(_num(r"^(\d+) agents", block))
        ratio = _num(r"ratio exo spawn / shell loop \(\d+ agents\): ([\d.]+)", block)
        exo_ms = _num(r"^exo spawn\s+median\s+([\d.]+) ms", block)
        loop_ms = _num(r"^shell loop\s+median\s+([\d.]+) ms", block)
        rows.append((f"exo spawn, {count} workers in tmux", f"{ratio:.2f}x shell loop ({exo_ms:.0f} vs {loop_ms:.0f} ms)",
                     "<= 1.0x", _verdict(ratio <= 1.0)))
    if not rows:
        raise ValueError("no spawn result")
    return rows


def parse_wake(out: str) -> list[Row]:
    p50 = _num(r"note -> wake-up latency: p50\s+([\d.]+) ms", out)
    p99 = _num(r"note -> wake-up latency: p50\s+[\d.]+ ms\s+p99\s+([\d.]+) ms", out)
    lost = int(_num(r"lost notes: (\d+)", out))
    duplicated = int(_num(r"duplicated notes: (\d+)", out))
    calls = int(_num(r"consumed in (\d+) wait calls", out))
    queued = int(_num(r"queued: (\d+) notes", out))
    fifo = _num(r"bare FIFO round trip .*?p50\s+([\d.]+) ms", out)
    return [
        ("note -> wake, p50 (20 writers)", f"{p50:.1f} ms (bare FIFO {fifo:.2f} ms)", "< 20 ms", _verdict(p50 < 20)),
        ("note -> wake, p99 (20 writers)", f"{p99:.1f} ms", "< 100 ms", _verdict(p99 < 100)),
        (f"wait calls for {queued} queued notes", str(calls), "<= 3", _verdict(calls <= 3)),
        ("notes lost / duplicated", f"{lost} / {duplicated}", "0 / 0", _verdict(lost == 0 and duplicated == 0)),
    ]


def parse_agents500(out: str) -> list[Row]:
    ms = _num(r"exo agents --json \(\d+ runs\): median\s+([\d.]+) ms", out)
    calls = int(_num(r"tmux calls per refresh (\d+)", out))
    click = _num(r"baseline python -c 'import click': median\s+([\d.]+) ms", out)
    return [
        ("exo agents --json, 500 live agents", f"{ms:.0f} ms (import click {click:.0f} ms)", "< 300 ms",
         _verdict(ms < 300)),
        ("tmux processes per agents call", str(calls), "1", _verdict(calls == 1)),
    ]


def parse_completion(out: str) -> list[Row]:
    return _ratio_rows(out, ["exo attach a0<TAB> (bash_complete)"], 1.5)


def parse_mcp(out: str) -> list[Row]:
    m = re.search(r"^exo mcp\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s*$", out, re.M)
    if m is None:
        raise ValueError("no exo mcp line")
    t_ratio = _num(r"time ratio ([\d.]+)", out)
    return [
        ("exo mcp start -> first tools/list", f"{float(m.group(2)):.0f} ms ({t_ratio:.2f}x minimal server)",
         "report", "ok"),
        ("exo mcp peak RSS", f"{float(m.group(3)):.1f} MiB ({m.group(1)} tools)", "report", "ok"),
    ]


def parse_beads(out: str) -> list[Row]:
    rows: list[Row] = []
    for m in re.finditer(r"^(exo [^\n]*?)\s+bd calls\s+(\d+) \(budget\s+(\d+)\)", out, re.M):
        name, calls, budget = m.group(1).strip(), int(m.group(2)), int(m.group(3))
        rows.append((f"bd calls of {name}", str(calls), f"<= {budget}", _verdict(calls <= budget)))
    if not rows:
        raise ValueError("no bd call lines")
    return rows


def parse_foresight(out: str) -> list[Row]:
    check = _num(r"foresight: check ([\d.]+) ms", out)
    added = _num(r"stop hook ([+-][\d.]+) ms", out)
    return [
        ("foresight check, 10 siblings", f"{check:.0f} ms", "< 1000 ms", _verdict(check < 1000)),
        ("stop hook added by foresight", f"{added:+.1f} ms", "<= 15 ms", _verdict(added <= 15)),
    ]


def parse_merge_queue(out: str) -> list[Row]:
    runs = _num(r"merge_queue: \d+ PRs, 1 bad: \d+ landed in (\d+) gate runs", out)
    untested = _num(r"merge_queue: base positions not tested: (\d+)", out)
    drain = _num(r"merge_queue: \d+ entries with an instant gate: \d+ landed in ([\d.]+) s", out)
    return [
        ("merge queue: 20 PRs, 1 bad, gate runs", f"{runs:.0f}", "<= 10", _verdict(runs <= 10)),
        ("merge queue: base positions untested", f"{untested:.0f}", "0", _verdict(untested == 0)),
        ("merge queue: 100 entries drain", f"{drain:.2f} s", "< 10 s", _verdict(drain < 10)),
    ]


def parse_checkpoints(out: str) -> list[Row]:
    take = _num(r"checkpoints: checkpoint ([\d.]+) ms", out)
    added = _num(r"stop hook ([+-][\d.]+) ms \(budget 10\)", out)
    status = _num(r"^git status --porcelain -uall of the same checkout \(baseline\)\s+([\d.]+)", out)
    grown = _num(r"storage per checkpoint of 10 changed files, \d{5,} files: ([\d.]+) KiB", out)
    return [
        ("checkpoint, 10,000 files, 10 changed", f"{take:.0f} ms (git status {status:.0f} ms)", "< 150 ms",
         _verdict(take < 150)),
        ("stop hook added by a background checkpoint", f"{added:+.1f} ms", "<= 10 ms", _verdict(added <= 10)),
        ("storage per checkpoint, 10 files changed", f"{grown:.1f} KiB", "report", "ok"),
    ]


def parse_clone(out: str) -> list[Row]:
    ratio = _num(r"ratio clone / worktree spawn: ([\d.]+)x", out)
    return [("exo spawn into own clones vs worktrees", f"{ratio:.2f}x", "<= 1.1x", _verdict(ratio <= 1.1))]


def parse_hosts(out: str) -> list[Row]:
    master = _num(r"with a new connection: [\d.]+ ms \(([\d.]+)x\)", out)
    ratio = _num(r"exo / manual: ([\d.]+)x", out)
    return [
        ("ssh through exo's master vs a new connection", f"{master:.2f}x", "< 1.0x", _verdict(master < 1.0)),
        ("exo read of another host's agent vs ssh by hand", f"{ratio:.2f}x", "<= 1.5x", _verdict(ratio <= 1.5)),
    ]


def parse_broker(out: str) -> list[Row]:
    first = _num(r"ratio ([\d.]+)x \(budget 0\.35x\)", out)
    per = _num(r"([\d.]+) MiB per agent", out)
    holders = int(_num(r"processes holding the SDK: (\d+)", out))
    hook = _num(r"python -c pass: [\d.]+ ms; ratio ([\d.]+)x", out)
    burst = _num(r"direct; ratio ([\d.]+)x", out)
    wake = _num(r"through the relays: p50 ([\d.]+) ms", out)
    lost = int(_num(r"lost (\d+), duplicated", out)) + int(_num(r"duplicated (\d+)", out))
    return [
        ("relay exo mcp to tools/list vs import mcp.server.lowlevel", f"{first:.2f}x", "<= 0.35x",
         _verdict(first <= 0.35)),
        ("30 agents: (broker + relays) RSS / 30; SDK holders", f"{per:.1f} MiB; {holders}", "<= 20 MiB; 1",
         _verdict(per <= 20 and holders == 1)),
        ("exo hook stop through the relay vs python -c pass", f"{hook:.2f}x", "<= 1.5x", _verdict(hook <= 1.5)),
        ("20 hooks at once, p99 relay / direct", f"{burst:.2f}x", "<= 2x", _verdict(burst <= 2.0)),
        ("note -> wake through the relays, p50", f"{wake:.1f} ms", "< 20 ms, none lost", _verdict(wake < 20 and not lost)),
    ]


def parse_ui(out: str) -> list[Row]:
    paint = _num(r"agents painted from navigation start \(\d+ runs\): median ([\d.]+) ms", out)
    count = int(_num(r"^(\d+) agents painted", out))
    p50 = _num(r"note -> page latency \(\d+ notes\): p50 ([\d.]+) ms", out)
    return [
        (f"exo ui: {count} agents painted (Chromium, median)", f"{paint:.0f} ms", "< 300 ms", _verdict(paint < 300)),
        ("exo ui: note -> page, p50", f"{p50:.1f} ms", "< 100 ms", _verdict(p50 < 100)),
    ]


BENCHES: dict[str, tuple[Callable[[str], list[Row]], list[str]]] = {
    "startup": (parse_startup, ["--runs", "10"]),
    "hooks": (parse_hooks, ["--runs", "15"]),
    "spawn": (parse_spawn, ["--runs", "2"]),
    "clone": (parse_clone, ["--runs", "3"]),
    "wake": (parse_wake, ["--notes", "5"]),
    "completion": (parse_completion, ["--runs", "10"]),
    "agents500": (parse_agents500, ["--runs", "5"]),
    "mcp": (parse_mcp, ["--runs", "3"]),
    "beads": (parse_beads, ["--spawn", "2"]),
    "foresight": (parse_foresight, ["--runs", "5"]),
    "merge_queue": (parse_merge_queue, []),
    "checkpoints": (parse_checkpoints, ["--runs", "5"]),
    "hosts": (parse_hosts, ["--runs", "5"]),
    "broker": (parse_broker, ["--runs", "7", "--notes", "5"]),
    "ui": (parse_ui, ["--runs", "3", "--notes", "5"]),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer runs per bench (a smoke check, noisier)")
    parser.add_argument("--only", default="", help="comma-separated bench names (default: all)")
    args = parser.parse_args()
    chosen = [n for n in (args.only.split(",") if args.only else BENCHES) if n]
    unknown = [n for n in chosen if n not in BENCHES]
    if unknown:
        parser.error(f"unknown bench: {', '.join(unknown)} (known: {', '.join(BENCHES)})")
    rows: list[Row] = []
    loads: list[str] = []  # the 1-minute load average around each bench, one per row
    for name in chosen:
        parse, quick_args = BENCHES[name]
        argv = [sys.executable, str(HERE / f"{name}.py"), *(quick_args if args.quick else [])]
        print(f"== {name}: {' '.join(argv[1:])}", flush=True)
        t0, load0 = time.perf_counter(), os.getloadavg()[0]
        proc = subprocess.run(argv, cwd=HERE.parent, capture_output=True, text=True)
        load = f"{load0:.1f}..{os.getloadavg()[0]:.1f}"
        print(proc.stdout + proc.stderr, end="", flush=True)
        print(f"   ({time.perf_counter() - t0:.0f} s, load average {load})", flush=True)
        try:
            if proc.returncode != 0:
                raise ValueError(f"exit {proc.returncode}")
            got = parse(proc.stdout)
        except ValueError as exc:
            got = [(name, f"error: {exc}", "-", "gap")]
        rows += got
        loads += [load] * len(got)
    head = ("bench", "figure", "budget", "ok/gap", "load (1 min)")
    table = [(*row, load) for row, load in zip(rows, loads, strict=True)]
    widths = [max(len(r[i]) for r in [head, *table]) for i in range(len(head))]
    print()
    print(f"on {os.cpu_count()} CPUs; a ratio holds only when it holds across repeated runs (see bench/README.md)")
    for row in [head, tuple("-" * w for w in widths), *table]:
        print("| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
