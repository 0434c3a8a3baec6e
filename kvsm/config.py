"""The model's constants (docs/model.md) and the TOML files that name them.

A config is a frozen value. `load_config` accepts a built-in name (`small`,
`default`, ... shipped in `kvsm/configs/`) or a path to a TOML file; a bad file is
an error that names the file, the field and the reason.
"""

from __future__ import annotations

import random
import tomllib
from dataclasses import asdict, dataclass, fields
from importlib import resources
from pathlib import Path
from typing import Any

from .bounds import INT32_MAX, INT64_MAX, MAX_CONFIG_BYTES, MAX_DEVICE_PAGES, MAX_GENERATED_PAGES, MAX_RANKS, MAX_WALK_WEIGHT

POLICIES = ("write_through", "write_back")
# Victim orders: "slru" protects nodes hit twice or more (key `(hits >= 2, touched, id)`),
# "lru" ignores the hit count (key `(False, touched, id)`).
EVICTIONS = ("slru", "lru")
# Fidelity knobs: where the reference's behaviour breaks an invariant, `reference` models it
# as the reference does and `fixed` as the invariant needs (docs/model.md, Findings). The
# shipped models keep `fixed`.
# commit_call: a rank's entry into the commit collective. `fixed` enters whenever a backup
# is in flight (a replicated condition); `reference` also returns early when the rank's
# own ack queue is empty (a local condition), as the reference's writing_check does.
# `atomic` takes the collective as one step (every rank's call and the MIN at once): the
# same replicated behaviour as `fixed` without its per-rank states, for models too large
# to hold them.
COMMIT_CALLS = ("fixed", "reference", "atomic")
# Knobs left out of a config's JSON (and so of a log header) while at their default, so
# that logs of configs that do not set them keep their bytes.
_DEFAULT_KNOBS = {"commit_call": "fixed", "own_disk_durable": "fixed", "ack_append": "fixed", "stale_prune": "off",
                  "carry_host_hit": False,
                  "write_back_evict": "locked", "evict_write_back": "locked", "l2_alloc": "run", "load_back_evict": "shortfall",
                  "write_through_parent": "any", "l3_key": "namespace", "backup_trigger": "any"}
