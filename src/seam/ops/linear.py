"""Public MXFP8 linear layer: ``out = bf16(A_deq @ W_deq^T)`` (``docs/spec/mxfp8.md``)."""

from __future__ import annotations

import dataclasses
import enum
from typing import Optional

import torch

from seam import checks, runtime
from seam.formats.activation import QuantizedActivation
from seam.formats.mxfp8 import ScaleLayout
from seam.formats.mxfp8_weight import MXFP8Weight, measure_byte_facts
from seam.kernels import mxfp8_mma_rows, mxfp8_wgmma, mxfp8_wgmma_ring, mxfp8_wgmma_ws, wgmma_config
from seam.kernels.gluon_launch import a_deq_readable, dequantizes_first
from seam.kernels.mxfp8_gemm import launch_mxfp8_linear
from seam.kernels.mxfp8_gemm_config import BF16_MM_TILE, GEMV_TILE, MMA_ROWS_TILE, Tile, pick_tile
from seam.kernels.mxfp8_quant import launch_mxfp8_quant
from seam.kernels.wgmma_config import RESIDENT_MAX_M
from seam.ops.a_deq import check_a_deq_bytes, resolve_a_deq
from seam.ops.mxfp8 import check_mxfp8_out
from seam.ops.registry import register


class LinearQuantize(str, enum.Enum):
    """Where :func:`mxfp8_linear` quantizes a BF16 activation: either place applies ``docs/spec/mxfp8.md``'s rule
    (Quantize one block), so the GEMM reads the same bytes at the same tile."""

    #: ``IN_GEMM`` at M <= :data:`IN_GEMM_MAX_M` and where a launch dequantizes A first (:func:`dequantizes_a`),
    #: else ``SEPARATE``
    AUTO = "auto"
    SEPARATE = "separate"  #: one ``seam.mxfp8_quantize`` launch, then the GEMM on E4M3 + scales
    IN_GEMM = "in_gemm"  #: the GEMM (or the launch dequantizing A before it) loads BF16 x and quantizes it

    @classmethod
    def parse(cls, value: "LinearQuantize | str", name: str = "quantize") -> "LinearQuantize":
        """The enum or its string value in any case (:func:`seam.checks.option`)."""
        return checks.option(cls, value, name)


#: The in-GEMM quantization carve-out: ``quantize="auto"`` quantizes inside the GEMM up to
#: this M. ``seam bench linear`` on the H200 (2026-11-29, MiniMax-M3.1 TP4 shapes, K 768 to
#: 6144): in_gemm / separate = 0.79-0.99 at every M in 2..16 on all four layers (gate_up,
#: down, o_proj, qkv) and 0.82-1.01 at M 1; 1.00-1.30 at every M in 32..128. Every N tile
#: re-quantizes its A tile; with 32/64-row tiles that work outgrows the saved launch and
#: E4M3 round trip. Both give the same bytes. With the one-token GEMV tile (same layers, M 1):
#: in_gemm / separate = 0.66-0.77 (2026-11-29), 0.77-0.91 with its 8-warp mainloop (2026-11-30).
#: With the pipelined 32-row tiles (2026-11-30) M 64 gives 0.89-1.02: o_proj still loses.
#: One token on the Gluon tile (N >= 2560, since 2026-12-02; log run 123, BF16 input quantized inside, us):
#: down 4.68, o_proj 7.53, qkv 8.65, against the GEMM alone on MXFP8 input 4.55 / 6.98 / 8.22 (a separate
#: quantizer launch costs more than the difference: 1.5-2 us, BENCHMARKS.md).
IN_GEMM_MAX_M = 16


#: What to do with MXFP8 rows passed as a bare tensor or as mxfp8_quantize's (values, scales) pair.
_WRAP_HINT = "; wrap E4M3 rows and their scales in seam.QuantizedActivation(values, scales)"


def dequantizes_a(tile: Tile, m: int, n: int, k: int, device: torch.device) -> bool:
    """Whether ``tile``'s path dequantizes the [m, k] activations in a launch before its GEMM (the ring kernel's,
    the prefill path's, and the decode kernel's where :func:`seam.kernels.gluon_launch.dequantizes_first` says),
    where ``quantize="auto"`` quantizes a BF16 x in that launch: once per element, so nothing is repeated per N
    tile, and one launch and the E4M3 copy fewer than a separate quantizer."""
    return (tile.wgmma and tile.ring) or tile.bf16_mm or dequantizes_first(tile, m, n, k, device, bf16_rows=True)


