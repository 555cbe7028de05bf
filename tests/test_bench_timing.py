"""The timing helpers that need no GPU: ``fenced`` puts one launch on the given device after each call."""

import torch

from seam.bench.timing import fenced


def test_fenced_launches_after_each_call_on_its_device(monkeypatch):
    calls = []
    launches = []  # (calls made when the launch came, its tensor's device)
    real_add = torch.Tensor.add_

    def add_(self, *args, **kwargs):  # the fence's one-element add
        launches.append((len(calls), self.device.type))
        return real_add(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "add_", add_)
    call = fenced(lambda: calls.append(1), "meta")  # a sink elsewhere would not be captured with the call's kernels
    call()
    call()
    assert calls == [1, 1]
    assert launches == [(1, "meta"), (2, "meta")]
