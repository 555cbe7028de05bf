"""Linear layers that consume seam's quantized activations (``docs/spec/integration.md``).

:class:`MXFP8Linear` is the MXFP8 linear an engine's MLP or MoE shared expert calls. It
takes BF16 input (quantized inside) or a :class:`seam.QuantizedActivation` (used as is),
and supports the pre-quantized hand-off: a producer that already wrote the MXFP8 rows of
the layer's input (the fused add+norm+quant, the fused all-reduce consumer) registers
them with :meth:`MXFP8Linear.set_prequant`; the next forward whose BF16 input is that
same tensor (same ``data_ptr``, shape, strides and dtype, still alive and not written since) uses
them once instead of quantizing again.
"""

from __future__ import annotations

import weakref

import torch

from seam import runtime
from seam.compare import bytes_equal
from seam.formats.activation import QuantizedActivation
from seam.formats.mxfp8 import E4M3_DTYPES, UE8M0_DTYPES, mxfp8_scale_numel, swizzle_scales
from seam.formats.mxfp8_weight import MXFP8Weight
from seam.ops.linear import LinearQuantize, check_quantized_rows, mxfp8_linear, wants_a_deq
from seam.ops.mxfp8 import mxfp8_quantize


def _versions(x: torch.Tensor, qa: QuantizedActivation) -> tuple[int | None, ...]:
    """Version counters of the hand-off's tensors (None for inference tensors, which have none): x and the
    activation's values, scales and A_deq when it carries one."""
    tensors = (x, qa.values, qa.scales) + ((qa.a_deq,) if qa.a_deq is not None else ())
    return tuple(None if t.is_inference() else t._version for t in tensors)


