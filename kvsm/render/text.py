"""A view as plain text, and the diff of two views.

The text has no blank line (so a corpus case can end an expected output at one) and no
colour; `styled` colours it for a terminal. Sections are printed in a fixed order,
items in the view's order, so the same state always prints the same bytes.
"""

from __future__ import annotations

from .items import Item, Section, View

ARROW = "→"


def _tree_lines(items: tuple[Item, ...]) -> list[str]:
    kids: dict[str | None, list[Item]] = {}
    for it in items:
        kids.setdefault(it.parent, []).append(it)
    keys = {it.key for it in items}
    out: list[str] = []
    # roots: the root node, then any item whose parent is not in the view (broken state)
    tops = [it for it in items if it.parent is None or it.parent not in keys]
    stack: list[tuple[Item, str, str]] = [(it, "", "") for it in reversed(tops)]
    while stack:
        it, lead, cont = stack.pop()
        out.append("  " + lead + it.line())
        children = kids.get(it.key, [])
        for i in range(len(children) - 1, -1, -1):
            last = i == len(children) - 1
            stack.append((children[i], cont + ("└─ " if last else "├─ "), cont + ("   " if last else "│  ")))
    return out


def section_lines(sec: Section) -> list[str]:
    if sec.name == "clock":
        return [it.line() for it in sec.items]
    if sec.name == "tree":
        return [sec.title] + _tree_lines(sec.items)
    inline = [it for it in sec.items if not it.label]
    rest = [it for it in sec.items if it.label]
    head = sec.title
    summary = "  ".join(it.line() for it in inline if it.line())
    if summary:
        head += "  " + summary
    if not rest and not summary:
        head += "  -"
    return [head] + ["  " + it.line() for it in rest]


def render(view: View, sections: tuple[str, ...] | None = None) -> str:
    """The view as text; `sections` selects some sections by name (in the view's order)."""
    lines: list[str] = []
    for sec in view:
        if sections is None or sec.name in sections:
            lines += section_lines(sec)
    return "\n".join(lines)


# ---- diff --------------------------------------------------------------------------------------


def _changes(old: Item, new: Item) -> list[str]:
    out = []
    if old.label != new.label:
        out.append(f"{old.label} {ARROW} {new.label}")
    olds = {f.name: f for f in old.fields}
    news = {f.name: f for f in new.fields}
    names = [f.name for f in new.fields] + [f.name for f in old.fields if f.name not in news]
    for name in names:
        a, b = olds.get(name), news.get(name)
        va = a.value if a is not None else None
        vb = b.value if b is not None else None
        if va == vb:
            continue
        f = b if b is not None else a
        if f.kind == "flag":
            out.append(("+" if vb == "yes" else "-") + name)
            continue
        sa = va if va not in (None, "") else "-"
        sb = vb if vb not in (None, "") else "-"
        text = f"{sa} {ARROW} {sb}"
        if name == "parent" and f.kind == "hidden":
            out.append(f"moved under {sb} (was {sa})")
        elif f.kind == "bare":
            out.append(text)
        else:
            out.append(f"{name} {text}")
    return out


def _index(view: View) -> tuple[dict[str, tuple[Section, Item]], list[str]]:
    at: dict[str, tuple[Section, Item]] = {}
    order: list[str] = []
    for sec in view:
        for it in sec.items:
            at[it.key] = (sec, it)
            order.append(it.key)
    return at, order


def diff_lines(a: View, b: View, sections: tuple[str, ...] | None = None) -> list[str]:
    """What changed from view `a` to view `b`: the changed scalars on one line, then per
    section the items removed (`-`, as they were), added (`+`) and changed (`~`, each
    changed field `old → new`)."""
    old, old_order = _index(a)
    new, new_order = _index(b)
    by_section: dict[str, list[str]] = {}
    titles: dict[str, str] = {}
    for sec in list(a) + list(b):
        titles.setdefault(sec.name, sec.title)
    order = [sec.name for sec in b] + [sec.name for sec in a if sec.name not in {s.name for s in b}]

    def add(sec: Section, line: str) -> None:
        by_section.setdefault(sec.name, []).append(line)

    for key in old_order:
        if key not in new:
            sec, it = old[key]
            add(sec, "- " + (it.line() or it.key))
    for key in new_order:
        sec, it = new[key]
        was = old.get(key)
        if was is None:
            extra = ""
            if it.parent is not None:
                p = it.field("parent")
                extra = f"  under {p.value}" if p is not None else ""
            line = it.line()
            if it.label and extra:
                line = it.label + extra + line[len(it.label):]
            add(sec, "+ " + (line or it.key))
        elif was[1] is not it and was[1] != it:
            ch = _changes(was[1], it)
            if ch:
                add(sec, "~ " + "  ".join(([it.label] if it.label else []) + ch))
    lines: list[str] = []
    for name in order:
        if name not in by_section or (sections is not None and name not in sections):
            continue
        if name == "clock":
            lines.append(by_section[name][0][2:])
            continue
        if not titles[name]:
            lines += by_section[name]
            continue
        lines.append(titles[name])
        lines += ["  " + x for x in by_section[name]]
    return lines


def render_diff(a: View, b: View, sections: tuple[str, ...] | None = None) -> str:
    lines = diff_lines(a, b, sections)
    return "\n".join(lines) if lines else "(no change)"


# ---- colour on a terminal --------------------------------------------------------------------------


def styled(text: str) -> "rich.text.Text":  # noqa: F821
    """The same text with colours for a terminal: added lines green, removed red,
    changed yellow, section titles bold, violations red."""
    from rich.text import Text

    out = Text()
    for i, line in enumerate(text.split("\n")):
        if i:
            out.append("\n")
        body = line.lstrip()
        if body.startswith("+ "):
            style = "green"
        elif body.startswith("- "):
            style = "red"
        elif body.startswith("~ "):
            style = "yellow"
        elif body.startswith(("violation", "rejected", "!")):
            style = "bold red"
        elif line.startswith("step "):
            style = "bold cyan"
        elif line and not line.startswith(" "):
            style = "bold"
        else:
            style = ""
        out.append(line, style=style)
    return out
