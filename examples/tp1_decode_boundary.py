"""One decoder-layer boundary of a MiniMax-style MoE model at TP 1, through seam's fused ops.

attention output -> residual add + post-attention Gemma RMSNorm + MXFP8 -> shared expert (gate_up on the norm's
MXFP8 rows, SwiGLU-OAI + MXFP8, down) -> MoE finalize + residual add + next layer's Gemma RMSNorm + MXFP8 -> QKV
projection with q/k Gemma RMSNorm, RoPE and the NVFP4 KV-cache insert; then step 5 again through seam's
pure-PyTorch reference (``seam.ref``), to show what it wrote is right.

Runs on a GPU, or on a CPU under the Triton interpreter at these small shapes (seconds); with the README's
environment (``PYTHON``):

    PYTHONPATH=src ${PYTHON:-python3} examples/tp1_decode_boundary.py

At TP > 1 the same calls take a ``seam.LamportAllReduce`` and ``init_fused_moe_finalize(group=seam.DistGroup())``
(README, "Using seam from an inference engine"). Shapes: M tokens, hidden H; heads are 128 wide.
"""

import torch

import seam  # before triton / torch.compile
from seam.compare import bf16_ulp_diff
from seam.formats.nvfp4 import empty_index_cache, empty_kv_cache

dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
gen = torch.Generator().manual_seed(0)


def rand(*shape, scale=1.0, dtype=torch.bfloat16):
    return (torch.randn(*shape, generator=gen) * scale).to(dtype).to(dev)


M, H, INTER, NKV, TOP_K, EXPERT_ROWS = 4, 256, 64, 1, 2, 8  # tokens, hidden, shared-expert I, KV heads, routing
EPS, BLOCKS, BLOCK_SIZE, MAX_POS = 1e-6, 2, 16, 64

# Once, at load time: MXFP8 weights (from BF16 here; MXFP8Linear.load_state_dict takes a checkpoint's), norm weights.
post_norm_w, input_norm_w = rand(H, scale=0.1), rand(H, scale=0.1)
gate_up = seam.MXFP8Linear.from_bf16(rand(2 * INTER, H, scale=0.05))
down = seam.MXFP8Linear.from_bf16(rand(H, INTER, scale=0.05))
w_qkv = seam.MXFP8Weight.from_bf16(rand((19 * NKV + 1) * 128, H, scale=0.05))  # [q x 16nkv | k | v | index_q | index_k]
q_norm_w, k_norm_w, index_q_norm_w, index_k_norm_w = (rand(128, scale=0.1) for _ in range(4))

# Once, at start-up: the paged NVFP4 caches, the rotary table (cos | sin of 32 NeoX frequencies), the finalize.
kv_cache = empty_kv_cache(BLOCKS, NKV, BLOCK_SIZE, dev)
index_cache = empty_index_cache(BLOCKS, BLOCK_SIZE, dev)
angle = torch.arange(MAX_POS, dtype=torch.float32)[:, None] * 10000.0 ** (-torch.arange(0, 64, 2) / 64)[None, :]
cos_sin_cache = torch.cat((angle.cos(), angle.sin()), dim=1).bfloat16().to(dev)
seam.init_fused_moe_finalize(hidden_size=H, max_num_tokens=M, top_k=TOP_K, fp32_weights=True,
                             group=seam.SimulatedGroup(1, dev))

# Each step. The attention output and the residual stream come from the engine.
attn_out, residual = rand(M, H), rand(M, H)

# 1. residual add + post-attention Gemma RMSNorm + MXFP8 (and the BF16 rows, for the router): one launch
qa, residual, normed = seam.allreduce_gemma_rms_norm_mxfp8(attn_out, residual, post_norm_w, EPS, comm=None,
                                                          also_bf16=True)

# 2. shared expert: gate_up reads the norm's MXFP8 rows (no second quantization); SwiGLU-OAI + MXFP8 in one launch
#    (gate_up's rows [gate | up]; a checkpoint with them interleaved passes layout="interleaved")
gate_up.set_prequant(normed, qa)
values, scales, a_deq = seam.swiglu_oai_mxfp8(gate_up(normed), a_deq="auto")
shared_out = down(seam.QuantizedActivation(values, scales, a_deq=a_deq))

# 3. routed experts run outside seam: their unweighted GEMM2 rows, the router's weights, each (token, k)'s row
gemm2_permuted = rand(EXPERT_ROWS, H)
topk_weights = torch.rand(M, TOP_K, generator=gen).to(dev)
rows = torch.randperm(EXPERT_ROWS, generator=gen)[: M * TOP_K].view(M, TOP_K).int().to(dev)
moe = seam.MoEOutput(seam.UnfinalizedMoEOutput(gemm2_permuted, topk_weights, rows), shared_out)

# 4. MoE finalize + residual add + the next layer's input Gemma RMSNorm + MXFP8
qa, residual = seam.finalize_allreduce_gemma_rms_norm_mxfp8(moe, residual, input_norm_w, EPS)

# 5. QKV projection; its epilogue writes q, index_q and the NVFP4 k / v / index_k cache entries in place
positions = torch.arange(M, dtype=torch.int64, device=dev)
slots = torch.arange(M, dtype=torch.int64, device=dev)  # cache slot of each token (-1: no write)
q = torch.empty(M, 16 * NKV * 128, dtype=torch.bfloat16, device=dev)
index_q = torch.empty(M, NKV * 128, dtype=torch.float8_e4m3fn, device=dev)
seam.qkv_index_fused_epilogue(
    qa.values, qa.scales, w_qkv.values, w_qkv.scales, positions, cos_sin_cache,
    q_norm_w, k_norm_w, index_q_norm_w, index_k_norm_w, EPS,
    slot_mapping=slots, index_slot_mapping=slots, kv_cache=kv_cache, index_cache=index_cache,
    index_q_out=index_q, q_out=q, a_deq=qa.a_deq)

print(f"device {dev}: residual {list(residual.shape)}, q {list(q.shape)}, index_q {list(index_q.shape)}, "
      f"nonzero cache bytes {int(kv_cache.count_nonzero()) + int(index_cache.count_nonzero())}")

# Check step 5 against seam's pure-PyTorch reference on the same MXFP8 rows: the GEMM in fp32 (torch's summation
# order, not the kernel's), then the spec's epilogue. q may differ by a BF16 ulp where the two sums round apart.
want_q, want_index_q = torch.empty_like(q), torch.empty_like(index_q)
want_kv, want_index = empty_kv_cache(BLOCKS, NKV, BLOCK_SIZE, dev), empty_index_cache(BLOCKS, BLOCK_SIZE, dev)
seam.ref.qkv.qkv_epilogue_ref(
    seam.ref.qkv.qkv_gemm_ref(qa.values, qa.scales, w_qkv.values, w_qkv.scales), positions, cos_sin_cache,
    q_norm_w, k_norm_w, index_q_norm_w, index_k_norm_w, EPS, slot_mapping=slots, index_slot_mapping=slots,
    kv_cache=want_kv, index_cache=want_index, index_q_out=want_index_q, q_out=want_q)
caches = torch.cat((kv_cache.flatten(), index_cache.flatten())).view(torch.uint8)
want_caches = torch.cat((want_kv.flatten(), want_index.flatten())).view(torch.uint8)
print(f"against seam.ref: q within {int(bf16_ulp_diff(q, want_q).max())} BF16 ulp, "
      f"index_q bytes equal {float((index_q.view(torch.uint8) == want_index_q.view(torch.uint8)).float().mean()):.1%}, "
      f"cache bytes equal {float((caches == want_caches).float().mean()):.1%}")
