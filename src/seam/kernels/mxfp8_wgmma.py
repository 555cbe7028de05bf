"""MXFP8 x MXFP8 -> BF16 decode GEMM for Hopper in Gluon: TMA weight ring, register-A ``wgmma``.

At decode M the weight stream is the whole cost (N*K E4M3 bytes + N*K/32 scale bytes
against a few KB of activations), so this kernel is built around keeping that stream
at HBM speed while the tensor cores and the conversions stay out of its way:

* **Swap AB.** The output is computed transposed, ``out^T[N, M] = W[N, K] @ A[M, K]^T``:
  weight rows sit on the 64-row side of ``wgmma`` and the tokens on its N side, padded
  only to ``MP`` = 8, 16, 32, 64, 72, 80, 96 (64 + tail) or 128 (the tl kernel pads M to 16 or more on the M side).
* **TMA ring, issued first.** Each program owns BN = 128 weight rows and a contiguous
  range of 128-wide K steps (split-K). It issues the TMA copies of its first ``STAGES``
  steps (the E4M3 tile and the tile's 512 swizzled scale bytes, one mbarrier per stage)
  before anything else, before the PDL wait too: the weights (and their scales) must not
  be written by a PDL predecessor. In a PDL chain they then stream while the previous
  kernel finishes: after the norm + MXFP8 kernel at 1-8 tokens every program has read its
  pre-wait steps before the norm ends (docs/benchmarks-log.md run 126; at 64 tokens the programs
  start only as the previous GEMM's leave their SMs). What the chain still waits for after the
  norm is the release (0.5 us), the staging, the loop's conversions and the split-K combine.
  The first one or two steps are waited for and loaded into registers while the activations' copies
  are in flight, just after they are issued (:func:`seam.kernels.wgmma_config.wgmma_early_steps`: up to
  5% faster at 8-16 tokens, 30% at 64 tokens with 3 steps per program; log runs 65-66). Until session 52
  that came before the PDL wait; where the previous kernel has already ended (no PDL before this one) the
  activations were then requested only once the first weight stage had landed, behind the weight stream
  (H100, log runs 307-309: 0.2-0.5 us of the call, 0.4-0.9 us of a MiniMax decode step per rank). Where
  K <= 2048, up to 32 tokens, one or two steps before those are converted before the wait into shared BF16
  slots that ``wgmma`` reads from shared memory
  (:func:`seam.kernels.wgmma_config.wgmma_smem_steps`, 4-12% faster, log run 72).
* **Activations resident in shared memory.** After the PDL wait (and the PDL trigger, just
  before it: the next kernel may start, and stream its own weights, while this one and even
  its predecessor still run; seam's PDL kernels write, and read what others produce, only after
  their own wait. With ``PARTIALS`` (the fused QKV op's GEMM, and ``mxfp8_linear``'s where its partials are
  summed apart) the trigger comes just after the wait instead: the QKV epilogue kernel launched next reads its
  inputs before its own wait, ``seam.kernels.qkv_epilogue``'s ``INPUTS_BEFORE_WAIT``), the program copies its K range of A
  (``MP`` rows; E4M3 + scales, or BF16 quantized here by the MXFP8 rule: in-GEMM
  quantization) with TMA, every step at once, and dequantizes it to BF16 in place, as
  ``wgmma``'s B operand for the whole loop. With ``A_DEQ`` the activations arrive already
  dequantized in that K order (``seam.formats.a_deq``, written by the producer kernel beside its
  MXFP8 rows): only the copies are issued, and each step's is waited for just before its MMA, or all
  at once by 8-row tiles (:data:`A_DEQ_WAIT_ALL_MAX_M`) (H200, the GEMM alone, log runs 102 and 114:
  1.1-3.2 us faster at 32-64 tokens, 0.65-1.3 at 16, 0.5-1.3 at 8). Where resident activations leave one
  program per SM and the launch needs more than one wave of them (wide N on the 64-row tile,
  :func:`seam.kernels.wgmma_config.wgmma_a_stream`), A_deq streams instead (``A_STREAM``): ``STAGES``
  slots beside the weight ring, each refilled once both warpgroups' MMAs of its step are done, so two
  programs share an SM (log run 139: N 4992 x K 6144 at 64 tokens 19.84 -> 15.42 us). The 128-token tile
  (97-128 tokens) always streams: its activations never fit resident. It holds the weights as the register
  operand where the ring kernel (``seam.kernels.mxfp8_wgmma_ring``, which took those M before) converts them into
  shared memory, and so moves about 128 KB per step through shared memory where that kernel moves about 193 (no
  BF16 weight store, no wgmma read of it): 0.82-0.97x the ring kernel's time at all 27 points measured (eleven
  shapes, picked depth; log runs 176-177). At 65-96 tokens the 64 + tail tiles (:data:`TAIL_TILES`, ``TAIL``) run
  the same weight operand through two MMAs, tokens 0-63 and the 8-32 after them, each with its own accumulator and
  activation slots (one barrier per stage for both copies): the MMA work of 64 + tail tokens, 0.85-0.97x the
  128-token tile's time (log run 184). Where their K split is at most 6 the picker runs these streamed tiles
  warp-specialized instead (``seam.kernels.mxfp8_wgmma_ws``: the same operands and bytes, a TMA producer warp and
  two consumer warpgroups that never wait for each other; 0.74-1.0x this kernel's time, log runs 190-191), and the
  64-row tile too where A_deq comes with the activations; this kernel keeps larger splits. On those streamed tiles,
  where the 64-row tile streams, and on that tile at K 1536-2048, activations that arrive without A_deq have it
  written first by the GEMM's dequantization launch
  (:func:`seam.kernels.wgmma_config.wgmma_dequantize_first`; log runs 150 and 152: 24.6 -> 18.5 us at N 4992,
  11.9 -> 10.6 at N 6144 x K 2048), and so do BF16 rows on 32- and 64-row tiles (quantized in that launch; runs
  159-160: 0.86-1.0x a separate quantizer's time).
* **Register-A weights, K permuted.** Each thread loads 2 rows x 32 contiguous bytes of
  the weight tile (16-byte shared loads; one MXFP8 block, so one scale per row), scales
  them to BF16 exactly like :func:`seam.kernels.mxfp8_gemm.dequantize_mxfp8` (through fp32, or, where the
  launch rule :func:`seam.kernels.wgmma_config.wgmma_bf16_mul` and the weight's bytes
  (:func:`bf16_mul_exact`) allow, by one BF16 multiply per pair: the same bytes, fewer instructions), and hands
  them to ``wgmma`` as its register A operand. Those registers do not hold the K columns
  the instruction's operand layout expects; they hold a fixed permutation of them
  (:func:`k_permute`), so the activations are written to shared memory with the same
  permutation and every product is still ``A_deq[m, k] * W_deq[n, k]``. The relabelling is
  free: ``convert_layout(..., assert_trivial=True)`` checks at compile time that no data moves.
* **Software-pipelined MMA**: step i's ``wgmma`` runs while the next unread step's weights are
  loaded into registers; not while they are converted: in the sm_90 SASS ptxas sinks the conversion
  below the MMA's wait (``WARPGROUP.DEPBAR``; the wait names no registers in the PTX, and only
  shared-memory stores do not cross it). The conversion in a branch of its own (``if i + 1 < n_steps``) keeps the
  wait after it, but did not pay (log runs 321-324, H100: this kernel 0.97-1.01x fenced, mixed back to back; the
  warp-specialized one, whose two consumers already overlap each other's conversion and MMAs, 1.01-1.15x slower).
  Converting every step into two shared BF16 slots that
  ``wgmma`` reads (the ring kernel's way, 10-20% faster there) was slower here at every M but one (log
  run 59: N 2560 x K 6144 M 8 8.33 -> 9.74 us, M 64 14.47 -> 23.7 at the best split that fits beside
  the slots).
* **Split-K combine in fixed order** (``seam.kernels.wgmma_combine``, shared with the ring kernel): partials to a
  workspace; the last program of a tile to arrive
  sums them in split order (:func:`seam.kernels.mxfp8_gemm.split_k_combine`'s protocol) or, where
  a tile's partials are large (:func:`seam.kernels.wgmma_config.wgmma_combiners`), its last
  2^j programs each wait for every arrival and sum a slice of its rows, in the same order, so the
  bytes are the same. The combiners are the tile's last programs in launch order, which the hardware
  follows in starting blocks (CUDA does not promise it): every other program of the tile has started
  before them and finishes without waiting, so what a combiner waits for is the other combiners,
  which need room on the GPU at the same time (COMBINERS <= 16 blocks); none waits on a later tile,
  and a PDL dependent launches only once every program here has started. The epilogue stores along
  N, contiguous in the output. For the fused QKV op (``PARTIALS``) the programs only store their
  partials: its epilogue kernel, next in the stream, sums them; so do they where the launch rule sums a tile's
  partials apart (``seam.kernels.wgmma_config.wgmma_combines_apart``: 8-row tiles split 16 ways or more, 10 at one
  token, 16-64-row tiles 10 or more), and ``seam.kernels.split_k_sum`` adds them in the same order.

Measured on the H200 (``docs/benchmarks-log.md`` sessions 8-9): 0.60-0.99x the tl kernel's time at
M 8..64 (N 2560 x K 6144 at 64 tokens 17.7 -> 14.5 us with run 41's combine rule), still 1.9-5x the
weight-stream floor. What bounds it is one program's latency chain (weights -> conversion ->
MMA -> partial -> arrival -> partials -> store), not the stream or the issue rate: Nsight
Compute at 8 tokens (run 40) shows DRAM 30% busy, SMs idle 27% of the cycles and global-load
waits (the split-K combine) leading the stalls; a K loop with 40% fewer instructions (F16
operands, run 39), deeper rings and more programs per SM (runs 38, 42) were all slower.
Run 64's per-program timeline (``%globaltimer`` stamps in a graph of back-to-back calls, N 2560 x
K 6144) at 8 tokens: a call's programs start during the previous call and wait in ``gdc_wait``; from
its release the call's last program ends ~8 us later: activations staged 1.0 us, first weight operand
0.5, the 4-step loop 2.8 (two programs share each SM's issue slots), partial stored and arrival 1.0,
then the combine. At 64 tokens staging takes 3.1 us and the 8-step loop 5.4. The split-K combine
(arrival, the last program's loads and store) cost 1.6-3.2 us: partials-only launches (run 66); the
spread combine took 0.5-2.1 us of that back at 32-64 tokens (run 68).

The products are exact (E4M3 x E4M3 with power-of-two scales, in BF16) and accumulate in
fp32, so the output equals the tl kernel's up to fp32 summation order and is bit-identical
to it when the sums are exact (``tests/test_mxfp8_wgmma.py``). Gluon kernels compile for
sm_90 anywhere but run only on a Hopper GPU: the tl kernel is the path under the interpreter.
"""

