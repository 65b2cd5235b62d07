// exo ui: the page. Every agent text reaches the DOM through textContent (el() below), never as HTML.
// State comes from the server: a board snapshot pushed over Server-Sent Events at every change, and
// the pane of the agent whose page is open; actions POST to /api/act/<name> with the page's token.
"use strict";

const TOKEN = document.querySelector('meta[name="exo-token"]').getAttribute("content");
const NEEDS_TEXT = {asking: "asks you", permission: "needs a permission", dialog: "blocked on a dialog",
  failed: "turn failed", budget: "over its budget", "pr-ready": "PR ready", dead: "dead"};
// Why a row needs you, in words: an agent the team's budget holds says so (its status_reason starts "over budget: the team").
function needsText(r) {
  if (r.needs === "budget" && String(r.agent.status_reason || "").startsWith("over budget: the team ")) return "the team is over its budget";
  return NEEDS_TEXT[r.needs] || r.needs;
}
// The fields of an agent's row this page shows in its own columns or leaves out; any other field (a sandbox,
// a queue position, a cost, added by later versions) gets a column of its own when an agent has it.
const KNOWN = new Set(["id", "name", "role", "parent", "depth", "status", "status_reason", "backend", "mux", "task",
  "bead", "branch", "base_branch", "worktree", "location", "pr", "last_message", "age_seconds", "status_age_seconds",
  "turns", "tool_calls", "tokens", "host", "layout", "sandboxed"]);
const EXTRA_MAX = 80; // characters of such a field's value
let board = null;
let source = null;
let sourceAgent = null;

// el("td", {class: "x"}, "text", child...): strings become text nodes, never markup.
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "onclick" || k === "onsubmit") node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function link(route, text) { return el("a", {href: "#/" + route.map(encodeURIComponent).join("/")}, text); }

function ago(seconds) {
  if (seconds === null || seconds === undefined) return "";
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return s + "s";
  if (s < 3600) return Math.floor(s / 60) + "m";
  if (s < 86400) return Math.floor(s / 3600) + "h";
  return Math.floor(s / 86400) + "d";
}

function flash(text, error) {
  const f = document.getElementById("flash");
  f.textContent = text;
  f.className = error ? "error" : "";
}

function route() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").filter(Boolean).map(decodeURIComponent);
  return parts.length ? parts : ["team"];
}

async function getJSON(url) {
  const r = await fetch(url, {credentials: "same-origin"});
  const body = await r.json().catch(() => null);
  if (!r.ok) throw new Error(errorText(body, r));
  return body;
}

function errorText(body, r) {
  const e = body && body.error;
  if (!e) return r.status + " " + r.statusText;
  return e.message + (e.hint ? "\n" + e.hint : "");
}

// An action: the same registry operation as the command, with the human's role; destructive ones ask first.
async function act(name, args, ask) {
  if (ask && !window.confirm(ask)) return null;
  const r = await fetch("/api/act/" + name, {method: "POST", credentials: "same-origin",
    headers: {"Content-Type": "application/json", "X-Exo-Token": TOKEN}, body: JSON.stringify(args)});
  const body = await r.json().catch(() => null);
  if (!r.ok) { flash(name + " refused: " + errorText(body, r), true); return null; }
  if (name === "merge" && body && !body.merge_commit) {  // merge gates: the PR waits in the merge queue
    flash("merge: PR #" + body.pr.number + " " + body.state + (body.position ? ", position " + body.position : "") + " in the merge queue");
  } else flash(name + ": done");
  return body;
}

function rows() { return board ? board.rows : []; }
function row(id) { return rows().find((r) => r.agent.id === id); }

