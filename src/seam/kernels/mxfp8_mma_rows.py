"""MXFP8 x MXFP8 -> BF16 decode GEMM for Hopper in Gluon on 16-row programs: no split-K, no combine.

The decode kernel (:mod:`seam.kernels.mxfp8_wgmma`) puts 128 weight rows on each program (``wgmma`` takes 64 a
warpgroup) and so must split K over programs to fill the SMs, then sum the partials through a workspace, an arrival
counter and a last program: 1.6-1.7 us of its time at 8 tokens, 3.2 at 64 (``docs/benchmarks-log.md`` run 66). At
1-8 tokens this kernel runs instead where it wins: each program owns 16 weight rows and the whole K, N / 16 programs
(384 at N 6144). At 9-16 tokens it runs a 16-token tile (two n8 MMA tiles a program) at K 512-768 where its programs
number at most 1.5 an SM (``seam.kernels.wgmma_config.MMA_ROWS_TOKENS16_MAX_WAVE``; H100, log run 314: N 2048 x K 768
after SwiGLU + MXFP8 4.15-4.27 us against the decode kernel's 5.10-5.13; 2.9 an SM lost there, N 6144: 6.18-6.41
against 4.74-5.56).

* **The warps split K, inside the program.** Warp w takes K steps [w * SPW, (w + 1) * SPW) of 128 columns and runs
  ``mma.sync`` m16n8k16 on them: one batched MMA, [W, 16, 128] x [W, 128, 8 or 16], the batch on the warps. At the end
  ``gl.sum`` over the batch adds the W partials in one fixed order, in registers and shared memory: the same bytes
  every run.
* **The weight strip is requested first.** Every step's [W, 16, 128] E4M3 box (a 4-D TMA view in which the batch is
  the warp's K range) goes out before the PDL wait, one barrier each, and so does the gather of the strip's scale
  bytes from the 128x4 swizzle: nothing there depends on the previous kernel.
* **Both operands in registers, in the decode kernel's K permutation.** Each thread loads 32 contiguous bytes of two
  weight rows and of one token's MXFP8 row per step (one block each, so one scale), dequantizes them to BF16 (the
  weight through fp32 or, where the weight's bytes allow, one BF16 multiply per pair; the activations through
  fp32), and relabels them as the MMA's A and B operands (:func:`k_permute`): the relabelling moves no data
  (``convert_layout(..., assert_trivial=True)``) and keeps every product ``A_deq[m, k] * W_deq[n, k]``.
* **The activations in one round trip after the wait** (at most 16 x K bytes): every step's loads go out at once,
  into registers (:func:`stages_activations`: 63-108 a thread, 88 at K 6144, 108 at K 4096), or at K 3072 into
  shared memory, read back step by step. One load per step, each waited for in turn, made the chains 1-2 us slower
  (log runs 266 and 284).

The products are those of the other Hopper paths (exact BF16 products, fp32 sums), so the output equals theirs up to
fp32 summation order and is bit-identical where the sums are exact (``tests/test_mxfp8_mma_rows.py``).

H100 (2026-12-06, ``docs/benchmarks-log.md`` runs 267-270, MXFP8 rows, weights past L2, us, this kernel / the decode
kernel's tile): N 6144 x K 768 alone M 1 3.04 / 4.56, M 8 3.42 / 4.26; after its SwiGLU + MXFP8 producer (PDL, no A_deq
/ the decode kernel reading the producer's A_deq) 4.38 / 4.68 and 4.32 / 4.78 (loading each step's activations in turn
after the wait had made that chain 1.0-1.41x slower, run 266). Alone it was faster at 99 of 100 points at K 256-1536, N
256-7168, M 1-8; after a producer at K 512-768 but not at K 1024-2048 (after a norm 1.07-1.17x slower at 12 of 15 points
at K 1024-1536), and again at K 3072, 4096 and 6144 from 2 tokens where its programs fit one wave (run 278, its
activations then staged, after a norm + MXFP8 of hidden K: N 1536 x K 6144 9.35 / 10.12 at 2 tokens, 10.42 / 10.93 at 8;
in registers, run 286: 9.35 / 10.05 and 9.62 / 10.94; there the decode kernel's split-K
combine costs more than this kernel's long strip): :func:`seam.kernels.wgmma_config.mma_rows_k` and
:func:`seam.kernels.mxfp8_gemm_config.pick_mma_rows_tile` say where it runs. Wherever its programs need a second wave of
the SMs it loses (N 2560 x K 6144 at 8 warps 10.17 / 8.70 at one token, run 276: one program of 170 KB per SM, its
activations then staged). With them in registers two programs of 102 KB share an SM at K 6144, and one wave of them
there beat the decode kernel after the norm at 1-2 tokens but not at 8 (run 286, N 2560: 9.26 / 11.53, 9.62 / 10.39,
11.92 / 10.65; N 3072 and 4096 lost at 8 tokens too, run 285), so its wave stays one program an SM at K 6144.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import mma_v2
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from seam.kernels.numerics import e4m3_scaled_bf16, e4m3_to_f32, swizzled_scale_offset, to_bf16_rne, ue8m0_to_f32

#: Weight rows per program: the M side of ``mma.sync`` m16n8k16.
BLOCK_N = gl.constexpr(16)
#: Tokens per program, its N side: one or two n8 tiles of ``mma.sync`` (``block_m_for``).
BLOCK_MS = (8, 16)
#: K columns per step: four MXFP8 blocks, one 32-byte block per thread and row.
STEP = gl.constexpr(128)


def block_m_for(m: int) -> int:
    """The token tile of M tokens: the fewest of :data:`BLOCK_MS` that hold them.

    Raises:
        ValueError: M above the largest."""
    if m > BLOCK_MS[-1]:
        raise ValueError(f"M={m} exceeds {BLOCK_MS[-1]}: the 16-row kernel runs one token tile")
    return next(b for b in BLOCK_MS if m <= b)


def warps_for(k: int) -> int:
    """Warps of a program at K: 8 where K's 128-column steps are more than 32 and split 8 ways, 4 where they are more
    than 8 and split 4 ways, else 2 where they split evenly, else 1. H100 (2026-12-06, ``docs/benchmarks-log.md`` runs
    268-269, N 256-7168, M 1 / 2 / 8, us): 4 warps were 0.02-1.4 us slower than 2 at K 512 on 8 tokens and at N 3072 x
    K 1024 (4.32-5.16 against 2.81-2.84), 0.1-3 us faster at K 1536 and 2048; 8 warps were 1.2-3.3 us slower than 4 at
    K 1024 on 2 and 8 tokens. Run 277 (N 512-4096, M 1 / 8, alone and after a norm): 8 warps faster than 4 at K 6144
    and 7168 at 29 of 32 points (N 1536 x K 6144 alone 5.87 / 6.81, 6.52 / 7.10), slower at K 3072 at 13 of 16, even
    at K 4096 (faster at 9 of 16; summed after the norm 73.0 against 73.6 us, alone 51.9 against 50.8); 16 warps
    slower than 8 at every point."""
    steps = k // STEP.value
    if steps > 32 and steps % 8 == 0:
        return 8
    if steps > 8 and steps % 4 == 0:
        return 4
    return 2 if steps % 2 == 0 else 1


#: K at which the activations are staged in shared memory (:func:`stages_activations`): measured slower in registers
#: after the norm there, for a reason not found (K 4096 on the same 4 warps, and K 6144's 6 steps a warp on 8, won).
STAGED_KS = (3072,)
#: Most K steps a warp holds the activations of in registers, counted in 8-token tiles (32 E4M3 bytes and a scale byte
#: a thread a step and tile): 88 registers a thread at 6 steps (K 6144), 102-111 at 7-8 (K 4096, 7168, 8192), 79-86 at
#: 2-3 steps of the 16-token tile (K 512, 768), none spilled (sm_90 compile, ``tests/test_mxfp8_mma_rows.py``); 12
#: steps took 144, 16 tokens at K 4096 (8 steps of 2 tiles) 178.
REGISTER_STEPS = 8


def stages_activations(k: int, warps: int | None = None, block_m: int = 8) -> bool:
    """Whether a program at K on ``warps`` warps (None: :func:`warps_for`) and ``block_m`` tokens stages its
    activations in shared memory (K in :data:`STAGED_KS`, or more than :data:`REGISTER_STEPS` steps of 8 tokens a warp)
    rather than holding every step's in registers. H100 (2026-12-06, ``docs/benchmarks-log.md`` run 286, three alternations, medians, us,
    staged / registers, after the producer: norm + MXFP8 of hidden K, or SwiGLU + MXFP8 at K <= 768): N 1536 x K 6144
    9.93 / 9.35 at 2 tokens, 10.49 / 9.62 at 8; N 2048 x K 4096 9.71 / 9.58, 10.10 / 9.76; N 6144 x K 768 4.33 / 4.29
    at one token, 4.41 / 4.33 at 8; N 3072 x K 512 within 0.03; but N 2048 x K 3072 8.09 / 8.73 and 8.38 / 9.29
    (alone 4.02 / 4.07; 4 warps, 6 steps a warp as at K 6144 on 8; cause not found; run 287 on the kernel as landed:
    8.08 / 8.80 and 8.26 / 9.20, on 8 warps in registers 9.96 / 10.29). In run 286 the staged variant ran its step
    loop unrolled, as the registers do; the landed one keeps a loop. The MiniMax decode step (gate_up N 1536 x K 6144,
    down N 6144 x K 768; run 287, 4 alternations, staged / as launched) at 8 tokens 70.06 / 67.36 us per rank, at 2
    63.75 / 62.91, at one token 57.59 / 57.49 (where only the down projection runs here). Registers also
    leave two programs an SM at K 6144, but one wave of them lost at 8 tokens after the norm (N 2560 11.92 against
    the decode kernel's 10.65): ``seam.kernels.wgmma_config.MMA_ROWS_LONG_PER_SM``."""
    tiles = block_m // 8
    return k in STAGED_KS or k // STEP.value // (warps or warps_for(k)) * tiles > REGISTER_STEPS


def shared_bytes(k: int, acts_staged: bool | None = None, block_m: int = 8) -> int:
    """Shared memory of a program at K on ``block_m`` tokens: the E4M3 strip (16 K), the strip's scale bytes and,
    where it stages them (``acts_staged``; None: :func:`stages_activations`), the activations and their scales (each
    over SPW rounded up to a power of two steps), and the barriers."""
    if acts_staged is None:
        acts_staged = stages_activations(k, block_m=block_m)
    warps = warps_for(k)
    spw = k // STEP.value // warps
    padded = 1 << (spw - 1).bit_length()
    acts = padded * warps * block_m * (STEP.value + 4) if acts_staged else 0
    return BLOCK_N.value * k + acts + padded * warps * BLOCK_N.value * 4 + 8 * spw


#: An SM's shared memory (sm_90: 228 KiB, 1 KiB of it reserved per resident program) and registers.
SM_SHARED = 228 * 1024
SM_REGISTERS = 64 * 1024
#: Most registers a thread takes at any K the rule picks (``tests/test_mxfp8_mma_rows.py`` compiles each).
MAX_REGISTERS = 128


def programs_per_sm(k: int, block_m: int = 8) -> int:
    """Programs at K on ``block_m`` tokens, as launched, that one SM holds at once: its shared memory
    (:func:`shared_bytes`), its registers at :data:`MAX_REGISTERS` a thread, and Hopper's 32 resident blocks."""
    threads = 32 * warps_for(k)
    return min(SM_SHARED // (shared_bytes(k, block_m=block_m) + 1024), SM_REGISTERS // (MAX_REGISTERS * threads), 32)


def _linear_layout(w: int, reg_bases, lane_bases, shape) -> gl.DistributedLinearLayout:
    return gl.DistributedLinearLayout(reg_bases=reg_bases, lane_bases=lane_bases,
                                      warp_bases=[[1 << b, 0, 0] for b in range(w.bit_length() - 1)],
                                      block_bases=[], shape=shape)


def weight_layout(w: int) -> gl.DistributedLinearLayout:
    """Registers of a [W, 16, 128] E4M3 step: warp w holds batch w, lane 4q + j rows q and q + 8, bytes
    [32j, 32j + 32)."""
    return _linear_layout(w, [[0, 0, 1], [0, 0, 2], [0, 0, 4], [0, 0, 8], [0, 0, 16], [0, 8, 0]],
                          [[0, 0, 32], [0, 0, 64], [0, 1, 0], [0, 2, 0], [0, 4, 0]], [w, 16, STEP.value])


def activation_layout(w: int, block_m: int = 8) -> gl.DistributedLinearLayout:
    """Registers of a [W, 128, block_m] E4M3 step of the tokens: warp w holds batch w, lane 4n + j token n (and n + 8
    on 16 tokens, after its 32 bytes: each token's block stays one 32-byte run), bytes [32j, 32j + 32)."""
    tokens = [[0, 0, 8]] if block_m == 16 else []
    return _linear_layout(w, [[0, 1, 0], [0, 2, 0], [0, 4, 0], [0, 8, 0], [0, 16, 0], *tokens],
                          [[0, 32, 0], [0, 64, 0], [0, 0, 1], [0, 0, 2], [0, 0, 4]], [w, STEP.value, block_m])


@gluon.jit
def k_permute(t, K_DIM: gl.constexpr):
    """Relabel the 128 columns of dimension ``K_DIM`` (1 or 2) of a 3-D step: 32j + 4c + 2h + i moves to
    16c + 8h + 2j + i, as :func:`seam.kernels.mxfp8_wgmma.k_permute` does (``seam.formats.a_deq``'s order)."""
    if K_DIM == 2:
        t = gl.reshape(t, [t.shape[0], t.shape[1], 4, 8, 2, 2])
        return gl.reshape(gl.permute(t, (0, 1, 3, 4, 2, 5)), [t.shape[0], t.shape[1], 128])
    else:
        t = gl.reshape(t, [t.shape[0], 4, 8, 2, 2, t.shape[2]])
        return gl.reshape(gl.permute(t, (0, 2, 3, 1, 4, 5)), [t.shape[0], 128, t.shape[5]])


@gluon.jit
def _grid4(D0: gl.constexpr, D1: gl.constexpr, D2: gl.constexpr, D3: gl.constexpr, L: gl.constexpr):
    """Index tensors of a [D0, D1, D2, D3] block in layout ``L``, each along its own axis, broadcastable together."""
    a = gl.arange(0, D0, layout=gl.SliceLayout(1, gl.SliceLayout(2, gl.SliceLayout(3, L))))[:, None, None, None]
    b = gl.arange(0, D1, layout=gl.SliceLayout(0, gl.SliceLayout(2, gl.SliceLayout(3, L))))[None, :, None, None]
    c = gl.arange(0, D2, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(3, L))))[None, None, :, None]
    d = gl.arange(0, D3, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(2, L))))[None, None, None, :]
    return a, b, c, d


