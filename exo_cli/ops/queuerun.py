"""The merge queue's runner: build the candidate, run the gates, land exactly what passed, bounce the culprit.

``advance`` runs while it holds the runner locks of one base (a file lock the kernel lets go
of when the process dies, so ``kill -9`` frees it, and the store's ``queue-run:<base>``, which
excludes a runner on another host) and returns when the queue is empty. Its
steps, each safe to be killed at:

1. ``recover``: entries a dead runner left ``testing`` go back to ``queued``; an entry whose
   candidate commit is already in the base landed before the runner died, so it is marked
   merged (never merged twice); clones it left are removed.
2. ``pick``: up to ``merge.batch`` entries at the head of the queue, after waiting up to
   ``merge.window`` seconds for the batch to fill.
3. ``build``: each entry merged (squash or merge, as ``pr merge`` would) onto the one before
   it, from git objects only; a conflict bounces that entry with the conflicting paths.
4. ``test``: the gates run in a throw-away clone of the tip (in the sandbox ``[sandbox] mode`` asks for:
   ``gatesandbox``); a red batch is run once more
   (flakes), then bisected by prefixes: a prefix that passes lands, and the first entry whose
   prefix fails is the culprit, bounced with the failing gate's log tail.
5. ``land``: under the base's merge lock, the base moves from the commit the candidate was
   built on to the tested commit and to nothing else (compare-and-swap, and the fast-forward
   of its checkout under ``pr merge``'s refusals). A base that moved means rebuild and
   re-test; a dirty checkout leaves the entries ``tested`` until it is clean.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from exo_cli import fault
from exo_cli.adapters.git import Git
from exo_cli.errors import ExoError, StateError
from exo_cli.ops import mergequeue as mq
from exo_cli.records import DONE, ROOT, PullRequest

if TYPE_CHECKING:
    from exo_cli.adapters.forge.github import GitHubForge
    from exo_cli.adapters.gates import GateRun
    from exo_cli.env import Env

CANDIDATE = "refs/exo/queue/candidate/{key}/{i}"
RETRY_LANDING = 2.0  # seconds between tries to land into a dirty checkout


@dataclass
class Built:
    commits: list[str]  # commits[i]: the base with entries 0..i merged
    conflict: tuple[int, list[str]] | None = None  # (index, paths) of the first entry that conflicts


def advance(env: Env, base: str) -> int:
    """Advance the queue of ``base`` until it is empty; how many entries landed (0: another runner holds it)."""
    from exo_cli.adapters.files import state_lock

    landed = 0
    while True:
        with state_lock(env.state_dir, f"mq-run-{mq.key(base)}", blocking=False) as lock, \
                env.store.named_lock(f"queue-run:{base}", host=env.host_name, wait=0) as held:
            if not lock.held or not held:  # another runner advances it (on this host, or another)
                return landed
            lock.write(f"{os.getpid()} {env.host_name}\n")
            recover(env, base)
            while True:
                batch = pick(env, base)
                if not batch:
                    drop_candidates(env, base)
                    break
                try:
                    landed += step(env, base, batch)
                except ExoError as exc:  # git or the store failed: say so (once), leave the entries queued
                    failed(env, base, exc)
                    return landed
        # an entry enqueued while this runner was letting go saw it alive and started none: look once more
        if not mq.waiting(env, base):
            return landed


def failed(env: Env, base: str, exc: ExoError) -> None:
    """Tell the human, once per message, that the runner of ``base`` stopped; its entries wait for the next one."""
    with mq.entries_lock(env, base):
        for pr in mq.waiting(env, base):
            if mq.entry(pr).get("state") == "testing":
                mq.set_entry(env, pr, state="queued", candidate=None, base_sha=None)
    import hashlib

    digest = hashlib.sha1(f"{base}\0{exc.message}".encode()).hexdigest()[:16]
    if env.store.kv_claim(f"mq-failed-{digest}", str(time.time())):
        from exo_cli.ops.delivery import post_notice

        post_notice(env, "pr-queued", ROOT, ROOT,
                    f"The merge queue of {base} stopped: {exc.message}. Its entries stay queued; "
                    f"`exo pr queue --run --base {base}` tries again.", data={"base": base, "error": exc.to_dict()})


def drop_candidates(env: Env, base: str) -> None:
    """Delete the candidate refs of ``base`` (kept while the queue runs, so git's gc never takes a tested commit)."""
    git = Git(env.repo.root)
    prefix = CANDIDATE.format(key=mq.key(base), i="")
    for line in git.out(["for-each-ref", "--format=%(objectname) %(refname)", prefix]).splitlines():
        sha, ref = line.split(" ", 1)
        git.delete_ref(ref, sha)


def recover(env: Env, base: str) -> None:
    """Undo what a runner that died left: its clones, its ``testing`` marks; mark what it landed merged."""
    from exo_cli.adapters.gates import leftovers, remove_clone

    for clone in leftovers(os.path.join(mq.folder(env, base), "clones")):
        remove_clone(clone)
    prune_logs(env, base)
    git = Git(env.repo.root)
    # the local base, and the remote's as this repository last saw it (a push updates it: a GitHub landing)
    tips = [t for t in (git.rev(f"refs/heads/{base}"),
                        git.rev(f"refs/remotes/{env.config.get('forge.remote') or 'origin'}/{base}")) if t]
    with mq.entries_lock(env, base):
        for pr in mq.waiting(env, base):
            q = mq.entry(pr)
            made = q.get("candidate")
            if made and any(git.is_ancestor(made, tip) for tip in tips):
                merged(env, pr, made)
            elif q.get("state") == "testing":
                mq.set_entry(env, pr, state="queued", candidate=None, base_sha=None)


KEEP_LOGS = 200  # gate logs kept per base (the newest; a bounced entry's log is among them while it is recent)


def prune_logs(env: Env, base: str) -> None:
    """Remove all but the newest ``KEEP_LOGS`` gate logs of ``base`` (and trim ``runs.log`` to as many lines x 20)."""
    import contextlib

    logs = os.path.join(mq.folder(env, base), "logs")
    try:
        names = sorted(os.listdir(logs))  # named by the time they started
    except OSError:
        return
    for name in names[:-KEEP_LOGS]:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(logs, name))
    runs = os.path.join(mq.folder(env, base), "runs.log")
    with contextlib.suppress(OSError):
        with open(runs, encoding="utf-8") as f:
            lines = f.readlines()
        if len(lines) > KEEP_LOGS * 20:
            from pathlib import Path

            from exo_cli.adapters.files import atomic_write

            atomic_write(Path(runs), "".join(lines[-KEEP_LOGS * 10:]))