# write_back_evict (only under policy = write_back): how a load-back's owner-lane eviction
# treats an unbacked device victim. `locked` (the default, the model before it): it is no
# victim (a write-back is its own asynchronous, locked `Reserve`); `sync` (the reference's
# `_evict_cp_load_back_owner_lanes`): it is written back synchronously inside the
# `LoadBack` (host evict-to-fit, copy, commit) and then evicted as a backed node.
# `deferred` (the reference's exact order): as `sync`, but a victim written back is
# evicted only after the loop over the plan's victims, and each victim is first re-checked
# as the reference's `_cp_device_leaf_is_load_back_victim` does: a child still on L1 (a
# victim deferred before it) makes the reference raise "plan diverged before
# reservation", which the model records in `halted` (invariant 14). `deferred_fixed`: the
# same order with the re-check fixed, counting the victims it deferred as evicted (as the
# same loop's own leaf update after each eviction already does).
WRITE_BACK_EVICTS = ("locked", "sync", "deferred", "deferred_fixed")
# evict_write_back (only under policy = write_back): how `EvictDevice` treats an unbacked
# device leaf. `locked` (the default, the model before it): it is no victim (a write-back
# is its own asynchronous, locked `Reserve`); `sync` (the reference's `evict()`): it is a
# victim, written back inside the step (host evict-to-fit, copy, commit) and evicted as
# a backed node; where no host run fits, the reference appends it to the nodes it
# evicts after the loop all the same and asserts they are backed, which the model
# records in `halted` (invariant 14). `sync_fixed`: a victim whose write-back finds no
# room is skipped (the reference's `if written > 0` guard of its pinned branch).
EVICT_WRITE_BACKS = ("locked", "sync", "sync_fixed")
# Model knobs for SGLang 0.5.20's HiRadixCache (docs/realimpl.md), each with its
# values, the default (the model before it) first:
MODEL_KNOBS: dict[str, tuple[str, ...]] = {
    # how the host pool hands out an object's pages: "run", one contiguous run, first
    # fit; "pages", any free pages, the lowest-numbered first (SGLang's host allocator):
    # an object fits whenever as many pages are free (not with an L3 tier)
    "l2_alloc": ("run", "pages"),
    # a load-back short of device pages evicts for the shortfall, or ("whole") for the
    # whole load's size (SGLang's `evict(num_tokens=len(host_indices))`)
    "load_back_evict": ("shortfall", "whole"),
    # write-through backs up any eligible node, or ("backed") only one whose parent is
    # backed or is the root (SGLang's `write_backup` returns 0 otherwise)
    "write_through_parent": ("any", "backed"),
    # where a write-through backup starts: "any", `Reserve`, a step of its own whenever a
    # node is eligible; "insert" (the reference's `_inc_hit_count`, and SGLang's), only
    # inside `Insert`, for each node it hits and its new node, top down. Nothing under
    # write_back, where the hit count is off and a `Reserve` is a write-back
    "backup_trigger": ("any", "insert"),
}
# l3_key: what an L3 page hash (a disk's key, a spill's and a reload's hashes) covers.
# "namespace" (fixed): the page's content identity, namespace included; "tokens" (the
# reference: its content hash is over token ids only, `compute_node_hash_values`): the
# token chain alone, so two namespaces' pages of the same tokens share a disk key
# (docs/model.md, "Namespaces"; docs/findings.md).
L3_KEYS = ("namespace", "tokens")
# stale_prune: the reference's stale-tail prune (`PruneStaleTail`, docs/model.md): a match
# or insert whose key leaves a node inside a page splits the node at the page floor and
# deletes the whole lower part with its subtree. `off` leaves it out (the default: every
# divergence splits at a page boundary), `reference` prunes what the reference's guard
# allows (no lock, spill pin or pending backup in the subtree), `fixed` also leaves alone a
# subtree that in-flight L3 work refers to (a queued or in-flight spill, a reload's anchor).
STALE_PRUNES = ("off", "reference", "fixed")
# The fidelity knobs (`fixed` or `reference`; two of them have a third value, a second
# reading of code the reference file does not contain: KNOB_CHOICES):
KNOB_VALUES = ("fixed", "reference")
KNOBS = (
    # device eviction of an unbacked write-through node whose children are all L2-only:
    # "reference" takes it out of the tree and orphans them under a husk (no match
    # reaches them; host eviction frees them)
    "unbacked_evict",
    # the durable flag of the lower part of a split and at a spill's ack: "reference"
    # keeps it on the lower part and sets it at the ack whatever the split offset
    "durable_split",
    # the spill maintainer's own-disk shortcut: "reference" marks a queued object durable,
    # without a spill, when the deciding rank's own disk already holds every page it owns
    # of it (a replicated decision from a rank-local fact: ranks may decide otherwise)
    "own_disk_durable",
    # when a rank's final write ack enters its ack queue: "fixed" with its copy finished
    # (one step, `WriteDone(r)`); "reference" at a point of its own before the copy
    # finishes (`AckAppend(r)`), the copy's end then being a separate finish query, as
    # the reference's writing_check reads `finish_event.query()` (docs/model.md);
    # "lockstep" appends it before the copy finishes too, but at the same point of every
    # rank's program, never while a round of the commit collective is open
    # (`AckAppendAll`): the reading under which the reference's own comment holds
    "ack_append",
)
# The values each knob of KNOBS takes. `own_disk_durable = "shared"`: the shortcut reads a
# shared index (a page counts as held when any rank's disk holds its hash), the same answer
# on every rank; `"reference"` reads the deciding rank's own disk (docs/findings.md, finding 2).
KNOB_CHOICES: dict[str, tuple[str, ...]] = {
    **{k: KNOB_VALUES for k in KNOBS},
    "ack_append": ("fixed", "reference", "lockstep"),
    "own_disk_durable": ("fixed", "reference", "shared"),
}
# Every fidelity knob: (the reference's value, the fixed value). The `reference` profile
# (kvsm/configs/reference*.toml) sets each at its first; a corpus case's `knob NAME` line
# says its violation is the reference's and goes with the second (docs/corpus.md).
REFERENCE_KNOBS: dict[str, tuple[str, str]] = {
    "commit_call": ("reference", "fixed"),
    **{k: ("reference", "fixed") for k in KNOBS},
    "stale_prune": ("reference", "fixed"),
    "l3_key": ("tokens", "namespace"),
}


