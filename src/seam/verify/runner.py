"""``seam verify``: run every case module's checks on this machine and print one table.

Case modules are ``seam/verify/case_*.py`` (discovered, so adding an op adds its checks).
Exit status is 1 when any check fails its exactness rule or raises.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import pkgutil
import sys
import time
import traceback

import torch
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress
from rich.table import Table

import seam.verify
from seam.verify.core import Check, Context


@dataclasses.dataclass
class Row:
    op: str
    m: int
    shape: str
    exact: bool
    detail: str
    fused_us: float | None = None
    unfused_us: float | None = None
    gbps: float | None = None

    @property
    def speedup(self) -> float | None:
        if self.fused_us and self.unfused_us:
            return self.unfused_us / self.fused_us
        return None


def case_modules() -> list[str]:
    return sorted(
        f"seam.verify.{m.name}" for m in pkgutil.iter_modules(seam.verify.__path__) if m.name.startswith("case_")
    )


def collect(ctx: Context, only: str | None = None) -> list[Check]:
    """The checks of every case module, or of those whose case name (``lamport``, ``qkv``, ...)
    contains ``only``."""
    checks: list[Check] = []
    for name in case_modules():
        if only and only not in name.rsplit(".case_", 1)[1]:
            continue
        checks.extend(importlib.import_module(name).checks(ctx))
    return checks


def run_check(ctx: Context, check: Check, timing: bool) -> Row:
    try:
        outcome = check.run()
    except Exception as exc:  # a crash is a failed check, reported with its cause
        traceback.print_exc()
        return Row(check.op, check.m, check.shape, False, f"error: {type(exc).__name__}: {exc}")
    row = Row(check.op, check.m, check.shape, outcome.exact, outcome.detail)
    if timing and ctx.device.type == "cuda":
        from seam.bench.timing import graph_time_us

        try:
            if outcome.fused is not None:
                row.fused_us = graph_time_us(outcome.fused)
                if outcome.bytes_moved:
                    row.gbps = outcome.bytes_moved / (row.fused_us * 1e-6) / 1e9
            if outcome.unfused is not None:
                row.unfused_us = graph_time_us(outcome.unfused)
        except Exception as exc:  # timing trouble is reported, not a failed check
            traceback.print_exc()
            row.detail += f" (timing failed: {type(exc).__name__})"
    return row


def render(rows: list[Row], ctx: Context, console: Console) -> None:
    where = f"{torch.cuda.get_device_name(ctx.device)}" if ctx.device.type == "cuda" else "CPU (Triton interpreter)"
    table = Table(title=f"seam verify on {where}: {'model' if ctx.full else 'reduced'} shapes")
    for col in ("op", "M", "shape", "meets spec", "detail", "fused us", "unfused us", "speed-up", "GB/s"):
        table.add_column(col, justify="right" if col in ("M", "fused us", "unfused us", "speed-up", "GB/s") else "left")
    fmt = lambda v, spec: "-" if v is None else format(v, spec)  # noqa: E731
    for r in rows:
        table.add_row(
            escape(r.op),
            str(r.m),
            escape(r.shape),
            "[green]yes[/]" if r.exact else "[red]NO[/]",
            escape(r.detail),
            fmt(r.fused_us, ".2f"),
            fmt(r.unfused_us, ".2f"),
            fmt(r.speedup, ".2f"),
            fmt(r.gbps, ".0f"),
        )
    console.print(table)


def main(json_path: str | None = None, only: str | None = None, timing: bool = True) -> int:
    console = Console(width=None if sys.stdout.isatty() else 160)
    ctx = Context.here()
    checks = collect(ctx, only)
    if not checks:
        console.print(f"no verify case matches --only {only!r}; cases: {', '.join(n.rsplit('.case_', 1)[1] for n in case_modules())}")
        return 1
    rows: list[Row] = []
    start = time.perf_counter()
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("verifying", total=len(checks))
        for check in checks:
            progress.update(task, description=f"{check.op} M={check.m}")
            rows.append(run_check(ctx, check, timing))
            progress.advance(task)
    render(rows, ctx, console)
    failed = [r for r in rows if not r.exact]
    console.print(
        f"{len(rows) - len(failed)} passed, {len(failed)} failed "
        f"({time.perf_counter() - start:.0f} s)"
    )
    if json_path:
        with open(json_path, "w") as f:
            json.dump(
                {"device": str(ctx.device), "full_shapes": ctx.full, "rows": [dataclasses.asdict(r) for r in rows]},
                f,
                indent=1,
            )
    return 1 if failed else 0
