"""torch.compile(fullgraph=True) traces through seam's ops, out= buffers and the Lamport all-reduce."""

import re

import pytest
import torch

import seam
from seam.compare import bytes_equal


# inductor's CPU path still uses torch.jit.script_method (torch 2.13), which warns: not seam's to fix
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")


def setup_function():
    torch.manual_seed(0)


def _compile(fn, device, backend=None):
    return torch.compile(fn, backend=backend or ("inductor" if device.type == "cuda" else "aot_eager"), fullgraph=True)


def test_fullgraph_all_reduce_simulated_tp1(device):
    # inductor on the CPU too: it runs the ops on the mailbox itself (aot_eager copies it: the test below)
    ar = seam.LamportAllReduce(hidden_size=128, max_num_tokens=4, group=seam.SimulatedGroup(1, device))
    x = torch.randn(2, 128, device=device).bfloat16()
    assert bytes_equal(_compile(lambda t: seam.all_reduce(t, ar), device, "inductor")(x), x)  # one rank: x


def test_a_backend_that_copies_the_mailbox_is_refused(device):
    """aot_eager functionalizes the ops' mutated arguments: the Lamport kernels would get a copy of the mailbox and
    address the peers' mailboxes from it (two simulated ranks: wrong sums and writes to other memory). The launch
    refuses the copy before writing anything; the eager call after it still sums."""
    ar = seam.LamportAllReduce(hidden_size=128, max_num_tokens=4, group=seam.SimulatedGroup(2, device))
    x0, x1 = (torch.randn(2, 128, device=device).bfloat16() for _ in range(2))
    boxes = [ar.mailbox.state(r).mailbox.clone() for r in range(2)]

    def step(a, b):
        ar.publish(a, rank=0)
        ar.publish(b, rank=1)
        return ar.collect(rank=0), ar.collect(rank=1)

    with pytest.raises(RuntimeError, match="the Lamport mailbox reached the kernel as a copy"):
        _compile(step, device, "aot_eager")(x0, x1)
    assert all(bytes_equal(ar.mailbox.state(r).mailbox, boxes[r]) for r in range(2))
    assert all(bytes_equal(s, (x0.float() + x1.float()).bfloat16()) for s in step(x0, x1))


def test_fullgraph_allreduce_mhc_simulated_tp1(device):
    """AllReduceMHC's Lamport path goes through registered ops (torch.ops.seam.lamport_publish /
    lamport_mhc_consume), so a whole boundary call traces; compiled and eager give the same bytes."""
    m, hc, hidden = 2, 2, 128
    g = torch.Generator().manual_seed(5)
    res = torch.randn(m, hc, hidden, generator=g).bfloat16().to(device)
    post = torch.rand(m, hc, generator=g).to(device)
    comb = torch.rand(m, hc, hc, generator=g).to(device)
    pre = torch.rand(m, hc, generator=g).to(device)
    w = torch.randn(hidden, generator=g).bfloat16().to(device)
    x = torch.randn(m, hidden, generator=g).bfloat16().to(device)

    def boundary(op, x):
        return op(x, res, post, comb, pre, w, 1e-6)

    def new_op():
        return seam.AllReduceMHC(hidden_size=hidden, hc_mult=hc, max_num_tokens=4, top_k=1,
                                 group=seam.SimulatedGroup(1, device))

    eager_op, compiled_op = new_op(), new_op()
    got = _compile(lambda t: boundary(compiled_op, t), device, "inductor")(x)  # as the test above
    want = boundary(eager_op, x)
    assert all(bytes_equal(a, b) for a, b in zip(got, want))


