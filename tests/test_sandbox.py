"""The sandbox's builder and private HOME (exo_cli/adapters/sandbox.py, sandbox_home.py), without running bwrap.

What the sandbox really refuses is tests/test_sandbox_attack.py's: these check the command line,
the environment and the files exo writes, including what a hostile agent left in its HOME.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from exo_cli.adapters import sandbox
from exo_cli.adapters.sandbox_home import make_home
from exo_cli.errors import InvalidInput


def _plan(tmp_path: Path, **kw: object) -> sandbox.Plan:
    base = dict(argv=("sh",), cwd=str(tmp_path / "c"), env={}, empty=str(tmp_path / "empty"))
    base.update(kw)
    return sandbox.Plan(**base)  # type: ignore[arg-type]


def _pairs(argv: list[str], flag: str) -> list[tuple[str, str]]:
    return [(argv[i + 1], argv[i + 2]) for i, a in enumerate(argv) if a == flag]


def test_mounts_outermost_first_hide_before_show(tmp_path: Path) -> None:
    repo, state = f"{tmp_path}/r", f"{tmp_path}/r/.git/exo"
    plan = _plan(tmp_path, writable=(str(tmp_path / "c"), f"{state}/agents/a/home"), readable=(f"{repo}/.git",),
                 hidden=(repo, state), sockets=(f"{tmp_path}/rt/s/k",), files=(("/x/cfg", f"{repo}/.git/config"),))
    argv, _ = sandbox.build(plan)
    order = [argv[i + 1] for i, a in enumerate(argv) if a in ("--tmpfs", "--bind", "--ro-bind") and argv[i + 1] != "/"]
    # the repository hidden, then its .git shown read-only, then exo's state hidden again, then the HOME in it
    assert order.index(repo) < order.index(f"{repo}/.git") < order.index(state) < order.index(f"{state}/agents/a/home")
    assert ("/x/cfg", f"{repo}/.git/config") in _pairs(argv, "--ro-bind")
    assert argv[:8] == ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    for flag in ("--cap-drop", "--unshare-pid", "--new-session", "--die-with-parent"):
        assert flag in argv
    assert argv[argv.index("--cap-drop") + 1] == "ALL"
    assert "--unshare-net" not in argv  # the host network until the allow-list proxy (issue 32)
    assert argv[argv.index("--") + 1:] == ["sh"]


def test_tty_network_and_devices(tmp_path: Path) -> None:
    tui, _ = sandbox.build(_plan(tmp_path, tty=True, network=sandbox.Network("none"), devices=("/dev/nvidia0",)))
    assert "--new-session" not in tui and "--unshare-net" in tui
    assert ("/dev/nvidia0", "/dev/nvidia0") in _pairs(tui, "--dev-bind")
    from types import SimpleNamespace

    net = SimpleNamespace(binds=((f"{tmp_path}/net", "/run/exo-net"),), env={"HTTPS_PROXY": "x"},
                          prelude=("python3", "-m", "bridge", "--"))  # the shape of the proxy's NetworkPlan
    argv, env = sandbox.build(_plan(tmp_path, argv=("claude", "a b"), network=sandbox.Network.bridge(net),
                                    env={"TMUX": "t", "A": "1"}))
    assert "--unshare-net" in argv and (f"{tmp_path}/net", "/run/exo-net") in _pairs(argv, "--ro-bind")
    assert argv[argv.index("--") + 1:] == ["python3", "-m", "bridge", "--", "claude", "a b"]
    assert env == {"A": "1", "HTTPS_PROXY": "x"}  # TMUX never crosses, whatever the plan says


@pytest.mark.parametrize("bad", [
    {"writable": ("relative/path",)},
    {"network": sandbox.Network("wifi")},
    {"argv": ()},
    {"hidden": ("/a\nb",)},
])
def test_bad_plans_refused(tmp_path: Path, bad: dict[str, object]) -> None:
    with pytest.raises(InvalidInput):
        sandbox.build(_plan(tmp_path, **bad))


def test_writable_path_may_not_hold_a_protected_or_hidden_one(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    with pytest.raises(InvalidInput, match=r"\.bashrc"):
        sandbox.build(_plan(tmp_path, writable=(home,), protect=tuple(sandbox.protected_paths(home))))
    with pytest.raises(InvalidInput, match="holds"):
        sandbox.build(_plan(tmp_path, writable=(str(tmp_path),), hidden=(f"{tmp_path}/r",)))
    sandbox.build(_plan(tmp_path, writable=(f"{home}/work",), protect=tuple(sandbox.protected_paths(home))))


def test_environment_is_an_allow_list() -> None:
    environ = {"PATH": "/bin", "LC_ALL": "C", "ANTHROPIC_API_KEY": "k", "OPENAI_API_KEY": "o", "TMUX": "t",
               "SSH_AUTH_SOCK": "/s", "DBUS_SESSION_BUS_ADDRESS": "unix:path=/b", "DOCKER_HOST": "unix:///d",
               "CANARY_SECRET": "c", "MY_TOOL_X": "1", "EXO_AGENT": "a", "EXO_STORE_URL": "postgresql://x"}
    claude = sandbox.allowed_env(environ, cli="claude", extra=["MY_TOOL_*", "SSH_AUTH_SOCK", "TMUX"])
    assert claude == {"PATH": "/bin", "LC_ALL": "C", "ANTHROPIC_API_KEY": "k", "MY_TOOL_X": "1", "EXO_AGENT": "a"}
    assert "OPENAI_API_KEY" in sandbox.allowed_env(environ, cli="codex")
    assert sandbox.cache_env("/c")["npm_config_cache"] == "/c/npm"


def test_socket_places(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    environ = {"TMUX_TMPDIR": "/srv/t", "TMUX": "/srv/other/tmux-0/default,1,0", "SSH_AUTH_SOCK": f"{home}/agent.sock",
               "DBUS_SESSION_BUS_ADDRESS": "unix:path=/srv/bus/socket,guid=1", "DOCKER_HOST": "unix:///srv/d/docker.sock",
               "XDG_RUNTIME_DIR": "/srv/run"}
    folders, files = sandbox.socket_places(environ, home=home, store_url="postgresql://u@/db?host=/srv/pg/sock",
                                           tmux_socket="/srv/x/tmux-0/exo-1")
    uid = os.getuid()
    for folder in (f"/srv/t/tmux-{uid}", "/srv/other/tmux-0", "/srv/bus", "/srv/d", "/srv/run", "/srv/pg/sock",
                   "/srv/x/tmux-0", f"{home}/.gnupg"):
        assert folder in folders
    assert files == [f"{home}/agent.sock"]  # a socket right in HOME: the file, not the whole HOME
    assert sandbox.socket_places({}, home=home, store_url="postgresql://db.example/x")[0] == [
        f"{home}/.gnupg", f"/tmp/tmux-{uid}"]


def test_clean_git_config_keeps_the_format_only() -> None:
    text = ('[core]\n\trepositoryformatversion = 1\n\tfsmonitor = "touch /x"\n\thooksPath = /h\n'
            '[extensions]\n\tobjectFormat = sha256\n[remote "origin"]\n\turl = https://tok@host/x\n'
            '[include]\n\tpath = /evil\n[credential]\n\thelper = store\n')
    assert sandbox.clean_git_config(text) == ("[core]\n\trepositoryformatversion = 1\n[extensions]\n"
                                              "\tobjectFormat = sha256\n")


def test_private_home_copies_settings_binds_credentials(tmp_path: Path) -> None:
    real, private = tmp_path / "home", tmp_path / "private"
    (real / ".claude" / "projects" / "x").mkdir(parents=True)
    (real / ".claude" / "agents").mkdir()
    (real / ".claude" / "settings.json").write_text('{"model": "opus"}')
    (real / ".claude" / "agents" / "rev.md").write_text("reviewer")
    (real / ".claude" / "projects" / "x" / "t.jsonl").write_text("transcript")
    (real / ".claude" / ".credentials.json").write_text('{"token": "t"}')
    (real / ".claude.json").write_text(json.dumps({"userID": "u", "projects": {"/other": {"history": ["secret"]}}}))
    binds = make_home(private, real_home=real, cli="claude", clone="/w/c", environ={},
                      identity={"name": 'A "q"\x1b[31m', "email": "a@b"})
    assert (private / ".claude" / "settings.json").read_text() == '{"model": "opus"}'
    assert (private / ".claude" / "agents" / "rev.md").read_text() == "reviewer"
    assert not (private / ".claude" / "projects").exists()
    state = json.loads((private / ".claude.json").read_text())
    assert state == {"userID": "u", "hasCompletedOnboarding": True,
                     "projects": {"/w/c": {"hasTrustDialogAccepted": True, "hasCompletedProjectOnboarding": True}}}
    assert binds == [(str(real / ".claude" / ".credentials.json"), str(private / ".claude" / ".credentials.json"))]
    assert (private / ".claude" / ".credentials.json").read_text() == ""  # a mount point, never a copy
    assert (private / ".gitconfig").read_text() == '[user]\n\tname = "A \\"q\\"[31m"\n\temail = "a@b"\n'


def test_private_home_never_writes_through_what_the_agent_planted(tmp_path: Path) -> None:
    real, private = tmp_path / "home", tmp_path / "private"
    (real / ".codex").mkdir(parents=True)
    (real / ".codex" / "config.toml").write_text('model = "o3"\n')
    (real / ".codex" / "auth.json").write_text("{}")
    (real / ".bashrc").write_text("# mine\n")
    make_home(private, real_home=real, cli="codex", clone="/w/c", environ={})
    # between two runs the agent turns its copies into links to the user's files
    (private / ".codex" / "config.toml").unlink()
    (private / ".codex" / "config.toml").symlink_to(real / ".bashrc")
    (private / ".codex" / "auth.json").unlink()
    (private / ".codex" / "auth.json").symlink_to(real / ".bashrc")
    (private / ".gitconfig").symlink_to(real / ".bashrc")
    make_home(private, real_home=real, cli="codex", clone="/w/c", environ={}, identity={"name": "n"})
    assert (real / ".bashrc").read_text() == "# mine\n"
    assert not (private / ".codex" / "config.toml").is_symlink()
    assert not (private / ".codex" / "auth.json").is_symlink()
    # and the whole folder replaced by a link to the real one
    import shutil

    shutil.rmtree(private / ".codex")
    (private / ".codex").symlink_to(real / ".codex")
    make_home(private, real_home=real, cli="codex", clone="/w/c", environ={})
    assert (real / ".codex" / "config.toml").read_text() == 'model = "o3"\n' and (real / ".codex" / "auth.json").read_text() == "{}"
    assert not (private / ".codex").is_symlink()


def test_doctor_and_init_say_whether_bubblewrap_works(exo: object, tmp_path: Path) -> None:
    """Real bwrap first; then none on PATH; then a bwrap that cannot make a namespace.

    The last is a stand-in (a script named bwrap that fails as bwrap does where the kernel or a
    container forbids user namespaces): such a machine cannot be made here.
    """
    import shutil

    real = shutil.which("bwrap")
    if real is not None:
        done = exo("doctor", "--json")  # type: ignore[operator]
        assert done.json()["sandbox"]["available"] is True and "bubblewrap" in done.json()["sandbox"]["detail"]
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("git", "tmux"):
        found = shutil.which(tool)
        if found:
            (bare / tool).symlink_to(found)
    path = f"{bare}:{Path(sys.executable).parent}"
    done = exo("init", "--json", env={"PATH": path, "EXO_SANDBOX": "off"})  # type: ignore[operator]
    assert done.exit_code == 0, done.stderr
    assert not any("bubblewrap" in w for w in done.json()["warnings"])  # sandboxing is off: nothing to warn about
    done = exo("init", "--json", env={"PATH": path})  # type: ignore[operator]
    assert done.exit_code == 0, done.stderr  # the default, auto: agents would run unsandboxed here, said once
    assert any("bubblewrap is not installed" in w and "apt-get install bubblewrap" in w for w in done.json()["warnings"])
    doctor = exo("doctor", env={"PATH": path})  # type: ignore[operator]
    assert ("sandbox: unavailable (bubblewrap is not installed (no bwrap on PATH)): agents cannot be sandboxed here "
            "(install bubblewrap") in doctor.stdout
    (bare / "bwrap").write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    (bare / "bwrap").chmod(0o755)
    doctor = exo("doctor", "--json", env={"PATH": path})  # type: ignore[operator]
    assert doctor.json()["sandbox"] == {"available": False, "detail": "bwrap does not work here: bwrap: No permissions "
                                        "to create new namespace"}
    done = exo("init", "--json", env={"PATH": path, "EXO_SANDBOX": "auto"})  # type: ignore[operator]
    assert any("bwrap does not work here: bwrap: No permissions to create new namespace: agents cannot run in a "
               "sandbox" in w for w in done.json()["warnings"]), done.json()


def test_assemble_follows_links_and_guards_the_home(tmp_path: Path) -> None:
    """A linked secret folder is hidden where it points; a writable folder holding a linked ~/.bashrc is refused."""
    home, dots = tmp_path / "home", tmp_path / "dotfiles"
    (dots / "aws").mkdir(parents=True)
    (dots / "bashrc").write_text("# mine\n")
    home.mkdir()
    (home / ".aws").symlink_to(dots / "aws")
    (home / ".bashrc").symlink_to(dots / "bashrc")
    (home / ".netrc").write_text("machine x password y\n")
    repo, clone = tmp_path / "repo", tmp_path / "clone"
    for d in (repo / ".git", clone):
        d.mkdir(parents=True)
    (repo / ".git" / "config").write_text("[core]\n")
    agent = sandbox.Agent(clone=str(clone), repository=str(repo), state_dir=str(repo / ".git" / "exo"),
                          runtime_dir=str(tmp_path / "rt"), home=str(home), private_home=str(tmp_path / "ph"),
                          cache=str(tmp_path / "cache"), empty=str(tmp_path / "empty"))
    plan = sandbox.assemble(agent, ["sh"], cli="demo", environ={"PATH": "/bin", "SSH_AUTH_SOCK": "/x/s"})
    assert str(dots / "aws") in plan.hidden and str(home / ".netrc") in plan.hidden_files
    assert str(repo / ".git" / "config") in plan.hidden_files  # no cleaned copy given: hidden
    assert plan.env == {"PATH": "/bin", "HOME": str(tmp_path / "ph"), "TMPDIR": "/tmp",
                        **sandbox.cache_env(str(tmp_path / "cache"))}
    for bad in (str(dots), "~", str(repo)):
        with pytest.raises(InvalidInput, match="cannot make"):
            sandbox.build(sandbox.assemble(agent, ["sh"], cli="demo", environ={}, paths=[bad]))
    with pytest.raises(InvalidInput, match="does not exist here"):
        sandbox.assemble(agent, ["sh"], cli="demo", environ={}, devices=["/dev/nvidia-none"])
    assert sandbox.assemble(agent, ["sh"], cli="demo", environ={}, devices=["/dev/null"]).devices == ("/dev/null",)
    with pytest.raises(InvalidInput, match="not a folder"):
        sandbox.assemble(agent, ["sh"], cli="demo", environ={}, paths=["~/work"])
    (home / "work").mkdir()
    assert str(home / "work") in sandbox.assemble(agent, ["sh"], cli="demo", environ={}, paths=["~/work"]).writable


def test_macos_profile_as_text(tmp_path: Path) -> None:
    """The experimental sandbox-exec profile (it cannot run here: checked as text)."""
    from exo_cli.adapters import sandbox_macos

    (tmp_path / "r" / ".git" / "exo").mkdir(parents=True)
    (tmp_path / "c").mkdir()
    plan = _plan(tmp_path, writable=(str(tmp_path / "c"),), hidden=(f"{tmp_path}/r", f"{tmp_path}/r/.git/exo"),
                 readable=(f"{tmp_path}/r/.git",), sockets=(f"{tmp_path}/rt/s/k",))
    text = sandbox_macos.profile(plan)
    lines = text.splitlines()
    assert lines[:2] == ["(version 1)", "(deny default)"]
    order = [lines.index(f'(deny file-read* (subpath "{tmp_path}/r"))'),
             lines.index(f'(allow file-read* (subpath "{tmp_path}/r/.git"))'),
             lines.index(f'(deny file-read* (subpath "{tmp_path}/r/.git/exo"))')]
    assert order == sorted(order)
    assert f'(allow file-write* (subpath "{tmp_path}/c") (subpath "/private/tmp") (subpath "/private/var/folders"))' \
        in lines
    assert "(deny network-outbound (remote unix-socket))" in lines
    assert f'(allow network-outbound (remote unix-socket (subpath "{tmp_path}/rt/s/k")))' in lines
    assert "(allow network-outbound (remote ip))" in lines
    none = sandbox_macos.profile(_plan(tmp_path, network=sandbox.Network("none")))
    assert "(remote ip)" not in none
    assert sandbox_macos.quote('/a"b\\c') == '"/a\\"b\\\\c"'
    with pytest.raises(InvalidInput):
        sandbox_macos.quote("/a\nb")
    argv = sandbox_macos.argv(plan)
    assert argv[:2] == ["/usr/bin/sandbox-exec", "-p"] and argv[3:] == ["sh"]
    home = str(tmp_path / "home")
    with pytest.raises(InvalidInput):  # the Linux plan's own checks hold here too
        sandbox_macos.argv(_plan(tmp_path, writable=(home,), protect=tuple(sandbox.protected_paths(home))))
