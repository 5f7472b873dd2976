"""CPU references for torch_npu's LLM-inference operators (issue 8 catalogue).

Written from the formulas in torch_npu 2.14.0's own op documentation
(``torch_npu/_op_plugin_docs.py`` in the torch-npu 2.14.0 wheel); each
function names the doc entry it follows and takes the operator's argument
names, so one config calls the candidate (``torch_npu.npu_*``) and this
reference the same way.  Options the formula here does not cover raise
NotImplementedError (a harness error: the case stays pending) instead of
guessing.  Math runs in float32 (float64 inputs stay float64); outputs come
back in the dtype of the input that sets it - which, on the runner's
upcast inputs, is float32.  Only torch is imported: the runner ships this
module to the host as a user module.
"""

from __future__ import annotations

import torch


def _wide(t: torch.Tensor) -> torch.Tensor:
    return t if t.dtype == torch.float64 else t.float()


def _rms(x: torch.Tensor, gamma: torch.Tensor, epsilon: float):
    dims = tuple(range(x.dim() - gamma.dim(), x.dim()))
    xf = _wide(x)
    rstd = torch.rsqrt(xf.pow(2).mean(dim=dims, keepdim=True) + epsilon)
    return (xf * rstd * _wide(gamma)).to(x.dtype), rstd.float()


def rms_norm(self, gamma, epsilon=1e-06):
    """npu_rms_norm(Tensor self, Tensor gamma, float epsilon=1e-06) -> (y, rstd):
    rstd = 1/sqrt(mean(x^2 over gamma's dims) + epsilon), y = x * rstd * gamma."""
    return _rms(self, gamma, epsilon)


def add_rms_norm(x1, x2, gamma, epsilon=1e-06):
    """npu_add_rms_norm(x1, x2, gamma, epsilon=1e-06) -> (y, rstd, x): x = x1 + x2,
    then RmsNorm of x.  (2.14's docs describe it through npu_add_rms_norm_cast,
    whose outputs y2, rstd, x are these.)"""
    wide = _wide(x1) + _wide(x2)  # normalized from the wide sum; x is returned in x1's dtype
    y, rstd = _rms(wide, gamma, epsilon)
    return y.to(x1.dtype), rstd, wide.to(x1.dtype)


def rotary_mul(input, r1, r2, rotary_mode="half", rotate=None):
    """npu_rotary_mul(input, r1, r2, rotary_mode='half', rotate=None):
    half: x1, x2 = chunk(input, 2, -1); x_new = cat(-x2, x1);
    interleave: x_new = interleave(-input[..., 1::2], input[..., ::2]);
    rotate given: x_new = input @ rotate.  output = r1 * input + r2 * x_new."""
    x = _wide(input)
    if rotate is not None:
        x_new = x @ _wide(rotate)
    elif rotary_mode == "half":
        x1, x2 = torch.chunk(x, 2, dim=-1)
        x_new = torch.cat((-x2, x1), dim=-1)
    elif rotary_mode == "interleave":
        x_new = torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)
    else:
        raise NotImplementedError(f"rotary_mode {rotary_mode!r} (the docs name 'half' and 'interleave')")
    return (_wide(r1) * x + _wide(r2) * x_new).to(input.dtype)


def swiglu(self, dim=-1):
    """npu_swiglu(Tensor self, int dim=-1): A, B = chunk(x, 2, dim); A * sigmoid(A) * B."""
    a, b = torch.chunk(_wide(self), 2, dim=dim)
    return (a * torch.sigmoid(a) * b).to(self.dtype)


def dynamic_quant(x, smooth_scales=None, group_index=None, dst_type=None):
    """npu_dynamic_quant(x, *, smooth_scales=None, group_index=None, dst_type=None) -> (y, scale):
    scale = rowMax(|x * smooth_scales|) / 127, y = round(x * smooth_scales / scale) in int8;
    scale is float32 with x's shape minus the last dim.  Rounding: half-to-even
    (torch.round; the docs say only 'round')."""
    if group_index is not None:
        raise NotImplementedError("group_index (MoE smooth-scale groups)")
    if dst_type not in (None, torch.int8):
        raise NotImplementedError(f"dst_type {dst_type} (int4 packing: quint4x2)")
    xf = _wide(x)
    if smooth_scales is not None:
        xf = xf * _wide(smooth_scales)
    scale = xf.abs().amax(dim=-1) / 127.0
    y = torch.round(xf / scale.unsqueeze(-1)).clamp(-128, 127).to(torch.int8)
    return y, scale.float()


