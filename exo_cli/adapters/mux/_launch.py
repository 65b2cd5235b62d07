"""Start an agent with exactly the environment exo passes (run as a script, stdlib only).

Usage: ``python -I -S _launch.py FIFO``. The multiplexer runs this as the pane's
command; exo writes the start request into FIFO as NUL-separated fields (see
``decode``; no ``json`` import, which would double the start time). The launcher then replaces itself with ``argv`` (same pid) in ``cwd`` with
``env`` plus the variables named in ``keep`` that the multiplexer itself set for
the pane (TERM, TMUX, TMUX_PANE, ZELLIJ...). Secrets therefore never reach a
command line, a layout file or the long-running multiplexer server's environment.

The shell launcher does the same without starting Python (~1 ms instead of ~15-25 ms
of CPU per agent). The pane runs ``dash -c STAGE exo-launch ENV DASH FIFO``: that shell
only expands the ``keep`` variables tmux set for the pane onto ``env -i``'s command line
(TERM, TMUX, TMUX_PANE: tmux's own values, never the caller's) and execs
``env -i KEEP... dash FIFO``, a second shell with an empty environment that runs the
script exo writes into the FIFO (``encode_sh``). That script uses shell builtins only
(``cd``, ``unset``, ``export``, ``[``, ``printf``, ``exec``), so the caller's variables
live in that shell's memory and then in the agent's environment, never on any command
line. It is used only with ``dash`` (checked to add nothing to the environment it
passes on, unlike bash's SHLVL and ``_``) and only when every variable name is a shell
name; otherwise the Python launcher runs.
"""

from __future__ import annotations

import os
import sys

# Importing typing would cost the launcher ~10 ms at every start; type checkers still see it.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

MAGIC = "EXO1"
# Where the shell launcher's programs are looked for (absolute: the pane's PATH is tmux's).
SH_PATHS = ("/bin/dash", "/usr/bin/dash")
ENV_PATHS = ("/usr/bin/env", "/bin/env")


def _is_name(name: str) -> bool:
    """Whether ``name`` is a POSIX shell variable name (``[A-Za-z_][A-Za-z0-9_]*``)."""
    return name.isascii() and name.isidentifier()


def sh_quote(text: str) -> str:
    """Quote ``text`` as one shell word (single quotes; works for every string without NUL)."""
    return "'" + text.replace("'", "'\\''") + "'"


def shell_programs() -> tuple[str, str] | None:
    """``(dash, env)`` absolute paths for the shell launcher, or None when either is missing."""
    sh = next((p for p in SH_PATHS if os.access(p, os.X_OK)), None)
    env = next((p for p in ENV_PATHS if os.access(p, os.X_OK)), None)
    return (sh, env) if sh and env else None


def sh_argv(fifo: str, keep: list[str] | tuple[str, ...], programs: tuple[str, str]) -> list[str]:
    """The pane command of the shell launcher: clear the environment but ``keep``, run FIFO's script."""
    sh, env = programs
    for name in keep:
        if not _is_name(name):
            raise ValueError(f"not a shell variable name: {name!r}")
    kept = " ".join(f'${{{k}+"{k}=${k}"}}' for k in keep)
    stage = f'exec "$1" -i {kept} "$2" "$3"'
    return [sh, "-c", stage, "exo-launch", env, sh, fifo]


def encode_sh(spec: dict[str, Any]) -> bytes | None:
    """The script the shell launcher runs (cwd, exact env, exec argv), or None if it cannot say it.

    None when a variable name is not a shell name (``A-B``), a string has a NUL or a pid
    file is asked for: the Python launcher handles those. The whole script is one ``{ ...; }`` group, so a
    truncated write runs nothing.
    """
    if spec.get("pid_file"):
        return None  # only the Python launcher reports a pid (Zellij)
    argv = [str(a) for a in spec["argv"]]
    env = {str(k): str(v) for k, v in dict(spec["env"]).items()}
    keep = [str(k) for k in spec.get("keep", ())]
    cwd = str(spec["cwd"])
    if not argv or not all(_is_name(k) for k in (*env, *keep)):
        return None
    if any("\0" in s for s in (cwd, *argv, *env, *env.values())):
        return None
    lines = ["{"]
    keeper = str(spec.get("keeper") or "")
    if keeper:  # first, before the exports: the keeper gets none of the agent's variables
        if not all(ch in "0123456789abcdef" for ch in keeper):
            return None
        command = " ".join(sh_quote(a) for a in keeper_argv(sys.executable))
        lines += [f"{command} \"$$\" <<'EXO_KEEPER_END' &", keeper, "EXO_KEEPER_END"]
    lines += [
        f"cd -P {sh_quote(cwd)} || {{ printf 'exo launcher: cannot enter %s\\n' {sh_quote(cwd)} >&2; exit 126; }}",
        "unset PWD OLDPWD",  # set by the shell itself, not by the caller
    ]
    for k, v in env.items():
        if k in keep:  # the multiplexer's own value wins, as in the Python launcher
            lines.append(f'[ -n "${{{k}+x}}" ] || export {k}={sh_quote(v)}')
        else:
            lines.append(f"export {k}={sh_quote(v)}")
    lines += ["exec " + " ".join(sh_quote(a) for a in argv), "exit 127", "}", ""]
    return "\n".join(lines).encode("utf-8", "surrogateescape")


