"""NVFP4 KV-cache entries: E2M1 codes with one E4M3 scale per 16 values (``docs/spec/qkv_epilogue.md``).

Pure PyTorch, any device. One entry is one 128-dim head of one token: 64 data bytes
(two E2M1 codes per byte, the even element in the low nibble) and 8 E4M3 scale bytes.
A cache slot holds ``block_size`` entries as all data first (token t at ``t*64``),
then all scales (``block_size*64 + scale offset``). K and index_k scales are linear
(byte j of token t at ``t*8 + j``); V scales are swizzled over 4-token quads (byte j of
token t at ``(t//4*4 + j//2)*8 + (j%2)*4 + t%4``). Pages: ``kv_cache`` uint8
``[num_blocks, 2*nkv, block_size, 72]`` (K of KV head h in slot 2h, V in 2h+1),
``index_cache`` uint8 ``[num_blocks, block_size, 72]``; the page stride may exceed a
packed page, the inner dimensions are packed.

Quantization of 16 values v with global dequant scale g (the spec's formulas, with the
rounding of every step named so that the Triton kernel in ``seam.kernels.nvfp4``
matches byte for byte):

    amax = max |v|                       (NaN elements ignored)
    sf   = e4m3_sat( max( rn(rn(amax / 6) * f32(1/g)), 2^-9 ) )
    r    = rn( rn(1 / f32(sf)) * f32(1/g) )
    code = e2m1_rne( rz(v * r) ), saturating at 6, NaN -> 0, zero magnitude -> +0
    dequant: e2m1 * f32(sf) * g
"""

from __future__ import annotations

import numpy as np
import torch

from seam import checks, runtime
from seam.formats.mxfp8 import e4m3_saturate_ref

HEAD_DIM = 128
NVFP4_GROUP = 16  #: values per E4M3 scale
DATA_BYTES = HEAD_DIM // 2  #: 64
SCALE_BYTES = HEAD_DIM // NVFP4_GROUP  #: 8
TOKEN_BYTES = DATA_BYTES + SCALE_BYTES  #: 72
SF_FLOOR = 2.0**-9  #: smallest E4M3 subnormal: a scale is never zero
NKV_CHOICES = (1, 2, 4)  #: KV heads per rank that the fused QKV op writes

#: E2M1 magnitudes of codes 0..7.
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def f32_reciprocal(g: float) -> float:
    """``rn(1 / f32(g))`` as a Python float holding an fp32 value (the host-side 1/g).

    numpy's fp32 divide is IEEE (correctly rounded) and cheap on the launch path.
    """
    return float(np.float32(1.0) / np.float32(g))


def mul_rz(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """fp32 product rounded toward zero.

    The fp64 product of two fp32 values is exact (48 significant bits); its fp32
    round-to-nearest result steps one ulp toward zero when it landed farther from zero
    than the exact value (this also maps an overflow to the largest finite fp32).
    """
    exact = a.double() * b.double()
    near = exact.float()
    away = near.double().abs() > exact.abs()
    stepped = (near.view(torch.int32) - 1).view(torch.float32)
    return torch.where(away, stepped, near)


def e2m1_encode(x: torch.Tensor) -> torch.Tensor:
    """fp32 -> E2M1 codes (uint8 in [0, 16)): round to nearest even, saturating at +-6.

    The magnitude code counts the midpoints passed; a midpoint is passed at equality
    only when the code below it is odd (ties to even). NaN encodes as 0; a code of
    zero magnitude has its sign bit cleared.
    """
    x = x.float()
    a = x.abs()
    mag = (
        (a > 0.25).int()
        + (a >= 0.75).int()
        + (a > 1.25).int()
        + (a >= 1.75).int()
        + (a > 2.5).int()
        + (a >= 3.5).int()
        + (a > 5.0).int()
    )
    neg = (x.view(torch.int32) < 0) & (mag > 0)
    return (mag + neg.int() * 8).to(torch.uint8)


def e2m1_decode(codes: torch.Tensor) -> torch.Tensor:
    """E2M1 codes (uint8, low 4 bits) -> fp32 values."""
    table = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=codes.device)
    c = codes.to(torch.int64) & 0xF
    v = table[c & 7]
    return torch.where(c >= 8, -v, v)


def pack_e2m1(codes: torch.Tensor) -> torch.Tensor:
    """[..., 2n] codes -> [..., n] bytes, the even element in the low nibble."""
    c = codes.to(torch.uint8)
    return c[..., 0::2] | (c[..., 1::2] << 4)


def unpack_e2m1(data: torch.Tensor) -> torch.Tensor:
    """[..., n] bytes -> [..., 2n] codes (inverse of :func:`pack_e2m1`)."""
    lo = data & 0xF
    hi = data >> 4
    return torch.stack((lo, hi), dim=-1).flatten(-2)