def test_fullgraph_out_buffers(device):
    x = torch.randn(3, 128, device=device).bfloat16()
    r = torch.randn(3, 128, device=device).bfloat16()
    w = torch.randn(128, device=device).bfloat16()
    v = torch.empty(3, 128, dtype=torch.float8_e4m3fn, device=device)
    s = torch.empty(seam.mxfp8_scale_numel(3, 128), dtype=torch.uint8, device=device)
    ro = torch.empty_like(x)

    def chain(x, r):
        return seam.gemma_fused_add_rms_norm_mxfp8(x, r, w, 1e-6, out=(v, s, ro))

    _compile(chain, device)(x, r)
    want = seam.gemma_fused_add_rms_norm_mxfp8(x, r, w, 1e-6)
    assert bytes_equal(v, want[0]) and bytes_equal(s, want[1]) and bytes_equal(ro, want[2])


@pytest.mark.parametrize("case", ["out rows", "norm weight", "out strides"])
def test_fullgraph_keeps_a_shape_error_message_at_a_dynamic_m(case, device):
    """With M dynamic the shapes and strides hold symbolic sizes: the message is formatted so that Dynamo can trace
    it, with their values (str() of a SymInt it cannot trace, a list's repr shows the symbols), so its Unsupported
    keeps seam's message, as the README promises."""
    if case == "out strides":
        def fn(x, o):
            return seam.swiglu_oai(x, out=o)

        args = [torch.randn(4, 256, device=device).bfloat16(), torch.empty(4, 128, device=device).bfloat16()]
        bad = [torch.randn(6, 256, device=device).bfloat16(), torch.empty(128, 6, device=device).bfloat16().t()]
        want = "out must be contiguous: strides (128, 1) for shape [6, 128], got (1, 6)"
    elif case == "out rows":
        def fn(x, o):
            return seam.swiglu_oai(x, out=o)

        args = [torch.randn(4, 256, device=device).bfloat16(), torch.empty(4, 128, device=device).bfloat16()]
        bad = [torch.randn(6, 256, device=device).bfloat16(), torch.empty(5, 128, device=device).bfloat16()]
        want = "out must have shape [6, 128], got [5, 128]"
    else:
        def fn(x, w):
            return seam.gemma_rms_norm(x, w, 1e-6)

        args = [torch.randn(4, 256, device=device).bfloat16(), torch.randn(256, device=device).bfloat16()]
        bad = [torch.randn(6, 256, device=device).bfloat16(), torch.randn(128, device=device).bfloat16()]
        want = "weight must have shape [256], got [128]"
    compiled = torch.compile(fn, backend="eager", fullgraph=True, dynamic=True)
    compiled(*args)
    before = [t.clone() for t in bad]
    with pytest.raises(Exception, match=re.escape(want)):
        compiled(*bad)
    assert all(bytes_equal(a, b) for a, b in zip(bad, before))


def test_fullgraph_qkv_fused_epilogue(device, monkeypatch):
    """The fused QKV op traces whole (cache address checks and SEAM_DEBUG's host reads are
    skipped while tracing) and writes what the eager call writes."""
    from seam.formats import nvfp4

    monkeypatch.setenv("SEAM_DEBUG", "1")
    m, k, n = 2, 128, 20 * 128  # nkv 1
    x = torch.randn(m, k, device=device).bfloat16()
    w = seam.MXFP8Weight.from_bf16((torch.randn(n, k) * 0.05).bfloat16().to(device))
    xq, xsf = seam.mxfp8_quantize(x)
    positions = torch.tensor([3, 0], device=device)
    cos_sin = torch.randn(8, 64, device=device).bfloat16()
    norms = [torch.randn(128, device=device).bfloat16() for _ in range(4)]
    slots = torch.tensor([5, -1], device=device)

    def outputs():
        return dict(kv_cache=nvfp4.empty_kv_cache(2, 1, 4, device), index_cache=nvfp4.empty_index_cache(2, 4, device),
                    index_q_out=torch.zeros(m, 128, dtype=torch.float8_e4m3fn, device=device),
                    q_out=torch.zeros(m, 16 * 128, dtype=torch.bfloat16, device=device))

    def step(xq, xsf, out):
        seam.qkv_index_fused_epilogue(xq, xsf, w.values, w.scales, positions, cos_sin, *norms, 1e-6,
                                      slot_mapping=slots, index_slot_mapping=slots, **out)

    got, want = outputs(), outputs()  # zeroed caches
    _compile(step, device)(xq, xsf, got)
    step(xq, xsf, want)
    for name in got:
        assert bytes_equal(got[name], want[name]), name
    assert got["kv_cache"].any()  # slot 5 was written



