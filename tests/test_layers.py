"""MXFP8Linear and the pre-quantized hand-off (docs/spec/integration.md)."""

import pytest
import torch

import seam
from seam.compare import bytes_equal
import seam.layers
from seam.layers import MXFP8Linear


@pytest.fixture
def counted_quantize(monkeypatch):
    """Count the forwards in which the linear quantizes BF16 input itself (a separate quantizer
    launch or, at small M, inside the GEMM) instead of using a hand-off."""
    calls = []
    real = seam.layers.mxfp8_linear

    def counting(x, *args, **kwargs):
        if isinstance(x, torch.Tensor):
            calls.append(x.shape)
        return real(x, *args, **kwargs)

    monkeypatch.setattr(seam.layers, "mxfp8_linear", counting)
    return calls


def _layer(device, n=64, k=128, seed=0):
    g = torch.Generator().manual_seed(seed)
    return MXFP8Linear.from_bf16((torch.randn(n, k, generator=g) * 0.05).bfloat16().to(device))


def test_prequant_consumed_once(device, counted_quantize):
    layer = _layer(device)
    x = torch.randn(5, 128).bfloat16().to(device)
    values, scales = seam.mxfp8_quantize(x)
    qa = seam.QuantizedActivation(values, scales, torch.bfloat16, (5, 128))
    counted_quantize.clear()
    layer.set_prequant(x, qa)
    y_pre = layer(x)
    assert counted_quantize == []  # the hand-off replaced the quantizer launch
    y_self = layer(x)  # consumed once: now the layer quantizes itself
    assert len(counted_quantize) == 1
    assert bytes_equal(y_pre, y_self)


def test_prequant_ignored_for_other_input(device, counted_quantize):
    layer = _layer(device)
    x = torch.randn(5, 128).bfloat16().to(device)
    other = x.clone()  # same shape and values, different storage
    values, scales = seam.mxfp8_quantize(x)
    layer.set_prequant(x, seam.QuantizedActivation(values, scales, torch.bfloat16, (5, 128)))
    counted_quantize.clear()
    y = layer(other)
    assert len(counted_quantize) == 1
    assert layer.take_prequant(x) is None  # a mismatching forward still consumes the registration
    assert bytes_equal(y, layer(x))


def test_prequant_consumed_by_a_forward_of_other_rank(device):
    """A forward on x [..., K] of other than 2-D consumes the registration too (it is never the registered rows):
    under inference_mode, where no version counter shows the registered buffer refilled, a registration left
    behind would hand stale rows to the next 2-D forward on that buffer."""
    layer = _layer(device)
    with torch.inference_mode():
        buf = torch.randn(3, 128).bfloat16().to(device)
        layer.set_prequant(buf, seam.QuantizedActivation(*seam.mxfp8_quantize(buf)))
        layer(torch.randn(2, 3, 128).bfloat16().to(device))
        assert layer._prequant is None
        buf.copy_(torch.randn(3, 128).bfloat16().to(device) * 4)  # the buffer refilled in place
        assert bytes_equal(layer(buf), seam.mxfp8_linear(buf, layer.weight))
        layer.set_prequant(buf, seam.QuantizedActivation(*seam.mxfp8_quantize(buf)))
        with pytest.raises(ValueError, match=r"x must have shape \[\.\.\., 128\] \(in_features\)"):
            layer(torch.randn(2, 3, 64).bfloat16().to(device))
        assert layer._prequant is not None  # a refused call changes nothing


def test_prequant_shape_checked(device):
    layer = _layer(device)
    x = torch.randn(5, 128).bfloat16().to(device)
    values, scales = seam.mxfp8_quantize(x[:4])
    with pytest.raises(ValueError, match="shape"):
        layer.set_prequant(x, seam.QuantizedActivation(values, scales, torch.bfloat16, (4, 128)))
    v, s = seam.mxfp8_quantize(x, scale_layout="row_major")
    with pytest.raises(ValueError, match="swizzled"):
        layer.set_prequant(x, seam.QuantizedActivation(v, s, torch.bfloat16, (5, 128), "row_major"))
    with pytest.raises(TypeError, match="QuantizedActivation"):
        layer.set_prequant(x, (values, scales))