def pick(env: Env, base: str) -> list[PullRequest]:
    """The next batch: the head of the queue, up to ``merge.batch``, once the fill window has passed."""
    size, window = int(env.config.get("merge.batch")), float(env.config.get("merge.window"))
    while True:
        ahead = mq.waiting(env, base)
        if not ahead:
            return []
        if mq.entry(ahead[0]).get("state") == "tested":  # passed already: land it (and what passed with it)
            return [p for p in ahead if mq.entry(p).get("state") == "tested"]
        if mq.entry(ahead[0]).get("solo"):  # its batch's push was refused: it lands (or is refused) alone
            return ahead[:1]
        oldest = min(float(mq.entry(p).get("seq", 0.0)) for p in ahead[:size])
        if len(ahead) >= size or time.time() >= oldest + window:
            # a batch stops before an entry that must land alone (one enqueued ahead of it meanwhile)
            return list(itertools.takewhile(lambda p: not mq.entry(p).get("solo"), ahead[:size]))
        time.sleep(min(0.2, max(0.01, oldest + window - time.time())))


def step(env: Env, base: str, batch: list[PullRequest]) -> int:
    """Test ``batch`` (retry, bisect), land what passed, bounce the culprit; how many landed."""
    from exo_cli.ops import queuegh

    git = Git(env.repo.root)
    batch = [p for p in batch if p.forge == batch[0].forge]  # one forge lands a batch (a repository changed forge)
    if mq.entry(batch[0]).get("state") == "tested":
        q = mq.entry(batch[-1])
        return land(env, base, batch, [str(mq.entry(p)["candidate"]) for p in batch], str(q.get("base_sha")))
    gh = queuegh.forge(env, batch)  # on GitHub the base that counts is the remote's
    base_sha = queuegh.remote_base(env, gh, base) if gh is not None else git.rev(f"refs/heads/{base}")
    if base_sha is None:
        for pr in batch:
            bounce(env, pr, f"the base branch {base} does not exist", files=None, run=None)
        return 0
    for pr in batch:  # a pinned head git no longer has (a record edited by hand, a pruned object): out of the queue
        if git.rev(f"{mq.entry(pr).get('pinned')}^{{commit}}") is None:
            bounce(env, pr, "its pinned head is gone from the repository", files=None, run=None)
            return 0
    built = build(env, git, base, batch, base_sha)
    if built.conflict is not None:
        i, paths = built.conflict
        bounce(env, batch[i], f"conflicts with {base} and the entries ahead of it", files=paths, run=None)
        batch, built.commits = batch[:i], built.commits[:i]
        if not batch:
            return 0
    with mq.entries_lock(env, base):
        for pr, made in zip(batch, built.commits, strict=True):
            mq.set_entry(env, pr, state="testing", candidate=made, base_sha=base_sha)
    for pr in batch:
        queuegh.status(env, pr, "pending", f"testing in the merge queue of {base}")
    run = gate(env, base, built.commits[-1])
    if not run.ok:
        run = gate(env, base, built.commits[-1])  # once more: a flaky gate must not bounce anyone
    if run.ok:
        return land(env, base, batch, built.commits, base_sha)
    lo, hi, failed = 0, len(batch), run
    while hi - lo > 1:  # the first prefix that fails ends with the culprit
        mid = (lo + hi) // 2
        tried = gate(env, base, built.commits[mid - 1])
        if tried.ok:
            lo = mid
        else:
            hi, failed = mid, tried
    landed = land(env, base, batch[:lo], built.commits[:lo], base_sha) if lo else 0
    bounce(env, batch[hi - 1], f"gate failed: {failed.command}", files=None, run=failed)
    with mq.entries_lock(env, base):  # the ones after it are built and tested again, on the new base
        for pr in batch[hi:]:
            fresh = env.store.pr(pr.number)
            if fresh is not None and mq.entry(fresh).get("state") == "testing":
                mq.set_entry(env, fresh, state="queued", candidate=None, base_sha=None)
    return landed


