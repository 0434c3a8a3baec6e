"""The TLC layer: the TLA+ spec (spec/) held against the Python model.

One concern a module, each building on those above it:

- `errors`: the errors of the layer (TLC unavailable, a model TLC could not check).
- `values`: TLA+ values as TLC prints them, parsed and printed back.
- `location`: where Java, the jar, the spec folder and a shipped model's files are.
- `models`: TLC model configs (`.cfg`) and the constants they bind, as a kvsm `Config`;
  how the spec sees every config field; models generated from a kvsm config; the
  model a user names (shipped, a `.cfg`, or generated: `load_model`).
- `output`: what TLC prints, read: its verdict, a counterexample's trace, its counts
  and progress.
- `runner`: running TLC (in a temporary directory with its own metadir) and its
  resource use, as the kernel counts it.
- `graph`: the state graph TLC dumps, read as states and labelled edges.
- `specmap`: the correspondence between model states and the spec's variables.
- `compact`: compact TLA+ text of integers, sets and the prefixes of the log's arrivals.
- `encoder`, `delta`: a model state as every spec variable, and a step as what it
  changed in each.
- `trace`: a stretch of a log and the model's states as a compact TLA+ trace module.
- `check`, `conform`, `validate`: the three commands on top (`kvsm check`,
  `kvsm conform`, `kvsm validate`).
"""
