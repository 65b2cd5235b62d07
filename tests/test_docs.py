"""The documentation: generated completions and man pages are fresh, links resolve, no outside citations.

- `scripts/gen_docs.py --check` finds completions/ and man/ up to date; `exo completion`
  prints the same scripts.
- Every relative link in README.md, bench/README.md and docs/ points to a file of the
  repository, and a `#fragment` into a Markdown file names one of its headings.
- Nothing in the repository cites the design documents the project was built from (they are
  not part of it): users and developers read README.md and docs/ instead.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import Exo

ROOT = Path(__file__).resolve().parent.parent


def test_generated_files_are_fresh() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_docs.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(("shell", "file"), [("bash", "bash/exo"), ("zsh", "zsh/_exo"), ("fish", "fish/exo.fish")])
def test_completion_command_matches_file(repo: Path, shell: str, file: str) -> None:
    r = Exo(repo)("completion", shell)
    assert r.exit_code == 0
    assert r.stdout == (ROOT / "completions" / file).read_text()


def test_bash_completion_completes_commands(repo: Path) -> None:
    env = {"COMP_WORDS": "exo sta", "COMP_CWORD": "1", "_EXO_COMPLETE": "bash_complete"}
    proc = subprocess.run([sys.executable, "-m", "exo_cli"], cwd=repo, capture_output=True, text=True,
                          env={**__import__("os").environ, **env, "PYTHONPATH": str(ROOT)})
    assert "plain,status" in proc.stdout.splitlines()


def test_man_pages_exist_for_every_visible_command() -> None:
    from exo_cli.commands import COMMANDS

    for name, entry in COMMANDS.items():
        if not entry.hidden:
            assert (ROOT / "man" / f"exo-{name}.1").exists(), name


# -- links ----------------------------------------------------------------------------------------

LINKED = [ROOT / "README.md", ROOT / "bench" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
_FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", re.M | re.S)
_CODE = re.compile(r"(`+)(.+?)\1", re.S)
_INLINE = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFDEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)
_HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", re.M)
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def _prose(text: str) -> str:
    """``text`` without its fenced code blocks."""
    return _FENCE.sub("", text)


def links(text: str) -> list[str]:
    """The link targets of a Markdown text (inline and reference-style), outside code."""
    prose = _CODE.sub(lambda m: " " * len(m.group(0)), _prose(text))
    return _INLINE.findall(prose) + _REFDEF.findall(prose)


def anchors(text: str) -> set[str]:
    """GitHub's heading ids: lowercased, punctuation dropped, spaces to hyphens, -1, -2 for repeats."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for raw in _HEADING.findall(_prose(text)):
        title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", raw)  # a link's text
        title = _CODE.sub(lambda m: m.group(2), title)
        slug = re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def test_link_checker_understands_markdown() -> None:
    text = "# `exo doctor [--dry-run]` (human only)\n## Set up\n## Set up\n[a](x.md#y) `[b](c)`\n```\n[d](e)\n```\n[r]: f.md\n"
    assert links(text) == ["x.md#y", "f.md"]
    assert anchors(text) == {"exo-doctor---dry-run-human-only", "set-up", "set-up-1"}


@pytest.mark.parametrize("page", LINKED, ids=[str(p.relative_to(ROOT)) for p in LINKED])
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in links(page.read_text(encoding="utf-8")):
        if _SCHEME.match(target):
            continue  # a web address, not a file of the repository
        path_part, _, fragment = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        if not dest.is_relative_to(ROOT) or not dest.exists():
            broken.append(f"{target}: no such file in the repository")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest.read_text(encoding="utf-8")):
            broken.append(f"{target}: no heading #{fragment} in {dest.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_docs_exist_and_are_linked_from_readme() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "docs/README.md" in links(readme)
    index = links((ROOT / "docs" / "README.md").read_text(encoding="utf-8"))
    for page in (ROOT / "docs").glob("*.md"):
        if page.name != "README.md":
            assert page.name in index, f"docs/README.md does not link to {page.name}"


# -- no citations of documents outside the repository ----------------------------------------------

# The design documents exo was built from live outside the repository; citing them sends a
# reader to a file they do not have. Patterns are built by joining pieces so this file does
# not match itself.
OUTSIDE = re.compile("|".join([
    r"(?<![\w./-])(?:" + "DESIGN" + "|" + "STYLE" + r")\b",  # DESIGN.md, STYLE.md, 'DESIGN "Errors"'
    r"\.\./" + "shared" + r"\b",
    r"/work/" + "shared" + r"\b",
    "field-" + "lessons",
    r"(?<![\w-])(?:" + "|".join(["formats", "agent-clis", "agent-cli-facts-2", "platform-facts",
                                   "target-layout"]) + r")\.(?:md|png)\b",
    "reference/" + "seeds",
    r"(?<![A-Za-z])[Ss]" + r"eeds?[ _]\d{3}\b",  # the tool families exo took its tools from, by number
]))
SCANNED = ["README.md", "CHANGELOG.md", "pyproject.toml", "docs", "bench", "exo_cli", "tests", "scripts",
           "man", "completions", ".ci"]
TEXT_SUFFIXES = {".py", ".md", ".toml", ".txt", ".sh", ".yaml", ".yml", ".cfg", ".ini", ".1", ".bash", ".zsh",
                 ".fish", ""}
SKIP_DIRS = {"node_modules", "__pycache__", ".venv", ".pytest_cache", ".ruff_cache", ".mypy_cache"}
# Files whose comments still cite those documents because another branch is rewriting them; it
# must stay empty.
PENDING: tuple[str, ...] = ()


def outside_citations() -> list[str]:
    found = []
    for name in SCANNED:
        top = ROOT / name
        files = [top] if top.is_file() else []
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not os.path.islink(os.path.join(dirpath, d))]
            files += [Path(dirpath) / f for f in filenames]
        for path in files:
            if path.suffix not in TEXT_SUFFIXES or path == Path(__file__).resolve() or path.is_symlink():
                continue
            try:
                text = path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            for lineno, line in enumerate(text.splitlines(), 1):
                if OUTSIDE.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{lineno}: {line.strip()[:120]}")
    return found


def test_citation_pattern() -> None:
    bad = ["see " + "DESIGN" + ".md", "(" + "STYLE" + ".md)", 'InvalidInput (' + "DESIGN" + ' "Errors")',
           "../" + "shared/reference/x", "field-" + "lessons F3", "reference/" + "formats.md 2a", "form" + "ats.md 1.6",
           "as se" + "ed 000 does", "(se" + "eds 001/002)", "Se" + "ed 000's checks", "fails_like_se" + "ed_000"]
    good = ["DOLT-STORAGE-" + "DESIGN.md", "HASH_ID_" + "DESIGN.md", "docs/architecture.md", "shared by all processes",
            "the design of the tool", "Seeded RNG", "seed data on a branch", "BEADS_TIP_SEED 123", "seed 12"]
    assert all(OUTSIDE.search(t) for t in bad), [t for t in bad if not OUTSIDE.search(t)]
    assert not any(OUTSIDE.search(t) for t in good), [t for t in good if OUTSIDE.search(t)]


def test_nothing_cites_documents_outside_the_repository() -> None:
    found = [f for f in outside_citations() if not f.startswith(PENDING)]
    assert not found, "cite docs/ (or nothing) instead of documents outside the repository:\n" + "\n".join(found)


def test_pending_citation_allow_list_is_still_needed() -> None:
    found = outside_citations()
    stale = [p for p in PENDING if not any(f.startswith(p) for f in found)]
    assert not stale, f"nothing under {stale} cites outside documents any more: remove it from PENDING"