// -- the pages ----------------------------------------------------------------------------------
function teamPage() {
  const list = rows();
  if (!board) return el("p", {class: "dim"}, "Loading…");
  if (!list.length) return el("p", {class: "dim"}, "No agents. Start one with `exo spawn`.");
  const hosts = list.some((r) => r.host);
  const extra = [...new Set(list.flatMap((r) => Object.keys(r.agent)))]
    .filter((k) => !KNOWN.has(k) && list.some((r) => r.agent[k] !== undefined && r.agent[k] !== null && r.agent[k] !== ""));
  const head = el("tr", {}, el("th", {}, ""), el("th", {}, "Agent"), el("th", {}, "Status"), hosts && el("th", {}, "Host"),
    el("th", {}, "Task"), el("th", {}, "PR"), el("th", {}, "Turns / tools / tokens"),
    extra.map((k) => el("th", {}, k.replace(/_/g, " "))), el("th", {}, "Last message"), el("th", {}, "Conflicts"), el("th", {}, "Age"));
  const body = list.map((r) => {
    const a = r.agent;
    const pr = a.pr ? "#" + a.pr.number + " " + a.pr.state : "";
    return el("tr", {class: r.needs ? "needs needs-" + r.needs : "", "data-agent": a.id},
      el("td", {class: "why"}, r.needs ? needsText(r) : ""),
      el("td", {}, "\u00a0\u00a0".repeat(Math.max(0, a.depth - 1)), link(["agent", a.id], a.name),
        a.name !== a.id ? el("span", {class: "dim"}, " (" + a.id + ")") : ""),
      el("td", {}, a.status, a.status_reason ? el("span", {class: "dim"}, " " + a.status_reason) : "",
        a.sandboxed ? el("span", {class: "dim"}, " · sandboxed") : "",
        a.layout && a.layout !== "worktree" ? el("span", {class: "dim"}, " · " + a.layout) : ""),
      hosts && el("td", {}, r.host),
      el("td", {}, a.task || ""),
      el("td", {}, a.pr ? link(["pr", String(a.pr.number)], pr) : ""),
      el("td", {}, [a.turns, a.tool_calls, a.tokens].map((n) => Number(n || 0).toLocaleString("en-US")).join(" / ")),
      extra.map((k) => el("td", {}, extraText(a[k]))),
      el("td", {class: "body"}, a.last_message || ""),
      el("td", {}, r.conflicts.join("; ")),
      el("td", {}, ago(a.age_seconds)));
  });
  return el("table", {id: "team"}, el("thead", {}, head), el("tbody", {}, body));
}

function extraText(v) {
  if (v === null || v === undefined) return "";
  const text = typeof v === "object" ? JSON.stringify(v) : String(v);
  return text.length > EXTRA_MAX ? text.slice(0, EXTRA_MAX - 1) + "…" : text;
}

function messagesOf(id) { return board ? board.inbox.filter((m) => m.sender === id) : []; }

function inboxItem(m) {
  return el("div", {class: "item" + (m.pending ? " pending" : ""), "data-message": m.id},
    el("div", {}, el("strong", {}, m.event || m.kind), " from ", link(["agent", m.sender], m.name),
      el("span", {class: "dim"}, " " + ago(Date.now() / 1000 - m.created_at) + " ago"),
      m.pending ? el("button", {class: "answer", onclick: () => startAnswer(m)}, "Answer") : ""),
    el("div", {class: "body"}, m.body));
}

let answering = null;
function startAnswer(m) {
  answering = m;
  const box = document.getElementById("answer-box");
  if (!box) return;
  box.hidden = false;
  document.getElementById("answer-to").textContent = "Answer " + m.name + ": " + m.body;
  document.getElementById("answer-text").focus();
}

function answerForm() {
  return el("form", {id: "answer-box", class: "box", hidden: true, onsubmit: async (e) => {
    e.preventDefault();
    const text = document.getElementById("answer-text");
    if (!answering || !text.value.trim()) return;
    if (await act("answer", {agent: answering.sender, message: text.value})) {
      text.value = "";
      document.getElementById("answer-box").hidden = true;
      answering = null;
    }
  }}, el("div", {id: "answer-to", class: "body"}), el("textarea", {id: "answer-text"}), el("button", {}, "Answer"));
}

function sendForm(to) {
  const pick = to ? null : el("select", {id: "send-to"}, rows().map((r) => el("option", {value: r.agent.id}, r.agent.id)));
  return el("form", {id: "send-box", class: "box", onsubmit: async (e) => {
    e.preventDefault();
    const text = document.getElementById("send-text");
    const target = to || document.getElementById("send-to").value;
    if (!target || !text.value.trim()) return;
    if (await act("send", {to: [target], message: text.value})) text.value = "";
  }}, pick, el("textarea", {id: "send-text", placeholder: "Message" + (to ? " to " + to : "")}), el("button", {}, "Send"));
}