def test_one_trace_serves_every_m(device):
    """With a dynamic M (torch.compile(dynamic=True), what an engine compiles once for every batch size) a
    boundary traces once: norm + MXFP8 -> MXFP8Linear on the hand-off, mxfp8_linear on BF16 rows, the fused QKV
    op. Their M-dependent choices (the GEMM tile, where BF16 rows are quantized, the QKV launch's tile) are made
    in the ops at call time, so the graph holds no guard on M; each M gives the eager bytes. (M 1 is compiled
    apart: torch specializes sizes 0 and 1. The producers' a_deq="auto" rule depends on M on Hopper: a_deq=False.)"""
    from torch._dynamo.testing import CompileCounter

    from seam.formats import nvfp4
    from seam.ops.norm import gemma_norm_mxfp8_activation

    k, n = 128, 20 * 128  # the QKV op's N at nkv 1
    g = torch.Generator().manual_seed(11)
    w = seam.MXFP8Weight.from_bf16((torch.randn(n, k, generator=g) * 0.05).bfloat16().to(device))
    small = seam.MXFP8Weight.from_bf16((torch.randn(128, k, generator=g) * 0.05).bfloat16().to(device))
    layer = seam.MXFP8Linear(small)
    norm_w = torch.randn(k, generator=g).bfloat16().to(device)
    cos_sin = torch.randn(512, 64, generator=g).bfloat16().to(device)
    norms = [torch.randn(128, generator=g).bfloat16().to(device) for _ in range(4)]

    def boundary(x, res, positions, slots, out):
        # a_deq="auto" (the default) depends on M on a Hopper GPU, where Dynamo would guard its bounds
        qa, res_out = gemma_norm_mxfp8_activation(x, res, norm_w, 1e-6, a_deq=False)
        seam.qkv_index_fused_epilogue(qa.values, qa.scales, w.values, w.scales, positions, cos_sin, *norms, 1e-6,
                                      slot_mapping=slots, index_slot_mapping=slots, **out)
        return layer(qa), seam.mxfp8_linear(res_out, small), res_out

    counter = CompileCounter()
    compiled = torch.compile(boundary, backend=counter, dynamic=True, fullgraph=True)
    for m in (3, 17, 33, 70):  # across the pickers' bounds; not 2 or 4, other sizes of the caches
        x, res = (torch.randn(m, k, generator=g).bfloat16().to(device) for _ in range(2))
        positions = torch.randint(0, 512, (m,), generator=g).to(device)
        slots = torch.randperm(4 * m, generator=g)[:m].to(device)

        def outputs():
            return dict(kv_cache=nvfp4.empty_kv_cache(m, 1, 4, device),
                        index_cache=nvfp4.empty_index_cache(m, 4, device),
                        index_q_out=torch.zeros(m, 128, dtype=torch.float8_e4m3fn, device=device),
                        q_out=torch.zeros(m, 16 * 128, dtype=torch.bfloat16, device=device))

        got_out, want_out = outputs(), outputs()
        got, want = compiled(x, res, positions, slots, got_out), boundary(x, res, positions, slots, want_out)
        assert all(bytes_equal(a, b) for a, b in zip(got, want)), m
        assert all(bytes_equal(got_out[name], want_out[name]) for name in got_out), m
    assert counter.frame_count == 1

