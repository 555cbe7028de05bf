"""The Gluon decode kernel's split-K partials summed by a launch of their own (``mxfp8_linear`` where
``seam.kernels.wgmma_config.wgmma_combines_apart`` says): out = bf16(sum of the partials in split order from
+0.0), the sums and the bytes the kernel's own combine (``seam.kernels.wgmma_combine``) makes. The decode kernel
then stores its partials and ends; no program waits at the end for the tile's last arrival."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from seam.kernels.numerics import to_bf16_rne


@triton.jit
def split_k_sum_kernel(part_ptr, out_ptr, N, stride_om, SPLIT_K: tl.constexpr, MP: tl.constexpr,
                       BN: tl.constexpr, USE_PDL: tl.constexpr):
    """One program per (N tile, token): out[m, tile * BN ..] from the partials [tiles, SPLIT_K, MP, BN]."""
    if USE_PDL:  # the next kernel may stream its weights now; the partials are complete only past the wait
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    tile = tl.program_id(0)
    m = tl.program_id(1)
    cols = tl.arange(0, BN)
    n = tile * BN + cols
    src = part_ptr + (tile.to(tl.int64) * (SPLIT_K * MP) + m) * BN + cols
    total = tl.zeros((BN,), tl.float32)  # +0.0, as the kernel's own combine starts
    for s in tl.static_range(SPLIT_K):  # loads at L2, where the partials landed
        total += tl.load(src + s * (MP * BN), mask=n < N, other=0.0, cache_modifier=".cg")
    tl.store(out_ptr + m.to(tl.int64) * stride_om + n, to_bf16_rne(total), mask=n < N)


def launch_split_k_sum(partials: torch.Tensor, out: torch.Tensor, use_pdl: bool) -> None:
    """out[M, N] (BF16, unit column stride) = the sums of ``partials`` (fp32 [ceil(N / BN), split_k, MP, BN]
    contiguous, MP >= M: the decode kernel's, ``seam.kernels.gluon_launch.launch_gluon(..., partials=True)``) over
    the splits, in split order from +0.0, rounded once to BF16. Rows past M and columns past N of the partials are
    not read; ``use_pdl``: launched as a PDL dependent of the kernel that wrote them."""
    m, n = out.shape
    tiles, split_k, mp, bn = partials.shape
    if tiles != triton.cdiv(n, bn) or mp < m or not partials.is_contiguous() or out.stride(1) != 1:
        raise ValueError(f"partials {tuple(partials.shape)} (contiguous: {partials.is_contiguous()}) do not cover "
                         f"out {tuple(out.shape)} with unit column stride")
    split_k_sum_kernel[(tiles, m)](partials, out, n, out.stride(0), SPLIT_K=split_k, MP=mp, BN=bn, USE_PDL=use_pdl,
                                   num_warps=4, launch_pdl=use_pdl)