function inboxPage() {
  const list = el("div", {id: "inbox-list"});
  fillInbox(list);
  return el("div", {}, el("h2", {}, "Inbox"), answerForm(), list, el("h2", {}, "Send"), sendForm(null));
}

function fillInbox(list) {
  const items = board ? board.inbox : [];
  list.replaceChildren(...(items.length ? items.map(inboxItem) : [el("p", {class: "dim"}, "Nothing for you.")]));
}

function agentPage(id) {
  const r = row(id);
  const wrap = el("div", {id: "agent", "data-agent": id});
  const head = el("div", {id: "agent-head"});
  fillAgentHead(head, id);
  const pane = el("pre", {id: "pane", class: "pane"}, r ? "…" : "");
  const messages = el("div", {id: "agent-messages"});
  fillAgentMessages(messages, id);
  const diff = el("div", {id: "diff"}, el("p", {class: "dim"}, "Loading the diff…"));
  const cps = el("div", {id: "checkpoints"});
  wrap.append(head, el("h2", {}, "Pane"), pane, el("h2", {}, "Messages"), answerForm(), messages, sendForm(id),
    el("h2", {}, "Diff"), diff, el("h2", {}, "Checkpoints"), cps);
  getJSON("/api/read/" + encodeURIComponent(id)).then(showPane).catch((e) => { pane.textContent = e.message; });
  getJSON("/api/diff/" + encodeURIComponent(id)).then((d) => diff.replaceChildren(diffView(d)))
    .catch((e) => diff.replaceChildren(el("p", {class: "dim"}, e.message)));
  getJSON("/api/checkpoints/" + encodeURIComponent(id)).then((c) => cps.replaceChildren(checkpointsView(c)))
    .catch((e) => cps.replaceChildren(el("p", {class: "dim"}, e.message)));
  return wrap;
}

function fillAgentHead(head, id) {
  const r = row(id);
  if (!r) { head.replaceChildren(el("p", {class: "dim"}, board ? "No agent " + id + " on the board." : "Loading…")); return; }
  const a = r.agent;
  const buttons = [];
  const question = messagesOf(id).find((m) => m.pending);
  if (question) buttons.push(el("button", {class: "answer", onclick: () => startAnswer(question)}, "Answer"));
  if (a.pr && a.pr.state === "open") {
    buttons.push(el("button", {class: "merge", onclick: () => act("merge", {number: a.pr.number},
      "Merge PR #" + a.pr.number + " of " + id + "?")}, "Merge PR #" + a.pr.number));
  }
  buttons.push(el("button", {class: "complete", onclick: () => act("complete", {target: id},
    "Complete " + id + " (close its bead, stop it, remove its worktree if nothing is lost)?")}, "Complete"));
  buttons.push(el("button", {class: "kill danger", onclick: () => act("kill", {agent: id},
    "Kill " + id + " and its descendants (worktrees are kept)?")}, "Kill"));
  head.replaceChildren(el("h2", {}, a.name, a.name !== a.id ? el("span", {class: "dim"}, " " + a.id) : ""),
    el("p", {}, el("strong", {}, a.status), r.needs ? el("span", {class: "why"}, " — " + needsText(r)) : "",
      " · " + a.backend + " · " + (a.branch || "no branch") + (r.host ? " · " + r.host : "")
        + (a.layout ? " · " + a.layout : "") + (a.sandboxed ? " · sandboxed" : ""),
      " · turns " + a.turns + ", tools " + a.tool_calls + ", tokens " + Number(a.tokens || 0).toLocaleString("en-US"),
      a.pr ? " · PR #" + a.pr.number + " " + a.pr.state : ""),
    el("p", {class: "body"}, a.task || ""), el("div", {class: "actions"}, buttons));
}

function fillAgentMessages(node, id) {
  const items = messagesOf(id);
  node.replaceChildren(...(items.length ? items.map(inboxItem) : [el("p", {class: "dim"}, "No message for you from " + id + ".")]));
}

function showPane(r) {
  const pane = document.getElementById("pane");
  if (!pane || route()[1] !== r.agent) return;
  const bottom = pane.scrollTop + pane.clientHeight >= pane.scrollHeight - 4;
  pane.textContent = r.text || "(empty)";
  if (bottom) pane.scrollTop = pane.scrollHeight;
}