def build(env: Env, git: Git, base: str, batch: list[PullRequest], base_sha: str) -> Built:
    """Each entry merged onto the one before it, from ``base_sha``; git objects and exo's refs only."""
    from exo_cli.adapters.forge.local import merge_commit
    from exo_cli.ops.pr import merge_message

    commits: list[str] = []
    at = base_sha
    for i, pr in enumerate(batch):
        q = mq.entry(pr)
        strategy = str(q.get("strategy") or "squash")
        try:
            at = merge_commit(git, pr, base_sha=at, head_sha=str(q["pinned"]), strategy=strategy,
                              message=merge_message(pr, strategy))
        except StateError as exc:
            if exc.data.get("reason") != "conflict":
                raise
            return Built(commits, (i, list(exc.data.get("files") or [])))
        git.update_ref(CANDIDATE.format(key=mq.key(base), i=i), at, reason="exo: merge queue candidate")
        commits.append(at)
    return Built(commits)


def gate(env: Env, base: str, commit: str) -> GateRun:
    """Run ``merge.setup`` then every gate of ``base`` on ``commit`` in a fresh clone; the first failing run, or the
    last one. Sandboxed as ``[sandbox] mode`` says (``ops/gatesandbox``): a sandbox that cannot be made raises
    (the runner stops and tells the human; nobody is bounced for it)."""
    from exo_cli.adapters.gates import GateRun, clone_token, make_clone, remove_clone, run_gate
    from exo_cli.adapters.worktree import copy_into
    from exo_cli.ops import gatesandbox

    top = mq.folder(env, base)
    stamp = f"{time.time():.6f}-{os.getpid()}"
    clone = os.path.join(top, "clones", stamp)
    log = os.path.join(top, "logs", f"{stamp}-{commit[:12]}.log")
    environ = gate_environ(env)
    walled = gatesandbox.decide(env)
    try:
        try:
            make_clone(env.repo.common_dir, clone, commit)
            token = clone_token(clone)
            from pathlib import Path

            copy_into(Path(clone), env.repo.root, copy=env.config.get("worktree.copy") or [],
                      symlink=env.config.get("worktree.symlink") or [])
        except ExoError as exc:
            return GateRun("(preparing the clone)", 1, False, log, exc.message, 0.0)
        fault.point("queue.cloned", env.environ)
        with gatesandbox.sandboxed(env, base, clone, environ) if walled else contextlib.nullcontext() as plan:
            last: GateRun | None = None
            for command in env.config.get("merge.setup") or []:
                last = run_gate(clone, command, mq.DEFAULT_TIMEOUT, environ, log, plan=plan, token=token)
                if not last.ok:
                    return last
            for g in mq.gates(env, base):
                last = run_gate(clone, g["command"], float(g.get("timeout", mq.DEFAULT_TIMEOUT)), environ, log,
                                plan=plan, token=token)
                if not last.ok:
                    return last
        # no gate applies any more (the configuration changed since it was enqueued): nothing lands untested
        return last if mq.gates(env, base) and last is not None else \
            GateRun("(no gate)", 1, False, log, f"no merge gate applies to {base} any more; merge it again", 0.0)
    finally:
        remove_clone(clone)
        remove_clone(gatesandbox.home_of(clone))
        record_run(env, base, commit, log)


