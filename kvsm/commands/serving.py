"""The options that speak bytes and time (`--model`, `--l1-size`, `--prefill-tps`, ...),
shared by `kvsm sim`, `kvsm sweep`, `kvsm run` and `kvsm campaign`, and the report rows
that show a run's capacities in pages, tokens and bytes and its serving figures
(`kvsm.sim.shape`; docs/sim.md, "Bytes and serving figures")."""

from __future__ import annotations

from typing import Any

import typer

from ..sim.shape import DEFAULT_MODEL, PRESETS, fmt_bytes

MODEL_HELP = (f"the model whose KV shape turns pages into bytes: a preset ({', '.join(PRESETS)}) or a TOML file "
              f"(layers, kv_heads, head_dim, dtype; MLA: layers, kv_lora_rank, rope_head_dim, dtype); "
              f"default {DEFAULT_MODEL} for the byte and TTFT figures")


def model_option(help: str = MODEL_HELP) -> Any:
    return typer.Option(None, "--model", help=help, metavar="NAME|PATH")


def size_option(name: str, help: str) -> Any:
    return typer.Option(None, name, help=f"{help} (units B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)", metavar="SIZE")


def rate_option(name: str, default: float, help: str) -> Any:
    return typer.Option(None, name, help=f"{help} (default {default:g}, an assumption: docs/sim.md)", metavar="RATE")


def ttl_option() -> Any:
    return typer.Option(None, "--reload-ttl-s", metavar="SECONDS",
                        help="the reload ttl in seconds of simulated time (ticks of 20 ms, rounded up), instead of --set reload_ttl=TICKS")


def capacity_text(c: dict[str, Any]) -> str:
    return f"{c['pages']:,} pages, {c['tokens']:,} tokens, {fmt_bytes(c['bytes'])}"


def serving_rows(s: dict[str, Any]) -> list[tuple[str, str]]:
    """The rows of a run's report that speak bytes and time."""
    sv = s["serving"]
    m = sv["model"]
    rows = [(
        "model (KV bytes per token, per page)",
        f"{m['name']}{'' if m['given'] else ' (default; --model)'} ({m['bytes_per_token']:,} B, {fmt_bytes(sv['page_bytes'])})",
    )]
    for tier, what in (("l1", "L1 per rank"), ("l2", "L2 shared"), ("l3", "L3 per rank")):
        if tier in s["capacity"]:
            rows.append((what, capacity_text(s["capacity"][tier])))
    t, r, ttft = s["tokens_saved"], s["tokens_recomputed"], s["ttft_ms"]
    rows += [
        ("prefill tokens saved: L1 / L2 / L3 (total)", f"{t['l1']:,} / {t['l2']:,} / {t['l3']:,} ({t['total']:,})"),
        ("tokens recomputed per request: mean / p50 / p99", f"{r['mean']:,.1f} / {r['p50']:,} / {r['p99']:,}"),
        ("TTFT estimate ms: mean / p50 / p99", f"{ttft['mean']:,.1f} / {ttft['p50']:,.1f} / {ttft['p99']:,.1f}"),
    ]
    b = s["bytes_moved"]
    moved = f"{fmt_bytes(b['l1_to_l2'])} / {fmt_bytes(b['l2_to_l1'])}"
    if "l3" in s["capacity"]:
        moved += f" / {fmt_bytes(b['l2_to_l3'])} / {fmt_bytes(b['l3_to_l2'])}"
    rows.append(("bytes moved L1->L2 / L2->L1" + (" / L2->L3 / L3->L2" if "l3" in s["capacity"] else ""), moved))
    return rows