class MXFP8Linear(torch.nn.Module):
    """``y = x @ W^T`` with MXFP8 weight W [N, K] and MXFP8 activations, BF16 output.

    Args:
        weight: :class:`seam.MXFP8Weight` [N, K] (e.g. ``MXFP8Weight.from_bf16(w)``).

    The weight is held in two buffers, so ``.to()`` / ``.cuda()`` move it and ``state_dict()``
    saves it: ``weight_values`` (its E4M3 bytes as uint8 [N, K], so that a model-wide dtype cast
    such as ``model.to(torch.bfloat16)`` leaves them as they are) and ``weight_scales`` (uint8, the
    128x4-swizzled scales). :attr:`weight` is the :class:`seam.MXFP8Weight` they form; assigning
    one replaces both. The module holds no autograd state: it is an inference layer. It has no bias:
    add one after the call where the layer it replaces had one.

    ``load_state_dict`` takes the bytes as uint8 or as float8_e4m3fn / float8_e8m0fnu, and the scales
    flat and swizzled (as saved) or row-major [N, K/32], the usual checkpoint form, which it swizzles.

    Raises:
        TypeError: weight not a seam.MXFP8Weight.

    Spec: ``docs/spec/integration.md`` (MXFP8 linear that accepts pre-quantized input; Pre-quantized hand-off).
    """

    def __init__(self, weight: MXFP8Weight) -> None:
        super().__init__()
        self.weight = weight
        self._prequant: tuple | None = None  # (weakref, data_ptr, shape, stride, versions, qa)

    def __getstate__(self) -> dict:
        # A pending hand-off names a live tensor of this process (a weakref, which pickle refuses): a pickled or
        # saved layer starts without one, and without the weight record, built again from its buffers.
        return {**self.__dict__, "_prequant": None, "_weight": None}

    @property
    def weight(self) -> MXFP8Weight:
        """The :class:`seam.MXFP8Weight` [N, K] of the buffers, wherever they are now (built again only
        when ``.to()``, an assignment or ``.data =`` replaced them, or ``load_state_dict`` or another in-place write
        that moves their version counters wrote them: building one checks it and measures its
        :meth:`~seam.MXFP8Weight.byte_facts`, one host sync)."""
        values, scales = self.weight_values, self.weight_scales
        if runtime.tracing():  # traced once: no cache to keep
            return MXFP8Weight(values.view(torch.float8_e4m3fn), scales)
        cached = self._weight
        # The record holds views of the buffers: ``.data =`` on a buffer keeps its identity and version, moves
        # its storage away from them.
        if (cached is None or cached[0] is not values or cached[1] is not scales or cached[2].byte_facts() is None
                or cached[2].values.data_ptr() != values.data_ptr()
                or cached[2].scales.data_ptr() != scales.data_ptr()):
            cached = self._weight = values, scales, MXFP8Weight(values.view(torch.float8_e4m3fn), scales)
        return cached[2]

    @weight.setter
    def weight(self, weight: MXFP8Weight) -> None:
        if not isinstance(weight, MXFP8Weight):
            raise TypeError(f"weight must be a seam.MXFP8Weight, got {type(weight).__name__}")
        self.register_buffer("weight_values", weight.values.view(torch.uint8))
        self.register_buffer("weight_scales", weight.scales)
        self._weight: tuple | None = None  # (the two buffers it was built from, the MXFP8Weight)

    #: The dtypes a checkpoint may hold each buffer's bytes in (loaded as their uint8 view).
    _BYTE_DTYPES = {"weight_values": E4M3_DTYPES, "weight_scales": UE8M0_DTYPES}

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs) -> None:
        # E4M3 / E8M0 tensors load as their bytes: a plain copy into the uint8 buffers would convert their values,
        # and assign=True would keep a float dtype that a model-wide .to(dtype) then casts
        refused = []
        for name, dtypes in self._BYTE_DTYPES.items():
            t = state_dict.get(prefix + name)
            if not isinstance(t, torch.Tensor) or t.dtype is torch.uint8:
                continue
            if t.dtype in dtypes:
                state_dict[prefix + name] = t.view(torch.uint8)
            else:
                error_msgs.append(f"{prefix}{name}: expected the bytes as {' or '.join(map(str, dtypes))}, "
                                  f"got {t.dtype} {list(t.shape)}")
                state_dict.pop(prefix + name)  # nothing of it loads
                refused.append(prefix + name)
        refused += self._swizzle_row_major_scales(state_dict, prefix, error_msgs)
        refused += self._load_together(state_dict, prefix, refused, error_msgs)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)
        missing_keys[:] = [key for key in missing_keys if key not in refused]  # present, refused above
        self._weight = None  # built again: inference-tensor buffers have no version counter to show the copy

    def _load_together(self, state_dict, prefix, refused, error_msgs) -> list[str]:
        """A weight's values and scales load together or not at all: where one is refused above or of another shape
        than its buffer (torch's size check then reports it), the other is taken out of ``state_dict`` too, with a
        message, so the layer keeps its whole weight rather than half of a new one (torch loads every other key
        before it raises). A half whose partner is absent loads, as torch loads any key that is there (a
        checkpoint loaded shard by shard, ``strict=False``), and torch reports the other in ``missing_keys``.
        Returns the keys taken out."""
        keys = [prefix + name for name in self._BYTE_DTYPES]
        present = [key for key in keys if key in state_dict]
        if not present:
            return []
        held = {prefix + name: getattr(self, name) for name in self._BYTE_DTYPES}
        bad = [key for key in keys if key in refused or (key in state_dict and (
            not isinstance(state_dict[key], torch.Tensor) or state_dict[key].shape != held[key].shape))]
        if not bad:
            return []
        why = ", ".join(f"{key} {'refused' if key in refused else 'mismatched'}" for key in bad)
        out = []
        for key in present:
            if key not in bad:
                error_msgs.append(f"{key}: not loaded, since a weight's values and scales load together ({why})")
                state_dict.pop(key)
                out.append(key)
        return out

    def _swizzle_row_major_scales(self, state_dict, prefix, error_msgs) -> list[str]:
        """A checkpoint's row-major weight scales [N, K/32] (the usual on-disk form) swizzled in ``state_dict``
        (:func:`seam.swizzle_scales`); scales of any other shape than those or the flat swizzled bytes are
        refused naming both forms. A flat tensor is always read as swizzled (where N and K are multiples of 128
        a flattened row-major tensor has the same size: keep row-major scales 2-D). Returns the refused keys."""
        key, scales = prefix + "weight_scales", state_dict.get(prefix + "weight_scales")
        values = state_dict.get(prefix + "weight_values", self.weight_values)
        if (not isinstance(scales, torch.Tensor) or not isinstance(values, torch.Tensor)
                or values.shape != self.weight_values.shape):
            return []  # torch's size check reports the values, and the scales load only with them (_load_together)
        n, k = values.shape  # the layer's, so K is a multiple of 32 (MXFP8Weight)
        row_major, numel = [n, k // 32], mxfp8_scale_numel(n, k)
        if list(scales.shape) == row_major:  # uint8 here: other dtypes were viewed or refused above
            state_dict[key] = swizzle_scales(scales)
            return []
        if list(scales.shape) == [numel]:
            return []
        error_msgs.append(f"{key}: expected the weight scales flat 128x4-swizzled [{numel}] or "
                          f"row-major {row_major} (swizzled on load), got {list(scales.shape)}")
        state_dict.pop(key)
        return [key]

    @classmethod
    def from_bf16(cls, w: torch.Tensor) -> "MXFP8Linear":
        """Quantize a BF16, FP16 or FP32 weight [N, K] (:meth:`seam.MXFP8Weight.from_bf16`) and wrap it.

        Raises:
            TypeError: w not a BF16/FP16/FP32 tensor.
            ValueError: w not 2-D, or K not a positive multiple of 32.
        """
        return cls(MXFP8Weight.from_bf16(w))

    @property
    def in_features(self) -> int:
        """K."""
        return self.weight_values.shape[1]

    @property
    def out_features(self) -> int:
        """N."""
        return self.weight_values.shape[0]

    def wants_a_deq(self, m: int) -> bool:
        """Whether the producer of this layer's next input, M tokens on the weight's device, should write its A_deq:
        pass it as the producer's ``a_deq`` (``seam.allreduce_gemma_rms_norm_mxfp8(..., a_deq=layer.wants_a_deq(m))``,
        ``seam.swiglu_oai_mxfp8``, the Lamport consumers). True where the GEMM this layer runs at M reads it and the
        producers' "auto" would write it; False where the 16-row kernel takes the layer (it reads the MXFP8 rows: at K
        3072-6144 from two tokens "auto" writes an A_deq it never reads, 1.0-1.5 us of the norm -> gate_up chain,
        H100, ``docs/benchmarks-log.md`` runs 278 and 284), where the prefill path takes it below K 2048 (at 65-128
        tokens on layers narrower than N 1024 or too wide for one wave of two 64-token tiles), and off Hopper. The bytes
        of the forward are the same either way. Spec: ``docs/spec/integration.md`` (QuantizedActivation: its A_deq).

        Raises:
            TypeError: ``m`` not an int. ValueError: ``m`` not positive.
        """
        return wants_a_deq(m, self.weight, self.weight_values.device)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}"

    def set_prequant(self, x: torch.Tensor, qa: QuantizedActivation) -> None:
        """Hand the next forward the MXFP8 rows ``qa`` of ``x``, to be used once.

        Args:
            x: the BF16 tensor [M, K] the next forward will be called with.
            qa: its MXFP8 rows (swizzled scales), e.g. from
                ``seam.gemma_fused_add_rms_norm_mxfp8``.

        The registration is keyed on x's ``data_ptr`` and shape (the seed's contract) and strides, and also
        requires x to be alive and x, ``qa.values``, ``qa.scales`` (and ``qa.a_deq``) unmodified at the forward
        (version counters unchanged; seam's ops bump them too): a static buffer refilled by
        the next step, or a freed temporary whose address was reused, falls back to
        quantizing instead of using stale rows. Tensors made under ``torch.inference_mode()``
        have no version counter; for them only the address, shape and liveness are checked.

        While ``torch.compile`` traces, the arguments are checked and nothing is registered: traced
        tensors have neither an address nor a version counter (nor an answer to ``is_inference()``)
        to key the registration on, so a compiled forward quantizes x itself (the same bytes, except where MXFP8 rows
        take the 16-row kernel and BF16 ones the decode kernel: within fp32 summation order; 1-16 tokens on K 512
        or 768, 9-16 only where N / 16 programs are at most 1.5 an SM, and 2-8 on K 3072, 4096 or 6144:
        ``seam.kernels.mxfp8_gemm_config.pick_mma_rows_tile``). In compiled code hand the layer the rows
        themselves: ``layer(qa)``.

        With ``SEAM_DEBUG=1`` (a quantization and a host sync here) qa must hold ``mxfp8_quantize(x)`` byte
        for byte: rows of other data, handed by mistake, would otherwise be used silently.

        Raises:
            TypeError: x not a BF16 tensor or qa not a QuantizedActivation.
            ValueError: qa's shape differs from x's, x is not [M, in_features], qa has row-major scales,
                values or scales that are not contiguous, or x, qa and the weight are not on one device; with
                ``SEAM_DEBUG``, qa is not x's MXFP8 rows.
        """
        if not isinstance(x, torch.Tensor) or x.dtype != torch.bfloat16:
            raise TypeError(f"x must be a BF16 torch.Tensor, got {getattr(x, 'dtype', type(x).__name__)}")
        if not isinstance(qa, QuantizedActivation):
            raise TypeError(f"qa must be a seam.QuantizedActivation, got {type(qa).__name__}")
        if tuple(qa.shape) != tuple(x.shape):
            raise ValueError(f"qa has shape {list(qa.shape)} but x has {list(x.shape)}")
        # what the forward would refuse is refused here, naming qa, not at every later call with x
        if x.dim() != 2 or x.shape[1] != self.in_features:
            raise ValueError(f"x must have shape [M, {self.in_features}] (in_features; the hand-off is for 2-D "
                             f"rows), got {list(x.shape)}")
        if check_quantized_rows("qa", qa) != x.device or x.device != self.weight_values.device:
            raise ValueError(f"qa is on {qa.values.device} and x on {x.device}; the layer's weight is on "
                             f"{self.weight_values.device}: all three must be on one device")
        if runtime.tracing():
            return
        if runtime.debug_checks(x.device):
            values, scales = mxfp8_quantize(x)
            if not (bytes_equal(qa.values, values) and bytes_equal(qa.scales, scales)):
                raise ValueError("qa does not hold the MXFP8 rows of x (seam.mxfp8_quantize(x)): hand the layer the "
                                 "rows quantized from the tensor it will be called with")
        self._prequant = (weakref.ref(x), x.data_ptr(), tuple(x.shape), x.stride(), _versions(x, qa), qa)

    def take_prequant(self, x: torch.Tensor) -> QuantizedActivation | None:
        """The registered rows if ``x`` is the registered tensor; clears the registration. While
        ``torch.compile`` traces: None, and the registration stays (see :meth:`set_prequant`)."""
        if runtime.tracing():
            return None
        pending, self._prequant = self._prequant, None
        if pending is None:
            return None
        ref, ptr, shape, stride, version, qa = pending
        registered = ref()
        alive_and_unchanged = registered is not None and _versions(registered, qa) == version
        same_view = x.data_ptr() == ptr and tuple(x.shape) == shape and x.stride() == stride
        if alive_and_unchanged and same_view and x.dtype == torch.bfloat16 and x.device == registered.device:
            return qa
        return None

    def forward(
        self,
        x: torch.Tensor | QuantizedActivation,
        *,
        out: torch.Tensor | None = None,
        quantize: LinearQuantize | str = LinearQuantize.AUTO,
    ) -> torch.Tensor:
        """BF16 [M, N]. ``x``: BF16 [M, K] or a QuantizedActivation; ``quantize``: where a BF16 x
        without a hand-off is quantized (see :func:`seam.mxfp8_linear`). As ``torch.nn.Linear``, a BF16
        x [..., K] (1-D too) gives [..., N] (its leading dimensions are the tokens; ``out``, if given,
        contiguous [..., N]); the hand-off applies to 2-D x only.

        Raises:
            TypeError / ValueError: as :func:`seam.mxfp8_linear` (x not BF16 [..., K] nor a
                QuantizedActivation, K not in_features, row-major activation scales, bad ``out`` or
                ``quantize``), before any launch; a registered hand-off stays registered.
            RuntimeError: as :func:`seam.mxfp8_linear` (a split-K workspace to allocate during
                CUDA-graph capture).
        """
        quantize = LinearQuantize.parse(quantize)  # before the hand-off is consumed
        if isinstance(x, torch.Tensor) and x.dim() != 2 and (x.dim() == 0 or x.shape[-1] != self.in_features):
            raise ValueError(f"x must have shape [..., {self.in_features}] (in_features), got {list(x.shape)}")
        if not isinstance(x, torch.Tensor) or runtime.tracing():
            # rows used as they are; a traced forward takes no hand-off (set_prequant)
            return mxfp8_linear(x, self.weight, out=out, quantize=quantize)
        pending = self._prequant
        x = self.take_prequant(x) or x  # consumed by any BF16 forward; an x [..., K] of other than 2-D never matches
        try:
            return mxfp8_linear(x, self.weight, out=out, quantize=quantize)
        except (TypeError, ValueError):
            self._prequant = pending  # bad arguments change nothing, the registration included
            raise
