"""A two-host test harness for exo over SSH, on one machine and without any exo code.

- ``Sshd``: a private ``sshd`` on 127.0.0.1 (free port; keys, configs and log in a private 0700
  folder; ``StrictModes no``, ``UsePAM no``, public key only), started with ``-D`` as a child
  process; ``stop()`` ends it and every connection it serves (ControlMasters included), so a host
  is really unreachable; ``start()`` brings it back on the same port. ``config`` is an
  ``ssh_config`` with ``Host exo-b``: always pass it with ``-F`` (ssh reads ``~/.ssh/config`` from
  the passwd home, not ``$HOME``), so the real ``~/.ssh`` is never read nor written.
- ``TwoHosts``: a bare ``origin``, clone A (the test's ``repo``: the local host, i.e. the test
  process) and clone B (the "remote" host, reached through sshd, with its own HOME, TMUX_TMPDIR,
  config folder and git identity given through the ``env -i ...`` prefix of its ``exo`` command),
  the PostgreSQL cluster as the shared store (``EXO_STORE_URL`` for A) and A's exo configuration
  (``[ssh] command`` and ``[hosts.b]``).
- ``scan_secret``: every place a canary value appears (files, every process's argv, tmux
  environments, sshd logs).

Fixtures (registered in conftest.py): ``sshd`` (the session's server, up at the start of the
test; the test's ssh clients killed at its end) and ``two_hosts``.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import pwd
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

SSHD_BIN = Path("/usr/sbin/sshd")
HOST_ALIAS = "exo-b"
HOST_NAME = "b"
VENV_BIN = Path(sys.executable).parent
EXO_BIN = VENV_BIN / "exo"
USER = pwd.getpwuid(os.getuid()).pw_name
# the identity both hosts' git uses (as the autouse ``isolate`` fixture gives host A)
GIT_IDENTITY = {"GIT_AUTHOR_NAME": "Exo Test", "GIT_AUTHOR_EMAIL": "exo@example.invalid",
                "GIT_COMMITTER_NAME": "Exo Test", "GIT_COMMITTER_EMAIL": "exo@example.invalid",
                "GIT_CONFIG_NOSYSTEM": "1"}
GITCONFIG = "[init]\n\tdefaultBranch = main\n[advice]\n\tdetachedHead = false\n"

_SSHD_LOGS: list[Path] = []  # every sshd log of this run: scan_secret always reads them
_LIVE: list[Sshd] = []  # stopped at exit even if a fixture's teardown never ran
_TMPDIRS: list[Path] = []


def wait_until(pred: Callable[[], Any], *, timeout: float = 60.0, what: str = "condition") -> Any:
    """Poll ``pred`` until truthy (and return it); generous deadline, fail after it."""
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def short_tmpdir(prefix: str = "exo-h-") -> Path:
    """A private (0700) folder directly under /tmp, short enough for unix socket paths (removed at exit)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    _TMPDIRS.append(path)
    return path


def require_sshd() -> Path:
    """The sshd binary; skip the test without it (fail under CI: .ci/run installs openssh-server)."""
    if SSHD_BIN.is_file() and shutil.which("ssh") and shutil.which("ssh-keygen"):
        return SSHD_BIN
    if os.environ.get("CI"):
        pytest.fail(f"OpenSSH is not installed ({SSHD_BIN} or ssh missing); .ci/run installs openssh-server")
    pytest.skip(f"OpenSSH is not installed ({SSHD_BIN} or ssh missing)")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        return s.connect_ex(("127.0.0.1", port)) == 0


# -- processes (/proc) -----------------------------------------------------------------------
def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return b""


def _argv(pid: int) -> list[str]:
    return [a.decode(errors="replace") for a in _read(f"/proc/{pid}/cmdline").split(b"\0") if a]


def _ppid(pid: int) -> int:
    raw = _read(f"/proc/{pid}/stat")
    try:
        return int(raw[raw.rindex(b")") + 2:].split()[1])
    except (ValueError, IndexError):
        return 0


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid in _pids():
        children.setdefault(_ppid(pid), []).append(pid)
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _own_lineage() -> set[int]:
    pids, pid = set(), os.getpid()
    while pid > 1:
        pids.add(pid)
        pid = _ppid(pid)
    return pids


