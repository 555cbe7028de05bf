"""Registers, stack (spills) and shared memory of seam's MXFP8 GEMM kernels compiled for sm_90, on any machine.

Triton compiles for a target it is told and ships ptxas and cuobjdump, so a machine
without a GPU can read the resource use the H200 would get, e.g. the register count
that decides how many 8-warp programs share an SM (``pick_qkv_tile``'s cap)::

    TRITON_INTERPRET=0 PYTHONPATH=src python tools/sm90_resources.py qkv 32 --max-registers 128
    TRITON_INTERPRET=0 PYTHONPATH=src python tools/sm90_resources.py wgmma 8 --split-k 12 --num-stages 2

``rows`` is the 16-row decode kernel (``seam.kernels.mxfp8_mma_rows``; ``block_m`` 8 or 16; ``--k`` and ``--bf16-mul``
apply, by default on as quantized weights launch it; the warps, and where the activations go, follow from K).
``wgmma`` is the Gluon decode kernel (``block_m``: M padded to 8, 16, 32, 64, 72, 80, 96 or 128; from 72 it streams
A_deq, so ``--a-deq --a-stream`` are implied there; 136, 144, 160, 192: its warp-specialized 128 + 8-64-token tiles,
and 256 with ``--warp-specialized on`` its 128 + 128-token one) or, with ``block_m`` 256 otherwise, the Gluon ring
kernel (``--a-bf16`` does not apply: it reads BF16 activations); ``--block-k`` and ``--num-warps`` do not apply, the
ring depth must fit its shared memory. Their compile also
checks that the register relabellings move no data (``convert_layout(assert_trivial=True)``).

Arguments are specialized as a launch specializes them: pointers and integer sizes
divisible by 16, except the kernels' ``do_not_specialize`` sizes (M, block_size, max_pos,
the cache slot counts), ``stride_acc`` and the float scalars. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path


def _cuobjdump() -> Path:
    import triton

    return Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"


def resources(kind: str, block_m: int, *, block_k: int = 64, split_k: int = 12, num_warps: int = 8,
              num_stages: int = 3, max_registers: int | None = None, k: int = 6144,
              has_qfp8: bool = False, f16_operands: bool = False, a_bf16: bool = False,
              partials: bool = False, a_deq: bool = False, bf16_mul: bool | None = None, ptx: bool = False,
              a_stream: bool = False, warp_specialized: bool | None = None, acts_staged: bool | None = None,
              one_token: bool = False) -> dict:
    """{"registers", "stack_bytes", "shared_bytes"} of ``kind`` ("qkv": the fused QKV kernel,
    "linear": ``mxfp8_linear``'s tl kernel, with ``a_bf16`` its in-GEMM quantization, or "wgmma":
    the Gluon decode kernel (its warp-specialized variant where the launcher runs it,
    ``seam.kernels.mxfp8_gemm_config.wgmma_warp_specialized``), with ``partials`` its partials-only store for the
    QKV op, with ``one_token`` as launched for one token (``wgmma_config.wgmma_combines_apart``), and with ``a_deq`` its
    variant that reads A_deq, ``seam.formats.a_deq``, with ``a_stream`` (and ``a_deq``) its variant that streams
    A_deq through ``num_stages`` slots, and with ``bf16_mul`` True / False its weight dequantization
    by BF16 multiplies / through fp32, None: as its launch rule says for a weight that allows both) for one
    tile, compiled for sm_90 (``warp_specialized``: the warp-specialized decode kernel, True / False, or None: where
    the picker takes it at 65-128 tokens, ``seam.kernels.mxfp8_gemm_config.wgmma_warp_specialized``); with ``ptx``
    (wgmma and rows) also "ptx", the kernel's PTX, for tests of its structure. "rows": the 16-row kernel, with
    ``acts_staged`` True / False its activations staged in shared memory / held in registers, None: as launched.

    Raises:
        RuntimeError: seam's kernels were imported in interpreter mode (set TRITON_INTERPRET=0).
    """
    from triton.compiler import ASTSource

    from seam.kernels import mxfp8_gemm, qkv_epilogue

    if kind == "rows":
        from seam.kernels.mxfp8_mma_rows import BLOCK_MS

        if block_m not in BLOCK_MS:
            raise ValueError(f"rows: the 16-row kernel runs {BLOCK_MS} tokens a program, got block_m={block_m}")
        return _rows_resources(block_m, k=k, bf16_mul=bf16_mul is not False, acts_staged=acts_staged,  # None: as
                               ptx=ptx)  # weights launch it
    if kind == "wgmma":
        return _wgmma_resources(block_m, split_k=split_k, num_stages=num_stages, k=k, a_bf16=a_bf16,
                                max_registers=max_registers, partials=partials, a_deq=a_deq, bf16_mul=bf16_mul,
                                ptx=ptx, a_stream=a_stream, warp_specialized=warp_specialized, one_token=one_token)
    if kind == "qkv":
        fn = qkv_epilogue.qkv_epilogue_kernel
        types = {"stride_acc": "i32", "stride_head": "i32", "stride_split": "i32", "nkv": "i32", "M": "i32",
                 "eps": "fp32", "inv_q_fp8_scale": "fp32", "inv_k_scale": "fp32",
                 "inv_v_scale": "fp32", "kv_page_stride": "i32", "idx_page_stride": "i32", "block_size": "i32",
                 "max_pos": "i32", "kv_slots": "i32", "idx_slots": "i32",
                 "acc_ptr": "*fp32", "ws_ptr": "*fp32", "counter_ptr": "*i32", "pos_ptr": "*i64", "slot_ptr": "*i64",
                 "islot_ptr": "*i64", "cs_ptr": "*bf16", "qw_ptr": "*bf16", "kw_ptr": "*bf16", "iqw_ptr": "*bf16",
                 "ikw_ptr": "*bf16", "q_ptr": "*bf16"}
        consts = dict(K=k, HAS_Q=True, HAS_QFP8=has_qfp8, ACC_MODE=0, NUM_PARTIALS=1, BLOCK_M=block_m,
                      BLOCK_K=block_k,
                      SPLIT_K=split_k, STAGES=num_stages, F16_OPERANDS=f16_operands, USE_PDL=True,
                      INPUTS_BEFORE_WAIT=False)
        options = dict(enable_fp_fusion=False)
    elif kind == "linear":
        fn = mxfp8_gemm.mxfp8_linear_kernel
        types = {"out_ptr": "*bf16", "ws_ptr": "*fp32", "counter_ptr": "*i32", "M": "i32", "N": "i32",
                 "stride_xm": "i32", "stride_om": "i32"}
        if a_bf16:
            types.update(x_ptr="*bf16", xs_ptr="*bf16")
        consts = dict(K=k, A_BF16=a_bf16, BLOCK_M=block_m, BLOCK_N=128, BLOCK_K=block_k, SPLIT_K=split_k,
                      STAGES=num_stages, F16_OPERANDS=f16_operands, USE_PDL=True)
        options = {}
    else:
        raise ValueError(f"kind must be 'qkv', 'linear', 'wgmma' or 'rows', got {kind!r}")
    not_divisible = {"M", "eps", "inv_q_fp8_scale", "inv_k_scale", "inv_v_scale", "block_size", "stride_acc",
                     "max_pos", "kv_slots", "idx_slots", "nkv"}
    options.update(num_warps=num_warps, num_stages=num_stages)
    if max_registers is not None:
        options["maxnreg"] = max_registers
    return _compile(fn, types, consts, not_divisible, options, ASTSource)


def _compile(fn, types: dict, consts: dict, not_divisible: set, options: dict, source, ptx: bool = False) -> dict:
    """Compile ``fn`` for sm_90 (integer sizes and pointers divisible by 16 unless in ``not_divisible``;
    unnamed pointers are byte buffers) and read its resources."""
    import triton
    from triton.backends.compiler import GPUTarget

    if not hasattr(fn, "cache_key"):
        raise RuntimeError("seam's kernels were imported in interpreter mode: run with TRITON_INTERPRET=0")
    signature, attrs = {}, {}
    for i, name in enumerate(fn.arg_names):
        if name in consts:
            signature[name] = "constexpr"
            continue
        signature[name] = types.get(name, "*u8")  # the E4M3 / UE8M0 / NVFP4 byte buffers
        if name not in not_divisible and not signature[name].startswith("tensordesc"):
            attrs[(i,)] = [["tt.divisibility", 16]]
    constexprs = {(fn.arg_names.index(name),): value for name, value in consts.items()}
    src = source(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
    compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(compiled.asm["cubin"])
        f.flush()
        usage = subprocess.run([str(_cuobjdump()), "-res-usage", f.name], capture_output=True, text=True,
                               check=True).stdout
    m = re.search(r"REG:(\d+)\s+STACK:(\d+)", usage)
    if m is None:
        raise RuntimeError(f"unexpected cuobjdump output: {usage!r}")
    found = {"registers": int(m.group(1)), "stack_bytes": int(m.group(2)), "shared_bytes": compiled.metadata.shared}
    return {**found, "ptx": compiled.asm["ptx"]} if ptx else found


def _as_launched(rules, partials: bool, bf16_mul: bool | None) -> bool:
    """``bf16_mul``, or where None the launch rule's BF16 multiplies for a weight that allows them; never for the
    QKV op's partials (its weight arrives as bare tensors, without the byte facts that allow them)."""
    return rules.bf16_mul and not partials if bf16_mul is None else bf16_mul