def _launch(
    x: torch.Tensor,
    xs: Optional[torch.Tensor],
    wq: torch.Tensor,
    ws: torch.Tensor,
    out: torch.Tensor,
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
    weight_bf16_mul: bool,
    pick: bool,
    quantize: str,
) -> None:
    # A custom op takes no Tile: its fields travel as Tile.to_args(), a caller's override; with pick (no override)
    # they are ignored and the tile is picked here. xs None: x is BF16, quantized as ``quantize`` (a LinearQuantize
    # value) says. a_deq: the QuantizedActivation's A_deq, or None. weight_bf16_mul: mxfp8_wgmma.bf16_mul_exact of
    # the weight. Every choice that depends on M is made here, at call time: a traced graph holds none, so it runs
    # at any M without guards on it (torch.compile with a dynamic M, engines that replay one graph at every M).
    m, k = x.shape
    n = wq.shape[0]
    mode = LinearQuantize(quantize)
    if pick:  # an A_deq TMA cannot read is ignored (launch_gluon): the 64-row tile picked as for rows without one
        # BF16 rows take the 16-row kernel (which reads MXFP8 rows) only where they are quantized by a launch anyway:
        # under "auto" the decode kernel quantizing them in the GEMM is faster (log run 273)
        tile = pick_tile(m, n, k, x.device, a_deq=a_deq_readable(a_deq),
                         mma_rows=xs is not None or mode is LinearQuantize.SEPARATE)
    else:
        tile = Tile.from_args(block_m, block_n, block_k, num_warps, num_stages, split_k, max_registers, f16_operands,
                              wgmma, bf16_mm, warp_specialized)
    if xs is None and (tile.mma_rows or not (mode is LinearQuantize.IN_GEMM or (
            mode is LinearQuantize.AUTO and (m <= IN_GEMM_MAX_M or dequantizes_a(tile, m, n, k, x.device))))):
        values, scales = check_mxfp8_out(None, m, k, ScaleLayout.SWIZZLED, x.device)  # allocated: what the GEMM reads
        launch_mxfp8_quant(x, values, scales, True)
        x, xs = values, scales
    launch_mxfp8_linear(x, xs, wq, ws, out, tile, a_deq, weight_bf16_mul)


def gemm_flops(x: list[int] | None, xs, wq: list[int], *rest, **kwargs) -> int:
    """2 M N K, from the shapes of ``x`` [M, K] and ``wq`` [N, K] (0 without ``x``: no GEMM)."""
    return 0 if x is None else 2 * x[0] * x[1] * wq[0]


_linear = register("mxfp8_linear", ("out",), _launch, flops=gemm_flops)


#: Most token tiles a warp-specialized tile override may run (CUDA's limit on a grid's second axis).
MAX_TOKEN_TILES = 65535
#: Largest block_m, block_n and block_k of a tl tile override (the pickers' largest: 128).
TL_TILE_MAX = 256
#: Deepest K pipeline of a tl tile override (the pickers' deepest: 4).
TL_MAX_STAGES = 8