# The fidelity knobs of the write_back policy (the `reference-write-back` profile): only
# that profile sets them, since they change nothing under write_through.
WRITE_BACK_KNOBS: dict[str, tuple[str, str]] = {"write_back_evict": ("deferred", "deferred_fixed"),
                                                 "evict_write_back": ("sync", "sync_fixed")}
# Every knob a corpus case's `knob` line may name.
CASE_KNOBS: dict[str, tuple[str, str]] = {**REFERENCE_KNOBS, **WRITE_BACK_KNOBS}


def knob_readings(knob: str) -> tuple[str, ...]:
    """The values of fidelity knob `knob` (of CASE_KNOBS) that describe the reference:
    its reference value, then the other readings of code the reference file does not
    contain (KNOB_CHOICES); a corpus case's `knob` line takes any of them."""
    ref, fixed = CASE_KNOBS[knob]
    return (ref, *(v for v in KNOB_CHOICES.get(knob, ()) if v not in (ref, fixed)))


# The injected defects (docs/defects.md): each is a visible branch on `cfg.bug` at the
# place in the model where the reference's bug would be.
BUGS = (
    "none",
    "skip_collective",
    # a rank sizes evict-to-fit (Reserve, Prepare, ReloadReserve) by the pages it owns
    "local_host_alloc",
    # a rollback (Rollback, or of a prepared backup at Insert or Abort) frees the
    # object's pages but keeps its registration
    "double_free",
    # a rank's load lock released before its own copy lands: the load's one replicated
    # lock goes at the first rank's LoadDone (not the reference's per-rank loading_check,
    # which releases each rank's lock at its own copy)
    "load_uaf",
    "evict_pending",
    "split_pending",
    "duplicate_ack",
    "reload_stale_anchor",
    "l3_no_min",
    # victims ordered by a per-rank clock (every eviction, evict-to-fit at Reserve and
    # Prepare included)
    "wallclock_tiebreak",
    "backup_host_uaf",
    "load_host_release",
    "lease_expiry_free",
    "reload_fail_double_free",
    "failed_store_visible",
    # under carry_host_hit: Match records its host hit without pinning it, so an eviction
    # before the LoadBack that uses it frees the host pages the load would read
    "host_hit_unpinned",
    # under write_back_evict = sync: a load-back's own write-back evicts host leaves
    # without sparing the nodes it is restoring (no host protection of its run)
    "loadback_evicts_own_host",
    # under write_back_evict = sync: a device victim whose write-back finds no host room
    # is evicted as though it were backed
    "write_back_fail_evict",
    # tenant isolation (docs/defects.md): a walk that finds no child of its namespace
    # takes a host-only child of another namespace with the same symbol (the host tier
    # looked up by tokens alone)
    "host_key_no_ns",
    # namespaces 2j-1 (LoRA adapter j) and 2j (cache salt j) share one tree key (the
    # adapter name and the salt joined without a delimiter: `ns_key_partner`)
    "lora_salt_collision",
    # the L3 key covers the tokens alone whatever `l3_key` says (`Config.l3_by_tokens`)
    "l3_key_no_ns",
)

# Defects under which a rank decides a replicated step (its victims, its host room, its L3
# claim) from its own view; the cluster's state follows rank 0's decision and records
# where another rank decides otherwise (`ClusterState.diverged`, invariant 13).
RANK_VIEW_BUGS = frozenset({"local_host_alloc", "wallclock_tiebreak", "l3_no_min"})
# Defects whose deviation the model has: all of them today. A corpus or log written for
# a newer kvsm may name one this model lacks, which is refused by name (tests take one
# away from this set to check that refusal).
IMPLEMENTED_BUGS = frozenset(BUGS)


class ConfigError(ValueError):
    """A config file or value that cannot be used; the message names where and why."""


@dataclass(frozen=True)
class Prompt:
    """A request shape: its cached page symbols and the pages it holds while decoding."""

    pages: tuple[int, ...]
    out_pages: int = 0
    ns: int = 0  # the namespace its requests arrive in (docs/model.md, "Namespaces")