def test_prequant_the_forward_cannot_use_is_refused_at_registration(device):
    """Rows the forward would refuse (values not contiguous, K not in_features, another device) are refused by
    set_prequant, naming qa: registered, they made every later forward with a valid x raise."""
    layer = _layer(device)  # in_features 128
    x = torch.randn(4, 128).bfloat16().to(device)
    v, s = seam.mxfp8_quantize(x)
    strided = torch.empty(4, 256, dtype=v.dtype, device=device)[:, ::2]
    strided.view(torch.uint8).copy_(v.view(torch.uint8))
    with pytest.raises(ValueError, match=r"qa.values must be contiguous"):
        layer.set_prequant(x, seam.QuantizedActivation(strided, s))
    wide = torch.randn(4, 256).bfloat16().to(device)
    with pytest.raises(ValueError, match=r"x must have shape \[M, 128\] \(in_features"):
        layer.set_prequant(wide, seam.QuantizedActivation(*seam.mxfp8_quantize(wide)))
    meta = seam.QuantizedActivation(v.to("meta"), s.to("meta"))
    with pytest.raises(ValueError, match="meta"):
        layer.set_prequant(x, meta)
    assert layer._prequant is None
    assert torch.equal(layer(x).view(torch.int16), layer(x.clone()).view(torch.int16))  # the layer still works


def test_seam_debug_refuses_prequant_rows_of_other_data(device, monkeypatch):
    """With SEAM_DEBUG, set_prequant compares qa with mxfp8_quantize(x): rows of other data raise ValueError
    (without it they would be used silently, as documented); x's own rows register as before."""
    layer = _layer(device)
    x = torch.randn(5, 128).bfloat16().to(device)
    other = seam.QuantizedActivation(*seam.mxfp8_quantize(x + 1), torch.bfloat16, (5, 128))
    layer.set_prequant(x, other)  # not checked by default
    assert layer.take_prequant(x) is other
    monkeypatch.setenv("SEAM_DEBUG", "1")
    with pytest.raises(ValueError, match="qa does not hold the MXFP8 rows of x"):
        layer.set_prequant(x, other)
    assert layer.take_prequant(x) is None  # nothing registered
    own = seam.QuantizedActivation(*seam.mxfp8_quantize(x), torch.bfloat16, (5, 128))
    layer.set_prequant(x, own)
    assert layer.take_prequant(x) is own


def test_quantized_activation_input_matches_bf16_input(device):
    layer = _layer(device, n=32, k=256, seed=1)
    x = torch.randn(3, 256).bfloat16().to(device)
    v, s = seam.mxfp8_quantize(x)
    y_q = layer(seam.QuantizedActivation(v, s, torch.bfloat16, (3, 256)))
    assert bytes_equal(y_q, layer(x))


@pytest.mark.parametrize(
    "rewrite",
    [
        pytest.param(lambda buf, qa: buf.copy_(torch.randn_like(buf)), id="input-by-torch"),
        pytest.param(
            lambda buf, qa: seam.gemma_rms_norm(
                torch.randn_like(buf), torch.randn(128, device=buf.device).bfloat16(), 1e-6, out=buf
            ),
            id="input-by-seam-op",
        ),
        pytest.param(
            lambda buf, qa: seam.mxfp8_quantize(torch.randn_like(buf), out=(qa.values, qa.scales)),
            id="rows-by-seam-op",
        ),
    ],
)
def test_prequant_not_used_after_a_rewrite(device, counted_quantize, rewrite):
    """A static input buffer refilled by the next step, or its registered MXFP8 rows rewritten,
    must not feed stale rows (seam's eager ops bump version counters like torch's own)."""
    layer = _layer(device)
    buf = torch.randn(3, 128).bfloat16().to(device)
    values, scales = seam.mxfp8_quantize(buf)
    qa = seam.QuantizedActivation(values, scales, torch.bfloat16, (3, 128))
    layer.set_prequant(buf, qa)
    rewrite(buf, qa)
    counted_quantize.clear()
    y = layer(buf)
    assert len(counted_quantize) == 1
    assert bytes_equal(y, seam.mxfp8_linear(buf, layer.weight))


