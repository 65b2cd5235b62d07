"""The process readers (adapters/proc.py) and the one file lock (adapters/files.py), on real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

from conftest import wait_for
from exo_cli.adapters import proc
from exo_cli.adapters.files import FileLock, locked

HOLD = "import sys, time; from pathlib import Path; from exo_cli.adapters.files import FileLock; " \
       "lock = FileLock(Path(sys.argv[1])); assert lock.acquire(); lock.write('held'); time.sleep(60)"


def test_a_child_sees_its_ancestors_its_stat_and_its_command_line(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "marker-arg"], cwd=tmp_path)
    try:
        wait_for(lambda: "marker-arg" in proc.cmdline(child.pid), what="child's command line", timeout=60)
        assert proc.ancestors(child.pid)[:2] == [child.pid, os.getpid()]
        st = proc.proc_stat(child.pid)
        assert st is not None and st.ppid == os.getpid() and st.state not in ("Z", "X")
        assert proc.proc_start_time(child.pid) == st.start_time
        assert proc.pid_alive(child.pid, st.start_time) and not proc.pid_alive(child.pid, st.start_time + 1)
        inside = proc.processes_inside(str(tmp_path))
        assert [p["pid"] for p in inside] == [child.pid]
        assert inside[0]["pgid"] == st.pgrp and "marker-arg" in inside[0]["command"]
        assert proc.processes_inside(str(tmp_path), exclude={child.pid}) == []
    finally:
        child.kill()
        child.wait()
    assert proc.proc_stat(child.pid) is None and proc.cmdline(child.pid) == "" and proc.ancestors(child.pid) == [child.pid]


def test_a_lock_file_excludes_another_process_until_it_exits(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(path)])
    try:
        wait_for(lambda: path.exists() and path.read_text() == "held", what="the holder's lock", timeout=60)
        with locked(path, blocking=False) as lock:
            assert not lock.held and lock.fd is None
    finally:
        holder.kill()
        holder.wait()
    with locked(path, blocking=False) as lock:  # the lock went with the process
        assert lock.held
    assert oct(path.stat().st_mode & 0o777) == oct(0o600)


def test_threads_of_one_process_exclude_each_other(tmp_path: Path) -> None:
    path = tmp_path / "t.lock"
    inside, clashes = [0], []

    def work() -> None:
        for _ in range(50):
            with locked(path):
                inside[0] += 1
                if inside[0] != 1:
                    clashes.append(inside[0])
                inside[0] -= 1

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert clashes == []
    first = FileLock(path)
    assert first.acquire(blocking=False) and not FileLock(path).acquire(blocking=False)
    first.release()
    first.release()  # a second release is harmless
    assert FileLock(path).acquire(blocking=False)


def test_own_inode_locks_the_file_itself_and_follows_a_replacement(tmp_path: Path) -> None:
    target = tmp_path / "settings.json"
    with locked(target, own_inode=True) as lock:
        assert not lock.held and not target.exists()  # never created
    target.write_text("{}")
    old = FileLock(target, own_inode=True)
    assert old.acquire()
    (tmp_path / "new.json").write_text('{"a": 1}')
    os.replace(tmp_path / "new.json", target)  # a writer replaced the file while we held the old one
    with locked(target, own_inode=True, blocking=False) as lock:
        assert lock.held and lock.fd is not None and os.fstat(lock.fd).st_ino == target.stat().st_ino
    old.release()


def test_a_detached_child_holds_none_of_its_parents_descriptors() -> None:
    """spawn_detached (the stop hook's background check): a pipe the hook inherited (its caller waits for
    EOF on it) is not kept open by the child for the length of the check."""
    import shutil
    import signal

    r, w = os.pipe()
    os.set_inheritable(w, True)  # as a descriptor the hook got from whoever started it
    sleep = shutil.which("sleep")
    assert sleep is not None
    pid = proc.spawn_detached([sleep, "60"], dict(os.environ))
    assert pid is not None
    try:
        wait_for(lambda: os.path.realpath(f"/proc/{pid}/exe") == os.path.realpath(sleep), what="the child's exec")
        held = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
        assert os.readlink(f"/proc/self/fd/{w}") not in held, held  # "pipe:[inode]"
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(r)
        os.close(w)
