"""The merge queue (issue 34): real repositories, real gates (failing, flaky, slow), a real detached runner.

Gates are shell commands run in the candidate's clone: each appends the commit it tested to a
log outside the repository, so the base's history can be replayed against what passed. A PR
that adds a file named ``BAD`` fails the gate; ``FLAKY`` makes the gate fail on its first run.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pr_helpers import commit, env_for, git, make_agent

from conftest import run_exo, wait_for, write_trusted
from exo_cli import registry
from exo_cli.errors import InvalidInput, StateError
from exo_cli.ops import mergequeue as mq
from exo_cli.ops.queuerun import advance

GATE = ('echo "$(git rev-parse HEAD) {verdict}" >> "{log}"; '
        'if [ -e FLAKY ] && [ ! -e "{log}.flaked" ]; then touch "{log}.flaked"; exit 1; fi; '
        'if [ -e BAD ]; then printf "BAD is here: failing\\033[2J\\003\\n"; exit 3; fi')


def configure(repo: Path, log: Path, *, batch: int = 4, extra: str = "") -> None:
    """The gate ``GATE`` for ``repo``; its log's folder (never one holding the repository) is the one place outside
    its clone a sandboxed gate may write ([sandbox] paths), so the tests hold whatever ``[sandbox] mode`` is."""
    gate = GATE.format(log=log, verdict="ran")
    (repo / ".exo").mkdir(exist_ok=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    (repo / ".exo" / "config.toml").write_text(
        f"[merge]\nbatch = {batch}\nwindow = 0\n{extra}\n[[merge.gates]]\ncommand = {json.dumps(gate)}\ntimeout = 60\n"
        f"[sandbox]\npaths = [{json.dumps(str(log.parent))}]\n")


@pytest.fixture
def team(repo: Path, tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    log = tmp_path / "gates" / "gates.log"
    from exo_cli.adapters.git import add_exclude

    add_exclude(repo / ".git", "/.exo/")
    configure(repo, log)
    yield repo, log


def pr_of(repo: Path, name: str, files: dict[str, str], **kw: Any) -> int:
    agent = make_agent(repo, name, **kw)
    for path, text in files.items():
        commit(agent.worktree or "", path, text)
    got = registry.invoke("pr_file", env_for(agent.worktree or "", name), title=f"{name} work")
    return int(got.pr.number)


def enqueue(repo: Path, number: int, **kw: Any) -> Any:
    env = env_for(repo)
    env.queue_runner = lambda *_: True  # type: ignore[attr-defined]  # the test advances the queue itself
    return registry.invoke("pr_merge", env, number=number, **kw)


def runs(log: Path) -> list[str]:
    return [ln.split()[0] for ln in log.read_text().splitlines()] if log.exists() else []


def passed(repo: Path) -> set[str]:
    """The commits the runner recorded as passing every gate (the queue's own gate log)."""
    env = env_for(repo)
    path = Path(mq.folder(env, "main"), "runs.log")
    text = path.read_text() if path.exists() else ""
    return {ln.split()[0] for ln in text.splitlines() if ln.split()[1] == "pass"}


def base_positions(repo: Path, since: str) -> list[str]:
    """Every commit the base was moved to after ``since`` (its reflog, newest first)."""
    moves = git(repo, "log", "-g", "--format=%H", "refs/heads/main").split()
    return moves[:moves.index(since)]


def entry(repo: Path, number: int) -> dict[str, Any]:
    pr = env_for(repo).store.pr(number)
    assert pr is not None
    return mq.entry(pr) | {"pr_state": pr.state, "merge_commit": pr.merge_commit}


def test_batch_lands_exactly_the_tested_commit(team: tuple[Path, Path]) -> None:
    repo, log = team
    start = git(repo, "rev-parse", "main")
    numbers = [pr_of(repo, f"w{i}", {f"f{i}.txt": f"{i}\n"}) for i in range(3)]
    got = [enqueue(repo, n) for n in numbers]
    assert [(g.state, g.position, g.merge_commit) for g in got] == [("queued", 1, None), ("queued", 2, None),
                                                                   ("queued", 3, None)]
    assert git(repo, "rev-parse", "main") == start  # nothing lands before the gates pass
    pin = git(repo, "rev-parse", f"refs/exo/queue/pr/{numbers[0]}")
    assert pin == git(repo, "rev-parse", "main.w0")
    assert advance(env_for(repo), "main") == 3
    assert len(runs(log)) == 1  # one batch, one gate run
    assert git(repo, "rev-parse", "main") == runs(log)[0]  # the base moved to exactly what passed
    assert base_positions(repo, start) == [git(repo, "rev-parse", "main")]
    assert git(repo, "rev-parse", "main") in passed(repo)
    for n in numbers:
        e = entry(repo, n)
        assert (e["pr_state"], e["state"]) == ("merged", "merged")
        assert git(repo, "merge-base", "--is-ancestor", e["merge_commit"], "main", check=False) == ""
    assert git(repo, "for-each-ref", "refs/exo/queue/") == ""  # pins and candidates let go once merged
    assert sorted(os.listdir(Path(mq.folder(env_for(repo), "main"), "clones"))) == []  # no clone left
    assert (repo / "f2.txt").read_text() == "2\n"  # the base's checkout fast-forwarded
    kinds = [e["kind"] for e in env_for(repo).store.events(limit=100)]
    assert kinds.count("pr-queued") == 3 and kinds.count("pr-merged") == 3


def test_red_batch_retried_then_bisected_culprit_bounced_to_its_author(team: tuple[Path, Path], tmp_path: Path) -> None:
    repo, log = team
    told = tmp_path / "notified.jsonl"
    with (repo / ".exo" / "config.toml").open("a") as f:
        f.write(f"[notify]\ncommand = {json.dumps(['sh', '-c', f'cat >> {told}; echo >> {told}'])}\n")
    start = git(repo, "rev-parse", "main")
    numbers = [pr_of(repo, f"w{i}", {f"f{i}.txt": "x\n", **({"BAD": "x\n"} if i == 2 else {})}) for i in range(4)]
    for n in numbers:
        enqueue(repo, n)
    assert advance(env_for(repo), "main") == 3
    # batch of 4 (red), its retry (red), prefix of 2 (green: lands), prefix of 3 (red: #3 is the culprit),
    # then the 4th alone on the new base
    assert len(runs(log)) == 5
    states = {n: entry(repo, n)["state"] for n in numbers}
    assert states == {numbers[0]: "merged", numbers[1]: "merged", numbers[2]: "bounced", numbers[3]: "merged"}
    bounced = entry(repo, numbers[2])
    assert bounced["pr_state"] == "open" and "BAD is here" in bounced["tail"] and Path(bounced["log"]).is_file()
    assert "^[[2J^C" in bounced["tail"] and "\x1b" not in bounced["tail"]  # a gate's output never acts on a terminal
    rows = {a.id: a.pr for a in registry.invoke("agents", env_for(repo)).agents}
    assert rows["w2"]["queue"] == "bounced" and rows["w0"]["queue"] is None and rows["w0"]["state"] == "merged"
    for sha in base_positions(repo, start):  # nothing untested was ever the base
        assert sha in passed(repo)
    assert not (repo / "BAD").exists()
    msgs = env_for(repo).store.messages(recipient="w2", kinds=["pr-bounced"])
    assert len(msgs) == 1 and "BAD is here" in msgs[0].body and msgs[0].data["pr"] == numbers[2]
    assert git(repo, "for-each-ref", f"refs/exo/queue/pr/{numbers[2]}") == ""
    def events() -> list[dict[str, Any]]:
        return [json.loads(ln) for ln in told.read_text().splitlines() if ln.strip()] if told.exists() else []

    wait_for(lambda: len([e for e in events() if e["event"] in ("pr-queued", "pr-bounced")]) >= 5,
             what="the human's notifier told of each enqueue and the bounce")
    assert [e["pr"] for e in events() if e["event"] == "pr-bounced"] == [numbers[2]]
    # fixed and merged again: it re-enters the queue and lands
    wt = env_for(repo).store.agent("w2").worktree  # type: ignore[union-attr]
    git(wt, "rm", "-q", "BAD")
    git(wt, "commit", "-q", "-m", "fix")
    assert enqueue(repo, numbers[2]).state == "queued"
    assert advance(env_for(repo), "main") == 1
    assert entry(repo, numbers[2])["pr_state"] == "merged"


def test_flaky_gate_is_retried_once_and_nobody_bounces(team: tuple[Path, Path]) -> None:
    repo, log = team
    numbers = [pr_of(repo, "w0", {"FLAKY": "1\n"}), pr_of(repo, "w1", {"g.txt": "1\n"})]
    for n in numbers:
        enqueue(repo, n)
    assert advance(env_for(repo), "main") == 2
    assert len(runs(log)) == 2 and Path(f"{log}.flaked").exists()
    assert [entry(repo, n)["state"] for n in numbers] == ["merged", "merged"]


def test_conflict_bounces_with_the_paths_and_priority_orders(team: tuple[Path, Path]) -> None:
    repo, log = team
    a = pr_of(repo, "w0", {"same.txt": "a\n"})
    b = pr_of(repo, "w1", {"same.txt": "b\n"})
    c = pr_of(repo, "w2", {"other.txt": "c\n"})
    enqueue(repo, a, priority=3)
    enqueue(repo, b)
    assert enqueue(repo, c, priority=0).position == 1  # priority 0 goes first
    view = registry.invoke("pr_queue", env_for(repo), base="main")
    assert [e.pr for e in view.entries] == [c, b, a]
    from exo_cli.render.teamboard import summary

    board = registry.invoke("board", env_for(repo))
    assert summary(board) == "exo board: 3 agent(s) · merge queue main: 3 waiting"  # queued: not "ready for you"
    assert advance(env_for(repo), "main") == 2
    e = entry(repo, a)
    assert e["state"] == "bounced" and e["files"] == ["same.txt"] and "conflicts" in e["reason"]
    # the idle author of the bounced PR conflicts with the new base: told at once, once (with its bounce)
    told = [m for m in env_for(repo).store.messages(recipient="w0") if m.data.get("event") == "conflict"]
    assert len(told) == 1 and told[0].data["paths"] == ["same.txt"]
    assert (repo / "same.txt").read_text() == "b\n"
    assert len(runs(log)) == 1  # a conflict costs no gate run


def test_dirty_base_checkout_leaves_it_tested_until_clean(team: tuple[Path, Path]) -> None:
    repo, _ = team
    n = pr_of(repo, "w0", {"f.txt": "1\n"})
    enqueue(repo, n)
    (repo / "README.md").write_text("the human's edit\n")
    t = threading.Thread(target=advance, args=(env_for(repo), "main"), daemon=True)
    t.start()
    wait_for(lambda: any("cannot land" in m.body for m in env_for(repo).store.messages(recipient="root")),
             what="the human told")
    assert entry(repo, n)["state"] == "tested"
    assert entry(repo, n)["pr_state"] == "open"
    git(repo, "checkout", "--", "README.md")
    t.join(timeout=120)
    assert not t.is_alive() and entry(repo, n)["pr_state"] == "merged" and (repo / "f.txt").exists()


def test_base_that_moved_is_rebuilt_and_retested(team: tuple[Path, Path], tmp_path: Path) -> None:
    repo, log = team
    # the gate itself moves the base the first time (as a plain merge or a human's commit would meanwhile)
    mover = tmp_path / "moved"
    gate = GATE.format(log=log, verdict="ran") + (
        f'; if [ ! -e "{mover}" ]; then touch "{mover}"; '
        f'git -C "{repo}" commit -q --allow-empty -m "meanwhile on main"; fi')
    configure(repo, log, extra="")
    (repo / ".exo" / "config.toml").write_text(  # unsandboxed: a sandboxed gate cannot move the base
        f"[sandbox]\nmode = \"off\"\n[merge]\nwindow = 0\n[[merge.gates]]\ncommand = {json.dumps(gate)}\n")
    n = pr_of(repo, "w0", {"f.txt": "1\n"})
    enqueue(repo, n)
    assert advance(env_for(repo), "main") == 1
    assert len(runs(log)) == 2  # built again on the moved base and tested again
    assert git(repo, "rev-parse", "main") == runs(log)[-1]
    assert git(repo, "log", "-1", "--format=%s", "main~1") == "meanwhile on main"


def test_now_is_the_humans_and_recorded_and_agents_are_refused(team: tuple[Path, Path]) -> None:
    repo, log = team
    configure(repo, log, extra='bases = "*"')
    lead = make_agent(repo, "lead", role="tl")
    sub = pr_of(repo, "w1", {"g.txt": "1\n"}, parent="lead", base="main.lead")
    with pytest.raises(StateError, match="Only the human"):
        registry.invoke("pr_merge", env_for(lead.worktree or "", "lead"), number=sub, now=True)
    lead_env = env_for(lead.worktree or "", "lead")
    lead_env.queue_runner = lambda *_: True  # type: ignore[attr-defined]
    assert registry.invoke("pr_merge", lead_env, number=sub).state == "queued"  # "*": worker -> lead too
    with pytest.raises(StateError, match="wait in the merge queue") as refused:
        registry.invoke("complete", env_for(repo), target="w1")
    assert refused.value.data["prs"] == [sub]
    n = pr_of(repo, "w0", {"f.txt": "1\n"})
    assert enqueue(repo, n).state == "queued"
    got = registry.invoke("pr_merge", env_for(repo), number=n, now=True)  # the human merges it around the queue
    assert got.state == "merged" and got.merge_commit and runs(log) == []
    assert entry(repo, n)["state"] == "merged" and git(repo, "for-each-ref", f"refs/exo/queue/pr/{n}") == ""
    pr = env_for(repo).store.pr(n)
    assert pr is not None and pr.data["queue_bypassed"]["by"] == "root"
    with pytest.raises(InvalidInput, match="batch"):
        (repo / ".exo" / "config.toml").write_text("[merge]\nbatch = 0\n")
        registry.invoke("pr_queue", env_for(repo))


def test_gate_logs_are_pruned_to_the_newest(repo: Path) -> None:
    from exo_cli.ops import queuerun

    env = env_for(repo)
    logs = Path(mq.folder(env, "main"), "logs")
    logs.mkdir(parents=True)
    for i in range(queuerun.KEEP_LOGS + 5):
        (logs / f"{i:06d}.log").write_text("x\n")
    queuerun.prune_logs(env, "main")
    kept = sorted(os.listdir(logs))
    assert len(kept) == queuerun.KEEP_LOGS and kept[0] == "000005.log"


def test_bad_gate_config_is_named(repo: Path, tmp_path: Path) -> None:
    (repo / "exo.toml").write_text('[[merge.gates]]\ncommand = "true"\ntimeout = -1\n')
    proc = run_exo("pr", "queue", cwd=repo)
    assert proc.returncode == 4 and "merge.gates entry 1" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("point", ["queue.cloned", "mid-gate", "queue.landing", "queue.landed"])
def test_kill_9_at_each_step_resumes_without_loss_or_double_merge(team: tuple[Path, Path], point: str,
                                                                  tmp_path: Path) -> None:
    repo, log = team
    if point == "mid-gate":  # the gate itself kills its runner, the first time, while it runs (and leaves a server)
        gate = (f'if [ ! -e "{tmp_path}/killed" ]; then touch "{tmp_path}/killed"; setsid sleep 31339 & '
                'kill -9 $PPID; sleep 1; fi; true')
        configure(repo, log, extra="")
        (repo / ".exo" / "config.toml").write_text(  # unsandboxed: a sandboxed gate cannot see its runner
            f"[sandbox]\nmode = \"off\"\n[merge]\nwindow = 0\n[[merge.gates]]\ncommand = {json.dumps(gate)}\n")
    numbers = [pr_of(repo, f"w{i}", {f"f{i}.txt": f"{i}\n"}) for i in range(2)]
    for n in numbers:
        enqueue(repo, n)
    start = git(repo, "rev-parse", "main")
    died = run_exo("pr", "queue", "--run", "--base", "main", cwd=repo,
                   env={"EXO_FAULT": point if point.startswith("queue.") else ""}, timeout=180)
    assert died.returncode in (137, -9), died.stderr  # -9: the gate killed it
    assert git(repo, "status", "--porcelain") == ""  # never a half-merged checkout
    after_kill = git(repo, "rev-parse", "main")
    assert after_kill in (start, *passed(repo))
    done = run_exo("pr", "queue", "--run", "--base", "main", "--json", cwd=repo, timeout=180)
    assert done.returncode == 0, done.stderr
    assert [entry(repo, n)["pr_state"] for n in numbers] == ["merged", "merged"]
    assert git(repo, "rev-list", "--count", f"{start}..main") == "2"  # each PR merged once
    assert (repo / "f0.txt").exists() and (repo / "f1.txt").exists()
    assert os.listdir(Path(mq.folder(env_for(repo), "main"), "clones")) == []
    merged = [e for e in env_for(repo).store.events(limit=100) if e["kind"] == "pr-merged"]
    assert len(merged) == 2
    if point == "mid-gate":  # what the dead runner's gate left running was ended by the next runner
        from test_merge_queue_sandbox import sleepers

        wait_for(lambda: not sleepers("31339"), timeout=60, what="the dead runner's gate's server ended")


def test_detached_runner_and_wait_from_the_command_line(team: tuple[Path, Path]) -> None:
    repo, log = team
    good = pr_of(repo, "w0", {"f.txt": "1\n"})
    bad = pr_of(repo, "w1", {"BAD": "1\n"})
    queued = run_exo("pr", "merge", str(good), "--json", cwd=repo, timeout=120)
    assert queued.returncode == 0, queued.stderr
    out = json.loads(queued.stdout)
    assert out["state"] in ("queued", "testing", "merged") and out["merge_commit"] in (None, out["pr"]["merge_commit"])
    waited = run_exo("pr", "merge", str(bad), "--wait", "--json", cwd=repo, timeout=300)
    assert waited.returncode == 5, waited.stderr
    assert json.loads(waited.stdout)["state"] == "bounced"
    wait_for(lambda: entry(repo, good)["pr_state"] == "merged", timeout=120, what="the detached runner landed it")
    wait_for(lambda: not mq.runner_alive(env_for(repo), "main"), timeout=60, what="the runner exits when empty")
    shown = run_exo("pr", "queue", "--json", cwd=repo)
    states = {e["pr"]: e["state"] for e in json.loads(shown.stdout)["entries"]}
    assert states == {good: "merged", bad: "bounced"}


def test_no_gates_means_plain_merge_and_queue_flags_refused(repo: Path) -> None:
    n = pr_of(repo, "w0", {"f.txt": "1\n"})
    with pytest.raises(InvalidInput, match="none serves main"):
        registry.invoke("pr_merge", env_for(repo), number=n, wait=True)
    got = registry.invoke("pr_merge", env_for(repo), number=n)
    assert got.state == "merged" and got.position is None and got.queue is None
    write_trusted(repo, '[forge]\nkind = "github"\n[[merge.gates]]\ncommand = "true"\n')
    assert mq.gates(env_for(repo), "main")  # gates apply to main; on GitHub the merge says they did not run


def test_author_with_descendants_open_prs_is_refused_unless_forced(team: tuple[Path, Path]) -> None:
    repo, _ = team
    lead_pr = pr_of(repo, "lead", {"l.txt": "1\n"}, role="tl")
    pr_of(repo, "w9", {"w.txt": "1\n"}, parent="lead", base="main.lead")  # its worker's PR into main.lead
    with pytest.raises(StateError, match="descendants with open PRs into main.lead: w9") as refused:
        enqueue(repo, lead_pr)
    assert refused.value.data["reason"] == "open-descendants" and entry(repo, lead_pr).get("state") is None
    got = enqueue(repo, lead_pr, force=True)
    assert (got.state, got.position, got.strategy) == ("queued", 1, "merge")  # a subtree's PR merges, as plain


def test_gate_deadline_ends_the_whole_group_and_bounces_with_its_log(team: tuple[Path, Path], tmp_path: Path) -> None:
    from exo_cli.adapters.gates import run_gate

    pids = tmp_path / "pids"
    command = f'sleep 300 & echo $! > "{pids}"; setsid sleep 300 & echo $! >> "{pids}"; echo started; sleep 300'
    run = run_gate(tmp_path, command, 1, {"PATH": os.environ["PATH"]}, tmp_path / "gate.log")
    assert run.timed_out and not run.ok and run.code is None
    assert "started" in run.tail and "timed out after 1s" in run.tail
    for pid in (int(p) for p in pids.read_text().split()):  # its background child and the one in a session of
        wait_for(lambda pid=pid: not Path(f"/proc/{pid}").exists()  # its own (found by its token) are gone too
                 or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2], what=f"pid {pid} ended")
    repo, _ = team
    (repo / ".exo" / "config.toml").write_text('[merge]\nwindow = 0\n[[merge.gates]]\ncommand = "echo slow; sleep 300"\n'
                                                "timeout = 1\n")
    n = pr_of(repo, "w0", {"f.txt": "1\n"})
    enqueue(repo, n)
    advance(env_for(repo), "main")
    e = entry(repo, n)
    assert e["state"] == "bounced" and "timed out" in e["tail"] and "slow" in e["tail"]