@dataclass(frozen=True)
class Config:
    name: str = "custom"
    R: int = 2
    P: int = 1
    L1: int = 4
    L2: int = 8
    L3: int = 0  # pages each rank's disk holds; 0 = no L3 tier
    payloads: tuple[str, ...] = ("kv",)
    policy: str = "write_through"
    eviction: str = "slru"
    write_threshold: int = 1
    load_back_threshold: int = 1
    reload_ttl: int = 2
    spill_inflight: int = 1
    reload_inflight: int = 1
    spill_queue_cap: int = 8
    # Exploration bound on DiskFail transitions in a run, like max_requests: 0 = unbounded,
    # -1 = none at all (an L3 model whose disks never fail stays finite), n > 0 = at most n.
    max_disk_faults: int = 0
    commit_call: str = "fixed"
    unbacked_evict: str = "fixed"
    durable_split: str = "fixed"
    own_disk_durable: str = "fixed"
    ack_append: str = "fixed"
    stale_prune: str = "off"
    write_back_evict: str = "locked"
    evict_write_back: str = "locked"
    l2_alloc: str = "run"
    load_back_evict: str = "shortfall"
    write_through_parent: str = "any"
    backup_trigger: str = "any"
    l3_key: str = "namespace"
    # The reference's production write-through path: a request's new pages get an L2
    # object and a node id before its forward pass (`Prepare`), attached at `Insert`
    # when the new node has that length, rolled back otherwise (docs/model.md).
    prepared_backups: bool = False
    # The reference's match carries its host hit forward (`last_host_node`,
    # `host_hit_length`) to a later load-back instead of the load-back finding it again:
    # Match records the hit and pins it (the host lock the reference's prefetch takes,
    # `protect_host`) until the LoadBack that loads it, the Insert that recomputes it or
    # the request's abort (docs/model.md). Off: LoadBack finds the hit itself.
    carry_host_hit: bool = False
    bug: str = "none"
    # Exploration bounds: total arrivals (0 = unbounded) and requests alive at once.
    max_requests: int = 0
    max_live: int = 0
    prompts: tuple[Prompt, ...] = ()
    # Relative weights of transition families in `kvsm walk` (missing = 1).
    walk_weights: tuple[tuple[str, float], ...] = ()

    @property
    def device_pages(self) -> int:
        return self.R * self.L1

    @property
    def l3_by_tokens(self) -> bool:
        """An L3 key covers the token chain alone: `l3_key = "tokens"`, or the defect
        `l3_key_no_ns` (the namespace dropped from the L3 key whatever the knob)."""
        return self.l3_key == "tokens" or self.bug == "l3_key_no_ns"

    def to_json(self, all_fields: bool = False) -> dict[str, Any]:
        """The config as JSON; a fidelity knob at its default is left out unless
        `all_fields` (logs of configs that do not set it keep their bytes)."""
        d = asdict(self)
        d["payloads"] = list(self.payloads)
        # a prompt's namespace only when it is not 0 (configs without one keep their bytes)
        d["prompts"] = [{"pages": list(p.pages), "out_pages": p.out_pages, **({"ns": p.ns} if p.ns else {})} for p in self.prompts]
        d["walk_weights"] = {k: v for k, v in self.walk_weights}
        for k, v in _DEFAULT_KNOBS.items():
            if d[k] == v and not all_fields:
                del d[k]
        return d

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str = "config") -> "Config":
        return _build(dict(data), where)

    def with_bug(self, bug: str, where: str = "config") -> "Config":
        """This config with the injected defect `bug`, checked as a config's field is (an
        unknown or unimplemented name is a ConfigError naming `where`)."""
        if bug == self.bug:
            return self
        return _build({**self.to_json(), "bug": bug}, where)


# Bounds on every number a config holds (kvsm/bounds.py), checked wherever a config is
# read (a TOML file, a log's header, `kvsm sim`'s overrides).
INT_MAX = INT32_MAX

