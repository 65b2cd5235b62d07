"""Who may use the page: a one-time token exchanged for a cookie, and the checks on every request.

The URL ``exo ui`` prints carries a one-time token; the first request with it gets an HttpOnly,
SameSite=Strict session cookie and a redirect to the same page without the token (so that it
stays in no history, no Referer and no screenshot). Every request must name this server in its
Host header (127.0.0.1, localhost or [::1], any port: ``ssh -L`` may forward another port), which
defeats DNS rebinding; every state-changing request must also carry an Origin equal to that host
and the page's header token (``X-Exo-Token``), which a cross-site form cannot send. Pure Python:
no web framework here, so the rules are tested without a server.
"""

from __future__ import annotations

import hmac
import secrets
import threading
from dataclasses import dataclass, field

COOKIE = "exo_ui"
HEADER = "x-exo-token"
LOCAL_NAMES = ("127.0.0.1", "localhost", "[::1]")


def host_name(host: str) -> str:
    """``127.0.0.1:8080`` -> ``127.0.0.1``; ``[::1]:80`` -> ``[::1]``."""
    if host.startswith("["):
        return host[: host.find("]") + 1] if "]" in host else host
    return host.rsplit(":", 1)[0] if ":" in host else host


def local_host(host: str | None) -> bool:
    """The Host header names this machine's loopback (a foreign name is a DNS-rebinding attempt)."""
    if not host or any(ord(c) < 0x21 or ord(c) > 0x7E for c in host):
        return False
    name = host_name(host).lower()
    port = host[len(name):]
    if port and not (port.startswith(":") and port[1:].isdigit()):
        return False
    return name in LOCAL_NAMES


def same_origin(origin: str | None, host: str | None) -> bool:
    """``Origin`` is exactly ``http://<Host>`` (a missing or ``null`` Origin is refused)."""
    return bool(origin) and bool(host) and local_host(host) and origin == f"http://{host}"


@dataclass
class Auth:
    """The secrets of one ``exo ui`` run: the one-time token, the session cookie, the header token."""

    token: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    session: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    # the cookie's name, one per server (cookies ignore ports: two `exo ui` on one host never share one)
    cookie: str = field(default_factory=lambda: f"{COOKIE}_{secrets.token_hex(4)}")
    used: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def exchange(self, token: str | None) -> bool:
        """True (once) for the one-time token; later it is worth nothing."""
        if not token:
            return False
        with self._lock:
            if self.used or not hmac.compare_digest(token.encode(), self.token.encode()):
                return False
            self.used = True
            return True

    def signed_in(self, cookie: str | None) -> bool:
        return bool(cookie) and hmac.compare_digest(str(cookie).encode(), self.session.encode())

    def may_change(self, *, cookie: str | None, origin: str | None, host: str | None, header: str | None) -> bool:
        """A state-changing request: the cookie, the page's Origin and its header token, all three."""
        return (self.signed_in(cookie) and same_origin(origin, host) and bool(header)
                and hmac.compare_digest(str(header).encode(), self.csrf.encode()))
