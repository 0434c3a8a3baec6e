"""Real implementations held against the model (docs/realimpl.md).

`kvsm.realimpl.sglang` drives SGLang 0.5.20's `HiRadixCache` on the CPU with kvsm's
workloads, turns what the real cache does into model transitions, and compares a
projection of the real state with the model's after every step. SGLang and torch are
imported only when an adapter runs (`kvsm realimpl install sglang` installs them), so
that kvsm works without them. Nothing else in kvsm imports this package.
"""
