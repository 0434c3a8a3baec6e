"""TLC models: model configs (`.cfg`) in both directions (a model's constant bindings
read as a kvsm `Config`, a `Config` written as the spec's constants), the model
generated from a kvsm config, and the model a user names (`load_model`: a shipped
one, a `.cfg` path, or a kvsm config to generate one from)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import Config, ConfigError, load_config
from .errors import TLCError
from .location import NAMED_MODELS, model_paths
from .values import Record, TLAValueError, parse_value, to_tla

_CFG_KEYWORDS = {
    "CONSTANT": "CONSTANTS",
    "CONSTANTS": "CONSTANTS",
    "INIT": "INIT",
    "NEXT": "NEXT",
    "SPECIFICATION": "SPECIFICATION",
    "INVARIANT": "INVARIANTS",
    "INVARIANTS": "INVARIANTS",
    "PROPERTY": "PROPERTIES",
    "PROPERTIES": "PROPERTIES",
    "CONSTRAINT": "CONSTRAINTS",
    "CONSTRAINTS": "CONSTRAINTS",
    "ACTION_CONSTRAINT": "ACTION_CONSTRAINTS",
    "ACTION_CONSTRAINTS": "ACTION_CONSTRAINTS",
    "VIEW": "VIEW",
    "SYMMETRY": "SYMMETRY",
}


@dataclass
class ModelConfig:
    """A TLC `.cfg`: constant bindings (`name = value text` or `name <- definition`)
    and the names under every other keyword, in order."""

    constants: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> ("=" | "<-", text)
    sections: dict[str, list[str]] = field(default_factory=dict)

    def names(self, keyword: str) -> list[str]:
        return self.sections.get(keyword, [])

    def text(self) -> str:
        lines = []
        if self.constants:
            lines.append("CONSTANTS")
            lines += [f"    {k} {op} {v}" for k, (op, v) in self.constants.items()]
        for kw, names in self.sections.items():
            if names:
                lines.append(kw)
                lines += [f"    {n}" for n in names]
        return "\n".join(lines) + "\n"


def read_cfg(path: Path) -> ModelConfig:
    text = re.sub(r"\(\*.*?\*\)", " ", path.read_text(), flags=re.S)
    mc = ModelConfig()
    section: str | None = None
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("\\*", 1)[0].strip()
        if not line:
            continue
        words = line.split(None, 1)
        if words[0] in _CFG_KEYWORDS:
            section = _CFG_KEYWORDS[words[0]]
            line = words[1].strip() if len(words) > 1 else ""
            if section != "CONSTANTS":
                mc.sections.setdefault(section, [])
            if not line:
                continue
        if section is None:
            raise TLCError(f"{path}:{lineno}: text before any keyword: {raw.strip()!r}")
        if section == "CONSTANTS":
            m = re.match(r"([A-Za-z_][A-Za-z0-9_]*)\s*(=|<-)\s*(.+)$", line)
            if m is None:
                raise TLCError(f"{path}:{lineno}: expected `NAME = value` or `NAME <- definition`, got {raw.strip()!r}")
            mc.constants[m.group(1)] = (m.group(2), m.group(3).strip())
        else:
            mc.sections[section].extend(line.split())
    return mc


def module_definitions(module: Path) -> dict[str, str]:
    """The top-level `Name == text` definitions of a module (text up to the next
    top-level line), for reading the literal values a model binds to constants."""
    text = module.read_text()
    out: dict[str, str] = {}
    for m in re.finditer(r"^([A-Za-z_][A-Za-z0-9_]*)\s*==\s*(.*?)(?=^\S|\Z)", text, flags=re.M | re.S):
        body = re.sub(r"\\\*[^\n]*", "", m.group(2))
        out[m.group(1)] = body.split("\n====")[0].strip()
    return out


# How the spec sees every field of kvsm's `Config`, in one place (a test checks that
# every field is here). A field that changes behaviour is bound to a spec constant in
# CONSTANT_FIELDS; a field the spec does not model yet is in NOT_IN_SPEC with the one
# value the spec hard-codes, and a config with another value is refused by `kvsm
# check`, `conform` and `validate` (`refuse_unmodelled`). When the spec gains the
# constant, one line in CONSTANT_FIELDS binds it (as `("eviction", "VictimOrder")`
# does) and its NOT_IN_SPEC line goes.

# kvsm Config field <- spec constant (the value as kvsm.tla.values.to_tla writes it)
CONSTANT_FIELDS = (
    ("R", "R"),
    ("P", "P"),
    ("L1", "L1"),
    ("L2", "L2"),
    ("policy", "Policy"),
    ("write_threshold", "WriteThreshold"),
    ("load_back_threshold", "LoadBackThreshold"),
    ("max_requests", "MaxRequests"),
    ("max_live", "MaxLive"),
    ("L3", "L3"),
    ("spill_queue_cap", "SpillQueueCap"),
    ("spill_inflight", "SpillInflight"),
    ("reload_inflight", "ReloadInflight"),
    ("reload_ttl", "ReloadTTL"),
    ("max_disk_faults", "MaxDiskFaults"),
    ("commit_call", "CommitEntry"),
    ("ack_append", "AckTiming"),
    ("unbacked_evict", "UnbackedEvict"),
    ("write_back_evict", "WriteBackEvict"),
    ("evict_write_back", "EvictWriteBack"),
    ("durable_split", "DurableSplit"),
    ("own_disk_durable", "OwnDiskDurable"),
    ("stale_prune", "StalePrune"),
    ("eviction", "VictimOrder"),
    ("prepared_backups", "PreparedBackups"),
    ("carry_host_hit", "CarryHostHit"),
    ("l2_alloc", "L2Alloc"),
    ("write_through_parent", "WriteThroughParent"),
    ("load_back_evict", "LoadBackEvict"),
    ("backup_trigger", "BackupTrigger"),
    ("l3_key", "L3Key"),
    ("bug", "Bug"),
)

# Spec constants that KVCache defines with a default, which a model overrides by binding
# them in its cfg (`StalePrune = "reference"`); a model that does not bind one has the
# default, so the models written before it need not name it.
DEFINED_DEFAULTS = {"StalePrune": "off", "L2Alloc": "run", "WriteThroughParent": "any", "LoadBackEvict": "shortfall",
                    "EvictWriteBack": "locked", "L3Key": "namespace", "BackupTrigger": "any"}

# Config field -> the value the spec hard-codes (the field is not a constant yet)
NOT_IN_SPEC: dict[str, Any] = {}

# Config fields that are no constant because they change nothing the spec decides
NOT_BEHAVIOUR = {
    "name": "a label",
    "prompts": "bound as the constant Prompts (a set of [pages, out_pages] records)",
    "payloads": "regions allocated, written and freed in lockstep: the spec has one (kvsm.tla.specmap)",
    "walk_weights": "how `kvsm walk` picks among enabled transitions, not which are enabled",
}


def refuse_unmodelled(cfg: Config, where: str) -> None:
    """Raise TLCError naming the first field of `cfg` the spec does not model, if its
    value is not the one the spec hard-codes."""
    bound = {fld for fld, _ in CONSTANT_FIELDS}
    for fld, value in NOT_IN_SPEC.items():
        got = getattr(cfg, fld)
        if fld in bound:
            continue
        if got != value:
            raise TLCError(
                f"{where}: field '{fld}' = {got!r} is not in the spec yet (KVCache.tla hard-codes {fld} = {value!r} "
                f"and has no constant for it), so TLC cannot check it; see NOT_IN_SPEC in kvsm/tla/models.py"
            )


def config_with_bug(cfg: Config, bug: str, where: str) -> Config:
    """`cfg` with the injected defect `bug` (refused by name if it is none of the model's)."""
    try:
        return cfg.with_bug(bug, f"{where} with bug {bug}")
    except ConfigError as e:
        raise TLCError(str(e)) from None


def with_bug(mc: ModelConfig, bug: str) -> ModelConfig:
    """A model config with its `Bug` constant bound to `bug` (and everything else as it is)."""
    return ModelConfig(constants={**mc.constants, "Bug": ("=", to_tla(bug))}, sections=dict(mc.sections))


def model_constants(module: Path, cfg: Path) -> dict[str, Any]:
    """The value of every constant a model binds (`<-` bindings read from the module)."""
    mc = read_cfg(cfg)
    defs = module_definitions(module)
    out: dict[str, Any] = {}
    for name, (op, text) in mc.constants.items():
        if op == "<-":
            if text not in defs:
                raise TLCError(f"{cfg}: constant {name} <- {text}, but {module.name} does not define {text}")
            text = defs[text]
        try:
            out[name] = parse_value(text)
        except TLAValueError as e:
            raise TLCError(f"{cfg}: constant {name} is not a literal value: {e}") from None
    return out


def config_of_model(module: Path, cfg: Path) -> Config:
    """The kvsm `Config` with the constants of a TLC model (for exploring it in Python,
    and for the header of a log made from a TLC trace)."""
    consts = model_constants(module, cfg)
    data: dict[str, Any] = {"name": cfg.stem}
    for fld, const in CONSTANT_FIELDS:
        if const not in consts and const in DEFINED_DEFAULTS:
            consts[const] = DEFINED_DEFAULTS[const]
        if const not in consts:
            raise TLCError(f"{cfg}: constant {const} is not bound")
        data[fld] = consts[const]
    prompts = consts.get("Prompts")
    if not isinstance(prompts, frozenset):
        raise TLCError(f"{cfg}: constant Prompts must be a set of [pages, out_pages] records")
    data["prompts"] = [
        {"pages": list(p["pages"]), "out_pages": p["out_pages"], **({"ns": p["ns"]} if p.get("ns") else {})}
        for p in sorted(prompts, key=lambda p: (p["pages"], p["out_pages"], p.get("ns", 0)))
    ]
    try:
        return Config.from_json(data, where=str(cfg))
    except ConfigError as e:
        raise TLCError(str(e)) from None


def constant_bindings(cfg: Config) -> dict[str, str]:
    """TLA+ text of each spec constant for a kvsm `Config` (one KVCache defines is left
    out at its default, DEFINED_DEFAULTS)."""
    out = {const: to_tla(getattr(cfg, fld)) for fld, const in CONSTANT_FIELDS
           if DEFINED_DEFAULTS.get(const, None) != getattr(cfg, fld)}  # a default is left to the spec
    # a prompt's namespace is a field of every prompt where some prompt's is not 0
    # (KVCache's PromptNs): a model of namespace 0 alone binds the records it had
    with_ns = any(p.ns for p in cfg.prompts)
    out["Prompts"] = to_tla(frozenset(Record(pages=tuple(p.pages), out_pages=p.out_pages, **({"ns": p.ns} if with_ns else {}))
                                      for p in cfg.prompts))
    return out


# ---- models generated from a kvsm config ----------------------------------------------------------

GENERATED_MODULE = "MC_kvsm"


def unbounded_requests(cfg: Config) -> bool:
    return cfg.max_requests == 0


def generated_model(
    cfg: Config,
    node_ids: int,
    invariants: list[str],
    properties: list[str],
    max_requests: int | None = None,
) -> tuple[str, ModelConfig]:
    """The TLC model of a kvsm config: a module that EXTENDS KVCache with the config's
    prompts and the bound `MC_NodeIds == 1 .. node_ids` on the node ids `Next`
    quantifies over (`MC_NodeIdsCovered` fails in a state that exceeds it), and a cfg
    binding every constant and checking `invariants` and `properties`.
    `max_requests` overrides the config's (a simulation binds an unbounded one to its
    depth)."""
    consts = {k: ("=", v) for k, v in constant_bindings(cfg).items() if k != "Prompts"}
    if max_requests is not None:
        consts["MaxRequests"] = ("=", str(max_requests))
    # TLC's .cfg has no negative literal (max_disk_faults = -1, no fault): such a value is
    # bound through a definition of the module
    negative = {k: v for k, (_, v) in consts.items() if v.startswith("-")}
    for k in negative:
        consts[k] = ("<-", f"MC_{k}")
    consts["Prompts"] = ("<-", "MC_Prompts")
    consts["NodeIds"] = ("<-", "MC_NodeIds")
    prompts = constant_bindings(cfg)["Prompts"]
    module = (
        f"---- MODULE {GENERATED_MODULE} ----\n"
        f"\\* Generated by kvsm from the config '{cfg.name}'.\n"
        "EXTENDS KVCache\n\n"
        f"MC_Prompts == {prompts}\n\n"
        + "".join(f"MC_{k} == {v}\n\n" for k, v in negative.items()) +
        "\\* Next quantifies over node ids; this model never creates more than these, which\n"
        "\\* MC_NodeIdsCovered checks in every state.\n"
        f"MC_NodeIds == 1 .. {node_ids}\n"
        "MC_NodeIdsCovered == DOMAIN nodes \\subseteq {Root} \\cup MC_NodeIds\n"
        "====\n"
    )
    invs = list(invariants) + ([] if "MC_NodeIdsCovered" in invariants else ["MC_NodeIdsCovered"])
    sections = {"SPECIFICATION": ["Spec"], "INVARIANTS": invs}
    if properties:
        sections["PROPERTIES"] = list(properties)
    return module, ModelConfig(constants=consts, sections=sections)


# ---- the model a user names ------------------------------------------------------------------


@dataclass
class Model:
    """A model TLC can check: a shipped one (`ci`, `reference`, ...), a `.cfg` beside its module, or
    one generated from a kvsm config (a TOML path or a built-in config name)."""

    label: str  # what the user named
    config: Config  # its constants as a kvsm config
    module: Path  # the module TLC runs (for a generated model, the name of a generated one)
    cfg: Path | ModelConfig
    extra_modules: dict[str, str]  # generated modules, name -> text
    generated: bool = False
    node_ids: int | None = None  # a generated model's bound on node ids

    def model_config(self) -> ModelConfig:
        return self.cfg if isinstance(self.cfg, ModelConfig) else read_cfg(self.cfg)


# The spec's liveness properties, which a generated model checks (every shipped model
# that checks liveness lists these; `ci` checks safety only, see spec/MC_ci.cfg)
LIVENESS = ("BackupsResolve", "HeldReleased")


def reference_checks() -> tuple[list[str], list[str]]:
    """The invariants the `ci` model checks (spec/MC_ci.cfg) and the spec's liveness
    properties: what a generated model checks."""
    module, cfg = model_paths("ci")
    return read_cfg(cfg).names("INVARIANTS"), list(LIVENESS)


def is_config(name_or_path: str) -> bool:
    """A kvsm config (a TOML path or a built-in config name) rather than a TLC model (a
    shipped model's name or a .cfg path); `l3` is both, and names the shipped model."""
    return name_or_path not in NAMED_MODELS and not name_or_path.endswith(".cfg")


def load_model(name_or_path: str, *, properties: bool = True, node_ids: int | None = None,
               depth: int | None = None, bug: str | None = None) -> Model:
    """The model `name_or_path` names (see `Model`). A generated model checks the `ci`
    model's invariants (and, with `properties`, its liveness properties) and bounds
    the node ids by `node_ids` (default: three per request of the config). `depth`
    bounds the behaviours (a simulation's): a config whose requests never stop
    arriving is then bound to `depth` arrivals, which no such behaviour exceeds. `bug`
    binds an injected defect (the spec's `Bug` constant and the config's field alike)."""
    if not is_config(name_or_path):
        module, cfg = model_paths(name_or_path)
        config = config_of_model(module, cfg)
        refuse_unmodelled(config, f"model '{name_or_path}'")
        if bug is not None and bug != config.bug:
            config = config_with_bug(config, bug, str(cfg))
            return Model(label=name_or_path, config=config, module=module, cfg=with_bug(read_cfg(cfg), bug), extra_modules={})
        return Model(label=name_or_path, config=config, module=module, cfg=cfg, extra_modules={})
    try:
        config = load_config(name_or_path)
    except ConfigError as e:
        raise TLCError(str(e)) from None
    if bug is not None and bug != config.bug:
        config = config_with_bug(config, bug, name_or_path)
    refuse_unmodelled(config, f"config '{name_or_path}'")
    max_requests = depth if config.max_requests == 0 and depth is not None else None
    if config.max_requests == 0 and max_requests is None:
        raise TLCError(
            f"config '{name_or_path}': max_requests = 0 (requests arrive without end), so the state space is "
            "infinite and TLC cannot exhaust it; give the config a max_requests, or explore it at random with "
            "`kvsm check --simulate`"
        )
    invs, props = reference_checks()
    bound = node_ids or max(1, 3 * (max_requests or config.max_requests))
    text, mc = generated_model(config, bound, invs, props if properties else [], max_requests)
    return Model(
        label=name_or_path,
        config=config,
        module=Path(f"{GENERATED_MODULE}.tla"),
        cfg=mc,
        extra_modules={GENERATED_MODULE: text},
        generated=True,
        node_ids=bound,
    )