def kill_pids(pids: Iterable[int], *, grace: float = 10.0) -> None:
    """SIGTERM ``pids`` (never this process or its parents), wait, then SIGKILL what is left."""
    pids = [p for p in pids if p not in _own_lineage()]
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while pids and time.monotonic() < deadline:
        pids = [p for p in pids if _alive(p)]
        time.sleep(0.05)
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    raw = _read(f"/proc/{pid}/stat")
    if not raw:
        return False
    with contextlib.suppress(ValueError, IndexError):
        if raw[raw.rindex(b")") + 2:].split()[0] == b"Z":  # a zombie is gone (its parent reaps it)
            return False
    return True


def processes_where(pred: Callable[[int], bool]) -> list[int]:
    """The pids (other than this process and its parents) for which ``pred(pid)`` holds."""
    mine = _own_lineage()
    return [pid for pid in _pids() if pid not in mine and pred(pid)]


def _environ_has(pid: int, entry: bytes) -> bool:
    return entry in _read(f"/proc/{pid}/environ").split(b"\0")


def _environ_value(pid: int, name: bytes) -> bytes | None:
    for entry in _read(f"/proc/{pid}/environ").split(b"\0"):
        if entry.startswith(name + b"="):
            return entry[len(name) + 1:]
    return None


def _under_sshd(pid: int, port: int) -> bool:
    """Started by a session of the sshd on ``port`` (and kept sshd's ``SSH_CONNECTION``)."""
    conn = _environ_value(pid, b"SSH_CONNECTION")
    return conn is not None and conn.endswith(f" 127.0.0.1 {port}".encode())


def _cwd_under(pid: int, roots: Iterable[Path]) -> bool:
    try:
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return False
    return any(cwd == str(r) or cwd.startswith(str(r) + "/") for r in roots)


def _pids_connected_to(port: int, *, server_side: bool = False) -> set[int]:
    """The processes with a TCP connection to 127.0.0.1:``port`` (the clients', or the server's side)."""
    inodes = set()
    for line in _read("/proc/net/tcp").decode().splitlines()[1:]:
        fields = line.split()
        if fields[1 if server_side else 2] == f"0100007F:{port:04X}" and fields[2] != "00000000:0000":
            inodes.add(f"socket:[{fields[9]}]")
    pids = set()
    for pid in _pids() if inodes else []:
        with contextlib.suppress(OSError):
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") in inodes for fd in os.listdir(f"/proc/{pid}/fd")):
                pids.add(pid)
    return pids


def kill_ssh_clients(config: Path, port: int) -> None:
    """Kill every ``ssh`` process whose argv names ``config`` or that is connected to ``port``: a
    ControlMaster rewrites its argv (``ssh: <ControlPath> [mux]``) but keeps its connection."""
    connected = _pids_connected_to(port)
    kill_pids(processes_where(lambda pid: (a := _argv(pid)) != [] and _read(f"/proc/{pid}/comm").strip() == b"ssh"
                              and (str(config) in a or pid in connected)))


