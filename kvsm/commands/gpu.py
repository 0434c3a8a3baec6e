"""`kvsm gpu ...`: the GPU backend's commands. torch is imported only when one runs, so
that `kvsm --help` works without it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

import typer

from .common import EXIT_ENVIRONMENT, EXIT_FAILED, bug_option, busy, emit_json, fail, print_error, warn, warn_old_log


def _print_summary(s: dict[str, Any], as_json: bool) -> None:
    if as_json:
        emit_json(s)
        return
    for f in s["failures"]:
        ranks = f.get("ranks")
        every = f" (every rank: {', '.join(map(str, ranks))})" if ranks and len(ranks) > 1 else ""
        print_error(f"{f['message']}{every}", f["kind"])
    typer.echo(
        f"{'ok' if s['ok'] else 'FAILED'}: replayed {s['transitions']} transitions on {s['ranks']} ranks ({s['device']}, {s['io']} copies): "
        f"{s['pages_copied']} pages copied, {s['bytes_verified']} bytes verified, "
        f"{s['gbps_l1_l2']} GB/s L1<->L2, {s['digest_mismatches']} digest mismatches, {s['seconds']} s"
    )
    if s.get("pages_gathered") or s.get("pages_reloaded"):
        typer.echo(
            f"L3: {s['pages_spilled']} pages spilled ({s['bytes_to_disk']} bytes written), "
            f"{s['pages_reloaded']} pages reloaded ({s['bytes_from_disk']} bytes read)"
        )
    if s.get("disk_dir"):
        typer.echo(f"disk stores kept in {s['disk_dir']}")
    if s.get("io_note"):
        warn(s["io_note"])


def register(app: typer.Typer) -> None:
    gpu = typer.Typer(no_args_is_help=True, help="The GPU backend: replay a log on R rank processes that move and verify real KV bytes.")
    app.add_typer(gpu, name="gpu")

    @gpu.command("replay")
    def replay(
        log: Path = typer.Argument(..., help="transition log (JSONL)"),
        ranks: Optional[int] = typer.Option(None, "--ranks", min=1, help="rank processes; must equal the log's R (default: the log's R)"),
        device: Optional[str] = typer.Option(None, "--device", help="cuda or cpu (default: cuda when available)"),
        page_bytes: int = typer.Option(4096, "--page-bytes", help="bytes of one page per layer and payload (a multiple of 8)"),
        layers: int = typer.Option(4, "--layers", help="layers per page"),
        io: str = typer.Option("auto", "--io", help="auto, direct (the device addresses the slab) or staged (pinned staging buffer)"),
        slab_dir: str = typer.Option("/dev/shm", "--slab-dir", help="where the shared host slab file is made (a RAM file system)"),
        disk_dir: str = typer.Option("", "--disk-dir", help="where the per-rank disk stores (L3) are made when the log's config has L3 (default: the temporary directory)"),
        keep: bool = typer.Option(False, "--keep", help="leave the disk stores in place at the end; the summary names their directory"),
        timeout: float = typer.Option(300.0, "--timeout", help="seconds a rank waits for the others at an agreement"),
        as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
        bug: Optional[str] = bug_option(),
    ) -> None:
        """Replay LOG on R rank processes (or, under torchrun, as this rank): apply the model,
        move real KV bytes between device pools, the shared host slab and per-rank disk
        stores, verify every page stored, loaded, spilled and reloaded, and agree on the
        state digest at the model's agreements and at the end. Exit 0 only when nothing
        mismatched."""
        from ..gpu.hooks import InjectError, from_env  # noqa: PLC0415
        from ..gpu.options import Options, ReplayError, check_inputs  # noqa: PLC0415

        opts = Options(str(log), device=device or "cpu", page_bytes=page_bytes, layers=layers, io=io, timeout_s=timeout, slab_dir=slab_dir, disk_dir=disk_dir, keep=keep, bug=bug)
        warn_old_log(log)
        try:  # bad input is refused before torch is imported (seconds) or any process starts
            check_inputs(opts, ranks)
            from_env()
        except (ReplayError, InjectError) as e:
            raise fail(str(e)) from None

        from .. import gpu as _backend  # noqa: F401, PLC0415 - its warning filter, before torch

        with busy("gpu replay: loading torch"):
            import torch  # noqa: PLC0415

        from ..gpu.launch import replay_as_this_rank, under_torchrun  # noqa: PLC0415
        from ..gpu.launch import replay as do_replay  # noqa: PLC0415

        if device is None:
            opts = replace(opts, device="cuda" if torch.cuda.is_available() else "cpu")
        try:
            if under_torchrun():
                ok, summary = replay_as_this_rank(opts, ranks)
                if summary is not None:
                    _print_summary(summary, as_json)
                raise typer.Exit(0 if ok else EXIT_FAILED)
            with busy(f"gpu replay: {log} on rank processes ({opts.device}): starting them, then replaying"):
                summary = do_replay(opts, ranks)
        except (ReplayError, InjectError) as e:
            # the inputs passed their checks above: what fails now is the machine (no CUDA,
            # no room for the slab or the disk stores, a rank's setup)
            raise fail(str(e), EXIT_ENVIRONMENT) from None
        except (torch.multiprocessing.ProcessRaisedException, torch.multiprocessing.ProcessExitedException) as e:
            last = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
            raise fail(f"a rank process failed: {last}", EXIT_ENVIRONMENT) from None
        _print_summary(summary, as_json)
        raise typer.Exit(0 if summary["ok"] else EXIT_FAILED)