function diffView(d) {
  const files = d.files.map((f) => el("div", {}, f.status + " " + f.path + "  +" + (f.added ?? "-") + " -" + (f.deleted ?? "-")));
  const code = el("div", {class: "code hl"}, d.lines.map((line) => el("div", {}, line.map(([css, text]) => el("span", {class: css || null}, text)))));
  return el("div", {}, el("p", {}, d.head + " vs " + d.base + ": " + d.files.length + " file(s), +" + d.added + " -" + d.deleted
    + (d.truncated ? " (truncated)" : "")), files, d.lines.length ? code : el("p", {class: "dim"}, "No change."));
}

function checkpointsView(c) {
  if (!c.checkpoints.length) return el("p", {class: "dim"}, "No checkpoint yet.");
  return el("table", {}, el("tr", {}, ["#", "Time", "Turn", "Reason", "Files", "Lines"].map((h) => el("th", {}, h))),
    c.checkpoints.map((k) => el("tr", {}, el("td", {}, k.id), el("td", {}, new Date(k.time * 1000).toLocaleString()),
      el("td", {}, k.turn ?? ""), el("td", {}, k.reason), el("td", {}, k.files), el("td", {}, "+" + k.added + " -" + (k.deleted ?? 0)))));
}

function prsPage() {
  const node = el("div", {id: "prs"}, el("p", {class: "dim"}, "Loading…"));
  getJSON("/api/prs").then((l) => {
    if (!l.prs.length) { node.replaceChildren(el("p", {class: "dim"}, "No pull request.")); return; }
    node.replaceChildren(el("table", {}, el("tr", {}, ["#", "Title", "Author", "Branch", "State", "Review", "Checks"].map((h) => el("th", {}, h))),
      l.prs.map((p) => el("tr", {"data-pr": p.number}, el("td", {}, link(["pr", String(p.number)], "#" + p.number)), el("td", {}, p.title),
        el("td", {}, p.author), el("td", {}, p.head + " → " + p.base), el("td", {}, p.state + (p.draft ? " (draft)" : "")),
        el("td", {}, p.review || ""), el("td", {}, p.checks || "")))));
  }).catch((e) => node.replaceChildren(el("p", {class: "dim"}, e.message)));
  return el("div", {}, el("h2", {}, "Pull requests"), node, el("h2", {}, "Merge queue"), queueView());
}

function queueView() {
  const node = el("div", {id: "queue"}, el("p", {class: "dim"}, "Loading…"));
  getJSON("/api/queue").then((q) => {
    if (!q.entries.length) { node.replaceChildren(el("p", {class: "dim"}, "The merge queue is empty.")); return; }
    node.replaceChildren(el("table", {}, el("tr", {}, ["#", "PR", "Base", "State", "Priority", "Why", ""].map((h) => el("th", {}, h))),
      q.entries.map((e) => {
        const log = el("pre", {hidden: true}, e.tail || e.log || "");
        return [el("tr", {"data-queue": e.pr}, el("td", {}, e.position ?? ""),
          el("td", {}, link(["pr", String(e.pr)], "#" + e.pr), " " + e.title), el("td", {}, e.base),
          el("td", {}, e.state + (q.batch.includes(e.pr) ? " (in the batch under test)" : "")), el("td", {}, e.priority),
          el("td", {}, [e.reason || "", (e.files || []).join(", ")].filter(Boolean).join(": ")),
          el("td", {}, e.tail || e.log ? el("button", {onclick: () => { log.hidden = !log.hidden; }}, "Gate log") : "")),
          el("tr", {}, el("td", {colspan: 7}, log))];
      })));
  }).catch((e) => node.replaceChildren(el("p", {class: "dim"}, e.message)));
  return node;
}

function prPage(number) {
  const node = el("div", {id: "pr", "data-pr": number}, el("p", {class: "dim"}, "Loading…"));
  getJSON("/api/pr/" + encodeURIComponent(number)).then((p) => {
    const merge = p.state === "open" ? el("button", {class: "merge", onclick: async () => {
      if (await act("merge", {number: p.number}, "Merge PR #" + p.number + " (" + p.head + " into " + p.base + ")?")) render();
    }}, "Merge") : "";
    node.replaceChildren(el("h2", {}, "#" + p.number + " " + p.title),
      el("p", {}, el("strong", {id: "pr-state"}, p.state), " · " + p.author + " · " + p.head + " → " + p.base
        + (p.review ? " · review " + p.review : "") + (p.checks ? " · checks " + p.checks : ""), " ", merge),
      el("div", {class: "body"}, p.body || ""), diffView(p.diff));
  }).catch((e) => node.replaceChildren(el("p", {class: "dim"}, e.message)));
  return node;
}