def _check_wgmma_tile(tile: Tile, m: int, k: int, device: torch.device) -> None:
    """Validate a caller's Gluon-kernel tile (``tile.wgmma``) for an [m, k] activation on ``device``."""
    if not wgmma_config.wgmma_supported(device):  # through the module: one binding to patch in tests
        raise ValueError(f"tile.wgmma needs a Hopper GPU (sm_90) without the interpreter; the activation is on "
                         f"{device}")
    if tile.block_n == mxfp8_mma_rows.BLOCK_N.value:  # the 16-row kernel: one shape of tile per K
        block_m = tile.block_m if tile.block_m in mxfp8_mma_rows.BLOCK_MS else MMA_ROWS_TILE.block_m
        if k <= 0 or k % 128 or mxfp8_mma_rows.shared_bytes(k, block_m=block_m) > mxfp8_wgmma.SHARED_BUDGET:
            raise ValueError(f"tile.wgmma with block_n={tile.block_n} (the 16-row kernel) needs K a multiple of 128 "
                             f"whose program fits shared memory, got K={k}")
        want = dataclasses.replace(MMA_ROWS_TILE, block_m=block_m, num_warps=mxfp8_mma_rows.warps_for(k))
        if tile != want or m > tile.block_m:
            raise ValueError(f"tile.wgmma with block_n={tile.block_n} (the 16-row kernel) must be {want} (block_m one "
                             f"of {mxfp8_mma_rows.BLOCK_MS}) at K={k}, M <= block_m; got {tile} at M={m}")
        return
    # a warp-specialized tile runs ceil(M / block_m) token tiles (pick_token_tiles); the plain decode kernel one
    if not (tile.block_m in mxfp8_wgmma.BLOCK_MS and m <= tile.block_m
            or tile.warp_specialized and tile.block_m in mxfp8_wgmma_ws.BLOCK_MS or tile.block_m == 256):
        raise ValueError(f"tile.wgmma needs block_m in {mxfp8_wgmma.BLOCK_MS} and >= M={m} (the decode kernel; "
                         f"any M warp-specialized), or 256 (the ring kernel), or one of {mxfp8_wgmma_ws.WIDE_TILES} "
                         f"warp-specialized, got {tile.block_m}")
    if tile.warp_specialized and -(-m // tile.block_m) > MAX_TOKEN_TILES:  # the launch grid's axis 1
        raise ValueError(f"tile.warp_specialized takes at most {MAX_TOKEN_TILES} token tiles of block_m "
                         f"{tile.block_m}, got M={m}")
    if (tile.block_n, tile.block_k, tile.num_warps) != (128, 128, 8):
        raise ValueError("tile.wgmma needs block_n=128, block_k=128, num_warps=8 (or block_n=16: the 16-row kernel), "
                         f"got {tile.block_n}, {tile.block_k}, {tile.num_warps}")
    if k % 128:
        raise ValueError(f"tile.wgmma needs K a multiple of 128, got K={k}")
    if not 1 <= tile.split_k <= k // 128:
        raise ValueError(f"tile.wgmma needs split_k in [1, K/128={k // 128}], got {tile.split_k}")
    if tile.warp_specialized and tile.block_m not in mxfp8_wgmma_ws.BLOCK_MS:
        raise ValueError(f"tile.warp_specialized needs block_m in {mxfp8_wgmma_ws.BLOCK_MS}, got {tile.block_m}")
    # the ring kernel refills a stage after the MMA that reads it, so it needs a second stage to wait on
    streamed = tile.block_m > RESIDENT_MAX_M  # the decode kernel's 64 + tail and 128-token tiles
    if tile.ring:
        fewest, most = mxfp8_wgmma_ring.MIN_STAGES, mxfp8_wgmma_ring.max_stages(tile.block_m)
    elif tile.warp_specialized:  # A_deq streamed, whatever the tile
        fewest, most = 1, mxfp8_wgmma_ws.max_stages(tile.block_m, k, tile.split_k)
    else:
        fewest, most = 1, mxfp8_wgmma.max_stages(tile.block_m, k, tile.split_k, streamed=streamed)
    if not fewest <= tile.num_stages <= most:
        raise ValueError(f"tile.wgmma needs num_stages in [{fewest}, {most}] (shared memory) at block_m={tile.block_m}, "
                         f"K={k}, split_k={tile.split_k}, got {tile.num_stages}")
    if tile.max_registers is not None or tile.f16_operands:
        raise ValueError("tile.wgmma takes no max_registers and no f16_operands")


def check_tile(tile: object, k: int, m: int | None = None, device: torch.device | None = None) -> Tile | None:
    """Validate a caller's tile override for reduction length ``k`` (None: pick by wave count). A
    ``wgmma`` or ``bf16_mm`` tile needs the activation's ``m`` and ``device`` (``mxfp8_linear`` and the
    fused QKV op pass them; the epilogue alone, which runs no GEMM, does not, and rejects such tiles)."""
    if tile is None:
        return None
    if not isinstance(tile, Tile):
        raise TypeError(f"tile must be a seam.kernels.mxfp8_gemm_config.Tile or None, got {type(tile).__name__}")
    # sizes are Python or NumPy ints (as everywhere in seam), passed on as Python ints: Triton takes no other
    sizes = {name: checks.integer(f"tile.{name}", getattr(tile, name))
             for name in ("block_m", "block_n", "block_k", "num_warps", "num_stages", "split_k")}
    if tile.max_registers is not None:
        sizes["max_registers"] = checks.integer("tile.max_registers", tile.max_registers)
    # flags are Python or NumPy bools, passed on as Python bools
    flags = {name: checks.flag(f"tile.{name}", getattr(tile, name))
             for name in ("wgmma", "bf16_mm", "f16_operands", "warp_specialized")}
    if flags["warp_specialized"] and not flags["wgmma"]:
        raise ValueError("tile.warp_specialized needs tile.wgmma (a Gluon decode-kernel tile)")
    tile = dataclasses.replace(tile, **sizes, **flags)
    if tile.bf16_mm:
        if m is None:
            raise ValueError("tile.bf16_mm (the prefill path) applies to a GEMM launch only")
        if tile != BF16_MM_TILE:
            raise ValueError(f"a tile with bf16_mm must be seam.kernels.mxfp8_gemm_config.BF16_MM_TILE, got {tile}")
        return tile
    if tile.wgmma:
        if m is None or device is None:
            raise ValueError("tile.wgmma (the Gluon decode kernel) applies to a GEMM launch only")
        _check_wgmma_tile(tile, m, k, device)
        return tile
    # TL_TILE_MAX bounds each side: a [block_m, block_n] fp32 accumulator and the [block_n, block_k] weight tile
    # stay far below Triton's largest tensor (2^20 elements), and in reach of an SM's registers
    if tile.block_m != 1 and (not 16 <= tile.block_m <= TL_TILE_MAX or tile.block_m & (tile.block_m - 1)):
        raise ValueError(f"tile.block_m must be 1 (the GEMV mainloop) or a power of two in [16, {TL_TILE_MAX}], "
                         f"got {tile.block_m}")
    for name, least in (("block_n", 16), ("block_k", 32)):  # block_k: whole MXFP8 blocks
        v = getattr(tile, name)
        if not least <= v <= TL_TILE_MAX or v & (v - 1):
            raise ValueError(f"tile.{name} must be a power of two in [{least}, {TL_TILE_MAX}], got {v}")
    if tile.num_warps not in (1, 2, 4, 8, 16):
        raise ValueError(f"tile.num_warps must be 1, 2, 4, 8 or 16, got {tile.num_warps}")
    if not 1 <= tile.num_stages <= TL_MAX_STAGES:
        raise ValueError(f"tile.num_stages must be in [1, {TL_MAX_STAGES}], got {tile.num_stages}")
    if tile.split_k < 1:
        raise ValueError(f"tile.split_k must be >= 1, got {tile.split_k}")
    if tile.split_k > 1 and k % (tile.split_k * tile.block_k):
        raise ValueError(
            f"tile.split_k={tile.split_k} must be 1 or split K={k} into whole blocks of block_k={tile.block_k}"
        )
    if tile.max_registers is not None:
        if not 24 <= tile.max_registers <= 255:
            raise ValueError(f"tile.max_registers must be in [24, 255] (registers per thread), got {tile.max_registers}")
    if tile.f16_operands and tile.block_m == 1:
        raise ValueError("tile.f16_operands needs an MMA tile (block_m >= 16); the one-token GEMV has no operands")
    return tile


def _check_k(kx: int, k: int) -> None:
    """Refuse activations whose K is not the weight's (ValueError naming both)."""
    if kx != k:
        raise ValueError(f"x has K={kx} but weight has K={k}")


def mxfp8_linear(
    x: torch.Tensor | QuantizedActivation,
    weight: MXFP8Weight,
    *,
    out: torch.Tensor | None = None,
    tile: Tile | None = None,
    quantize: LinearQuantize | str = LinearQuantize.AUTO,
) -> torch.Tensor:
    """MXFP8 GEMM: ``out[m, n] = bf16_rne( sum_k A_deq[m, k] * W_deq[n, k] )``, fp32 accumulation.

    ``x`` [M, K] (BF16, or MXFP8 rows as a :class:`seam.QuantizedActivation`) times ``weight`` [N, K]
    (:class:`seam.MXFP8Weight`) gives BF16 [M, N]; K a multiple of 32. ``A_deq = e4m3 * 2^(s - 127)`` per
    32-element block (likewise W). Every path gives ``f32(A_deq) @ f32(W_deq)^T`` up to fp32 summation order,
    rounded to BF16 once; which kernel runs depends on M, K, N and the GPU (Paths, below).
    Spec: ``docs/spec/integration.md`` (QuantizedActivation, MXFP8 linear that accepts pre-quantized input),
    ``docs/spec/mxfp8.md`` (the quantization).

    Example::

        w = seam.MXFP8Weight.from_bf16(weight_bf16)                    # [N, K], once
        y = seam.mxfp8_linear(x_bf16, w)                               # [M, N] BF16
        y = seam.mxfp8_linear(seam.QuantizedActivation(values, scales), w)  # a fused kernel's MXFP8 rows

    Args:
        x: BF16 [M, K] (read in place where its column stride is 1; the row stride may exceed K), quantized as
            ``quantize`` says; as ``torch.nn.functional.linear`` takes it, also [..., K] of other than 2-D (1-D
            included): the leading dimensions are the tokens, flattened by ``reshape``, and the output is
            [..., N]. A copy is made where the strides need one (a strided last dimension, 2-D too). Or a :class:`seam.QuantizedActivation`
            with swizzled scales, used as is (its ``dtype`` does not change the output's, BF16; its ``a_deq``:
            below). Not modified.
        weight: :class:`seam.MXFP8Weight` [N, K] (``MXFP8Weight.from_bf16(w)``).
        out: optional BF16 [M, N] (x's leading dimensions, N) contiguous buffer, written in place.
        tile: launch tile override, for tests and tuning (below); None (default): the picker's.
        quantize: where a BF16 ``x`` is quantized (ignored for a QuantizedActivation): ``"auto"`` (default),
            ``"separate"`` or ``"in_gemm"`` (below). Byte-identical either way at the same tile; where the 16-row kernel
            takes MXFP8 rows (1-16 tokens at K 512 or 768, 2-8 at K 3072, 4096 or 6144), ``"auto"`` and ``"in_gemm"`` run
            the decode kernel instead (at K 768 faster than a quantize launch and that kernel): the same products in
            another fp32 summation order than the same rows passed as MXFP8 or with ``"separate"``.

    Returns:
        BF16 [M, N], or [..., N] for x [..., K] (``out`` when given).

    Raises:
        TypeError: x not a BF16 tensor / QuantizedActivation, weight not an MXFP8Weight,
            out not BF16, tile (or its max_registers or flags) of the wrong type,
            quantize not a str or :class:`LinearQuantize`.
        ValueError: shapes (K mismatch, K not a multiple of 32, a 0-d x), row-major activation scales, devices, strides,
            tile sizes, a split_k that does not divide K, a max_registers outside [24, 255], f16_operands on the
            one-token tile, a wgmma tile off a Hopper GPU or outside its sizes (shared memory included), a
            warp_specialized tile that is not a wgmma tile of 32-128 rows (32, 64, 72, 80, 96, 128) or a wide tile (136,
            144, 160, 192 or 256), a bf16_mm tile other than ``BF16_MM_TILE``, an unknown
            ``quantize``, or an ``out`` overlapping x or the weight, or requiring grad while grad mode is on (as
            torch's out= arguments; fine under ``torch.no_grad()``); with ``SEAM_DEBUG``, an ``x.a_deq`` that is
            not the A_deq of ``x``'s MXFP8 rows (``seam.ops.a_deq.check_a_deq_bytes``), or a weight whose byte
            facts (NaN codes present, the largest scale byte: :meth:`seam.MXFP8Weight.byte_facts`) changed since its
            record was built, by writes no version counter shows (other writes keep the facts and go unseen).
        RuntimeError: a split-K launch whose workspace would have to be allocated or
            grown during CUDA-graph capture (make an eager call at this M first).

    Special values:
        ``docs/spec/mxfp8.md`` steps 3-5: NaN elements quantize to +448 in a finite block, so a row with NaN
        gives finite output; a block holding +-inf gets scale byte 254 and E4M3 +448, whose A_deq 448 * 2^127 is
        inf in BF16, so that row's outputs are inf or NaN.

    Split-K workspace:
        Split-K launches share a per-device workspace: keep them on one stream, and make a first call at each M
        before CUDA-graph capture.

    A_deq:
        Where ``x`` carries ``a_deq``, the Gluon decode kernel (2-128 tokens and one at N >= 2560; its token
        tiles at 129-2048) and the prefill path (from K 2048, ``seam.kernels.mxfp8_dequant.PERMUTED_MIN_K``, where
        it then dequantizes the weight alone) read those BF16 rows, where their base is 16-byte aligned, instead of
        dequantizing the MXFP8 ones (same bytes at the same tile; other paths ignore it, the ring kernel at 129-256 on wide layers too). At 33-64 tokens an A_deq also changes the
        picked tile: at K >= 2048 where the one-wave K split is at most 6, the warp-specialized 64-row tile at that
        split; at K <= 1024 on layers of at least a sixth of the SMs in N tiles, the same tile unsplit
        (``seam.kernels.mxfp8_gemm_config.ws_whole_k``; without an A_deq it takes that tile at K <= 768 too, after
        a launch that writes one). Either may split K otherwise than the tile picked without one (then the bytes
        agree wherever the sums are exact, else within fp32 summation order).

    quantize:
        ``"separate"``: a :func:`seam.mxfp8_quantize` launch, then the GEMM; ``"in_gemm"``: the GEMM loads BF16
        tiles of x and quantizes each 32-wide block in registers with the same rule (the paths that dequantize A
        in a launch before the GEMM, :func:`dequantizes_a`: the ring and prefill paths, the decode kernel where it
        dequantizes first, quantize there: one launch, no E4M3 copy); ``"auto"``: ``"in_gemm"`` when
        M <= :data:`IN_GEMM_MAX_M` (16) and on those paths, else ``"separate"`` (the carve-out measured by
        ``seam bench linear`` on the H200, see docs/benchmarks-log.md). In the GEMM itself quantization saves a
        launch and the E4M3 round trip but repeats A's quantization once per 128-wide N tile, so there it only
        wins at small M.

    tile:
        None takes ``seam.kernels.mxfp8_gemm_config.pick_tile``'s (the paths by M below). A given tile is
        checked first: ``block_m`` 1 or a power of two >= 16, or for a ``wgmma`` tile (Hopper only) 8, 16, 32,
        64, 72, 80, 96 or 128 >= M (the decode kernel; any M with ``warp_specialized``: ceil(M / block_m) token
        tiles; the wide tiles 136, 144, 160, 192 and 256 warp-specialized only) or 256 (not warp-specialized: the ring
        kernel, any M), block_n =
        block_k = 128, 8 warps, K a
        multiple of 128, or ``MMA_ROWS_TILE`` with K's warps and ``block_m`` 8 or 16 (the 16-row kernel, M <= block_m,
        MXFP8 rows: BF16 ones are
        quantized by a launch first) (the tl
        kernel runs where TMA cannot read an operand: base or row stride not 16-byte aligned); ``f16_operands``
        applies to MXFP8 activations (same bytes either way); ``warp_specialized`` (with ``wgmma``, ``block_m``
        64-128 or a wide tile) runs the warp-specialized decode kernel (at M <= block_m the plain decode kernel's bytes; the
        picker takes it, at K splits up to 6, at 65-128 tokens (over two 64-row token tiles where
        ``mxfp8_gemm_config.two_token_tiles_split`` says), at 33-64 where ``x`` carries its A_deq (unsplit at K <=
        1024, and at K <= 768 without one), and at 129-2048
        over token tiles, at most 65535 of them, a wide tile at 129-256 where it fills the wave 1.5x better);
        ``mxfp8_gemm_config.BF16_MM_TILE`` asks for the prefill path at any M, on any device.

    Paths (``docs/gemm.md`` has each with its measurements):
        Every tile but the one-token GEMV multiplies BF16 (or F16) operands, the MXFP8 tiles dequantized in the
        kernel, on any device: exact for every value quantized BF16 rows give (multiples of 2^-133, BF16's
        smallest step); other bytes, possible only in blocks whose scale byte is 0-2, round to BF16 there.
        On Hopper the tiles are dequantized (where the weight's :meth:`~seam.MXFP8Weight.byte_facts` allow, by
        BF16 multiplies: the same bytes, ``seam.kernels.wgmma_config.wgmma_bf16_mul``) and multiplied on BF16
        tensor cores, by M:

        - 1-8 where K is 512 or 768 (N >= 256; 9-16 there on its 16-token tile where N / 16 programs number at most 1.5
          an SM), 2-8 where K is 3072, 4096 or 6144 (N >= 1024), and N / 16 programs fit
          one wave (``pick_mma_rows_tile``), on MXFP8 rows (BF16 ones where ``quantize`` is ``"separate"``; an A_deq is
          not read): the 16-row kernel (``seam.kernels.mxfp8_mma_rows``: the whole K per program, ``mma.sync``, no
          split-K).
        - 1: the Gluon decode kernel where N >= 2560 (``WGMMA_ONE_TOKEN_MIN_N``), else a CUDA-core GEMV on
          fp32-dequantized tiles (``seam.kernels.mxfp8_gemm_config.GEMV_TILE``).
        - 2-64 (K a multiple of 128), and 65-128 where K >= 2048 (at K 512-768 where the N tiles are at least a
          third of the SMs: unsplit, warp-specialized, ``ws_short_k``): the Gluon decode kernel
          (``seam.kernels.mxfp8_wgmma``: TMA weight stream, register-A ``wgmma``); 65-96 tokens on its 64 + tail
          tiles of 72, 80 or 96 rows, 97-128 on its 128-row tile; or, at 65-128 tokens from K 256 below K 2048
          (N >= 1024, two programs per N tile within a wave) and at 97-128 from K 2048 where the split that fills
          the wave keeps 9/10 of the 128-row tile's programs, two token tiles of its warp-specialized 64-row tile
          (``two_token_tiles_split``). On those tiles always, on its 64-row tile at K
          1536-2048 or where its launch takes two waves or it runs warp-specialized and unsplit (K <= 768, N tiles
          at least a sixth of the SMs, ``ws_whole_k``), and for BF16 x on its 32- and 64-row tiles, activations
          without ``a_deq`` are dequantized by a launch before it (2*M*K bytes of temporary BF16,
          ``seam.kernels.wgmma_config.wgmma_dequantize_first``).
        - 129-384 where K >= 2048 and one program per N tile and 128-token tile fits a wave (``pick_token_tiles``):
          the decode kernel's warp-specialized tiles over ceil(M / 128) token tiles, or up to 256 tokens one
          wide tile (128 + 8, 16, 32, 64 or 128 tokens, the second part sized to M) where its K split puts 1.5x as
          many programs in the wave (activations dequantized by a launch before it).
        - 385-2048 where K >= 2048 and a wave model puts them ahead of the prefill path
          (``pick_prefill_token_tiles``): the same kernel over token tiles of 128, 192 or 256 tokens, no BF16 weight
          copy (activations without ``a_deq`` dequantized by a launch before it).
        - else 129-256 on wide layers (``pick_ring_tile``): the Gluon ring kernel (``seam.kernels.mxfp8_wgmma_ring``:
          weights and the activations, dequantized by a launch before it, through one TMA ring; 2*M*K bytes of
          temporary BF16).
        - else from 65 (``PREFILL_MM_MIN_M``), on any CUDA GPU with torch >= 2.8: the prefill path, both operands
          dequantized to BF16 and multiplied with cuBLAS (fp32 accumulation, rounded once; temporary BF16 copies of A
          and W, in A_deq's K order from K 2048, so a given ``a_deq`` spares the copy of A).

        The tl kernel runs the rest (and everything under the interpreter).
    """
    mode = LinearQuantize.parse(quantize)
    if not isinstance(weight, MXFP8Weight):
        swapped = " (the arguments look swapped: mxfp8_linear(x, weight))" if isinstance(x, MXFP8Weight) else ""
        raise TypeError(f"weight must be a seam.MXFP8Weight, got {type(weight).__name__}{swapped}")
    n, k = weight.shape
    if isinstance(x, QuantizedActivation):
        m, kx = x.shape
        device = check_quantized_rows("x", x)
        _check_k(kx, k)
    else:
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"x must be a BF16 torch.Tensor or a seam.QuantizedActivation, got {checks.type_name(x)}"
                            + (_WRAP_HINT if isinstance(x, tuple) else ""))
        if x.dtype == torch.float8_e4m3fn:
            raise TypeError(f"x must be a BF16 torch.Tensor or a seam.QuantizedActivation, got a tensor of dtype "
                            f"{x.dtype}{_WRAP_HINT}")
        checks.tensor("x", x, dtype=torch.bfloat16, contiguous=False)
        # As torch.nn.functional.linear: [..., K] -> [..., N], the leading dimensions the tokens, and a strided
        # last dimension copied (2-D too).
        if x.dim() == 2:  # strided or not, before any copy below
            _check_k(x.shape[1], k)
        if x.dim() != 2 or (x.stride(1) != 1 and x.shape[1] > 1):
            if x.dim() == 0 or x.shape[-1] != k:
                raise ValueError(f"x must have shape [..., {k}] (the weight's K), got {list(x.shape)}")
            lead = tuple(x.shape[:-1])
            if out is not None:  # checked at its own shape and against x itself: the rows below may be a copy
                checks.tensor("out", out, dtype=torch.bfloat16, shape=(*lead, n), device=x.device, written=True)
                checks.outputs_apart([("out", out)], [("x", x)])
            rows = x.reshape(-1, k)
            if rows.stride(1) != 1 and k > 1:
                rows = rows.contiguous()
            y = mxfp8_linear(rows, weight, out=None if out is None else out.view(rows.shape[0], n), tile=tile,
                             quantize=mode)
            return y.view(*lead, n) if out is None else out
        m, _ = x.shape
        device = checks.kernel_device("x", x)
    checks.multiple_of("K", k, 32)
    checks.tensor("weight.values", weight.values, device=device)
    checks.tensor("weight.scales", weight.scales, device=device)
    tile = check_tile(tile, k, m, device)
    if out is None:
        out = torch.empty((m, n), dtype=torch.bfloat16, device=device)
    else:
        checks.tensor("out", out, dtype=torch.bfloat16, shape=(m, n), device=device, written=True)
        inputs = _activation_inputs(x)
        checks.outputs_apart([("out", out)], inputs + [("weight.values", weight.values), ("weight.scales", weight.scales)])
    xs = a_deq = None
    if isinstance(x, QuantizedActivation):
        x, xs, a_deq = x.values, x.scales, x.a_deq
        if a_deq is not None:
            check_a_deq_bytes("x.a_deq", a_deq, x, xs)
    # the tile and where a BF16 x is quantized are chosen in the op, at call time (_launch); an override's fields
    # travel as they are, the pick's as GEMV_TILE's (unused)
    _linear(x, xs, weight.values, weight.scales, out, *(tile or GEMV_TILE).to_args(), a_deq,
            _weight_bf16_mul(weight, device), tile is None, mode.value)
    return out


