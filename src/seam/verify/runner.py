"""``seam verify``: run every case module's checks on this machine and print one table.

Case modules are ``seam/verify/case_<family>.py`` (discovered, so adding an op adds its checks).
Each check prints a line as it finishes (under a progress bar on a terminal); the table then
groups the rows by op, with the rule each op's outputs must meet under its name.
Exit status is 1 when any check fails its rule or raises.

On a GPU most of a fresh run's time is Triton compiling kernels, one CPU core at a time (log run 52:
qkv 129 of its 46 checks' 130 s). So the checks first run in worker processes (:func:`default_workers`),
which compile in parallel into Triton's on-disk cache and report each check's outcome; the timings then
run one at a time in this process, where every kernel is already compiled. They time the smallest and
the largest M of each op and shape (:func:`timed`) with short graph replays (:data:`TIMING`): timing every
check took longer than the checks themselves (log run 60: 149 checks in 54 s, their timings past 176 s).
``seam bench NAME`` times every M, against more peers.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import importlib
import json
import multiprocessing
import os
import pkgutil
import time
import traceback
from collections.abc import Iterator
from typing import NamedTuple

import torch
from rich.console import Console
from rich.markup import escape
from rich.padding import Padding
from rich.progress import Progress
from rich.table import Table
from rich.text import Text

import seam.verify
from seam.verify.core import Check, Context


class Case(NamedTuple):
    """A check and the family it belongs to: its case module's name, ``norm`` for ``case_norm.py``."""

    family: str
    check: Check


@dataclasses.dataclass
class Row:
    family: str
    op: str
    m: int
    shape: str
    rule: str
    meets_spec: bool  #: the outputs meet the op's rule (bit-identical, or the stated tolerance)
    detail: str
    fused_us: float | None = None
    unfused_us: float | None = None
    gbps: float | None = None
    baseline: str = ""  #: what the unfused time is of

    @property
    def speedup(self) -> float | None:
        if self.fused_us and self.unfused_us:
            return self.unfused_us / self.fused_us
        return None


def families() -> list[str]:
    return sorted(m.name.removeprefix("case_") for m in pkgutil.iter_modules(seam.verify.__path__)
                  if m.name.startswith("case_"))


def collect(ctx: Context) -> list[Case]:
    """Every case module's checks, those of one op next to each other (ops in first-seen order)."""
    cases = [Case(f, c) for f in families() for c in importlib.import_module(f"seam.verify.case_{f}").checks(ctx)]
    order: dict[str, int] = {}
    for case in cases:
        order.setdefault(case.check.op, len(order))
    return sorted(cases, key=lambda case: order[case.check.op])


def select(cases: list[Case], only: str | list[str] | None) -> list[Case]:
    """The cases of family ``only``, or else those whose op name contains it; any case; all for None.
    A list of names selects every case one of them selects, in the order of ``cases``.

    Raises:
        ValueError: a name matches no case (or is blank).
    """
    if only is None:
        return cases
    picked: set[int] = set()
    for name in [only] if isinstance(only, str) else only:
        needle = name.strip().lower()
        # a family name picks the family (``norm``), not every op with the word in it (``lamport_..._rms_norm``)
        chosen = [c for c in cases if c.family == needle] or [c for c in cases if needle and needle in c.check.op.lower()]
        if not chosen:
            ops = ", ".join(dict.fromkeys(c.check.op for c in cases))
            raise ValueError(f"--only {name!r} names no family and is in no op's name (any case); "
                             f"families: {', '.join(families())}; ops: {ops}")
        picked.update(id(c) for c in chosen)
    return [c for c in cases if id(c) in picked]


def also_named(cases: list[Case], chosen: list[Case], only: str | None) -> list[str]:
    """Ops outside ``chosen`` whose names contain ``only`` (a family name picks the family alone: these
    are the ops the caller may have meant too)."""
    if only is None:
        return []
    needle, picked = only.strip().lower(), {c.check.op for c in chosen}
    return list(dict.fromkeys(c.check.op for c in cases if c.check.op not in picked and needle in c.check.op.lower()))


