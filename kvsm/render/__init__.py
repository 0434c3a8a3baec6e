"""One renderer of the cluster state: `show` and `diff` as text (kvsm show, the corpus,
failure stories), and the same view in the HTML step-through viewer."""

from __future__ import annotations

from ..state import ClusterState
from .text import render, render_diff, styled
from .items import SECTIONS, View
from .names import Names
from .view import build


def show(s: ClusterState, names: Names | None = None, sections: tuple[str, ...] | None = None) -> str:
    """The state as text a person reads at a glance."""
    return render(build(s, names), sections)


def diff(a: ClusterState, b: ClusterState, names: Names | None = None, sections: tuple[str, ...] | None = None) -> str:
    """Only what changed from state `a` to state `b`."""
    return render_diff(build(a, names), build(b, names), sections)


__all__ = ["SECTIONS", "Names", "View", "build", "diff", "render", "render_diff", "show", "styled"]