def test_prequant_not_used_after_its_a_deq_is_rewritten(device, counted_quantize):
    """A hand-off carrying A_deq (seam.formats.a_deq, which the Hopper decode GEMM reads in place of the
    MXFP8 rows) is stale once A_deq changes, even with the rows untouched."""
    from seam.formats.a_deq import a_deq_from_mxfp8

    layer = _layer(device)
    buf = torch.randn(3, 128).bfloat16().to(device)
    values, scales = seam.mxfp8_quantize(buf)
    qa = seam.QuantizedActivation(values, scales, torch.bfloat16, (3, 128), a_deq=a_deq_from_mxfp8(values, scales))
    layer.set_prequant(buf, qa)
    qa.a_deq.zero_()
    counted_quantize.clear()
    y = layer(buf)
    assert len(counted_quantize) == 1
    assert bytes_equal(y, seam.mxfp8_linear(buf, layer.weight))


def test_prequant_not_used_for_a_dead_tensor_at_a_reused_address(device, counted_quantize):
    layer = _layer(device)
    x = torch.randn(3, 128).bfloat16().to(device)
    values, scales = seam.mxfp8_quantize(x)
    layer.set_prequant(x.clone(), seam.QuantizedActivation(values, scales, torch.bfloat16, (3, 128)))  # temporary dies
    counted_quantize.clear()
    layer(x.clone())  # may land at the same address
    assert len(counted_quantize) == 1


def test_prequant_rejects_non_bf16(device):
    layer = _layer(device)
    x = torch.randn(3, 128, device=device)
    values, scales = seam.mxfp8_quantize(x)
    with pytest.raises(TypeError, match="BF16"):
        layer.set_prequant(x, seam.QuantizedActivation(values, scales, torch.bfloat16, (3, 128)))


@pytest.mark.parametrize(
    "bad,match",
    [
        (lambda device: dict(quantize="bogus"), "quantize"),
        (lambda device: dict(out=torch.empty(5, 32, dtype=torch.bfloat16, device=device)), "out must have shape"),
    ],
    ids=["quantize", "out"],
)
def test_rejected_forward_keeps_the_hand_off(device, counted_quantize, bad, match):
    layer = _layer(device)
    x = torch.randn(5, 128).bfloat16().to(device)
    values, scales = seam.mxfp8_quantize(x)
    layer.set_prequant(x, seam.QuantizedActivation(values, scales, torch.bfloat16, (5, 128)))
    with pytest.raises(ValueError, match=match):
        layer(x, **bad(device))
    counted_quantize.clear()
    layer(x)
    assert counted_quantize == []  # the registration survived the rejected call


def test_prequant_under_inference_mode(device, counted_quantize):
    """Inference tensors have no version counter: the hand-off still works, keyed on address."""
    layer = _layer(device)
    with torch.inference_mode():
        x = torch.randn(3, 128).bfloat16().to(device)
        values, scales = seam.mxfp8_quantize(x)
        layer.set_prequant(x, seam.QuantizedActivation(values, scales, torch.bfloat16, (3, 128)))
        counted_quantize.clear()
        y = layer(x)
        assert counted_quantize == []
        assert bytes_equal(y, seam.mxfp8_linear(x, layer.weight))


def test_weight_buffers_move_with_the_module_and_keep_their_bytes(device):
    """.to() moves the weight (it was a plain attribute left behind); a model-wide dtype cast leaves
    the E4M3 bytes and scales as they are, and the layer computes what it computed before."""
    layer = _layer(device)
    x = torch.randn(3, 128).bfloat16().to(device)
    want, values, scales = layer(x), layer.weight.values.clone(), layer.weight.scales.clone()
    assert {name for name, _ in layer.named_buffers()} == {"weight_values", "weight_scales"}
    for cast in (torch.bfloat16, torch.float16, torch.float64):
        layer.to(cast)
        assert layer.weight.values.dtype == torch.float8_e4m3fn
        assert bytes_equal(layer.weight.values, values) and bytes_equal(layer.weight.scales, scales)
    assert bytes_equal(layer(x), want)
    meta = layer.to("meta")
    assert meta.weight.values.device.type == "meta" and meta.weight.scales.device.type == "meta"
    assert meta.weight.shape == (64, 128) and meta.weight.values.dtype == torch.float8_e4m3fn


def test_state_dict_round_trip(device):
    import io

    saved, other = _layer(device, seed=0), _layer(device, seed=1)
    x = torch.randn(3, 128).bfloat16().to(device)
    buf = io.BytesIO()
    torch.save(saved.state_dict(), buf)
    buf.seek(0)
    other.load_state_dict(torch.load(buf))
    assert bytes_equal(other.weight.values, saved.weight.values) and bytes_equal(other.weight.scales, saved.weight.scales)
    assert bytes_equal(other(x), saved(x))


