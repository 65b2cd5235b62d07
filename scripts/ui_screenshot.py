"""Take the screenshots of docs/ui.md: `exo ui` in Debian's Chromium, on a small scratch team.

The team is made the way the tests make theirs: a scratch repository, agent records, a
branch with a commit and a pull request filed by its agent, a note and a question sent through
the operations. Nothing is faked on the page: it is the real server and the real page.

    python scripts/ui_screenshot.py [--out docs]      # needs chromium and the ui-test extra
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
import _common  # noqa: E402, F401 - a clean environment, as the benchmarks have


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs")
    args = ap.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("Chromium is missing: apt-get install chromium")
    from playwright.sync_api import expect, sync_playwright

    from exo_cli.env import PROOF_FIELD, Env, new_proof
    from exo_cli.records import Agent
    from exo_cli.registry import invoke
    from exo_cli.web.server import start

    work = Path(tempfile.mkdtemp(prefix="exo-shot-", dir="/tmp"))
    try:
        repo = work / "shop"
        repo.mkdir()
        git(repo, "init", "-q", "-b", "main")
        (repo / "README.md").write_text("# shop\n")
        git(repo, "add", ".")
        git(repo, "commit", "-q", "-m", "initial")
        environ = {**os.environ, "EXO_STATE_DIR": str(repo / ".git" / "exo")}
        human = Env(cwd=repo, environ=environ)
        now = time.time()
        proofs: dict[str, str] = {}
        team = [("api", "Add the /orders endpoint", "working", 14, 96, 182_000),
                ("ui", "Orders page in the web client", "idle", 9, 51, 97_000),
                ("docs", "Document the orders API", "working", 4, 18, 31_000),
                ("tests", "Property tests for order totals", "asking", 6, 40, 64_000)]
        for name, task, status, turns, tools, tokens in team:
            wt = work / f"wt-{name}"
            git(repo, "worktree", "add", "-q", "-b", f"main.{name}", str(wt), "main")
            proof, digest = new_proof()
            proofs[name] = proof
            human.store.insert_agent(Agent(
                id=name, name=name, role="dev", parent="root", status=status, backend="claude", mux="headless",
                task=task, branch=f"main.{name}", base_branch="main", worktree=str(wt), repo=str(repo),
                created_at=now - 3600, updated_at=now, status_at=now, spec={PROOF_FIELD: digest},
                turns=turns, tool_calls=tools, tokens=tokens))

        def as_agent(name: str) -> Env:
            return Env(cwd=work / f"wt-{name}", environ={**environ, "EXO_AGENT": name, "EXO_AGENT_PROOF": proofs[name]})

        wt = work / "wt-api"
        (wt / "orders.py").write_text('def orders(request):\n    """List the orders of the user."""\n'
                                      '    return [o.to_json() for o in request.user.orders]\n')
        git(wt, "add", ".")
        git(wt, "commit", "-q", "-m", "api: /orders")
        invoke("pr_file", as_agent("api"), title="Add the /orders endpoint", body="Lists the user's orders.")
        invoke("note", as_agent("ui"), message="Orders page done; waiting for the API to land.")
        invoke("note", as_agent("docs"), message="Drafted docs/orders.md <script>alert(1)</script>")
        threading.Thread(target=lambda: invoke("question", as_agent("tests"), timeout=60,
                                               message="Should totals round half-even or half-up?"),
                         daemon=True).start()
        running = start(Env(cwd=repo, environ=environ), fallback=3600)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1280, "height": 560})
            page.goto(running.url)
            expect(page.locator("#inbox-count")).to_have_text("(1)", timeout=30_000)
            page.screenshot(path=str(args.out / "ui-team.png"))
            page.goto(running.base + "/#/agent/api")
            expect(page.locator("#diff .code")).to_contain_text("orders", timeout=30_000)
            page.set_viewport_size({"width": 1280, "height": 900})
            page.screenshot(path=str(args.out / "ui-agent.png"))
            browser.close()
        invoke("answer", Env(cwd=repo, environ=environ), agent="tests", message="half-even")
        running.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"wrote {args.out / 'ui-team.png'} and {args.out / 'ui-agent.png'}")


if __name__ == "__main__":
    main()