_INT_FIELDS = {
    "R": 1,
    "P": 1,
    "L1": 1,
    "L2": 1,
    "L3": 0,
    "write_threshold": 1,
    "load_back_threshold": 0,
    "reload_ttl": 1,
    "spill_inflight": 1,
    "reload_inflight": 1,
    "spill_queue_cap": 1,
    "max_disk_faults": -1,
    "max_requests": 0,
    "max_live": 0,
}


def _build(data: dict[str, Any], where: str) -> Config:
    known = {f.name for f in fields(Config)} | {"prompt_generator"}
    for k in data:
        if k not in known:
            raise ConfigError(f"{where}: unknown field '{k}'")
    out: dict[str, Any] = {}
    if "name" in data:
        if not isinstance(data["name"], str):
            raise ConfigError(f"{where}: field 'name' must be a string")
        out["name"] = data["name"]
    for k, lo in _INT_FIELDS.items():
        if k in data:
            v = data[k]
            if not isinstance(v, int) or isinstance(v, bool):
                raise ConfigError(f"{where}: field '{k}' must be an integer, got {v!r}")
            if v < lo:
                raise ConfigError(f"{where}: field '{k}' must be >= {lo}, got {v}")
            hi = MAX_RANKS if k == "R" else INT_MAX
            if v > hi:
                raise ConfigError(f"{where}: field '{k}' must be <= {hi}, got {v}")
            out[k] = v
    if "payloads" in data:
        p = data["payloads"]
        if not isinstance(p, list) or not p or not all(isinstance(x, str) for x in p) or len(set(p)) != len(p):
            raise ConfigError(f"{where}: field 'payloads' must be a non-empty list of distinct names")
        out["payloads"] = tuple(p)
    if "policy" in data:
        if data["policy"] not in POLICIES:
            raise ConfigError(f"{where}: field 'policy' must be one of {', '.join(POLICIES)}, got {data['policy']!r}")
        out["policy"] = data["policy"]
    if "eviction" in data:
        if data["eviction"] not in EVICTIONS:
            raise ConfigError(f"{where}: field 'eviction' must be one of {', '.join(EVICTIONS)}, got {data['eviction']!r}")
        out["eviction"] = data["eviction"]
    if "commit_call" in data:
        if data["commit_call"] not in COMMIT_CALLS:
            raise ConfigError(f"{where}: field 'commit_call' must be one of {', '.join(COMMIT_CALLS)}, got {data['commit_call']!r}")
        out["commit_call"] = data["commit_call"]
    if "stale_prune" in data:
        if data["stale_prune"] not in STALE_PRUNES:
            raise ConfigError(f"{where}: field 'stale_prune' must be one of {', '.join(STALE_PRUNES)}, got {data['stale_prune']!r}")
        out["stale_prune"] = data["stale_prune"]
    if "l3_key" in data:
        if data["l3_key"] not in L3_KEYS:
            raise ConfigError(f"{where}: field 'l3_key' must be one of {', '.join(L3_KEYS)}, got {data['l3_key']!r}")
        out["l3_key"] = data["l3_key"]
    if "write_back_evict" in data:
        if data["write_back_evict"] not in WRITE_BACK_EVICTS:
            raise ConfigError(f"{where}: field 'write_back_evict' must be one of {', '.join(WRITE_BACK_EVICTS)}, got {data['write_back_evict']!r}")
        out["write_back_evict"] = data["write_back_evict"]
    if "evict_write_back" in data:
        if data["evict_write_back"] not in EVICT_WRITE_BACKS:
            raise ConfigError(f"{where}: field 'evict_write_back' must be one of {', '.join(EVICT_WRITE_BACKS)}, got {data['evict_write_back']!r}")
        out["evict_write_back"] = data["evict_write_back"]
    for k, values in MODEL_KNOBS.items():
        if k in data:
            if data[k] not in values:
                raise ConfigError(f"{where}: field '{k}' must be one of {', '.join(values)}, got {data[k]!r}")
            out[k] = data[k]
    for flag in ("prepared_backups", "carry_host_hit"):
        if flag in data:
            if not isinstance(data[flag], bool):
                raise ConfigError(f"{where}: field '{flag}' must be true or false, got {data[flag]!r}")
            out[flag] = data[flag]
    for k in KNOBS:
        if k in data:
            if data[k] not in KNOB_CHOICES[k]:
                raise ConfigError(f"{where}: field '{k}' must be one of {', '.join(KNOB_CHOICES[k])}, got {data[k]!r}")
            out[k] = data[k]
    if "bug" in data:
        if data["bug"] not in BUGS:
            raise ConfigError(f"{where}: field 'bug' must be one of {', '.join(BUGS)}, got {data['bug']!r}")
        out["bug"] = data["bug"]
    prompts: list[Prompt] = []
    if "prompts" in data:
        if not isinstance(data["prompts"], list):
            raise ConfigError(f"{where}: field 'prompts' must be a list of tables")
        for i, p in enumerate(data["prompts"]):
            prompts.append(_prompt(p, f"{where}: prompts[{i}]"))
    if "prompt_generator" in data:
        prompts.extend(_generate_prompts(data["prompt_generator"], f"{where}: prompt_generator"))
    out["prompts"] = tuple(prompts)
    if "walk_weights" in data:
        w = data["walk_weights"]
        if not isinstance(w, dict) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= MAX_WALK_WEIGHT for v in w.values()
        ):
            raise ConfigError(f"{where}: field 'walk_weights' must map transition names to weights in [0, {MAX_WALK_WEIGHT:g}]")
        out["walk_weights"] = tuple(sorted((str(k), float(v)) for k, v in w.items()))
    cfg = Config(**out)
    if cfg.R * cfg.L1 > MAX_DEVICE_PAGES:
        raise ConfigError(
            f"{where}: R * L1 = {cfg.R} * {cfg.L1} = {cfg.R * cfg.L1} device pages, more than the bound "
            f"{MAX_DEVICE_PAGES} (the model keeps every free device page in memory)"
        )
    for i, p in enumerate(cfg.prompts):
        if p.out_pages > cfg.R * cfg.L1:
            raise ConfigError(
                f"{where}: prompts[{i}]: out_pages {p.out_pages} is more than the config's R * L1 = {cfg.R * cfg.L1} "
                "device pages (no request could hold them)"
            )
    if cfg.l2_alloc == "pages" and cfg.L3:
        raise ConfigError(
            f"{where}: l2_alloc = \"pages\" with L3 = {cfg.L3}: an L3 reload reserves, and a spill reads, one "
            "contiguous run of host pages; page-set objects are modelled without an L3 tier (set L3 = 0)"
        )
    if cfg.write_through_parent == "backed" and cfg.prepared_backups:
        raise ConfigError(
            f"{where}: write_through_parent = \"backed\" with prepared_backups = true: the parent rule is SGLang's "
            "write_backup, which has no prepared backups (the reference's path); set one of them back"
        )
    if cfg.bug not in IMPLEMENTED_BUGS:
        raise ConfigError(f"{where}: injected defect '{cfg.bug}' is not implemented by this model yet")
    return cfg


