"""``exo attach`` from inside the user's own tmux: a popup (or a window on old tmux), never a nested client.

Three real tmux servers on private sockets: exo's (the agent), the user's (their session), and
a "terminal" server whose pane is the user's attached client (so the user's server has a client
to show a popup on). Keys are typed into the user's pane; what each server holds is read back.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_messages_helpers import ROOT, env_for, git, make_agent

from conftest import Exo, wait_for
from exo_cli import registry
from exo_cli.adapters.mux.tmux_attach import parse_version, plan
from exo_cli.ops import agentctl

pytestmark = [pytest.mark.tmux, pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")]


def tm(sock: Path, *args: str, check: bool = True) -> str:
    return subprocess.run(["tmux", "-S", str(sock), *args], capture_output=True, text=True, check=check,
                          env={k: v for k, v in os.environ.items() if k != "TMUX"}).stdout.strip()


@pytest.fixture
def agent_repo(repo: Path, tmp_path: Path) -> Iterator[Path]:
    """An agent ``w1`` in a window of exo's private tmux server, running a shell that just waits."""
    wt = tmp_path / "wt-w1"
    git(repo, "worktree", "add", "-q", "-b", "main.w1", str(wt), "main")
    make_agent(repo, "w1", status="idle", worktree=str(wt), branch="main.w1", base_branch="main", mux="tmux")
    env = env_for(repo)
    loc = agentctl.mux_for(env, "tmux").start("w1", ["sleep", "600"], cwd=wt, env=dict(os.environ))
    env.store.update_agent("w1", location=loc.to_dict())
    yield repo
    agentctl.mux_for(env_for(repo), "tmux").kill_server()


@pytest.fixture
def user_tmux(tmp_path: Path) -> Iterator[Path]:
    """The user's own tmux server (80x24 session ``me``), with a client attached from a 'terminal' server."""
    short = Path(os.path.realpath("/tmp")) / f"exo-user-{os.getpid()}-{tmp_path.name[-6:]}"
    short.mkdir()
    user, term = short / "user.sock", short / "term.sock"
    environ = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
    environ["PYTHONPATH"] = str(ROOT)
    subprocess.run(["tmux", "-S", str(user), "-f", "/dev/null", "new-session", "-d", "-s", "me", "-x", "80", "-y", "24"],
                   check=True, env=environ)
    subprocess.run(["tmux", "-S", str(term), "-f", "/dev/null", "new-session", "-d", "-x", "100", "-y", "30",
                    f"tmux -S {shlex.quote(str(user))} attach -t me"], check=True, env=environ)
    wait_for(lambda: tm(user, "list-clients", "-F", "#{client_name}", check=False) != "", what="the user's client")
    yield user
    for sock in (term, user):
        tm(sock, "kill-server", check=False)
    shutil.rmtree(short, ignore_errors=True)


def agent_server(repo: Path) -> Path:
    return Path(agentctl.mux_for(env_for(repo), "tmux").socket_path())


def test_attach_from_the_users_tmux_opens_a_popup(agent_repo: Path, user_tmux: Path) -> None:
    repo = agent_repo
    exo_sock = agent_server(repo)
    window = env_for(repo).store.agent("w1").location["window"]
    before = tm(exo_sock, "display-message", "-p", "-t", window, "#{window_width}x#{window_height}")
    line = f"cd {shlex.quote(str(repo))} && {shlex.quote(sys.executable)} -m exo_cli attach w1"
    tm(user_tmux, "send-keys", "-t", "me", "-l", line)
    tm(user_tmux, "send-keys", "-t", "me", "Enter")
    # the popup's client attaches to exo's server: one client there, showing w1's window
    wait_for(lambda: tm(exo_sock, "list-clients", "-F", "#{window_id}", check=False) == window, timeout=30,
             what="a client of exo's server on w1's window")
    assert tm(user_tmux, "list-windows", "-a", "-F", "#{window_id}").count("\n") == 0  # no new window: a popup
    assert tm(exo_sock, "show-options", "-w", "-v", "-t", window, "window-size") == "manual"  # this window only
    assert tm(exo_sock, "show-options", "-g", "-v", "window-size") != "manual"
    shown = tm(user_tmux, "capture-pane", "-p", "-t", "me")
    assert "popup" in shown and "C-b d" in shown  # exo said how to come back
    client = tm(user_tmux, "list-clients", "-F", "#{client_name}")
    tm(user_tmux, "display-popup", "-C", "-c", client)
    wait_for(lambda: tm(exo_sock, "list-clients", "-F", "#{client_name}", check=False) == "", timeout=30,
             what="the popup's client to go")
    after = tm(exo_sock, "display-message", "-p", "-t", window, "#{window_width}x#{window_height}")
    assert after == before  # the popup did not shrink the agent's window