def test_a_failing_runner_tells_the_human_and_the_next_one_resumes(team: tuple[Path, Path]) -> None:
    repo, _ = team
    n = pr_of(repo, "w0", {"f.txt": "1\n"})
    gone = pr_of(repo, "w1", {"g.txt": "1\n"})
    enqueue(repo, n)
    enqueue(repo, gone)
    env = env_for(repo)
    pr = env.store.pr(gone)
    assert pr is not None
    mq.set_entry(env, pr, pinned="0" * 40)  # a record whose commit git does not have: bounced, never a stuck queue
    blocker = repo / ".git" / "refs" / "exo" / "queue" / "candidate"
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("not a folder\n")  # git cannot write the candidate's ref: a real git failure
    assert advance(env_for(repo), "main") == 0
    assert entry(repo, n)["state"] == "queued" and entry(repo, gone)["state"] == "bounced"
    told = [m for m in env_for(repo).store.messages(recipient="root") if "stopped" in m.body]
    assert len(told) == 1 and "exo pr queue --run --base main" in told[0].body
    blocker.unlink()
    assert advance(env_for(repo), "main") == 1 and entry(repo, n)["pr_state"] == "merged"


def test_on_the_postgresql_store(team: tuple[Path, Path], pg_cluster: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXO_STORE_URL", pg_cluster.url())
    repo, log = team
    good, bad = pr_of(repo, "w0", {"f.txt": "1\n"}), pr_of(repo, "w1", {"BAD": "1\n"})
    assert env_for(repo).store.__class__.__name__ == "PostgresStore"
    enqueue(repo, good)
    enqueue(repo, bad)
    assert advance(env_for(repo), "main") == 1
    assert (entry(repo, good)["state"], entry(repo, bad)["state"]) == ("merged", "bounced")
    assert git(repo, "rev-parse", "main") in passed(repo)


def test_gates_removed_after_enqueue_land_nothing_untested(team: tuple[Path, Path]) -> None:
    repo, _ = team
    n = pr_of(repo, "w0", {"f.txt": "1\n"})
    enqueue(repo, n)
    start = git(repo, "rev-parse", "main")
    (repo / ".exo" / "config.toml").write_text("[merge]\nwindow = 0\n")
    advance(env_for(repo), "main")
    e = entry(repo, n)
    assert e["state"] == "bounced" and "no merge gate applies" in e["tail"] and git(repo, "rev-parse", "main") == start
    got = registry.invoke("pr_merge", env_for(repo), number=n)  # merged again: a plain merge now
    assert got.state == "merged" and got.merge_commit


def test_doctor_removes_a_dead_runners_clone_and_restarts_the_queue(team: tuple[Path, Path]) -> None:
    repo, _ = team
    n = pr_of(repo, "w0", {"f.txt": "1\n"})
    enqueue(repo, n)
    left = Path(mq.folder(env_for(repo), "main"), "clones", "1.0-99999")
    (left / "src").mkdir(parents=True)
    started: list[str] = []
    env = env_for(repo)
    env.queue_runner = lambda _env, base: started.append(base) or True  # type: ignore[attr-defined]
    from exo_cli.ops import doctor, queuerun

    assert doctor.merge_queues in doctor.CHECKS  # doctor runs these (the whole doctor is tested elsewhere)
    found = queuerun.leftovers(env)
    assert [(kind, subject) for kind, subject, *_ in found] == [("queue-clone", "main"), ("queue-stalled", "main")]
    assert all(repair() for *_, repair in found)
    assert not left.exists() and started == ["main"]
    from exo_cli import mcp_server

    assert queuerun.resume_queues in mcp_server.BACKGROUND  # the root's session resumes a stalled queue too
    queuerun.resume_queues(env)
    assert started == ["main", "main"]


def test_a_batch_stops_before_an_entry_that_must_land_alone(team: tuple[Path, Path]) -> None:
    from exo_cli.ops.queuerun import pick

    repo, _ = team
    numbers = [pr_of(repo, f"w{i}", {f"f{i}.txt": "x\n"}) for i in range(3)]
    for n in numbers:
        enqueue(repo, n)
    env = env_for(repo)
    solo = env.store.pr(numbers[1])
    assert solo is not None
    mq.set_entry(env, solo, solo=True)  # its batch's push was refused (tests/test_merge_queue_github.py)
    assert [p.number for p in pick(env, "main")] == numbers[:1]
    first = env.store.pr(numbers[0])
    assert first is not None
    mq.set_entry(env, first, state="merged")
    assert [p.number for p in pick(env, "main")] == numbers[1:2]  # alone, at once
    enqueue(repo, numbers[1])  # `pr merge` again: it may join a batch again
    assert [p.number for p in pick(env, "main")] == numbers[1:]
