"""``seam bench lamport``'s memory floor: the bytes it counts are the bench's own tensors."""

from __future__ import annotations

import torch

import seam
from seam.bench import lamport


def test_floor_bytes_are_the_benchs_tensors(device):
    """Per rank: the MoE output the bench builds (its tensors' sizes), the residual and norm weight read,
    residual_out and the MXFP8 values and scales written, and the BF16 contribution written into tp
    mailboxes and tp of them read back; times tp."""
    for m, tp in ((1, 2), (8, 4), (130, 8)):
        moe = lamport._moe(m, seed=0, dev=device)
        routed = moe.routed
        moe_bytes = sum(t.nbytes for t in (routed.gemm2_permuted, routed.expert_weights,
                                           routed.expanded_idx_to_permuted_idx, moe.shared_output))
        values, scales = seam.mxfp8_quantize(torch.zeros(m, lamport.HIDDEN, dtype=torch.bfloat16, device=device))
        residual = torch.empty(m, lamport.HIDDEN, dtype=torch.bfloat16)
        per_rank = (moe_bytes + 2 * residual.nbytes + 2 * lamport.HIDDEN + values.nbytes + scales.nbytes
                    + 2 * tp * residual.nbytes)
        assert lamport.bytes_moved(m, tp) == tp * per_rank