# -- sshd --------------------------------------------------------------------------------------
class Sshd:
    """A private sshd on 127.0.0.1 and the ssh client configuration to reach it as ``exo-b``."""

    def __init__(self, root: Path | None = None, *, alias: str = HOST_ALIAS, log_level: str = "VERBOSE",
                 client_config: str = "") -> None:
        """``alias``: the host name the client config gives it; ``log_level``: sshd's (``DEBUG3`` logs
        what each session asks for, environment variables included, every one accepted); ``client_config``:
        more lines for the client's ``Host`` entry (``SendEnv ...``, ``LogLevel DEBUG3``)."""
        binary = require_sshd()
        self.alias, self.log_level, self.client_config = alias, log_level, client_config
        self.binary = binary
        self.dir = root or short_tmpdir("exo-sshd-")
        self.dir.chmod(0o700)
        self.config = self.dir / "ssh_config"  # the client's: ``ssh -F <config> exo-b``
        self.sshd_config = self.dir / "sshd_config"
        self.log = self.dir / "sshd.log"
        self.identity = self.dir / "client_ed25519"
        self.host_key = self.dir / "host_ed25519"
        self.known_hosts = self.dir / "known_hosts"
        self.authorized_keys = self.dir / "authorized_keys"
        self.proc: subprocess.Popen[bytes] | None = None
        for key, comment in ((self.host_key, "exo-test-host"), (self.identity, "exo-test-client")):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key), "-C", comment],
                           check=True, capture_output=True, stdin=subprocess.DEVNULL)
        shutil.copy(f"{self.identity}.pub", self.authorized_keys)
        self.port = 0
        self._write_configs(_free_port())
        _SSHD_LOGS.append(self.log)
        _LIVE.append(self)

    @property
    def ssh_command(self) -> str:
        """The ssh client command line exo's ``[ssh] command`` takes."""
        return shlex.join(["ssh", "-F", str(self.config)])

    def ssh_argv(self, *args: str) -> list[str]:
        """``ssh -F <config> *args`` (add the destination ``exo-b`` and the command yourself)."""
        return ["ssh", "-F", str(self.config), *args]

    def ssh(self, *args: str, input: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run ``ssh -F <config> *args`` (e.g. ``sshd.ssh("exo-b", "true")``), output captured."""
        return subprocess.run(self.ssh_argv(*args), input=input, capture_output=True, text=True, timeout=timeout,
                              stdin=None if input is not None else subprocess.DEVNULL)

    def reachable(self) -> bool:
        """One fresh connection (no ControlMaster) runs ``true`` there."""
        return self.ssh("-o", "ControlMaster=no", "-o", "ControlPath=none", self.alias, "true").returncode == 0

    def _write_configs(self, port: int) -> None:
        self.port = port
        self.sshd_config.write_text(
            f"Port {port}\nListenAddress 127.0.0.1\nHostKey {self.host_key}\nPidFile {self.dir / 'sshd.pid'}\n"
            f"AuthorizedKeysFile {self.authorized_keys}\nAuthenticationMethods publickey\nPubkeyAuthentication yes\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n"
            "UsePAM no\nX11Forwarding no\nAllowTcpForwarding no\nAllowAgentForwarding no\nPrintMotd no\n"
            f"StrictModes no\nLogLevel {self.log_level}\n" + ("AcceptEnv *\n" if self.log_level.startswith("DEBUG") else ""))
        host_pub = " ".join(Path(f"{self.host_key}.pub").read_text().split()[:2])
        self.known_hosts.write_text(f"[127.0.0.1]:{port} {host_pub}\n")
        self.config.write_text(
            f"Host {self.alias}\n  HostName 127.0.0.1\n  Port {port}\n  User {USER}\n  IdentityFile {self.identity}\n"
            f"  IdentitiesOnly yes\n  UserKnownHostsFile {self.known_hosts}\n  GlobalKnownHostsFile /dev/null\n"
            "  StrictHostKeyChecking yes\n  BatchMode yes\n  ConnectTimeout 30\n"
            + (self.client_config or "  LogLevel ERROR\n"))

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, *, timeout: float = 90) -> Sshd:
        """Start sshd (on the same port as before, if it ran) and wait until ``ssh exo-b true`` works."""
        if self.running:
            return self
        if os.geteuid() == 0 and not os.path.isdir("/run/sshd"):  # the privilege separation folder
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        first = not self.log.exists()
        for attempt in range(5):
            check = subprocess.run([str(self.binary), "-t", "-f", str(self.sshd_config)], capture_output=True, text=True)
            assert check.returncode == 0, f"sshd -t: {check.stderr}"
            with open(self.log, "ab") as err:
                self.proc = subprocess.Popen([str(self.binary), "-D", "-f", str(self.sshd_config), "-E", str(self.log)],
                                             stdin=subprocess.DEVNULL, stdout=err, stderr=err, start_new_session=True)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and self.proc.poll() is None:
                if self.reachable():
                    return self
                time.sleep(0.1)
            if self.proc.poll() is None:
                self.stop()
                raise AssertionError(f"sshd did not accept ssh within {timeout}s; log:\n{self._log_tail()}")
            if first and attempt < 4 and "Address already in use" in self._log_tail():
                self._write_configs(_free_port())  # the port was taken meanwhile: another one
                continue
            break
        raise AssertionError(f"sshd exited (code {self.proc.returncode}); log:\n{self._log_tail()}")

    def stop(self) -> None:
        """Stop sshd and every connection it serves (ssh then exits 255: the host is unreachable).

        Only sshd's own processes end: what a remote command started and detached (a tmux
        server, a headless agent) keeps running, as on a host whose network is down.
        """
        if self.proc is None:
            return
        sessions = [p for p in _descendants(self.proc.pid) if (a := _argv(p)) and "sshd" in Path(a[0]).name]
        kill_pids([self.proc.pid])
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=30)
        sessions += [p for p in _pids_connected_to(self.port, server_side=True) if _read(f"/proc/{p}/comm").strip() == b"sshd"]
        kill_pids([p for p in set(sessions) if _alive(p)])
        self.proc = None
        wait_until(lambda: not _port_open(self.port), what=f"port {self.port} to close")

    def kill_clients(self) -> None:
        kill_ssh_clients(self.config, self.port)

    def kill_remote_commands(self) -> None:
        """Kill what this sshd's sessions started (and still carries their ``SSH_CONNECTION``)."""
        kill_pids(processes_where(lambda pid: _under_sshd(pid, self.port)))

    def close(self) -> None:
        """Kill the clients and the remote commands, stop the server, remove the folder."""
        self.kill_clients()
        self.kill_remote_commands()
        self.stop()
        if self in _LIVE:
            _LIVE.remove(self)
        shutil.rmtree(self.dir, ignore_errors=True)

    def _log_tail(self) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-20:])
        except OSError:
            return "(no log)"


