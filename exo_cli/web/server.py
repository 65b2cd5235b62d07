"""Run ``exo ui``: uvicorn on a socket bound to 127.0.0.1, the live hub, and a clean stop.

The socket is bound before anything else (a port in use is a clear error, and port 0 picks a
free one). Uvicorn's access log is off and its level is ``warning``, so the one-time token is
never logged. Ctrl-C (or SIGTERM) ends every event stream at once (``Hub.close``) before uvicorn
waits for its connections, so the server stops within ``STOP`` seconds with pages open.
"""

from __future__ import annotations

import contextlib
import errno
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any

import uvicorn

from exo_cli.errors import EnvironmentError_
from exo_cli.web.app import build
from exo_cli.web.auth import Auth
from exo_cli.web.live import Hub

STOP = 1  # seconds uvicorn waits for open connections once asked to stop


class Server(uvicorn.Server):
    """uvicorn's server, whose stop also ends the pages' event streams."""

    def __init__(self, config: uvicorn.Config, hub: Hub) -> None:
        super().__init__(config)
        self.hub = hub
        self.on_exit: Callable[[], None] = lambda: None  # uvicorn raises SIGTERM again once stopped: no finally runs

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.hub.close()
        self.on_exit()
        super().handle_exit(sig, frame)


def bind(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise EnvironmentError_(f"Port {port} on 127.0.0.1 is in use", hint="Pick another with --port, "
                                    "or --port 0 for any free one.", port=port) from None
        raise EnvironmentError_(f"Cannot listen on 127.0.0.1:{port}: {exc.strerror}", port=port) from None
    sock.listen(128)
    return sock


@dataclass
class Running:
    """A server running in a thread (tests, the benchmark, the screenshot script)."""

    base: str
    auth: Auth
    hub: Hub
    server: Server
    thread: threading.Thread

    @property
    def url(self) -> str:
        return f"{self.base}/?token={self.auth.token}"

    def stop(self) -> None:
        self.hub.close()
        self.server.should_exit = True
        self.thread.join(10)


def make(env: Any, sock: socket.socket, *, on_exchange: Callable[[], None] | None = None,
         fallback: float = 5.0, pane_every: float = 1.0) -> tuple[Server, Auth, Hub]:
    auth, hub = Auth(), Hub(env, fallback=fallback, pane_every=pane_every)
    config = uvicorn.Config(build(env, auth, hub, on_exchange=on_exchange), log_level="warning", access_log=False,
                            lifespan="off", server_header=False, timeout_graceful_shutdown=STOP,
                            timeout_keep_alive=5)
    return Server(config, hub), auth, hub


def start(env: Any, *, port: int = 0, fallback: float = 5.0, pane_every: float = 1.0) -> Running:
    """Serve in a thread; return when it accepts connections."""
    import time

    sock = bind(port)
    server, auth, hub = make(env, sock, fallback=fallback, pane_every=pane_every)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True, name="exo-ui")
    hub.start()
    thread.start()
    while not server.started and thread.is_alive():
        time.sleep(0.01)
    return Running(f"http://127.0.0.1:{sock.getsockname()[1]}", auth, hub, server, thread)


def run(env: Any, *, port: int, open_browser: bool, say: Callable[[str], None]) -> None:
    """Serve until Ctrl-C: print the one-time link, open the browser through a private file if asked."""
    from exo_cli.adapters import browser

    sock = bind(port)
    opened: list[Any] = [None]
    server, auth, hub = make(env, sock, on_exchange=lambda: browser.forget(opened[0]))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/?token={auth.token}"
    server.on_exit = lambda: browser.forget(opened[0])
    say(f"exo ui: {url}")
    say("The link works once (it signs one browser in); Ctrl-C stops the server.")
    if open_browser:
        if browser.can_open(env.environ):
            opened[0] = browser.redirect_file(env.runtime_dir, url)
            if not browser.open_file(opened[0]):
                say("No browser could be opened: open the link above yourself.")
        else:
            say("No display here: open the link above in a browser (over `ssh -L`, the same port).")
    hub.start()
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn raises the Ctrl-C again once stopped: the normal way out, not an abort
        pass
    finally:
        hub.close()
        browser.forget(opened[0])
        with contextlib.suppress(OSError):
            sock.close()