def _wgmma_resources(block_m: int, *, split_k: int, num_stages: int, k: int, a_bf16: bool,
                     max_registers: int | None, partials: bool, a_deq: bool = False, bf16_mul: bool | None = None,
                     ptx: bool = False, a_stream: bool = False, warp_specialized: bool | None = None,
                     one_token: bool = False) -> dict:
    """Resources of the Gluon decode kernel (``seam.kernels.mxfp8_wgmma``, or ``mxfp8_wgmma_ws`` with
    ``warp_specialized``) at one launch shape."""
    from triton.experimental.gluon._runtime import GluonASTSource

    from seam.kernels import mxfp8_gemm_config, mxfp8_wgmma, mxfp8_wgmma_ws, wgmma_config

    if block_m == 256 and not warp_specialized:  # warp-specialized: the 128 + 128-token wide tile
        return _ring_resources(block_m, split_k=split_k, num_stages=num_stages, k=k, partials=partials,
                               bf16_mul=bf16_mul)
    if block_m in mxfp8_wgmma_ws.WIDE_TILES:  # the warp-specialized kernel's only
        if warp_specialized is False:
            raise ValueError(f"wgmma: block_m {block_m} runs warp-specialized only")
        return _ws_resources(block_m, split_k=split_k, num_stages=num_stages, k=k, bf16_mul=bf16_mul, ptx=ptx,
                             partials=partials)
    if block_m not in mxfp8_wgmma.BLOCK_MS:
        raise ValueError(f"wgmma: block_m must be one of {mxfp8_wgmma.BLOCK_MS} or 256, got {block_m}")
    if warp_specialized is None:  # as picked at 65-128 tokens (mxfp8_linear, and the QKV op's 128-token partials)
        warp_specialized = block_m > 64 and mxfp8_gemm_config.wgmma_warp_specialized(block_m, split_k, k, a_deq=True)
    if warp_specialized:
        return _ws_resources(block_m, split_k=split_k, num_stages=num_stages, k=k, bf16_mul=bf16_mul, ptx=ptx,
                             partials=partials)
    if block_m > 64:  # the streamed tiles read A_deq only, streamed
        a_deq = a_stream = True
    if a_stream and not a_deq:
        raise ValueError("wgmma: --a-stream streams A_deq (add --a-deq)")
    if a_stream:
        if not 1 <= num_stages or mxfp8_wgmma.shared_bytes(block_m, k, split_k, num_stages, 0, a_stream=True) > \
                mxfp8_wgmma.SHARED_BUDGET:
            raise ValueError(f"wgmma: num_stages {num_stages} streamed at block_m {block_m}: shared memory overflows")
    else:
        most = mxfp8_wgmma.max_stages(block_m, k, split_k)
        if not 1 <= num_stages <= most:
            room = f"shared memory allows 1 to {most}" if most >= 1 else "the activations alone overflow shared memory"
            raise ValueError(f"wgmma: num_stages {num_stages} at block_m {block_m}, K {k}, split {split_k}: {room}")
    fn = mxfp8_wgmma.mxfp8_linear_wgmma_kernel
    rules = wgmma_config.wgmma_launch(block_m, k, split_k, num_stages, partials=partials,
                                      one_token=one_token)  # as launched
    stores_partials = partials or rules.combine_apart  # then into the split-K workspace (fp32)
    types = {**_decode_types(block_m, bf16_x=a_bf16 or a_deq), "out_ptr": "*fp32" if stores_partials else "*bf16"}
    tail = mxfp8_wgmma.tail_tokens(block_m)
    consts = dict(K=k, MP=block_m, SPLIT_K=split_k, STAGES=num_stages, A_BF16=a_bf16 and not a_deq, A_DEQ=a_deq,
                  USE_PDL=True,
                  COMBINE=rules.combine, PARTIALS=stores_partials, COMBINERS=rules.combiners,
                  EARLY_STEPS=rules.early_steps, SMEM_STEPS=0 if a_stream else rules.smem_steps,
                  BF16_MUL=_as_launched(rules, partials, bf16_mul), A_STREAM=a_stream, TAIL=tail,
                  num_warps=mxfp8_wgmma.NUM_WARPS)
    options = dict(num_warps=mxfp8_wgmma.NUM_WARPS)
    if max_registers is not None:
        options["maxnreg"] = max_registers
    return _compile(fn, types, consts, {"M"}, options, GluonASTSource, ptx)