function conflictsPage() {
  const node = el("div", {id: "conflicts"}, el("p", {class: "dim"}, "Loading…"));
  getJSON("/api/conflicts").then((c) => {
    if (!c.conflicts.length) { node.replaceChildren(el("p", {class: "dim"}, "No conflict foreseen.")); return; }
    node.replaceChildren(el("table", {}, el("tr", {}, ["Agent", "With", "Files", "Since"].map((h) => el("th", {}, h))),
      c.conflicts.map((k) => el("tr", {}, el("td", {}, link(["agent", k.agent], k.agent)),
        el("td", {}, k.other === "base" ? "base " + k.other_branch : k.other), el("td", {}, k.paths.join(", ")),
        el("td", {}, ago(Date.now() / 1000 - k.since) + " ago")))));
  }).catch((e) => node.replaceChildren(el("p", {class: "dim"}, e.message)));
  return el("div", {}, el("h2", {}, "Conflicts foreseen"), node);
}

// -- live ---------------------------------------------------------------------------------------
function summary() {
  if (!board) return;
  document.getElementById("summary").textContent = board.count + " agent(s), " + board.needs_you + " need you";
  const pending = board.inbox.filter((m) => m.pending).length;
  document.getElementById("inbox-count").textContent = pending ? "(" + pending + ")" : "";
}

// A new snapshot: update what shows it, leaving forms (and what is typed in them) alone.
function onBoard() {
  summary();
  const [page, id] = route();
  if (page === "team") document.getElementById("main").replaceChildren(teamPage());
  else if (page === "inbox") { const l = document.getElementById("inbox-list"); if (l) fillInbox(l); }
  else if (page === "agent") {
    const h = document.getElementById("agent-head"); if (h) fillAgentHead(h, id);
    const m = document.getElementById("agent-messages"); if (m) fillAgentMessages(m, id);
  } else if (page === "prs" || page === "conflicts") render(); // lists of their own: fetched again

  document.body.setAttribute("data-painted", String(performance.now()));
}

function connect(agent) {
  if (source && sourceAgent === agent) return;
  if (source) source.close();
  sourceAgent = agent;
  source = new EventSource("/api/events" + (agent ? "?agent=" + encodeURIComponent(agent) : ""));
  const conn = document.getElementById("conn");
  source.onopen = () => { conn.textContent = "live"; conn.className = "conn open"; };
  source.onerror = () => { conn.textContent = "reconnecting"; conn.className = "conn"; };
  source.addEventListener("board", (e) => { board = JSON.parse(e.data); onBoard(); });
  source.addEventListener("pane", (e) => showPane(JSON.parse(e.data)));
  source.addEventListener("failure", (e) => { const f = JSON.parse(e.data); flash(f.message + (f.hint ? "\n" + f.hint : ""), true); });
}

function render() {
  const [page, arg] = route();
  for (const a of document.querySelectorAll("header nav a")) a.classList.toggle("here", a.id === "nav-" + (page === "pr" ? "prs" : page));
  const views = {team: teamPage, inbox: inboxPage, agent: () => agentPage(arg), prs: prsPage, pr: () => prPage(arg),
    conflicts: conflictsPage};
  document.getElementById("main").replaceChildren((views[page] || teamPage)());
  connect(page === "agent" ? arg : "");
}

// A hidden tab gives its event stream back: a browser opens at most 6 connections to one server, and each
// open page holds one. Shown again, it reconnects and gets the latest snapshot at once.
document.addEventListener("visibilitychange", () => {
  if (document.hidden && source) {
    source.close();
    source = null;
    const conn = document.getElementById("conn");
    conn.textContent = "paused";
    conn.className = "conn";
  } else if (!document.hidden && !source) {
    const [page, arg] = route();
    connect(page === "agent" ? arg : "");
  }
});
window.addEventListener("hashchange", () => { flash(""); render(); });
render();
