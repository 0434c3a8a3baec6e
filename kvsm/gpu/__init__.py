"""The GPU backend: R rank processes replay a transition log and move real KV bytes.

Each rank applies the pure model to every logged transition (its replicated state is
the model's) and executes the physical effects (`ClusterState.effects`) of the pages it
owns: fills, stores to the shared host slab, loads back, poison of freed pages, and with
L3 spills to and reloads from its own disk store. Loaded, stored, spilled and reloaded
pages are verified against the content generator; the ranks agree on their state
digests over gloo after every `Commit`, `SpillAck` and `ReloadAdmit`, around every host
free and at the end.

Modules: `plan` (pure: a transition's effects -> this rank's batches, no torch),
`hooks` (test-only fault injection), `generator` (page bytes from content identities),
`memory` (device pool, shared host slab, spill staging), `disk` (a rank's disk store),
`transfer` (batched copies), `execute` (a rank's batches executed and checked),
`collectives` (what the ranks say over gloo), `rank` (one rank's replay loop), `launch`
(spawn or torchrun, the summary). Only `plan` and `hooks`
may be imported without torch.
"""

import warnings

# A torch that cannot use the installed numpy warns at import. Only the object
# collectives (collectives.py) need numpy, and without it they fail with torch's own
# "Numpy is not available"; kvsm installs numpy with matplotlib.
NUMPY_WARNING = "Failed to initialize NumPy"
warnings.filterwarnings("ignore", message=NUMPY_WARNING)
