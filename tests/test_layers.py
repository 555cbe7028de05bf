"""MXFP8Linear and the pre-quantized hand-off (docs/spec/integration.md)."""

import pytest
import torch

import seam
import seam.layers
from seam.layers import MXFP8Linear
from seam.verify.core import bytes_equal


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


def test_quantized_activation_input_matches_bf16_input(device):
    layer = _layer(device, n=32, k=256, seed=1)
    x = torch.randn(3, 256).bfloat16().to(device)
    v, s = seam.mxfp8_quantize(x)
    y_q = layer(seam.QuantizedActivation(v, s, torch.bfloat16, (3, 256)))
    assert bytes_equal(y_q, layer(x))


def test_prequant_not_used_after_the_buffer_is_rewritten(device, counted_quantize):
    """A static input buffer refilled by the next step must not reuse last step's MXFP8 rows."""
    layer = _layer(device)
    buf = torch.randn(3, 128).bfloat16().to(device)
    values, scales = seam.mxfp8_quantize(buf)
    layer.set_prequant(buf, seam.QuantizedActivation(values, scales, torch.bfloat16, (3, 128)))
    buf.copy_(torch.randn(3, 128).bfloat16().to(device))
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


def test_bad_quantize_keeps_the_hand_off(device, counted_quantize):
    layer = _layer(device)
    x = torch.randn(5, 128).bfloat16().to(device)
    values, scales = seam.mxfp8_quantize(x)
    layer.set_prequant(x, seam.QuantizedActivation(values, scales, torch.bfloat16, (5, 128)))
    with pytest.raises(ValueError, match="quantize"):
        layer(x, quantize="bogus")
    counted_quantize.clear()
    layer(x)
    assert counted_quantize == []  # the registration survived the rejected call


def test_prequant_not_used_after_a_seam_kernel_rewrites_the_buffer(device, counted_quantize):
    """seam's eager ops launch Triton directly; they still bump the version of the buffers
    they write, so a hand-off registered for a buffer a seam op then refills is not used."""
    layer = _layer(device)
    buf = torch.randn(3, 128).bfloat16().to(device)
    values, scales = seam.mxfp8_quantize(buf)
    layer.set_prequant(buf, seam.QuantizedActivation(values, scales, torch.bfloat16, (3, 128)))
    w = torch.randn(128).bfloat16().to(device)
    seam.gemma_rms_norm(torch.randn(3, 128).bfloat16().to(device), w, 1e-6, out=buf)
    counted_quantize.clear()
    y = layer(buf)
    assert len(counted_quantize) == 1
    assert bytes_equal(y, seam.mxfp8_linear(buf, layer.weight))


def test_rejected_out_keeps_the_hand_off(device, counted_quantize):
    layer = _layer(device)
    x = torch.randn(5, 128).bfloat16().to(device)
    values, scales = seam.mxfp8_quantize(x)
    layer.set_prequant(x, seam.QuantizedActivation(values, scales, torch.bfloat16, (5, 128)))
    with pytest.raises(ValueError, match="out must have shape"):
        layer(x, out=torch.empty(5, 32, dtype=torch.bfloat16, device=device))
    counted_quantize.clear()
    layer(x)
    assert counted_quantize == []  # the registration survived the rejected call


def test_prequant_not_used_after_its_rows_are_rewritten(device, counted_quantize):
    layer = _layer(device)
    x = torch.randn(3, 128).bfloat16().to(device)
    values, scales = seam.mxfp8_quantize(x)
    layer.set_prequant(x, seam.QuantizedActivation(values, scales, torch.bfloat16, (3, 128)))
    seam.mxfp8_quantize(torch.randn(3, 128).bfloat16().to(device), out=(values, scales))  # other rows
    counted_quantize.clear()
    y = layer(x)
    assert len(counted_quantize) == 1
    assert bytes_equal(y, seam.mxfp8_linear(x, layer.weight))


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