def test_fullgraph_prequant_hand_off(device):
    """README's hand-off (norm + MXFP8 -> set_prequant -> layer) traces whole. Traced tensors have no
    address or version counter (nor is_inference()), so a traced set_prequant registers nothing and
    the layer quantizes its input itself (the same bytes); the rows themselves (layer(qa)) need no
    registration. An eager registration is left for an eager forward."""
    g = torch.Generator().manual_seed(3)
    layer = seam.MXFP8Linear.from_bf16((torch.randn(64, 128, generator=g) * 0.05).bfloat16().to(device))
    x, r = (torch.randn(3, 128, generator=g).bfloat16().to(device) for _ in range(2))
    w = torch.randn(128, generator=g).bfloat16().to(device)

    def step(x, r):
        values, scales, normed, _ = seam.gemma_fused_add_rms_norm_mxfp8(x, r, w, 1e-6, also_bf16=True)
        qa = seam.QuantizedActivation(values, scales, torch.bfloat16, tuple(values.shape))
        layer.set_prequant(normed, qa)
        return layer(normed), layer(qa)

    got = _compile(step, device)(x, r)
    want = step(x, r)  # eager: the first forward takes the hand-off
    assert all(bytes_equal(a, b) for a, b in zip(got, want))

    values, scales, normed, _ = seam.gemma_fused_add_rms_norm_mxfp8(x, r, w, 1e-6, also_bf16=True)
    qa = seam.QuantizedActivation(values, scales, torch.bfloat16, tuple(values.shape))
    layer.set_prequant(normed, qa)
    assert bytes_equal(_compile(layer, device)(normed), want[0])
    assert layer.take_prequant(normed) is qa


def test_fullgraph_op_call_leaving_optional_outputs_out(device):
    """``gemma_fused_add_rms_norm`` leaves the norm op's MXFP8 outputs (optional written arguments) out of its
    call: traced, every argument goes by position (torch 2.11 failed on the omitted ones: log run 63)."""
    x = torch.randn(3, 128, device=device).bfloat16()
    r = torch.randn(3, 128, device=device).bfloat16()
    w = torch.randn(128, device=device).bfloat16()
    got = _compile(lambda x, r: seam.gemma_fused_add_rms_norm(x, r, w, 1e-6), device)(x, r)
    want = seam.gemma_fused_add_rms_norm(x, r, w, 1e-6)
    assert all(bytes_equal(a, b) for a, b in zip(got, want))