def gate_environ(env: Env) -> dict[str, str]:
    """The gates' environment: the caller's, without any agent's identity or exo's state secrets."""
    from exo_cli.env import MARKER_VARS

    return {k: v for k, v in env.environ.items() if k not in MARKER_VARS and not k.startswith("EXO_RUN")}


def record_run(env: Env, base: str, commit: str, log: str) -> None:
    """Append the gate run to the base's gate log (``runs.log``: one commit per line, with its result)."""
    from exo_cli.adapters.gates import tail

    ok = tail(log, 200).rstrip().endswith("[exit 0]") and "timed out" not in tail(log, 400)
    os.makedirs(mq.folder(env, base), exist_ok=True)
    with open(os.path.join(mq.folder(env, base), "runs.log"), "a", encoding="utf-8") as f:
        f.write(f"{commit} {'pass' if ok else 'fail'} {log}\n")


def land(env: Env, base: str, batch: list[PullRequest], commits: list[str], base_sha: str) -> int:
    """Move ``base`` from ``base_sha`` to ``commits[-1]`` (what passed) and mark the batch merged; how many landed."""
    from exo_cli.ops import queuegh
    from exo_cli.ops.pr import merge_lock, refuse_paused

    git = Git(env.repo.root)
    tip = commits[-1]
    gh = queuegh.forge(env, batch)
    with merge_lock(env, base):
        now = queuegh.remote_base(env, gh, base) if gh is not None else git.rev(f"refs/heads/{base}")
        if now is not None and git.is_ancestor(tip, now):  # landed before a kill: only the records are left
            with mq.entries_lock(env, base):
                for pr, made in zip(batch, commits, strict=True):
                    merged(env, pr, made)
            return len(batch)
        if now != base_sha:  # the base moved (a plain merge, a commit): rebuild and re-test
            with mq.entries_lock(env, base):
                for pr in batch:
                    mq.set_entry(env, pr, state="queued", candidate=None, base_sha=None)
            return 0
        with mq.entries_lock(env, base):
            for pr, made in zip(batch, commits, strict=True):
                mq.set_entry(env, pr, state="tested", candidate=made, base_sha=base_sha)
        if gh is not None:
            if not push(env, gh, base, batch, tip):
                return 0
        else:
            try:
                refuse_paused(env, base, batch[0].number)
                from exo_cli.ops.checkpoints import before_branch_moves

                before_branch_moves(env, base, "merge")
                fault.point("queue.landing", env.environ)
                git.fast_forward(base, base_sha, tip, reason=f"exo: merge queue lands {len(batch)} PR(s)",
                                 what=f"land the merge queue's tested commit into {base}")
            except StateError as exc:
                stuck(env, base, batch, exc)
                time.sleep(RETRY_LANDING)
                return 0
        fault.point("queue.landed", env.environ)
        with mq.entries_lock(env, base):
            for pr, made in zip(batch, commits, strict=True):
                merged(env, pr, made)
    if gh is not None:  # the local base follows the remote's (fetched, fast-forwarded when it can be)
        with contextlib.suppress(ExoError):
            gh.sync_base(base, reason=f"exo: merge queue landed {len(batch)} PR(s) on GitHub")
    warn_conflicting(env, base, tip, skip={p.author for p in batch})
    return len(batch)