def _decode_types(block_m: int, *, bf16_x: bool) -> dict:
    """Argument types both decode kernels share at ``block_m``: the TMA descriptors as the launchers build them
    (activations BF16 with ``bf16_x``, else E4M3 bytes), the workspace, counters and sizes (``out_ptr``: BF16)."""
    from triton.experimental.gluon import language as gl

    from seam.kernels import mxfp8_wgmma_ws

    x_dtype, x_name = (gl.bfloat16, "bf16") if bf16_x else (gl.uint8, "u8")
    tail = mxfp8_wgmma_ws.second_tokens(block_m)  # the decode kernel's tail_tokens at its tiles
    w_layout = gl.NVMMASharedLayout.get_default_for([128, 128], gl.uint8)
    s_desc = f"tensordesc<u8[32, 16],{gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=8, rank=2)!r}>"
    types = {"w_desc": f"tensordesc<u8[128, 128],{w_layout!r}>", "s_desc": s_desc, "xs_desc": s_desc,
             "out_ptr": "*bf16", "ws_ptr": "*fp32", "counter_ptr": "*i32", "M": "i32", "N": "i32", "stride_om": "i32"}
    for name, rows in (("x_desc", block_m - tail), ("xt_desc", tail or block_m - tail)):  # as the launchers build them
        layout = gl.NVMMASharedLayout.get_default_for([rows, 128], x_dtype)
        types[name] = f"tensordesc<{x_name}[{rows}, 128],{layout!r}>"
    return types