@gluon.jit
def _weight_step(w_steps, s_smem, bars, i, WL: gl.constexpr, BF16_MUL: gl.constexpr):
    """Step i's [W, 16, 128] weight box as BF16 ``e4m3 * 2^(s - 127)`` in ``WL``, once its copy has landed: by one
    BF16 multiply per pair with ``BF16_MUL``, else through fp32."""
    mbarrier.wait(bars.index(i), 0)
    w = w_steps.index(i).load(WL)
    w = gl.reshape(w, [w.shape[0], 16, 4, 32])
    s = s_smem.index(i).load(gl.SliceLayout(3, w.type.layout))
    if BF16_MUL:
        w = e4m3_scaled_bf16(w, s[:, :, :, None])
    else:
        w = to_bf16_rne(e4m3_to_f32(w) * ue8m0_to_f32(s)[:, :, :, None])
    return gl.reshape(w, [w.shape[0], 16, 128])


@gluon.jit
def _mma_step(acc, x, xs, w_steps, s_smem, bars, i, WL: gl.constexpr, BF16_MUL: gl.constexpr):
    """``acc`` plus step i's products: the activations ``x`` [W, 128, BLOCK_M] E4M3 with their scales ``xs`` and the weight
    box dequantized to BF16, both relabelled in the K permutation as the MMA's operands."""
    mma: gl.constexpr = acc.type.layout
    x_deq = to_bf16_rne(e4m3_to_f32(gl.reshape(x, [x.shape[0], 4, 32, x.shape[2]])) * ue8m0_to_f32(xs)[:, :, None, :])
    b = gl.convert_layout(k_permute(gl.reshape(x_deq, x.shape), 1),
                          gl.DotOperandLayout(operand_index=1, parent=mma, k_width=2), assert_trivial=True)
    w_deq = _weight_step(w_steps, s_smem, bars, i, WL, BF16_MUL)
    a = gl.convert_layout(k_permute(w_deq, 2), gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2),
                          assert_trivial=True)
    return mma_v2(a, b, acc)