def test_a_layer_with_a_pending_hand_off_pickles_without_it(device, counted_quantize):
    """torch.save of the whole layer (pickle) while a hand-off is registered: the copy has no hand-off (it named a
    tensor of this process) and quantizes its input itself; the original keeps its registration."""
    import io

    layer = _layer(device)
    x = torch.randn(5, 128).bfloat16().to(device)
    values, scales = seam.mxfp8_quantize(x)
    layer.set_prequant(x, seam.QuantizedActivation(values, scales, torch.bfloat16, (5, 128)))
    buf = io.BytesIO()
    torch.save(layer, buf)
    buf.seek(0)
    copy = torch.load(buf, weights_only=False)
    counted_quantize.clear()
    assert bytes_equal(copy(x), layer(x))
    assert len(counted_quantize) == 1  # the copy quantized x; the original took its hand-off


def test_weight_assignment_and_repr(device):
    layer = _layer(device)
    assert repr(layer) == "MXFP8Linear(in_features=128, out_features=64)"
    new = seam.MXFP8Weight.from_bf16(torch.randn(32, 256).bfloat16().to(device))
    assert repr(new) == f"MXFP8Weight(N=32, K=256, device={new.values.device})"  # not the tensors' contents
    layer.weight = new
    assert (layer.in_features, layer.out_features) == (256, 32)
    assert bytes_equal(layer.weight.values, new.values) and bytes_equal(layer.weight_scales, new.scales)
    with pytest.raises(TypeError, match="weight must be a seam.MXFP8Weight"):
        layer.weight = new.values
    with pytest.raises(TypeError, match="weight must be a seam.MXFP8Weight"):
        MXFP8Linear(new.values)


def test_from_bf16_takes_fp16_and_fp32_as_documented(device):
    w = (torch.randn(64, 128) * 0.05).to(device)
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        layer = MXFP8Linear.from_bf16(w.to(dtype))
        assert bytes_equal(layer.weight.values, seam.MXFP8Weight.from_bf16(w.to(dtype)).values)
    assert "BF16, FP16 or FP32" in MXFP8Linear.from_bf16.__doc__
    with pytest.raises(TypeError, match="w must have dtype"):
        MXFP8Linear.from_bf16(w.double())
    raises = MXFP8Linear.forward.__doc__.split("Raises:")[1]
    assert "TypeError / ValueError" in raises and "RuntimeError" in raises
    with pytest.raises(ValueError, match="K"):
        layer(torch.zeros(2, 64, dtype=torch.bfloat16, device=device))


def test_weight_built_once_per_buffers(device):
    """The forward's MXFP8Weight is built (and checked) once, not per call, and follows its buffers: an
    in-place load gives a new one on the same buffers (its byte facts measured again), moved or replaced
    buffers give a new one."""
    layer, source = _layer(device, seed=0), _layer(device, seed=1)
    first = layer.weight
    assert layer.weight is first and not first.byte_facts().nan_codes
    state = source.state_dict()
    state["weight_values"][0, 0] = 0x7F  # an E4M3 NaN code
    layer.load_state_dict(state)  # copies into the same buffers
    loaded = layer.weight
    assert loaded is not first and loaded.values.data_ptr() == first.values.data_ptr()
    assert layer.weight is loaded and loaded.byte_facts().nan_codes
    assert bytes_equal(loaded.values, source.weight.values) and first.byte_facts() is None
    moved = layer.to("meta").weight
    assert moved is not first and moved.values.device.type == "meta"


def test_weight_rebuilt_after_writes_version_counters_miss(device):
    """load_state_dict into buffers made under torch.inference_mode() (no version counter) and ``.data =`` on a
    buffer (same tensor object and version, other storage) give a new record of the new bytes and byte facts."""
    with torch.inference_mode():
        layer = _layer(device, seed=0)
    state = _layer(device, seed=1).state_dict()
    state["weight_values"][0, 0] = 0x7F  # an E4M3 NaN code
    first = layer.weight
    with torch.inference_mode():
        layer.load_state_dict(state)
    assert layer.weight is not first and layer.weight.byte_facts().nan_codes
    layer = _layer(device, seed=0)
    first = layer.weight
    layer.weight_values.data = state["weight_values"].clone()
    assert layer.weight is not first and layer.weight.byte_facts().nan_codes
    assert bytes_equal(layer.weight.values, state["weight_values"].view(torch.float8_e4m3fn))