def _ws_resources(block_m: int, *, split_k: int, num_stages: int, k: int, bf16_mul: bool | None,
                  ptx: bool = False, partials: bool = False) -> dict:
    """Resources of the warp-specialized decode kernel (``seam.kernels.mxfp8_wgmma_ws``) at one launch shape."""
    from triton.experimental.gluon._runtime import GluonASTSource

    from seam.kernels import mxfp8_wgmma_ws, wgmma_config

    if block_m not in mxfp8_wgmma_ws.BLOCK_MS:
        raise ValueError(f"wgmma: the warp-specialized kernel takes block_m in {mxfp8_wgmma_ws.BLOCK_MS}, got {block_m}")
    most = mxfp8_wgmma_ws.max_stages(block_m, k, split_k)
    if not 1 <= num_stages <= most:
        raise ValueError(f"wgmma: num_stages {num_stages} warp-specialized at block_m {block_m}: 1 to {most} fit")
    tail = mxfp8_wgmma_ws.second_tokens(block_m)
    types = {**_decode_types(block_m, bf16_x=True), "out_ptr": "*fp32" if partials else "*bf16"}  # A_deq
    rules = wgmma_config.wgmma_launch(block_m, k, split_k, num_stages, partials=partials,
                                      warp_specialized=True)  # as launched
    consts = dict(K=k, MP=block_m, TAIL=tail, SPLIT_K=split_k, STAGES=num_stages, COMBINE=rules.combine,
                  COMBINERS=rules.combiners, BF16_MUL=(not partials) if bf16_mul is None else bf16_mul, USE_PDL=True,
                  PARTIALS=partials,
                  num_warps=mxfp8_wgmma_ws.CONSUMER_WARPS.value)
    options = dict(num_warps=mxfp8_wgmma_ws.CONSUMER_WARPS.value, maxnreg=mxfp8_wgmma_ws.MAX_REGISTERS)
    return _compile(mxfp8_wgmma_ws.mxfp8_linear_wgmma_ws_kernel, types, consts, {"M"}, options, GluonASTSource, ptx)


