"""The transition kinds and ordered pairs of kinds in the state graph of a small model.

A campaign's coverage is measured against what the spec can do: `kvsm explore`'s graph
of the built-in `small` config, reduced to the transition kinds on its edges and the
ordered pairs `a>b` such that some state is entered by an `a` edge and left by a `b`
edge (b can be taken right after a, on the same request or another). Exploring
`small` takes minutes, so the result is kept with the code as `small_graph.json` beside
this module; `python3 -m kvsm.campaign.spec_graph` recomputes it (`--check`: only
compares, exit 1 when the kept file differs).
"""

from __future__ import annotations

import json
import sys
from importlib import resources
from typing import Any

GRAPH_CONFIG = "small"
GRAPH_FILE = "small_graph.json"


def compute(config: str = GRAPH_CONFIG) -> dict[str, Any]:
    """Explore `config` (every reachable state) and reduce its graph to kinds and pairs."""
    from ..config import load_config
    from ..explore import explore

    g = explore(load_config(config), check=False, keep_states=False)
    into: dict[str, set[str]] = {}
    out: dict[str, set[str]] = {}
    for a, name, b in g.edges:
        out.setdefault(a, set()).add(name)
        into.setdefault(b, set()).add(name)
    pairs: set[tuple[str, str]] = set()
    for d, ins in into.items():
        for x in ins:
            for y in out.get(d, ()):
                pairs.add((x, y))
    return {
        "config": config,
        "states": len(g.states),
        "edges": len(g.edges),
        "kinds": sorted({name for _, name, _ in g.edges}),
        "pairs": [f"{a}>{b}" for a, b in sorted(pairs)],
    }


def dumps(data: dict[str, Any]) -> str:
    """The kept file's text: one kind or pair a line."""
    return json.dumps(data, indent=1) + "\n"


def load() -> dict[str, Any]:
    """The kept graph summary (`small_graph.json`)."""
    return json.loads(resources.files(__package__).joinpath(GRAPH_FILE).read_text())


def main(argv: list[str]) -> int:
    data = compute()
    path = resources.files(__package__).joinpath(GRAPH_FILE)
    text = dumps(data)
    if "--check" in argv:
        same = path.read_text() == text
        print(f"{GRAPH_FILE}: {'up to date' if same else 'DIFFERS from the graph of ' + GRAPH_CONFIG}")
        return 0 if same else 1
    with open(str(path), "w") as f:
        f.write(text)
    print(f"wrote {path}: {len(data['kinds'])} kinds, {len(data['pairs'])} pairs ({data['states']} states)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