from __future__ import annotations

import functools

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

from seam.formats.mxfp8_weight import ByteFacts
from seam.kernels.numerics import (
    SCALED_BF16_MAX_SCALE,
    e4m3_scaled_bf16,
    e4m3_to_f32,
    mxfp8_quantize_blocks,
    to_bf16_rne,
    to_f32,
    ue8m0_to_f32,
)
from seam.kernels.wgmma_combine import check_combiners, store_tile

#: K columns per step: four MXFP8 blocks, one 128-byte E4M3 row and one 512-byte scale chunk per 128 rows.
BLOCK_K = gl.constexpr(128)
#: Weight rows per program (two warpgroups of 64).
BLOCK_N = gl.constexpr(128)
NUM_WARPS = 8
#: Shared memory a program may use (H200: 227 KiB per block, less the barriers and Triton's reserve).
SHARED_BUDGET = 220 * 1024
#: Shared memory of a program that leaves room for a second one on its SM (228 KiB per SM, 1 KiB per block).
TWO_PER_SM_BYTES = 113 * 1024
#: Tiles up to this many rows wait for all their A_deq copies once, before the first MMA; larger ones wait for
#: each step's copy before its MMA. Measured on the H200 (docs/benchmarks-log.md run 114), the GEMM alone given
#: A_deq at 8 rows: N 2560 x K 6144 9.11 -> 7.49 us, N 4992 x K 6144 14.53 -> 11.29 (N 6144 x K 2048 6.26 ->
#: 6.39, the one loss); at 16 rows the per-step wait is 0.1-0.25 us faster.
A_DEQ_WAIT_ALL_MAX_M = gl.constexpr(8)