def _rows_resources(block_m: int, *, k: int, bf16_mul: bool, acts_staged: bool | None, ptx: bool = False) -> dict:
    """Resources of the 16-row decode kernel (``seam.kernels.mxfp8_mma_rows``) on ``block_m`` tokens at K, as
    launched (warps from K; ``acts_staged`` None: its activations staged where ``stages_activations`` says)."""
    import triton
    from triton.experimental.gluon._runtime import GluonASTSource

    from seam.kernels import mxfp8_mma_rows as rows

    warps = rows.warps_for(k)
    spw = k // rows.STEP.value // warps
    types = {"w_desc": f"tensordesc<u8[1, {warps}, 16, 128],{rows._BOX_LAYOUT!r}>", "out_ptr": "*bf16", "M": "i32",
             "N": "i32", "stride_xm": "i32", "stride_om": "i32"}
    consts = dict(K=k, SPW=spw, SPWP=triton.next_power_of_2(spw), WL=rows.weight_layout(warps),
                  XL=rows.activation_layout(warps, block_m), BF16_MUL=bf16_mul, USE_PDL=True,
                  ACTS_STAGED=rows.stages_activations(k, block_m=block_m) if acts_staged is None else acts_staged,
                  BLOCK_M=block_m, num_warps=warps)
    return _compile(rows.mxfp8_mma_rows_kernel, types, consts, {"M"}, dict(num_warps=warps), GluonASTSource, ptx)