def test_export_with_a_dynamic_m(device):
    """torch.export with a dynamic M (its sizes are torch.SymInt there, which the checks take as ints): one
    exported program, the eager bytes at every M."""
    from seam.ops.norm import gemma_norm_mxfp8_activation

    k = 128
    g = torch.Generator().manual_seed(12)
    w = seam.MXFP8Weight.from_bf16((torch.randn(128, k, generator=g) * 0.05).bfloat16().to(device))
    norm_w = torch.randn(k, generator=g).bfloat16().to(device)

    class Boundary(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = seam.MXFP8Linear(w)

        def forward(self, x, res):
            qa, res_out = gemma_norm_mxfp8_activation(x, res, norm_w, 1e-6, a_deq=False)  # "auto": as above
            return self.linear(qa), seam.mxfp8_linear(res_out, w), res_out

    module = Boundary()
    m = torch.export.Dim("m", min=2, max=8192)
    x, res = (torch.randn(5, k, generator=g).bfloat16().to(device) for _ in range(2))
    program = torch.export.export(module, (x, res), dynamic_shapes=({0: m}, {0: m}))
    for rows in (3, 40, 70):
        x, res = (torch.randn(rows, k, generator=g).bfloat16().to(device) for _ in range(2))
        assert all(bytes_equal(a, b) for a, b in zip(program.module()(x, res), module(x, res))), rows


def test_choices_that_compare_m_are_made_without_it_while_tracing(device, monkeypatch):
    """At a traced (dynamic) M nothing of seam's compares M: the producers' a_deq="auto" writes no A_deq (on
    Hopper its rule compares M, which mark_dynamic refused as a constraint violation; the rule is faked here), and
    QuantizedActivation.rows copies the scales (a view of them was guarded on M % 128, and a graph replayed
    without its guards read other rows' scales) and keeps A_deq's cut rows (its K order does not depend on M). One
    graph each, the eager bytes at every M."""
    from torch._dynamo.testing import CompileCounter

    from seam.formats.a_deq import a_deq_from_mxfp8
    from seam.ops.norm import gemma_norm_mxfp8_activation

    monkeypatch.setattr("seam.kernels.wgmma_config.wgmma_supported", lambda device: True)  # the Hopper rule
    k = 128
    g = torch.Generator().manual_seed(13)
    norm_w = torch.randn(k, generator=g).bfloat16().to(device)

    def produce(x, res):
        qa, _ = gemma_norm_mxfp8_activation(x, res, norm_w, 1e-6)  # a_deq="auto"
        return qa.values, qa.scales, qa.a_deq is None

    def cut(x, res):
        qa, _ = gemma_norm_mxfp8_activation(x, res, norm_w, 1e-6, a_deq=True)
        half = qa.rows(x.shape[0] // 2, x.shape[0])
        return half.values, half.scales, half.a_deq

    for fn, mark in ((produce, True), (cut, False)):
        counter = CompileCounter()
        compiled = torch.compile(fn, backend=counter, fullgraph=True, dynamic=True)
        for m in (256, 300, 260):
            x, res = (torch.randn(m, k, generator=g).bfloat16().to(device) for _ in range(2))
            if mark:  # the range mark_dynamic promises for every M: the a_deq rule's guards broke it
                torch._dynamo.mark_dynamic(x, 0, min=2, max=4096)
                torch._dynamo.mark_dynamic(res, 0, min=2, max=4096)
            values, scales, a_deq = compiled(x, res)
            normed = seam.gemma_fused_add_rms_norm(x, res, norm_w, 1e-6)[0]
            want = seam.mxfp8_quantize(normed if fn is produce else normed[m // 2:].contiguous())
            assert bytes_equal(values, want[0]) and bytes_equal(scales, want[1]), (fn.__name__, m)
            assert a_deq is True if fn is produce else bytes_equal(a_deq, a_deq_from_mxfp8(*want)), (fn.__name__, m)
        assert counter.frame_count == 1, fn.__name__


def test_make_fx_and_fake_tensor_mode_trace_the_ops(device):
    """Tracers that are not Dynamo (make_fx's proxy mode, FakeTensorMode: a dispatch mode on the stack) see seam's
    ops too: make_fx records the torch.ops.seam nodes, whose graph replays the eager bytes; under FakeTensorMode
    the public calls return fake outputs of the right shapes without launching (a launch on fake tensors fails)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    from seam.ops.norm import gemma_norm_mxfp8_activation

    g = torch.Generator().manual_seed(13)
    x, res = (torch.randn(4, 256, generator=g).bfloat16().to(device) for _ in range(2))
    norm_w = torch.randn(256, generator=g).bfloat16().to(device)
    w = seam.MXFP8Weight.from_bf16((torch.randn(2560, 256, generator=g) * 0.05).bfloat16().to(device))

    def boundary(x):
        return seam.mxfp8_linear(gemma_norm_mxfp8_activation(x, res, norm_w, 1e-6)[0], w)

    graph = make_fx(boundary)(x)
    assert [str(n.target) for n in graph.graph.nodes if "seam" in str(n.target)] == [
        "seam.fused_add_rms_norm.default", "seam.mxfp8_linear.default"]
    assert bytes_equal(graph(x), boundary(x))

    with FakeTensorMode() as mode:
        fx, fres, fnorm = (mode.from_tensor(t) for t in (x, res, norm_w))
        fw = seam.MXFP8Weight(mode.from_tensor(w.values), mode.from_tensor(w.scales))
        values, scales, res_out = seam.gemma_fused_add_rms_norm_mxfp8(fx, fres, fnorm, 1e-6)
        out = seam.mxfp8_linear(fx, fw)
        swiglu_values, swiglu_scales = seam.swiglu_oai_mxfp8(torch.cat([fx, fres], 1))
    assert (values.shape, res_out.shape, out.shape, swiglu_values.shape) == ((4, 256), (4, 256), (4, 2560), (4, 256))
    assert out.dtype == torch.bfloat16 and scales.dtype == swiglu_scales.dtype == torch.uint8


def test_a_dispatch_mode_that_traces_nothing_keeps_the_checks(device):
    """Under a dispatch mode that runs real tensors (FlopCounterMode) the calls still refuse bad buffers before any
    launch (overlapping outputs, misaligned ones), change nothing, and give the eager bytes through the dispatcher."""
    from torch.utils.flop_counter import FlopCounterMode

    x = torch.randn(4, 128, device=device).bfloat16()
    want_values, want_scales = seam.mxfp8_quantize(x)
    n = want_scales.numel()
    base = torch.zeros(4 * 128 + n, dtype=torch.uint8, device=device)
    values = base[:512].view(torch.float8_e4m3fn).view(4, 128)
    with FlopCounterMode(display=False):
        with pytest.raises(ValueError, match="overlap in memory"):
            seam.mxfp8_quantize(x, out=(values, base[448:448 + n]))
        with pytest.raises(ValueError, match="aligned"):
            seam.mxfp8_quantize(x, out=(base[1:513].view(torch.float8_e4m3fn).view(4, 128), base[:n]))
        assert not base.any()
        got_values, got_scales = seam.mxfp8_quantize(x)
    assert bytes_equal(got_values, want_values) and bytes_equal(got_scales, want_scales)


def test_flop_counter_mode_counts_the_gemms(device):
    """FlopCounterMode counts 2 M N K for ``mxfp8_linear`` (BF16 rows or a QuantizedActivation) and for the QKV op's
    GEMM, 0 for its epilogue alone on a given accumulator; under the mode the BF16 rows' product is the eager
    call's."""
    from torch.utils.flop_counter import FlopCounterMode

    from seam.formats import nvfp4
    from seam.ops.qkv import qkv_epilogue

    m, k, n = 3, 128, 20 * 128  # nkv 1
    x = torch.randn(m, k, device=device).bfloat16()
    w = seam.MXFP8Weight.from_bf16((torch.randn(n, k) * 0.05).bfloat16().to(device))
    xq, xsf = seam.mxfp8_quantize(x)
    want = seam.mxfp8_linear(x, w)
    epilogue = dict(positions=torch.tensor([3, 0, 1], device=device), cos_sin_cache=torch.randn(8, 64, device=device)
                    .bfloat16(), norms=[torch.randn(128, device=device).bfloat16() for _ in range(4)])
    slots = torch.tensor([5, -1, 2], device=device)

    def outputs():
        return dict(kv_cache=nvfp4.empty_kv_cache(2, 1, 4, device), index_cache=nvfp4.empty_index_cache(2, 4, device),
                    index_q_out=torch.zeros(m, 128, dtype=torch.float8_e4m3fn, device=device),
                    q_out=torch.zeros(m, 16 * 128, dtype=torch.bfloat16, device=device))

    counted = {}
    for name, call in {
        "rows": lambda: seam.mxfp8_linear(x, w),
        "quantized": lambda: seam.mxfp8_linear(seam.QuantizedActivation(xq, xsf), w),
        "qkv": lambda: seam.qkv_index_fused_epilogue(
            xq, xsf, w.values, w.scales, epilogue["positions"], epilogue["cos_sin_cache"], *epilogue["norms"], 1e-6,
            slot_mapping=slots, index_slot_mapping=slots, **outputs()),
        "epilogue": lambda: qkv_epilogue(
            want.float(), epilogue["positions"], epilogue["cos_sin_cache"], *epilogue["norms"], 1e-6,
            slot_mapping=slots, index_slot_mapping=slots, **outputs()),
    }.items():
        with FlopCounterMode(display=False) as mode:
            out = call()
        counted[name] = mode.get_total_flops()
        if name == "rows":
            assert bytes_equal(out, want)
    assert counted == {"rows": 2 * m * n * k, "quantized": 2 * m * n * k, "qkv": 2 * m * n * k, "epilogue": 0}