def test_old_tmux_gets_a_window_and_the_prefix_twice_hint(agent_repo: Path, user_tmux: Path) -> None:
    repo = agent_repo
    env = env_for(repo)
    rec = env.store.agent("w1")
    loc = agentctl.location(rec)
    mux = agentctl.mux_for(env, "tmux")
    environ = {**os.environ, "TMUX": f"{user_tmux},1,0"}
    mode, argv, hint = plan(mux, loc, name="w1", environ=environ, version=(3, 1))  # type: ignore[arg-type]
    assert mode == "window" and "C-b C-b d" in (hint or "")
    subprocess.run(argv, check=True, env=environ)
    wait_for(lambda: "exo:w1" in tm(user_tmux, "list-windows", "-F", "#{window_name}"), what="the new window")
    exo_sock = agent_server(repo)
    wait_for(lambda: tm(exo_sock, "list-clients", "-F", "#{window_id}", check=False) == rec.location["window"],
             timeout=30, what="the window's client on exo's server")


def test_outside_tmux_a_plain_attach_whose_command_pastes_cleanly(agent_repo: Path) -> None:
    r = registry.invoke("attach", env_for(agent_repo), agent="w1")
    assert r.mode == "attach" and ";" in r.argv and "attach-session" in r.argv and "C-b d" in (r.hint or "")
    assert shlex.split(r.command) == r.argv  # the printed command is the argv, `;` quoted
    check = subprocess.run(["bash", "-n", "-c", r.command], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    assert "';'" in r.command


def test_parse_version() -> None:
    assert parse_version("3.3a") == (3, 3) and parse_version("next-3.5") == (3, 5)
    assert parse_version("openbsd-7.4") == (7, 4) and parse_version("") is None


def test_spawn_says_how_to_watch_attach_and_read(repo: Path) -> None:
    from conftest import Exo, stop_repo_agents

    try:
        r = Exo(repo)("spawn", "--worker", "w1", "--prompt", "hi", "--agent", "demo",
                      "--mux", "headless")
        assert r.exit_code == 0, r.stderr
        hint = next(line for line in r.stdout.splitlines() if line.startswith("watch:"))
        assert "exo agents --watch" in hint and "exo attach w1" in hint and "exo read w1" in hint
    finally:
        stop_repo_agents(repo, tmux=False)


# Agent names that read as tmux targets (a window index, the session's own name, window.pane, a
# placeholder-like name) and a repository path with every character a shell or tmux would act on:
# spaces, quotes, $, ;, unicode, tmux formats (#{...} and #(command): tmux expands formats in a
# window's start folder), and very long.
ODD_NAMES = ["0", "1", "exo", "w1.0", "main"]
ODD_DIR = "sp ace 'q\"uote $HOME ;semi ü 日本 #{pane_id} #(touch PWNED) " + "long-" * 30


@pytest.fixture
def odd_team(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Agents with ODD_NAMES in windows of exo's tmux server, for a repository under ODD_DIR, exo's
    tmux socket under an odd TMUX_TMPDIR; the tmux server runs from ``tmp_path`` (where a format
    expanded by mistake would run ``touch PWNED``)."""
    monkeypatch.chdir(tmp_path)
    short = Path(os.path.realpath("/tmp")) / f"exo-odd-{os.getpid()}-{tmp_path.name[-6:]}"
    tmpdir = short / "t $x;'\"ü"
    tmpdir.mkdir(parents=True)
    monkeypatch.setenv("TMUX_TMPDIR", str(tmpdir))
    repo = tmp_path / ODD_DIR / "repo"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / "README.md").write_text("# odd\n")
    git(repo, "add", "README.md")
    git(repo, "commit", "-q", "-m", "initial")
    env = env_for(repo)
    mux = agentctl.mux_for(env, "tmux")
    for name in ODD_NAMES:
        wt = repo / ".exo" / "worktrees" / f"{name} ünï $;'\"#{{x}}"
        git(repo, "worktree", "add", "-q", "-b", f"main.{name}", str(wt), "main")
        make_agent(repo, name, status="idle", worktree=str(wt), branch=f"main.{name}", base_branch="main",
                   mux="tmux")
        loc = mux.start(name, ["sleep", "600"], cwd=wt, env=dict(os.environ))
        env.store.update_agent(name, location=loc.to_dict())
    yield repo
    mux.kill_server()
    shutil.rmtree(short, ignore_errors=True)


def test_odd_names_and_paths_start_in_the_right_folder_and_run_no_format(odd_team: Path, tmp_path: Path) -> None:
    env = env_for(odd_team)
    sock = Path(agentctl.mux_for(env, "tmux").socket_path())
    assert sock.exists() and "t $x;'\"ü" in str(sock)
    for name in ODD_NAMES:
        rec = env.store.agent(name)
        shown = tm(sock, "display-message", "-p", "-t", rec.location["pane"], "#{window_name}\t#{pane_current_path}")
        assert shown == f"{name}\t{rec.worktree}"  # tmux took the folder and the name literally
    assert not list(tmp_path.rglob("PWNED"))  # `#(touch PWNED)` in the path ran nothing


def test_the_board_opens_each_odd_agent_in_a_popup_on_its_own_window(odd_team: Path, user_tmux: Path) -> None:
    """From the board (inside the user's tmux): select each agent, press a; the popup's client on exo's
    server shows exactly that agent's window; closing the popup comes back."""
    import asyncio

    from exo_cli.render.tui import BoardApp

    repo = odd_team
    env = env_for(repo)
    env.environ["TMUX"] = f"{user_tmux},1,0"  # the board runs inside the user's tmux
    exo_sock = agent_server(repo)
    client = tm(user_tmux, "list-clients", "-F", "#{client_name}")

    async def scenario() -> None:
        app = BoardApp(env, fallback=5.0)
        async with app.run_test(size=(120, 30), notifications=True) as pilot:
            table = app.query_one("#agents")
            deadline = asyncio.get_running_loop().time() + 60
            while table.row_count < len(ODD_NAMES):
                assert asyncio.get_running_loop().time() < deadline, "the board's rows"
                await pilot.pause(0.05)
            for name in ODD_NAMES:
                window = env.store.agent(name).location["window"]
                table.move_cursor(row=table.get_row_index(name))
                await pilot.press("a")
                await asyncio.to_thread(wait_for, lambda w=window: tm(exo_sock, "list-clients", "-F", "#{window_id}",
                                                                      check=False) == w,
                                        timeout=30, what=f"the popup on {name}'s window")
                assert tm(exo_sock, "show-options", "-w", "-v", "-t", window, "window-size") == "manual"
                tm(user_tmux, "display-popup", "-C", "-c", client)
                await asyncio.to_thread(wait_for, lambda: tm(exo_sock, "list-clients", "-F", "#{client_name}",
                                                             check=False) == "", timeout=30, what="the popup closed")
            assert tm(user_tmux, "list-windows", "-a", "-F", "#{window_id}").count("\n") == 0  # popups only
            await pilot.press("q")
        assert app.failure is None

    asyncio.run(scenario())


def test_attach_typed_in_the_users_pane_under_an_odd_path(odd_team: Path, user_tmux: Path) -> None:
    """`exo attach 0` typed in the user's shell, from the odd repository folder: a popup on agent 0's window."""
    repo = odd_team
    exo_sock = agent_server(repo)
    window = env_for(repo).store.agent("0").location["window"]
    line = (f"export TMUX_TMPDIR={shlex.quote(os.environ['TMUX_TMPDIR'])}; cd {shlex.quote(str(repo))} && "
            f"PYTHONPATH={shlex.quote(str(ROOT))} {shlex.quote(sys.executable)} -m exo_cli attach 0")
    tm(user_tmux, "send-keys", "-t", "me", "-l", line)
    tm(user_tmux, "send-keys", "-t", "me", "Enter")
    wait_for(lambda: tm(exo_sock, "list-clients", "-F", "#{window_id}", check=False) == window, timeout=30,
             what="a client of exo's server on agent 0's window")


@pytest.mark.parametrize("name", ["-t", "%1", ":0", "=exo:", "@1", "w1;kill-server", "a b", "{last}"])
def test_names_that_are_tmux_options_or_targets_never_reach_tmux(agent_repo: Path, name: str) -> None:
    """Such a name is refused before any tmux call, by `exo attach` (exit 4, InvalidInput) and by the
    multiplexer itself; exo's server and the agent's window are untouched."""
    from exo_cli.errors import InvalidInput

    r = Exo(agent_repo)("attach", "--json", "--", name)
    assert r.exit_code == 4 and r.json()["error"]["name"] == "InvalidInput", r.stdout  # type: ignore[index]
    mux = agentctl.mux_for(env_for(agent_repo), "tmux")
    with pytest.raises(InvalidInput):
        mux.start(name, ["sleep", "1"], cwd=agent_repo, env=dict(os.environ))
    assert tm(agent_server(agent_repo), "list-windows", "-a", "-F", "#{window_name}").split("\n") == ["_exo", "w1"]