def push(env: Env, gh: GitHubForge, base: str, batch: list[PullRequest], tip: str) -> bool:
    """Land ``tip`` on the remote's ``base`` by a fast-forward push; False when it did not.

    A base that moved on the remote: the batch is queued again (rebuilt, re-tested). A refusal of
    the branch itself (a protected branch): every entry is bounced with git's message. Any other
    refusal may be about one entry's commits (a pre-receive hook): a batch of several is queued
    again to land one by one (``solo``: each built on the base, tested and pushed alone), so only
    the entry whose own push is refused is bounced.
    """
    from exo_cli.limits import clip
    from exo_cli.ops.checkpoints import before_branch_moves
    from exo_cli.validate import visible

    before_branch_moves(env, base, "merge")  # the local base follows the push: agents' checkouts of it saved first
    fault.point("queue.landing", env.environ)
    try:
        gh.land(base, tip)
    except StateError as exc:
        refused = exc.data.get("reason") != "base-moved"
        one_by_one = refused and exc.data.get("scope") != "branch" and len(batch) > 1
        with mq.entries_lock(env, base):
            for pr in batch:
                mq.set_entry(env, pr, state="queued", candidate=None, base_sha=None,
                             **({"solo": True} if one_by_one else {}))
        if refused and not one_by_one:  # git's own words, to each author
            said = visible(clip(str(exc.data.get("git") or exc.message), "tail", "message")[0])
            for pr in batch:
                bounce(env, pr, f"the push to {base} on GitHub was refused: {said}", files=None, run=None)
        return False
    return True


def warn_conflicting(env: Env, base: str, tip: str, *, skip: set[str]) -> list[str]:
    """Tell each idle agent working off ``base`` whose branch now conflicts with it, at once (once per base tip).

    Its next stop would find out by failing to rebase; an idle agent has no next stop until
    someone wakes it, so the notice is typed in now.
    """
    from exo_cli.ops.delivery import deliver, post_notice
    from exo_cli.records import AT_REST

    git = Git(env.repo.root)
    told: list[str] = []
    for agent in env.store.agents():
        if agent.base_branch != base or not agent.branch or agent.id in skip or agent.status not in AT_REST \
                or agent.retired:
            continue
        try:
            paths = git.merge_tree(tip, f"refs/heads/{agent.branch}").conflicts
        except ExoError:
            continue
        if not paths or not env.store.kv_claim(f"mq-conflict-{agent.id}-{tip}", "1"):
            continue
        listed = ", ".join(sorted(set(paths))[:10])
        msg = post_notice(env, "event", ROOT, agent.id,
                          f"The merge queue just landed into {base}, and your branch {agent.branch} now conflicts "
                          f"with it in: {listed}. Rebase onto {base} and resolve them before you file or merge again.",
                          data={"event": "conflict", "base": base, "paths": sorted(set(paths))})
        deliver(env, msg, agent)
        told.append(agent.id)
    return told


def merged(env: Env, pr: PullRequest, made: str) -> None:
    """Record ``pr`` as merged as ``made`` (under the entries lock); tell its author and siblings once."""
    from exo_cli.ops.pr import notify_merged

    fresh = env.store.pr(pr.number) or pr
    if fresh.state == "merged":
        return
    q = mq.entry(fresh)
    env.store.update_pr(pr.number, state="merged", strategy=q.get("strategy"), merge_commit=made,
                        merged_at=time.time(), data={**fresh.data, "head_sha": q.get("pinned"),
                                                     "queue": {**q, "state": "merged", "at": time.time()}})
    Git(env.repo.root).delete_ref(mq.PIN.format(number=pr.number), str(q.get("pinned")))
    notify_merged(env, env.store.pr(pr.number) or fresh, sender=ROOT)
    from exo_cli.ops.queuegh import after_landing

    after_landing(env, env.store.pr(pr.number) or fresh, made)


def stuck(env: Env, base: str, batch: list[PullRequest], exc: StateError) -> None:
    """Tell the human once that tested entries wait for the base's checkout to be clean."""
    told = f"mq-stuck-{mq.key(base)}-{batch[-1].number}-{exc.data.get('reason')}"
    if not env.store.kv_claim(told, str(time.time())):
        return
    from exo_cli.ops.delivery import post_notice

    numbers = ", ".join(f"#{p.number}" for p in batch)
    post_notice(env, "pr-queued", ROOT, ROOT,
                f"Merge queue: {numbers} passed the gates but cannot land into {base}: {exc.message}. "
                f"{exc.hint or ''} Landing is retried until it can.".strip(),
                data={"prs": [p.number for p in batch], "base": base, "reason": exc.data.get("reason")})


