"""The ``seam`` command line: argument errors are reported before anything runs."""

from __future__ import annotations

import pytest

from seam.cli import main


def test_bench_rejects_unknown_name(capsys):
    assert main(["bench", "nope"]) == 2
    assert "unknown benchmark 'nope'" in capsys.readouterr().err


def test_bench_rejects_token_counts_below_one(capsys):
    assert main(["bench", "qkv", "--m", "1", "0"]) == 2
    assert "--m takes token counts >= 1" in capsys.readouterr().err


def test_bench_m_needs_integers():
    with pytest.raises(SystemExit):
        main(["bench", "qkv", "--m", "one"])