def keeper_argv(python: str) -> list[str]:
    """The command of an agent's keeper (``_runner.py --keep``, beside this file); the launcher adds its pid."""
    runner = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_runner.py")
    return [python, "-I", "-S", runner, "--keep"]


def start_keeper(line: str) -> None:
    """Start the agent's keeper as our child (``_runner.py --keep``) with ``line`` on its stdin and no environment.

    It leaves our session and terminal by itself and ends once we (then the agent we ``exec``) have
    ended. Best effort: the agent starts anyway when it cannot (its relay reports a dead broker).
    """
    parent = os.getpid()
    try:
        r, w = os.pipe()
        pid = os.fork()
    except OSError as exc:
        sys.stderr.write(f"exo launcher: cannot start the broker's keeper: {exc}\n")
        return
    if pid == 0:
        try:
            os.dup2(r, 0)
            os.close(r)
            os.close(w)
            os.execve(sys.executable, [*keeper_argv(sys.executable), str(parent)], {})
        finally:
            os._exit(127)
    os.close(r)
    try:
        os.write(w, (line + "\n").encode("ascii"))
    except OSError:
        pass
    finally:
        os.close(w)


def decode(data: bytes) -> dict[str, Any]:
    """Decode ``MAGIC, cwd, pid_file, n, argv*n, m, (key, value)*m, k, keep*k[, exit_file[, keeper]]`` (NUL-separated).

    ``keeper``: ``_runner.encode_keeper``'s line for the agent's keeper (``start_keeper``), or empty.
    """
    try:
        return _decode(data)
    except (IndexError, ValueError) as exc:
        raise ValueError(f"bad exo start request: {exc}") from exc


def _decode(data: bytes) -> dict[str, Any]:
    fields = [f.decode("utf-8", "surrogateescape") for f in data.split(b"\0")]
    if fields[0] != MAGIC:
        raise ValueError("not an exo start request")
    pos = 3
    n = int(fields[pos])
    argv = fields[pos + 1 : pos + 1 + n]
    pos += 1 + n
    m = int(fields[pos])
    flat = fields[pos + 1 : pos + 1 + 2 * m]
    env = dict(zip(flat[0::2], flat[1::2], strict=True))
    pos += 1 + 2 * m
    k = int(fields[pos])
    keep = fields[pos + 1 : pos + 1 + k]
    if not argv or len(argv) != n or len(keep) != k:
        raise ValueError("truncated exo start request")
    rest = fields[pos + 1 + k :]
    return {"cwd": fields[1], "pid_file": fields[2], "argv": argv, "env": env, "keep": keep,
            "exit_file": rest[0] if rest else "", "keeper": rest[1] if len(rest) > 1 else ""}


def main(args: list[str]) -> int:
    """Read the spec from the FIFO named in ``args`` and exec it."""
    if len(args) != 1:
        sys.stderr.write("usage: _launch.py FIFO\n")
        return 2
    fifo = args[0]
    try:
        with open(fifo, "rb") as fh:
            spec = decode(fh.read())
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"exo launcher: cannot read the start request: {exc}\n")
        return 126
    try:
        os.unlink(fifo)
    except OSError:
        pass
    if spec.get("keeper"):
        start_keeper(spec["keeper"])
    argv = spec["argv"]
    env = dict(spec["env"])
    for name in spec.get("keep", []):
        if name in os.environ:
            env[name] = os.environ[name]
    try:
        os.setsid()
    except OSError:
        pass  # already a session leader (tmux, Zellij)
    try:
        os.chdir(spec["cwd"])
    except OSError as exc:
        sys.stderr.write(f"exo launcher: cannot enter {spec['cwd']}: {exc}\n")
        return 126
    pid_file = spec.get("pid_file")
    if pid_file:
        tmp = f"{pid_file}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(f"{os.getpid()}\n")
        os.replace(tmp, pid_file)
    sys.stdout.flush()
    sys.stderr.flush()
    exit_file = spec.get("exit_file")
    if exit_file:
        return run_and_report(argv, env, exit_file)
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as exc:
        sys.stderr.write(f"exo launcher: cannot start {argv[0]}: {exc}\n")
        return 127


def run_and_report(argv: list[str], env: dict[str, str], exit_file: str) -> int:
    """Run ``argv`` as a child (same terminal, session and group), write its exit status to ``exit_file``.

    For multiplexers that do not keep a dead pane's exit status (Zellij): the launcher stays
    the pane's process and records how the agent ended. Keyboard signals of the terminal go
    to the agent, not to the launcher.
    """
    import signal

    pid = os.fork()
    if pid == 0:
        try:
            os.execvpe(argv[0], argv, env)
        except OSError as exc:
            sys.stderr.write(f"exo launcher: cannot start {argv[0]}: {exc}\n")
        os._exit(127)
    for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGTSTP):
        signal.signal(sig, signal.SIG_IGN)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    code = os.waitstatus_to_exitcode(status)
    tmp = f"{exit_file}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(f"{code}\n")
    os.replace(tmp, exit_file)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