def quant_matmul(x1, x2, scale, offset=None, pertoken_scale=None, bias=None, output_dtype=None):
    """npu_quant_matmul(x1, x2, scale, *, offset, pertoken_scale, bias, output_dtype) for int8 x1, x2:
    acc = x1 @ x2 (exact, integer) + bias; out = acc * scale [* pertoken_scale per row] [+ offset];
    int8 output (output_dtype None or int8): rounded and saturated; else cast to output_dtype."""
    if x1.dtype != torch.int8 or x2.dtype != torch.int8:
        raise NotImplementedError(f"x1/x2 {x1.dtype}/{x2.dtype}: only int8 here (int32 means packed int4)")
    acc = torch.matmul(x1.to(torch.int64), x2.to(torch.int64))
    if bias is not None and not bias.dtype.is_floating_point:
        acc = acc + bias.to(torch.int64)
    out = acc.to(torch.float64) * scale.to(torch.float64)
    if pertoken_scale is not None:
        out = out * pertoken_scale.to(torch.float64).unsqueeze(-1)
    if bias is not None and bias.dtype.is_floating_point:
        out = out + bias.to(torch.float64)
    if offset is not None:
        out = out + offset.to(torch.float64)
    if output_dtype in (None, torch.int8):
        return torch.round(out).clamp(-128, 127).to(torch.int8)
    return out.to(output_dtype)


def grouped_matmul(x, weight, *, bias=None, scale=None, offset=None, antiquant_scale=None, antiquant_offset=None,
                   per_token_scale=None, group_list=None, split_item=0, group_type=None, group_list_type=0,
                   act_type=0, output_dtype=None, **unused):
    """npu_grouped_matmul, non-quantized (formula 1): y_i = x_i @ weight_i + bias_i, one output per
    group (split_item 0/1, x a list as long as weight)."""
    if any(v is not None for v in (scale, offset, antiquant_scale, antiquant_offset, per_token_scale, group_list)):
        raise NotImplementedError("quantized / pseudo-quantized / group_list forms (formulas 2-4)")
    if split_item not in (0, 1) or act_type != 0 or any(v is not None for v in unused.values()):
        raise NotImplementedError(f"split_item {split_item}, act_type {act_type}, {sorted(unused)}")
    if len(x) != len(weight):
        raise ValueError(f"x has {len(x)} tensors, weight {len(weight)}")
    out = []
    for i, (xi, wi) in enumerate(zip(x, weight)):
        y = _wide(xi) @ _wide(wi)
        if bias is not None:
            y = y + _wide(bias[i])
        out.append(y.to(output_dtype or xi.dtype))
    return out


def moe_gating_top_k_softmax(x, finished=None, k=1):
    """npu_moe_gating_top_k_softmax(x, finished=None, k=1) -> (y, expert_idx, row_idx):
    softmax over the last dim, then top-k: y the values (x's dtype), expert_idx their
    indices (int32).  row_idx (int32) follows the CANN operator's description,
    row_idx[i, j] = j * rows + i - the torch_npu doc says only 'original row position'."""
    if finished is not None:
        raise NotImplementedError("finished rows (the torch_npu doc does not say what they output)")
    probs = torch.softmax(_wide(x), dim=-1)
    y, idx = torch.topk(probs, k, dim=-1)
    rows = x.numel() // x.shape[-1]
    row_idx = (torch.arange(k).unsqueeze(0) * rows + torch.arange(rows).unsqueeze(1)).reshape(*x.shape[:-1], k)
    return y.to(x.dtype), idx.to(torch.int32), row_idx.to(torch.int32)


