"""The team's budget, budgets of custom agents, and a dollar budget refused for a model known to have no price.

Real git repositories, the real store (SQLite, and PostgreSQL for the team's budget), the real stop
hook as a subprocess reading a transcript, a real headless custom agent reporting its usage with
`exo usage`, and `exo` run as the human or as an agent (its proof).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from test_cost import STOP, _turn
from test_messages_helpers import env_for, hook_json, make_agent, run_exo_as, run_hook

from conftest import stop_repo_agents, write_trusted
from exo_cli.records import Usage


def _json(proc: Any) -> Any:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


def _events(repo: Path, event: str, recipient: str = "root") -> list[Any]:
    return [m for m in env_for(repo).store.messages(recipient=recipient, kinds=["event"])
            if m.data.get("event") == event]


@pytest.mark.sqlite_only  # the store's part (kv, lock, usage) runs on both below
def test_the_team_budget_warns_once_stops_every_agent_and_a_raise_releases_them(
        repo: Path, tmp_path: Path) -> None:
    (repo / "exo.toml").write_text("[budget]\nteam_tokens = 1000\n")
    store = env_for(repo).store
    make_agent(repo, "old")
    store.record_usage("old", 1, [Usage("m", 300)])
    assert store.retire_agent("old", "old@1")  # a retired agent's tokens still count
    make_agent(repo, "lead", role="tl", backend="claude", status="working")
    make_agent(repo, "w1", parent="lead", backend="claude", status="working")
    make_agent(repo, "w2", status="idle")
    make_agent(repo, "w3", status="done")
    # the configuration is taken into the store by the human's side (here `exo budget --team` at +0)
    first = _json(run_exo_as(repo, None, "budget", "--team", "+0", "--tokens", "--json"))
    assert (first["budget_tokens"], first["tokens"], first["status"]) == (1000, 300, "ok")
    make_agent(repo, "l2", status="working")
    _json(run_exo_as(repo, None, "spawn", "--worker", "k2", "--after", "l2", "--agent", "demo", "--mux", "headless",
                     "--prompt", "after l2", "--json"))  # waits for l2

    transcript = tmp_path / "t.jsonl"
    payload = dict(STOP["claude"], session_id="s", cwd=str(repo), transcript_path=str(transcript))
    _turn("claude", transcript, 1, 500, 50, 0, 0)  # 850 of 1000: the human is told once
    assert hook_json(run_hook(repo, "w1", "stop", "claude", dict(payload, turn_id="t1"))) == {}
    assert store.agent("w1").status == "idle"  # type: ignore[union-attr]
    store.update_agent("w1", status="working")
    _turn("claude", transcript, 2, 20, 10, 0, 0)  # 880: told already
    hook_json(run_hook(repo, "w1", "stop", "claude", dict(payload, turn_id="t2")))
    [warned] = _events(repo, "budget-warning")
    assert warned.data["team"] is True and "880" not in warned.body and "850 of 1,000 tokens" in warned.body

    store.update_agent("w1", status="working")
    store.post("send", "lead", "w1", "more", data={"from_name": "lead"})  # would keep it going: held
    _turn("claude", transcript, 3, 150, 20, 0, 0)  # 1,050 of 1,000: this turn overran it
    assert hook_json(run_hook(repo, "w1", "stop", "claude", dict(payload, turn_id="t3"))) == {}
    reason = "over budget: the team used 1,050 of 1,000 tokens"
    for a in ("w1", "w2"):  # w2 rested at its input: it stops at once
        got = store.agent(a)
        assert (got.status, got.status_reason) == ("over-budget", reason), a  # type: ignore[union-attr]
    assert store.agent("lead").status == "working" and store.agent("w3").status == "done"  # type: ignore[union-attr]
    assert store.messages(recipient="w1", unconsumed=True, undelivered=True)  # held, not handed over
    # the lead's turn ends: it stops too, whoever's message waits for it
    store.post("send", "w1", "lead", "review", data={"from_name": "w1"})
    assert hook_json(run_hook(repo, "lead", "stop", "claude", {**STOP["claude"], "session_id": "s2",
                                                               "cwd": str(repo), "turn_id": "l1"})) == {}
    assert store.agent("lead").status_reason == reason  # type: ignore[union-attr]
    [over] = _events(repo, "over-budget")  # the human is told once, not once per agent
    assert over.data["team"] is True and "exo budget --team" in over.body
    assert len(_events(repo, "over-budget", "lead")) == 1  # w1's parent hears of w1 (lead's own: the human's)
    sent = _json(run_exo_as(repo, "lead", "send", "w2", "go on", "--json"))
    assert [(s["delivery"], s["held_by"]) for s in sent["sent"]] == [("held", "team")]
    assert "held: over budget (the team's)" in run_exo_as(repo, None, "send", "w2", "and this").stdout
    from exo_cli.registry import invoke
    from exo_cli.render import teamboard

    rows = {r.agent.id: r for r in invoke("board", env_for(repo)).rows}
    assert rows["w2"].needs == "budget" and "the team is over its budget" in teamboard.line(rows["w2"], 120)
    waited = _json(run_exo_as(repo, None, "wait", "lead", "w1", "--until-idle", "--timeout", "30", "--json"))
    assert waited["timed_out"] is False  # a fan-in returns
    spawn = run_exo_as(repo, None, "spawn", "--worker", "k1", "--agent", "demo", "--mux", "headless", "--json")
    assert spawn.returncode == 5 and store.agent("k1") is None, spawn.stdout
    err = json.loads(spawn.stdout)["error"]
    assert "over its budget" in err["message"] and "exo budget --team" in err["hint"]
    assert run_exo_as(repo, "l2", "done", "--output", "finished").returncode == 0  # k2 would start now: it never will
    k2 = store.agent("k2")
    assert k2.status == "dead" and "the team is over its budget" in k2.status_reason  # type: ignore[union-attr]
    # an agent's own raise does not release it while the team holds it; only the human raises the team's
    store.update_agent("w1", spec={"budget": {"tokens": 10}})
    assert _json(run_exo_as(repo, None, "budget", "w1", "+5000", "--tokens", "--json"))["released"] is False
    assert store.agent("w1").status_reason == reason  # type: ignore[union-attr]
    refused = run_exo_as(repo, "lead", "budget", "--team", "+500", "--tokens", "--json")
    assert refused.returncode == 5 and "Only the human" in json.loads(refused.stdout)["error"]["message"]
    assert run_exo_as(repo, None, "budget", "w1", "+5", "--team").returncode == 4  # an agent or the team

    raised = _json(run_exo_as(repo, None, "budget", "--team", "+500", "--tokens", "--json"))
    assert (raised["budget_tokens"], raised["status"], sorted(raised["agents"])) == (1500, "ok", ["lead", "w1", "w2"])
    for a in ("lead", "w1", "w2"):
        assert store.agent(a).status == "idle", a  # type: ignore[union-attr]
    assert len(_events(repo, "budget-warning")) == 1  # 1,050 of 1,500 is 70%: nobody told again
    assert _json(run_exo_as(repo, None, "cost", "--json"))["team_budget"] == {"tokens": 1500}
    assert "its budget: 1,500 tokens" in run_exo_as(repo, None, "cost").stdout
    # a changed configuration is taken at the next spawn (or `exo budget --team`): 0 is no budget
    (repo / "exo.toml").write_text("[budget]\nteam_tokens = 0\n")
    none = _json(run_exo_as(repo, None, "budget", "--team", "+0", "--tokens", "--json"))
    assert none["budget_tokens"] is None and none["status"] == "ok"


def test_a_custom_agent_reporting_usage_takes_the_team_over_and_the_store_holds_only_a_sound_budget(
        repo: Path) -> None:
    from exo_cli.ops import agentctl, teambudget
    from exo_cli.registry import invoke

    make_agent(repo, "c2", backend="custom", status="working")
    make_agent(repo, "w", status="idle")
    make_agent(repo, "f", status="failed-turn")  # at rest after an API error: a typed message would start a turn
    human = env_for(repo)
    assert invoke("budget", human, amount="100", tokens=True, team=True).budget_tokens == 100
    invoke("report_usage", env_for(repo, "c2"), model="house", input=150)  # through exo usage / report_usage
    store = human.store
    reason = "over budget: the team used 150 of 100 tokens"
    assert (store.agent("w").status, store.agent("w").status_reason) == ("over-budget", reason)  # type: ignore[union-attr]
    assert (store.agent("f").status, store.agent("f").status_reason) == ("over-budget", reason)  # type: ignore[union-attr]
    assert store.agent("c2").status == "working"  # type: ignore[union-attr]  # it stops when it comes to rest
    c2 = agentctl.went_idle(human, store.agent("c2"), "done", "fence")  # type: ignore[arg-type]
    assert (c2.status, c2.status_reason) == ("over-budget", reason)
    assert not _events(repo, "idle") and len(_events(repo, "over-budget")) == 1
    with pytest.raises(Exception, match="without a price"):  # dollars cannot be measured: refused, nothing set
        invoke("budget", human, amount="5", team=True)
    assert teambudget.limits(human) == {"tokens": 100}
    for bad in ('{"usd": true, "tokens": NaN}', '{"tokens": -5}', '["x"]', "not json", '{"tokens": "9"}'):
        store.kv_set("budget:team", bad)  # whatever the store holds, only a sound budget counts
        assert teambudget.limits(human) is None and teambudget.over(human) is None
    store.kv_set("budget:team", '{"tokens": 100}')
    (repo / "exo.toml").write_text("[budget]\nteam_tokens = 1000000000\n")  # an agent's own exo.toml: not taken
    teambudget.take_config(env_for(repo, "c2"))
    assert teambudget.limits(human) == {"tokens": 100}
    (repo / "exo.toml").unlink()
    assert invoke("budget", human, amount="0", tokens=True, team=True).budget_tokens is None  # 0: none
    assert store.agent("w").status == "idle" and store.agent("c2").status == "idle"  # type: ignore[union-attr]


@pytest.mark.sqlite_only
def test_a_custom_agent_is_stopped_by_its_budget_on_the_usage_it_reports(
        sleepers: Path, tmp_path: Path) -> None:
    repo = sleepers
    script = tmp_path / "agent.py"
    script.write_text(
        "import subprocess, sys\n"
        "subprocess.run([sys.executable, '-m', 'exo_cli', 'usage', '--model', 'house', '--input', '150'], check=True)\n"
        "print('[exo-output]turn one[/exo-output]', flush=True)\n"
        "for line in sys.stdin:\n"
        "    print('[exo-output]got ' + line.strip() + '[/exo-output]', flush=True)\n")
    write_trusted(repo, f"[agent]\ncommand = {json.dumps([sys.executable, str(script)])}\n")
    _json(run_exo_as(repo, None, "spawn", "--worker", "c1", "--agent", "custom", "--mux", "headless",
                     "--budget-tokens", "100", "--json"))
    store = env_for(repo).store
    waited = _json(run_exo_as(repo, None, "wait", "c1", "--until-idle", "--timeout", "120", "--json", timeout=150))
    assert waited["timed_out"] is False  # over its budget counts as idle
    c1 = store.agent("c1")
    assert (c1.status, c1.status_reason) == ("over-budget", "over budget: 150 of 100 tokens")  # type: ignore[union-attr]
    assert not _events(repo, "idle")  # it rests with its messages held: no idle event
    assert len(_events(repo, "over-budget")) == 1
    sent = _json(run_exo_as(repo, None, "send", "c1", "hello", "--json"))
    assert [s["delivery"] for s in sent["sent"]] == ["held"]
    raised = _json(run_exo_as(repo, None, "budget", "c1", "+100", "--tokens", "--json"))
    assert (raised["released"], raised["status"]) == (True, "working") and len(raised["delivered"]) == 1  # handed over
    again = _json(run_exo_as(repo, None, "wait", "c1", "--until-idle", "--timeout", "120", "--json", timeout=150))
    assert again["timed_out"] is False
    assert "hello" in (store.agent("c1").output or "")  # type: ignore[union-attr]
    stop_repo_agents(repo)


@pytest.mark.sqlite_only
def test_a_dollar_budget_is_refused_at_spawn_for_a_model_known_to_have_no_price(repo: Path, tmp_path: Path) -> None:
    write_trusted(repo, '[agent.args]\nclaude = ["--model", "house-model"]\n')
    args = ("spawn", "--worker", "k1", "--agent", "claude", "--mux", "headless", "--json")
    proc = run_exo_as(repo, None, *args, "--budget-usd", "2")
    assert proc.returncode == 5 and env_for(repo).store.agent("k1") is None, proc.stdout
    err = json.loads(proc.stdout)["error"]
    assert "house-model" in err["message"] and '[prices."house-model"]' in err["hint"]
    assert err["data"]["model"] == "house-model"
    # the team's dollar budget needs it too
    write_trusted(repo, '[agent.args]\nclaude = ["--model", "house-model"]\n[budget]\nteam_usd = 50\n')
    team = run_exo_as(repo, None, *args)
    assert team.returncode == 5 and "house-model" in json.loads(team.stdout)["error"]["message"]
    # a price for it, or a model that cannot be known now: today's behaviour (the budget is checked as used)
    from exo_cli.ops.budget import budget_for

    write_trusted(repo, '[agent.args]\nclaude = ["--model", "house-model"]\n[prices."house-model"]\n'
                        "input = 1\noutput = 2\ncache_write = 1\ncache_read = 0.1\n")
    env = env_for(repo)
    assert budget_for(env, env, "claude", usd=2, tokens=None) == {"usd": 2}
    write_trusted(repo, '[agent.args]\nclaude = ["--model", "sonnet"]\n')  # an alias: its model is the CLI's
    env = env_for(repo)
    assert budget_for(env, env, "claude", usd=2, tokens=None) == {"usd": 2}


@pytest.mark.sqlite_only  # no store
def test_the_model_each_cli_will_use_is_read_from_its_documented_choices(tmp_path: Path) -> None:
    from exo_cli.adapters.agentmodel import known_model

    home, project = tmp_path / "home", tmp_path / "project"
    (home / ".claude").mkdir(parents=True)
    (home / ".gemini").mkdir()
    (home / ".codex").mkdir()
    (project / ".claude").mkdir(parents=True)
    environ = {"HOME": str(home)}
    for cli in ("claude", "gemini", "codex", "custom", "demo"):
        assert known_model(cli, [], environ, project) is None  # the CLI's own default: not known
    (home / ".claude/settings.json").write_text(json.dumps({"model": "claude-user"}))
    assert known_model("claude", [], environ, project) == "claude-user"
    (project / ".claude/settings.json").write_text(json.dumps({"model": "claude-project"}))
    assert known_model("claude", [], environ, project) == "claude-project"
    assert known_model("claude", [], {**environ, "ANTHROPIC_MODEL": "claude-env"}, project) == "claude-env"
    assert known_model("claude", ["--model=claude-arg"], {**environ, "ANTHROPIC_MODEL": "x"}, project) == "claude-arg"
    assert known_model("claude", ["--model", "opus"], environ, project) is None  # an alias
    assert known_model("claude", [], {**environ, "CLAUDE_CONFIG_DIR": str(tmp_path / "none")},
                       tmp_path / "elsewhere") is None
    (home / ".gemini/settings.json").write_text(json.dumps({"model": {"name": "gemini-user"}}))
    assert known_model("gemini", [], environ, project) == "gemini-user"
    assert known_model("gemini", [], {**environ, "GEMINI_MODEL": "gemini-env"}, project) == "gemini-env"
    assert known_model("gemini", ["-m", "gemini-arg"], environ, project) == "gemini-arg"
    (home / ".codex/config.toml").write_text('model = "gpt-user"\n')
    assert known_model("codex", [], environ, project) == "gpt-user"
    assert known_model("codex", ["-c", 'model="gpt-c"'], environ, project) == "gpt-c"
    assert known_model("codex", ["--profile", "fast"], environ, project) is None  # a profile may choose another
    for bad in ("{not json", json.dumps({"model": "x\x1b[2J"}), json.dumps(["model"]), json.dumps({"model": 5})):
        (home / ".claude/settings.json").write_text(bad)
        (project / ".claude/settings.json").unlink(missing_ok=True)
        assert known_model("claude", [], environ, project) is None
    (home / ".codex/config.toml").write_text("model = [")
    assert known_model("codex", [], environ, project) is None


@pytest.mark.sqlite_only
@pytest.mark.parametrize("message", [True, False])
def test_an_agent_judged_before_another_took_the_team_over_does_not_rest_idle(repo: Path, tmp_path: Path,
                                                                              message: bool) -> None:
    """w1's stop hook judges the team under its budget, then w2's turn takes it over before w1's is recorded:
    w1 still stops (status over-budget, a message for it held, not continued), as the resting agents did."""
    make_agent(repo, "w1", backend="claude", status="working")
    make_agent(repo, "w2", backend="claude", status="working")
    store = env_for(repo).store
    store.kv_set("budget:team", '{"tokens": 1000}')
    store.record_usage("w2", 1, [Usage("m", 900)])
    if message:
        store.post("send", "w2", "w1", "go on", data={"from_name": "w2"})
    out = _judged_then(repo, tmp_path, "w1", lambda: _w2_takes_the_team_over(repo, tmp_path, store))
    assert json.loads(out) == {}  # not continued with the message
    w1 = store.agent("w1")
    assert (w1.status, w1.status_reason) == ("over-budget", "over budget: the team used 1,050 of 1,000 tokens")  # type: ignore[union-attr]
    assert len(store.messages(recipient="w1", unconsumed=True, undelivered=True)) == message  # held


def _w2_takes_the_team_over(repo: Path, tmp_path: Path, store: Any) -> None:
    transcript = tmp_path / "t.jsonl"
    _turn("claude", transcript, 1, 150, 0, 0, 0)  # w2's turn: 1,050 of 1,000
    hook_json(run_hook(repo, "w2", "stop", "claude", {**STOP["claude"], "session_id": "s2", "cwd": str(repo),
                                                      "transcript_path": str(transcript), "turn_id": "b"}))
    assert store.agent("w1").status == "working"  # not resting: its own hook stops it


def _judged_then(repo: Path, tmp_path: Path, agent: str, meanwhile: Any) -> str:
    """Run ``agent``'s stop hook, paused right after it judged its turn (fault point budget.judged) while
    ``meanwhile`` runs; its output."""
    import os
    import subprocess

    from test_messages_helpers import EXO, agent_vars

    from conftest import wait_for

    pause = tmp_path / "pause"
    pause.mkdir()
    env = {**os.environ, **agent_vars(repo, agent), "EXO_FAULT": "budget.judged", "EXO_FAULT_PAUSE": str(pause)}
    payload = json.dumps({**STOP["claude"], "session_id": "s1", "cwd": str(repo), "turn_id": "a"})
    judged = subprocess.Popen([*EXO, "hook", "stop", "--cli", "claude"], cwd=repo, env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert judged.stdin is not None and judged.stdout is not None and judged.stderr is not None
        judged.stdin.write(payload)
        judged.stdin.close()
        wait_for(lambda: (pause / "budget.judged").exists(), what=f"{agent}'s hook to judge its turn")
        meanwhile()
        (pause / "budget.judged").unlink()
        out, err = judged.stdout.read(), judged.stderr.read()
        judged.wait(timeout=60)
    finally:
        if judged.poll() is None:
            judged.kill()
    assert judged.returncode == 0, err
    return out


@pytest.mark.sqlite_only
def test_a_raise_while_a_turn_that_went_over_is_judged_holds_nobody(repo: Path, tmp_path: Path) -> None:
    """w1's turn takes the team over; the human raises the team's budget before w1's hook records it: w1 and the
    agents resting meanwhile are not left held."""
    make_agent(repo, "w1", backend="claude", status="working")
    make_agent(repo, "w2", status="idle")
    store = env_for(repo).store
    store.kv_set("budget:team", '{"tokens": 1000}')
    store.record_usage("w2", 1, [Usage("m", 1050)])  # over already: w1's hook judges its turn over
    human = env_for(repo)
    from exo_cli.registry import invoke

    out = _judged_then(repo, tmp_path, "w1", lambda: invoke("budget", human, amount="+1000", tokens=True, team=True))
    assert json.loads(out) == {}
    assert (store.agent("w1").status, store.agent("w2").status) == ("idle", "idle")  # type: ignore[union-attr]
    assert not _events(repo, "over-budget")  # nobody told of a stop that did not last
