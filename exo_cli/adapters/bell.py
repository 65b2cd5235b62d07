"""Doorbells: wake-ups between processes through Unix datagram sockets in a short folder.

A waiter binds one socket per key (``bell/<key>.<pid>.<n>``); a writer, after its commit,
sends one byte to every socket of the key. Nobody polls the database in a loop.

A hook rings its parent at the end of every turn, so ``ring`` stays cheap: it opens a socket
only when the key has a listener, through ``_socket`` (the ``socket`` module's own C core:
importing ``socket`` builds its enums, a large share of a hook's cost).
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket
    from collections.abc import Iterable, Iterator
    from pathlib import Path


class Doorbell:
    """Wake-ups between processes through Unix datagram sockets in a short folder."""

    _seq = itertools.count()

    def __init__(self, runtime_dir: Path) -> None:
        self.dir = runtime_dir / "bell"

    def ring(self, key: str) -> int:
        """Wake every waiter on ``key``; return how many sockets were rung."""
        prefix = f"{key}."
        rung = 0
        try:
            names = [n for n in os.listdir(self.dir) if n.startswith(prefix)]
        except FileNotFoundError:
            return 0
        if not names:
            return 0
        import _socket

        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_DGRAM)
        sock.setblocking(False)
        try:
            for name in names:
                path = os.path.join(self.dir, name)
                try:
                    sock.sendto(b"!", path)
                    rung += 1
                except OSError as exc:
                    if exc.errno in (errno.ECONNREFUSED, errno.ENOENT, errno.ENOTSOCK):
                        with contextlib.suppress(OSError):
                            os.unlink(path)  # a waiter that died without cleaning up
                    # EAGAIN: its queue is full, so it is already awake.
        finally:
            sock.close()
        return rung

    @contextlib.contextmanager
    def listen(self, keys: Iterable[str]) -> Iterator[Waiter]:
        """Bind one socket per key; the waiter wakes when any of them is rung."""
        import socket

        socks: list[socket.socket] = []
        paths: list[str] = []
        try:
            for key in keys:
                path = os.path.join(self.dir, f"{key}.{os.getpid()}.{next(self._seq)}")
                s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                self._bind(s, path)
                s.setblocking(False)
                socks.append(s)
                paths.append(path)
            yield Waiter(socks)
        finally:
            for s in socks:
                s.close()
            for p in paths:
                with contextlib.suppress(OSError):
                    os.unlink(p)


    def _bind(self, sock: socket.socket, path: str) -> None:
        """Bind ``path``, making the (private) folders first; again if the runtime folder was just removed."""
        from exo_cli.adapters.files import ensure_private_dir

        for attempt in range(3):
            ensure_private_dir(ensure_private_dir(self.dir.parent) / self.dir.name)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            try:
                sock.bind(path)
                return
            except FileNotFoundError:  # released by another process meanwhile (files.release_runtime_dir)
                if attempt == 2:
                    raise


class Waiter:
    """A set of bound doorbell sockets."""

    def __init__(self, socks: list[socket.socket]) -> None:
        self.socks = socks

    def wait(self, timeout: float | None) -> bool:
        """Block until rung or ``timeout``; drain pending rings; True when rung."""
        if not self.socks:
            if timeout:
                time.sleep(timeout)
            return False
        import select

        ready, _, _ = select.select(self.socks, [], [], timeout)
        for s in ready:
            with contextlib.suppress(OSError):
                while s.recv(16):
                    pass
        return bool(ready)