def bounce(env: Env, pr: PullRequest, reason: str, *, files: list[str] | None, run: GateRun | None) -> None:
    """Take ``pr`` out of the queue and send the reason to its author (its parent when the author is gone)."""
    from exo_cli.limits import clip
    from exo_cli.validate import visible

    # what a gate printed is shown to a person and typed into an agent's pane: no control character acts
    tail = visible(clip(run.tail, "tail", "message")[0]) if run is not None else None
    with mq.entries_lock(env, pr.base):
        fresh = env.store.pr(pr.number) or pr
        q = mq.entry(fresh)
        if q.get("state") not in mq.WAITING:
            return
        mq.set_entry(env, fresh, state="bounced", reason=reason, files=files, log=run.log if run else None,
                     tail=tail, candidate=None, base_sha=None)
        Git(env.repo.root).delete_ref(mq.PIN.format(number=pr.number), str(q.get("pinned")))
    data = {"pr": pr.number, "head": pr.head, "base": pr.base, "reason": reason, "files": files,
            "log": run.log if run else None}
    env.store.event("pr-bounced", pr.author, data)
    from exo_cli.ops.queuegh import status

    status(env, pr, "failure", f"bounced from the merge queue: {reason}")
    mq.signal(env, "pr-bounced", pr, f"PR #{pr.number} ({pr.head} -> {pr.base}) bounced: {reason}")
    detail = ("Conflicting paths: " + ", ".join(files[:20]) if files else
              f"The end of its log ({run.log if run else ''}):\n{tail}" if tail else "")
    body = (f"Your PR #{pr.number} ({pr.head} -> {pr.base}) was bounced from the merge queue: {reason}. "
            f"Fix it on {pr.head} (rebase onto {pr.base} first if it conflicts), then ask for `exo pr merge "
            f"{pr.number}` again.\n{detail}").rstrip()
    tell(env, pr, body, data)


def tell(env: Env, pr: PullRequest, body: str, data: dict[str, Any]) -> None:
    """Post ``body`` to the PR's author and wake it when it rests; to its parent when it is gone."""
    from exo_cli.ops.delivery import deliver, post_notice

    author = env.store.agent(pr.author) if pr.author != ROOT else None
    if author is not None and author.status != DONE and not author.retired:
        msg = post_notice(env, "pr-bounced", ROOT, author.id, body, data=data)
        deliver(env, msg, author)  # an idle author gets a new turn now
        return
    parent = (author.parent if author is not None else None) or ROOT
    gone = f"{pr.author} is gone, so you are told instead. " if pr.author != ROOT else ""
    msg = post_notice(env, "pr-bounced", ROOT, parent, gone + body, data=data)
    rec = env.store.agent(parent)
    if rec is not None:
        deliver(env, msg, rec)


def _removed(clone: str) -> bool:
    from exo_cli.adapters.gates import remove_clone

    remove_clone(clone)
    return not os.path.lexists(clone)


def leftovers(env: Env) -> list[tuple[str, str, str, str, Any]]:
    """What ``exo doctor`` repairs of the merge queues: clones a dead runner left, and queues no runner advances.

    Each is (kind, subject, detail, action, repair); a base whose runner is alive is left to it.
    """
    from exo_cli.adapters.gates import leftovers as clones_in

    out: list[tuple[str, str, str, str, Any]] = []
    if not env.has_state():
        return out
    bases = sorted({p.base for p in env.store.prs() if mq.entry(p)})
    for base in bases:
        if mq.runner_alive(env, base):
            continue
        for clone in clones_in(os.path.join(mq.folder(env, base), "clones")):
            out.append(("queue-clone", base, f"a candidate clone a merge queue runner left: {clone}", "removed",
                        lambda clone=clone: _removed(clone)))
        waiting = mq.waiting(env, base)
        if waiting:
            out.append(("queue-stalled", base, f"{len(waiting)} PR(s) wait in the merge queue and no runner advances it",
                        "started a runner", lambda base=base: mq.start_runner(env, base)))
    return out


def resume_idle(env: Env) -> list[str]:
    """Start a detached runner for each base whose queue has entries and no runner: the bases started.

    What every long-lived exo process of the human does now and then (the root TL's session,
    the broker's reaper, ``exo watch``), so a queue whose runner was killed never stalls.
    """
    if not env.has_state():
        return []
    started = []
    for base in sorted({p.base for p in env.store.prs(state="open") if mq.entry(p).get("state") in mq.WAITING}):
        if not mq.runner_alive(env, base) and mq.start_runner(env, base):
            started.append(base)
    return started


def resume_queues(env: Env) -> None:
    """Entry for ``mcp_server.BACKGROUND``: the root TL's session starts a runner for each queue nobody advances."""
    if env.caller.is_human:
        resume_idle(env)
