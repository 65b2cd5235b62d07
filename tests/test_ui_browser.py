"""``exo ui`` in a real browser: Debian's Chromium driven by Playwright (the ``ui-test`` extra).

One browser for the module; one team per test, real (worktrees, a headless agent, a PR filed
by the agent, its question asked through the operation). Skipped, with the reason, when
Playwright or Chromium is missing: Playwright's own browser download is never used.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pr_helpers import env_for, git
from ui_helpers import HOSTILE, HOSTILE_FILE, ask, team

from conftest import stop_repo_agents, wait_for
from exo_cli import registry
from exo_cli.web.server import Running, start

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
try:
    import playwright.sync_api as playwright
except ImportError:  # pragma: no cover - depends on the machine
    playwright = None
MISSING = ("the ui-test extra (Playwright) is not installed: pip install -e '.[test,ui-test]'" if playwright is None
           else "Chromium is not installed (apt-get install chromium)" if CHROMIUM is None else "")
if MISSING and os.environ.get("CI"):  # .ci/run installs both: missing there is a broken CI, not a skip
    pytest.fail(MISSING + "; .ci/run installs it", pytrace=False)
pytestmark = pytest.mark.skipif(bool(MISSING), reason=MISSING)
TIMEOUT = 60_000  # ms: generous, a loaded 2-core machine
if playwright is not None:
    playwright.expect.set_options(timeout=TIMEOUT)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def served(repo: Path) -> Iterator[tuple[Path, Running]]:
    env_for(repo).store.agents()
    running = start(env_for(repo), fallback=3600, pane_every=0.2)
    yield repo, running
    running.stop()
    stop_repo_agents(repo, tmux=False)


def new_page(browser: Any, running: Running) -> Any:
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.set_default_timeout(TIMEOUT)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.errors = errors
    page.goto(running.url)
    playwright.expect(page.locator("#conn")).to_have_text("live")
    return page


def test_refused_without_the_token_or_after_it_was_used(browser: Any, served: tuple[Path, Running]) -> None:
    _, running = served
    page = browser.new_page()
    assert page.goto(running.base + "/").status == 403
    assert "Refused" in page.content()
    assert page.goto(running.base + "/?token=nope").status == 403
    page.goto(running.url)
    assert page.url == running.base + "/"  # the token left the address bar
    other = browser.new_context().new_page()  # another browser profile with the same (used) link
    assert other.goto(running.url).status == 403
    # the page's own fetch without its header token (a forged request from the signed-in browser) is refused
    status = page.evaluate("""async () => (await fetch('/api/act/send', {method: 'POST',
        headers: {'Content-Type': 'application/json'}, body: JSON.stringify({to: ['w1'], message: 'x'})})).status""")
    assert status == 403
    other.close()
    page.close()


def test_team_live_note_answer_merge_and_hostile_text(browser: Any, served: tuple[Path, Running]) -> None:
    repo, running = served
    made = team(repo)
    page = new_page(browser, running)
    expect = playwright.expect
    rows = page.locator("#team tbody tr")
    expect(rows).to_have_count(2)
    # hostile texts are text: the name, the task, shown literally; nothing ran
    w3 = page.locator('tr[data-agent="w3"]')
    expect(w3).to_contain_text("<script>window.__pwned=1</script>")
    expect(w3).to_contain_text("<U+202E>evil<U+202C>")
    expect(w3).to_contain_text("^[[31mred^G")
    assert page.locator("main script, main img, main b").count() == 0
    # live: a note from an agent reaches the open page (the doorbell, then SSE)
    registry.invoke("note", env_for(repo, "w1"), message="note from w1 " + HOSTILE)
    expect(page.locator('tr[data-agent="w1"]')).to_contain_text("note from w1 <script>")
    # answer a question from the inbox
    out: dict[str, Any] = {}
    t = ask(repo, "w1", "Which port? " + HOSTILE, out)
    expect(page.locator("#inbox-count")).to_have_text("(1)")
    expect(rows.first).to_have_attribute("data-agent", "w1")  # the agent asking you comes first
    page.click("#nav-inbox")
    item = page.locator(".item.pending")
    expect(item).to_contain_text("Which port? <script>")
    item.locator("button.answer").click()
    page.fill("#answer-text", "8080")
    page.click("#answer-box button")
    t.join(60)
    assert getattr(out.get("answer"), "answer", None) == "8080"
    expect(page.locator(".item.pending")).to_have_count(0)
    # send from the inbox: the message reaches w1 through the operation
    page.select_option("#send-to", "w1")
    page.fill("#send-text", "from the page " + HOSTILE)
    page.click("#send-box button")
    expect(page.locator("#flash")).to_have_text("send: done")
    sent = [m for m in env_for(repo).store.messages(recipient="w1") if m.body.startswith("from the page")]
    assert sent and sent[0].body == "from the page " + HOSTILE  # the operation got the exact text
    # the pull requests and the conflicts foreseen (none here)
    page.click("#nav-prs")
    expect(page.locator('#prs tr[data-pr="1"]')).to_contain_text("PR <script>")
    expect(page.locator("#queue")).to_have_text("The merge queue is empty.")  # no merge gates here
    page.click("#nav-conflicts")
    expect(page.locator("#conflicts")).to_have_text("No conflict foreseen.")
    # the agent page: its pane (the headless log) and its diff, hostile lines as text
    page.goto(running.base + "/#/agent/w1")
    expect(page.locator("#pane")).to_contain_text("<script>window.__pwned=1</script>")
    expect(page.locator("#diff")).to_contain_text(HOSTILE_FILE)
    expect(page.locator("#diff .code")).to_contain_text("+<script>window.__pwned=1</script>")
    assert page.locator("#diff .code .gi").count() >= 1  # highlighted by Pygments, on the server
    # merge the PR from its page: asks first
    number = made["pr"].pr.number
    page.goto(running.base + f"/#/pr/{number}")
    expect(page.locator("#pr h2")).to_contain_text("PR <script>")
    asked: list[str] = []

    def dialog(d: Any) -> None:
        asked.append(d.message)
        d.accept()

    page.on("dialog", dialog)
    page.click("#pr button.merge")
    expect(page.locator("#pr-state")).to_have_text("merged")
    assert asked and f"Merge PR #{number}" in asked[0]
    assert HOSTILE_FILE in git(repo, "ls-tree", "-r", "--name-only", "main")
    # a field a later version adds to an agent's row (a cost, a sandbox) gets a column, its value as text
    page.goto(running.base + "/#/team")
    expect(rows).to_have_count(2)
    page.evaluate("""hostile => { board.rows[0].agent.cost_usd = 1.25; board.rows[1].agent.sandbox = {kind: hostile};
                                  onBoard(); }""", HOSTILE)
    expect(page.locator("#team thead")).to_contain_text("cost usd")
    expect(page.locator("#team thead")).to_contain_text("sandbox")
    assert "layout" not in page.locator("#team thead").inner_text()  # known fields: shown in their own cells
    assert "sandboxed" not in page.locator("#team thead").inner_text()
    expect(page.locator("#team tbody")).to_contain_text('{"kind":"<script>window.__pwned=1</script><img')
    assert page.locator("main script, main img, main b").count() == 0
    # a hidden tab gives its stream back (a browser holds at most 6 connections to one server), and takes one
    # again when shown; the server forgets the page
    visible = "v => { Object.defineProperty(document, 'hidden', {value: !v, configurable: true}); " \
              "document.dispatchEvent(new Event('visibilitychange')); }"
    page.evaluate(visible, False)
    expect(page.locator("#conn")).to_have_text("paused")
    wait_for(lambda: not running.hub.pages, what="the server to forget the hidden page")
    page.evaluate(visible, True)
    expect(page.locator("#conn")).to_have_text("live")
    assert page.evaluate("window.__pwned") is None
    assert page.errors == []
    page.close()


def test_merge_through_the_queue_and_a_hostile_gate_log(browser: Any, repo: Path) -> None:
    """With merge gates, Merge enqueues (the page says where the PR stands); the gate fails with hostile output,
    and the queue on the page shows the bounce and its log as text."""
    import json

    from exo_cli.adapters.git import add_exclude
    from exo_cli.ops.queuerun import advance

    add_exclude(repo / ".git", "/.exo/")
    (repo / ".exo").mkdir(exist_ok=True)
    gate = "printf '%s\\n' " + json.dumps(HOSTILE) + "; exit 3"
    (repo / ".exo" / "config.toml").write_text(f"[merge]\nwindow = 0\n[[merge.gates]]\ncommand = {json.dumps(gate)}\n")
    env = env_for(repo)
    env.store.agents()
    env.queue_runner = lambda *_: True  # type: ignore[attr-defined]  # the test advances the queue itself
    made = team(repo)
    running = start(env, fallback=3600, pane_every=3600)
    try:
        page = new_page(browser, running)
        number = made["pr"].pr.number
        page.goto(running.base + f"/#/pr/{number}")
        page.on("dialog", lambda d: d.accept())
        page.click("#pr button.merge")
        playwright.expect(page.locator("#flash")).to_contain_text(f"PR #{number} queued, position 1")
        page.click("#nav-prs")
        playwright.expect(page.locator(f'#queue tr[data-queue="{number}"]')).to_contain_text("queued")
        assert advance(env_for(repo), "main") == 0  # the gate fails: nothing lands
        row = page.locator(f'#queue tr[data-queue="{number}"]')
        playwright.expect(row).to_contain_text("bounced")  # the bounce told w1: the board moved, the page followed
        row.locator("button").click()
        playwright.expect(page.locator("#queue pre").first).to_contain_text("<script>window.__pwned=1</script>")
        assert page.locator("main script, main img, main b").count() == 0
        assert page.evaluate("window.__pwned") is None and page.errors == []
        page.close()
    finally:
        running.stop()
        stop_repo_agents(repo, tmux=False)
