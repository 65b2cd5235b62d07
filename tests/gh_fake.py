"""A fake GitHub API on 127.0.0.1 for driving the REAL ``gh`` binary without any network.

``gh`` treats the host ``github.localhost`` as a development GitHub whose API is plain
HTTP at ``http://api.github.localhost/``; with ``HTTP_PROXY``/``HTTPS_PROXY`` pointing
at this server every request ``gh`` makes lands here (and nowhere else), is logged, and
is answered from a small in-memory model of one repository's pull requests. Unknown
requests get HTTP 500, so ``gh`` fails loudly instead of reaching anything real. Besides the
PRs it keeps their comments and closing (``gh pr close --comment``) and the commit statuses
``gh api repos/OWNER/REPO/statuses/SHA`` sets (``statuses``). With
``bare`` set to the remote's bare repository, creating a PR whose base or head branch the
remote lacks is refused as GitHub refuses it.
"""

from __future__ import annotations

import http.server
import json
import re
import threading
from collections.abc import Callable
from typing import Any

HOST = "github.localhost"


class FakeGitHub:
    """In-memory pull requests of ``owner/name`` served over a local HTTP proxy port."""

    def __init__(self, owner: str = "o", name: str = "r") -> None:
        self.owner, self.name = owner, name
        self.requests: list[dict[str, Any]] = []
        self.prs: dict[int, dict[str, Any]] = {}
        self.next_number = 7
        # called with (pr, "SQUASH"|"MERGE") when gh merges; returns the merge commit's sha
        self.on_merge: Callable[[dict[str, Any], str], str | None] | None = None
        self.statuses: list[dict[str, Any]] = []  # the commit statuses set (``gh api .../statuses/SHA``), in order
        self.lock = threading.Lock()
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _handle(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n).decode() if n else ""
                code, out = fake.answer(self.command, self.path, raw, dict(self.headers))
                data = json.dumps(out).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = do_CONNECT = _handle

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeGitHub:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def has_branch(self, name: str) -> bool:
        """Whether the remote has branch ``name`` (always, unless ``bare`` names the remote's bare repository)."""
        bare = getattr(self, "bare", None)
        if bare is None:
            return True
        import subprocess

        return subprocess.run(["git", "-C", str(bare), "rev-parse", "--verify", "--quiet", f"refs/heads/{name}"],
                              capture_output=True).returncode == 0

    @property
    def slug(self) -> str:
        return f"{HOST}/{self.owner}/{self.name}"

    def env(self, config_dir: str) -> dict[str, str]:
        """Environment for ``gh``: a dummy token, its own config dir, every request routed here."""
        proxy = f"http://127.0.0.1:{self.port}"
        return {"GH_TOKEN": "dummy-token", "GH_ENTERPRISE_TOKEN": "dummy-token", "HTTP_PROXY": proxy,
                "HTTPS_PROXY": proxy, "http_proxy": proxy, "https_proxy": proxy, "NO_PROXY": "",
                "no_proxy": "", "GH_NO_UPDATE_NOTIFIER": "1", "GH_PROMPT_DISABLED": "1",
                "GH_CONFIG_DIR": config_dir, "NO_COLOR": "1"}

    # -- the model ---------------------------------------------------------------------------
    def repo(self) -> dict[str, Any]:
        return {"id": "R_1", "name": self.name, "owner": {"login": self.owner}, "hasIssuesEnabled": True,
                "description": "", "hasWikiEnabled": False, "viewerPermission": "ADMIN",
                "defaultBranchRef": {"name": "main"}, "parent": None, "mergeCommitAllowed": True,
                "rebaseMergeAllowed": True, "squashMergeAllowed": True}

    def pr_node(self, pr: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": pr["id"], "number": pr["number"], "title": pr["title"], "body": pr["body"],
            "url": f"https://{HOST}/{self.owner}/{self.name}/pull/{pr['number']}", "state": pr["state"],
            "isDraft": pr["isDraft"], "baseRefName": pr["base"], "headRefName": pr["head"],
            "headRepositoryOwner": {"login": self.owner}, "headRepository": {"name": self.name},
            "isCrossRepository": False, "reviewDecision": pr.get("reviewDecision", ""),
            "mergedAt": pr.get("mergedAt"), "closed": pr["state"] != "OPEN",
            "mergeCommit": pr.get("mergeCommit"), "mergeable": "MERGEABLE",
            "mergeStateStatus": "CLEAN", "headRefOid": "0" * 40, "author": {"login": "exo"},
            "statusCheckRollup": {"nodes": [{"commit": {"statusCheckRollup": {"contexts": {
                "nodes": pr.get("checks", []), "pageInfo": {"hasNextPage": False, "endCursor": ""}}}}}]},
            "latestReviews": {"nodes": pr.get("reviews", [])},
            "reviews": {"nodes": pr.get("reviews", []), "pageInfo": {"hasNextPage": False, "endCursor": ""},
                        "totalCount": len(pr.get("reviews", []))},
        }

    def answer(self, method: str, path: str, raw: str, headers: dict[str, str]) -> tuple[int, Any]:
        entry: dict[str, Any] = {"method": method, "path": path, "auth": headers.get("Authorization")}
        with self.lock:
            self.requests.append(entry)
            status = re.search(rf"/repos/{re.escape(self.owner)}/{re.escape(self.name)}/statuses/([0-9a-f]{{40}})$",
                               path)
            if status and method == "POST":  # REST: create a commit status
                body = json.loads(raw or "{}")
                if body.get("state") not in ("pending", "success", "failure", "error"):
                    return 422, {"message": "Validation Failed"}
                self.statuses.append({"sha": status.group(1), **body})
                return 201, {"state": body["state"], "context": body.get("context", "default")}
            if "graphql" not in path:
                return 500, {"message": f"fake GitHub: unhandled {method} {path}"}
            q = json.loads(raw)
            m = re.search(r"(query|mutation)\s+(\w+)", q.get("query", ""))
            op = m.group(2) if m else ""
            var = q.get("variables") or {}
            entry.update(op=op, variables=var)
            if op == "RepositoryInfo":
                return 200, {"data": {"repository": self.repo()}}
            if op == "PullRequestForBranch":
                nodes = [self.pr_node(p) for p in self.prs.values()
                         if p["head"] == var.get("headRefName") and p["state"] in (var.get("states") or ["OPEN"])]
                return 200, {"data": {"repository": {"pullRequests": {"nodes": nodes}}}}
            if op.endswith("_fields"):  # gh's feature detection by introspection
                names = ["id", "number", "title", "body", "state", "isDraft", "mergedAt", "mergeCommit",
                         "reviewDecision", "statusCheckRollup", "latestReviews", "autoMergeRequest"]
                return 200, {"data": {op.split("_")[0]: {"fields": [{"name": n} for n in names]}}}
            if op == "PullRequestProjectItems":
                return 200, {"data": {"repository": {"pullRequest": {"projectItems": {
                    "nodes": [], "pageInfo": {"hasNextPage": False, "endCursor": ""}}}}}}
            if op == "PullRequestCreate":
                inp = var["input"]
                missing = [r for r in (inp["baseRefName"], inp["headRefName"]) if not self.has_branch(r)]
                if missing:  # what GitHub answers for a branch it does not have
                    return 200, {"data": {"createPullRequest": None}, "errors": [
                        {"type": "UNPROCESSABLE", "path": ["createPullRequest"],
                         "message": f"{'Base' if missing[0] == inp['baseRefName'] else 'Head'} ref must be a branch"}]}
                number = self.next_number
                self.next_number += 1
                pr = {"id": f"PR_{number}", "number": number, "title": inp["title"], "body": inp.get("body", ""),
                      "base": inp["baseRefName"], "head": inp["headRefName"], "isDraft": bool(inp.get("draft")),
                      "state": "OPEN"}
                self.prs[number] = pr
                return 200, {"data": {"createPullRequest": {"pullRequest": self.pr_node(pr)}}}
            if op == "PullRequestByNumber":
                pr = self.prs.get(int(var.get("pr_number", 0)))
                if pr is None:
                    return 200, {"data": {"repository": {"pullRequest": None}},
                                 "errors": [{"type": "NOT_FOUND", "message": "Could not resolve to a PullRequest"}]}
                return 200, {"data": {"repository": {"pullRequest": self.pr_node(pr)}}}
            if op in ("PullRequestMerge", "MergePullRequest"):
                inp = var["input"]
                for pr in self.prs.values():
                    if pr["id"] == inp.get("pullRequestId"):
                        oid = self.on_merge(pr, inp.get("mergeMethod", "MERGE")) if self.on_merge else None
                        pr.update(state="MERGED", mergedAt="2026-01-01T00:00:00Z",
                                  mergeMethod=inp.get("mergeMethod"), mergeCommit={"oid": oid} if oid else None)
                        return 200, {"data": {"mergePullRequest": {"clientMutationId": ""}}}
                return 200, {"errors": [{"message": "no such PR"}]}
            if op in ("PullRequestUpdate", "UpdatePullRequest"):
                inp = var["input"]
                for pr in self.prs.values():
                    if pr["id"] == inp.get("pullRequestId"):
                        pr.update({k: inp[k] for k in ("title", "body") if k in inp})
                        return 200, {"data": {"updatePullRequest": {"__typename": "UpdatePullRequestPayload"}}}
                return 200, {"errors": [{"message": "no such PR"}]}
            if op == "CommentCreate":
                inp = var["input"]
                for pr in self.prs.values():
                    if pr["id"] == inp.get("subjectId"):
                        pr.setdefault("comments", []).append(inp["body"])
                        url = f"https://{HOST}/{self.owner}/{self.name}/pull/{pr['number']}#issuecomment-1"
                        return 200, {"data": {"addComment": {"commentEdge": {"node": {"url": url}}}}}
                return 200, {"errors": [{"message": "no such subject"}]}
            if op == "PullRequestClose":
                inp = var["input"]
                for pr in self.prs.values():
                    if pr["id"] == inp.get("pullRequestId"):
                        pr["state"] = "CLOSED"
                        return 200, {"data": {"closePullRequest": {"pullRequest": {"id": pr["id"]}}}}
                return 200, {"errors": [{"message": "no such PR"}]}
            return 500, {"message": f"fake GitHub: unhandled graphql operation {op!r}"}