#: The 64 + tail tiles (65-96 tokens): tokens 0-63 on one accumulator, the rest on a second of ``block_m - 64``
#: (8, 16 or 32) columns, with one register-A weight operand for both MMAs: the MMA work of 64 + tail tokens, not
#: 128 (``TAIL``).
TAIL_TILES = (72, 80, 96)
#: Every tile (``block_m``) of the decode kernel.
BLOCK_MS = (8, 16, 32, 64, *TAIL_TILES, 128)


def tail_tokens(block_m: int) -> int:
    """Tokens on a 64 + tail tile's second accumulator (:data:`TAIL_TILES`); 0 for other tiles."""
    return block_m - 64 if block_m in TAIL_TILES else 0


def max_steps(k: int, split_k: int) -> int:
    """K steps of a program's longest range."""
    return -(-(k // BLOCK_K.value) // split_k)


def stage_bytes() -> int:
    """Shared bytes of one ring stage: the E4M3 tile and its scale chunk."""
    return BLOCK_N.value * BLOCK_K.value + 512


def activation_step_bytes(block_m: int) -> int:
    """Shared bytes of one K step of activations: the BF16 tile, its scale chunk, its barrier."""
    return block_m * BLOCK_K.value * 2 + 512 + 8


def activation_bytes(block_m: int, k: int, split_k: int) -> int:
    """Shared bytes of a program's resident activations (every step of its K range)."""
    return max_steps(k, split_k) * activation_step_bytes(block_m)


def shared_bytes(block_m: int, k: int, split_k: int, stages: int, smem_steps: int, *, a_stream: bool = False) -> int:
    """Shared bytes of a program: its activations (resident, or with ``a_stream`` ``stages`` streamed slots),
    ring and ``smem_steps`` BF16 weight slots."""
    slots = smem_steps * BLOCK_N.value * BLOCK_K.value * 2
    acts = stages * activation_step_bytes(block_m) if a_stream else activation_bytes(block_m, k, split_k)
    return acts + stages * (stage_bytes() + 8) + slots


def max_stages(block_m: int, k: int, split_k: int, *, streamed: bool = False) -> int:
    """Deepest ring that fits :data:`SHARED_BUDGET` beside the activations (resident, or with ``streamed`` one
    slot per stage), no deeper than the steps."""
    if streamed:
        return min(max_steps(k, split_k), SHARED_BUDGET // (stage_bytes() + 8 + activation_step_bytes(block_m)))
    room = SHARED_BUDGET - activation_bytes(block_m, k, split_k)
    return min(max_steps(k, split_k), room // (stage_bytes() + 8))


#: Registers of a [BLOCK_N, BLOCK_K] E4M3 tile: thread (warp w, lane 4q + j) holds rows 16w + q and
#: 16w + q + 8, bytes [32j, 32j + 32) of each: one MXFP8 block (one scale per row), 16-byte shared loads.
WEIGHT_LAYOUT = gl.constexpr(gl.DistributedLinearLayout(
    reg_bases=[[0, 1], [0, 2], [0, 4], [0, 8], [0, 16], [8, 0]],
    lane_bases=[[0, 32], [0, 64], [1, 0], [2, 0], [4, 0]],
    warp_bases=[[16, 0], [32, 0], [64, 0]],
    block_bases=[],
    shape=[128, 128],
))
#: Registers of a 128-row scale chunk as TMA lands it, [32, 16] bytes at (r % 32, (r // 32) * 4 + c): the
#: scales of each thread's two rows in :data:`WEIGHT_LAYOUT`, for the block c = j it holds.
WEIGHT_SCALE_LAYOUT = gl.constexpr(gl.DistributedLinearLayout(
    reg_bases=[[8, 0]],
    lane_bases=[[0, 1], [0, 2], [1, 0], [2, 0], [4, 0]],
    warp_bases=[[16, 0], [0, 4], [0, 8]],
    block_bases=[],
    shape=[32, 16],
))


@gluon.jit
def k_permute(t, R: gl.constexpr):
    """Relabel the columns of a [R, 128] step so that column 32j + 4c + 2h + i moves to 16c + 8h + 2j + i.

    Applied to the weight tile in :data:`WEIGHT_LAYOUT` it yields exactly the register A operand
    layout of ``wgmma`` (BF16, k_width 2): thread j's 32 contiguous bytes become its K slots of
    the eight k16 chunks. Applied to the activations before they are stored, it keeps every
    product's pair of K indices equal.
    """
    t = gl.reshape(t, [R, 4, 8, 2, 2])
    return gl.reshape(gl.permute(t, (0, 2, 3, 1, 4)), [R, BLOCK_K])


@gluon.jit
def _chunk_rows(s, SR: gl.constexpr, SG: gl.constexpr):
    """Scale bytes of a 128x4 swizzle chunk as TMA lands them, [SR, 4 * SG] at (r % 32, (r // 32) * 4 + c),
    as [r, c] for its first SR * SG rows (SR = 32 unless fewer rows are used)."""
    return gl.reshape(gl.permute(gl.reshape(s, [SR, SG, 4]), (1, 0, 2)), [SR * SG, 4])


@gluon.jit
def _issue_activations(x_desc, xs_desc, x_smem, xs_smem, x_bars, lo, n_steps, MP: gl.constexpr,
                       MAX_STEPS: gl.constexpr, A_BF16: gl.constexpr, A_DEQ: gl.constexpr):
    """The TMA copies of every step of this program's K range of activations at once (one barrier per step), so
    the global latency is paid once: BF16 rows (A_BF16, A_DEQ) into ``x_smem`` in place, E4M3 rows (half the size)
    into its second half and their scale chunks into ``xs_smem``, for :func:`_finish_activations`."""
    x_raw = x_smem._reinterpret(gl.uint8, [2 * MAX_STEPS, MP, BLOCK_K], x_desc.layout)
    for j in gl.static_range(MAX_STEPS):
        bar = x_bars.index(j)
        in_range = j < n_steps
        if A_BF16 or A_DEQ:
            mbarrier.expect(bar, x_desc.block_type.nbytes, pred=in_range)
            tma.async_copy_global_to_shared(x_desc, [0, (lo + j) * 128], bar, x_smem.index(j), pred=in_range)
        else:
            mbarrier.expect(bar, x_desc.block_type.nbytes + xs_desc.block_type.nbytes, pred=in_range)
            tma.async_copy_global_to_shared(x_desc, [0, (lo + j) * 128], bar, x_raw.index(MAX_STEPS + j),
                                            pred=in_range)
            tma.async_copy_global_to_shared(xs_desc, [(lo + j) * 32, 0], bar, xs_smem.index(j), pred=in_range)


@gluon.jit
def _finish_activations(
    x_desc, x_smem, xs_smem, x_bars, n_steps,
    MP: gl.constexpr, MAX_STEPS: gl.constexpr, A_BF16: gl.constexpr, A_DEQ: gl.constexpr, num_warps: gl.constexpr,
):
    """A_deq [MP, 128] of each step of this program's K range, K-permuted (:func:`k_permute`), in
    ``x_smem``, from the copies :func:`_issue_activations` issued: BF16 ``e4m3 * 2^(s - 127)`` of the MXFP8
    rows, or of BF16 rows quantized here by the MXFP8 rule (in-GEMM quantization). With ``A_DEQ`` the rows
    already are A_deq, K-permuted by the kernel that produced them (``seam.formats.a_deq``): their copies are
    waited for here up to :data:`A_DEQ_WAIT_ALL_MAX_M` rows, else each before its step's MMA
    (:func:`_activation_step`).

    Step j's BF16 output, written after its raw bytes are read, overwrites raw E4M3 steps 2j - MAX_STEPS and
    2j - MAX_STEPS + 1 only, both <= j and so already consumed. Across warps, the barrier that orders the raw
    loads before the stores (a fast warp must not overwrite bytes a slow one still reads) is the one Triton's
    shared-memory analysis inserts between a load and a store of one buffer (seen in the sm_90 PTX of both
    paths): keep them on one buffer, in one partition, if this code is ever restructured.
    """
    x_raw = x_smem._reinterpret(gl.uint8, [2 * MAX_STEPS, MP, BLOCK_K], x_desc.layout)
    L2: gl.constexpr = gl.BlockedLayout([1, 4], [1, 32], [num_warps, 1], [1, 0])
    SR: gl.constexpr = 32 if MP > 32 else MP  # scale rows r % 32 in the chunk, and column groups r // 32
    SG: gl.constexpr = MP // SR
    LS: gl.constexpr = gl.BlockedLayout([1, 1], [8, 4], [num_warps, 1], [1, 0])
    for j in gl.static_range(MAX_STEPS):
        if j < n_steps and not A_DEQ:
            mbarrier.wait(x_bars.index(j), 0)
            if A_BF16:
                x = to_f32(x_smem.index(j).load(L2))
                q, s = mxfp8_quantize_blocks(gl.reshape(x, [MP, 4, 32]))
            else:
                q = gl.reshape(x_raw.index(MAX_STEPS + j).load(L2), [MP, 4, 32])
                s = _chunk_rows(xs_smem.index(j).slice(0, SR, dim=0).slice(0, 4 * SG, dim=1).load(LS), SR, SG)
            s = gl.convert_layout(s, gl.SliceLayout(2, q.type.layout))
            deq = to_bf16_rne(e4m3_to_f32(q) * ue8m0_to_f32(s)[:, :, None])
            x_smem.index(j).store(k_permute(gl.reshape(deq, [MP, BLOCK_K]), MP))
        elif A_DEQ and j < n_steps and MP <= A_DEQ_WAIT_ALL_MAX_M:
            mbarrier.wait(x_bars.index(j), 0)


@gluon.jit
def _activation_step(x_smem, x_bars, i, MP: gl.constexpr, A_DEQ: gl.constexpr, A_STREAM: gl.constexpr,
                     STAGES: gl.constexpr):
    """Step i's activations as wgmma's shared B operand; with ``A_DEQ``, once their copy has landed; with
    ``A_STREAM`` from ring slot i % STAGES."""
    if A_STREAM:
        mbarrier.wait(x_bars.index(i % STAGES), (i // STAGES) & 1)
        return x_smem.index(i % STAGES).permute((1, 0))
    if A_DEQ and MP > A_DEQ_WAIT_ALL_MAX_M:
        mbarrier.wait(x_bars.index(i), 0)
    return x_smem.index(i).permute((1, 0))


@gluon.jit
def _issue_activation(x_desc, xt_desc, x_smem, xt_smem, x_bars, slot, step, pred, TAIL: gl.constexpr):
    """TMA copy of one K step of A_deq into activation slot ``slot`` (with ``TAIL``, its rows from
    ``x_desc``'s block on into ``xt_smem``), completing on its barrier."""
    bar = x_bars.index(slot)
    mbarrier.expect(bar, x_desc.block_type.nbytes + (xt_desc.block_type.nbytes if TAIL > 0 else 0), pred=pred)
    copy_activation_step(x_desc, xt_desc, x_smem, xt_smem, bar, slot, step, 0, pred, TAIL)


@gluon.jit
def copy_activation_step(x_desc, xt_desc, x_smem, xt_smem, bar, slot, step, m0, pred, TAIL: gl.constexpr):
    """The TMA copies of one K step of A_deq rows m0.. into slot ``slot`` (with ``TAIL``, its rows from ``x_desc``'s
    block on into ``xt_smem``), completing on ``bar``, whose byte count the caller expects."""
    if TAIL > 0:
        tma.async_copy_global_to_shared(xt_desc, [m0 + x_desc.block_type.shape[0], step * 128], bar,
                                        xt_smem.index(slot), pred=pred)
    tma.async_copy_global_to_shared(x_desc, [m0, step * 128], bar, x_smem.index(slot), pred=pred)


@gluon.jit
def _refill_activation(x_desc, xt_desc, x_smem, xt_smem, x_bars, i, lo, n_steps, A_STREAM: gl.constexpr,
                       STAGES: gl.constexpr, TAIL: gl.constexpr):
    """With ``A_STREAM``, once step i's MMAs are done in both warpgroups, its slot takes step i + STAGES."""
    if A_STREAM and i + STAGES < n_steps:
        gl.thread_barrier()  # both warpgroups' MMAs of step i have read the slot
        _issue_activation(x_desc, xt_desc, x_smem, xt_smem, x_bars, i % STAGES, lo + i + STAGES, True, TAIL)


@gluon.jit
def _issue_step(w_desc, s_desc, w_ring, s_ring, bars, stage, step, n0, K_STEPS: gl.constexpr, pred):
    """TMA copies of one K step (E4M3 tile and its scale chunk) into ``stage``, completing on its barrier."""
    bar = bars.index(stage)
    mbarrier.expect(bar, w_desc.block_type.nbytes + s_desc.block_type.nbytes, pred=pred)
    copy_weight_step(w_desc, s_desc, w_ring, s_ring, bar, stage, step, n0, K_STEPS, pred)


@gluon.jit
def copy_weight_step(w_desc, s_desc, w_ring, s_ring, bar, stage, step, n0, K_STEPS: gl.constexpr, pred):
    """The TMA copies of one K step's E4M3 tile and its scale chunk into ``stage``, completing on ``bar``, whose byte
    count the caller expects."""
    tma.async_copy_global_to_shared(w_desc, [n0, step * 128], bar, w_ring.index(stage), pred=pred)
    tma.async_copy_global_to_shared(s_desc, [((n0 // 128) * K_STEPS + step) * 32, 0], bar, s_ring.index(stage),
                                    pred=pred)


@gluon.jit
def _read_step(w_desc, s_desc, w_ring, s_ring, bars, i, lo, n_steps, n0, K_STEPS: gl.constexpr,
               STAGES: gl.constexpr):
    """Step i's E4M3 weight tile and scale chunk in registers, once its ring stage has landed; refills the
    stage with step i + STAGES once every warp has read it. Past the last step: unused values."""
    stage = i % STAGES
    mbarrier.wait(bars.index(stage), (i // STAGES) & 1, pred=i < n_steps)
    w = w_ring.index(stage).load(WEIGHT_LAYOUT)
    sc = s_ring.index(stage).load(WEIGHT_SCALE_LAYOUT)
    if i + STAGES < n_steps:
        gl.thread_barrier()  # every warp has read the stage before the copy engine refills it
        fence_async_shared()
        _issue_step(w_desc, s_desc, w_ring, s_ring, bars, stage, lo + i + STAGES, n0, K_STEPS, True)
    return w, sc


@gluon.jit
def _weight_operand(w_desc, s_desc, w_ring, s_ring, bars, i, lo, n_steps, n0, K_STEPS: gl.constexpr,
                    STAGES: gl.constexpr, a_layout: gl.constexpr, BF16_MUL: gl.constexpr):
    """Step i's weight tile as wgmma's register A operand (BF16 ``e4m3 * 2^(s - 127)``, K-permuted)."""
    w, sc = _read_step(w_desc, s_desc, w_ring, s_ring, bars, i, lo, n_steps, n0, K_STEPS, STAGES)
    return dequantize_weight_operand(w, sc, a_layout, BF16_MUL)


@gluon.jit
def _weight_to_shared(w_desc, s_desc, w_ring, s_ring, bars, w_bf16, i, lo, n_steps, n0, K_STEPS: gl.constexpr,
                      STAGES: gl.constexpr, BF16_MUL: gl.constexpr):
    """Step i's weight tile as BF16, K-permuted, into shared slot i (a shared A operand of wgmma)."""
    w, sc = _read_step(w_desc, s_desc, w_ring, s_ring, bars, i, lo, n_steps, n0, K_STEPS, STAGES)
    w_bf16.index(i).store(k_permute(dequantize_weight_tile(w, sc, BF16_MUL), BLOCK_N))


@gluon.jit
def dequantize_weight_tile(w, sc, BF16_MUL: gl.constexpr):
    """An [R, BLOCK_K] E4M3 tile (R = :data:`BLOCK_N` in :data:`WEIGHT_LAYOUT`, or one warpgroup's 64 of its rows)
    and its rows' scales as TMA lands the chunk (:data:`WEIGHT_SCALE_LAYOUT`, or the rows' [32, R // 8] columns) as
    BF16 ``e4m3 * 2^(s - 127)``, [R, BLOCK_K] in the same registers. ``BF16_MUL``: by one BF16 multiply per pair
    (:func:`seam.kernels.numerics.e4m3_scaled_bf16`, the same bytes for weights :func:`bf16_mul_exact` accepts),
    else through fp32."""
    R: gl.constexpr = w.shape[0]
    w3 = gl.reshape(w, [R, 4, 32])
    sc = gl.convert_layout(_chunk_rows(sc, 32, R // 32), gl.SliceLayout(2, w3.type.layout), assert_trivial=True)
    if BF16_MUL:
        deq = e4m3_scaled_bf16(w3, sc[:, :, None])
    else:
        deq = to_bf16_rne(e4m3_to_f32(w3) * ue8m0_to_f32(sc)[:, :, None])
    return gl.reshape(deq, [R, BLOCK_K])


@gluon.jit
def dequantize_weight_operand(w, sc, a_layout: gl.constexpr, BF16_MUL: gl.constexpr):
    """:func:`dequantize_weight_tile` as wgmma's register A operand, K-permuted (:func:`k_permute`)."""
    return gl.convert_layout(k_permute(dequantize_weight_tile(w, sc, BF16_MUL), w.shape[0]), a_layout,
                             assert_trivial=True)


@gluon.jit
def program_steps(K_STEPS: gl.constexpr, SPLIT_K: gl.constexpr):
    """This program's output tile, its split index and its K range (first step, step count): tile-major launch
    order, the split's ranges as even as K_STEPS allows."""
    pid = gl.program_id(0)
    kid = pid % SPLIT_K
    lo = kid * K_STEPS // SPLIT_K
    return pid // SPLIT_K, kid, lo, (kid + 1) * K_STEPS // SPLIT_K - lo


@gluon.jit(do_not_specialize=["M"])
def mxfp8_linear_wgmma_kernel(
    # TMA descriptors
    w_desc,  # E4M3 weights as uint8 [N, K], block [BLOCK_N, BLOCK_K]
    s_desc,  # swizzled weight scales as uint8 [N_pad * K / 4096, 16], block [32, 16] (one 128x4 chunk)
    x_desc,  # activations [M, K] in [MP - TAIL, BLOCK_K] tiles: E4M3 as uint8, or BF16 (A_BF16, A_DEQ)
    xt_desc,  # with TAIL: A_deq's rows from MP - TAIL on, in [TAIL, BLOCK_K] tiles (else unused)
    xs_desc,  # swizzled activation scales like s_desc (unused when A_BF16)
    # pointers
    out_ptr,  # bf16 [M, N], row stride stride_om (unused with PARTIALS)
    ws_ptr,  # fp32 split-K workspace [tiles, SPLIT_K, MP, BLOCK_N]
    counter_ptr,  # int32 [tiles] arrival counters, zero between launches
    # sizes
    M,
    N,
    stride_om,
    # constexprs
    K: gl.constexpr,
    MP: gl.constexpr,  # tokens padded to the MMA's N side (with TAIL: to its two MMAs', MP - TAIL + TAIL)
    SPLIT_K: gl.constexpr,
    STAGES: gl.constexpr,
    A_BF16: gl.constexpr,
    A_DEQ: gl.constexpr,  # x_desc holds A_deq, BF16 and K-permuted (seam.formats.a_deq: by the producer)
    USE_PDL: gl.constexpr,
    COMBINE: gl.constexpr,  # split-K partials loaded per round trip by the combining program
    PARTIALS: gl.constexpr,  # only store each program's partial (the QKV epilogue kernel sums them)
    EARLY_STEPS: gl.constexpr,  # weight steps loaded into registers while the activations' copies fly (0, 1 or 2)
    SMEM_STEPS: gl.constexpr,  # steps before those converted into shared BF16 slots before the wait (EARLY_STEPS <= 1)
    COMBINERS: gl.constexpr,  # programs of a tile that combine its partials (store_tile)
    BF16_MUL: gl.constexpr,  # weights dequantized by one BF16 multiply per pair (bf16_mul_exact)
    A_STREAM: gl.constexpr,  # with A_DEQ: activations stream through STAGES slots beside the weight ring
    TAIL: gl.constexpr,  # 64 + TAIL tiles (A_STREAM): tokens 64.. on a second, TAIL-wide accumulator; else 0
    num_warps: gl.constexpr,
):
    gl.static_assert(TAIL == 0 or (A_STREAM and EARLY_STEPS < 2), "64 + tail tiles stream A_deq, <= 1 early step")
    gl.static_assert(not A_STREAM or (A_DEQ and SMEM_STEPS == 0), "streamed activations are A_deq, no smem steps")
    gl.static_assert(SMEM_STEPS == 0 or EARLY_STEPS <= 1, "shared-memory steps take at most one register step")
    gl.static_assert(not (A_BF16 and A_DEQ), "BF16 activations are either quantized here or already A_deq")
    BN: gl.constexpr = 16 * num_warps
    K_STEPS: gl.constexpr = K // BLOCK_K
    MAX_STEPS: gl.constexpr = (K_STEPS + SPLIT_K - 1) // SPLIT_K
    tile, kid, lo, n_steps = program_steps(K_STEPS, SPLIT_K)
    n0 = tile * BN

    w_ring = gl.allocate_shared_memory(gl.uint8, [STAGES, BN, BLOCK_K], w_desc.layout)
    s_ring = gl.allocate_shared_memory(gl.uint8, [STAGES, 32, 16], s_desc.layout)
    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    MA: gl.constexpr = MP - TAIL  # the first accumulator's tokens
    x_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([MA, BLOCK_K], gl.bfloat16)
    X_SLOTS: gl.constexpr = STAGES if A_STREAM else MAX_STEPS
    x_smem = gl.allocate_shared_memory(gl.bfloat16, [X_SLOTS, MA, BLOCK_K], x_layout)
    if TAIL > 0:
        xt_smem = gl.allocate_shared_memory(gl.bfloat16, [STAGES, TAIL, BLOCK_K], xt_desc.layout)
    else:
        xt_smem = x_smem  # unused
    xs_smem = gl.allocate_shared_memory(gl.uint8, [X_SLOTS, 32, 16], s_desc.layout)
    x_bars = gl.allocate_shared_memory(gl.int64, [X_SLOTS, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(bars.index(s), count=1)
    for s in gl.static_range(X_SLOTS):
        mbarrier.init(x_bars.index(s), count=1)
    gl.thread_barrier()
    # The weight stream first: it does not depend on the previous kernel (PDL).
    for s in gl.static_range(STAGES):
        _issue_step(w_desc, s_desc, w_ring, s_ring, bars, s, lo + s, n0, K_STEPS, s < n_steps)
    if USE_PDL and not PARTIALS:
        # The next kernel may start now and stream its own weights: its gdc_wait still waits for
        # all of this one. Measured on the H200 (docs/benchmarks-log.md run 34): 0.04-0.8 us faster per call.
        tl.extra.cuda.gdc_launch_dependents()
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                  instr_shape=[16, MA, 16])
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
    TW: gl.constexpr = TAIL if TAIL > 0 else 8  # the tail accumulator's width (TAIL 0: unused)
    # the tail's MMA takes the same registers as its A operand (a relabelling, checked by assert_trivial)
    mma_t: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                    instr_shape=[16, TW, 16])
    at_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma_t, k_width=2)
    # The SMEM_STEPS are converted into shared memory before the wait (nothing there depends on the previous kernel).
    if SMEM_STEPS > 0:
        w_bf16 = gl.allocate_shared_memory(gl.bfloat16, [SMEM_STEPS, BN, BLOCK_K],
                                           gl.NVMMASharedLayout.get_default_for([BN, BLOCK_K], gl.bfloat16))
        for j in gl.static_range(SMEM_STEPS):
            _weight_to_shared(w_desc, s_desc, w_ring, s_ring, bars, w_bf16, j, lo, n_steps, n0, K_STEPS, STAGES,
                              BF16_MUL)
    if USE_PDL:
        tl.extra.cuda.gdc_wait()
        if PARTIALS:
            # After the wait: every kernel before this one is done, so the QKV epilogue kernel may read its
            # inputs (positions, cos/sin, slots) before its own wait (qkv_epilogue's INPUTS_BEFORE_WAIT, set
            # for this kernel's partials only: moving this trigger before the wait would race those reads).
            tl.extra.cuda.gdc_launch_dependents()
    if A_STREAM:
        for j in gl.static_range(STAGES):
            _issue_activation(x_desc, xt_desc, x_smem, xt_smem, x_bars, j, lo + j, j < n_steps, TAIL)
    else:
        _issue_activations(x_desc, xs_desc, x_smem, xs_smem, x_bars, lo, n_steps, MP, MAX_STEPS, A_BF16, A_DEQ)
    # The early register steps while the activations are in flight: where the previous kernel has already ended,
    # waiting for the first weight stage before the copies were issued put the activations behind the weight
    # stream (docs/benchmarks-log.md runs 307-309). The SMEM_STEPS above still wait for their stages first.
    if EARLY_STEPS >= 1:
        a = _weight_operand(w_desc, s_desc, w_ring, s_ring, bars, SMEM_STEPS, lo, n_steps, n0, K_STEPS, STAGES,
                            a_layout, BF16_MUL)
    if EARLY_STEPS == 2:
        a_next = _weight_operand(w_desc, s_desc, w_ring, s_ring, bars, 1, lo, n_steps, n0, K_STEPS, STAGES, a_layout,
                                 BF16_MUL)
    if not A_STREAM:
        _finish_activations(x_desc, x_smem, xs_smem, x_bars, n_steps, MP, MAX_STEPS, A_BF16, A_DEQ, num_warps)
    fence_async_shared()  # the generic-proxy stores above are read by wgmma (async proxy)
    gl.thread_barrier()

    acc = gl.zeros([BN, MA], gl.float32, mma)
    acc_t = gl.zeros([BN, TW], gl.float32, mma_t)  # the tail's sums (TAIL 0: unused)
    for j in gl.static_range(SMEM_STEPS):  # both operands K-permuted, as in the register steps
        if j < n_steps:
            acc = warpgroup_mma(w_bf16.index(j), _activation_step(x_smem, x_bars, j, MP, A_DEQ, A_STREAM, STAGES),
                                acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
    if EARLY_STEPS == 0:
        a = _weight_operand(w_desc, s_desc, w_ring, s_ring, bars, SMEM_STEPS, lo, n_steps, n0, K_STEPS, STAGES,
                            a_layout, BF16_MUL)
    # Software-pipelined: the MMA of step i runs while the weights of the next step not yet converted are
    # loaded (not converted: ptxas waits for the MMA first, see the module docstring).
    if EARLY_STEPS < 2:
        for i in range(SMEM_STEPS, n_steps):
            acc = warpgroup_mma(a, _activation_step(x_smem, x_bars, i, MP, A_DEQ, A_STREAM, STAGES), acc,
                                is_async=True)
            if TAIL > 0:  # the same weights against the tail's tokens (its copy landed on the same barrier)
                acc_t = warpgroup_mma(gl.convert_layout(a, at_layout, assert_trivial=True),
                                      xt_smem.index(i % STAGES).permute((1, 0)), acc_t, is_async=True)
            a_next = _weight_operand(w_desc, s_desc, w_ring, s_ring, bars, i + 1, lo, n_steps, n0, K_STEPS,
                                     STAGES, a_layout, BF16_MUL)
            if TAIL > 0:
                acc, acc_t, a = warpgroup_mma_wait(num_outstanding=0, deps=(acc, acc_t, a))
            else:
                acc, a = warpgroup_mma_wait(num_outstanding=0, deps=(acc, a))  # a: kept until its MMA is done
            _refill_activation(x_desc, xt_desc, x_smem, xt_smem, x_bars, i, lo, n_steps, A_STREAM, STAGES, TAIL)
            a = a_next
    else:
        for i in range(n_steps):
            acc = warpgroup_mma(a, _activation_step(x_smem, x_bars, i, MP, A_DEQ, A_STREAM, STAGES), acc,
                                is_async=True)
            a_after_next = _weight_operand(w_desc, s_desc, w_ring, s_ring, bars, i + 2, lo, n_steps, n0, K_STEPS,
                                           STAGES, a_layout, BF16_MUL)
            acc, a = warpgroup_mma_wait(num_outstanding=0, deps=(acc, a))
            _refill_activation(x_desc, xt_desc, x_smem, xt_smem, x_bars, i, lo, n_steps, A_STREAM, STAGES, TAIL)
            a = a_next
            a_next = a_after_next

    store_tile(acc, acc_t, out_ptr, ws_ptr, counter_ptr, tile, kid, n0, 0, M, N, stride_om, BN, MP, TAIL, SPLIT_K,
               COMBINE, PARTIALS, COMBINERS, num_warps)


def bf16_mul_exact(facts: ByteFacts | None) -> bool:
    """Whether BF16 multiplies (``BF16_MUL``) dequantize every block of a weight with these
    :meth:`seam.MXFP8Weight.byte_facts` exactly: no NaN codes and no scale byte above
    :data:`seam.kernels.numerics.SCALED_BF16_MAX_SCALE` (None, facts unknown: no)."""
    return facts is not None and not facts.nan_codes and facts.max_scale <= SCALED_BF16_MAX_SCALE.value


@functools.cache
def tile_layout(rows: int, bf16: bool) -> gl.NVMMASharedLayout:
    """Shared layout of a [rows, BLOCK_K] TMA tile (built once: an eager call builds four descriptors)."""
    return gl.NVMMASharedLayout.get_default_for([rows, BLOCK_K.value], gl.bfloat16 if bf16 else gl.uint8)


#: Swizzled UE8M0 scales as rows of 16 bytes, copied one 128-row x 4-block chunk ([32, 16]) at a time.
_SCALE_LAYOUT = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=8, rank=2)


def scale_descriptor(scales: torch.Tensor) -> TensorDescriptor:
    return TensorDescriptor.from_tensor(scales.view(torch.uint8).reshape(-1, 16), [32, 16], _SCALE_LAYOUT)


def tma_ready(t: torch.Tensor) -> bool:
    """Whether TMA can read ``t`` as is: a 16-byte aligned base and, for a 2-D activation or weight,
    rows of unit column stride that neither repeat nor overlap, 16-byte aligned; for a swizzled
    scale buffer (any shape), contiguous bytes in whole 16-byte rows."""
    if t.data_ptr() % 16:
        return False
    if t.dtype == torch.uint8:  # UE8M0 scales: read as rows of 16 bytes
        return t.is_contiguous() and t.numel() % 16 == 0
    return (t.dim() == 2 and t.stride(1) == 1 and t.stride(0) >= t.shape[1]
            and (t.stride(0) * t.element_size()) % 16 == 0)


def operands_ready(xq: torch.Tensor, xs: torch.Tensor | None, wq: torch.Tensor, ws: torch.Tensor) -> bool:
    """Whether TMA reads every operand of a launch as is (:func:`tma_ready`; ``xs`` None: BF16 ``xq``)."""
    return all(tma_ready(t) for t in (xq, wq, ws) + (() if xs is None else (xs,)))


def launch_mxfp8_linear_wgmma(
    xq: torch.Tensor, xs: torch.Tensor | None, wq: torch.Tensor, ws: torch.Tensor, out: torch.Tensor,
    block_m: int, split_k: int, stages: int, work: torch.Tensor, counters: torch.Tensor, use_pdl: bool,
    combine: int, *, partials: bool = False, early_steps: int, smem_steps: int, combiners: int,
    a_deq: bool = False, bf16_mul: bool = False, a_stream: bool = False,
) -> None:
    """out[M, N] = bf16(A_deq @ W_deq^T) on a Hopper GPU, for validated operands that :func:`tma_ready`
    accepts (``xs`` None: ``xq`` is BF16, quantized in the kernel; with ``a_deq`` it is A_deq already in this
    kernel's K order, ``seam.formats.a_deq``). ``block_m``: M padded to 8, 16, 32, 64 or (with ``a_stream``) 72, 80,
    96 (64 + tail, :data:`TAIL_TILES`, ``early_steps`` <= 1) or 128; ``stages``: the ring depth (<=
    :func:`max_stages`; with ``a_stream``, where :func:`shared_bytes` with ``a_stream`` fits :data:`SHARED_BUDGET`);
    ``work`` / ``counters``: the split-K scratch (unused at ``split_k`` 1); ``combine``: partials the combining
    program loads per round trip; ``early_steps``: weight steps loaded into registers once the activations'
    copies are issued, 0, 1 or 2 (:func:`seam.kernels.wgmma_config.wgmma_early_steps`); ``smem_steps``: weight
    steps converted into shared memory before the wait, 0, 1 or 2, ahead of those (``early_steps`` then at most 1;
    :func:`~seam.kernels.wgmma_config.wgmma_smem_steps`); ``combiners``: programs per tile that combine its
    partials, a power of two <= min(split_k, 16) (:func:`~seam.kernels.wgmma_config.wgmma_combiners`).
    With ``partials`` ``out`` and ``counters`` are unused: each program stores its fp32 partial in ``work`` (as
    [tiles, split_k, block_m, 128], split 1 too) and none combines them: the fused QKV op's epilogue kernel
    (``seam.kernels.qkv_epilogue``) or, where ``mxfp8_linear``'s rule sums them apart, ``seam.kernels.split_k_sum``
    sums them in split order, as the combine would.
    ``bf16_mul``: dequantize the weight tiles by BF16 multiplies
    (:func:`~seam.kernels.wgmma_config.wgmma_bf16_mul`), for a weight :func:`bf16_mul_exact` accepts.
    ``a_stream`` (with ``a_deq``, ``smem_steps`` 0): the A_deq steps stream through ``stages`` slots beside the
    weight ring instead of all being resident (:func:`~seam.kernels.wgmma_config.wgmma_a_stream`; same bytes).

    Raises:
        ValueError: ``early_steps``, ``smem_steps`` or ``combiners`` out of range
            (:func:`seam.kernels.wgmma_combine.check_combiners`), ``a_deq`` with scales, ``block_m`` not in
            :data:`BLOCK_MS`, M above ``block_m``, ``a_stream`` without ``a_deq`` or with ``smem_steps``, ``block_m``
            above 64 without ``a_stream``, or a 64 + tail ``block_m`` with ``early_steps`` 2."""
    if early_steps not in (0, 1, 2):
        raise ValueError(f"early_steps must be 0, 1 or 2, got {early_steps}")
    if smem_steps not in (0, 1, 2) or (smem_steps and early_steps == 2):
        raise ValueError(f"smem_steps must be 0, 1 or 2, and 0 where early_steps is 2; got smem_steps "
                         f"{smem_steps} with early_steps {early_steps}")
    check_combiners(combiners, split_k)
    if a_deq and xs is not None:
        raise ValueError("a_deq takes the dequantized BF16 activations, without scales")
    if a_stream and not (a_deq and smem_steps == 0):
        raise ValueError(f"a_stream streams A_deq and takes no smem_steps; got a_deq {a_deq}, smem_steps {smem_steps}")
    if block_m not in BLOCK_MS:
        raise ValueError(f"block_m must be one of {BLOCK_MS}, got {block_m}")
    if block_m > 64 and not a_stream:
        raise ValueError(f"block_m {block_m} streams its activations (a_stream): they do not fit resident")
    if block_m in TAIL_TILES and early_steps == 2:
        raise ValueError(f"block_m {block_m} (64 + tail) takes early_steps 0 or 1, got 2")
    m, k = xq.shape
    if m > block_m:  # one program per N tile and split: the rows past block_m would be left unwritten
        raise ValueError(f"M={m} exceeds block_m {block_m}: this kernel runs one token tile")
    n = wq.shape[0]
    bk = BLOCK_K.value
    w_desc = TensorDescriptor.from_tensor(wq.view(torch.uint8), [BLOCK_N.value, bk], tile_layout(BLOCK_N.value, False))
    s_desc = scale_descriptor(ws)
    a_bf16 = xs is None
    tail = tail_tokens(block_m)
    if a_bf16:
        x_desc = TensorDescriptor.from_tensor(xq, [block_m - tail, bk], tile_layout(block_m - tail, True))
        xs_desc = s_desc  # unused
    else:
        x_desc = TensorDescriptor.from_tensor(xq.view(torch.uint8), [block_m, bk], tile_layout(block_m, False))
        xs_desc = scale_descriptor(xs)
    xt_desc = TensorDescriptor.from_tensor(xq, [tail, bk], tile_layout(tail, True)) if tail else x_desc
    grid = (triton.cdiv(n, BLOCK_N.value) * split_k,)
    mxfp8_linear_wgmma_kernel[grid](
        w_desc, s_desc, x_desc, xt_desc, xs_desc, out, work, counters, m, n, out.stride(0),
        K=k, MP=block_m, SPLIT_K=split_k, STAGES=stages, A_BF16=a_bf16 and not a_deq, A_DEQ=a_deq, USE_PDL=use_pdl,
        COMBINE=combine, PARTIALS=partials, EARLY_STEPS=early_steps, SMEM_STEPS=smem_steps,
        COMBINERS=combiners, BF16_MUL=bf16_mul, A_STREAM=a_stream, TAIL=tail, num_warps=NUM_WARPS,
        launch_pdl=use_pdl,
    )