def nvfp4_quantize_ref(x: torch.Tensor, g: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize fp32 rows [..., C] (C a multiple of 16) to NVFP4 with global scale ``g``.

    Returns (packed data uint8 [..., C/2], E4M3 scale bytes uint8 [..., C/16]). Steps
    and roundings as in the module docstring.
    """
    x = x.float()
    if x.shape[-1] % NVFP4_GROUP:
        raise ValueError(f"x's last dimension must be a multiple of 16, got {x.shape[-1]}")
    inv_g = torch.tensor(f32_reciprocal(g), dtype=torch.float32, device=x.device)
    groups = x.reshape(*x.shape[:-1], x.shape[-1] // NVFP4_GROUP, NVFP4_GROUP)  # not -1: there may be no rows
    mag = torch.where(torch.isnan(groups), torch.zeros_like(groups), groups.abs())
    amax = mag.amax(dim=-1) if groups.numel() else mag.sum(dim=-1)
    a = (amax / 6.0) * inv_g
    a = torch.clamp(a, min=SF_FLOOR)
    sf = e4m3_saturate_ref(a)
    r = (1.0 / sf.float()) * inv_g
    codes = e2m1_encode(mul_rz(groups, r[..., None]))
    return pack_e2m1(codes.reshape(x.shape)), sf.view(torch.uint8)


def nvfp4_dequantize(data: torch.Tensor, scales: torch.Tensor, g: float = 1.0) -> torch.Tensor:
    """Packed data [..., C/2] + scale bytes [..., C/16] -> fp32 [..., C] = e2m1 * f32(sf) * g."""
    vals = e2m1_decode(unpack_e2m1(data))
    sf = scales.view(torch.float8_e4m3fn).float().repeat_interleave(NVFP4_GROUP, dim=-1)
    return vals * sf * g


def scale_offsets(token: int, swizzled: bool) -> list[int]:
    """Offsets of token ``token``'s 8 scale bytes within the slot's scale area."""
    if not swizzled:
        return [token * SCALE_BYTES + j for j in range(SCALE_BYTES)]
    t = token
    return [(t // 4 * 4 + j // 2) * 8 + (j % 2) * 4 + t % 4 for j in range(SCALE_BYTES)]


def slot_view(cache: torch.Tensor, block: int, slot: int | None = None) -> torch.Tensor:
    """The flat ``block_size * 72`` bytes of one cache slot.

    ``cache`` is ``kv_cache`` [nb, 2*nkv, bs, 72] (pass ``slot``) or ``index_cache``
    [nb, bs, 72] (``slot`` None). The returned tensor is a view: writes go to the cache.
    """
    page = cache[block] if slot is None else cache[block, slot]
    return page.reshape(-1)


def write_entries(
    cache: torch.Tensor, slots: torch.Tensor, rows: torch.Tensor, g: float, swizzled: bool, slot: int | None = None
) -> None:
    """Quantize fp32 head rows [M, 128] and store row i as the token at cache slot ``slots[i]`` (in place).

    ``cache`` is ``kv_cache`` (pass ``slot``: 2h for K, 2h+1 for V of KV head h) or
    ``index_cache`` (``slot`` None). Rows with slot -1 are skipped; slots must be distinct.
    """
    block_size = cache.shape[-2]
    valid = slots >= 0
    s = slots[valid]
    data, sf = nvfp4_quantize_ref(rows[valid].reshape(-1, HEAD_DIM), g)
    t = (s % block_size)[:, None]
    base = (s // block_size) * cache.stride(0) + (0 if slot is None else slot * block_size * TOKEN_BYTES)
    data_offs = base[:, None] + t * DATA_BYTES + torch.arange(DATA_BYTES, device=cache.device)
    j = torch.arange(SCALE_BYTES, device=cache.device)
    sf_offs = (t // 4 * 4 + j // 2) * 8 + (j % 2) * 4 + t % 4 if swizzled else t * SCALE_BYTES + j
    sf_offs = base[:, None] + block_size * DATA_BYTES + sf_offs
    span = (cache.shape[0] - 1) * cache.stride(0) + cache[0].numel()
    flat = cache.as_strided((span,), (1,))
    flat[data_offs.reshape(-1)] = data.reshape(-1)
    flat[sf_offs.reshape(-1)] = sf.reshape(-1)


def read_entry(slot_bytes: torch.Tensor, token: int, swizzled: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(packed data uint8 [64], scale bytes uint8 [8]) of token ``token`` of a slot."""
    block_size = slot_bytes.numel() // TOKEN_BYTES
    data = slot_bytes[token * DATA_BYTES : (token + 1) * DATA_BYTES]
    offs = torch.tensor(scale_offsets(token, swizzled), device=slot_bytes.device) + block_size * DATA_BYTES
    return data.clone(), slot_bytes[offs]


def dequantize_entry(slot_bytes: torch.Tensor, token: int, g: float, swizzled: bool) -> torch.Tensor:
    """fp32 [128]: one cache entry read back and dequantized."""
    data, sf = read_entry(slot_bytes, token, swizzled)
    return nvfp4_dequantize(data, sf, g)


def dequantize_kv_cache(
    kv_cache: torch.Tensor, slots: torch.Tensor, k_scale: float = 1.0, v_scale: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """K and V of the tokens at ``slots`` (int64 [M]) read back from ``kv_cache``.

    Returns fp32 (k [M, nkv, 128], v [M, nkv, 128]); rows of slot -1 are NaN.
    """
    nkv = kv_cache.shape[1] // 2
    block_size = kv_cache.shape[2]
    m = slots.numel()
    k = torch.full((m, nkv, HEAD_DIM), float("nan"), device=kv_cache.device)
    v = torch.full_like(k, float("nan"))
    for i, s in enumerate(slots.tolist()):
        if s < 0:
            continue
        for h in range(nkv):
            k[i, h] = dequantize_entry(slot_view(kv_cache, s // block_size, 2 * h), s % block_size, k_scale, False)
            v[i, h] = dequantize_entry(slot_view(kv_cache, s // block_size, 2 * h + 1), s % block_size, v_scale, True)
    return k, v


def dequantize_index_cache(index_cache: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """index_k fp32 [M, 128] of the tokens at ``slots`` (int64 [M]); rows of slot -1 are NaN."""
    block_size = index_cache.shape[1]
    out = torch.full((slots.numel(), HEAD_DIM), float("nan"), device=index_cache.device)
    for i, s in enumerate(slots.tolist()):
        if s >= 0:
            out[i] = dequantize_entry(slot_view(index_cache, s // block_size), s % block_size, 1.0, False)
    return out


def _check_cache_sizes(num_blocks: object, block_size: object, page_pad: object) -> tuple[int, int, int]:
    num_blocks = checks.integer("num_blocks", num_blocks)
    block_size = checks.integer("block_size", block_size)
    page_pad = checks.integer("page_pad", page_pad)
    if num_blocks < 1:
        raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
    checks.multiple_of("block_size", block_size, 4)  # V scales swizzle quads of tokens
    if page_pad < 0 or page_pad % 32:
        raise ValueError(f"page_pad must be a non-negative multiple of 32 (bytes), got {page_pad}")
    return num_blocks, block_size, page_pad


def check_nkv(nkv: object) -> int:
    """KV heads per rank, one of :data:`NKV_CHOICES`; TypeError / ValueError otherwise."""
    nkv = checks.integer("nkv", nkv)
    if nkv not in NKV_CHOICES:
        raise ValueError(f"nkv must be 1, 2 or 4, got {nkv}")
    return nkv


def _cache_device(device: object) -> torch.device | None:
    """A cache's ``device`` argument, checked (:func:`seam.runtime.device_arg`); None: torch's default device."""
    return None if device is None else runtime.device_arg("device", device)


def empty_kv_cache(num_blocks: int, nkv: int, block_size: int, device=None, page_pad: int = 0) -> torch.Tensor:
    """A zeroed ``kv_cache`` [num_blocks, 2*nkv, block_size, 72]; ``page_pad`` extra bytes per page
    (a multiple of 32) exercise a page stride larger than a packed page.

    Raises:
        TypeError: a size not a Python or NumPy int; device not a torch.device, str or int.
        ValueError: num_blocks < 1, nkv not 1, 2 or 4 (what the fused QKV op writes), block_size not a
            positive multiple of 4, page_pad not a non-negative multiple of 32; device not one seam's kernels
            run on here.
    """
    num_blocks, block_size, page_pad = _check_cache_sizes(num_blocks, block_size, page_pad)
    nkv = check_nkv(nkv)
    device = _cache_device(device)
    page = 2 * nkv * block_size * TOKEN_BYTES + page_pad
    raw = torch.zeros(num_blocks, page, dtype=torch.uint8, device=device)
    return raw.as_strided(
        (num_blocks, 2 * nkv, block_size, TOKEN_BYTES), (page, block_size * TOKEN_BYTES, TOKEN_BYTES, 1)
    )


def empty_index_cache(num_blocks: int, block_size: int, device=None, page_pad: int = 0) -> torch.Tensor:
    """A zeroed ``index_cache`` [num_blocks, block_size, 72] (``page_pad`` and errors as in :func:`empty_kv_cache`)."""
    num_blocks, block_size, page_pad = _check_cache_sizes(num_blocks, block_size, page_pad)
    device = _cache_device(device)
    page = block_size * TOKEN_BYTES + page_pad
    raw = torch.zeros(num_blocks, page, dtype=torch.uint8, device=device)
    return raw.as_strided((num_blocks, block_size, TOKEN_BYTES), (page, TOKEN_BYTES, 1))