def wants_a_deq(m: object, weight: MXFP8Weight, device: torch.device) -> bool:
    """Whether the producer of an M-token activation for :func:`mxfp8_linear` with ``weight`` on ``device`` should
    write its A_deq: where the producers' "auto" rule would (:func:`seam.ops.a_deq.resolve_a_deq`) and the GEMM
    picked there with one reads it (``Tile.reads_a_deq``: the prefill path from K 2048 only).
    "auto" knows M and K, not the consumer: it writes A_deq at K 3072-6144 from two tokens for the decode kernel,
    which the 16-row kernel, when it takes the layer, never reads (an unread A_deq made the norm + MXFP8 -> gate_up
    chain 1.0-1.5 us slower, H100, ``docs/benchmarks-log.md`` runs 278 and 284), and at 65-128 tokens from K 256,
    which the prefill path ignores below K 2048 (picked there for layers narrower than N 1024 or too wide for
    one wave of two 64-token tiles).

    Raises:
        TypeError: ``m`` not an int. ValueError: ``m`` not positive.
    """
    m = checks.integer("m", m)
    if m < 1:
        raise ValueError(f"m must be a positive token count, got {m}")
    n, k = weight.values.shape
    return pick_tile(m, n, k, device, a_deq=True).reads_a_deq(k) and resolve_a_deq("auto", m, k, device)