def test_leading_dimensions_as_nn_linear(device):
    """x [..., K] -> [..., N], the same bytes as the flattened 2-D call; out= of that shape; bad out refused."""
    layer = _layer(device)
    x = torch.randn(2, 3, 128, generator=torch.Generator().manual_seed(4)).bfloat16().to(device)
    want = layer(x.reshape(6, 128))
    got = layer(x)
    assert got.shape == (2, 3, 64) and bytes_equal(got.reshape(6, 64), want)
    out = torch.empty(2, 3, 64, dtype=torch.bfloat16, device=device)
    assert layer(x, out=out) is not None and bytes_equal(out.reshape(6, 64), want)
    # each message names what is wrong: the shape, or (the shape matching) the strides
    for bad, match in ((torch.empty(6, 64, dtype=torch.bfloat16, device=device),
                        r"out must have shape \[2, 3, 64\], got \[6, 64\]"),
                       (torch.empty(2, 64, 3, dtype=torch.bfloat16, device=device).transpose(1, 2),
                        r"out must be contiguous: strides \(192, 64, 1\) for shape \[2, 3, 64\], got \(192, 1, 3\)")):
        with pytest.raises(ValueError, match=match):
            layer(x, out=bad)
    with pytest.raises(TypeError, match="out must have dtype torch.bfloat16"):
        layer(x, out=torch.empty(2, 3, 64, device=device))


def test_one_dimensional_x_and_wrong_k_as_nn_linear(device):
    """x [K] -> [N] (one token, as nn.Linear takes it); x whose last dimension is not in_features (0 too) or
    a 0-d x: a ValueError naming x, not an error from a reshape."""
    layer = _layer(device)
    x = torch.randn(128, generator=torch.Generator().manual_seed(5)).bfloat16().to(device)
    got = layer(x)
    assert got.shape == (64,) and bytes_equal(got, layer(x[None])[0])
    for bad in (torch.zeros(2, 3, 0), torch.zeros(()), torch.zeros(127), torch.zeros(2, 3, 64)):
        with pytest.raises(ValueError, match=r"x must have shape \[\.\.\., 128\] \(in_features\)"):
            layer(bad.bfloat16().to(device))


@pytest.mark.parametrize("assign", [False, True], ids=["copy", "assign"])
def test_checkpoint_bytes_in_float8_dtypes_load_as_bytes(device, assign):
    """A checkpoint holding the values as float8_e4m3fn (and the scales as float8_e8m0fnu) loads their bytes: a
    copy into the uint8 buffers would convert the values, and assign=True would keep a float dtype that a
    model-wide .to(torch.bfloat16) then casts. Another dtype is refused, naming the buffer, its dtype and shape."""
    source = _layer(device, seed=1)
    x = torch.randn(3, source.in_features, generator=torch.Generator().manual_seed(3)).bfloat16().to(device)
    want = source(x)
    state = source.state_dict()
    typed = {"weight_values": state["weight_values"].view(torch.float8_e4m3fn), "weight_scales": state["weight_scales"]}
    if hasattr(torch, "float8_e8m0fnu"):
        typed["weight_scales"] = state["weight_scales"].view(torch.float8_e8m0fnu)
    layer = _layer(device, seed=0)
    layer.load_state_dict(typed, assign=assign)
    layer.to(torch.bfloat16)
    assert layer.weight_values.dtype == layer.weight_scales.dtype == torch.uint8
    assert torch.equal(layer(x).view(torch.int16), want.view(torch.int16))
    assert typed["weight_values"].dtype == torch.float8_e4m3fn  # the caller's dict is not changed
    bad = {**state, "weight_scales": state["weight_scales"].float()}
    with pytest.raises(RuntimeError, match=r"weight_scales: expected the bytes as torch\.uint8 or .*got torch\.float32"):
        _layer(device, seed=0).load_state_dict(bad, assign=assign)


