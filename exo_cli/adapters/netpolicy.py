"""The network allow-list of a sandboxed agent: which host:port its proxy lets it reach.

An entry is a host name (``registry.npmjs.org``: ports 443 and 80), a name with a port
(``example.com:8443``), a wildcard for the subdomains of a name (``*.example.com``, not the name
itself), an IP literal with a port (``127.0.0.1:8080``, ``[::1]:8080``), or a preset name
(``PRESETS``). The model API of the agent's CLI is derived from its login kind and environment
(``model_entries``). Everything else is refused. Names are matched as names, before anything is
resolved: a refused name is never looked up, so a DNS query cannot carry data out.

Pure functions (only ``codex_provider_url`` reads a file, the Codex config the user wrote).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from typing import NamedTuple
from urllib.parse import urlsplit

from exo_cli.errors import InvalidInput

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

# Preset -> hosts. Only the registries' own hosts: a generic storage host (storage.googleapis.com,
# *.s3.amazonaws.com) would let an agent upload anywhere, so none is here; add one yourself if needed.
PRESETS: dict[str, tuple[str, ...]] = {
    "npm": ("registry.npmjs.org", "registry.yarnpkg.com"),
    "pypi": ("pypi.org", "files.pythonhosted.org"),
    "crates": ("crates.io", "index.crates.io", "static.crates.io"),
    "goproxy": ("proxy.golang.org", "sum.golang.org"),
    "github": ("github.com", "api.github.com", "codeload.github.com", "objects.githubusercontent.com",
               "raw.githubusercontent.com"),
}
DEFAULT_PORTS = (443, 80)
_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")


class Rule(NamedTuple):
    """One allowed destination: ``host`` (lower case; ``*.`` prefix for subdomains) and its ports."""

    host: str
    ports: tuple[int, ...]

    def matches(self, host: str, port: int) -> bool:
        if port not in self.ports:
            return False
        if self.host.startswith("*."):
            return host.endswith(self.host[1:]) and len(host) > len(self.host) - 1
        return host == self.host

    def __str__(self) -> str:
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return shown if self.ports == DEFAULT_PORTS else ",".join(f"{shown}:{p}" for p in self.ports)


class Policy(NamedTuple):
    """The allow-list of one agent."""

    rules: tuple[Rule, ...]

    def allows(self, host: str, port: int) -> bool:
        """Whether ``host:port`` (a name or an IP literal, as the client asked for it) may be reached."""
        key = normalize_host(host)
        if key is None:
            return False
        return any(r.matches(key, port) for r in self.rules)

    def entries(self) -> list[str]:
        """The rules as entries (what the agent's record keeps and ``parse`` reads back)."""
        return [str(r) for r in self.rules]


def normalize_host(host: str) -> str | None:
    """``host`` lower-cased and checked (a name, or an IP literal in its canonical form); None when invalid."""
    host = host.strip().lower().rstrip(".")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    if not host or len(host) > 253 or not all(_LABEL.match(label) for label in host.split(".")):
        return None
    return host


def is_address(host: str) -> bool:
    """Whether ``host`` is an IP literal (no brackets)."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _split(entry: str) -> tuple[str, tuple[int, ...]]:
    """``host[:port]`` -> (host, ports); IPv6 literals in brackets."""
    if entry.startswith("["):
        host, bracket, rest = entry[1:].partition("]")
        if not bracket:
            raise ValueError("an opening [ without its ]")
        port = rest[1:] if rest.startswith(":") else None
        if rest and port is None:
            raise ValueError("bad bracketed address")
    elif entry.count(":") == 1:
        host, port = entry.split(":")
    else:
        host, port = entry, None
    if port is None:
        return host, DEFAULT_PORTS
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"bad port {port!r}")
    return host, (int(port),)


def parse_entry(entry: str, *, key: str = "sandbox.allow_hosts") -> list[Rule]:
    """The rules of one entry (a preset gives several); InvalidInput naming ``key`` when it is not one."""
    text = entry.strip().lower() if isinstance(entry, str) else ""
    if text in PRESETS:
        return [Rule(h, DEFAULT_PORTS) for h in PRESETS[text]]
    problem = "" if text else "empty"
    try:
        host, ports = _split(text)
        wildcard = host.startswith("*.")
        name = normalize_host(host[2:] if wildcard else host)
        if name is None:
            problem = "not a host name or IP address"
        elif wildcard and is_address(name):
            problem = "a wildcard takes a name, not an address"
        elif wildcard and "." not in name:
            problem = "a wildcard over a whole top-level domain would allow nearly every host"
        elif not wildcard and "." not in name and ":" not in name and name != "localhost":
            problem = "a single-label name that is no preset (presets: " + ", ".join(PRESETS) + ")"
    except ValueError as exc:
        problem = str(exc)
    if problem:
        from exo_cli.validate import visible

        raise InvalidInput(f"Bad entry {visible(str(entry))!r} in {key}: {problem}",
                           hint="An entry is HOST, HOST:PORT, *.DOMAIN, [IPV6]:PORT or a preset: "
                                + ", ".join(PRESETS) + ".", key=key)
    return [Rule(("*." if wildcard else "") + str(name), ports)]


def parse(entries: Iterable[str], *, key: str = "sandbox.allow_hosts") -> Policy:
    """A policy from entries (duplicates dropped, order kept)."""
    rules: list[Rule] = []
    for entry in entries:
        for rule in parse_entry(entry, key=key):
            if rule not in rules:
                rules.append(rule)
    return Policy(tuple(rules))


def parse_pins(table: Mapping[str, str], *, key: str = "sandbox.resolve") -> dict[str, str]:
    """``[sandbox] resolve``: host name -> ``ADDRESS`` or ``ADDRESS:PORT`` (canonical), what the proxy connects to
    for that name instead of looking it up; InvalidInput naming ``key`` and the entry when one is not that.

    The name must still be allowed; the address may be a loopback one (the user named it, as an IP
    literal in ``allow_hosts``): a local mirror of a registry, or a test's stand-in.
    """
    out: dict[str, str] = {}
    for name, value in table.items():
        problem = ""
        host = normalize_host(name) if isinstance(name, str) else None
        if host is None or is_address(host) or "*" in str(name):
            problem = "the key is not a host name"
        elif not isinstance(value, str):
            problem = "the value is not a string"
        else:
            try:
                address, ports = _split(value.strip().lower())
            except ValueError as exc:
                problem = str(exc)
            else:
                literal = normalize_host(address)
                if literal is None or not is_address(literal):
                    problem = "the value is not an IP address (ADDRESS or ADDRESS:PORT, [IPV6]:PORT)"
                else:
                    shown = f"[{literal}]" if ":" in literal else literal
                    out[host] = shown if ports == DEFAULT_PORTS else f"{shown}:{ports[0]}"
        if problem:
            from exo_cli.validate import visible

            raise InvalidInput(f"Bad entry {visible(str(name))!r} in {key}: {problem}",
                               hint="An entry is \"HOST\" = \"ADDRESS\" or \"ADDRESS:PORT\".", key=key)
    return out


def pin_address(pin: str, port: int) -> tuple[str, int]:
    """Where a pinned name is reached (``parse_pins``'s value): its address, and its port or ``port``."""
    host, ports = _split(pin)
    return (host, port) if ports == DEFAULT_PORTS else (host, ports[0])


def url_entry(url: str) -> str | None:
    """The entry that allows ``url``'s host and port (its scheme's default port when none); None if unusable."""
    try:
        parts = urlsplit(url.strip())
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    if not host or parts.scheme not in ("http", "https"):
        return None
    port = port or (443 if parts.scheme == "https" else 80)
    name = normalize_host(host)
    if name is None:
        return None
    return f"[{name}]:{port}" if ":" in name else f"{name}:{port}"


def _true(environ: Mapping[str, str], name: str) -> bool:
    return environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _region(environ: Mapping[str, str], *names: str, default: str) -> str:
    for name in names:
        value = environ.get(name, "").strip().lower()
        if value and re.fullmatch(r"[a-z0-9-]{1,40}", value):
            return value
    return default


def _vertex_host(region: str) -> str:
    return "aiplatform.googleapis.com" if region == "global" else f"{region}-aiplatform.googleapis.com"


def _claude(environ: Mapping[str, str]) -> list[str]:
    if _true(environ, "CLAUDE_CODE_USE_BEDROCK"):
        region = _region(environ, "AWS_REGION", "AWS_DEFAULT_REGION", default="us-east-1")
        base = environ.get("ANTHROPIC_BEDROCK_BASE_URL", "")
        return [base] if base else [f"bedrock-runtime.{region}.amazonaws.com:443", "sts.amazonaws.com:443"]
    if _true(environ, "CLAUDE_CODE_USE_VERTEX"):
        base = environ.get("ANTHROPIC_VERTEX_BASE_URL", "")
        host = _vertex_host(_region(environ, "CLOUD_ML_REGION", default="us-east5"))
        return [base or f"{host}:443", "oauth2.googleapis.com:443"]
    base = environ.get("ANTHROPIC_BASE_URL", "")
    if base:
        return [base]
    if environ.get("ANTHROPIC_API_KEY") or environ.get("ANTHROPIC_AUTH_TOKEN"):
        return ["api.anthropic.com:443"]
    # a claude.ai login (or CLAUDE_CODE_OAUTH_TOKEN): the API and the token refresh host
    return ["api.anthropic.com:443", "platform.claude.com:443"]


def _gemini(environ: Mapping[str, str]) -> list[str]:
    if _true(environ, "GOOGLE_GENAI_USE_VERTEXAI"):
        base = environ.get("GOOGLE_VERTEX_BASE_URL", "")
        host = _vertex_host(_region(environ, "GOOGLE_CLOUD_LOCATION", default="us-central1"))
        return [base or f"{host}:443", "oauth2.googleapis.com:443"]
    base = environ.get("GOOGLE_GEMINI_BASE_URL", "")
    if base:
        return [base]
    if environ.get("GEMINI_API_KEY") or environ.get("GOOGLE_API_KEY"):
        return ["generativelanguage.googleapis.com:443"]
    # "Login with Google": Code Assist and the token refresh host
    return [environ.get("CODE_ASSIST_ENDPOINT", "") or "cloudcode-pa.googleapis.com:443",
            "oauth2.googleapis.com:443"]


def _codex(environ: Mapping[str, str], provider_url: str | None) -> list[str]:
    if provider_url:
        return [provider_url]
    base = environ.get("OPENAI_BASE_URL", "")
    if base:
        return [base]
    if environ.get("OPENAI_API_KEY"):
        return ["api.openai.com:443"]
    # a ChatGPT login: its backend and the token refresh host
    return ["chatgpt.com:443", "auth.openai.com:443"]


def model_entries(backend: str, environ: Mapping[str, str], *, provider_url: str | None = None) -> list[str]:
    """The entries that let ``backend``'s CLI reach its model API, from its login kind in ``environ``.

    API key: the vendor's API host; ``*_BASE_URL``: that host and port instead; a subscription login
    (no key): the API plus its OAuth token-refresh host; Bedrock or Vertex: the regional endpoint and
    the token host. ``provider_url`` is Codex's configured provider ``base_url``. The demo and custom
    agents get none (``[sandbox] allow_hosts`` only).
    """
    if backend == "claude":
        raw = _claude(environ)
    elif backend == "gemini":
        raw = _gemini(environ)
    elif backend == "codex":
        raw = _codex(environ, provider_url)
    else:
        raw = []
    out: list[str] = []
    for item in raw:
        entry = url_entry(item) if "://" in item else item
        if entry and entry not in out:
            out.append(entry)
    return out


def _codex_provider(codex_home: Path) -> dict[str, object]:
    """The provider table Codex's ``config.toml`` selects ({}: none, or unreadable)."""
    import tomllib

    try:
        config = tomllib.loads((codex_home / "config.toml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return {}
    name = config.get("model_provider")
    providers = config.get("model_providers")
    if not isinstance(name, str) or not isinstance(providers, dict):
        return {}
    provider = providers.get(name)
    return provider if isinstance(provider, dict) else {}


def codex_provider_url(codex_home: Path) -> str | None:
    """The ``base_url`` of the provider Codex's ``config.toml`` selects (None: none, or unreadable)."""
    url = _codex_provider(codex_home).get("base_url")
    return url if isinstance(url, str) else None


def codex_provider_key(codex_home: Path) -> str | None:
    """The variable holding the key of the provider Codex's ``config.toml`` selects (its ``env_key``), when it
    is a plain variable name (never a glob: it joins the sandbox's allow-list of variables)."""
    key = _codex_provider(codex_home).get("env_key")
    return key if isinstance(key, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", key) else None


def policy_for(backend: str, environ: Mapping[str, str], allow_hosts: Iterable[str], *,
               provider_url: str | None = None) -> Policy:
    """The whole allow-list of an agent: its model API, then ``[sandbox] allow_hosts``."""
    return parse([*model_entries(backend, environ, provider_url=provider_url), *allow_hosts])
