"""The shape of a view: a list of sections of labelled items with named fields, what the
text, the diff and the HTML viewer all print (kvsm.render.view builds one from a state).

Every item has a key unique in the view (`node 3`, `request 2`, `lane 0`, ...), a
label (`#3`, `r2`, the lane of rank 0 `r0`) and named fields whose values are short strings. A diff of two
states compares items by key and fields by name, so it shows exactly what changed.
"""

from __future__ import annotations

from dataclasses import dataclass

@dataclass(frozen=True, slots=True)
class Field:
    """One fact about an item. `kind`: `named` prints `name value`, `bare` prints the
    value alone, `flag` prints the name when the value is `yes`, `hidden` is not printed
    in a state (the layout shows it, e.g. a node's parent) but is compared in a diff.
    A field whose value equals `default` is not printed in a state."""

    name: str
    value: str
    default: str | None = None
    kind: str = "named"

    @property
    def shown(self) -> bool:
        return self.kind != "hidden" and self.value != self.default

    def text(self) -> str:
        if self.kind == "flag":
            return self.name
        if self.kind == "bare":
            return self.value
        return f"{self.name} {self.value}"


@dataclass(frozen=True, slots=True)
class Item:
    key: str
    label: str
    fields: tuple[Field, ...]
    parent: str | None = None  # tree items: the key of the parent item
    order: tuple = ()  # where it goes among its section's items (the tree: among its siblings)

    def field(self, name: str) -> Field | None:
        for f in self.fields:
            if f.name == name:
                return f
        return None

    def line(self) -> str:
        parts = [self.label] if self.label else []
        parts += [f.text() for f in self.fields if f.shown]
        return "  ".join(parts)


@dataclass(frozen=True, slots=True)
class Section:
    name: str  # what `show NAME` selects
    title: str
    items: tuple[Item, ...]


View = tuple[Section, ...]

SECTIONS = (
    "clock", "tree", "lanes", "host", "writes", "loads", "disks", "spill-queue", "spills",
    "reload-candidates", "reloads", "requests", "content",
)