def fused_infer_attention_score(query, key, value, *, atten_mask=None, num_heads=1, scale=1.0,
                                input_layout="BSH", num_key_value_heads=0, softmax_lse_flag=False, **options):
    """npu_fused_infer_attention_score, plain (no quantization, no paging, no pse):
    attention_out = softmax(scale * query @ key^T + atten_mask) @ value, with atten_mask
    True/1 where a position is masked out; layouts BSH and BNSD; grouped KV heads
    (num_key_value_heads); softmax_lse = log(sum(exp(s - max))) + max, shape (B, N, S, 1)."""
    used = {k: v for k, v in options.items() if v is not None and k not in ("pre_tokens", "next_tokens",
                                                                             "sparse_mode", "inner_precise")}
    if used or options.get("sparse_mode", 0) not in (0,):
        raise NotImplementedError(f"options {sorted(used) or ['sparse_mode']} (only the plain form is here)")
    kv_heads = num_key_value_heads or num_heads
    q, k, v = _wide(query), _wide(key), _wide(value)
    if input_layout == "BSH":
        b, s, h = q.shape
        d = h // num_heads
        q = q.view(b, s, num_heads, d).transpose(1, 2)
        k = k.view(b, k.shape[1], kv_heads, d).transpose(1, 2)
        v = v.view(b, v.shape[1], kv_heads, d).transpose(1, 2)
    elif input_layout != "BNSD":
        raise NotImplementedError(f"input_layout {input_layout!r} (BSH and BNSD here)")
    if kv_heads != num_heads:
        k = k.repeat_interleave(num_heads // kv_heads, dim=1)
        v = v.repeat_interleave(num_heads // kv_heads, dim=1)
    scores = scale * (q @ k.transpose(-1, -2))
    if atten_mask is not None:
        scores = scores.masked_fill(atten_mask.to(torch.bool), float("-inf"))
    lse = torch.logsumexp(scores, dim=-1, keepdim=True)
    out = torch.softmax(scores, dim=-1) @ v
    if input_layout == "BSH":
        out = out.transpose(1, 2).reshape(query.shape)
    out = out.to(query.dtype)
    return out, (lse.float() if softmax_lse_flag else torch.zeros(1))


# --------------------------------------------------------------------------
# Backward references (issue 23), for the operators torch_npu trains with.
#
# Two ways to check a backward on the NPU:
# - through autograd: the forward references above are differentiable torch
#   code, so a case with grad_inputs compares torch_npu's backward (what
#   autograd calls on the device: npu_rms_norm_backward, npu_rotary_mul_backward,
#   npu_swiglu_backward, npu_fusion_attention_grad) with CPU autograd of the
#   documented formula - the runner does that;
# - the backward operator called directly (its signature in torch_npu 2.14's
#   npu_native_functions): the functions below, the gradient of the documented
#   forward formula, in closed form for rms_norm and by CPU autograd of the
#   forward reference otherwise.
# --------------------------------------------------------------------------


def _vjp(forward, inputs: list, grad, wanted: list) -> tuple:
    """The gradients of ``forward(*inputs)`` with respect to inputs[i] for i in ``wanted``,
    given the upstream ``grad``: CPU autograd of the reference formula, in float32."""
    leaves = [(_wide(t).detach().requires_grad_(i in wanted) if isinstance(t, torch.Tensor) else t)
              for i, t in enumerate(inputs)]
    with torch.enable_grad():
        out = forward(*leaves)
        grads = torch.autograd.grad(out, [leaves[i] for i in wanted], _wide(grad), allow_unused=True)
    return tuple(torch.zeros_like(leaves[i]) if g is None else g for i, g in zip(wanted, grads))


def rms_norm_backward(dy, self, gamma, rstd):
    """npu_rms_norm_backward(dy, self, gamma, rstd) -> (dx, dgamma), the gradient of
    y = x * rstd * gamma with rstd = 1/sqrt(mean(x^2) + epsilon) over gamma's dims (the
    npu_rms_norm doc), in closed form with the given rstd:
    dx = rstd * gamma * dy - x * rstd^3 * mean(x * gamma * dy), dgamma = sum(dy * x * rstd)
    over the leading dims.  dx in self's dtype, dgamma in gamma's (float32 here: upcast)."""
    dims = tuple(range(self.dim() - gamma.dim(), self.dim()))
    x, g, d, r = _wide(self), _wide(gamma), _wide(dy), _wide(rstd)
    gdy = g * d
    dx = r * gdy - x * r.pow(3) * (x * gdy).mean(dim=dims, keepdim=True)
    dgamma = (d * x * r).sum(dim=tuple(range(self.dim() - gamma.dim())))
    return dx.to(self.dtype), dgamma.to(gamma.dtype)


def rotary_mul_backward(grad, self, r1, r2, rotary_mode="half"):
    """npu_rotary_mul_backward(grad, self, r1, r2, rotary_mode='half') -> (dx, dr1, dr2): the
    gradient of output = r1 * input + r2 * x_new (npu_rotary_mul doc; rotate has no backward),
    by CPU autograd of rotary_mul; dr1/dr2 summed over their broadcast dims."""
    dx, dr1, dr2 = _vjp(lambda x, a, b: rotary_mul(x, a, b, rotary_mode), [self, r1, r2], grad, [0, 1, 2])
    return dx.to(self.dtype), dr1.to(r1.dtype), dr2.to(r2.dtype)


def swiglu_backward(grad_output, self, dim=-1):
    """npu_swiglu_backward(grad_output, self, dim=-1) -> dx: the gradient of A * sigmoid(A) * B
    (npu_swiglu doc) by CPU autograd of swiglu."""
    (dx,) = _vjp(lambda x: swiglu(x, dim), [self], grad_output, [0])
    return dx.to(self.dtype)


def fusion_attention(query, key, value, head_num, input_layout, pse=None, padding_mask=None, atten_mask=None,
                     scale=1.0, keep_prob=1.0, **options):
    """npu_fusion_attention's attention_out (its first output), training attention:
    y = Softmax(Mask(scale * (pse + query @ key^T), atten_mask)), attention = y @ value (no
    dropout: keep_prob 1), atten_mask True/1 where a position is masked out; layouts BSH, BSND
    and BNSD; grouped KV heads (key's head count divides head_num).  Differentiable: its CPU
    autograd is the reference of npu_fusion_attention_grad's dq, dk, dv.  softmax_max,
    softmax_sum, the reserved output and the dropout seed/offset/length are intermediates for
    the backward kernel whose layout and values the doc does not fix: compared are the
    attention output and the gradients (``fusion_attention_out`` is the matching candidate)."""
    used = {k: v for k, v in options.items() if v not in (None, 0, 2147483647, True, False, "")}
    if keep_prob != 1.0 or padding_mask is not None or used or options.get("sparse_mode", 0):
        raise NotImplementedError(f"options {sorted(used) or ['keep_prob/padding_mask/sparse_mode']} "
                                  "(only the plain form, no dropout, is here)")
    q, k, v = _wide(query), _wide(key), _wide(value)
    if input_layout == "BSH":
        b, s, h = q.shape
        d = h // head_num
        kv_heads = k.shape[-1] // d
        q = q.view(b, s, head_num, d).transpose(1, 2)
        k = k.view(b, k.shape[1], kv_heads, d).transpose(1, 2)
        v = v.view(b, v.shape[1], kv_heads, d).transpose(1, 2)
    elif input_layout == "BSND":
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    elif input_layout != "BNSD":
        raise NotImplementedError(f"input_layout {input_layout!r} (BSH, BSND and BNSD here)")
    if k.shape[1] != head_num:
        k = k.repeat_interleave(head_num // k.shape[1], dim=1)
        v = v.repeat_interleave(head_num // v.shape[1], dim=1)
    scores = q @ k.transpose(-1, -2)
    if pse is not None:
        scores = scores + _wide(pse)
    scores = scale * scores
    if atten_mask is not None:
        scores = scores.masked_fill(atten_mask.to(torch.bool), float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v
    if input_layout == "BSH":
        out = out.transpose(1, 2).reshape(query.shape)
    elif input_layout == "BSND":
        out = out.transpose(1, 2)
    return out.to(query.dtype)


def fusion_attention_out(query, key, value, head_num, input_layout, **options):
    """The candidate matching ``fusion_attention``: torch_npu.npu_fusion_attention's
    attention_out on the device (its backward is npu_fusion_attention_grad through autograd)."""
    import torch_npu  # the device's operator; this module itself needs only torch

    return torch_npu.npu_fusion_attention(query, key, value, head_num, input_layout, **options)[0]
