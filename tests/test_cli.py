"""The ``seam`` command line: argument errors are reported before anything runs."""

from __future__ import annotations

import pytest
import torch

from seam.cli import main


def test_bench_rejects_unknown_name(capsys):
    assert main(["bench", "nope"]) == 2
    assert "unknown benchmark 'nope'" in capsys.readouterr().err


def test_bench_dist_points_to_torchrun(capsys):
    assert main(["bench", "dist"]) == 2
    assert "torchrun --nproc-per-node N -m seam.bench.dist" in capsys.readouterr().err


def test_bench_rejects_token_counts_below_one(capsys):
    assert main(["bench", "qkv", "--m", "1", "0"]) == 2
    assert "--m takes token counts >= 1" in capsys.readouterr().err


def test_bench_m_needs_integers():
    with pytest.raises(SystemExit):
        main(["bench", "qkv", "--m", "one"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_gpu_bench_without_cuda_says_so(capsys):
    assert main(["bench", "norm", "--m", "1"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


def test_verify_only_matching_nothing_says_so(capsys):
    assert main(["verify", "--only", "nosuch", "--no-timing"]) == 1
    assert "no verify case matches --only 'nosuch'" in capsys.readouterr().out


def test_verify_only_matches_case_names_not_module_paths():
    from seam.verify.runner import collect
    from seam.verify.core import Context

    ctx = Context.here()
    for path_part in ("seam", "verify", "case_"):
        assert collect(ctx, path_part) == []
    assert collect(ctx, "swiglu") and all("swiglu" in c.op for c in collect(ctx, "swiglu"))

