"""The commands that live beside their feature (TLC, simulator, GPU backend, corpus,
viewer, campaign): each module but `common` (what they all print with) defines
`register(app)`, which adds its commands to the `kvsm` typer app. `kvsm/cli.py` imports
every such module and calls its `register` by name, one line a module, so the import
tree shows each command module under the command line (tests/test_layers.py checks it)."""
