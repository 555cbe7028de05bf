"""The ``seam`` command line: argument errors are reported before anything runs; what ``seam verify`` prints."""

from __future__ import annotations

import io
import re

import pytest
import torch
from rich.console import Console
from rich.text import Text

import seam
from seam.cli import _writable, main
from seam.verify import case_norm, runner
from seam.verify.core import Context


def test_bench_rejects_unknown_name(capsys):
    """A usage error, as the other CLI errors: the usage line, then "seam bench: error: ...", status 2."""
    with pytest.raises(SystemExit) as exc:
        main(["bench", "nope"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "usage: seam bench" in err and "seam bench: error: unknown benchmark 'nope'" in err


@pytest.mark.parametrize("argv, usage", [(["bench", "step", "--m", "1", "--bogus"], "usage: seam bench"),
                                         (["verify", "extra"], "usage: seam verify"),
                                         (["info", "-x"], "usage: seam info"),
                                         (["--bogus"], "usage: seam [-h]")])
def test_unknown_arguments_show_the_command_usage(capsys, argv, usage):
    """An argument no parser takes is reported with the usage of the command it was given to, not the top level's."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and usage in err and f"error: unrecognized arguments: {argv[-1]}" in err


def test_bench_dist_points_to_torchrun(capsys):
    assert main(["bench", "dist"]) == 2
    assert "torchrun --nproc-per-node N -m seam.bench.dist" in capsys.readouterr().err


def test_bench_rejects_token_counts_below_one(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["bench", "qkv", "--m", "1", "0"])
    assert exc.value.code == 2 and "seam bench: error: --m takes token counts >= 1" in capsys.readouterr().err


def test_bench_m_needs_integers(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["bench", "qkv", "--m", "one"])
    assert exc.value.code == 2 and "expected a token count, got 'one'" in capsys.readouterr().err


def test_bench_name_after_m_says_where_it_goes(capsys):
    """``--m`` takes one or more values, so a name after it is read as one: the error says to put it first."""
    with pytest.raises(SystemExit) as exc:
        main(["bench", "--m", "8", "swiglu"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "the benchmark name comes before --m: seam bench NAME --m" in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_gpu_bench_without_cuda_says_so(capsys):
    assert main(["bench", "norm", "--m", "1"]) == 2
    err = capsys.readouterr().err
    assert "needs a CUDA GPU" in err and "`seam bench step` also runs here" in err


def test_no_command_prints_the_help(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: seam") and "verify" in out


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"seam {seam.__version__}"


def _no_check_may_run(monkeypatch):
    def ran(*args):
        raise AssertionError("a check ran before the arguments were checked")

    monkeypatch.setattr(runner, "run_check", ran)


@pytest.mark.parametrize("where", ["missing/dir/out.json", "."])
def test_verify_json_that_cannot_be_written_fails_before_any_check(tmp_path, monkeypatch, capsys, where):
    _no_check_may_run(monkeypatch)
    with pytest.raises(SystemExit) as exit_:
        main(["verify", "--no-timing", "--json", str(tmp_path / where)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "argument --json: cannot write" in err and "Traceback" not in err


def test_verify_json_check_leaves_files_as_they_were(tmp_path):
    existing, new = tmp_path / "old.json", tmp_path / "new.json"
    existing.write_text("previous results")
    assert _writable(str(existing)) == str(existing) and existing.read_text() == "previous results"
    assert _writable(str(new)) == str(new) and not new.exists()


@pytest.mark.parametrize("only", ["nosuch", " "])
def test_verify_only_matching_nothing_is_a_usage_error(monkeypatch, capsys, only):
    _no_check_may_run(monkeypatch)
    with pytest.raises(SystemExit) as exit_:
        main(["verify", "--only", only, "--no-timing"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"--only {only!r} names no family and is in no op's name" in err and "families: lamport, linear" in err
    assert "Traceback" not in err


def test_verify_only_picks_a_family_or_ops_by_name_any_case():
    cases = runner.collect(Context.here())
    for path_part in ("seam", "verify", "case_"):
        with pytest.raises(ValueError, match="--only"):
            runner.select(cases, path_part)
    norm = runner.select(cases, "NORM")  # the family, not every op with "norm" in its name
    assert norm and {c.family for c in norm} == {"norm"}
    rows = runner.select(cases, "Mxfp8_Quantize[ROW")
    assert rows and {c.check.op for c in rows} == {"mxfp8_quantize[row_major]"}
    # the ops a family name leaves out, which the command line names
    assert "swiglu_oai_mxfp8" in runner.also_named(cases, runner.select(cases, "mxfp8"), "mxfp8")
    assert runner.also_named(cases, rows, "Mxfp8_Quantize[ROW") == []


def test_verify_only_repeated_runs_the_union(monkeypatch, capsys):
    """--only given twice runs both names' checks (argparse kept only the last), in the usual order."""
    picked = []
    monkeypatch.setattr(runner, "main", lambda ctx, cases, *args, **kwargs: picked.extend(cases) or 0)
    assert main(["verify", "--only", "qkv", "--only", "SwiGLU", "--only", "swiglu_oai_mxfp8", "--no-timing"]) == 0
    key = lambda c: (c.family, c.check.op, c.check.m, c.check.shape)  # noqa: E731  (each collect makes new checks)
    want = [key(c) for c in runner.collect(Context.here()) if c.family in ("qkv", "swiglu")]
    assert [key(c) for c in picked] == want and {f for f, *_ in want} == {"qkv", "swiglu"}
    _no_check_may_run(monkeypatch)
    with pytest.raises(SystemExit) as exit_:
        main(["verify", "--only", "qkv", "--only", "nosuch"])
    assert exit_.value.code == 2 and "--only 'nosuch' names no family" in capsys.readouterr().err


def test_verify_only_family_names_a_few_of_the_ops_it_leaves_out(monkeypatch, capsys):
    """--only mxfp8 runs the quantizer's family; the line naming the other ops with mxfp8 in their name shows three
    and counts the rest (it listed all 13 on one 540-character line)."""
    monkeypatch.setattr(runner, "main", lambda *args, **kwargs: 0)
    assert main(["verify", "--only", "mxfp8", "--no-timing"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("--only mxfp8:"))
    cases = runner.collect(Context.here())
    others = runner.also_named(cases, runner.select(cases, "mxfp8"), "mxfp8")
    assert len(others) > 3 and f"and {len(others) - 3} more (name one to run it)" in line and len(line) < 250


def test_verify_only_runs_the_ops_the_table_names(capsys):
    assert main(["verify", "--only", "MXFP8_QUANTIZE[row_major]", "--no-timing"]) == 0
    out = capsys.readouterr().out
    assert "mxfp8_quantize[row_major]" in out and "mxfp8_quantize[swizzled]" not in out


def _verify_norm(monkeypatch, capsys, terminal: bool) -> str:
    """The output of ``seam verify --only norm`` to a file, or to a 100-column terminal."""
    if terminal:  # rich reads these
        monkeypatch.setenv("TTY_COMPATIBLE", "1")
        monkeypatch.setenv("COLUMNS", "100")
    assert main(["verify", "--only", "norm", "--no-timing"]) == 0
    return Text.from_ansi(capsys.readouterr().out).plain  # a terminal's output has styles


@pytest.mark.parametrize("terminal", [False, True])
def test_verify_prints_a_line_per_check_as_it_finishes(monkeypatch, capsys, terminal):
    out = _verify_norm(monkeypatch, capsys, terminal)
    before_table = out[:out.index("seam verify on")]
    for c in case_norm.checks(Context.here()):
        assert f"yes  norm  {c.op}  M={c.m}  {c.shape}" in before_table


@pytest.mark.parametrize("terminal", [False, True])
def test_verify_table_groups_rows_by_op_under_its_whole_name_and_rule(monkeypatch, capsys, terminal):
    out = _verify_norm(monkeypatch, capsys, terminal)
    table = out[out.index("seam verify on"):].splitlines()
    checks = case_norm.checks(Context.here())
    ops = list(dict.fromkeys(c.op for c in checks))
    # each op name whole, once, heading its rows, in the order the case module lists them
    starts = [[i for i, line in enumerate(table) if f"│ {op}  hidden=" in line] for op in ops]
    assert all(len(s) == 1 for s in starts)
    starts = [s[0] for s in starts]
    assert starts == sorted(starts)
    for op, start, end in zip(ops, starts, starts[1:] + [len(table)]):
        group = table[start:end]
        # under the name, the rule: which outputs are bit-identical, which have a tolerance, and why
        first_column = " ".join(line.split("│")[1].strip() for line in group[1:] if line.startswith("│"))
        rule = next(c.rule for c in checks if c.op == op)  # compared without spaces: a fold may split a word
        assert "".join(first_column.split()).startswith("".join(rule.split()))
        # what is bit-identical, and for a tolerance, why the bytes may differ
        assert "bit-identical" in rule or "tolerance (reduction order and rsqrt differ)" in rule
        assert sum(bool(re.search(r"│ +\d+ │ yes +│", line)) for line in group) == sum(c.op == op for c in checks)
    if terminal:
        assert max(len(line) for line in table) <= 100


def test_table_keeps_op_names_whole_beside_gpu_timings_at_100_columns():
    rows = [
        runner.Row("norm", "gemma_fused_add_rms_norm_mxfp8[+bf16,swizzled]", m, "hidden=6144",
                   "tolerance: normed within 1 BF16 ulp", True, "normed 99.70% equal, max 1 ulp",
                   fused_us=123.45, unfused_us=234.56, gbps=3456.0, baseline="the PyTorch reference (eager)")
        for m in (1, 2048)
    ]
    console = Console(width=100, file=io.StringIO(), color_system=None)
    runner.render(rows, Context(torch.device("cpu"), full=True), console)
    table = console.file.getvalue().splitlines()
    assert sum("gemma_fused_add_rms_norm_mxfp8[+bf16,swizzled]" in line for line in table) == 1
    assert any(re.search(r"│ +2048 │ yes +│ +123\.45 │ +234\.56 │ +1\.90 │ +3456 │$", line) for line in table)
    assert max(len(line) for line in table) <= 100
    # each row says what its unfused time is of
    first_column = "".join("".join(line.split("│")[1].split()) for line in table if line.startswith("│"))
    assert first_column.count("unfused=thePyTorchreference(eager)") == 2


def test_every_timed_baseline_is_named():
    """Every case's Outcome with an unfused chain to time also names it (the table prints it beside the time)."""
    import ast
    from pathlib import Path

    import seam.verify

    named = 0
    for path in Path(seam.verify.__path__[0]).glob("case_*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Outcome":
                keywords = {k.arg: k.value for k in node.keywords}
                if "unfused" in keywords:
                    assert isinstance(keywords.get("baseline"), ast.Constant), f"{path.name}:{node.lineno}"
                    named += 1
    assert named >= 12


@pytest.mark.parametrize("bad", ["0", "-2", "two"])
def test_verify_workers_must_be_a_positive_integer(monkeypatch, capsys, bad):
    _no_check_may_run(monkeypatch)
    with pytest.raises(SystemExit) as exit_:
        main(["verify", "--no-timing", "--workers", bad])
    assert exit_.value.code == 2
    assert "argument --workers: expected an integer >= 1" in capsys.readouterr().err


def test_default_workers_one_under_the_interpreter_up_to_8_on_a_gpu(monkeypatch):
    assert runner.default_workers(Context(torch.device("cpu"), full=False)) == 1
    gpu = Context(torch.device("cuda"), full=True)
    for cores, want in ((1, 1), (16, 8), (64, 8), (6, 3)):
        monkeypatch.setattr(runner.os, "cpu_count", lambda: cores)
        assert runner.default_workers(gpu) == want


def test_verify_in_worker_processes_reports_what_one_process_does(tmp_path, capsys):
    """Spawned workers find each selected check in their own list and report the same rows, in order."""
    n = len(runner.select(runner.collect(Context.here()), "mxfp8_quantize[row"))  # 3 on the CPU, more on a GPU
    assert n >= 3
    serial, parallel = tmp_path / "serial.json", tmp_path / "parallel.json"
    assert main(["verify", "--only", "mxfp8_quantize[row", "--no-timing", "--json", str(serial)]) == 0
    assert main(["verify", "--only", "mxfp8_quantize[row", "--no-timing", "--workers", "2", "--json", str(parallel)]) == 0
    import json

    rows = [json.loads(p.read_text())["rows"] for p in (serial, parallel)]
    assert rows[0] == rows[1] and len(rows[0]) == n and all(r["meets_spec"] for r in rows[0])
    out = capsys.readouterr().out
    assert out.count("yes  mxfp8  mxfp8_quantize[row_major]  M=") == 2 * n  # a line per check, per run


def test_a_broken_worker_pool_leaves_its_checks_to_this_process(monkeypatch, capsys):
    class Broken:  # every worker dies: no result comes back
        def __init__(self, *args, **kwargs):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def submit(self, fn, *args):
            future = __import__("concurrent.futures").futures.Future()
            future.set_exception(runner.concurrent.futures.process.BrokenProcessPool("a worker died"))
            return future

    monkeypatch.setattr(runner.concurrent.futures, "ProcessPoolExecutor", Broken)
    ctx = Context.here()
    cases = runner.select(runner.collect(ctx), "mxfp8_quantize[row")
    assert runner.main(ctx, cases, timing=False, workers=4) == 0
    captured = capsys.readouterr()
    assert "BrokenProcessPool: a worker died" in captured.err
    n = len(cases)  # 3 on the CPU, more on a GPU
    assert n >= 3 and captured.out.count("yes  mxfp8  mxfp8_quantize[row_major]") == n
    assert f"{n} passed, 0 failed" in captured.out


def test_verify_times_the_smallest_and_largest_m_of_each_op_and_shape():
    """Timing every check took longer than the checks (log run 60); the table times two M per op and shape."""
    cases = runner.collect(Context.here())
    picked = runner.timed(cases)
    groups: dict[tuple, list[int]] = {}
    for i, c in enumerate(cases):
        groups.setdefault((c.family, c.check.op, c.check.shape), []).append(c.check.m)
    want = sum(1 if min(ms) == max(ms) else 2 for ms in groups.values())
    assert len(picked) == want < len(cases)
    for i in picked:
        c = cases[i]
        ms = groups[(c.family, c.check.op, c.check.shape)]
        assert c.check.m in (min(ms), max(ms))


def test_bench_m_repeated_adds_token_counts(monkeypatch):
    """``--m 1 --m 2 3`` runs 1, 2 and 3 (argparse's nargs alone kept only the last group)."""
    runs = []
    monkeypatch.setattr("seam.cli._bench", lambda name, ms: runs.append((name, ms)) or 0)
    assert main(["bench", "qkv", "--m", "1", "--m", "2", "3"]) == 0
    assert runs == [("qkv", [1, 2, 3])]


def test_bench_m_runs_each_token_count_once(monkeypatch):
    """``--m 8 1 8`` runs 8 then 1: a repeated count would only repeat its rows."""
    runs = []
    monkeypatch.setattr("seam.cli._bench", lambda name, ms: runs.append((name, ms)) or 0)
    assert main(["bench", "step", "--m", "8", "1", "--m", "8"]) == 0
    assert runs == [("step", [8, 1])]


@pytest.mark.parametrize("where", ["a file", "below a file"])
def test_bench_step_seam_out_that_cannot_be_written_fails_before_it_runs(tmp_path, monkeypatch, capsys, where):
    """$SEAM_OUT is checked before the boundaries run, not once their timings are in: one line, status 2."""
    import seam.bench.step as step

    blocker = tmp_path / "afile"
    blocker.write_text("kept")
    monkeypatch.setenv("SEAM_OUT", str(blocker if where == "a file" else blocker / "out"))
    monkeypatch.setattr(step, "run", lambda *args, **kwargs: pytest.fail("the benchmark ran"))
    assert main(["bench", "step", "--m", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("seam bench step: $SEAM_OUT: cannot make the folder") and str(blocker) in err
    assert blocker.read_text() == "kept"


def test_bench_step_makes_a_missing_seam_out_folder_first(tmp_path, monkeypatch):
    import seam.bench.step as step

    folder = tmp_path / "new" / "out"
    monkeypatch.setenv("SEAM_OUT", str(folder))
    monkeypatch.setattr(step, "run", lambda *args, **kwargs: None)
    assert main(["bench", "step", "--m", "1"]) == 0
    assert folder.is_dir()


def test_bench_step_empty_seam_out_is_the_current_folder(tmp_path, monkeypatch):
    """The benchmark writes an empty SEAM_OUT's files here (pathlib reads "" as "."): the check agrees."""
    import seam.bench.step as step

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SEAM_OUT", "")
    ran = []
    monkeypatch.setattr(step, "run", lambda *args, **kwargs: ran.append(1))
    assert main(["bench", "step", "--m", "1"]) == 0 and ran == [1]


def test_bench_where_kernels_cannot_run_says_so_in_one_line(monkeypatch, capsys):
    """As ``seam verify``: the reason, status 2, no traceback; the benchmark does not run."""
    import seam.bench.step as step
    from seam import runtime

    monkeypatch.setattr(runtime, "KERNELS_UNAVAILABLE", "TRITON_INTERPRET='0' asks for native Triton kernels")
    monkeypatch.setattr(step, "run", lambda *args, **kwargs: pytest.fail("the benchmark ran"))
    assert main(["bench", "step", "--m", "1"]) == 2
    err = capsys.readouterr().err
    assert err == "seam bench: the kernels cannot run in this process: TRITON_INTERPRET='0' asks for native " \
        "Triton kernels\n"


def test_help_is_plain_text(capsys):
    """The top-level help is read in a terminal: no reStructuredText markup from the module's docstring."""
    assert main([]) == 0
    out = capsys.readouterr().out
    assert "``" not in out and "seam COMMAND --help" in " ".join(out.split())


def test_bench_help_lists_each_benchmark_with_its_default_token_counts(capsys):
    """`seam bench --help` says what each benchmark times and which M it runs without --m (its module's MS)."""
    import importlib

    from seam.cli import _bench_names

    with pytest.raises(SystemExit) as exit_:
        main(["bench", "--help"])
    assert exit_.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "``" not in out
    for name in _bench_names():
        module = importlib.import_module(f"seam.bench.{name}")
        ms = " ".join(map(str, getattr(module, "MS", getattr(module, "MS_GPU", ()))))
        assert f" {name}: " in out and f"(default M: {ms}" in out, name


def test_bench_step_on_cpu_refuses_an_m_it_would_take_hours_on(monkeypatch, capsys):
    """Without a GPU the interpreter's time grows with M: above ``CPU_MAX_M`` one line, status 2, nothing run; at it
    the benchmark runs."""
    import torch

    import seam.bench.step as step

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(step, "run", lambda *args, **kwargs: pytest.fail("the benchmark ran"))
    assert main(["bench", "step", "--m", "1", "100000"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("seam bench step: --m 100000 on CPU") and f"M <= {step.CPU_MAX_M}" in err
    ran = []
    monkeypatch.setattr(step, "run", lambda *args, **kwargs: ran.append(kwargs["ms"]))
    assert main(["bench", "step", "--m", str(step.CPU_MAX_M)]) == 0 and ran == [(step.CPU_MAX_M,)]
