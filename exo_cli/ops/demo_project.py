"""The scratch repository of ``exo demo``: its project, its beads and the demo agents' scripts.

``scratch_dir`` picks (and checks) the folder, never inside a repository; ``setup`` writes
the tiny Python project, the beads export and exo.toml, commits and runs ``init``;
``agent_script`` is what each demo agent does for its bead; ``clean_environ`` keeps the
caller's identity, state, configuration and other servers out of the scratch repository.
The operation itself (leading the team) is in ``demo.py``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from exo_cli.errors import InvalidInput, UsageError

if TYPE_CHECKING:
    from exo_cli.env import Env

PREFIX = "demo"
# Variables of the caller that never reach the scratch repo (identity, placement, other servers).
_DROP = ("TMUX", "TMUX_PANE", "ZELLIJ", "ZELLIJ_SESSION_NAME", "ZELLIJ_PANE_ID", "HANGAR_ROOT", "BEADS_DIR",
         "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR", "GIT_OBJECT_DIRECTORY",
         "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_NAMESPACE", "GIT_PREFIX")
_KEEP_EXO = ("EXO_DEBUG",)


# ------------------------------------------------------------------------------------ the project

HELLO_PY = '''"""A tiny greeting module: the demo agents extend it."""


def hello(name: str = "world") -> str:
    """Return a greeting for ``name``."""
    return f"Hello, {name}!"
'''

README = """# hello

A tiny project created by `exo demo`. The demo agents each took one bead from
`.beads/issues.jsonl`, worked in their own worktree and branch, and had their pull
request squash-merged here. `git log --oneline` shows their work.
"""

EXO_TOML = """# exo configuration of this scratch repository (written by `exo demo`).

[agent]
default = "demo"

[mux]
default = "{mux}"

[forge]
kind = "local"

[sandbox]
mode = "auto"               # each agent in bubblewrap, in its own clone, wherever bubblewrap works
"""


@dataclass(frozen=True)
class Bead:
    """One bead of the demo project: the file its agent writes, its question and how it ends."""

    id: str
    title: str
    priority: int
    type: str
    description: str
    path: str
    content: str
    question: str | None = None
    answer: str | None = None
    finish: str = "idle"  # "idle" or "done"
    blocked_by: str | None = None


BEADS = (
    Bead("demo-bye", "Add a goodbye() function", 1, "feature",
          "hello() needs a counterpart: goodbye(name) returning 'Goodbye, <name>!'.", "goodbye.py",
          '"""Farewells."""\n\n\ndef goodbye(name: str = "world") -> str:\n'
          '    """Return a farewell for ``name``."""\n    return f"Goodbye, {name}!"\n', finish="done"),
    Bead("demo-cfg", "Make the greeting configurable", 1, "feature",
          "Let users pick the greeting word through the HELLO_GREETING environment variable.", "greeting.py",
          '"""The greeting word, configurable through HELLO_GREETING."""\n\nimport os\n\n\n'
          'def greeting() -> str:\n    """Return the configured greeting word (default: Hello)."""\n'
          '    return os.environ.get("HELLO_GREETING", "Hello")\n',
          question="Which greeting should be the default when HELLO_GREETING is not set?",
          answer="Keep 'Hello' as the default; HELLO_GREETING overrides it."),
    Bead("demo-test", "Add tests for hello()", 2, "task",
          "A pytest module covering hello() with and without a name.", "test_hello.py",
          'from hello import hello\n\n\ndef test_hello_default() -> None:\n    assert hello() == "Hello, world!"\n\n\n'
          'def test_hello_name() -> None:\n    assert hello("exo") == "Hello, exo!"\n'),
    Bead("demo-doc", "Document goodbye() in the README", 2, "task",
          "Once goodbye() exists, describe it in the README.", "README.md",
          README + "\n## Usage\n\n```python\nfrom hello import hello\nfrom goodbye import goodbye\n\n"
          "print(hello(\"exo\"))    # Hello, exo!\nprint(goodbye(\"exo\"))  # Goodbye, exo!\n```\n",
          finish="done", blocked_by="demo-bye"),
)


def _issues_jsonl(now: str) -> str:
    """The beads export (the shape of tests/fixtures/beads/small): one JSON object a line."""
    lines = []
    for b in BEADS:
        obj: dict[str, Any] = {
            "id": b.id, "title": b.title, "status": "open", "priority": b.priority, "issue_type": b.type,
            "description": b.description, "created_at": now, "updated_at": now,
        }  # fmt: skip
        if b.blocked_by:
            obj["dependencies"] = [{"issue_id": b.id, "depends_on_id": b.blocked_by, "type": "blocks",
                                    "created_at": now, "created_by": "exo-demo"}]
        lines.append(json.dumps(obj, separators=(",", ":")))
    return "\n".join(lines) + "\n"


def agent_script(b: Bead) -> list[Any]:
    """The demo agent's steps for bead ``b`` (exo_cli/demo_agent.py)."""
    steps: list[Any] = []
    if b.question:
        steps.append({"question": {"message": b.question, "timeout": 60}})
    verb, done = ("Update", "updated") if b.path == "README.md" else ("Add", "added")
    steps += [
        {"write": {"path": b.path, "content": b.content}},
        {"commit": {"message": f"[{b.id}] {b.title}"}},
        {"note": {"message": f"{b.id}: {done} {b.path} and committed it"}},
        {"pr": {"title": f"[{b.id}] {b.title}", "body": f"{verb}s {b.path} for bead {b.id}."}},
    ]
    if b.finish == "done":
        steps.append({"done": {"output": f"{b.id} is done: {b.path} is in PR."}})
    steps.append("idle")
    return steps


