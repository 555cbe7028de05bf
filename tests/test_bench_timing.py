"""The timing helpers that need no GPU: ``fenced`` puts one launch after each call."""

import torch

from seam.bench.timing import fenced


def test_fenced_launches_after_each_call(monkeypatch):
    calls = []
    launches = []  # the calls made when each launch came
    real_add = torch.Tensor.add_

    def add_(self, *args, **kwargs):
        launches.append(len(calls))
        return real_add(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "add_", add_)
    call = fenced(lambda: calls.append(1), "cpu")
    call()
    call()
    assert calls == [1, 1]
    assert launches == [1, 2]