@pytest.mark.parametrize("assign", [False, True], ids=["copy", "assign"])
def test_a_refused_half_of_a_weight_loads_nothing(device, assign):
    """A weight's values and scales load together or not at all: where one is refused (dtype, shape), the other
    is not loaded either, so a caller that catches the error keeps the whole old weight (torch loads every other
    key before it raises)."""
    source, layer = _layer(device, seed=1), _layer(device, seed=0)
    before = {k: v.clone() for k, v in layer.state_dict().items()}
    state = source.state_dict()
    n, k = source.out_features, source.in_features
    cases = [
        ({**state, "weight_scales": state["weight_scales"].int()}, r"weight_values: not loaded, since a weight's "
         r"values and scales load together \(weight_scales refused\)"),
        ({**state, "weight_values": torch.zeros(n + 1, k, dtype=torch.uint8, device=device)},
         r"weight_scales: not loaded, .*\(weight_values mismatched\)\n\tsize mismatch for weight_values"),
    ]
    for bad, message in cases:
        with pytest.raises(RuntimeError, match=message):
            layer.load_state_dict(bad, assign=assign, strict=False)
        assert all(bytes_equal(layer.state_dict()[key], before[key]) for key in before), message
    layer.load_state_dict(state, assign=assign)
    assert bytes_equal(layer.weight_values, source.weight_values)


@pytest.mark.parametrize("assign", [False, True], ids=["copy", "assign"])
def test_a_checkpoint_loads_shard_by_shard_without_strict(device, assign):
    """Without strict each half of a weight loads from the shard that holds it, as torch loads any key that is
    there, and the other is reported missing; once both have loaded the layer computes with the new weight. With
    strict torch raises for the missing half, as for any module."""
    source, layer = _layer(device, seed=1), _layer(device, seed=0)
    state = source.state_dict()
    x = torch.randn(3, source.in_features, generator=torch.Generator().manual_seed(2)).bfloat16().to(device)
    result = layer.load_state_dict({"weight_values": state["weight_values"]}, assign=assign, strict=False)
    assert result.missing_keys == ["weight_scales"] and not result.unexpected_keys
    assert bytes_equal(layer.weight_values, source.weight_values)
    result = layer.load_state_dict({"weight_scales": state["weight_scales"]}, assign=assign, strict=False)
    assert result.missing_keys == ["weight_values"] and not result.unexpected_keys
    assert bytes_equal(layer.weight_scales, source.weight_scales)
    assert bytes_equal(layer(x), source(x))
    with pytest.raises(RuntimeError, match=r'Missing key\(s\) in state_dict: "weight_values"'):
        layer.load_state_dict({"weight_scales": state["weight_scales"]}, assign=assign)


@pytest.mark.parametrize("assign", [False, True], ids=["copy", "assign"])
def test_row_major_checkpoint_scales_are_swizzled_on_load(device, assign):
    """A checkpoint's row-major weight scales [N, K/32] (uint8 or float8_e8m0fnu), the usual on-disk form, load
    as the swizzled bytes the layer saves; scales of another shape are refused naming both forms."""
    source = _layer(device, seed=1)
    x = torch.randn(5, source.in_features, generator=torch.Generator().manual_seed(4)).bfloat16().to(device)
    want = source(x)
    n, k = source.out_features, source.in_features
    row_major = seam.unswizzle_scales(source.weight_scales, n, k)
    dtypes = [torch.uint8] + ([torch.float8_e8m0fnu] if hasattr(torch, "float8_e8m0fnu") else [])
    for dtype in dtypes:
        layer = _layer(device, seed=0)
        layer.load_state_dict({"weight_values": source.weight_values, "weight_scales": row_major.view(dtype)},
                              assign=assign)
        assert bytes_equal(layer.weight_scales, source.weight_scales) and layer.weight_scales.shape == (
            seam.mxfp8_scale_numel(n, k),)
        assert torch.equal(layer(x).view(torch.int16), want.view(torch.int16))
    odd_k = {"weight_values": torch.zeros(n, 100, dtype=torch.uint8, device=device), "weight_scales": row_major}
    with pytest.raises(RuntimeError, match="size mismatch for weight_values"):  # torch's own check, collected
        _layer(device, seed=0).load_state_dict(odd_k, assign=assign)
    # values of another K than the layer's: their size mismatch is the error, not the scales' form (which
    # would name the wrong K's sizes); the layer's own swizzled scales, matching, stay out with them
    layer = _layer(device, seed=0)
    before = layer.weight_scales.clone()
    wide_k = {"weight_values": torch.zeros(n, k + 32, dtype=torch.uint8, device=device),
              "weight_scales": source.weight_scales}
    with pytest.raises(RuntimeError, match="size mismatch for weight_values") as err:
        layer.load_state_dict(wide_k, assign=assign)
    assert "weight_scales: not loaded, since a weight's values and scales load together" in str(err.value)
    assert "expected the weight scales" not in str(err.value) and bytes_equal(layer.weight_scales, before)
    for bad in (row_major.t(), row_major.flatten(), row_major[:, :-1]):
        with pytest.raises(RuntimeError, match=rf"weight_scales: expected the weight scales flat 128x4-swizzled "
                           rf"\[{seam.mxfp8_scale_numel(n, k)}\] or row-major \[{n}, {k // 32}\]"):
            _layer(device, seed=0).load_state_dict({"weight_values": source.weight_values, "weight_scales": bad},
                                                   assign=assign)