# ------------------------------------------------------------------------------------ helpers


def clean_environ(environ: dict[str, str] | Any, root: Path) -> dict[str, str]:
    """The caller's environment for the scratch repo: no exo/tmux/git identity, no user config.

    Every ``EXO_*`` variable but EXO_DEBUG is dropped (so the caller's agent identity,
    state folder, forge or worktree root never apply), the user's exo config is replaced
    by an empty folder inside the scratch repo, and worktrees are pinned under it.
    """
    env = {k: v for k, v in environ.items()
           if k not in _DROP and (not k.startswith("EXO_") or k in _KEEP_EXO)}
    env["EXO_CONFIG_DIR"] = str(root / ".git" / "exo-demo-config")
    env["EXO_WORKTREE_ROOT"] = str(root / ".exo" / "worktrees")
    return env


def _inside_work_tree(path: Path, env: dict[str, str]) -> str | None:
    """The top of the git work tree ``path`` (an existing folder) is in, or None."""
    from exo_cli.adapters.git import Git

    return Git(path, environ=env).toplevel()


def scratch_dir(env: Env, path: str | None) -> tuple[Path, bool]:
    """The folder for the scratch repo and whether the demo created it; never inside a repository."""
    import tempfile

    probe = {k: v for k, v in env.environ.items() if not k.startswith("GIT_")}
    if path is None:
        base = Path(tempfile.gettempdir())
        top = _inside_work_tree(base, probe)
        if top is not None:
            raise UsageError(f"The temp folder {base} is inside the git repository {top}",
                             hint="Set TMPDIR to a folder outside any repository, or pass --dir.")
        return Path(tempfile.mkdtemp(prefix="exo-demo-", dir=base)), True
    try:
        return _check_dir(env, path, probe)
    except (OSError, ValueError) as exc:  # a name too long, a NUL byte, a folder we may not read...
        raise InvalidInput(f"Cannot use --dir {path[:200]!r}: {getattr(exc, 'strerror', None) or exc}",
                           hint="Pass --dir a new (or empty) folder outside any repository.", field="path") from exc


def _check_dir(env: Env, path: str, probe: dict[str, str]) -> tuple[Path, bool]:
    target = Path(os.path.expanduser(path))
    if not target.is_absolute():
        target = env.cwd / target
    target = target.absolute()
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise InvalidInput(f"{target} already exists and is not an empty folder",
                         hint="Pass --dir a new (or empty) folder; the demo never writes into existing files.")
    parent = target if target.is_dir() else target.parent
    while not parent.exists():
        parent = parent.parent
    top = _inside_work_tree(parent, probe)
    if top is not None:
        raise InvalidInput(f"{target} is inside the git repository {top}",
                         hint="The demo never writes into your repositories: pass a --dir outside any repository.")
    created = not target.exists()
    target.mkdir(parents=True, exist_ok=True)
    return target, created


def setup(root: Path, environ: dict[str, str], kind: str) -> Env:
    """Create the project, the beads, the commit and run ``init``; return the scratch repo's Env."""
    from datetime import UTC, datetime

    from exo_cli.adapters.git import Git, add_exclude
    from exo_cli.env import Env
    from exo_cli.registry import invoke

    git = Git(root, environ=environ)
    git.init("main")
    if not git.has_identity():
        git.config_set("user.name", "exo demo")
        git.config_set("user.email", "demo@exo.invalid")
    # The user's global git settings must not get in the way: no signing prompt, no hooks.
    git.config_set("commit.gpgsign", "false")
    git.config_set("core.hooksPath", str(root / ".git" / "hooks"))
    (root / "README.md").write_text(README, encoding="utf-8")
    (root / "hello.py").write_text(HELLO_PY, encoding="utf-8")
    (root / "exo.toml").write_text(EXO_TOML.format(mux=kind), encoding="utf-8")
    beads = root / ".beads"
    beads.mkdir()
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    (beads / "config.yaml").write_text(f'# written by exo demo\nissue-prefix: "{PREFIX}"\n', encoding="utf-8")
    (beads / "issues.jsonl").write_text(_issues_jsonl(now), encoding="utf-8")
    # The tracker is rewritten as beads are claimed and closed: keep it out of the commits, or
    # the main checkout would be dirty and merges into it refused.
    add_exclude(root / ".git", "/.beads/")
    git.add(["README.md", "hello.py", "exo.toml"])
    git.commit("A tiny greeting module")
    senv = Env(cwd=root, environ=environ)
    from exo_cli.ops.trust import trust_written

    trust_written(senv, EXO_TOML.format(mux=kind))  # what exo wrote is trusted
    invoke("init", senv)
    return senv
