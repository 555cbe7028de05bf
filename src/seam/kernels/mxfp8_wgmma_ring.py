"""MXFP8 x MXFP8 -> BF16 GEMM for Hopper in Gluon past decode M: weights and activations through one TMA ring.

The decode kernel (``seam.kernels.mxfp8_wgmma``) takes up to 128 tokens, one M tile per launch. Here, for
129-256 tokens on wide layers (``seam.kernels.mxfp8_gemm_config.pick_ring_tile``), every ring stage carries one
K step of both operands: the E4M3 weight tile with its scale chunk, as there, and a [MP, 128] tile of the activations already
dequantized to BF16 (``A_deq``, by ``seam.kernels.mxfp8_dequant``'s kernel one launch before this one,
so no N tile converts them again). The weight tile is dequantized in registers as in the decode kernel
(:func:`seam.kernels.mxfp8_wgmma.dequantize_weight_tile`, by BF16 multiplies where the weight allows:
``seam.kernels.wgmma_config.wgmma_bf16_mul``) and stored, BF16, into one of two shared slots:
wgmma reads both operands from shared memory, so step i + 1's conversion runs while step i's MMA does
(with the weights as a register operand ptxas waited for the MMA before converting the next tile:
``WARPGROUP.DEPBAR`` ahead of the conversion in the sm_90 SASS). That made its tiles of the time 10-20%
faster (log run 58, H200, us, register A -> shared A: N 2560 x K 6144 M 65 27.00 -> 22.13, M 128 29.77
-> 23.68; N 4992 x 6144 35.56 -> 31.99, 37.66 -> 32.18; N 6144 x 2048 24.26 -> 21.17, 25.19 -> 21.19).
(At 65-128 tokens the decode kernel's register-operand tile, streaming its activations, has since been faster
still: ``docs/benchmarks-log.md`` runs 176-177.) Swap AB as there: weight rows on the MMA's 64-row side, MP = 256
tokens on its N side, one program per (N tile, M tile, K split).

The weight copies of the first ring stages are issued before the PDL wait (they do not depend on the
previous kernel), the activation copies after it. A stage is refilled once both warpgroups' MMAs on it
have completed. Split-K partials are stored and combined as in the decode kernel
(:func:`seam.kernels.wgmma_combine.store_tile`), so every run gives the same bytes.

The products are exact (E4M3 x E4M3 with power-of-two scales, in BF16) and accumulate in fp32, so the
output equals the other paths' up to fp32 summation order. Gluon: compiles for sm_90 anywhere, runs
only on a Hopper GPU (``tests/test_mxfp8_wgmma_ring.py``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from seam.kernels.mxfp8_dequant import dequantized_activations
from seam.kernels.mxfp8_wgmma import (
    BLOCK_K,
    BLOCK_N,
    NUM_WARPS,
    WEIGHT_LAYOUT,
    WEIGHT_SCALE_LAYOUT,
    dequantize_weight_tile,
    scale_descriptor,
    tile_layout,
)
from seam.kernels.wgmma_combine import check_combiners, store_tile


def stage_bytes(block_m: int) -> int:
    """Shared bytes of one ring stage: the E4M3 weight tile, its scale chunk, the BF16 activation tile."""
    return BLOCK_N.value * BLOCK_K.value + 512 + block_m * BLOCK_K.value * 2


#: Shallowest ring: a stage is refilled only after the MMA that reads it, so step i + 1 must already be
#: in another stage (one stage would wait for a copy not yet issued).
MIN_STAGES = 2


#: Shared memory a program may use: sm_90's opt-in maximum per block (227 KB) less 1 KB (Triton asked for
#: 32 bytes beyond the buffers in run 58's compile errors). Two 256-token stages need 225 KB.
SHARED_BUDGET = 226 * 1024


def max_stages(block_m: int) -> int:
    """Deepest ring that fits :data:`SHARED_BUDGET` beside the two BF16 weight slots."""
    return (SHARED_BUDGET - 2 * BLOCK_N.value * BLOCK_K.value * 2) // (stage_bytes(block_m) + 8)


@gluon.jit
def _issue_weights(w_desc, s_desc, a_desc, w_ring, s_ring, bars, stage, step, n0, K_STEPS: gl.constexpr, pred):
    """The barrier's expected bytes (the whole stage) and the TMA copies of step ``step``'s weights."""
    bar = bars.index(stage)
    mbarrier.expect(bar, w_desc.block_type.nbytes + s_desc.block_type.nbytes + a_desc.block_type.nbytes,
                    pred=pred)
    tma.async_copy_global_to_shared(w_desc, [n0, step * 128], bar, w_ring.index(stage), pred=pred)
    tma.async_copy_global_to_shared(s_desc, [((n0 // 128) * K_STEPS + step) * 32, 0], bar, s_ring.index(stage),
                                    pred=pred)


@gluon.jit
def _issue_activations(a_desc, a_ring, bars, stage, step, m0, pred):
    tma.async_copy_global_to_shared(a_desc, [m0, step * 128], bars.index(stage), a_ring.index(stage), pred=pred)


@gluon.jit
def _stage_weights(w_ring, s_ring, bars, w_bf16, i, n_steps, STAGES: gl.constexpr, BF16_MUL: gl.constexpr):
    """Step i's weight tile, once its ring stage has landed, dequantized to BF16 into ``w_bf16`` slot i % 2
    (wgmma's shared A operand; K in natural order). The ring stage is refilled only after the step's MMAs."""
    stage = i % STAGES
    mbarrier.wait(bars.index(stage), (i // STAGES) & 1, pred=i < n_steps)
    w = w_ring.index(stage).load(WEIGHT_LAYOUT)
    sc = s_ring.index(stage).load(WEIGHT_SCALE_LAYOUT)
    w_bf16.index(i % 2).store(dequantize_weight_tile(w, sc, BF16_MUL))


@gluon.jit(do_not_specialize=["M"])
def mxfp8_linear_wgmma_ring_kernel(
    # TMA descriptors
    w_desc,  # E4M3 weights as uint8 [N, K], block [BLOCK_N, BLOCK_K]
    s_desc,  # swizzled weight scales as uint8 [N_pad * K / 4096, 16], block [32, 16] (one 128x4 chunk)
    a_desc,  # A_deq, BF16 [M, K], block [MP, BLOCK_K]
    # pointers
    out_ptr,  # bf16 [M, N], row stride stride_om (fp32 partials only with PARTIALS)
    ws_ptr,  # fp32 split-K workspace [tiles, SPLIT_K, MP, BLOCK_N]
    counter_ptr,  # int32 [tiles] arrival counters, zero between launches
    # sizes
    M,
    N,
    stride_om,
    # constexprs
    K: gl.constexpr,
    MP: gl.constexpr,  # tokens per program (256 as picked)
    SPLIT_K: gl.constexpr,
    STAGES: gl.constexpr,
    USE_PDL: gl.constexpr,
    COMBINE: gl.constexpr,  # split-K partials loaded per round trip by the combining program
    COMBINERS: gl.constexpr,  # programs of a tile that combine its partials (store_tile)
    PARTIALS: gl.constexpr,  # only store each program's partial
    BF16_MUL: gl.constexpr,  # weights dequantized by BF16 multiplies (mxfp8_wgmma.bf16_mul_exact)
    num_warps: gl.constexpr,
):
    BN: gl.constexpr = 16 * num_warps
    K_STEPS: gl.constexpr = K // BLOCK_K
    pid = gl.program_id(0)
    tile = pid // SPLIT_K
    kid = pid % SPLIT_K
    n_tiles = gl.cdiv(N, BN)
    n0 = (tile % n_tiles) * BN  # N tiles fastest: programs resident together share their activation tiles
    m0 = (tile // n_tiles) * MP
    lo = kid * K_STEPS // SPLIT_K
    n_steps = (kid + 1) * K_STEPS // SPLIT_K - lo

    w_ring = gl.allocate_shared_memory(gl.uint8, [STAGES, BN, BLOCK_K], w_desc.layout)
    s_ring = gl.allocate_shared_memory(gl.uint8, [STAGES, 32, 16], s_desc.layout)
    a_ring = gl.allocate_shared_memory(gl.bfloat16, [STAGES, MP, BLOCK_K], a_desc.layout)
    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(bars.index(s), count=1)
    gl.thread_barrier()
    for s in gl.static_range(STAGES):  # the weights first: they do not depend on the previous kernel (PDL)
        _issue_weights(w_desc, s_desc, a_desc, w_ring, s_ring, bars, s, lo + s, n0, K_STEPS, s < n_steps)
    if USE_PDL:
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    for s in gl.static_range(STAGES):
        _issue_activations(a_desc, a_ring, bars, s, lo + s, m0, s < n_steps)

    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                  instr_shape=[16, MP, 16])
    acc = gl.zeros([BN, MP], gl.float32, mma)
    # Software-pipelined: the MMA of step i runs while step i + 1's weights are converted into the other
    # BF16 slot. Both operands come from shared memory: with the weights as a register operand, ptxas
    # waited for the MMA before the next conversion (sm_90 SASS: WARPGROUP.DEPBAR ahead of it).
    w_bf16 = gl.allocate_shared_memory(gl.bfloat16, [2, BN, BLOCK_K],
                                       gl.NVMMASharedLayout.get_default_for([BN, BLOCK_K], gl.bfloat16))
    _stage_weights(w_ring, s_ring, bars, w_bf16, 0, n_steps, STAGES, BF16_MUL)
    fence_async_shared()
    gl.thread_barrier()
    for i in range(n_steps):
        stage = i % STAGES
        acc = warpgroup_mma(w_bf16.index(i % 2), a_ring.index(stage).permute((1, 0)), acc, is_async=True)
        if i + 1 < n_steps:  # its slot was read by the MMA of step i - 1, waited for below
            _stage_weights(w_ring, s_ring, bars, w_bf16, i + 1, n_steps, STAGES, BF16_MUL)
        # Each thread orders its BF16 stores and its ring loads before the async proxy's next MMA and
        # refill; the barrier then covers every warp, and both warpgroups' MMAs on the stage.
        fence_async_shared()
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        gl.thread_barrier()
        if i + STAGES < n_steps:
            _issue_weights(w_desc, s_desc, a_desc, w_ring, s_ring, bars, stage, lo + i + STAGES, n0, K_STEPS, True)
            _issue_activations(a_desc, a_ring, bars, stage, lo + i + STAGES, m0, True)
    store_tile(acc, acc, out_ptr, ws_ptr, counter_ptr, tile, kid, n0, m0, M, N, stride_om, BN, MP, 0, SPLIT_K,
               COMBINE, PARTIALS, COMBINERS, num_warps)


def launch_mxfp8_linear_wgmma_ring(
    xq: torch.Tensor, xs: torch.Tensor | None, wq: torch.Tensor, ws: torch.Tensor, out: torch.Tensor,
    block_m: int, split_k: int, stages: int, work: torch.Tensor, counters: torch.Tensor, use_pdl: bool,
    combine: int, *, partials: bool = False, combiners: int, bf16_mul: bool = False,
) -> None:
    """out[M, N] = bf16(A_deq @ W_deq^T) on a Hopper GPU for validated operands that TMA reads as is
    (``seam.kernels.mxfp8_wgmma.tma_ready``; ``xs`` None: ``xq`` is BF16). ``block_m``: tokens per program
    (256); :data:`MIN_STAGES` <= ``stages`` <= :func:`max_stages`; ``work`` / ``counters``: the split-K scratch
    for cdiv(N, 128) * cdiv(M, block_m) tiles (unused at ``split_k`` 1); ``partials``: store each
    program's fp32 partial in ``work`` only; ``combiners``: programs per tile that combine its partials
    (``seam.kernels.wgmma_config.wgmma_combiners``). The activations are read from a BF16 copy in natural K order
    written by the dequantization launch first (not A_deq's order: ``seam.formats.a_deq``). Temporary memory:
    2 * M * K bytes. ``bf16_mul``: dequantize the weight tiles by
    BF16 multiplies, for a weight ``seam.kernels.mxfp8_wgmma.bf16_mul_exact`` accepts.

    Raises:
        ValueError: ``combiners`` out of range (``seam.kernels.wgmma_combine.check_combiners``)."""
    check_combiners(combiners, split_k)
    m, k = xq.shape
    n = wq.shape[0]
    a = dequantized_activations(xq, xs)
    bk = BLOCK_K.value
    w_desc = TensorDescriptor.from_tensor(wq.view(torch.uint8), [BLOCK_N.value, bk], tile_layout(BLOCK_N.value, False))
    a_desc = TensorDescriptor.from_tensor(a, [block_m, bk], tile_layout(block_m, True))
    grid = (triton.cdiv(n, BLOCK_N.value) * triton.cdiv(m, block_m) * split_k,)
    mxfp8_linear_wgmma_ring_kernel[grid](
        w_desc, scale_descriptor(ws), a_desc, out, work, counters, m, n, out.stride(0),
        K=k, MP=block_m, SPLIT_K=split_k, STAGES=stages, USE_PDL=use_pdl, COMBINE=combine, PARTIALS=partials,
        COMBINERS=combiners, BF16_MUL=bf16_mul, num_warps=NUM_WARPS, launch_pdl=use_pdl,
    )
