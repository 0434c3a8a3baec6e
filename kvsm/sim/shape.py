"""A model's KV shape and what it makes of bytes: the bytes one token's KV takes, sizes
with units (`40GiB`, `512MiB`, `8GB`) turned into pages, and the serving figures a run
is read by (tokens saved per tier, recomputed tokens, an estimated time to first token,
bytes moved per tier). docs/sim.md, "Bytes and serving figures".

A page is `P` tokens; its bytes are `bytes_per_token x P`. A standard attention model
keeps a K and a V vector per KV head per layer per token: `2 x layers x kv_heads x
head_dim x dtype bytes`. An MLA model (DeepSeek-V2/V3) keeps one compressed latent per
layer per token (`kv_lora_rank + rope_head_dim` values, no K and V pair): `layers x
(kv_lora_rank + rope_head_dim) x dtype bytes`.
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "fp8": 1}

# The shape used for bytes and time estimates when no --model is given.
DEFAULT_MODEL = "llama-3.1-8b"


class ShapeError(ValueError):
    """A model, a size or a serving figure that cannot be used; the message names the option."""


@dataclass(frozen=True)
class ModelShape:
    name: str
    layers: int
    dtype: str
    kv_heads: int = 0  # standard attention: KV heads (after GQA), 0 for MLA
    head_dim: int = 0
    kv_lora_rank: int = 0  # MLA: the compressed latent's size, 0 for standard attention
    rope_head_dim: int = 0  # MLA: the decoupled RoPE key's size

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def bytes_per_token(self) -> int:
        b = DTYPE_BYTES[self.dtype]
        if self.mla:
            return self.layers * (self.kv_lora_rank + self.rope_head_dim) * b
        return 2 * self.layers * self.kv_heads * self.head_dim * b

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "layers": self.layers, "dtype": self.dtype}
        if self.mla:
            d.update(kv_lora_rank=self.kv_lora_rank, rope_head_dim=self.rope_head_dim)
        else:
            d.update(kv_heads=self.kv_heads, head_dim=self.head_dim)
        d["bytes_per_token"] = self.bytes_per_token
        return d


# Published shapes (the models' config.json on Hugging Face).
PRESETS: dict[str, ModelShape] = {
    m.name: m
    for m in (
        ModelShape("llama-3.1-8b", layers=32, kv_heads=8, head_dim=128, dtype="bf16"),  # 128 KiB per token
        ModelShape("llama-3.1-70b", layers=80, kv_heads=8, head_dim=128, dtype="bf16"),  # 320 KiB
        ModelShape("qwen2.5-7b", layers=28, kv_heads=4, head_dim=128, dtype="bf16"),  # 56 KiB
        ModelShape("deepseek-v3", layers=61, kv_lora_rank=512, rope_head_dim=64, dtype="bf16"),  # 68.6 KiB
    )
}

_STANDARD = ("layers", "kv_heads", "head_dim", "dtype")
_MLA = ("layers", "kv_lora_rank", "rope_head_dim", "dtype")


def load_model(name_or_path: str) -> ModelShape:
    """A preset by name, or a TOML file with `layers`, `kv_heads`, `head_dim`, `dtype` (or,
    for MLA, `layers`, `kv_lora_rank`, `rope_head_dim`, `dtype`) and an optional `name`."""
    if name_or_path in PRESETS:
        return PRESETS[name_or_path]
    where = f"--model {name_or_path}"
    p = Path(name_or_path)
    if not name_or_path or not p.is_file():
        raise ShapeError(f"{where}: not a preset ({', '.join(PRESETS)}) nor a TOML file")
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise ShapeError(f"{where}: cannot read: {e}") from None
    except tomllib.TOMLDecodeError as e:
        raise ShapeError(f"{where}: not valid TOML ({e})") from None
    fields = _MLA if "kv_lora_rank" in data else _STANDARD
    unknown = sorted(set(data) - set(fields) - {"name"})
    if unknown:
        raise ShapeError(f"{where}: unknown field(s) {', '.join(unknown)}; a model has {', '.join(_STANDARD)} (or, MLA, {', '.join(_MLA)}) and an optional name")
    missing = [k for k in fields if k not in data]
    if missing:
        raise ShapeError(f"{where}: field(s) {', '.join(missing)} missing")
    for k in fields[:-1]:
        v = data[k]
        if not isinstance(v, int) or isinstance(v, bool) or v < (0 if k == "rope_head_dim" else 1) or v > 1 << 20:
            raise ShapeError(f"{where}: field '{k}' must be an integer in [1, {1 << 20}], got {v!r}")
    if data["dtype"] not in DTYPE_BYTES:
        raise ShapeError(f"{where}: field 'dtype' must be one of {', '.join(DTYPE_BYTES)}, got {data['dtype']!r}")
    name = data.get("name", p.stem)
    if not isinstance(name, str) or not name:
        raise ShapeError(f"{where}: field 'name' must be a non-empty string, got {name!r}")
    return ModelShape(name=name, **{k: data[k] for k in fields})


_UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}
UNITS_TEXT = "B, KB, MB, GB, TB, KiB, MiB, GiB, TiB"
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]+)\s*")


def parse_size(option: str, text: str) -> int:
    """`40GiB`, `512MiB`, `8GB`, `1.5TB`, `4096B` as bytes (floored); a bare number or an
    unknown unit is a `ShapeError` naming the option."""
    m = _SIZE.fullmatch(text)
    if m is None or m.group(2).upper() not in _UNITS:
        raise ShapeError(f"{option} {text!r}: a size is a number and a unit ({UNITS_TEXT}), e.g. 40GiB")
    n = math.floor(float(m.group(1)) * _UNITS[m.group(2).upper()])
    if n <= 0:
        raise ShapeError(f"{option} {text!r}: must be more than 0 bytes")
    return n


def size_pages(option: str, text: str, page_bytes: int, shape: ModelShape, page_tokens: int) -> int:
    """The whole pages a size holds (floored); less than one page is a `ShapeError`."""
    n = parse_size(option, text) // page_bytes
    if n < 1:
        raise ShapeError(
            f"{option} {text}: smaller than one page ({fmt_bytes(page_bytes)}: {page_tokens} tokens x "
            f"{shape.bytes_per_token:,} bytes per token of {shape.name})"
        )
    return n


def fmt_bytes(n: float) -> str:
    """Bytes in binary units: `64 MiB`, `1.5 GiB`."""
    for unit, k in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= k:
            return f"{n / k:.4g} {unit}"
    return f"{int(n)} B"


# ---- serving figures -------------------------------------------------------------------------

# Defaults of the time-to-first-token estimate (assumptions, not measurements; docs/sim.md):
# an 8B model's prefill on one H100-class GPU, host-to-device PCIe 5 x16 effective, an NVMe disk.
PREFILL_TPS = 10_000.0  # prefill tokens per second per rank
L2_GBPS = 25.0  # host -> device, GB/s (10^9 bytes) per rank
L3_GBPS = 3.0  # disk -> host, GB/s per rank


@dataclass(frozen=True)
class Serving:
    """What turns a run's counts into bytes and time: the shape, whether it was given, the
    rates (per rank; a request's pages are spread over the R ranks, which work in parallel)."""

    shape: ModelShape
    given: bool = False  # False: DEFAULT_MODEL stands in
    prefill_tps: float = PREFILL_TPS
    l2_gbps: float = L2_GBPS
    l3_gbps: float = L3_GBPS


def check_rate(option: str, v: float | None) -> None:
    if v is not None and not (math.isfinite(v) and v > 0):
        raise ShapeError(f"{option} {v}: must be a positive number")


def ttft_ms(recomputed_tokens: int, l2_pages: int, l3_pages: int, page_bytes: int, ranks: int, sv: Serving) -> float:
    """The estimate: the recomputed tokens at the prefill rate, plus the pages loaded from
    the host (L2 hits and L3 reloads) over host-to-device, plus the pages reloaded from disk
    over the disk's bandwidth, each rate times the R ranks; no queueing, no overlap."""
    s = recomputed_tokens / (sv.prefill_tps * ranks)
    s += (l2_pages + l3_pages) * page_bytes / (sv.l2_gbps * 1e9 * ranks)
    s += l3_pages * page_bytes / (sv.l3_gbps * 1e9 * ranks)
    return s * 1000


def percentile(sorted_values: list[float], q: float) -> float:
    """The nearest-rank percentile (q in (0, 100]) of sorted values; 0 for none."""
    if not sorted_values:
        return 0.0
    return sorted_values[max(0, math.ceil(q / 100 * len(sorted_values)) - 1)]


def serving_summary(per_request: list[tuple[int, int, int, int, int]], pages_moved: dict[str, int], P: int, ranks: int, sv: Serving) -> dict[str, Any]:
    """`tokens_saved`, `tokens_recomputed`, `ttft_ms` and `bytes_moved` from each admitted
    request's (prompt tokens, L1 pages, L2 pages, L3 pages, file index): a request's hit
    tokens are its first `min(hit pages x P, prompt tokens)`, L1's first, then L2's, L3's."""
    page_bytes = sv.shape.bytes_per_token * P
    saved = {"l1": 0, "l2": 0, "l3": 0}
    recomputed: list[int] = []
    ttfts: list[float] = []
    for n, h1, h2, h3, _ in per_request:
        a, b, c = min(h1 * P, n), min((h1 + h2) * P, n), min((h1 + h2 + h3) * P, n)
        saved["l1"] += a
        saved["l2"] += b - a
        saved["l3"] += c - b
        recomputed.append(n - c)
        ttfts.append(ttft_ms(n - c, h2, h3, page_bytes, ranks, sv))
    total = sum(saved.values())
    k = len(per_request)
    st = sorted(ttfts)
    rec = sorted(recomputed)
    return {
        "tokens_saved": {**saved, "total": total},
        "tokens_recomputed": {"total": sum(recomputed), "mean": round(sum(recomputed) / k, 3) if k else 0.0,
                              "p50": percentile(rec, 50), "p99": percentile(rec, 99)},
        "ttft_ms": {"mean": round(sum(ttfts) / k, 3) if k else 0.0, "p50": round(percentile(st, 50), 3),
                    "p99": round(percentile(st, 99), 3), "max": round(st[-1], 3) if st else 0.0},
        "bytes_moved": {k2: v * page_bytes for k2, v in pages_moved.items()},
        "serving": {"model": sv.shape.to_json() | {"given": sv.given}, "page_bytes": page_bytes,
                    "prefill_tps": sv.prefill_tps, "l2_gbps": sv.l2_gbps, "l3_gbps": sv.l3_gbps},
    }


def capacities(cfg: Any, page_bytes: int, l2: bool, l3: bool) -> dict[str, Any]:
    """Each tier's capacity in pages, tokens and bytes (L1 and L3 per rank, L2 shared)."""
    out = {"l1": {"pages": cfg.L1}}
    if l2:
        out["l2"] = {"pages": cfg.L2}
    if l3:
        out["l3"] = {"pages": cfg.L3}
    for v in out.values():
        v.update(tokens=v["pages"] * cfg.P, bytes=v["pages"] * page_bytes)
    return out
