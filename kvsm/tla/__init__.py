"""The TLC layer: the TLA+ spec (spec/) held against the Python model.

One concern a module, each building on those above it:

- `errors`: the errors of the layer (TLC unavailable, a model TLC could not check).
- `values`: TLA+ values as TLC prints them, parsed and printed back.
- `models`: TLC model configs (`.cfg`) and the constants they bind, as a kvsm `Config`.
- `runner`: running TLC (Java, the jar, the spec folder, a temporary metadir) and
  reading its verdict and counterexample from what it prints.
- `graph`: the state graph TLC dumps, read as states and labelled edges.
- `specmap`: the correspondence between model states and the spec's variables.
- `check`, `conform`, `validate`: the three commands on top (`kvsm check`,
  `kvsm conform`, `kvsm validate`).
"""