def check_quantized_rows(name: str, qa: QuantizedActivation) -> torch.device:
    """Check MXFP8 rows as :func:`mxfp8_linear` reads them (swizzled scales, values and scales contiguous on
    one device seam's kernels run on); return that device. Raises ValueError naming ``name``."""
    qa.require_layout(ScaleLayout.SWIZZLED, name)
    device = checks.kernel_device(f"{name}.values", qa.values)
    checks.tensor(f"{name}.values", qa.values, device=device)
    checks.tensor(f"{name}.scales", qa.scales, device=device)
    return device


def _weight_bf16_mul(weight: MXFP8Weight, device: torch.device) -> bool:
    """Whether the weight's byte facts allow the Hopper GEMMs' BF16 multiplies
    (:func:`seam.kernels.mxfp8_wgmma.bf16_mul_exact`). With ``SEAM_DEBUG`` the facts are measured again (a host
    sync): a write that moved no version counter since the record was built and changed them raises ValueError."""
    facts = weight.byte_facts()
    if facts is not None and runtime.debug_checks(device) and facts != measure_byte_facts(weight.values, weight.scales):
        raise ValueError("weight's bytes changed since its MXFP8Weight was built, by a write its version counters do "
                         "not show (.data[...], NumPy, DLPack, a kernel): build a new seam.MXFP8Weight after such writes")
    return mxfp8_wgmma.bf16_mul_exact(facts)


def _activation_inputs(x: torch.Tensor | QuantizedActivation) -> list[tuple[str, torch.Tensor]]:
    """The tensors ``mxfp8_linear`` reads of ``x``, named for the overlap check."""
    if not isinstance(x, QuantizedActivation):
        return [("x", x)]
    tensors = [("x.values", x.values), ("x.scales", x.scales)]
    return tensors + ([("x.a_deq", x.a_deq)] if x.a_deq is not None else [])
