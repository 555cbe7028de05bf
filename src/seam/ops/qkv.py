"""Public QKV+indexer projection with fused norm / RoPE / NVFP4-KV epilogue (``docs/spec/qkv_epilogue.md``).

Also the pieces around it: the epilogue alone on a given accumulator (the test entry
and the unfused chain's Triton epilogue; the chain itself is ``seam.bench.qkv.qkv_unfused``),
and the warmup that compiles every tile configuration before serving.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Optional

import torch

from seam import checks, runtime
from seam.formats.mxfp8 import UE8M0_DTYPES, check_swizzled_scales, mxfp8_scale_numel
from seam.formats.nvfp4 import (
    HEAD_DIM,
    NKV_CHOICES,
    TOKEN_BYTES,
    check_nkv,
    empty_index_cache,
    empty_kv_cache,
    f32_reciprocal,
)
from seam.kernels.mxfp8_gemm_config import GEMV_TILE, Tile, covers, pick_qkv_tile
from seam.kernels.qkv_config import (
    STAGED_MAX_ROWS_PER_WARP,
    STAGED_NVFP4_MAX_ROWS,
    epilogue_tile,
    stages_nvfp4_rows,
    workspace_floats,
)
from seam.kernels.qkv_epilogue import launch_qkv_epilogue, qkv_scratch
from seam.ops.a_deq import check_a_deq, check_a_deq_bytes, resolve_a_deq
from seam.ops.linear import check_tile, gemm_flops
from seam.ops.registry import register


def _launch(
    xq: Optional[torch.Tensor],
    xsf: Optional[torch.Tensor],
    wq: Optional[torch.Tensor],
    wsf: Optional[torch.Tensor],
    acc: Optional[torch.Tensor],
    positions: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    q_norm_weight: torch.Tensor,
    k_norm_weight: torch.Tensor,
    index_q_norm_weight: torch.Tensor,
    index_k_norm_weight: torch.Tensor,
    eps: float,
    slot_mapping: torch.Tensor,
    index_slot_mapping: torch.Tensor,
    kv_cache: torch.Tensor,
    index_cache: torch.Tensor,
    index_q_out: torch.Tensor,
    q_out: Optional[torch.Tensor],
    q_fp8_out: Optional[torch.Tensor],
    inv_q_fp8_scale: float,
    inv_k_scale: float,
    inv_v_scale: float,
    nkv: int,
    block_m: int,
    block_n: int,
    block_k: int,
    num_warps: int,
    num_stages: int,
    split_k: int,
    max_registers: Optional[int],
    f16_operands: bool,
    wgmma: bool,
    bf16_mm: bool,
    warp_specialized: bool,
    a_deq: Optional[torch.Tensor],
    pick: bool,
) -> None:
    launch_qkv_epilogue(
        xq=xq, xsf=xsf, wq=wq, wsf=wsf, acc=acc,
        positions=positions, cos_sin_cache=cos_sin_cache,
        norm_weights=(q_norm_weight, k_norm_weight, index_q_norm_weight, index_k_norm_weight),
        eps=eps, slot_mapping=slot_mapping, index_slot_mapping=index_slot_mapping,
        kv_cache=kv_cache, index_cache=index_cache, index_q_out=index_q_out,
        q_out=q_out, q_fp8_out=q_fp8_out,
        inv_scales=(inv_q_fp8_scale, inv_k_scale, inv_v_scale),
        nkv=nkv,
        # A custom op takes no Tile: its fields travel as Tile.to_args(), a caller's override; with pick (none) the
        # launch picks the tile for M, at call time, so a traced graph runs at any M without guards on it
        tile=None if pick else Tile.from_args(block_m, block_n, block_k, num_warps, num_stages, split_k, max_registers,
                                              f16_operands, wgmma, bf16_mm, warp_specialized),
        a_deq=a_deq,
    )


# the GEMM's FLOPs where it runs (xq given); the epilogue alone on a given accumulator counts 0, as torch's norms do
_qkv = register("qkv_index_fused_epilogue", ("kv_cache", "index_cache", "index_q_out", "q_out", "q_fp8_out"), _launch,
                flops=gemm_flops)


def nkv_from_n(n: int, name: str = "wq.shape[0]") -> int:
    """KV heads per rank from N = (19*nkv + 1)*128; ValueError unless nkv is 1, 2 or 4."""
    nkv = (n // HEAD_DIM - 1) // 19
    if nkv not in NKV_CHOICES or (19 * nkv + 1) * HEAD_DIM != n:
        raise ValueError(
            f"{name} (N) must be (19*nkv + 1)*128 with nkv in {{1, 2, 4}} (2560, 4992 or 9856), got {n}"
        )
    return nkv


def _check_epilogue(
    m: int,
    nkv: int,
    device: torch.device,
    positions,
    cos_sin_cache,
    norm_weights,
    eps,
    slot_mapping,
    index_slot_mapping,
    kv_cache,
    index_cache,
    index_q_out,
    q_out,
    q_fp8_out,
    scales,
    operands: list[tuple[str, torch.Tensor]],
) -> tuple[float, tuple[float, float, float]]:
    """Validate everything but the GEMM operands; returns (eps, host fp32 reciprocals of the scales).

    ``operands`` (the GEMM operands or the given accumulator) are inputs the outputs must not overlap.
    """
    for name, t in (("positions", positions), ("slot_mapping", slot_mapping), ("index_slot_mapping", index_slot_mapping)):
        checks.tensor(name, t, dtype=torch.int64, shape=(m,), device=device)
    checks.tensor("cos_sin_cache", cos_sin_cache, dtype=torch.bfloat16, shape=(-1, 64), device=device)
    if cos_sin_cache.shape[0] < 1:
        raise ValueError("cos_sin_cache must have at least one position (shape [max_pos, 64], max_pos >= 1)")
    for name, w in zip(("q_norm_weight", "k_norm_weight", "index_q_norm_weight", "index_k_norm_weight"), norm_weights):
        checks.tensor(name, w, dtype=torch.bfloat16, shape=(HEAD_DIM,), device=device)
    eps = checks.finite_float("eps", eps)
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    inv = []
    for name, s in zip(("q_fp8_scale", "k_scale", "v_scale"), scales):
        v = checks.finite_float(name, s, positive=True)
        # s and its fp32 reciprocal normal: the GPU flushes subnormal operands to zero
        if not 2.0**-126 <= v <= 2.0**126:
            raise ValueError(f"{name} must be in [2^-126, 2^126] (fp32 normal, with a normal reciprocal), got {v}")
        inv.append(f32_reciprocal(v))
    if q_out is None and q_fp8_out is None:
        raise ValueError("no q output: pass q_out and/or q_fp8_out")
    qn = 16 * nkv * HEAD_DIM
    if q_out is not None:
        checks.tensor("q_out", q_out, dtype=torch.bfloat16, shape=(m, qn), device=device, written=True)
    if q_fp8_out is not None:
        checks.tensor("q_fp8_out", q_fp8_out, dtype=torch.float8_e4m3fn, shape=(m, qn), device=device,
                      written=True)
    checks.tensor("index_q_out", index_q_out, dtype=torch.float8_e4m3fn, shape=(m, nkv * HEAD_DIM), device=device,
                  written=True)

    checks.tensor("kv_cache", kv_cache, dtype=torch.uint8, device=device, contiguous=False, written=True)
    if kv_cache.dim() != 4 or kv_cache.shape[1] != 2 * nkv or kv_cache.shape[3] != TOKEN_BYTES:
        raise ValueError(f"kv_cache must have shape [num_blocks, {2 * nkv}, block_size, 72], got {list(kv_cache.shape)}")
    block_size = kv_cache.shape[2]
    if block_size <= 0 or block_size % 4:
        raise ValueError(f"block_size (kv_cache.shape[2]) must be a positive multiple of 4, got {block_size}")
    if kv_cache.stride()[1:] != (block_size * TOKEN_BYTES, TOKEN_BYTES, 1):
        raise ValueError(
            f"kv_cache pages must be packed inside (strides [*, {block_size * TOKEN_BYTES}, {TOKEN_BYTES}, 1]), "
            f"got {list(kv_cache.stride())}"
        )
    checks.tensor("index_cache", index_cache, dtype=torch.uint8, device=device, contiguous=False, written=True)
    if index_cache.dim() != 3 or tuple(index_cache.shape[1:]) != (block_size, TOKEN_BYTES):
        raise ValueError(
            f"index_cache must have shape [num_blocks, {block_size}, 72] (block_size of kv_cache), "
            f"got {list(index_cache.shape)}"
        )
    if index_cache.stride()[1:] != (TOKEN_BYTES, 1):
        raise ValueError(f"index_cache pages must be packed inside (strides [*, 72, 1]), got {list(index_cache.stride())}")
    for name, c in (("kv_cache", kv_cache), ("index_cache", index_cache)):
        if c.shape[0] < 1:
            raise ValueError(f"{name} must have at least one block")
        # fake tensors have no address while traced; the eager call checks it
        if (not runtime.tracing() and c.data_ptr() % 32) or c.stride(0) % 32:
            raise ValueError(
                f"{name} must be 32-byte aligned with a page stride that is a multiple of 32 "
                f"(data_ptr % 32 = {c.data_ptr() % 32}, stride(0) = {c.stride(0)})"
            )
        if c.shape[0] > 1 and c.stride(0) < c[0].numel():  # pages that overlap: two blocks would share bytes
            raise ValueError(f"{name} pages must not overlap: a page stride of at least {c[0].numel()} bytes, "
                             f"got stride(0) = {c.stride(0)}")

    def span(t):
        # bytes a cache may touch: from its first to past its last page
        return t.as_strided(((t.shape[0] - 1) * t.stride(0) + t[0].numel(),), (1,)) if t is not None else None

    if runtime.debug_checks(device):
        _check_index_ranges(positions, cos_sin_cache.shape[0], slot_mapping, index_slot_mapping, kv_cache, index_cache)
    checks.outputs_apart(
        [("kv_cache", span(kv_cache)), ("index_cache", span(index_cache)), ("index_q_out", index_q_out),
         ("q_out", q_out), ("q_fp8_out", q_fp8_out)],
        [*operands, ("positions", positions), ("cos_sin_cache", cos_sin_cache), ("slot_mapping", slot_mapping),
         ("index_slot_mapping", index_slot_mapping),
         *((f"{role}_norm_weight", w) for role, w in zip(("q", "k", "index_q", "index_k"), norm_weights))],
    )
    return eps, tuple(inv)


def _check_index_ranges(positions, max_pos, slot_mapping, index_slot_mapping, kv_cache, index_cache) -> None:
    """``SEAM_DEBUG`` only (a host sync). Without it the kernel contains out-of-range indices (no
    out-of-bounds access) but cannot report them, nor a repeated slot (its tokens race for the entry)."""
    checks.elements_in_range("positions", positions, 0, max_pos - 1, " (cos_sin_cache rows)")
    for name, slots, cache in (("slot_mapping", slot_mapping, kv_cache), ("index_slot_mapping", index_slot_mapping,
                                                                          index_cache)):
        capacity = cache.shape[0] * cache.shape[-2]
        checks.elements_in_range(name, slots, -1, capacity - 1, f" (-1 skips; num_blocks * block_size = {capacity})")
        used, counts = slots[slots >= 0].unique(return_counts=True)
        if (counts > 1).any():  # two tokens writing one slot race
            raise ValueError(f"{name} must not repeat a slot (-1 aside), got slot {int(used[counts > 1][0])} "
                             f"more than once")


def _scales_bytes(name: str, s: object, rows: int, k: int, device: torch.device) -> torch.Tensor:
    checks.tensor(name, s, dtype=UE8M0_DTYPES, device=device)
    check_swizzled_scales(name, s, rows, k, None)
    return s.view(torch.uint8)


def qkv_index_fused_epilogue(
    xq: torch.Tensor,
    xsf: torch.Tensor,
    wq: torch.Tensor,
    wsf: torch.Tensor,
    positions: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    q_norm_weight: torch.Tensor,
    k_norm_weight: torch.Tensor,
    index_q_norm_weight: torch.Tensor,
    index_k_norm_weight: torch.Tensor,
    eps: float,
    *,
    slot_mapping: torch.Tensor,
    index_slot_mapping: torch.Tensor,
    kv_cache: torch.Tensor,
    index_cache: torch.Tensor,
    index_q_out: torch.Tensor,
    q_out: torch.Tensor | None = None,
    q_fp8_out: torch.Tensor | None = None,
    q_fp8_scale: float = 1.0,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
    tile: Tile | None = None,
    a_deq: torch.Tensor | None = None,
) -> None:
    """MXFP8 QKV+indexer GEMM with the Gemma-norm / RoPE / NVFP4-insert epilogue fused.

    ``acc = A_deq @ W_deq^T`` (fp32), per token m and 128-wide
    head of N = (19*nkv + 1)*128 columns ``[q x 16nkv | k x nkv | v x nkv | index_q x nkv | index_k]``:

    - q, k, index_q, index_k: ``r = 1/sqrt(tree(x^2)/128 + eps)``, ``n = x*r``,
      ``x = n + n*f32(w_role)``; then NeoX RoPE on dims [0, 64) at ``positions[m]``
      (``cos_sin_cache[pos]`` = cos | sin); v is left raw.
    - q -> ``q_out`` = bf16(x) and/or ``q_fp8_out`` = e4m3_sat(x * f32(1/q_fp8_scale));
      index_q -> ``index_q_out`` = e4m3_sat(x);
      k -> NVFP4 into ``kv_cache[b, 2h]`` (linear scales, global scale k_scale),
      v -> ``kv_cache[b, 2h+1]`` (quad-swizzled scales, v_scale), index_k ->
      ``index_cache[b]`` (linear scales, scale 1), with b = slot // block_size and
      token slot % block_size of ``slot_mapping`` / ``index_slot_mapping``; slot -1 skips.

    The epilogue is bit-identical to :func:`seam.ref.qkv.qkv_epilogue_ref` on the same
    accumulator for positions in [0, max_pos) (outside it the kernel rotates with zeros, the reference
    does not: keep them in range); the accumulator is within fp32 reordering error of the dequantized GEMM (whose
    operands pass through BF16 as ``mxfp8_linear``'s do but on the one-token GEMV tile: exact for every value
    quantized BF16 rows give).
    Where ``mxfp8_linear`` would take a Gluon kernel (Hopper: decode M 2..64, one token at N >= 2560, M 65..128
    at K >= 2048 on its 64 + tail and 128-token tiles, its token tiles at 129..384, the ring kernel where the token
    tiles take more than a wave, its token tiles at 385..1024 where it takes them; the same tile here, but the prefill
    path above ``QKV_TOKEN_TILES_MAX_M``, 1024 tokens) or its prefill path (CUDA, M >= 65 otherwise),
    that GEMM writes ``acc`` (the Gluon kernels: split-K partials in the per-device workspace; the prefill path: fp32, 4 * M * N bytes of temporary memory) and the epilogue
    kernel reads it: two launches (PDL-chained). Elsewhere one kernel runs the tl GEMM mainloop and the
    epilogue on ``acc`` in registers.

    Args:
        xq: float8_e4m3fn [M, K] contiguous activation, K a multiple of 128. Not modified.
        xsf: xq's 128x4-swizzled UE8M0 scales, uint8 (or float8_e8m0fnu), contiguous, flat
            ``[mxfp8_scale_numel(M, K)]``.
        wq: float8_e4m3fn [N, K] contiguous (K-major) weight.
        wsf: wq's swizzled scales, flat ``[mxfp8_scale_numel(N, K)]``.
        positions: int64 [M], each in [0, max_pos) (checked only with ``SEAM_DEBUG=1``:
            reading it syncs; without it the kernel reads no cos/sin row for a position
            outside the range and rotates that token with zeros, never out of bounds).
        cos_sin_cache: BF16 [max_pos, 64] contiguous, max_pos >= 1: row p holds cos then
            sin (32 columns each, one per NeoX rotary frequency of dims [0, 64)) at position p.
        q_norm_weight, k_norm_weight, index_q_norm_weight, index_k_norm_weight: BF16 [128].
        eps: RMSNorm epsilon (>= 0, fp32 at use).
        slot_mapping, index_slot_mapping: int64 [M]; -1 skips, otherwise in
            [0, num_blocks * block_size) (checked only with ``SEAM_DEBUG=1``; without it the
            kernel skips any slot outside that range like -1, so it never writes past the
            cache) and distinct (two tokens writing one slot race; also checked only with
            ``SEAM_DEBUG=1``).
        kv_cache: uint8 [num_blocks, 2*nkv, block_size, 72], written in place; pages
            packed inside, any page stride that is a multiple of 32 and at least a page
            (2*nkv*block_size*72 bytes); 32-byte aligned; block_size a multiple of 4.
        index_cache: uint8 [num_blocks', block_size, 72], written in place; same rules, with the block_size of
            ``kv_cache`` (its num_blocks' may differ: ``index_slot_mapping`` is checked against its own size).
        index_q_out: float8_e4m3fn [M, nkv*128] contiguous, written.
        q_out: optional BF16 [M, 16*nkv*128] contiguous, written.
        q_fp8_out: optional float8_e4m3fn [M, 16*nkv*128] contiguous, written.
        q_fp8_scale, k_scale, v_scale: dequantization scales in [2^-126, 2^126] (so each
            and its fp32 reciprocal are normal numbers, which the GPU does not flush); Python floats, read at the
            call (so fixed in a captured CUDA graph: pass ``float(t)`` for an engine's scale tensor).
            ``q_fp8_scale`` applies to ``q_fp8_out`` only.
        tile: tile override (tests); default ``seam.kernels.mxfp8_gemm_config.pick_qkv_tile``:
            ``mxfp8_linear``'s Gluon or prefill tile where it picks one (at 129-384 tokens the warp-specialized
            kernel's token tiles or a wide tile of 136-256 tokens, the ring kernel's tile or the prefill path; at
            385-1024 its token tiles where ``mxfp8_linear`` takes them; the prefill path above), else a
            tl tile (BLOCK_M
            1, the CUDA-core GEMV, for one token; 16 to 128 otherwise), the K split by wave
            count on the SM count and a register cap; ``block_n`` must be 128 (one head). The kernel uses a per-device workspace
            (``seam.kernels.gemm_workspace.gemm_scratch``: split-K partials, multi-row
            NVFP4 staging): launches must be ordered on one stream, and it must exist
            before graph capture (:func:`qkv_warmup`, or one eager call at each M to be captured).
        a_deq: optional BF16 [M, K] contiguous: A_deq of ``xq`` / ``xsf`` (``seam.formats.a_deq``, as
            ``seam.ops.norm.gemma_norm_mxfp8_activation(..., a_deq=True)`` writes it beside its MXFP8 rows),
            which the Hopper GEMMs (the decode kernel at M 2..128 and one token at N >= 2560, its token tiles
            at 129-1024, the prefill path above from K 2048) read instead of dequantizing ``xq``; other paths ignore
            it (the ring kernel too). It must hold exactly those bytes (checked only with ``SEAM_DEBUG``: ValueError
            otherwise, before any launch). Not modified.

    Raises:
        TypeError: a tensor argument of the wrong type or dtype, a scalar not a float or int (a bool
            is refused), a tile (or its max_registers or f16_operands) of the wrong type.
        ValueError: N not (19*nkv + 1)*128 with nkv in {1, 2, 4}; K not a multiple of 128
            or mismatched; no q output; shapes, strides, devices, cache alignment,
            block_size, an empty cos_sin_cache, eps/scales out of range, overlapping
            outputs, outputs requiring grad while grad mode is on, tile sizes
            (``seam.ops.linear.check_tile``); with ``SEAM_DEBUG=1``
            positions or slots out of range.
        RuntimeError: the workspace would have to be allocated or grown during CUDA-graph
            capture (make an eager call or :func:`qkv_warmup` first).

    Spec: ``docs/spec/qkv_epilogue.md`` (Operands, Epilogue, NVFP4 paged caches, Exactness).
    """
    checks.tensor("xq", xq, dtype=torch.float8_e4m3fn)
    if xq.dim() != 2:
        raise ValueError(f"xq must be 2-D [M, K], got shape {list(xq.shape)}")
    device = checks.kernel_device("xq", xq)
    m, k = xq.shape
    checks.multiple_of("K (xq.shape[1])", k, 128)
    checks.tensor("wq", wq, dtype=torch.float8_e4m3fn, shape=(-1, -1), device=device)
    if wq.shape[1] != k:  # as mxfp8_linear says it: the two K, not one operand's shape
        raise ValueError(f"xq has K={k} but wq has K={wq.shape[1]}")
    nkv = nkv_from_n(wq.shape[0])
    xsf = _scales_bytes("xsf", xsf, m, k, device)
    wsf = _scales_bytes("wsf", wsf, wq.shape[0], k, device)
    norm_weights = (q_norm_weight, k_norm_weight, index_q_norm_weight, index_k_norm_weight)
    if a_deq is not None:
        checks.tensor("a_deq", a_deq, dtype=torch.bfloat16, shape=(m, k), device=device)
    eps, inv = _check_epilogue(
        m, nkv, device, positions, cos_sin_cache, norm_weights, eps, slot_mapping, index_slot_mapping,
        kv_cache, index_cache, index_q_out, q_out, q_fp8_out, (q_fp8_scale, k_scale, v_scale),
        [("xq", xq), ("xsf", xsf), ("wq", wq), ("wsf", wsf)] + ([("a_deq", a_deq)] if a_deq is not None else []),
    )
    tile = check_tile(tile, k, m, device)
    if tile is not None:
        _check_fused_tile(tile, m, k)
    if a_deq is not None:
        check_a_deq_bytes("a_deq", a_deq, xq, xsf)
    _qkv(
        xq, xsf, wq, wsf, None, positions, cos_sin_cache, *norm_weights, eps,
        slot_mapping, index_slot_mapping, kv_cache, index_cache, index_q_out, q_out, q_fp8_out, *inv, nkv,
        *(tile or GEMV_TILE).to_args(), a_deq, tile is None,  # no override: picked in the launch (GEMV_TILE unused)
    )


def _check_fused_tile(tile: Tile, m: int, k: int) -> None:
    """Refuse a caller's tile the fused launch cannot run at [m, k] (after :func:`check_tile`)."""
    if tile.block_n != 128:
        raise ValueError(f"tile.block_n must be 128 (one head), got {tile.block_n}")
    if not covers(tile, m, partials=True):  # the epilogue sums one M tile's partials
        raise ValueError(f"tile.wgmma needs M <= block_m here (any M warp-specialized), got M={m} and "
                         f"block_m={tile.block_m}")
    _check_staged_rows(tile)
    if k % tile.block_k:
        raise ValueError(f"tile.block_k={tile.block_k} must divide K={k} (the fused kernel has no K tail)")


def _check_staged_rows(tile: Tile) -> None:
    """Refuse a staging tile with more rows per warp than sm_90 compiled correctly (wrong cache bytes)."""
    if stages_nvfp4_rows(tile) and tile.block_m > STAGED_MAX_ROWS_PER_WARP * tile.num_warps:
        raise ValueError(
            f"tile: {tile.block_m} rows on {tile.num_warps} warps; tiles that stage NVFP4 rows (16 or "
            f"{STAGED_NVFP4_MAX_ROWS.value} rows here) take at most {STAGED_MAX_ROWS_PER_WARP} rows per warp (more "
            "wrote wrong NVFP4 cache bytes on sm_90: seam.kernels.qkv_config.STAGED_MAX_ROWS_PER_WARP)"
        )


def prepare_epilogue(
    acc: torch.Tensor,
    positions: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    q_norm_weight: torch.Tensor,
    k_norm_weight: torch.Tensor,
    index_q_norm_weight: torch.Tensor,
    index_k_norm_weight: torch.Tensor,
    eps: float,
    *,
    slot_mapping: torch.Tensor,
    index_slot_mapping: torch.Tensor,
    kv_cache: torch.Tensor,
    index_cache: torch.Tensor,
    index_q_out: torch.Tensor,
    q_out: torch.Tensor | None = None,
    q_fp8_out: torch.Tensor | None = None,
    q_fp8_scale: float = 1.0,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
    tile: Tile | None = None,
) -> Callable[[], None]:
    """Validate every argument of :func:`qkv_epilogue`; return its launch (nothing written yet), so a
    chain that first writes ``acc`` (``seam.bench.qkv.qkv_unfused``'s GEMM) checks everything before."""
    checks.tensor("acc", acc, dtype=(torch.float32, torch.bfloat16), contiguous=False)
    if acc.dim() != 2 or (acc.stride(1) != 1 and acc.shape[1] > 1):
        raise ValueError(f"acc must be 2-D [M, N] with unit column stride, got {list(acc.shape)} {acc.stride()}")
    device = checks.kernel_device("acc", acc)
    m, n = acc.shape
    nkv = nkv_from_n(n, "acc.shape[1]")
    norm_weights = (q_norm_weight, k_norm_weight, index_q_norm_weight, index_k_norm_weight)
    eps, inv = _check_epilogue(
        m, nkv, device, positions, cos_sin_cache, norm_weights, eps, slot_mapping, index_slot_mapping,
        kv_cache, index_cache, index_q_out, q_out, q_fp8_out, (q_fp8_scale, k_scale, v_scale),
        [("acc", acc)],
    )
    if isinstance(tile, Tile):  # no K here (the accumulator is given): a caller's K split does not apply
        tile = dataclasses.replace(tile, split_k=1)
    tile = check_tile(tile, 128)
    if tile is not None:
        _check_staged_rows(tile)
        tile = dataclasses.replace(tile, block_n=128)  # one head per program, whatever the caller's block_n
    return lambda: _qkv(
        None, None, None, None, acc, positions, cos_sin_cache, *norm_weights, eps,
        slot_mapping, index_slot_mapping, kv_cache, index_cache, index_q_out, q_out, q_fp8_out, *inv, nkv,
        *(tile or GEMV_TILE).to_args(), None, tile is None,  # no override: epilogue_tile(M) in the launch
    )


def qkv_epilogue(
    acc: torch.Tensor,
    positions: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    q_norm_weight: torch.Tensor,
    k_norm_weight: torch.Tensor,
    index_q_norm_weight: torch.Tensor,
    index_k_norm_weight: torch.Tensor,
    eps: float,
    *,
    slot_mapping: torch.Tensor,
    index_slot_mapping: torch.Tensor,
    kv_cache: torch.Tensor,
    index_cache: torch.Tensor,
    index_q_out: torch.Tensor,
    q_out: torch.Tensor | None = None,
    q_fp8_out: torch.Tensor | None = None,
    q_fp8_scale: float = 1.0,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
    tile: Tile | None = None,
) -> None:
    """The fused kernel's epilogue alone, on a given accumulator (same kernel code, GEMM replaced by a load).

    Formulas, outputs and the other arguments as :func:`qkv_index_fused_epilogue`.
    With an fp32 ``acc`` this is the bit-exactness test entry; with the BF16 output of
    :func:`seam.mxfp8_linear` it is the unfused chain's separate epilogue kernel.

    Args:
        acc: fp32 or BF16 [M, N], N = (19*nkv + 1)*128, unit column stride. Not modified.

    Raises:
        TypeError, ValueError, RuntimeError: as :func:`qkv_index_fused_epilogue`.
    """
    prepare_epilogue(
        acc, positions, cos_sin_cache, q_norm_weight, k_norm_weight, index_q_norm_weight, index_k_norm_weight, eps,
        slot_mapping=slot_mapping, index_slot_mapping=index_slot_mapping, kv_cache=kv_cache, index_cache=index_cache,
        index_q_out=index_q_out, q_out=q_out, q_fp8_out=q_fp8_out, q_fp8_scale=q_fp8_scale, k_scale=k_scale,
        v_scale=v_scale, tile=tile,
    )()


#: Largest ``max_tokens`` :func:`qkv_warmup` takes: it picks a tile at every M up to it (about 2 s at this
#: bound) and allocates the workspace the largest M needs (GBs here at nkv 4).
WARMUP_MAX_TOKENS = 1 << 17


def qkv_warmup(
    nkv: int,
    *,
    hidden_size: int = 6144,
    max_tokens: int = 8192,
    device: torch.device | str | None = None,
    has_q: bool = True,
    has_qfp8: bool = False,
    block_size: int = 64,
    a_deq: bool | str = "auto",
) -> list[Tile]:
    """Compile every tile configuration the fused kernel picks for 1..max_tokens tokens; returns them.

    Each runs once on a one-token dummy problem (slots -1, so no cache byte changes).
    M and block_size are not specialized on, so a serving step with the same (nkv,
    hidden_size K, has_q, has_qfp8) and M <= max_tokens never compiles (K is a
    compile-time constant of the kernel; nkv is not, but N sets the tiles' K split, which is:
    warm up with the nkv that will serve, docs/benchmarks-log.md run 52). Under the Triton interpreter (CPU) nothing
    compiles, so no dummy problem runs: the arguments are still checked and the tiles
    returned. Also allocates the per-device workspace (split-K partials, staged NVFP4 rows)
    that the fused kernel and :func:`seam.ops.qkv.qkv_epilogue` (the epilogue alone) need at any M <= max_tokens,
    so call it before capturing CUDA graphs. ``a_deq`` (True, "auto" or False, as the activations' producers take it,
    e.g. :func:`seam.allreduce_gemma_rms_norm_mxfp8`): each Gluon decode tile that such calls feed an
    A_deq (True: every one; "auto", the default: those picked at the M where the producers write it) also
    runs once on an A_deq, the kernel variant that reads it being compiled separately.

    Raises:
        TypeError: nkv, hidden_size, max_tokens or block_size not an int; has_q or has_qfp8 not a bool; a_deq
            neither a bool nor a string; device not a torch.device, str or int.
        ValueError: nkv not in {1, 2, 4}, no q output requested, hidden_size not a
            positive multiple of 128, max_tokens outside [1, :data:`WARMUP_MAX_TOKENS`], block_size not a
            positive multiple of 4, a device seam's kernels do not run on here, a_deq a string other than "auto".

    Spec: ``docs/spec/qkv_epilogue.md`` (Tile choice).
    """
    nkv = check_nkv(nkv)
    has_q, has_qfp8 = checks.flag("has_q", has_q), checks.flag("has_qfp8", has_qfp8)
    a_deq = check_a_deq(a_deq)
    hidden_size = checks.integer("hidden_size", hidden_size)
    max_tokens = checks.integer("max_tokens", max_tokens)
    block_size = checks.integer("block_size", block_size)
    if not (has_q or has_qfp8):
        raise ValueError("no q output: has_q and/or has_qfp8 must be True")
    checks.multiple_of("hidden_size", hidden_size, 128)
    if not 1 <= max_tokens <= WARMUP_MAX_TOKENS:
        raise ValueError(f"max_tokens must be in [1, {WARMUP_MAX_TOKENS}], got {max_tokens}")
    checks.multiple_of("block_size", block_size, 4)
    device = runtime.device_arg("device", device) if device is not None else runtime.kernel_device()
    n, k = (19 * nkv + 1) * HEAD_DIM, hidden_size
    picks = {m: pick_qkv_tile(m, n, k, device) for m in range(1, max_tokens + 1)}
    tiles = sorted(set(picks.values()), key=lambda t: tuple(0 if v is None else v for v in dataclasses.astuple(t)))

    if not runtime.INTERPRET:
        _run_once_each(tiles, nkv, k, device, has_q, has_qfp8, block_size, tiles_fed_a_deq(picks, a_deq, k, device))
    # the largest workspace any M needs (fused, or the separate epilogue), allocated now
    # rather than during a capture
    heads = n // HEAD_DIM
    floats = max(workspace_floats(m, t, heads) for m in picks for t in (picks[m], epilogue_tile(m)))
    qkv_scratch(device, floats)
    return tiles


def tiles_fed_a_deq(picks: dict[int, Tile], a_deq: bool | str, k: int, device: torch.device) -> set[Tile]:
    """The Gluon decode tiles among ``picks`` (M -> tile) that get an A_deq where the activations' producers
    take ``a_deq`` (:func:`seam.ops.a_deq.resolve_a_deq`)."""
    return {t for m, t in picks.items() if t.wgmma and t.reads_a_deq(k) and resolve_a_deq(a_deq, m, k, device)}


def _run_once_each(
    tiles: list[Tile], nkv: int, k: int, device: torch.device, has_q: bool, has_qfp8: bool, block_size: int,
    a_deq_tiles: frozenset[Tile] | set[Tile] = frozenset(),
) -> None:
    """Run the fused kernel once per tile on a one-token dummy problem (slots -1): compiles each; each of
    ``a_deq_tiles`` (Gluon decode tiles) once more on a zero A_deq."""
    m, n = 1, (19 * nkv + 1) * HEAD_DIM
    xq = torch.zeros((m, k), dtype=torch.float8_e4m3fn, device=device)
    xsf = torch.zeros(mxfp8_scale_numel(m, k), dtype=torch.uint8, device=device)
    wq = torch.zeros((n, k), dtype=torch.float8_e4m3fn, device=device)
    wsf = torch.zeros(mxfp8_scale_numel(n, k), dtype=torch.uint8, device=device)
    w = torch.ones(HEAD_DIM, dtype=torch.bfloat16, device=device)
    minus = torch.full((m,), -1, dtype=torch.int64, device=device)
    args = dict(
        slot_mapping=minus, index_slot_mapping=minus,
        kv_cache=empty_kv_cache(1, nkv, block_size, device), index_cache=empty_index_cache(1, block_size, device),
        index_q_out=torch.empty((m, nkv * HEAD_DIM), dtype=torch.float8_e4m3fn, device=device),
        q_out=torch.empty((m, 16 * nkv * HEAD_DIM), dtype=torch.bfloat16, device=device) if has_q else None,
        q_fp8_out=torch.empty((m, 16 * nkv * HEAD_DIM), dtype=torch.float8_e4m3fn, device=device) if has_qfp8 else None,
    )
    pos = torch.zeros(m, dtype=torch.int64, device=device)
    cs = torch.zeros((1, 64), dtype=torch.bfloat16, device=device)
    for tile in tiles:
        qkv_index_fused_epilogue(xq, xsf, wq, wsf, pos, cs, w, w, w, w, 1e-6, tile=tile, **args)
        if tile in a_deq_tiles:
            zeros = torch.zeros((m, k), dtype=torch.bfloat16, device=device)
            qkv_index_fused_epilogue(xq, xsf, wq, wsf, pos, cs, w, w, w, w, 1e-6, tile=tile, **args, a_deq=zeros)
