"""Every bound kvsm puts on a number it reads, in one place (README, "Bounds").

Each input is checked against these before a run starts, with an error that names the
input, the place and the reason: a config (a TOML file, a log's header, `kvsm sim`'s
overrides), a trace line, a log line, a command's options. What an input *declares*
(the hash ids of a trace line, the tokens of an Arrive) costs memory in proportion to
the file; what it only *claims* (an output length, a page count, a time) is bounded
here, so that no input can take the machine's memory or run for ever.
"""

from __future__ import annotations

INT32_MAX = 2**31 - 1  # TLC's integers are 32-bit: config numbers and page symbols stay below
INT64_MAX = 2**63 - 1  # any other integer of a log line (indices, ids, seeds)

# ---- configs (kvsm/config.py) -------------------------------------------------------------
MAX_RANKS = 1024  # R: the simulator keeps one replica of the state per rank
MAX_DEVICE_PAGES = 1 << 22  # R * L1: the model keeps every free device page (about 450 MB, 10 s to build)
MAX_WALK_WEIGHT = 1e6
MAX_GENERATED_PAGES = 10_000_000  # prompt_generator: systems * per_system * (system_pages + max_pages)
MAX_CONFIG_BYTES = 16 << 20

# ---- traces (kvsm/sim/trace.py) -----------------------------------------------------------
MAX_TIMESTAMP_MS = 10**12  # about 31 years
MAX_OUTPUT_TOKENS = 1 << 20  # a request holds one device page per output block while it decodes
MAX_HASH_ID = INT32_MAX  # page symbols (kvsm validate hands them to TLC)
MAX_TRACE_BYTES = 1 << 30  # a trace is read whole

# ---- kvsm validate ---------------------------------------------------------------------------
MAX_SEGMENTS = 64  # --segments: each segment is a TLC process (a JVM, a second or more to start)
MAX_SUCCESSOR_STATES = 100_000  # --successors --states: each is written whole into one TLC module and expanded (about 4 ms)

# ---- generated workloads (kvsm/sim/generators.py) -----------------------------------------
MAX_GENERATED_REQUESTS = 100_000  # `kvsm sim -w GENERATOR -n N`: the requests are made in memory

# ---- many runs (kvsm sweep, kvsm campaign) ------------------------------------------------
# Ceilings on how many runs one command starts, each lifted by an option: a grid or a run
# count typed a digit too long would otherwise sit for days (a point is prepared before
# any runs, tens of milliseconds each, and a run takes seconds).
MAX_SWEEP_POINTS = 10_000  # `kvsm sweep`: the grid's points; --max-points lifts it
MAX_CAMPAIGN_RUNS = 1_000_000  # `kvsm campaign`: --runs or --seeds A..B; --max-runs lifts it

# ---- logs (kvsm/log.py) -------------------------------------------------------------------
# A longer line is not a kvsm log line (an Arrive of a 1M-page prompt is ~10 MiB); reading
# stops there instead of taking all memory for one line.
MAX_LINE_BYTES = 64 << 20


def available_memory() -> int | None:
    """Bytes of memory this machine can still give (MemAvailable, Linux), or None."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