@atexit.register
def _stop_all() -> None:
    for server in list(_LIVE):
        with contextlib.suppress(Exception):
            server.close()
    for path in _TMPDIRS:
        shutil.rmtree(path, ignore_errors=True)


# -- the secret scanner ------------------------------------------------------------------------
def _find_in_file(path: Path, needle: bytes) -> bool:
    chunk, tail = 1 << 20, b""
    try:
        with open(path, "rb") as fh:
            while block := fh.read(chunk):
                if needle in tail + block:
                    return True
                tail = block[-(len(needle) - 1):] if len(needle) > 1 else b""
    except OSError:
        return False
    return False


def _git_objects_have(git_dir: Path, needle: bytes) -> bool:
    """Whether any object of the repository (loose or packed, decompressed) contains ``needle``."""
    proc = subprocess.Popen(["git", "--git-dir", str(git_dir), "cat-file", "--batch-all-objects", "--batch"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    assert proc.stdout is not None
    found, tail = False, b""
    while block := proc.stdout.read(1 << 20):
        if needle in tail + block:
            found = True
        tail = block[-len(needle):]
    proc.wait()
    return found


def _is_git_dir(path: Path) -> bool:
    return (path / "objects").is_dir() and (path / "HEAD").is_file() and not path.is_symlink()


def _scan_files(canary: bytes, roots: Iterable[Path]) -> list[str]:
    found: list[str] = []
    seen: set[tuple[int, int]] = set()

    def visit(path: Path) -> None:
        try:
            st = os.lstat(path)
        except OSError:
            return
        if (st.st_dev, st.st_ino) in seen:
            return
        seen.add((st.st_dev, st.st_ino))
        # regular files only: never a socket, FIFO, device, nor a symlink (maybe out of the roots)
        if stat.S_ISREG(st.st_mode) and _find_in_file(path, canary):
            found.append(f"file {path}")
        if stat.S_ISDIR(st.st_mode) and _is_git_dir(path) and _git_objects_have(path, canary):
            found.append(f"git objects of {path}")

    for root in roots:
        if os.path.islink(root) or not os.path.exists(root):
            continue
        visit(Path(root))
        for top, dirs, files in os.walk(root, followlinks=False):
            for name in files + dirs:
                visit(Path(top, name))
    return found


def _scan_argv(canary: bytes) -> list[str]:
    found = []
    for pid in _pids():
        raw = _read(f"/proc/{pid}/cmdline")
        if canary in raw:
            shown = raw.replace(b"\0", b" ").decode(errors="replace").strip()
            found.append(f"argv of pid {pid}: {shown[:300]}")
    return found


def _tmux(sock: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
    proc = subprocess.run(["tmux", "-S", str(sock), *args], capture_output=True, env=env, timeout=60,
                          stdin=subprocess.DEVNULL)
    return proc.stdout.decode(errors="replace") if proc.returncode == 0 else ""


def _scan_tmux(canary: str, sockets: Iterable[Path]) -> list[str]:
    found = []
    for sock in sockets:
        if not sock.is_socket():
            continue
        if canary in _tmux(sock, "show-environment", "-g"):
            found.append(f"tmux {sock}: global environment")
        for line in _tmux(sock, "list-sessions", "-F", "#{session_id} #{session_name}").splitlines():
            sid, _, sname = line.partition(" ")
            if canary in _tmux(sock, "show-environment", "-t", sid):
                found.append(f"tmux {sock}: environment of session {sname}")
    return found


def scan_secret(canary: str, roots: Iterable[Path], tmux_sockets: Iterable[Path], *,
                logs: Iterable[Path] = ()) -> list[str]:
    """Every place ``canary`` appears, as readable findings (an empty list: nowhere).

    Looks in: every regular file under ``roots`` (binary-safe; sockets, FIFOs and symlinks are
    skipped, so nothing outside the roots is read) and every git object database there
    (decompressed, so a committed secret is found); the argv of every process of the machine
    (``/proc/*/cmdline``); the global and each session's environment of the tmux servers on
    ``tmux_sockets``; every sshd log of this run and ``logs``.
    Not in processes' environments: an agent's own environment legitimately holds its keys.
    """
    needle = canary.encode()
    found = _scan_files(needle, roots) + _scan_argv(needle) + _scan_tmux(canary, tmux_sockets)
    for log in [*_SSHD_LOGS, *logs]:
        if log.is_file() and _find_in_file(log, needle):
            found.append(f"log {log}")
    return found


def tmux_sockets_in(tmux_tmpdir: Path) -> list[Path]:
    """The tmux server sockets under a ``TMUX_TMPDIR`` (``tmux-<uid>/*``)."""
    folder = tmux_tmpdir / f"tmux-{os.getuid()}"
    return sorted(p for p in folder.iterdir() if p.is_socket()) if folder.is_dir() else []


def kill_tmux_servers(tmux_tmpdir: Path) -> None:
    for sock in tmux_sockets_in(tmux_tmpdir):
        _tmux(sock, "kill-server")


# -- the two hosts -----------------------------------------------------------------------------
def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def _write_toml(path: Path, tables: dict[str, Any]) -> None:
    """Merge ``tables`` (two levels deep) into the TOML file ``path``."""
    import tomllib

    import tomli_w

    data: dict[str, Any] = tomllib.loads(path.read_text()) if path.exists() else {}
    for key, value in tables.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            for sub, item in value.items():
                if isinstance(item, dict) and isinstance(data[key].get(sub), dict):
                    data[key][sub].update(item)
                else:
                    data[key][sub] = item
        else:
            data[key] = value
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(tomli_w.dumps(data))


class TwoHosts:
    """Host A (this process, clone ``a``) and host B (clone ``b`` over ssh), one ``origin``, one store."""

    def __init__(self, sshd: Sshd, repo: Path, a_home: Path, tmp: Path, store_url: str,
                 monkeypatch: pytest.MonkeyPatch) -> None:
        self.sshd = sshd
        self.name = HOST_NAME
        self.tmp = tmp
        self.store_url = store_url
        # git: a bare origin made from the test's repository, which becomes clone A
        self.origin = tmp / "origin.git"
        _git(tmp, "clone", "-q", "--bare", str(repo), str(self.origin))
        self.a = repo
        _git(repo, "remote", "add", "origin", str(self.origin))
        _git(repo, "fetch", "-q", "origin")
        _git(repo, "branch", "-q", "--set-upstream-to=origin/main", "main")
        self.b_root = tmp / "host-b"
        self.b = self.b_root / "clone"
        self.b_root.mkdir()
        _git(tmp, "clone", "-q", str(self.origin), str(self.b))
        # host A: the test process (the per-test HOME of ``isolate``) with its own short TMUX_TMPDIR
        self.a_home = a_home
        self.a_config = Path(os.environ["EXO_CONFIG_DIR"]) / "config.toml"
        self.a_tmux_tmpdir = short_tmpdir("exo-ta-")
        monkeypatch.setenv("TMUX_TMPDIR", str(self.a_tmux_tmpdir))
        monkeypatch.setenv("EXO_STORE_URL", store_url)
        # host B: everything it knows comes from the ``env -i`` prefix of its exo command
        self.b_home = self.b_root / "home"
        self.b_home.mkdir()
        (self.b_home / ".gitconfig").write_text(GITCONFIG)
        self.b_config_dir = self.b_home / ".config" / "exo"
        self.b_config_dir.mkdir(parents=True)
        self.b_config = self.b_config_dir / "config.toml"
        self.b_tmux_tmpdir = short_tmpdir("exo-tb-")
        tools = {str(Path(t).parent) for t in (shutil.which("git"), shutil.which("tmux")) if t}
        path = [str(VENV_BIN), *sorted(tools - {"/usr/bin", "/bin"}), "/usr/local/bin", "/usr/bin", "/bin"]
        self.b_environ: dict[str, str] = {
            "PATH": ":".join(path), "HOME": str(self.b_home), "USER": USER, "LOGNAME": USER,
            "LANG": "C.UTF-8", "NO_COLOR": "1", "COLUMNS": "80",
            "TMUX_TMPDIR": str(self.b_tmux_tmpdir), "XDG_CONFIG_HOME": str(self.b_home / ".config"),
            "EXO_CONFIG_DIR": str(self.b_config_dir), "GIT_CONFIG_GLOBAL": str(self.b_home / ".gitconfig"),
            **GIT_IDENTITY,
        }
        self.write_a_config()

    # -- configuration
    @property
    def b_env_prefix(self) -> list[str]:
        """``env -i VAR=... ...``: B's whole environment (nothing of sshd's login environment)."""
        return ["env", "-i", *(f"{k}={v}" for k, v in sorted(self.b_environ.items()))]

    @property
    def b_exo(self) -> str:
        """The ``exo`` command of ``[hosts.b]``: B's environment, then this venv's exo."""
        return shlex.join([*self.b_env_prefix, str(EXO_BIN)])

    def write_a_config(self) -> None:
        """``[ssh] command`` and ``[hosts.b]`` in A's user config (again after changing ``b_environ``)."""
        _write_toml(self.a_config, {"ssh": {"command": self.sshd.ssh_command},
                                    "hosts": {self.name: {"ssh": self.sshd.alias, "path": str(self.b), "exo": self.b_exo}}})

    def set_b_env(self, **variables: str) -> None:
        """Add variables to B's environment (and A's ``[hosts.b] exo`` with them)."""
        self.b_environ.update(variables)
        self.write_a_config()

    def set_b_store(self, url: str | None = None) -> None:
        """Give B the store in its own user config (by default, A's store)."""
        _write_toml(self.b_config, {"store": {"url": url if url is not None else self.store_url}})

    def reach_a_from_b(self, sshd_a: Sshd, name: str = "a") -> None:
        """Let exo on B reach A as ``[hosts.<name>]`` through ``sshd_a`` (B's config; A runs with its own
        environment as the test has it, ``EXO_HOST`` = ``name``: set it for the test process too)."""
        a_environ = {k: os.environ[k] for k in ("HOME", "EXO_CONFIG_DIR", "XDG_CONFIG_HOME", "GIT_CONFIG_GLOBAL",
                                                "TMUX_TMPDIR", "EXO_STORE_URL") if k in os.environ}
        a_environ.update(PATH=self.b_environ["PATH"], USER=USER, LOGNAME=USER, LANG="C.UTF-8", NO_COLOR="1",
                         EXO_HOST=name, **GIT_IDENTITY)
        a_exo = shlex.join(["env", "-i", *(f"{k}={v}" for k, v in sorted(a_environ.items())), str(EXO_BIN)])
        _write_toml(self.b_config, {"ssh": {"command": sshd_a.ssh_command},
                                    "hosts": {name: {"ssh": sshd_a.alias, "path": str(self.a), "exo": a_exo}}})

    def exo_on_b(self, *args: str, timeout: float = 300, **env: str) -> subprocess.CompletedProcess[str]:
        """``exo *args`` run on B by B's human (a process here with B's environment plus ``env``, no ssh)."""
        return subprocess.run([str(EXO_BIN), *args], cwd=self.b, env={**self.b_environ, **env}, capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    # -- running things on B
    def b_command(self, *argv: str | Path) -> str:
        """The remote shell command running ``argv`` in clone B with B's environment."""
        return f"cd {shlex.quote(str(self.b))} && exec " + shlex.join([*self.b_env_prefix, *map(str, argv)])

    def run_b(self, *argv: str | Path, input: str | None = None, ssh_opts: Iterable[str] = (),
              timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` on host B (through sshd) in clone B with B's environment; output captured."""
        return self.sshd.ssh(*ssh_opts, self.sshd.alias, self.b_command(*argv), input=input, timeout=timeout)

    def exo_b(self, *args: str, input: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run ``exo *args`` on host B, as exo's ``host-call`` would run there."""
        return self.run_b(EXO_BIN, *args, input=input, timeout=timeout)

    # -- reachability
    def stop_sshd(self) -> None:
        """Host B becomes unreachable (ssh exits 255); its detached processes keep running."""
        self.sshd.stop()

    def start_sshd(self) -> None:
        """Host B is reachable again (same port, same keys)."""
        self.sshd.start()

    # -- secrets
    def tmux_sockets(self) -> list[Path]:
        return tmux_sockets_in(self.a_tmux_tmpdir) + tmux_sockets_in(self.b_tmux_tmpdir)

    def runtime_dirs(self) -> list[Path]:
        """exo's runtime folders of both clones (exo's rule: ``/run/user/<uid>/exo-<h>`` or
        ``/tmp/exo-<uid>-<h>``, ``h`` the sha256 of the real path of ``<git common dir>/exo``)."""
        uid, found = os.getuid(), []
        for clone in (self.a, self.b):
            h = hashlib.sha256(os.path.realpath(clone / ".git" / "exo").encode()).hexdigest()[:12]
            found += [Path(f"/run/user/{uid}/exo-{h}"), Path(f"/tmp/exo-{uid}-{h}")]
        return found

    def scan_roots(self) -> list[Path]:
        """Both HOMEs, both clones (state folders and worktrees inside), origin, the test's tmp
        folder, both TMUX_TMPDIRs, sshd's folder and exo's runtime folders of both clones."""
        return [self.tmp, self.a_home, self.a, self.b_root, self.origin, self.a_tmux_tmpdir, self.b_tmux_tmpdir,
                self.sshd.dir, *self.runtime_dirs()]

    def scan(self, canary: str, *extra_roots: Path) -> list[str]:
        """``scan_secret`` over everything both hosts have (see ``scan_roots``) and their tmux servers."""
        return scan_secret(canary, [*self.scan_roots(), *extra_roots], self.tmux_sockets())

    # -- teardown
    def close(self) -> None:
        """Kill the ssh clients (ControlMasters), both hosts' tmux servers and every process B or
        an sshd session started (HOME is B's, or sshd's SSH_CONNECTION, or cwd in the test's folders)."""
        self.sshd.kill_clients()
        for tmpdir in (self.a_tmux_tmpdir, self.b_tmux_tmpdir):
            kill_tmux_servers(tmpdir)
        home = b"HOME=" + str(self.b_home).encode()
        kill_pids(processes_where(lambda pid: _environ_has(pid, home) or _under_sshd(pid, self.sshd.port)
                                  or _cwd_under(pid, [self.tmp, self.b_root, self.a_tmux_tmpdir, self.b_tmux_tmpdir])))
        for tmpdir in (self.a_tmux_tmpdir, self.b_tmux_tmpdir):
            shutil.rmtree(tmpdir, ignore_errors=True)


# -- fixtures (conftest.py imports them) -------------------------------------------------------
@pytest.fixture(scope="session")
def sshd_session() -> Iterator[Sshd]:
    """One private sshd for the whole run (stopped, with every client of its config, at the end)."""
    server = Sshd()
    try:
        yield server.start()
    finally:
        server.close()


@pytest.fixture
def sshd(sshd_session: Sshd) -> Iterator[Sshd]:
    """The run's sshd, running when the test starts; the test's ssh clients and what they started
    remotely are killed at its end."""
    sshd_session.start()
    yield sshd_session
    sshd_session.kill_clients()
    sshd_session.kill_remote_commands()


@pytest.fixture
def two_hosts(sshd: Sshd, repo: Path, isolate: Path, pg_cluster: Any, tmp_path: Path,
              monkeypatch: pytest.MonkeyPatch) -> Iterator[TwoHosts]:
    """Host A (the test's ``repo``), host B over ssh, their ``origin`` and the PostgreSQL store."""
    hosts = TwoHosts(sshd, repo, isolate, tmp_path, pg_cluster.url(), monkeypatch)
    try:
        yield hosts
    finally:
        hosts.close()