#: Graph replays per timing (``seam.bench.timing.graph_time_us``): a quick table, not a benchmark.
TIMING = {"iters": 50, "reps": 7}


def timed(cases: list[Case]) -> set[int]:
    """Indices of the cases whose timings the table shows: the smallest and the largest M of each op and shape."""
    groups: dict[tuple, list[int]] = {}
    for i, c in enumerate(cases):
        groups.setdefault((c.family, c.check.op, c.check.shape), []).append(i)
    picked = set()
    for members in groups.values():
        by_m = sorted(members, key=lambda i: cases[i].check.m)
        picked.update((by_m[0], by_m[-1]))
    return picked


def default_workers(ctx: Context) -> int:
    """Processes for the checks' first pass: on a GPU up to 8, half the CPU cores (compiles are CPU-bound;
    the GPU work of a check is short); under the interpreter 1 (there is nothing to compile, and the checks
    themselves take the cores)."""
    if ctx.device.type != "cuda":
        return 1
    return max(1, min(8, (os.cpu_count() or 1) // 2))


def _keys(cases: list[Case]) -> list[tuple]:
    """A key per case that a worker can find in its own :func:`collect` (checks are closures, not picklable)."""
    seen: dict[tuple, int] = {}
    keys = []
    for c in cases:
        key = (c.family, c.check.op, c.check.m, c.check.shape)
        seen[key] = seen.get(key, -1) + 1
        keys.append((*key, seen[key]))
    return keys


_worker_cases: dict[tuple, Case] | None = None


def _worker_check(key: tuple) -> tuple[tuple, Row, float]:
    """In a worker process: run the check ``key`` names, untimed."""
    global _worker_cases
    ctx = Context.here()
    if _worker_cases is None:
        every = collect(ctx)
        _worker_cases = dict(zip(_keys(every), every))
    t0 = time.perf_counter()
    return key, run_check(ctx, _worker_cases[key], timing=False), time.perf_counter() - t0


def _first_pass(ctx: Context, cases: list[Case], workers: int, to_time: set[int]) -> Iterator[tuple[int, Row, float]]:
    """(index into ``cases``, row, seconds) of every case as it finishes: untimed in ``workers`` spawned
    processes (more than one), else here (the indices in ``to_time`` timed), and here, untimed, whatever a
    broken pool (a worker killed) left."""
    keys = _keys(cases)
    position = {key: i for i, key in enumerate(keys)}
    done: set[int] = set()
    if workers > 1:
        try:
            with concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
                for future in concurrent.futures.as_completed([pool.submit(_worker_check, key) for key in keys]):
                    key, row, seconds = future.result()
                    done.add(position[key])
                    yield position[key], row, seconds
        except concurrent.futures.process.BrokenProcessPool:
            traceback.print_exc()
    for i, case in enumerate(cases):
        if i not in done:
            t0 = time.perf_counter()
            yield i, run_check(ctx, case, timing=workers == 1 and i in to_time), time.perf_counter() - t0


def run_check(ctx: Context, case: Case, timing: bool) -> Row:
    check = case.check
    row = Row(case.family, check.op, check.m, check.shape, check.rule, False, "")
    try:
        outcome = check.run()
    except Exception as exc:  # a crash is a failed check, reported with its cause
        traceback.print_exc()
        row.detail = f"error: {type(exc).__name__}: {exc}"
        return row
    row.meets_spec, row.detail = outcome.exact, outcome.detail
    if outcome.unfused is not None:
        row.baseline = outcome.baseline
    if timing and ctx.device.type == "cuda":
        from seam.bench.timing import graph_time_us

        try:
            if outcome.fused is not None:
                row.fused_us = graph_time_us(outcome.fused, **TIMING)
                if outcome.bytes_moved:
                    row.gbps = outcome.bytes_moved / (row.fused_us * 1e-6) / 1e9
            if outcome.unfused is not None:
                row.unfused_us = graph_time_us(outcome.unfused, **TIMING)
        except Exception as exc:  # timing trouble is reported, not a failed check
            traceback.print_exc()
            row.detail += f" (timing failed: {type(exc).__name__})"
    return row


def _verdict(exact: bool) -> Text:
    return Text("yes", style="green") if exact else Text("NO", style="red")


def render(rows: list[Row], ctx: Context, console: Console) -> None:
    """One table: a heading row per op (and shape) with the rule its outputs must meet, then a row per M."""
    where = f"{torch.cuda.get_device_name(ctx.device)}" if ctx.device.type == "cuda" else "CPU (Triton interpreter)"
    table = Table(title=f"seam verify on {where}: {'model' if ctx.full else 'reduced'} shapes")
    # Only the first column wraps (folding, never cutting, a name longer than it): op names and details share
    # its width, which is what is left beside the short columns, so a 100-column terminal keeps names whole.
    table.add_column("op  shape\nrule\n  detail", overflow="fold")
    table.add_column("M", justify="right", no_wrap=True)
    table.add_column("meets\nspec", no_wrap=True)
    timed = any(r.fused_us is not None or r.unfused_us is not None for r in rows)
    if timed:  # none on CPU or with --no-timing: no columns of dashes
        for col in ("fused\nus", "unfused\nus", "speed-\nup", "GB/s"):
            table.add_column(col, justify="right", no_wrap=True)
    fmt = lambda v, spec: "-" if v is None else format(v, spec)  # noqa: E731
    for i, r in enumerate(rows):
        if i == 0 or (rows[i - 1].op, rows[i - 1].shape) != (r.op, r.shape):
            table.add_row(Text.assemble((r.op, "bold"), f"  {r.shape}\n", (r.rule, "dim")))
        detail = f"{r.detail}; unfused = {r.baseline}" if timed and r.unfused_us is not None and r.baseline else r.detail
        cells = [Padding(Text(detail), (0, 0, 0, 2)), str(r.m), _verdict(r.meets_spec)]
        if timed:
            cells += [fmt(r.fused_us, ".2f"), fmt(r.unfused_us, ".2f"), fmt(r.speedup, ".2f"), fmt(r.gbps, ".0f")]
        last = i + 1 == len(rows) or (rows[i + 1].op, rows[i + 1].shape) != (r.op, r.shape)
        table.add_row(*cells, end_section=last)
    console.print(table)


def main(ctx: Context, cases: list[Case], json_path: str | None = None, timing: bool = True,
         workers: int = 1) -> int:
    """Run ``cases`` (from :func:`select` on :func:`collect`'s list: ``workers`` > 1 finds them there), print a
    line per check and the table, save ``json_path``. More than one of ``workers`` processes run the checks
    first (:func:`default_workers`); with timing on a GPU the checks :func:`timed` picks then run again here,
    timed, and that run's outcome is the one the table reports."""
    console = Console()
    if not console.is_terminal:  # a file or a pipe: wider than rich's default 80 columns, fewer wrapped details
        console.width = 160
    rows: list[Row | None] = [None] * len(cases)
    start = time.perf_counter()
    to_time = timed(cases) if timing and ctx.device.type == "cuda" else set()
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("verifying", total=len(cases))
        for i, row, seconds in _first_pass(ctx, cases, workers, to_time):
            rows[i] = row
            # above the bar on a terminal; the only progress output in a file or a pipe
            line = Text.assemble(_verdict(row.meets_spec), f"  {row.family}  {row.op}  M={row.m}  {row.shape} ")
            progress.console.print(line, f"({seconds:.1f} s)")
            progress.advance(task)
        if to_time and workers > 1:
            progress.console.print(f"timing {len(to_time)} of {len(cases)} checks (the smallest and largest M of "
                                   f"each op), one at a time ({time.perf_counter() - start:.0f} s)")
            progress.reset(task, total=len(to_time), description="timing")
            for i in sorted(to_time):
                case = cases[i]
                progress.update(task, description=escape(f"timing {case.check.op} M={case.check.m}"))
                rows[i] = run_check(ctx, case, timing=True)  # its outcome again, with the kernels compiled
                progress.advance(task)
    render(rows, ctx, console)
    failed = [r for r in rows if not r.meets_spec]
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
