"""The team broker (issue 28): relays against the direct path, one SDK per team.

A scratch repository with N live agents (custom ``sleep 3600`` agents started by ``exo spawn
--mux headless``: each has its own socket to the repository's broker). Measured in one run,
interleaved with their baselines:

1. an agent's ``exo mcp`` (the relay) from process start to its first ``tools/list`` answer,
   against ``python -c "import mcp.server.lowlevel"`` (the SDK's own import): at most 0.35x;
2. 30 agents' ``exo mcp`` relays open at once: (RSS of the broker + every relay) / 30, at most
   20 MiB, and how many of those processes hold the MCP SDK (its ``pydantic_core`` library
   mapped): exactly one, the broker; then the same with the keeper a sandboxed pane agent has
   beside it (30 real keepers, started by the real shell launcher as a tmux pane starts it);
3. ``exo hook stop --cli claude`` (a real Stop payload, nothing pending) through the relay, against
   ``python -c pass``: at most 1.5x. Each run starts once the work the previous stop left behind
   (its due checkpoint, its conflict check: in the broker or a helper process) is done, since this
   measures one hook, not its contention with its own previous run; the back-to-back figure is
   printed too;
4. 20 agents' hooks at once, through their relays and (the same agents, without ``EXO_SOCKET``) on
   the direct path: p99 through the relays at most 2x the direct path's;
5. note -> wake: 20 agents post notes through their relays while the human waits (the real
   ``wait``); latency from the send (CLOCK_MONOTONIC) to the moment ``wait`` returned it: p50
   under 20 ms, nothing lost or duplicated.

    python bench/broker.py [--runs 15] [--agents 30]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    ROOT,
    bench_env,
    exo_argv,
    median_ms,
    precompile,
    run_timed,
    scratch_repo,
    time_commands,
    write_trusted,
)

sys.path.insert(0, str(ROOT))

HANDSHAKE = [
    {"jsonrpc": "2.0", "id": 1, "method": "initialize",
     "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}},
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
]
STOP = json.dumps({"session_id": "bench", "hook_event_name": "Stop", "stop_hook_active": False,
                   "last_assistant_message": "done"})
WRITER = r"""
import os, random, sys, time
from exo_cli.env import Env
from exo_cli.registry import get, invoke
from exo_cli import relay, wire
n, go = int(sys.argv[1]), sys.argv[2]
env = Env()
get("note").result_type()  # warmed up as wake.py's writers are: modules loaded, the socket reached once
relay.whoami(env.environ)
while not os.path.exists(go):
    time.sleep(0.005)
for i in range(n):
    time.sleep(random.uniform(0.05, 0.25))
    invoke("note", env, message=f"{os.environ['EXO_AGENT']}:{i}:{time.monotonic()!r}")
