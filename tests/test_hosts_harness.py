"""The two-host harness itself (tests/hosts_harness.py): sshd, ControlMaster, B's environment,
the secret scanner (it finds a planted canary, and nothing when the secret goes through stdin),
and an unreachable host that comes back."""

from __future__ import annotations

import hashlib
import os
import pwd
import secrets
import subprocess
import tomllib
from pathlib import Path

from hosts_harness import EXO_BIN, HOST_ALIAS, VENV_BIN, Sshd, TwoHosts, scan_secret, short_tmpdir, wait_until


def _tree_snapshot(folder: Path) -> dict[str, tuple[int, int, int, str]]:
    snap = {}
    if folder.is_dir():
        for path in sorted(folder.rglob("*")):
            st = path.lstat()
            digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
            snap[str(path)] = (st.st_mode, st.st_size, st.st_mtime_ns, digest)
        st = folder.lstat()
        snap[str(folder)] = (st.st_mode, st.st_size, st.st_mtime_ns, "")
    return snap


def _canary() -> str:
    return "tok-" + secrets.token_hex(16)


def _check(sshd: Sshd, control_path: Path) -> subprocess.CompletedProcess[str]:
    return sshd.ssh("-o", f"ControlPath={control_path}/cm-%C", "-O", "check", HOST_ALIAS)


def _warm(sshd: Sshd, control_path: Path, *cmd: str) -> subprocess.CompletedProcess[str]:
    return sshd.ssh("-o", "ControlMaster=auto", "-o", "ControlPersist=600", "-o", f"ControlPath={control_path}/cm-%C",
                    HOST_ALIAS, *cmd)


def test_sshd_is_reachable_through_the_config_only(sshd: Sshd) -> None:
    real_ssh = Path(pwd.getpwuid(os.getuid()).pw_dir) / ".ssh"
    before = _tree_snapshot(real_ssh)
    res = sshd.ssh(HOST_ALIAS, "id -un; echo $HOME")
    assert res.returncode == 0, res.stderr
    user, home = res.stdout.split()
    assert user == pwd.getpwuid(os.getuid()).pw_name
    assert sshd.dir.stat().st_mode & 0o777 == 0o700
    assert "Accepted publickey" in sshd.log.read_text()
    # without the harness's config, the alias means nothing (so nothing of it is in ~/.ssh)
    res = subprocess.run(["ssh", "-F", "/dev/null", "-o", "BatchMode=yes", HOST_ALIAS, "true"], capture_output=True,
                         stdin=subprocess.DEVNULL, timeout=120)
    assert res.returncode == 255
    assert _tree_snapshot(real_ssh) == before


def test_a_control_master_is_reused(sshd: Sshd) -> None:
    cp = short_tmpdir()
    accepted = sshd.log.read_text().count("Accepted publickey")
    first = _warm(sshd, cp, "echo", "one")
    assert first.returncode == 0 and first.stdout == "one\n", first.stderr
    check = _check(sshd, cp)
    assert check.returncode == 0 and "Master running" in check.stderr, check.stderr
    second = _warm(sshd, cp, "echo", "two")
    assert second.returncode == 0 and second.stdout == "two\n", second.stderr
    assert _check(sshd, cp).stderr == check.stderr  # the same master (same pid)
    assert sshd.log.read_text().count("Accepted publickey") == accepted + 1  # one login for both calls
    sshd.kill_clients()
    wait_until(lambda: _check(sshd, cp).returncode != 0, what="the master to end")


def test_the_remote_side_has_b_environment_only(two_hosts: TwoHosts) -> None:
    res = two_hosts.run_b("/usr/bin/env")
    assert res.returncode == 0, res.stderr
    env = dict(line.split("=", 1) for line in res.stdout.splitlines())
    assert env["HOME"] == str(two_hosts.b_home)
    assert env["TMUX_TMPDIR"] == str(two_hosts.b_tmux_tmpdir)
    assert env["EXO_CONFIG_DIR"] == str(two_hosts.b_config_dir)
    assert env["GIT_CONFIG_GLOBAL"] == str(two_hosts.b_home / ".gitconfig")
    assert env["PATH"].split(":")[0] == str(VENV_BIN)
    assert env == two_hosts.b_environ  # nothing of sshd's login environment, nothing of the test process
    assert two_hosts.run_b("pwd").stdout.strip() == str(two_hosts.b)
    # the configured exo command is the same prefix, and exo runs there
    cfg = tomllib.loads(two_hosts.a_config.read_text())
    assert cfg["ssh"]["command"] == two_hosts.sshd.ssh_command
    assert cfg["hosts"]["b"] == {"ssh": HOST_ALIAS, "path": str(two_hosts.b), "exo": two_hosts.b_exo}
    assert two_hosts.b_exo.endswith(str(EXO_BIN))
    version = two_hosts.exo_b("--version")
    assert version.returncode == 0 and version.stdout.strip(), version.stderr
    # the layout: A and B are clones of the same bare origin, at the same commit
    assert two_hosts.run_b("git", "remote", "get-url", "origin").stdout.strip() == str(two_hosts.origin)
    head_b = two_hosts.run_b("git", "rev-parse", "HEAD").stdout.strip()
    assert head_b == subprocess.run(["git", "rev-parse", "origin/main"], cwd=two_hosts.a, capture_output=True,
                                    text=True).stdout.strip()
    assert os.environ["EXO_STORE_URL"] == two_hosts.store_url
    two_hosts.set_b_store()
    assert tomllib.loads(two_hosts.b_config.read_text())["store"]["url"] == two_hosts.store_url