@gluon.jit
def mxfp8_mma_rows_kernel(
    w_desc,  # E4M3 weights as a [SPW, W, N, 128] uint8 view (step i of warp w at [i, w]), block [1, W, 16, 128]
    wsc_ptr,  # swizzled weight scales
    x_ptr,  # E4M3 activations [M, K] as uint8, row stride stride_xm
    xs_ptr,  # swizzled activation scales
    out_ptr,  # bf16 [M, N], row stride stride_om
    M,
    N,
    stride_xm,
    stride_om,
    K: gl.constexpr,
    SPW: gl.constexpr,  # K steps per warp
    SPWP: gl.constexpr,  # SPW rounded up to a power of two (the scale gather's extent)
    WL: gl.constexpr,  # weight_layout(num_warps)
    XL: gl.constexpr,  # activation_layout(num_warps, BLOCK_M)
    BF16_MUL: gl.constexpr,  # weights dequantized by one BF16 multiply per pair (bf16_mul_exact)
    USE_PDL: gl.constexpr,
    ACTS_STAGED: gl.constexpr,  # every step's activations staged in shared memory, else held in registers
    BLOCK_M: gl.constexpr,  # tokens per program (BLOCK_MS)
    num_warps: gl.constexpr,
):
    W: gl.constexpr = num_warps
    KB: gl.constexpr = K // 32
    n0 = gl.program_id(0) * 16
    w_smem = gl.allocate_shared_memory(gl.uint8, [SPW, 1, W, 16, 128], w_desc.layout)
    bars = gl.allocate_shared_memory(gl.int64, [SPW, 1], mbarrier.MBarrierLayout())
    flat2: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
    flat3: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [2, 1, 0])
    s_smem = gl.allocate_shared_memory(gl.uint8, [SPWP, W, 16, 4], flat3)
    for i in gl.static_range(SPW):
        mbarrier.init(bars.index(i), count=1)
    gl.thread_barrier()
    # The weight strip first: it does not depend on the previous kernel (PDL).
    for i in gl.static_range(SPW):
        mbarrier.expect(bars.index(i), w_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(w_desc, [i, 0, n0, 0], bars.index(i), w_smem.index(i))
    # Scale byte of row n0 + r, block 4 (w SPW + i) + c at s_smem[i, w, r, c]: one gather, every load in flight.
    LS: gl.constexpr = gl.BlockedLayout([1, 1, 1, 4], [1, 2, 16, 1], [1, num_warps, 1, 1], [3, 2, 1, 0])
    i4, w4, r4, c4 = _grid4(SPWP, W, 16, 4, LS)
    r4 = n0 + r4
    sc = gl.load(wsc_ptr + swizzled_scale_offset(r4.to(gl.int64), (w4 * SPW + i4) * 4 + c4, KB),
                 mask=(r4 < N) & (i4 < SPW), other=0)
    s_smem._reinterpret(gl.uint8, [SPWP * W * 16, 4], flat2).store(gl.reshape(sc, [SPWP * W * 16, 4]))
    w_steps = w_smem._reinterpret(gl.uint8, [SPW, W, 16, 128],
                                  gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=8, rank=3))
    if USE_PDL:
        # The next kernel may start and stream its own weights; its own wait still waits for all of this one.
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    # the scales' registers beside the activations' (one per token and block)
    XS: gl.constexpr = gl.SliceLayout(2, gl.reshape(gl.zeros([W, 128, BLOCK_M], gl.uint8, XL),
                                                    [W, 4, 32, BLOCK_M]).type.layout)
    if ACTS_STAGED:
        # every step's activations and their scales in one round trip, into shared memory as [step, warp, token, 128
        # bytes] and [step, warp, token, 4]
        x_smem = gl.allocate_shared_memory(gl.uint8, [SPWP, W, BLOCK_M, 128], flat3)
        xs_smem = gl.allocate_shared_memory(gl.uint8, [SPWP, W, BLOCK_M, 4], flat3)
        LX: gl.constexpr = gl.BlockedLayout([1, 1, 1, 16], [1, 1, 4, 8], [1, num_warps, 1, 1], [3, 2, 1, 0])
        ix, wx, nx, kx = _grid4(SPWP, W, BLOCK_M, 128, LX)
        x_all = gl.load(x_ptr + nx.to(gl.int64) * stride_xm + (wx * SPW + ix) * 128 + kx,
                        mask=(nx < M) & (ix < SPW) & (wx >= 0) & (kx >= 0), other=0)
        x_smem._reinterpret(gl.uint8, [SPWP * W, BLOCK_M, 128], flat3).store(
            gl.reshape(x_all, [SPWP * W, BLOCK_M, 128]))
        ic, wc, nc, cx = _grid4(SPWP, W, BLOCK_M, 4, LS)
        xsc = gl.load(xs_ptr + swizzled_scale_offset(nc, (wc * SPW + ic) * 4 + cx, KB),
                      mask=(nc < M) & (ic < SPW) & (wc >= 0) & (cx >= 0), other=0)
        xs_smem._reinterpret(gl.uint8, [SPWP * W, BLOCK_M, 4], flat3).store(gl.reshape(xsc, [SPWP * W, BLOCK_M, 4]))
        gl.thread_barrier()  # the weight scales (before the wait) and the activations are in shared memory
    else:
        # every step's activations and scales straight into the MMA operand's registers, all requested at once
        wa = gl.arange(0, W, layout=gl.SliceLayout(1, gl.SliceLayout(2, XL)))[:, None, None]
        ka = gl.arange(0, 128, layout=gl.SliceLayout(0, gl.SliceLayout(2, XL)))[None, :, None]
        na = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, gl.SliceLayout(1, XL)))[None, None, :]
        x_ptrs = x_ptr + na.to(gl.int64) * stride_xm + wa * (SPW * 128) + ka
        x_mask = (na < M) & (wa >= 0) & (ka >= 0)
        wb = gl.arange(0, W, layout=gl.SliceLayout(1, gl.SliceLayout(2, XS)))[:, None, None]
        cb = gl.arange(0, 4, layout=gl.SliceLayout(0, gl.SliceLayout(2, XS)))[None, :, None]
        nb = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, gl.SliceLayout(1, XS)))[None, None, :]
        xs_ptrs = xs_ptr + swizzled_scale_offset(nb, wb * (SPW * 4) + cb, KB)  # step i: + 512 i (its 4 blocks)
        xs_mask = (nb < M) & (wb >= 0) & (cb >= 0)
        x_regs = ()
        xs_regs = ()
        for i in gl.static_range(SPW):
            x_regs = x_regs + (gl.load(x_ptrs + i * 128, mask=x_mask, other=0),)
            xs_regs = xs_regs + (gl.load(xs_ptrs + i * 512, mask=xs_mask, other=0),)
        gl.thread_barrier()  # the weight scales (before the wait) are in shared memory

    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[num_warps, 1, 1],
                                                  instr_shape=[1, 16, 8])
    acc = gl.zeros([W, 16, BLOCK_M], gl.float32, mma)
    if ACTS_STAGED:
        for i in range(SPW):
            x = x_smem.index(i).permute((0, 2, 1)).load(XL)
            xs = xs_smem.index(i).permute((0, 2, 1)).load(XS)
            acc = _mma_step(acc, x, xs, w_steps, s_smem, bars, i, WL, BF16_MUL)
    else:
        for i in gl.static_range(SPW):  # unrolled: the tuples are indexed by constants
            acc = _mma_step(acc, x_regs[i], xs_regs[i], w_steps, s_smem, bars, i, WL, BF16_MUL)
    total = gl.sum(acc, axis=0)  # [16, BLOCK_M]: the warps' K ranges in one fixed order
    L: gl.constexpr = gl.SliceLayout(0, mma)
    r = n0 + gl.arange(0, 16, layout=gl.SliceLayout(1, L))[:, None]
    m = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, L))[None, :]
    gl.store(out_ptr + m.to(gl.int64) * stride_om + r, to_bf16_rne(total), mask=(m < M) & (r < N))


