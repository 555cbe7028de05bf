"""Command line: ``seam info``, ``seam verify``, ``seam bench <name>`` (also ``python -m seam``)."""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import platform
import sys
import textwrap

import seam
from seam import runtime


def _info() -> int:
    import torch
    import triton

    print(f"seam {seam.__version__}")
    print(f"python {platform.python_version()}  torch {torch.__version__}  triton {triton.__version__}")
    if torch.cuda.is_available():
        dev = torch.cuda.current_device()
        cap = torch.cuda.get_device_capability(dev)
        props = torch.cuda.get_device_properties(dev)
        print(f"device cuda:{dev} {props.name}, sm_{cap[0]}{cap[1]}, {props.multi_processor_count} SMs")
    else:
        print("device: no CUDA device")
    mode = "Triton interpreter (CPU, exact bit-level conversions)" if runtime.INTERPRET else "native Triton"
    if runtime.KERNELS_UNAVAILABLE:
        mode = f"cannot run in this process: {runtime.KERNELS_UNAVAILABLE}"
    print(f"kernels: {mode}")
    print(f"PDL: {'yes' if runtime.supports_pdl(runtime.kernel_device()) else 'no'}")
    return 0


def _bench_names() -> list[str]:
    import seam.bench

    # timing and stream are shared helpers; dist runs one process per GPU under torchrun (_MULTI_PROCESS)
    return sorted(m.name for m in pkgutil.iter_modules(seam.bench.__path__)
                  if m.name not in ("timing", "stream", "dist"))


_MULTI_PROCESS = {"dist": "torchrun --nproc-per-node N -m seam.bench.dist --tp N"}


def _bench_list() -> str:
    """One entry per benchmark for ``seam bench --help``: the first sentence of its module's docstring and its
    default token counts (``MS``; step's depend on the device: ``MS_GPU`` / ``MS_CPU``)."""
    lines = []
    for name in _bench_names():
        module = importlib.import_module(f"seam.bench.{name}")
        what = " ".join((module.__doc__ or "").split("\n\n")[0].split()).removeprefix("Benchmark: ")
        what = what.split(". ")[0].rstrip(".").replace("``", "")
        if hasattr(module, "MS"):
            ms = " ".join(map(str, module.MS))
        else:
            ms = f"{' '.join(map(str, module.MS_GPU))} on a GPU, {' '.join(map(str, module.MS_CPU))} on CPU"
        lines += textwrap.wrap(f"{name}: {what} (default M: {ms})", 100, initial_indent="  ", break_on_hyphens=False,
                               subsequent_indent="      ")
    return "\n".join(lines)


def _bench(name: str, ms: list[int] | None) -> int:
    from rich.console import Console

    if name in _MULTI_PROCESS:
        print(f"seam bench {name} runs one process per GPU: {_MULTI_PROCESS[name]}", file=sys.stderr)
        return 2
    module = importlib.import_module(f"seam.bench.{name}")
    import torch

    if not getattr(module, "RUNS_ON_CPU", False) and not torch.cuda.is_available():
        on_cpu = [n for n in _bench_names()
                  if getattr(importlib.import_module(f"seam.bench.{n}"), "RUNS_ON_CPU", False)]
        print(f"seam bench {name} needs a CUDA GPU (this machine has none); `seam verify` checks every op on CPU, "
              f"and {' and '.join(f'`seam bench {n}`' for n in on_cpu)} also runs here", file=sys.stderr)
        return 2
    cpu_max_m = getattr(module, "CPU_MAX_M", None)
    if cpu_max_m is not None and ms and max(ms) > cpu_max_m and not torch.cuda.is_available():
        print(f"seam bench {name}: --m {max(ms)} on CPU: the interpreter's time grows with M, so this machine takes "
              f"M <= {cpu_max_m} (at most minutes); larger M needs a GPU", file=sys.stderr)
        return 2
    if runtime.KERNELS_UNAVAILABLE:  # every benchmark launches kernels (checked past the GPU's absence: its fix)
        print(f"seam bench: the kernels cannot run in this process: {runtime.KERNELS_UNAVAILABLE}", file=sys.stderr)
        return 2
    out_folder = getattr(module, "out_folder", None)  # a benchmark that writes files says where
    if out_folder is not None and (problem := _unwritable_folder(os.fspath(out_folder()))):
        print(f"seam bench {name}: $SEAM_OUT: {problem}", file=sys.stderr)
        return 2
    # Benchmark tables are wide; keep every column when the output is a file or a pipe.
    console = Console(width=None if sys.stdout.isatty() else 220)
    if ms is None:
        module.run(console)
    else:
        module.run(console, ms=tuple(ms))
    return 0


def _unwritable_folder(path: str) -> str | None:
    """Why the folder ``path`` cannot take a benchmark's files (checked before it runs, not once its results are
    in), or None; a missing folder is made here, as the benchmark would make it."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        return f"cannot make the folder {path!r}: {exc.strerror}"
    if not os.access(path, os.W_OK | os.X_OK):
        return f"cannot write in the folder {path!r}"
    return None


def _token_count(text: str) -> int:
    """One ``--m`` value. ``--m`` takes one or more, so a benchmark name after it is read as one: say where it
    goes."""
    try:
        return int(text)
    except ValueError:
        hint = "; the benchmark name comes before --m: seam bench NAME --m M [M ...]" if text in _bench_names() else ""
        raise argparse.ArgumentTypeError(f"expected a token count, got {text!r}{hint}") from None


def _positive(text: str) -> int:
    """``--workers`` N: an integer >= 1."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {n}")
    return n


