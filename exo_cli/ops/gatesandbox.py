"""The merge queue's gates in bubblewrap: ``[sandbox] mode`` decides, as it does for agents.

Gates and ``[merge] setup`` run code agents wrote, so they get an agent's walls, built by the
same ``adapters.sandbox.assemble`` (one implementation): the throw-away candidate clone is
writable and the cwd, the root read-only, a private /tmp, a fresh private HOME per run (next to
the clone, removed with it) and the base's package-manager cache (``cache_env``: npm, pip, uv,
cargo, go; shared by that base's gate runs so ``npm ci`` does not download everything each
time); hidden exactly as from an agent: exo's state and runtime folders, the user's sockets,
the main checkout (its ``.git`` shown read-only, so the clone's borrowed objects resolve, with
``.git/config`` replaced by its format keys), every agent's checkout or clone, and the user's
secret folders. The environment is the agent allow-list's (``[sandbox] env`` adds names).

The network follows ``[sandbox] allow_hosts``: the runner serves those hosts through the
allow-list proxy (``adapters.netproxy``, the one the team broker runs for agents), in-process
while the gate runs, bridged into the sandbox's own network namespace; with no
``allow_hosts`` the gate has no network at all. Refusals are logged in the base's queue folder
(``net/gate.log``).

``mode``: ``off`` never; ``on`` always (EnvironmentError when bubblewrap cannot run here: the
queue stops and tells the human, its entries stay queued; nothing is bounced for it); ``auto``
wherever bubblewrap works.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from exo_cli.errors import EnvironmentError_
from exo_cli.ops import mergequeue as mq

if TYPE_CHECKING:
    from exo_cli.adapters.sandbox import Plan
    from exo_cli.env import Env
    from exo_cli.ops.sandbox import SandboxStatus

HINT = ("Install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap), or set [sandbox] mode = \"auto\" (the "
        "default: gates run sandboxed where bubblewrap works) or \"off\".")
_probed: dict[str, SandboxStatus] = {}  # PATH -> whether bubblewrap works: probed once per runner process
PROXY_KEY = "gate"  # the proxy's name for the gate being run (one at a time per runner)


def decide(env: Env) -> bool:
    """Whether this runner's gates run sandboxed; EnvironmentError when ``[sandbox] mode = "on"`` and they cannot.

    Gates run code agents wrote: they follow ``[sandbox] mode`` as agents do (``auto`` by default:
    sandboxed wherever bubblewrap works).
    """
    mode = str(env.config.get("sandbox.mode") or "auto")
    if mode == "off":
        return False
    from exo_cli.ops.sandbox import sandbox_status

    path = env.environ.get("PATH", "")
    status = _probed.get(path) or _probed.setdefault(path, sandbox_status(env))
    if mode == "on" and not status.available:
        raise EnvironmentError_(f"Cannot run the merge gates sandboxed ([sandbox] mode = \"on\"): {status.detail}",
                                hint=HINT, detail=status.detail)
    return status.available


def home_of(clone: str) -> str:
    """The private HOME of the gate run in ``clone`` (beside it, so the clones' cleanup takes it too)."""
    return clone.rstrip("/") + ".home"


def _fill_home(env: Env, home: Path, real_home: str, clone: str, environ: dict[str, str]) -> None:
    """The gate's private HOME, as an agent's of a custom command: a ``.gitconfig`` with the user's name and e-mail."""
    from exo_cli.adapters.agents.gemini import git_identity_env
    from exo_cli.adapters.sandbox_home import make_home

    found = git_identity_env(env.repo.root, environ)
    identity = {"name": environ.get("GIT_AUTHOR_NAME") or found.get("GIT_AUTHOR_NAME", ""),
                "email": environ.get("GIT_AUTHOR_EMAIL") or found.get("GIT_AUTHOR_EMAIL", "")}
    make_home(home, real_home=Path(real_home), cli="custom", clone=clone, environ=environ, identity=identity)


@contextlib.contextmanager
def sandboxed(env: Env, base: str, clone: str, environ: dict[str, str]) -> Iterator[Plan]:
    """The sandbox ``Plan`` of the gates run in ``clone`` (its argv empty: ``run_gate`` sets each gate's), with the
    allow-list proxy serving it while the block runs."""
    from exo_cli.adapters import netpolicy, sandbox
    from exo_cli.adapters.files import ensure_private_dir

    top = Path(mq.folder(env, base))
    home = Path(home_of(clone))
    real_home = env.environ.get("HOME") or os.path.expanduser("~")
    _fill_home(env, home, real_home, clone, environ)
    cache = ensure_private_dir(top / "cache", parents=True)
    git_config = sandbox.write_clean_git_config(env.repo.common_dir, top / "git-config")
    places = sandbox.Agent(
        clone=clone, repository=str(env.repo.root), state_dir=str(env.state_dir), runtime_dir=str(env.runtime_dir),
        home=real_home, private_home=str(home), cache=str(cache),
        empty=sandbox.ensure_empty_file(top / "empty"), checkouts=str(env.worktree_root), git_config=str(git_config),
    )  # fmt: skip
    policy = netpolicy.parse(env.config.get("sandbox.allow_hosts") or [])
    proxy = None
    network = sandbox.Network("none")
    try:
        if policy.rules:
            from exo_cli.adapters.files import runtime_dir_for
            from exo_cli.adapters.netproxy import NetProxy, network_plan

            folder = ensure_private_dir(runtime_dir_for(str(env.state_dir.resolve())) / "gate-net", parents=True) \
                / mq.key(base)
            from exo_cli.ops.network import pins

            proxy = NetProxy()
            proxy.add(PROXY_KEY, folder, policy, top / "net", pins=pins(env))  # [sandbox] resolve, as for agents
            network = sandbox.Network.bridge(network_plan(folder, policy))
        config = env.config
        from exo_cli.adapters.mux import tmux_socket

        yield sandbox.assemble(
            places, ["true"], cli="custom", environ=environ, store_url=env.store_url,
            tmux_socket=tmux_socket.pinned(env.runtime_dir, f"exo-{env.repo_id}"),
            paths=config.get("sandbox.paths") or [], hide=config.get("sandbox.hide") or [],
            env=config.get("sandbox.env") or [], devices=config.get("sandbox.devices") or [], network=network,
        )  # fmt: skip
    finally:
        if proxy is not None:
            proxy.close()