def test_wants_a_deq_where_its_gemm_reads_one(monkeypatch):
    """The producer's a_deq for this layer: where "auto" would write A_deq and the GEMM picked at M reads it. On a
    Hopper GPU (patched here) gate_up (N 1536 x K 6144) takes the 16-row kernel at 2-8 tokens, which ignores it, the
    decode kernel from 9; the QKV-wide N 2560 (two waves of 16-row programs) the decode kernel from 2; the down
    projection (K 768, N 6144) the 16-row kernel at 1-8 tokens, a narrower one (N 2048) at 1-16 (its 16-token tile);
    one token at K 6144 no A_deq ("auto" writes none); at 65-128 tokens below K 2048 the prefill path of a layer
    narrower than N 1024 none (it reads A_deq from K 2048); off Hopper never."""
    from seam.kernels import wgmma_config

    gate_up, qkv, down, narrow = (MXFP8Linear(seam.MXFP8Weight(torch.zeros(n, k, dtype=torch.float8_e4m3fn),
                                                                torch.full((n * k // 32,), 127, dtype=torch.uint8)))
                                  for n, k in ((1536, 6144), (2560, 6144), (6144, 768), (2048, 768)))
    assert not any(layer.wants_a_deq(m) for layer in (gate_up, qkv, down) for m in (1, 2, 8, 64))  # CPU
    monkeypatch.setattr("seam.runtime.num_sms", lambda device: 132)
    monkeypatch.setattr(wgmma_config, "wgmma_supported", lambda device: True)
    ms = range(1, 129)
    assert [m for m in ms if gate_up.wants_a_deq(m)] == list(range(9, 129))
    assert [m for m in ms if qkv.wants_a_deq(m)] == list(range(2, 129))
    # at 65-128 tokens below K 2048 both take two 64-token tiles, which read it ("auto" writes it there)
    assert [m for m in ms if down.wants_a_deq(m)] == list(range(9, 129))
    assert [m for m in ms if narrow.wants_a_deq(m)] == list(range(17, 129))
    # where a GPU takes the prefill path (N 896 at 65-128 tokens), it reads A_deq from K 2048 only
    monkeypatch.setattr("seam.kernels.mxfp8_gemm_config.bf16_mm_supported", lambda device: True)
    tiny, tiny_long = (MXFP8Linear(seam.MXFP8Weight(torch.zeros(896, k, dtype=torch.float8_e4m3fn),
                                                     torch.full((896 * k // 32,), 127, dtype=torch.uint8)))
                       for k in (768, 2048))
    assert not any(tiny.wants_a_deq(m) for m in range(65, 129)) and tiny.wants_a_deq(64)
    assert all(tiny_long.wants_a_deq(m) for m in range(65, 129))
    # past 384 tokens (A_DEQ_MAX_M) the producer's store costs about what the token tiles' own launch does
    assert not any(layer.wants_a_deq(m) for layer in (gate_up, qkv, down) for m in (385, 512, 2048))
    for bad, exc, match in ((0, ValueError, "m must be a positive token count, got 0"),
                            (1.5, TypeError, "m must be an int, got float"), (True, TypeError, "m must be an int")):
        with pytest.raises(exc, match=match):
            gate_up.wants_a_deq(bad)