def _writable(path: str) -> str:
    """``--json`` PATH, checked before the checks run rather than when their results are saved."""
    existed = os.path.lexists(path)
    try:
        open(path, "a").close()  # "a": an existing file keeps its contents until the results replace them
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"cannot write {path!r}: {exc.strerror}") from None
    if not existed:
        os.remove(path)
    return path


def main(argv: list[str] | None = None) -> int:
    from seam.verify.runner import families

    args_in = sys.argv[1:] if argv is None else argv

    parser = argparse.ArgumentParser(
        prog="seam", description="seam: fused layer-boundary kernels for quantized MoE decode. Commands: seam info, "
        "seam verify, seam bench NAME (also python -m seam ...); seam COMMAND --help for each one's options.")
    # seam is imported already (this module is part of it), and its __version__ is that of the code running,
    # even from src/ without install or beside another installed seam, where package metadata would differ
    parser.add_argument("--version", action="version", version=f"seam {seam.__version__}")
    sub = parser.add_subparsers(dest="cmd")
    info_help = "versions, device, native or interpreted kernels"
    sub.add_parser("info", help=info_help, description=info_help)
    verify_help = "every fused op against its reference on this device"
    verify = sub.add_parser("verify", help=verify_help,
                            description=f"{verify_help} (the GPU if present, else the CPU under the Triton "
                            "interpreter: about 60-100 s on an H200, a minute on 2 CPU cores), a line per check as "
                            "it runs, then a table")
    verify.add_argument("--json", metavar="PATH", type=_writable, help="also save the results as JSON")
    verify.add_argument("--only", metavar="NAME", action="append",
                        help=f"a family name ({', '.join(families())}) runs that family alone; any other NAME, "
                        "the ops whose name contains it; any case; repeat it for several (their union runs)")
    verify.add_argument("--no-timing", action="store_true", help="skip the GPU timings")
    verify.add_argument("--workers", type=_positive, metavar="N",
                        help="processes that run the checks first, compiling in parallel (default: on a GPU half "
                        "the CPU cores, at most 8; under the interpreter 1)")
    bench_help = "GPU benchmarks, one per op (step also runs on CPU)"
    bench = sub.add_parser("bench", help=bench_help, description=bench_help,
                           formatter_class=argparse.RawDescriptionHelpFormatter,
                           # the benchmark list imports every benchmark module: only where it can be asked for
                           epilog=("benchmarks:\n" + _bench_list() + "\n\n" if "bench" in args_in else "")
                           + "\n".join(textwrap.wrap(
                               "gemm adds vLLM's Hopper MXFP8 GEMM (W8A16) as a peer column where the optional package "
                               "humming-kernels is installed; step also writes step.json (and on a GPU step.png) to "
                               "$SEAM_OUT (default ./out); results: BENCHMARKS.md", 100, break_on_hyphens=False)))
    bench.add_argument("name", help=f"benchmark name: {', '.join(_bench_names())}")
    bench.add_argument("--m", type=_token_count, nargs="+", action="extend", metavar="M",
                       help="token counts to run instead of the benchmark's default list (a short run); "
                       "repeat it to add more")
    args, extra = parser.parse_known_args(args_in)
    if extra:  # argparse would name the top-level usage; the command's own is the one that helps
        sub.choices.get(args.cmd, parser).error(f"unrecognized arguments: {' '.join(extra)}")
    if args.cmd is None:
        parser.print_help()
        return 0
    if args.cmd == "info":
        return _info()
    if args.cmd == "verify":
        from seam.verify import runner
        from seam.verify.core import Context

        if runtime.KERNELS_UNAVAILABLE:  # every check would raise it (and setting them up may fail first)
            print(f"seam verify: the kernels cannot run in this process: {runtime.KERNELS_UNAVAILABLE}",
                  file=sys.stderr)
            return 2

        ctx = Context.here()
        every = runner.collect(ctx)
        try:
            cases = runner.select(every, args.only)
        except ValueError as exc:
            verify.error(str(exc))
        for name in args.only or ():
            if others := runner.also_named(every, cases, name):
                shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
                print(f"--only {name}: the family {name.strip().lower()!r} only; not run, though their names "
                      f"contain it: {shown} (name one to run it)")
        workers = args.workers or runner.default_workers(ctx)
        return runner.main(ctx, cases, args.json, timing=not args.no_timing, workers=workers)
    if args.name not in _bench_names() and args.name not in _MULTI_PROCESS:
        bench.error(f"unknown benchmark {args.name!r}; choose from {', '.join(_bench_names())}")
    if args.m is not None and any(m < 1 for m in args.m):
        bench.error(f"--m takes token counts >= 1, got {args.m}")
    return _bench(args.name, None if args.m is None else list(dict.fromkeys(args.m)))  # each M once, in order


if __name__ == "__main__":
    sys.exit(main())
