"""`kvsm realimpl ...`: a real implementation held against the model (docs/realimpl.md).
SGLang and torch are imported only when `kvsm realimpl sglang` runs."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Optional

import typer

from .common import EXIT_ENVIRONMENT, EXIT_FAILED, busy, console, emit_json, err, fail, output_option, print_error

L3_BLOCKER = (
    "--tiers l1,l2,l3: not mapped yet. SGLang's file storage backend (backup to storage, prefetch) "
    "runs on the CPU, but its steps do not map one to one onto the model's L3 steps: a storage "
    "backup starts at a write's commit for the whole node, not from a spill queue with a pin per "
    "op, and a prefetch fills host pages before a request's match with no reload mark or TTL "
    "(docs/realimpl.md, L3). Run with --tiers l1,l2."
)


def register(app: typer.Typer) -> None:
    realimpl = typer.Typer(no_args_is_help=True, help="Real implementations held against the model: SGLang 0.5.20's HiRadixCache on the CPU.")
    app.add_typer(realimpl, name="realimpl")

    @realimpl.command("sglang")
    def sglang(
        workload: str = typer.Option("synthetic", "--workload", "-w", help="a bundled trace (synthetic), a generator name or a Mooncake trace file"),
        requests: int = typer.Option(200, "--requests", "-n", min=1, max=1_000_000, help="requests to run (the workload's first N)"),
        tiers: str = typer.Option("l1,l2", "--tiers", help="l1,l2 (device and host pools); l1,l2,l3 is refused with its blocker"),
        config: str = typer.Option("sglang-upstream", "--config", "-c", help="built-in config name or TOML path (R = 1; its P, L1, L2 size the real pools)"),
        output: Optional[Path] = output_option(None, "-o", "--output", help="log file to write (atomically); default: a temporary file, removed at the end"),
        validate: bool = typer.Option(True, "--validate/--no-validate", help="have TLC validate the log (needs Java)"),
        as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
    ) -> None:
        """Run SGLang 0.5.20's real HiRadixCache on the CPU with a workload, request by
        request through the calls its scheduler makes, in lockstep with the model: each
        real event becomes the transitions it implies, and after each call a projection of
        the real tree (keys; on device, backed, write pending, lock counts; the next device
        victim) is compared with the model's. Writes the log, replays it with every
        invariant and has TLC validate it. Exit 1 on a divergence (named by step, real
        event and field), a violation or a rejected step; 3 when SGLang is not installed
        (`kvsm realimpl install sglang`)."""
        from ..config import ConfigError, load_config
        from ..sim.trace import WorkloadError
        from ..sim.workload import load_workload

        tier_set = [t.strip() for t in tiers.split(",") if t.strip()]
        if tier_set == ["l1", "l2", "l3"]:
            raise fail(L3_BLOCKER)
        if tier_set != ["l1", "l2"]:
            raise fail(f"--tiers {tiers}: give l1,l2 (or l1,l2,l3, which says why it is not mapped yet)")
        try:
            cfg = load_config(config)
        except ConfigError as e:
            raise fail(str(e)) from None
        if cfg.R != 1 or cfg.L3 or cfg.policy != "write_through":
            raise fail(f"-c/--config {config}: SGLang's HiRadixCache runs here as one rank, write-through, without L3 "
                       f"(R = 1, policy = write_through, L3 = 0); the config has R = {cfg.R}, policy = {cfg.policy}, L3 = {cfg.L3}")
        if output is not None and (output.is_dir() or (output.parent.exists() and not output.parent.is_dir())):
            raise fail(f"-o/--output {output}: is a directory or under a file")
        try:
            w = load_workload(workload, requests=requests, device_pages=cfg.L1, config=cfg)
        except WorkloadError as e:
            raise fail(str(e)) from None
        from ..realimpl import cpu  # noqa: PLC0415  (no SGLang import yet)

        if not cpu.available():
            raise fail("SGLang 0.5.20 is not installed in this environment: run `kvsm realimpl install sglang` (about 2 GB)",
                       EXIT_ENVIRONMENT)
        summary = _run(cfg, w, output, validate)
        if as_json:
            emit_json(summary)
        else:
            _print(summary)
        if summary["divergences"] or not summary["replay"]["ok"] or (summary["validation"] and not summary["validation"]["ok"]):
            v = summary["validation"]
            if v and v.get("unavailable") and not summary["divergences"] and summary["replay"]["ok"]:
                raise typer.Exit(EXIT_ENVIRONMENT)  # TLC could not run here (no Java): --no-validate skips it
            raise typer.Exit(EXIT_FAILED)

    @realimpl.command("install")
    def install(
        what: str = typer.Argument(..., help="sglang"),
        dry_run: bool = typer.Option(False, "--dry-run", help="print the pip commands, run nothing"),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="pass -q to pip"),
    ) -> None:
        """Install what the SGLang adapter needs into the environment kvsm runs in, with its
        own pip: the pinned requirements (kvsm/realimpl/sglang_requirements.txt: torch
        2.13.0, transformers, triton, ...), then SGLang 0.5.20 itself with --no-deps (its
        own requirement list names CUDA-only packages). About 2 GB."""
        from ..realimpl import install as inst

        if what != "sglang":
            raise fail(f"install {what}: the one real implementation kvsm has an adapter for is 'sglang'")
        cmds = inst.commands()
        if dry_run:
            for c in cmds:
                console.print(" ".join(c), highlight=False, soft_wrap=True)
            return
        t0 = time.perf_counter()
        try:
            inst.run(quiet=quiet)
        except inst.InstallError as e:
            raise fail(f"install sglang: {e}", EXIT_ENVIRONMENT) from None
        console.print(f"installed SGLang {inst.installed()} and its pinned requirements in {time.perf_counter() - t0:.0f}s", highlight=False)


def _run(cfg: Any, w: Any, output: Path | None, validate: bool) -> dict[str, Any]:
    import os  # noqa: PLC0415
    import tempfile  # noqa: PLC0415

    from ..output import OutputError
    from ..realimpl import sglang as adapter
    from ..replay import replay

    t0 = time.perf_counter()
    with busy("realimpl: importing SGLang and running its HiRadixCache"):
        res = adapter.run(cfg, [r.hash_ids for r in w.requests])
    run_s = time.perf_counter() - t0
    tmpdir = None
    path = output
    if path is None:
        tmpdir = tempfile.mkdtemp(prefix="kvsm-realimpl-")
        path = Path(tmpdir) / "sglang.jsonl"
    try:
        try:
            adapter.write_log(res, path, {"workload": w.info()})
        except OutputError as e:
            raise fail(str(e)) from None
        rep = replay(path, check=True)
        validation = None
        if validate:
            validation = _validate(path)
    finally:
        if tmpdir is not None:
            for f in Path(tmpdir).iterdir():
                f.unlink()
            os.rmdir(tmpdir)
    from collections import Counter  # noqa: PLC0415

    return {
        "workload": w.info(),
        "config": cfg.name,
        "requests": res.requests,
        "requests_asked": len(w.requests),
        "uncached": res.uncached,
        "transitions": len(res.transitions),
        "taken": dict(sorted(Counter(t.name for t, _ in res.transitions).items())),
        "real_events": dict(sorted(res.events.items())),
        "divergences": [d.to_json() for d in res.divergences],
        "replay": {"ok": rep.ok, "transitions": rep.transitions, "violations": rep.violations, "first_mismatch": rep.first_mismatch},
        "validation": validation,
        "log": None if output is None else str(output),
        "seconds": round(time.perf_counter() - t0, 2),
        "run_seconds": round(run_s, 2),
    }


def _validate(path: Path) -> dict[str, Any]:
    from ..tla.errors import TLCError, TLCUnavailable
    from ..tla.validate import validate as do_validate

    try:
        with busy(f"realimpl: TLC validates {path}"):
            v = do_validate(path)
    except TLCUnavailable as e:
        return {"ok": False, "error": str(e), "unavailable": True}
    except TLCError as e:
        return {"ok": False, "error": str(e)}
    return {"ok": v.ok, "steps": v.steps, "matched": v.matched, "first_rejected": v.first_rejected, "seconds": round(v.seconds, 2)}


def _print(s: dict[str, Any]) -> None:
    for d in s["divergences"]:
        print_error(f"step {d['step']} (request {d['request']}), real event {d['event']}: {d['field']}: real {d['real']}, model {d['model']} "
                    f"[{d['kind']}{': docs/realimpl.md' if d['kind'] != 'untriaged' else ''}]", "divergence")
        for e in d["events"]:
            err.print(f"  real: {e}", highlight=False, soft_wrap=True)
    for v in s["replay"]["violations"]:
        print_error(str(v), "invariant violated")
    if s["replay"]["first_mismatch"]:
        print_error(str(s["replay"]["first_mismatch"]), "replay")
    v = s["validation"]
    verdict = "not run" if v is None else ("ok" if v["ok"] else f"FAILED {v.get('error') or v.get('first_rejected')}")
    where = f" to {s['log']}" if s["log"] else ""
    console.print(
        f"{'ok' if not s['divergences'] and s['replay']['ok'] and (v is None or v['ok']) else 'FAILED'}: "
        f"{s['requests']} of {s['requests_asked']} requests of {s['workload']['name']} ran in lockstep with the model "
        f"({s['transitions']} transitions written{where}; {len(s['divergences'])} divergence(s)); "
        f"replay with every invariant: {'ok' if s['replay']['ok'] else 'FAILED'}; TLC validation: {verdict}; {s['seconds']} s",
        highlight=False, soft_wrap=True,
    )