def _prompt(p: Any, where: str) -> Prompt:
    if not isinstance(p, dict) or "pages" not in p:
        raise ConfigError(f"{where}: a prompt is a table with 'pages' (and optional 'out_pages' and 'ns')")
    pages = p["pages"]
    if not isinstance(pages, list) or not all(isinstance(x, int) and not isinstance(x, bool) and abs(x) <= INT64_MAX for x in pages):
        raise ConfigError(f"{where}: 'pages' must be a list of integers within ±(2^63-1)")
    out = p.get("out_pages", 0)
    if not isinstance(out, int) or isinstance(out, bool) or out < 0:
        raise ConfigError(f"{where}: 'out_pages' must be an integer >= 0")
    ns = p.get("ns", 0)
    if not isinstance(ns, int) or isinstance(ns, bool) or not 0 <= ns <= INT_MAX:
        raise ConfigError(f"{where}: 'ns' (the prompt's namespace) must be an integer in [0, {INT_MAX}]")
    extra = set(p) - {"pages", "out_pages", "ns"}
    if extra:
        raise ConfigError(f"{where}: unknown field '{sorted(extra)[0]}'")
    return Prompt(tuple(pages), out, ns)


def _generate_prompts(g: Any, where: str) -> list[Prompt]:
    """Deterministic prompt families: `systems` shared system prefixes, each followed by
    `per_system` user suffixes; page symbols are drawn from one seeded stream."""
    spec = {"seed": 0, "systems": 4, "system_pages": 4, "per_system": 8, "min_pages": 1, "max_pages": 8, "out_pages": 1}
    if not isinstance(g, dict):
        raise ConfigError(f"{where}: must be a table")
    for k, v in g.items():
        if k not in spec:
            raise ConfigError(f"{where}: unknown field '{k}'")
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise ConfigError(f"{where}: field '{k}' must be an integer >= 0")
        if v > INT_MAX:
            raise ConfigError(f"{where}: field '{k}' must be <= {INT_MAX}, got {v}")
        spec[k] = v
    if spec["min_pages"] > spec["max_pages"]:
        raise ConfigError(f"{where}: min_pages must not exceed max_pages")
    most = spec["systems"] * spec["per_system"] * (spec["system_pages"] + spec["max_pages"])
    if most > MAX_GENERATED_PAGES:
        raise ConfigError(
            f"{where}: systems * per_system * (system_pages + max_pages) = {most} pages, more than the bound {MAX_GENERATED_PAGES}"
        )
    rng = random.Random(spec["seed"])
    next_sym = 1
    prompts = []
    for _ in range(spec["systems"]):
        system = tuple(range(next_sym, next_sym + spec["system_pages"]))
        next_sym += spec["system_pages"]
        for _ in range(spec["per_system"]):
            n = rng.randint(spec["min_pages"], spec["max_pages"])
            # suffixes share a symbol alphabet so that some of them share a few pages too
            suffix = tuple(1_000_000 + rng.randrange(4 * spec["per_system"]) * 64 + i for i in range(n))
            prompts.append(Prompt(system + suffix, spec["out_pages"]))
    return prompts


