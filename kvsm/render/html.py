"""The one-file HTML viewer of a log: no server and nothing loaded from elsewhere.

The file holds the initial view and, per step, the items that step changed (set) and
removed (del), its transition, its text diff and its violations, as JSON; a small
script rebuilds the view of any step from the nearest checkpoint and draws it: the
tree as nested boxes, the other sections as lists, the items and fields the step
changed highlighted, the removed ones listed, a violation in a red banner at its step.
Previous / next buttons, a slider, the arrow keys, and the URL fragment (`#step=7`)
choose the step.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .story import Run, config_line, step_line
from .text import render_diff
from .view import Item, View


def _item(sec: str, it: Item) -> dict[str, Any]:
    d: dict[str, Any] = {"k": it.key, "s": sec, "l": it.label, "f": [[f.name, f.value, f.kind, int(f.shown)] for f in it.fields]}
    if it.parent is not None:
        d["p"] = it.parent
    if it.order:
        d["o"] = list(it.order)
    return d


def _items(view: View) -> dict[str, tuple[str, Item]]:
    return {it.key: (sec.name, it) for sec in view for it in sec.items}


def data(run: Run, title: str) -> dict[str, Any]:
    run.check_all()
    view0 = prev = run.view(0)
    cur_items = _items(prev)
    steps: list[dict[str, Any]] = [{"t": "initial state", "line": 1, "v": run.violations(0), "d": ""}]
    patches = []
    for n in range(1, len(run.steps) + 1):
        view = run.view(n)
        items = _items(view)
        # an item a step did not touch is the same object (the view's memo): no field compared
        changed = [_item(sec, it) for k, (sec, it) in items.items() if k not in cur_items or (cur_items[k][1] is not it and cur_items[k][1] != it)]
        gone = [k for k in cur_items if k not in items]
        patches.append({"set": changed, "del": gone})
        st = run.steps[n - 1]
        steps.append({"t": step_line(st.transition), "line": st.line, "v": run.violations(n), "d": render_diff(prev, view)})
        prev, cur_items = view, items
    return {
        "title": title,
        "config": config_line(run.config),
        "about": run.about,
        # the content section exists only in a state with a wrong page; it is listed last
        "sections": [[sec.name, sec.title or sec.name] for sec in view0] + [["content", "content (pages that do not hold what their node says)"]],
        "steps": steps,
        "items0": [_item(sec, it) for sec, it in _items(view0).values()],
        "patches": patches,
        "stopped": None if run.stopped is None else f"replay stopped at line {run.stopped['line']} (step {run.stopped['step']} {run.stopped['transition']}): {run.stopped['reason']}",
    }


def page(d: dict[str, Any]) -> str:
    blob = json.dumps(d, separators=(",", ":"), ensure_ascii=False).replace("</", "<\\/")
    title = d["title"].replace("&", "&amp;").replace("<", "&lt;")
    return TEMPLATE.replace("{{TITLE}}", title).replace("{{DATA}}", blob)


def write_html(run: Run, path: str | Path, title: str = "") -> Path:
    """Write the viewer atomically (kvsm/output.py: a temporary file renamed into place)."""
    from ..output import write_atomic  # noqa: PLC0415

    return write_atomic(path, page(data(run, title or run.source)))


TEMPLATE = r"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>kvsm show: {{TITLE}}</title>
<style>
body { font: 13px/1.4 ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace; margin: 0; color: #1d2330; background: #f6f7f9; }
header { position: sticky; top: 0; background: #fff; border-bottom: 1px solid #d8dce3; padding: 8px 14px; z-index: 2; }
h1 { font-size: 14px; margin: 0 0 2px 0; }
.meta { color: #5b6475; }
.controls { display: flex; align-items: center; gap: 8px; margin-top: 6px; }
.controls button { font: inherit; padding: 2px 10px; }
#slider { flex: 1; }
#stepno { min-width: 9em; text-align: right; }
#transition { font-weight: bold; margin-top: 4px; font-size: 14px; }
#violation { display: none; margin-top: 6px; padding: 6px 8px; background: #fde8e8; border: 1px solid #e0a0a0; color: #8a1c1c; font-weight: bold; white-space: pre-wrap; }
#marks { margin-top: 4px; color: #8a1c1c; }
#marks a { color: #8a1c1c; margin-right: 6px; }
main { display: grid; grid-template-columns: minmax(380px, 3fr) minmax(300px, 2fr); gap: 14px; padding: 12px 14px; }
.card { background: #fff; border: 1px solid #d8dce3; border-radius: 4px; padding: 8px 10px; margin-bottom: 12px; overflow-x: auto; }
.card h2 { font-size: 12px; margin: 0 0 6px 0; text-transform: uppercase; letter-spacing: .05em; color: #5b6475; }
ul.tree, ul.tree ul { list-style: none; margin: 0; padding-left: 18px; position: relative; }
ul.tree { padding-left: 0; }
ul.tree ul::before { content: ""; position: absolute; left: 7px; top: 0; bottom: 12px; border-left: 1px solid #9aa3b2; }
ul.tree li { position: relative; margin: 3px 0; }
ul.tree ul > li::before { content: ""; position: absolute; left: -11px; top: 11px; width: 10px; border-top: 1px solid #9aa3b2; }
.node { display: inline-block; max-width: calc(100% - 16px); border: 1px solid #b9c0cc; border-radius: 4px; padding: 1px 6px; background: #fbfcfd; }
.lbl { font-weight: bold; margin-right: 6px; }
.f { margin-right: 8px; white-space: nowrap; display: inline-block; }
.f .n { color: #5b6475; }
.added { background: #e3f6e5 !important; border-color: #5fb36a !important; }
.changed { background: #fff6d6 !important; border-color: #d8b13a !important; }
.fchanged { background: #ffe28a; border-radius: 3px; padding: 0 2px; }
.row { padding: 1px 4px; margin: 1px 0; border: 1px solid transparent; border-radius: 3px; }
.removed { color: #8a1c1c; text-decoration: line-through; }
.removed .n { color: #5b6475; text-decoration: none; display: inline-block; }
.empty { color: #8b93a3; }
pre#diff { margin: 0; white-space: pre-wrap; }
</style>
</head>
<body>
<header>
  <h1>kvsm show: {{TITLE}}</h1>
  <div class="meta" id="meta"></div>
  <div class="controls">
    <button id="first" title="first step (Home)">|&lt;</button>
    <button id="prev" title="previous step (left arrow)">&lt; prev</button>
    <input type="range" id="slider" min="0" value="0">
    <button id="next" title="next step (right arrow)">next &gt;</button>
    <button id="last" title="last step (End)">&gt;|</button>
    <span id="stepno"></span>
  </div>
  <div id="transition"></div>
  <div id="violation"></div>
  <div id="marks"></div>
</header>
<main>
  <div><div class="card"><h2>tree</h2><ul class="tree" id="tree"></ul></div>
       <div class="card" id="removedcard"><h2>removed by this step</h2><div id="removed"></div></div></div>
  <div><div id="sections"></div>
       <div class="card"><h2>what this step changed</h2><pre id="diff"></pre></div></div>
</main>
<script id="data" type="application/json">{{DATA}}</script>
<script>
"use strict";
const D = JSON.parse(document.getElementById("data").textContent);
const N = D.steps.length - 1;
const TITLES = new Map(D.sections);
const EVERY = 64;
const checkpoints = [new Map(D.items0.map(it => [it.k, it]))];
function stateAt(n) {
  let c = Math.floor(n / EVERY);
  while (checkpoints.length <= c) {
    const k = checkpoints.length;
    const m = new Map(checkpoints[k - 1]);
    for (let s = (k - 1) * EVERY + 1; s <= k * EVERY && s <= N; s++) apply(m, s);
    checkpoints.push(m);
  }
  const m = new Map(checkpoints[c]);
  for (let s = c * EVERY + 1; s <= n; s++) apply(m, s);
  return m;
}
function apply(m, s) {
  const p = D.patches[s - 1];
  for (const k of p.del) m.delete(k);
  for (const it of p.set) m.set(it.k, it);
}
function cmp(a, b) {
  const x = a.o || [], y = b.o || [];
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    if (x[i] < y[i]) return -1;
    if (x[i] > y[i]) return 1;
  }
  if (x.length !== y.length) return x.length - y.length;
  return a.k < b.k ? -1 : a.k > b.k ? 1 : 0;
}
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}
function fieldsOf(it, before, all) {
  const span = el("span");
  const old = before ? new Map(before.f.map(f => [f[0], f[1]])) : null;
  for (const [name, value, kind, shown] of it.f) {
    const changed = old && old.get(name) !== value;
    if (!all && !shown && !changed) continue;
    if (kind === "hidden" && !changed) continue;
    let text = kind === "flag" ? (value === "yes" ? name : "-" + name)
             : kind === "bare" ? value
             : kind === "hidden" ? "under " + value
             : name + " " + value;
    const f = el("span", "f" + (changed ? " fchanged" : ""));
    // the space outside the name's span: an inline-block span (a removed item's) drops a trailing one
    if (kind === "named") { f.append(el("span", "n", name), document.createTextNode(" " + value)); }
    else f.textContent = text;
    if (changed) f.title = "was: " + (old.has(name) ? old.get(name) : "-");
    span.append(f);
  }
  return span;
}
function mark(node, it, prev) {
  if (!prev) return;
  const before = prev.get(it.k);
  if (!before) node.classList.add("added");
  else if (JSON.stringify(before.f) !== JSON.stringify(it.f) || before.l !== it.l) node.classList.add("changed");
}
function draw(n) {
  n = Math.max(0, Math.min(N, n | 0));
  const cur = stateAt(n), prev = n > 0 ? stateAt(n - 1) : null;
  const st = D.steps[n];
  document.getElementById("slider").value = n;
  document.getElementById("stepno").textContent = "step " + n + " / " + N;
  document.getElementById("transition").textContent = n === 0 ? "initial state" : "step " + n + ": " + st.t + (st.line ? "   (line " + st.line + ")" : "");
  const v = document.getElementById("violation");
  let warn = st.v.length ? st.v.map(x => "violation " + x).join("\n") : "";
  if (n === N && D.stopped) warn += (warn ? "\n" : "") + D.stopped;
  v.textContent = warn;
  v.style.display = warn ? "block" : "none";
  document.getElementById("prev").disabled = n === 0;
  document.getElementById("next").disabled = n === N;
  // the tree
  const kids = new Map();
  const tree = [];
  for (const it of cur.values()) {
    if (it.s !== "tree") continue;
    if (it.p === undefined || !cur.has(it.p)) tree.push(it);
    else { if (!kids.has(it.p)) kids.set(it.p, []); kids.get(it.p).push(it); }
  }
  const ul = document.getElementById("tree");
  ul.replaceChildren();
  const build = (it, into) => {
    const li = el("li");
    const box = el("span", "node");
    box.dataset.key = it.k;
    box.append(el("span", "lbl", it.l), fieldsOf(it, prev ? prev.get(it.k) : null, false));
    mark(box, it, prev);
    li.append(box);
    const ch = (kids.get(it.k) || []).sort(cmp);
    if (ch.length) { const sub = el("ul"); for (const c of ch) build(c, sub); li.append(sub); }
    into.append(li);
  };
  for (const it of tree.sort(cmp)) build(it, ul);
  // the other sections
  const secs = document.getElementById("sections");
  secs.replaceChildren();
  for (const [name, title] of D.sections) {
    if (name === "tree") continue;
    const items = [...cur.values()].filter(it => it.s === name).sort(cmp);
    if (!items.length && (name === "content" || !D.items0.some(it => it.s === name))) continue;
    const card = el("div", "card");
    card.dataset.section = name;
    card.append(el("h2", "", title));
    if (!items.length) card.append(el("div", "empty", "none"));
    for (const it of items) {
      const row = el("div", "row");
      row.dataset.key = it.k;
      if (it.l) row.append(el("span", "lbl", it.l));
      row.append(fieldsOf(it, prev ? prev.get(it.k) : null, false));
      mark(row, it, prev);
      card.append(row);
    }
    secs.append(card);
  }
  // what the step removed
  const rm = document.getElementById("removed");
  rm.replaceChildren();
  const gone = n > 0 ? D.patches[n - 1].del.map(k => prev.get(k)).filter(Boolean) : [];
  for (const it of gone) {
    const row = el("div", "row removed");
    row.append(el("span", "n", (TITLES.get(it.s) || it.s) + ": "), el("span", "lbl", (it.l || it.k)), fieldsOf(it, null, false));
    rm.append(row);
  }
  document.getElementById("removedcard").style.display = gone.length ? "block" : "none";
  document.getElementById("diff").textContent = n === 0 ? "" : st.d;
  if (location.hash !== "#step=" + n) history.replaceState(null, "", "#step=" + n);
  current = n;
}
let current = 0;
function fromHash() {
  const m = /step=(\d+)/.exec(location.hash);
  return m ? parseInt(m[1], 10) : 0;
}
document.getElementById("meta").textContent = [D.config, ...D.about].join("   ·   ");
const slider = document.getElementById("slider");
slider.max = N;
slider.addEventListener("input", () => draw(slider.value));
document.getElementById("prev").addEventListener("click", () => draw(current - 1));
document.getElementById("next").addEventListener("click", () => draw(current + 1));
document.getElementById("first").addEventListener("click", () => draw(0));
document.getElementById("last").addEventListener("click", () => draw(N));
document.addEventListener("keydown", e => {
  if (e.key === "ArrowLeft") draw(current - 1);
  else if (e.key === "ArrowRight") draw(current + 1);
  else if (e.key === "Home") draw(0);
  else if (e.key === "End") draw(N);
});
window.addEventListener("hashchange", () => draw(fromHash()));
const marks = document.getElementById("marks");
const bad = D.steps.map((s, i) => s.v.length ? i : -1).filter(i => i >= 0);
if (bad.length) {
  marks.append(document.createTextNode("violations at: "));
  for (const i of bad.slice(0, 20)) {
    const a = el("a", "", "step " + i);
    a.href = "#step=" + i;
    marks.append(a);
  }
}
draw(fromHash());
</script>
</body>
</html>
"""
