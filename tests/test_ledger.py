"""Simulated groups refuse, on the host, the call sequences that would make a consumer spin forever."""

import pytest
import torch

import seam

H = 128


def _ar(device, tp=2, debug=False):
    return seam.LamportAllReduce(hidden_size=H, max_num_tokens=8, group=seam.SimulatedGroup(tp, device), debug=debug)


def test_collect_before_every_rank_published(device):
    ar = _ar(device)
    ar.publish(torch.randn(2, H, device=device).bfloat16(), rank=0)
    with pytest.raises(ValueError, match=r"ranks \[1\] have not published this call"):
        ar.collect(rank=0)
    ar.publish(torch.randn(2, H, device=device).bfloat16(), rank=1)  # the call can still complete
    ar.collect(rank=0)
    ar.collect(rank=1)


def test_ranks_publish_different_m(device):
    ar = _ar(device)
    ar.publish(torch.randn(2, H, device=device).bfloat16(), rank=0)
    with pytest.raises(ValueError, match="publishes M=3, but this call's other ranks published M=2"):
        ar.publish(torch.randn(3, H, device=device).bfloat16(), rank=1)


def test_new_call_before_every_rank_collected(device):
    ar = _ar(device)
    x = torch.randn(2, H, device=device).bfloat16()
    ar.publish(x, rank=0)
    ar.publish(x, rank=1)
    ar.collect(rank=0)
    with pytest.raises(ValueError, match=r"ranks \[1\] have not collected the last one"):
        ar.publish(x, rank=0)
    ar.collect(rank=1)
    ar.publish(x, rank=0)  # now a new call may start


def test_messages_name_the_step_in_its_tense():
    from seam.comm.ledger import CallLedger

    for verb, done in (("collect", "collected"), ("consume", "consumed")):
        ledger = CallLedger(2, True, verb)
        ledger.published(0, 2)
        with pytest.raises(ValueError, match=rf"rank 0 already published 2 rows that were not {done}; run its {verb}"):
            ledger.check_publish(0, 2)


def test_mhc_consume_before_every_rank_published(device):
    op = seam.AllReduceMHC(hidden_size=H, hc_mult=1, max_num_tokens=4, top_k=1, group=seam.SimulatedGroup(2, device),
                           residual_only=True)
    op.publish(torch.randn(1, H, device=device).bfloat16(), rank=1)
    residual = torch.randn(1, 1, H, device=device).bfloat16()
    post = torch.ones(1, 1, device=device)
    comb = torch.ones(1, 1, 1, device=device)
    with pytest.raises(ValueError, match=r"ranks \[0\] have not published this call: rank 1's consume"):
        op.consume(residual, post, comb, None, None, 1e-6, rank=1)


def test_construction_limits(device):
    group = seam.SimulatedGroup(2, device)
    with pytest.raises(ValueError, match=r"hidden_size=32768 is outside \[32, 16384\]"):
        seam.LamportAllReduce(hidden_size=32768, max_num_tokens=1, group=group)
    with pytest.raises(ValueError, match="spin_limit"):
        seam.LamportAllReduce(hidden_size=H, max_num_tokens=1, group=group, spin_limit=2**31)
    with pytest.raises(ValueError, match="spin_limit"):
        seam.AllReduceMHC(hidden_size=H, hc_mult=1, max_num_tokens=1, top_k=1, group=group, spin_limit=2**31)
    with pytest.raises(TypeError, match="debug must be a bool"):
        seam.AllReduceMHC(hidden_size=H, hc_mult=1, max_num_tokens=1, top_k=1, group=group, debug="no")
    op = seam.AllReduceMHC(hidden_size=H, hc_mult=1, max_num_tokens=1, top_k=1, group=group, device=device.type)
    assert op.device == group.device  # "cuda" names the group's "cuda:0"