def builtin_names() -> list[str]:
    return sorted(p.name[: -len(".toml")] for p in resources.files("kvsm.configs").iterdir() if p.name.endswith(".toml"))


def builtin_file(name: str) -> Any:
    """The TOML file of built-in config `name` (a resource of the package)."""
    return resources.files("kvsm.configs").joinpath(f"{name}.toml")


def load_config(name_or_path: str | Path) -> Config:
    """A built-in config by name, or a TOML file by path."""
    text: str
    where: str
    s = str(name_or_path)
    if not s:  # Path("") is ".", the current directory: say what is wrong instead
        raise ConfigError(f"config '': is empty; give a built-in config name ({', '.join(builtin_names())}) or a TOML file's path")
    if s in builtin_names():
        text = builtin_file(s).read_text()
        where = f"config '{s}'"
    else:
        path = Path(s)
        if not path.exists():
            raise ConfigError(
                f"config '{s}': no such file, and not a built-in config (built-ins: {', '.join(builtin_names())})"
            )
        if path.is_dir():
            raise ConfigError(f"config '{s}': is a directory, not a TOML file")
        where = str(path)
        try:
            size = path.stat().st_size
            if size > MAX_CONFIG_BYTES:
                raise ConfigError(f"{where}: {size} bytes, more than a config may have ({MAX_CONFIG_BYTES >> 20} MiB)")
            text = path.read_text(encoding="utf-8")
        except OSError as e:
            raise ConfigError(f"{where}: cannot read: {e.strerror}") from None
        except UnicodeDecodeError as e:
            raise ConfigError(f"{where}: not UTF-8 text (byte {e.start + 1})") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{where}: not valid TOML: {e}") from None
    data.setdefault("name", Path(s).stem)
    return _build(data, where)


__all__ = ["Config", "ConfigError", "Prompt", "load_config", "builtin_names", "POLICIES", "EVICTIONS", "COMMIT_CALLS", "STALE_PRUNES", "WRITE_BACK_EVICTS", "EVICT_WRITE_BACKS", "L3_KEYS", "MODEL_KNOBS", "BUGS", "IMPLEMENTED_BUGS", "RANK_VIEW_BUGS", "KNOBS", "KNOB_VALUES", "KNOB_CHOICES", "REFERENCE_KNOBS", "WRITE_BACK_KNOBS", "CASE_KNOBS", "knob_readings"]
