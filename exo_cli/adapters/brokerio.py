"""The broker's wire: Unix stream sockets carrying length-prefixed JSON frames (stdlib only).

A frame is 4 bytes (big-endian length) then that many bytes of UTF-8 JSON, one object; never
pickle (the peer is not trusted until the broker has checked it). A connection starts with a
hello frame and its answer (``adapters.broker``); MCP connections then switch to the MCP stdio
framing (newline-delimited JSON-RPC) on the same socket.

Sockets are published atomically (bound under a temporary name in the same folder, then
renamed over the final name) so a reader never sees a half-made socket and a stale file is
replaced in one step; the inode is kept so that the owner can tell whether its path still
names its socket (``owns``). Relays (a hook runs on every tool call) reach this module on their
hot path, so the client side uses ``_socket``, the ``socket`` module's own C core.
"""

from __future__ import annotations

import errno
import os
import stat

from exo_cli.errors import EnvironmentError_, InvalidInput

TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket
    from typing import Any

MAX_FRAME = 64 << 20  # bytes of one frame; a larger one is refused (InvalidInput)
# The longest socket path exo binds: sun_path holds 108 bytes on Linux and 104 on macOS, NUL included.
MAX_PATH = 103
# errnos of a connect() that found nobody listening: no file, or a file nobody has bound
GONE = frozenset({errno.ENOENT, errno.ECONNREFUSED, errno.ENOTSOCK, errno.ENOTDIR})


class Closed(ConnectionError):
    """The other side closed the connection in the middle of a frame."""


def check_path(path: str) -> None:
    """EnvironmentError_ naming ``path`` when it is too long for a Unix socket."""
    size = len(os.fsencode(path))
    if size > MAX_PATH:
        raise EnvironmentError_(
            f"The socket path {path} is {size} bytes long; a Unix socket path holds at most {MAX_PATH}",
            hint="exo keeps its sockets in a short runtime folder (/run/user/UID or /tmp): make sure one of "
            "them is usable.", path=path)


def connect(path: str, timeout: float | None = 10.0) -> Any:
    """A stream socket connected to ``path`` (OSError when nobody listens there: ``GONE`` errnos)."""
    import _socket

    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(path)
    except BaseException:
        sock.close()
        raise
    return sock


def answers(path: str, timeout: float = 2.0) -> bool:
    """Whether something accepts connections on ``path`` (a stale socket file does not)."""
    try:
        sock = connect(path, timeout)
    except OSError:
        return False
    sock.close()
    return True


def send(sock: Any, obj: dict[str, Any]) -> None:
    """Send one frame holding ``obj`` (InvalidInput when it is larger than ``MAX_FRAME``)."""
    import json

    data = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")
    if len(data) > MAX_FRAME:
        raise InvalidInput(f"A request of {len(data)} bytes is larger than exo's limit of {MAX_FRAME} bytes",
                           size=len(data))
    sock.sendall(len(data).to_bytes(4, "big") + data)


def _exactly(sock: Any, size: int, *, first: bool = False) -> bytes | None:
    """``size`` bytes from ``sock``; None at a clean end before the first byte (``first``), else Closed."""
    parts: list[bytes] = []
    got = 0
    while got < size:
        chunk = sock.recv(min(size - got, 1 << 20))
        if not chunk:
            if first and got == 0:
                return None
            raise Closed("the connection closed in the middle of a frame")
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def recv(sock: Any, *, limit: int = MAX_FRAME) -> dict[str, Any] | None:
    """The next frame's object; None when the other side closed cleanly between frames.

    ValueError for a frame that is not one JSON object or is longer than ``limit``; Closed when
    the connection ends inside a frame.
    """
    import json

    head = _exactly(sock, 4, first=True)
    if head is None:
        return None
    size = int.from_bytes(head, "big")
    if size > limit:
        raise ValueError(f"a frame of {size} bytes is larger than the limit of {limit}")
    body = _exactly(sock, size) or b""
    obj = json.loads(body.decode("utf-8", "surrogatepass"))
    if not isinstance(obj, dict):
        raise ValueError("a frame must hold one JSON object")
    return obj


def peer(sock: Any) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end of a Unix socket (Linux SO_PEERCRED).

    The kernel fills it in at connect time; a pid seen from inside a pid namespace is translated
    to this side's. Where SO_PEERCRED does not exist (macOS: LOCAL_PEERCRED has no pid), (0, -1, -1):
    the caller then relies on what needs no pid.
    """
    import _socket

    option = getattr(_socket, "SO_PEERCRED", None)
    if option is None:
        return 0, -1, -1
    import sys

    raw = sock.getsockopt(_socket.SOL_SOCKET, option, 12)  # struct ucred: pid, uid, gid (native ints)
    pid, uid, gid = (int.from_bytes(raw[i:i + 4], sys.byteorder, signed=True) for i in (0, 4, 8))
    return pid, uid, gid


def listen(path: str, *, backlog: int = 64) -> tuple[socket.socket, int]:
    """Publish a listening socket at ``path`` atomically; (the socket, its inode).

    Bound under a temporary name in the same folder (mode 0600 from the umask), then renamed over
    ``path``: a stale socket file there is replaced in one step, and a client never connects to a
    socket that is not listening yet. The caller holds whatever lock makes it the one owner.
    """
    import socket

    check_path(path)
    folder, name = os.path.split(path)
    tmp = os.path.join(folder, f".{name}.{os.getpid()}")
    check_path(tmp)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        sock.bind(tmp)
        sock.listen(backlog)
        os.rename(tmp, path)
        inode = os.lstat(path).st_ino
    except BaseException:
        sock.close()
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    finally:
        os.umask(old)
    return sock, inode


def owns(path: str, inode: int) -> bool:
    """Whether ``path`` still names the socket whose inode is ``inode`` (not replaced, not removed)."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISSOCK(st.st_mode) and st.st_ino == inode


def unlink_owned(path: str, inode: int) -> bool:
    """Remove ``path`` if it still names our socket; True when removed (never another owner's)."""
    return owns(path, inode) and _unlink(path)


def close_owned(sock: socket.socket, path: str, inode: int, *, keep_folder: bool = False) -> None:
    """Close a listening socket, remove its file if still ours and then its folder if that is empty.

    ``keep_folder``: the folder stays (a broker that stops while its agent lives: a sandbox has that very
    folder bound inside, so the next broker's socket must appear in it, not in a new folder of that name).
    """
    sock.close()
    if unlink_owned(path, inode) and not keep_folder:
        try:
            os.rmdir(os.path.dirname(path))
        except OSError:
            pass


def unlink_stale(path: str) -> bool:
    """Remove a socket file nobody answers on (True when removed); never a file that is no socket."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISSOCK(st.st_mode) and not answers(path) and _unlink(path)


def _unlink(path: str) -> bool:
    try:
        os.unlink(path)
    except OSError:
        return False
    return True
