"""``exo ui`` in Debian's Chromium (Playwright): how fast the page follows the team (docs/ui.md).

1. note -> page: an agent sends a note through the real operation (the durable row, then the
   team doorbell); the server takes a board snapshot and pushes it over SSE; the page paints it.
   Latency = the moment a MutationObserver in the page sees the note's text minus the moment
   before the operation was called (both ``Date.now()`` / ``time.time()`` on this machine).
   Goal: p50 < 100 ms.
The server is ``exo ui --no-open``, a process of its own, as a user runs it.

2. 100 agents painted: a fresh navigation to the team page of 100 recorded agents; the figure is
   the page's own ``performance.now()`` (from navigation start) when the table was filled from
   the first snapshot. Goal: median of 5 runs < 300 ms.

    python bench/ui.py [--agents 100] [--notes 20] [--runs 5] [--store sqlite|postgres]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
import _common  # noqa: E402, F401 - cleans this process's environment (what the user's shell carries) on import

OBSERVE = """marker => { window.__seen = new Promise(resolve => {
  const seen = () => document.getElementById('main').textContent.includes(marker);
  if (seen()) { resolve(Date.now()); return; }
  const o = new MutationObserver(() => { if (seen()) { o.disconnect(); resolve(Date.now()); } });
  o.observe(document.getElementById('main'), {childList: true, subtree: true, characterData: true});
}); }"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--agents", type=int, default=100)
    ap.add_argument("--notes", type=int, default=20)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite")
    args = ap.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sys.exit("Playwright is missing: pip install -e '.[ui-test]'")
    if chromium is None:
        sys.exit("Chromium is missing: apt-get install chromium")

    from exo_cli.env import Env
    from exo_cli.records import Agent
    from exo_cli.registry import invoke

    work = Path(tempfile.mkdtemp(prefix="exo-bench-ui-", dir="/tmp"))
    cluster = None
    server: subprocess.Popen[str] | None = None
    try:
        repo = work / "repo"
        repo.mkdir()
        for cmd in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "init"]):
            subprocess.run(["git", *cmd], cwd=repo, check=True)
        if args.store == "postgres":
            sys.path.insert(0, str(ROOT / "tests"))
            from pg_cluster import Cluster, pg_bin

            bindir = pg_bin()
            if bindir is None:
                sys.exit("PostgreSQL is not installed (no initdb)")
            cluster = Cluster(bindir).start()
            os.environ["EXO_STORE_URL"] = cluster.url()
        environ = {**os.environ, "EXO_STATE_DIR": str(repo / ".git" / "exo"), "PYTHONPATH": str(ROOT)}
        human = Env(cwd=repo, environ=environ)
        now = time.time()
        for i in range(args.agents):
            human.store.insert_agent(Agent(id=f"a{i}", name=f"agent {i}", role="dev", parent="root", status="working",
                                           backend="demo", mux="headless", task=f"task {i}", created_at=now,
                                           updated_at=now, status_at=now))
        from exo_cli.env import PROOF_FIELD, new_proof

        proof, digest = new_proof()
        human.store.update_agent("a0", spec={PROOF_FIELD: digest})
        writer = Env(cwd=repo, environ={**environ, "EXO_AGENT": "a0", "EXO_AGENT_PROOF": proof})
        server = subprocess.Popen([sys.executable, "-m", "exo_cli", "ui", "--no-open"], cwd=repo, env=environ,
                                  stdout=subprocess.PIPE, text=True)
        url = (server.stdout.readline() if server.stdout else "").split()[-1]
        base = url.split("/?")[0]
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(url)
            paints = []
            for run in range(args.runs + 1):  # the first, to warm Chromium's caches up, is not counted
                page.goto(base + "/#/team")
                page.reload()
                page.wait_for_function(f"() => document.querySelectorAll('#team tbody tr').length === {args.agents}",
                                       timeout=60_000)
                if run:
                    paints.append(float(page.evaluate("document.body.dataset.painted")))
            lat = []
            page.goto(base + "/#/team")
            page.wait_for_function("() => document.querySelectorAll('#team tbody tr').length > 0", timeout=60_000)
            for i in range(args.notes):
                marker = f"bench-note-{i}-{time.time_ns()}"
                page.evaluate(OBSERVE, marker)
                t0 = time.time() * 1000
                invoke("note", writer, message=marker)
                lat.append(float(page.evaluate("window.__seen")) - t0)
            browser.close()
    finally:
        if server is not None:  # before the cluster: the server's store goes with it
            server.send_signal(signal.SIGINT)
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(work, ignore_errors=True)
    lat.sort()
    print(f"store: {args.store}")
    print(f"{args.agents} agents painted from navigation start ({args.runs} runs): median {statistics.median(paints):.1f} ms"
          f"  (runs: {', '.join(f'{x:.0f}' for x in paints)})")
    print(f"note -> page latency ({args.notes} notes): p50 {statistics.median(lat):.1f} ms  "
          f"max {lat[-1]:.1f} ms")


if __name__ == "__main__":
    main()