"""


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))] * 1000


def agent_environ(repo: Path, name: str) -> dict[str, str]:
    """The environment exo gave agent ``name`` (read from its process, as a CLI would pass it on)."""
    from exo_cli.env import Env

    record = Env(cwd=repo).store.agent(name)
    assert record is not None
    pid = int(record.location["pid"])
    todo = [pid]
    while todo:
        p = todo.pop(0)
        try:
            raw = Path(f"/proc/{p}/environ").read_bytes()
        except OSError:
            raw = b""
        env = dict(x.decode().split("=", 1) for x in raw.split(b"\0") if b"=" in x)
        if "EXO_SOCKET" in env:
            return env
        try:
            todo += [int(c) for c in Path(f"/proc/{p}/task/{p}/children").read_text().split()]
        except OSError:
            pass
    raise RuntimeError(f"no process of {name} carries EXO_SOCKET")


def open_relay(argv: Sequence[str], cwd: Path, env: dict[str, str]) -> tuple[subprocess.Popen[str], float]:
    """Start ``exo mcp`` (a relay), handshake; (the live process, seconds to its tools/list answer)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([*argv, "mcp"], cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("".join(json.dumps(m) + "\n" for m in HANDSHAKE))
    proc.stdin.flush()
    while True:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError("the relay exited before answering tools/list")
        if json.loads(line).get("id") == 2:
            return proc, time.perf_counter() - t0


def close(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None
    proc.stdin.close()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def holds_sdk(pid: int) -> bool:
    """Whether the process has the MCP SDK loaded (its pydantic_core library mapped)."""
    try:
        return "_pydantic_core" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def keepers(repo: Path, count: int) -> dict[int, subprocess.Popen[bytes]]:
    """``count`` keepers as a sandboxed tmux agent has one: the real shell launcher (run as tmux runs a pane's
    command) starts each beside its "agent" (``sleep``); {keeper pid: its pane}, once every keeper waits."""
    from exo_cli.adapters.mux import _launch
    from exo_cli.adapters.mux.base import deliver_spec, keeper_line, make_fifo
    from exo_cli.env import Env
    from exo_cli.ops import broker as ops

    programs = _launch.shell_programs()
    if programs is None:
        raise RuntimeError("the shell launcher needs dash and env")
    env = Env(cwd=repo)
    line = keeper_line({**ops.keeper(env), "log": ""})
    out: dict[int, subprocess.Popen[bytes]] = {}
    with tempfile.TemporaryDirectory() as td:
        for i in range(count):
            fifo = make_fifo(Path(td) / f"f{i}")
            pane = subprocess.Popen(_launch.sh_argv(str(fifo), [], programs), start_new_session=True)
            spec = {"argv": ["sleep", "3600"], "env": {"PATH": os.environ["PATH"]}, "cwd": "/", "keep": [],
                    "keeper": line}
            payload = _launch.encode_sh(spec)
            assert payload is not None
            deliver_spec(fifo, payload)
            out[pane.pid] = pane
    found: dict[int, subprocess.Popen[bytes]] = {}
    deadline = time.monotonic() + 60
    while len(found) < count and time.monotonic() < deadline:
        for name in os.listdir("/proc"):
            try:
                argv = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
                sid = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[3]
            except (OSError, IndexError):
                continue
            mark = b"exo-keeper" if b"exo-keeper" in argv else b"--keep"  # its shell waiter, or Python's
            if mark in argv and sid == name:  # up, and out of its pane's session
                pane_pid = int(argv[argv.index(mark) + 1])
                if pane_pid in out:
                    found[int(name)] = out[pane_pid]
        time.sleep(0.1)
    time.sleep(2.0)  # settled: waiting on the broker's life lock
    return found


def tree_rss_kib(pid: int) -> int:
    """RSS of ``pid`` and its children (a keeper's shell waiter and its ``flock``)."""
    try:
        children = [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        children = []
    return rss_kib(pid) + sum(tree_rss_kib(c) for c in children)


def hooks_at_once(argv: Sequence[str], envs: list[dict[str, str]], cwd: Path) -> list[float]:
    """Start one ``exo hook stop`` per environment at the same moment; each one's wall seconds."""
    starts, procs = [], []
    for env in envs:
        starts.append(time.perf_counter())
        p = subprocess.Popen([*argv, "hook", "stop", "--cli", "claude"], cwd=cwd, env=env, stdin=subprocess.PIPE,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        assert p.stdin is not None
        p.stdin.write(STOP.encode())
        p.stdin.close()
        procs.append(p)
    out = []
    for t0, p in zip(starts, procs, strict=True):
        p.wait()
        out.append(time.perf_counter() - t0)
    return out


def settle(repo: Path, timeout: float = 60.0, pause: float = 0.2) -> None:
    """Wait until the work stop hooks left for later is done: their due checkpoints and conflict checks (jobs of the
    broker's, ``ping``'s ``later``, or helper processes ``exo checkpoint --due`` / ``exo conflicts --check``)."""
    from exo_cli import __version__
    from exo_cli.adapters import broker as adapter
    from exo_cli.env import Env
    from exo_cli.ops import broker as ops

    paths = ops.paths(Env(cwd=repo))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        busy = bool((adapter.ping(paths, __version__) or {}).get("later"))
        for name in os.listdir("/proc") if not busy else ():
            if not name.isdigit():
                continue
            try:
                argv = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if str(repo).encode() in argv and ((b"conflicts" in argv and b"--check" in argv)
                                               or (b"checkpoint" in argv and b"--due" in argv)):
                busy = True
                break
        if not busy:
            return
        time.sleep(pause)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--agents", type=int, default=30)
    parser.add_argument("--notes", type=int, default=10, help="notes per writer in the wake phase")
    args = parser.parse_args()
    precompile()
    env = bench_env()
    exo = exo_argv()
    verdicts: list[bool] = []
    with tempfile.TemporaryDirectory(prefix="exo-bench-") as td:
        tmp = Path(td)
        repo = scratch_repo(tmp, env)
        write_trusted(repo, '[agent]\ncommand = ["sleep", "3600"]\n', env)
        names = [f"w{i}" for i in range(args.agents)]
        try:
            for start in range(0, len(names), 10):
                batch = [a for n in names[start:start + 10] for a in ("--worker", n)]
                subprocess.run([*exo, "spawn", *batch, "--prompt", "x", "--agent", "custom", "--mux", "headless",
                                "--json"], cwd=repo, env=env, check=True, capture_output=True)
            agents = {n: {**env, **agent_environ(repo, n)} for n in names}
            wt = Path(json.loads(subprocess.run([*exo, "agents", "--json"], cwd=repo, env=env, check=True,
                                                capture_output=True, text=True).stdout)["agents"][0]["worktree"])
            verdicts += measure(args, repo, wt, env, exo, agents)
        finally:
            subprocess.run([*exo, "broker", "stop"], cwd=repo, env=env, capture_output=True)
            from exo_cli.adapters.proc import kill_group
            from exo_cli.env import Env

            for a in Env(cwd=repo).store.agents():
                if a.location.get("pgid"):
                    kill_group(a.location["pgid"], grace=1.0)
            subprocess.run([*exo, "broker", "stop"], cwd=repo, env=env, capture_output=True)
    print("broker: " + ("ok" if all(verdicts) else "GAP"))
    return 0 if all(verdicts) else 1


def measure(args: argparse.Namespace, repo: Path, wt: Path, env: dict[str, str], exo: list[str],
            agents: dict[str, dict[str, str]]) -> list[bool]:
    verdicts = []
    w0 = agents["w0"]
    # 1. the relay's first tools/list vs the SDK's import
    relay_s, sdk_s = [], []
    open_relay(exo, wt, w0)[0].stdin.close()  # warm-up: the broker holds the SDK from then on
    for _ in range(args.runs):
        proc, seconds = open_relay(exo, wt, w0)
        close(proc)
        relay_s.append(seconds)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import mcp.server.lowlevel"], env=env, check=True)
        sdk_s.append(time.perf_counter() - t0)
    ratio = statistics.median(relay_s) / statistics.median(sdk_s)
    print(f"relay exo mcp -> tools/list: {median_ms(relay_s):.0f} ms; import mcp.server.lowlevel: "
          f"{median_ms(sdk_s):.0f} ms; ratio {ratio:.2f}x (budget 0.35x)")
    verdicts.append(ratio <= 0.35)
    # 2. 30 relays open at once: memory per agent, SDK holders
    relays = []
    try:
        for name in list(agents)[:30]:
            relays.append(open_relay(exo, wt, agents[name])[0])
        from exo_cli import __version__
        from exo_cli.adapters import broker as adapter
        from exo_cli.env import Env
        from exo_cli.ops import broker as ops

        info = adapter.ping(ops.paths(Env(cwd=repo)), __version__)
        assert info is not None
        pids = [int(info["pid"]), *(p.pid for p in relays)]
        total = sum(rss_kib(p) for p in pids)
        holders = [p for p in pids if holds_sdk(p)]
        per = total / 1024 / len(relays)
        print(f"{len(relays)} relays + broker: {total / 1024:.0f} MiB RSS, {per:.1f} MiB per agent (budget 20); "
              f"broker {rss_kib(pids[0]) / 1024:.0f} MiB; processes holding the SDK: {len(holders)} "
              f"({'the broker' if holders == [pids[0]] else holders})")
        verdicts.append(per <= 20 and holders == [pids[0]])
        kept = keepers(repo, len(relays))
        try:
            keep_kib = [tree_rss_kib(k) for k in kept]
            with_keepers = (total + sum(keep_kib)) / 1024 / len(relays)
            print(f"... with a sandboxed pane agent's keeper beside each: {len(kept)} keepers, "
                  f"{statistics.median(keep_kib) / 1024:.1f} MiB RSS each, {with_keepers:.1f} MiB per agent (budget 20)")
            verdicts.append(len(kept) == len(relays) and with_keepers <= 20)
        finally:
            for pane in kept.values():
                pane.kill()
                pane.wait()
    finally:
        for p in relays:
            close(p)
    # 3. one hook through the relay vs python -c pass: back to back (as before), then each on a settled machine
    settle(repo)
    hook = [*exo, "hook", "stop", "--cli", "claude"]
    times = time_commands({"relay": hook, "pass": [sys.executable, "-c", "pass"]},
                          runs=args.runs, cwd=wt, env=w0, stdin={"relay": STOP})
    packed = statistics.median(times["relay"]) / statistics.median(times["pass"])
    settled: dict[str, list[float]] = {"relay": [], "pass": []}
    for _ in range(args.runs):
        for name, argv, text in (("relay", hook, STOP), ("pass", [sys.executable, "-c", "pass"], None)):
            settle(repo, pause=0.02)
            settled[name].append(run_timed(argv, cwd=wt, env=w0, stdin=text)[0])
    ratio = statistics.median(settled["relay"]) / statistics.median(settled["pass"])
    print(f"exo hook stop through the relay: {median_ms(settled['relay']):.0f} ms; python -c pass: "
          f"{median_ms(settled['pass']):.0f} ms; ratio {ratio:.2f}x (budget 1.5x); back to back, competing with "
          f"the work each previous stop left: {median_ms(times['relay']):.0f} ms vs {median_ms(times['pass']):.0f} ms, "
          f"{packed:.2f}x")
    verdicts.append(ratio <= 1.5)
    # 4. 20 agents' hooks at once: relays vs the direct path
    twenty = list(agents.values())[:20]
    direct = [{k: v for k, v in e.items() if k != "EXO_SOCKET"} for e in twenty]
    relayed_t: list[float] = []
    direct_t: list[float] = []
    hooks_at_once(exo, twenty, wt)  # warm-up, both ways: each agent's first stop hook starts a conflict check
    hooks_at_once(exo, direct, wt)
    settle(repo)
    for _ in range(max(3, args.runs // 3)):
        relayed_t += hooks_at_once(exo, twenty, wt)
        direct_t += hooks_at_once(exo, direct, wt)
    ratio = pct(relayed_t, 99) / pct(direct_t, 99)
    print(f"20 hooks at once: p99 {pct(relayed_t, 99):.0f} ms through the relays, {pct(direct_t, 99):.0f} ms "
          f"direct; ratio {ratio:.2f}x (budget 2x)")
    verdicts.append(ratio <= 2.0)
    # 5. note -> wake through the relays
    verdicts.append(wake(args, repo, list(agents.values())[:20]))
    return verdicts


def wake(args: argparse.Namespace, repo: Path, writers_env: list[dict[str, str]]) -> bool:
    from exo_cli.env import Env
    from exo_cli.ops import messages

    parent = Env(cwd=repo)
    messages.wait(parent, timeout=0, max_messages=500)  # what spawn posted
    with tempfile.TemporaryDirectory() as td:
        go = Path(td) / "go"
        writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(args.notes), str(go)], cwd=repo, env=e)
                   for e in writers_env]
        time.sleep(2.0)
        expected = len(writers) * args.notes
        latencies: list[float] = []
        seen: list[str] = []
        go.touch()
        while len(seen) < expected:
            res = messages.wait(parent, timeout=20, max_messages=500)
            if not res.results:
                break
            t = time.monotonic()
            for entry in res.results:
                if entry.kind != "note":
                    continue
                who, idx, sent = (entry.message or "").split(":", 2)
                seen.append(f"{who}:{idx}")
                latencies.append(t - float(sent))
        for w in writers:
            w.wait(timeout=60)
    lost, dup = expected - len(set(seen)), len(seen) - len(set(seen))
    print(f"note -> wake through the relays: p50 {pct(latencies, 50):.1f} ms, p99 {pct(latencies, 99):.1f} ms "
          f"(budget p50 < 20 ms); lost {lost}, duplicated {dup}")
    return pct(latencies, 50) < 20 and lost == 0 and dup == 0


if __name__ == "__main__":
    sys.exit(main())
