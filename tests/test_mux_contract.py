"""The ``Mux`` protocol is the whole contract of every multiplexer backend.

Operations see a backend only through ``Mux`` (``get_mux`` returns one), so each backend must
offer every method of the protocol with the same parameters, kinds and defaults; anything more
is the backend's own business and must be optional. mypy checks the types where ``get_mux``
returns each backend; this test checks the parameter names and defaults too, which mypy does not.
"""

from __future__ import annotations

import inspect
import subprocess
from pathlib import Path

import pytest

from exo_cli.adapters.mux import Mux, get_mux
from exo_cli.adapters.mux.headless import Headless
from exo_cli.adapters.mux.tmux import Tmux
from exo_cli.adapters.mux.zellij import Zellij
from exo_cli.records import MUXES

BACKENDS = [Tmux, Zellij, Headless]
_P = inspect.Parameter


def protocol_methods() -> dict[str, inspect.Signature]:
    return {name: inspect.signature(member) for name, member in vars(Mux).items()
            if inspect.isfunction(member) and not name.startswith("_")}


def incompatibilities(want: inspect.Signature, have: inspect.Signature) -> list[str]:
    """How ``have`` fails to accept every call that ``want`` allows (empty when it does)."""
    problems = []
    have_params = list(have.parameters.values())
    takes_kwargs = any(p.kind is _P.VAR_KEYWORD for p in have_params)
    for index, p in enumerate(want.parameters.values()):
        q = have.parameters.get(p.name)
        if q is None:
            if not (takes_kwargs and p.kind is _P.KEYWORD_ONLY):
                problems.append(f"no parameter {p.name!r}")
            continue
        if p.kind is _P.POSITIONAL_OR_KEYWORD and (q.kind is not _P.POSITIONAL_OR_KEYWORD or have_params[index] is not q):
            problems.append(f"{p.name!r} must be positional-or-keyword at position {index}")
        elif p.kind is _P.KEYWORD_ONLY and q.kind not in (_P.KEYWORD_ONLY, _P.POSITIONAL_OR_KEYWORD):
            problems.append(f"{p.name!r} must be accepted as a keyword")
        if p.default is not q.default and p.default != q.default:
            problems.append(f"{p.name!r} defaults to {q.default!r}, not {p.default!r}")
    for q in have_params:
        if q.name not in want.parameters and q.kind in (_P.POSITIONAL_OR_KEYWORD, _P.KEYWORD_ONLY) \
                and q.default is _P.empty:
            problems.append(f"extra parameter {q.name!r} has no default")
    return problems


def test_contract_checker_sees_differences() -> None:
    def proto(self, loc, lines=200, *, submit=True): ...  # type: ignore[no-untyped-def]
    def same(self, loc, lines=200, *, submit=True, extra=None): ...  # type: ignore[no-untyped-def]
    def renamed(self, where, lines=200, *, submit=True): ...  # type: ignore[no-untyped-def]
    def other_default(self, loc, lines=100, *, submit=True): ...  # type: ignore[no-untyped-def]
    def needs_more(self, loc, lines=200, *, submit=True, must): ...  # type: ignore[no-untyped-def]
    def positional_only(self, loc, lines=200, /, *, submit=True): ...  # type: ignore[no-untyped-def]

    sig = inspect.signature
    assert incompatibilities(sig(proto), sig(same)) == []
    assert incompatibilities(sig(proto), sig(renamed))
    assert incompatibilities(sig(proto), sig(other_default)) == ["'lines' defaults to 100, not 200"]
    assert incompatibilities(sig(proto), sig(needs_more)) == ["extra parameter 'must' has no default"]
    assert incompatibilities(sig(proto), sig(positional_only))


def test_protocol_has_the_methods_operations_use() -> None:
    assert set(protocol_methods()) == {"start", "list_states", "alive", "capture", "send_text", "kill", "close",
                                       "attach_argv", "kill_server"}


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.__name__)
def test_backend_implements_every_protocol_method(backend: type) -> None:
    problems = []
    for name, want in protocol_methods().items():
        member = getattr(backend, name, None)
        if not callable(member):
            problems.append(f"{name}: missing")
            continue
        problems += [f"{name}: {p}" for p in incompatibilities(want, inspect.signature(member))]
    assert not problems, f"{backend.__name__} does not follow the Mux protocol:\n" + "\n".join(problems)


def test_every_multiplexer_kind_has_a_backend(tmp_path: Path) -> None:
    assert sorted(b.kind for b in BACKENDS) == sorted(MUXES)
    for kind in ("tmux", "headless"):  # get_mux's zellij needs a Zellij session and binary
        mux = get_mux(kind, repo_id="contract", runtime_dir=tmp_path, session="exo")
        assert isinstance(mux, Mux) and mux.kind == kind


def test_headless_and_zellij_have_no_server_to_kill(tmp_path: Path) -> None:
    calls: list[list[str]] = []

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 0, "", "")

    zellij = Zellij("contract", runtime_dir=tmp_path, run=run)
    assert isinstance(zellij, Mux)
    for mux in (zellij, Headless(tmp_path)):
        mux.kill_server()
    assert calls == [] and list(tmp_path.iterdir()) == []