def _ring_resources(block_m: int, *, split_k: int, num_stages: int, k: int, partials: bool,
                    bf16_mul: bool | None = None) -> dict:
    """Resources of the Gluon ring kernel (``seam.kernels.mxfp8_wgmma_ring``), ``block_m`` tokens per program."""
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon._runtime import GluonASTSource

    from seam.kernels import mxfp8_wgmma_ring, wgmma_config

    fewest, most = mxfp8_wgmma_ring.MIN_STAGES, mxfp8_wgmma_ring.max_stages(block_m)
    if not fewest <= num_stages <= most:
        raise ValueError(f"wgmma: num_stages {num_stages} at block_m {block_m}: the ring takes {fewest} to {most}")
    w_layout = gl.NVMMASharedLayout.get_default_for([128, 128], gl.uint8)
    a_layout = gl.NVMMASharedLayout.get_default_for([block_m, 128], gl.bfloat16)
    s_desc = f"tensordesc<u8[32, 16],{gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=8, rank=2)!r}>"
    types = {"w_desc": f"tensordesc<u8[128, 128],{w_layout!r}>", "s_desc": s_desc,
             "a_desc": f"tensordesc<bf16[{block_m}, 128],{a_layout!r}>", "out_ptr": "*fp32" if partials else "*bf16",
             "ws_ptr": "*fp32", "counter_ptr": "*i32", "M": "i32", "N": "i32", "stride_om": "i32"}
    rules = wgmma_config.wgmma_launch(block_m, k, split_k, num_stages, partials=partials)  # as launched
    consts = dict(K=k, MP=block_m, SPLIT_K=split_k, STAGES=num_stages, USE_PDL=True, COMBINE=rules.combine,
                  PARTIALS=partials, COMBINERS=rules.combiners,
                  BF16_MUL=_as_launched(rules, partials, bf16_mul),
                  num_warps=mxfp8_wgmma_ring.NUM_WARPS)
    return _compile(mxfp8_wgmma_ring.mxfp8_linear_wgmma_ring_kernel, types, consts, {"M"},
                    dict(num_warps=mxfp8_wgmma_ring.NUM_WARPS), GluonASTSource)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("kind", choices=("qkv", "linear", "wgmma", "rows"))
    p.add_argument("block_m", type=int)
    p.add_argument("--block-k", type=int, default=64)
    p.add_argument("--split-k", type=int, default=12)
    p.add_argument("--num-warps", type=int, default=8)
    p.add_argument("--num-stages", type=int, default=3)
    p.add_argument("--max-registers", type=int, default=None)
    p.add_argument("--k", type=int, default=6144)
    p.add_argument("--has-qfp8", action="store_true")
    p.add_argument("--f16-operands", action="store_true")
    p.add_argument("--a-bf16", action="store_true", help="linear, wgmma: BF16 activations quantized in the GEMM")
    p.add_argument("--partials", action="store_true", help="wgmma: partials only (the QKV op's GEMM)")
    p.add_argument("--one-token", action="store_true", help="wgmma: as launched for one token (M = 1)")
    p.add_argument("--a-deq", action="store_true", help="wgmma: reads A_deq (seam.formats.a_deq)")
    p.add_argument("--a-stream", action="store_true", help="wgmma: streams A_deq through --num-stages slots")
    p.add_argument("--warp-specialized", choices=("rule", "on", "off"), default="rule",
                   help="wgmma: the warp-specialized kernel (on), the plain one (off), or as picked at 65-128 tokens")
    p.add_argument("--bf16-mul", choices=("rule", "on", "off"), default="rule",
                   help="wgmma: weights dequantized by BF16 multiplies (on), through fp32 (off), or as launched")
    a = p.parse_args(argv)
    print(json.dumps(resources(a.kind, a.block_m, block_k=a.block_k, split_k=a.split_k, num_warps=a.num_warps,
                               num_stages=a.num_stages, max_registers=a.max_registers, k=a.k,
                               has_qfp8=a.has_qfp8, f16_operands=a.f16_operands, a_bf16=a.a_bf16,
                               partials=a.partials, a_deq=a.a_deq, a_stream=a.a_stream, one_token=a.one_token,
                               bf16_mul={"rule": None, "on": True, "off": False}[a.bf16_mul],
                               warp_specialized={"rule": None, "on": True, "off": False}[a.warp_specialized])))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TRITON_INTERPRET", "0")
    sys.exit(main())
