"""The TLC layer: the TLA+ spec (spec/) held against the Python model.

One concern a module, each building on those above it:

- `errors`: the errors of the layer (TLC unavailable, a model TLC could not check).
- `values`: TLA+ values as TLC prints them, parsed and printed back.
- `models`: TLC model configs (`.cfg`) and the constants they bind, as a kvsm `Config`;
  how the spec sees every config field; models generated from a kvsm config.
- `runner`: locating a model (shipped, a `.cfg`, or generated), running TLC (Java, the
  jar, the spec folder, a temporary metadir) and reading its verdict, counterexample
  and resource use from what it prints and what the kernel counts.
- `graph`: the state graph TLC dumps, read as states and labelled edges.
- `specmap`: the correspondence between model states and the spec's variables.
- `trace`: a stretch of a log and the model's states as a compact TLA+ trace module.
- `check`, `conform`, `validate`: the three commands on top (`kvsm check`,
  `kvsm conform`, `kvsm validate`).
"""