def test_a_secret_through_stdin_is_nowhere_while_the_remote_holds_it(two_hosts: TwoHosts) -> None:
    canary = _canary()
    # a tmux server on B, so its environments are scanned too
    assert two_hosts.run_b("tmux", "new-session", "-d", "-s", "s1", "sleep 600").returncode == 0
    remote = ("IFS= read -r TOKEN || exit 1; "
              "printf '%s' \"$TOKEN\" | sha256sum; "
              "IFS= read -r DONE; "
              "printf '%s' \"$TOKEN\" | sha256sum")
    proc = subprocess.Popen(two_hosts.sshd.ssh_argv(HOST_ALIAS, two_hosts.b_command("bash", "-c", remote)),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(canary + "\n")
    proc.stdin.flush()
    digest = hashlib.sha256(canary.encode()).hexdigest()
    assert proc.stdout.readline().split()[0] == digest  # the remote holds it now
    assert len(two_hosts.tmux_sockets()) == 1
    assert two_hosts.scan(canary) == []
    proc.stdin.write("done\n")
    proc.stdin.close()
    assert proc.stdout.readline().split()[0] == digest  # ... and held it all through the scan
    assert proc.wait(timeout=120) == 0


def test_the_scanner_finds_a_planted_secret_everywhere(two_hosts: TwoHosts) -> None:
    canary = _canary()
    assert two_hosts.run_b("tmux", "new-session", "-d", "-s", "s1", "sleep 600").returncode == 0
    # on a command line: the local ssh client's argv and the remote shell's
    proc = subprocess.Popen(two_hosts.sshd.ssh_argv(HOST_ALIAS, f"sleep 600; : {canary}"), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        found = wait_until(lambda: (f := [x for x in two_hosts.scan(canary) if x.startswith("argv")])
                           and len(f) >= 2 and f, what="the canary in two processes' argv")
        assert any(f"argv of pid {proc.pid}:" in x for x in found)
    finally:
        proc.kill()
        proc.wait()
    # in files (also binary, and in a git object only), tmux environments and sshd's log
    (two_hosts.b_home / "leak.bin").write_bytes(b"\0\1" + canary.encode() + b"\xff")
    assert two_hosts.run_b("tmux", "set-environment", "-g", "LEAK", canary).returncode == 0
    assert two_hosts.run_b("tmux", "set-environment", "-t", "s1", "LEAK", canary).returncode == 0
    (two_hosts.a / "secret.txt").write_text(canary)
    for args in (["add", "secret.txt"], ["commit", "-qm", "leak"], ["rm", "-q", "secret.txt"], ["commit", "-qm", "gone"]):
        subprocess.run(["git", *args], cwd=two_hosts.a, check=True)
    assert two_hosts.sshd.ssh("-l", canary, HOST_ALIAS, "true").returncode == 255  # "Invalid user <canary>"
    sock = two_hosts.tmux_sockets()[0]
    wait_until(lambda: f"log {two_hosts.sshd.log}" in two_hosts.scan(canary), what="sshd to log the user")
    found = two_hosts.scan(canary)
    for finding in (f"file {two_hosts.b_home / 'leak.bin'}", f"git objects of {two_hosts.a / '.git'}",
                    f"tmux {sock}: global environment", f"tmux {sock}: environment of session s1",
                    f"log {two_hosts.sshd.log}"):
        assert finding in found, found
    assert not any("secret.txt" in f for f in found)  # removed from the checkout


def test_the_scanner_reads_no_socket_fifo_or_symlink_out_of_its_roots(tmp_path: Path) -> None:
    canary = _canary()
    outside, root = tmp_path / "outside", tmp_path / "root"
    outside.mkdir()
    root.mkdir()
    (outside / "secret").write_text(canary)
    (root / "link").symlink_to(outside / "secret")
    (root / "dirlink").symlink_to(outside)
    os.mkfifo(root / "fifo")  # opening it would block the scan forever
    (root / "clean").write_text("nothing here")
    assert scan_secret(canary, [root], [root / "no-such-socket"]) == []
    (root / "sub").mkdir()
    (root / "sub" / "found").write_bytes(canary.encode() * 2)
    assert scan_secret(canary, [root], []) == [f"file {root / 'sub' / 'found'}"]


def test_stop_sshd_makes_the_host_unreachable_until_start(two_hosts: TwoHosts) -> None:
    cp = short_tmpdir()
    sshd = two_hosts.sshd
    port = sshd.port
    assert _warm(sshd, cp, "true").returncode == 0  # a live master: stop must cut it too
    assert two_hosts.run_b("tmux", "new-session", "-d", "-s", "s1", "sleep 600").returncode == 0
    two_hosts.stop_sshd()
    wait_until(lambda: _warm(sshd, cp, "true").returncode == 255, what="ssh to fail with 255")
    assert sshd.ssh(HOST_ALIAS, "true").returncode == 255
    assert len(two_hosts.tmux_sockets()) == 1  # what B runs detached survives, as on a cut network
    two_hosts.start_sshd()
    assert sshd.port == port
    assert _warm(sshd, cp, "true").returncode == 0
    assert two_hosts.run_b("tmux", "has-session", "-t", "s1").returncode == 0