#: Shared layout of a weight box ([1, W, 16, 128] bytes, unswizzled).
_BOX_LAYOUT = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=8, rank=4)


def weight_descriptor(wq: torch.Tensor, warps: int) -> TensorDescriptor:
    """TMA view of the E4M3 weight [N, K] as [SPW, W, N, 128] (step i of warp w's K range at [i, w])."""
    n, k = wq.shape
    step = STEP.value
    spw = k // step // warps
    steps = wq.view(torch.uint8).as_strided((spw, warps, n, step), (step, spw * step, wq.stride(0), 1))
    return TensorDescriptor.from_tensor(steps, [1, warps, BLOCK_N.value, step], _BOX_LAYOUT)


def launch_mxfp8_mma_rows(
    xq: torch.Tensor, xs: torch.Tensor, wq: torch.Tensor, ws: torch.Tensor, out: torch.Tensor, num_warps: int,
    use_pdl: bool, *, bf16_mul: bool = False, acts_staged: bool | None = None, block_m: int | None = None,
) -> None:
    """out[M, N] = bf16(A_deq @ W_deq^T) for validated operands: MXFP8 rows ``xq`` [M, K] (M <= 16, unit column
    stride) with swizzled scales ``xs``, a TMA-readable weight (``seam.kernels.mxfp8_wgmma.tma_ready``) with its
    swizzled scales ``ws``, K a multiple of 128 whose steps ``num_warps`` (:func:`warps_for`) splits evenly.
    ``bf16_mul``: dequantize the weight by BF16 multiplies, for a weight
    :func:`seam.kernels.mxfp8_wgmma.bf16_mul_exact` accepts. ``acts_staged``: stage the activations in shared memory
    (True) or hold them in registers (False): a hook for tests and A/B measurements, the bytes are the same; None: as
    :func:`stages_activations` says for K, ``num_warps`` and the token tile. ``block_m``: the token tile, one of
    :data:`BLOCK_MS` holding M (None: :func:`block_m_for`).

    Raises:
        ValueError: M above 16 or above ``block_m``, ``block_m`` not in :data:`BLOCK_MS`, K not a multiple of 128 split
            evenly by ``num_warps``."""
    m, k = xq.shape
    n = wq.shape[0]
    step = STEP.value
    if block_m is None:
        block_m = block_m_for(m)  # raises past the largest tile
    if block_m not in BLOCK_MS or m > block_m:
        raise ValueError(f"block_m must be one of {BLOCK_MS} holding M={m}, got {block_m}")
    if k % step or (k // step) % num_warps:
        raise ValueError(f"K={k} must be a multiple of {step} whose steps {num_warps} warps split evenly")
    spw = k // step // num_warps
    if acts_staged is None:
        acts_staged = stages_activations(k, num_warps, block_m)
    mxfp8_mma_rows_kernel[(triton.cdiv(n, BLOCK_N.value),)](
        weight_descriptor(wq, num_warps), ws, xq.view(torch.uint8), xs, out, m, n, xq.stride(0), out.stride(0),
        K=k, SPW=spw, SPWP=triton.next_power_of_2(spw), WL=weight_layout(num_warps),
        XL=activation_layout(num_warps, block_m), BF16_MUL=bf16_mul, USE_PDL=use_pdl, ACTS_STAGED=acts_staged,
        BLOCK_M=block_m, num_warps=num_warps, launch_pdl=use_pdl,
    )
