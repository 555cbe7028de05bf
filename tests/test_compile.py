"""torch.compile(fullgraph=True) traces through seam's ops, out= buffers and the Lamport all-reduce."""

import torch

import seam
from seam.verify.core import bytes_equal


def setup_function():
    torch.manual_seed(0)


def _compile(fn, device):
    return torch.compile(fn, backend="inductor" if device.type == "cuda" else "aot_eager", fullgraph=True)


def test_fullgraph_all_reduce_simulated_tp1(device):
    ar = seam.LamportAllReduce(hidden_size=128, max_num_tokens=4, group=seam.SimulatedGroup(1, device))
    x = torch.randn(2, 128, device=device).bfloat16()
    assert bytes_equal(_compile(lambda t: seam.all_reduce(t, ar), device)(x), x)  # one rank: the sum is x


def test_fullgraph_out_buffers(device):
    x = torch.randn(3, 128, device=device).bfloat16()
    r = torch.randn(3, 128, device=device).bfloat16()
    w = torch.randn(128, device=device).bfloat16()
    v = torch.empty(3, 128, dtype=torch.float8_e4m3fn, device=device)
    s = torch.empty(seam.mxfp8_scale_numel(3, 128), dtype=torch.uint8, device=device)
    ro = torch.empty_like(x)

    def chain(x, r):
        return seam.gemma_fused_add_rms_norm_mxfp8(x, r, w, 1e-6, out=(v, s, ro))

    _compile(chain, device)(x, r)
    want = seam.gemma_fused_add_rms_norm_mxfp8(x, r, w, 1e-6)
    assert bytes_equal(v, want[0]) and bytes_equal(s, want[1]) and bytes_equal(ro, want[2])
