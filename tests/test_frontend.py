"""Frontend steps one by one on small modules: each result checked against PyTorch and
against hand-computed values; the pipeline's dumps, blame and steps.toml errors."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dse.errors import InputError
from dse.frontend import Context, StepError, check_graph, load_steps, resolve_step, run_pipeline
from dse.frontend import fold_batch_norm, permute, quantize, select_last_token, split_attention
from dse.frontend.quantize import integer_reference
from dse.workload.graph import INTERPRETERS, Op
from dse.workload import capture
from dse.workload import graph as graph_module


def prepare(module: nn.Module, *inputs):
    module = module.eval()
    with torch.no_grad():
        expected = module(*inputs)
    expected = list(expected) if isinstance(expected, tuple) else [expected]
    return capture(module, *inputs), Context(None, module, inputs, expected, {})


def assert_matches(graph, ctx, tolerance=1e-5):
    checks, problems = check_graph(graph, ctx, tolerance)
    assert not problems, problems
    return max(c.relative_error for c in checks)


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# --- fold_batch_norm ---

class ConvBn(nn.Module):
    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3, padding=1, bias=True)
        self.bn = nn.BatchNorm2d(4)
        self.side = nn.Conv2d(3, 4, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(4)
        with torch.no_grad():
            for bn in (self.bn, self.bn2):
                bn.weight.copy_(torch.rand(4, generator=g) + 0.5)
                bn.bias.copy_(torch.randn(4, generator=g))
                bn.running_mean.copy_(torch.randn(4, generator=g))
                bn.running_var.copy_(torch.rand(4, generator=g) + 0.5)

    def forward(self, x):
        s = self.side(x)  # its output is read twice: that batch norm cannot fold
        return torch.relu(self.bn(self.conv(x))) + self.bn2(s) + s


def test_fold_batch_norm_matches_the_formula_and_pytorch():
    module = ConvBn()
    graph, ctx = prepare(module, randn(1, 3, 6, 6))
    folded = fold_batch_norm.run(graph, ctx)
    assert ctx.details == {"folded": 1, "left": 1}
    assert [op.kind for op in graph.ops].count("batch_norm") == 2
    assert [op.kind for op in folded.ops].count("batch_norm") == 1
    assert_matches(folded, ctx)
    conv = next(op for op in folded.ops_of_kind("conv2d") if op.attrs["K"] == 27)  # the 3x3 one
    bn = module.bn
    a = (bn.weight / torch.sqrt(bn.running_var + bn.eps)).double()
    want_w = module.conv.weight.double() * a.reshape(-1, 1, 1, 1)
    want_b = (module.conv.bias.double() - bn.running_mean.double()) * a + bn.bias.double()
    assert np.allclose(folded.weights[conv.inputs[1]], want_w.detach().numpy(), rtol=1e-6, atol=0)
    assert np.allclose(folded.weights[conv.inputs[2]], want_b.detach().numpy(), rtol=1e-6, atol=1e-7)
    assert conv.attrs["has_bias"] and conv.counts.other_ops == 36 * 4  # the bias add is now the conv's
    assert "fold_batch_norm" in conv.source


# --- permute ---

class Tiny(nn.Module):
    """A LeNet in miniature: convs, pooling, a flatten into a linear, a transposed weight."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(2, 4, 3)
        self.conv2 = nn.Conv2d(4, 6, 3)
        self.fc = nn.Linear(6 * 2 * 2, 5)
        self.w = nn.Parameter(torch.randn(3, 5, generator=torch.Generator().manual_seed(4)))

    def forward(self, x):
        x = F.max_pool2d(torch.relu(self.conv1(x)), 2)  # [1, 4, 4, 4]
        x = torch.relu(self.conv2(x))  # [1, 6, 2, 2]
        return self.fc(torch.flatten(x, 1)) @ self.w.t()


def test_permute_makes_conv_regions_channels_last_without_activation_transposes():
    module = Tiny()
    graph, ctx = prepare(module, randn(1, 2, 10, 10))
    assert permute.activation_permutes(graph) == (0, 0)
    result = permute.run(graph, ctx)
    assert_matches(result, ctx)
    convs = result.ops_of_kind("conv2d")
    assert [(op.attrs["layout"], op.attrs["weight_layout"]) for op in convs] == [("NHWC", "HWIO")] * 2
    assert result.tensors[convs[1].outputs[0]].shape == (1, 2, 2, 6)
    w1 = result.weights[convs[0].inputs[1]]
    assert np.array_equal(w1, module.conv1.weight.detach().numpy().transpose(2, 3, 1, 0))
    # the input enters the region with one permute; the flatten reads NHWC directly because
    # fc's columns were permuted offline; w.t() became a pre-transposed weight
    assert ctx.details["activation_permutes_after"] == 1
    assert [op.kind for op in result.ops].count("permute") == 1
    matmuls = result.ops_of_kind("matmul")
    assert [op.attrs.get("weight_layout") for op in matmuls] == ["KN", None]
    fc_weight = result.weights[matmuls[0].inputs[1]]  # [K = 24 in (h, w, c) order, N = 5]
    original = module.fc.weight.detach().numpy().reshape(5, 6, 2, 2)
    assert np.array_equal(fc_weight, original.transpose(0, 2, 3, 1).reshape(5, 24).T)
    assert np.array_equal(result.weights[matmuls[1].inputs[1]], module.w.detach().numpy().T)
    assert not result.ops_of_kind("linear")


def test_permute_leaves_the_region_where_a_non_region_op_reads_it():
    class Stack(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Conv1d(3, 4, 3, padding=2, dilation=2)
            self.b = nn.Conv1d(4, 4, 1)

        def forward(self, x):
            h = torch.relu(self.a(x))
            return self.b(h + h), h.transpose(1, 2).softmax(-1)  # softmax is outside the region

    graph, ctx = prepare(Stack(), randn(1, 3, 12))
    result = permute.run(graph, ctx)
    assert_matches(result, ctx)
    assert [op.attrs["layout"] for op in result.ops_of_kind("conv1d")] == ["NLC", "NLC"]
    # in: x; out: the graph output and the tensor the transpose reads (which then cancels)
    permutes = [op for op in result.ops if op.kind == "permute"]
    assert len(permutes) == 4 and ctx.details["activation_permutes_before"] == 1


# --- split_attention ---

def test_split_attention_writes_sdpa_as_two_matmuls_and_a_softmax():
    class Attn(nn.Module):
        def forward(self, q, k, v, mask):
            return (F.scaled_dot_product_attention(q, k, v, is_causal=True),
                    F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.5))

    inputs = (randn(1, 2, 4, 8, seed=1), randn(1, 2, 4, 8, seed=2), randn(1, 2, 4, 6, seed=3), randn(4, 4, seed=4))
    graph, ctx = prepare(Attn(), *inputs)
    result = split_attention.run(graph, ctx)
    assert_matches(result, ctx)
    assert ctx.details == {"split": 2, "left_whole": 0}
    assert not result.ops_of_kind("sdpa")
    assert [op.kind for op in result.ops].count("matmul") == 4
    scores = result.ops_of_kind("matmul")[0]
    assert {k: scores.attrs[k] for k in ("M", "N", "K", "batch")} == {"M": 4, "N": 4, "K": 8, "batch": 2}
    scales = [op.attrs["scalar"] for op in result.ops_of_kind("mul")]
    assert scales == [pytest.approx(1 / math.sqrt(8)), 0.5]
    causal = next(array for name, array in result.weights.items() if "causal" in name)
    assert np.array_equal(np.isinf(causal), ~np.tril(np.ones((4, 4), dtype=bool)))


# --- select_last_token ---

class TinyLm(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 8)
        self.k = nn.Linear(8, 8, bias=False)
        self.mix = nn.Linear(8, 8)
        self.head = nn.Linear(8, 20, bias=False)
        self.norm = nn.Parameter(torch.linspace(0.5, 1.5, 8))

    def forward(self, tokens):
        x = self.emb(tokens)  # [1, S, 8]
        k = self.k(x)
        ctx = torch.softmax(x @ k.transpose(1, 2), -1) @ x  # mixes tokens: stays whole
        h = x + torch.relu(self.mix(ctx))
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * self.norm
        return self.head(h), k


def test_select_last_token_computes_the_tail_on_one_row():
    graph, ctx = prepare(TinyLm(), torch.tensor([[3, 1, 4, 1, 5, 9]]))
    result = select_last_token.run(graph, ctx)
    assert_matches(result, ctx)
    assert result.tensors[result.outputs[0]].shape == (1, 1, 20)
    assert result.tensors[result.outputs[1]].shape == (1, 6, 8)  # the cache output keeps every row
    assert ctx.expected[0].shape == (1, 1, 20)
    linears = {op.inputs[1]: op.attrs["M"] for op in result.ops_of_kind("linear")}
    assert linears == {"p_k_weight": 6, "p_mix_weight": 1, "p_head_weight": 1}
    # slices where the row axis enters the region: the attention output and the residual x
    assert ctx.details["slices"] == 2 and len(result.ops_of_kind("slice")) == 2
    assert ctx.details["macs_after"] == ctx.details["macs_before"] - 5 * (8 * 8 + 8 * 20)


def test_select_last_token_refuses_an_output_that_is_not_token_wise():
    class AcrossTokens(nn.Module):
        def forward(self, x):
            return torch.softmax(x, dim=1)  # every row depends on every token

    graph, ctx = prepare(AcrossTokens(), randn(1, 4, 3))
    with pytest.raises(StepError, match="not computed token by token"):
        select_last_token.run(graph, ctx)


# --- quantize ---

class OneLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 2)
        with torch.no_grad():
            self.fc.weight.copy_(torch.tensor([[0.5, 0.25], [1.0, -1.0]]))
            self.fc.bias.copy_(torch.tensor([0.1, -0.2]))

    def forward(self, x):
        return self.fc(x)


def test_quantize_a_linear_by_hand():
    graph, ctx = prepare(OneLinear(), torch.tensor([[1.0, -0.5]]))
    q = quantize.run(graph, ctx, weights="channel")
    assert [op.kind for op in q.ops] == ["quantize", "linear", "dequantize"]
    quant, linear, deq = q.ops
    assert quant.attrs["scale"] == 127.0  # 127 / absmax(x) = 127 / 1
    values = q.trace(torch.tensor([[1.0, -0.5]]))
    assert values[quant.outputs[0]].tolist() == [[127, -64]]  # -63.5 rounds half to even
    w = q.weights[linear.inputs[1]]
    assert w.dtype == np.int8 and w.tolist() == [[127, 64], [127, -127]]  # scales 254 and 127
    bias = q.weights[linear.inputs[2]]
    assert bias.dtype == np.int32 and bias.tolist() == [3226, -3226]  # 0.1 * 127 * 254, -0.2 * 127 * 127
    acc = values[linear.outputs[0]]
    assert acc.dtype == torch.int32 and acc.tolist() == [[127 * 127 - 64 * 64 + 3226, 127 * 127 + 64 * 127 - 3226]]
    assert deq.attrs["scale"] == [np.float32(1 / (127 * 254)).item(), np.float32(1 / (127 * 127)).item()]
    assert linear.attrs["dtype"] == "int8" and linear.attrs["acc_dtype"] == "int32"
    y = values[q.outputs[0]]
    assert y.tolist() == (acc.float() * torch.tensor(deq.attrs["scale"])).tolist()
    assert abs(y[0, 0].item() - 0.475) < 5e-3 and abs(y[0, 1].item() - 1.3) < 5e-3  # float: 0.475, 1.3


def test_per_channel_activation_scales_move_into_the_weight_by_hand():
    """activations = "channel", migration a = 0.5: x = (1, -0.5) has thresholds t = (1, 0.5),
    each input channel's weights absmax 1, so d = sqrt(t) = (1, 0.7071), S = 127 / max(t / d)
    = 127, sA = S / d = (127, 179.6), W' = W * d quantized per output channel (254, 127)."""
    x = torch.tensor([[1.0, -0.5]])
    graph, ctx = prepare(OneLinear(), x)
    q = quantize.run(graph, ctx, activations="channel")
    quant, linear, deq = q.ops
    d = np.sqrt([1.0, 0.5])
    assert quant.attrs["scale"] == np.float32(127 / d).tolist() and quant.attrs["scale_axes"] == [1]
    values = q.trace(x)
    assert values[quant.outputs[0]].tolist() == [[127, -90]]  # -0.5 * 179.6 = -89.8
    assert q.weights[linear.inputs[1]].tolist() == [[127, 45], [127, -90]]  # 0.25 d 254 = 44.9, -d 127 = -89.8
    assert q.weights[linear.inputs[2]].tolist() == [3226, -3226]  # the bias sees the one S = 127, as before
    assert deq.attrs["scale"] == [np.float32(1 / (127 * 254)).item(), np.float32(1 / (127 * 127)).item()]
    assert linear.attrs["a_granularity"] == "channel"
    y = values[q.outputs[0]]
    assert abs(y[0, 0].item() - 0.475) < 5e-3 and abs(y[0, 1].item() - 1.3) < 5e-3
    assert integer_reference(q, x)[q.outputs[0]].tolist() == y.tolist()
    with pytest.raises(StepError, match="migration 1.5"):
        quantize.run(graph, ctx, activations="channel", migration=1.5)


class DepthwiseBlock(nn.Module):
    """Depthwise 3x3, ReLU, then a grouped 1x1 (2 groups): input channels whose ranges span
    three orders of magnitude, one channel silent."""

    def __init__(self):
        super().__init__()
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.pw = nn.Conv2d(8, 6, 1, groups=2)

    def forward(self, x):
        return self.pw(torch.relu(self.dw(x)))


def test_per_channel_activation_scales_cure_channels_of_unequal_range():
    torch.manual_seed(0)
    spread = torch.tensor([1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0, 0.0]).reshape(1, 8, 1, 1)
    x = randn(1, 8, 6, 6) * spread
    graph, ctx = prepare(DepthwiseBlock(), x)
    graph = permute.run(graph, ctx)  # NHWC / HWIO: the channel axes are the last ones
    errors = {}
    for act in ("tensor", "channel"):
        q = quantize.run(graph, ctx, activations=act)
        errors[act] = assert_matches(q, ctx, tolerance=0.05)  # bit-exact against integer_reference too
    assert errors["channel"] < errors["tensor"] / 2, errors
    q = quantize.run(graph, ctx, activations="channel")
    first = q.ops_of_kind("quantize")[0]
    assert first.attrs["scale_axes"] == [3] and len(first.attrs["scale"]) == 8
    # the silent channel takes the smallest weight factor: its scale the largest, no infinity
    assert np.isfinite(first.attrs["scale"]).all() and first.attrs["scale"][7] == max(first.attrs["scale"])
    # depthwise: a = 1, every live channel's int8 values reach the full range
    xq = q.trace(x)[first.outputs[0]]
    assert xq[..., :7].abs().amax(dim=(0, 1, 2)).tolist() == [127] * 7
    # the grouped 1x1's input quantize is fused into the depthwise conv's requantize (per channel)
    assert [op.kind for op in q.ops].count("requantize") == 1
    assert [op.kind for op in q.ops].count("quantize") == 1


def test_a_bias_with_no_room_in_the_accumulator_is_added_after_dequantize():
    """GoogLeNet's case: activations tiny next to the bias. bias_q = 0.1 * 127e6 * 254 =
    3.2e9 does not fit int32 (and must leave room for K = 2 products of up to 128 * 128),
    so the bias is added in float after dequantize; the integer product stays exact."""
    x = torch.tensor([[1e-6, -5e-7]])
    graph, ctx = prepare(OneLinear(), x)
    q = quantize.run(graph, ctx, weights="channel")
    assert [op.kind for op in q.ops] == ["quantize", "linear", "dequantize", "add"]
    linear = q.ops[1]
    assert len(linear.inputs) == 2 and not linear.attrs["has_bias"]
    assert q.ops[0].attrs["scale"] == np.float32(127 / 1e-6).item()
    y = q.trace(x)[q.outputs[0]]
    want = OneLinear()(x).detach()
    assert torch.allclose(y, want, rtol=0, atol=1e-6)  # the bias (0.1, -0.2) survives; saturated it would not
    assert integer_reference(q, x)[q.outputs[0]].tolist() == y.tolist()


def test_a_reduction_too_long_for_int32_is_named_before_it_overflows(tmp_path: Path):
    """K = 131,072 int8 products of up to 128 * 128 can reach 2**31 > 2**31 - 1 whatever the
    scales: the quantize step refuses and names the op, its source line and K."""
    k = 2**31 // (128 * 128)
    model = nn.Linear(k, 1)
    graph, ctx = prepare(model, randn(1, k))
    with pytest.raises(quantize.AccumulatorOverflow, match=f"linear .*{k:,} int8 products"):
        quantize.run(graph, ctx, weights="channel")
    ok = nn.Linear(k - 1, 1)  # one product fewer: fits (and the bias goes in after dequantize)
    graph, ctx = prepare(ok, randn(1, k - 1))
    assert any(op.kind == "linear" for op in quantize.run(graph, ctx, weights="channel").ops)


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 40)
        self.b = nn.Linear(40, 24)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def test_quantize_requantizes_between_layers_and_relu_runs_on_int8():
    torch.manual_seed(0)
    graph, ctx = prepare(Mlp(), randn(4, 16))
    q = quantize.run(graph, ctx)
    assert [(op.kind, q.tensors[op.outputs[0]].dtype) for op in q.ops] == [
        ("quantize", "int8"), ("linear", "int32"), ("requantize", "int8"), ("relu", "int8"),
        ("linear", "int32"), ("dequantize", "float32")]
    assert q.ops[2].attrs["scale_axes"] == [1] and len(q.ops[2].attrs["scale"]) == 40  # per output channel
    assert assert_matches(q, ctx, tolerance=0.05) > 1e-4  # quantization is not free...
    unfused = quantize.run(graph, ctx, fuse=False)
    assert [op.kind for op in unfused.ops].count("requantize") == 0
    assert_matches(unfused, ctx, tolerance=0.05)  # ...and fusing keeps it as close


def test_quantize_granularities_shape_the_scales():
    torch.manual_seed(0)
    graph, ctx = prepare(Mlp(), randn(40, 16))
    strips = quantize.run(graph, ctx, activations="strip", weights="strip", fuse=False)
    quant = strips.ops_of_kind("quantize")[0]
    assert quant.attrs["scale_axes"] == [0] and quant.attrs["scale_groups"] == [16] and len(quant.attrs["scale"]) == 3
    first = strips.ops_of_kind("linear")[0]
    assert first.attrs["a_granularity"] == "strip" and first.attrs["b_granularity"] == "strip"
    assert not first.attrs["has_bias"]  # several A scales: the bias is added in float after dequantize
    deq = strips.ops_of_kind("dequantize")[0]
    assert np.shape(deq.attrs["scale"]) == (3, 3) and deq.attrs["scale_axes"] == [0, 1]  # 40 rows, 40 channels
    assert [op.kind for op in strips.ops][3] == "add"
    assert_matches(strips, ctx, tolerance=0.05)
    per_tensor = quantize.run(graph, ctx, weights="tensor")
    assert per_tensor.ops_of_kind("requantize")[0].attrs["scale_axes"] == []


def test_calibration_rules_by_hand():
    row = np.arange(-100, 101, dtype=np.float32).reshape(1, -1)  # |x|: 0, 1, 1, ..., 100, 100
    assert quantize.thresholds(row, "absmax").tolist() == [100.0]
    assert quantize.thresholds(np.arange(101.0).reshape(1, -1), "percentile", 90.0).tolist() == [90.0]
    # every |x| at 2: any smaller threshold clips all of them, at 2 only rounding noise is left
    assert quantize.thresholds(np.array([[2.0, -2.0, 2.0]]), "mse").tolist() == [2.0]
    assert quantize.thresholds(np.zeros((1, 4)), "mse").tolist() == [0.0]


def test_mse_calibration_lowers_the_int8_error_of_a_long_tailed_tensor():
    """A tensor with a few outliers (peak 40x its spread): mse clips some and its int8 error
    (quantized with the quantize op's own formula) is lower than absmax's, and than the 99.9th
    percentile's, which clips the outliers far too hard."""
    x = randn(1, 20000).numpy()
    x[0, :5] = [40.0, -35.0, 30.0, 25.0, -20.0]

    def error(rule: str) -> float:
        scale = quantize.calibrate(x, None, "tensor", rule, 99.9)
        q = quantize._quantize_array(x, scale).astype(np.float64)
        return float(((q / scale.values[0] - x) ** 2).mean())

    t = quantize.thresholds(x, "mse")[0]
    assert 3.0 < t < 40.0
    assert error("mse") < error("absmax") and error("mse") < error("percentile")


def test_the_calibration_option_sets_the_activation_scales_only():
    torch.manual_seed(0)
    x = randn(40, 16)
    graph, ctx = prepare(Mlp(), x)
    plain = quantize.run(graph, ctx, fuse=False)
    assert ctx.details["calibration"] == "absmax"
    q = quantize.run(graph, ctx, calibration="percentile", percentile=99.0, fuse=False)
    assert ctx.details["calibration"] == "percentile" and ctx.details["percentile"] == 99.0
    first = q.ops_of_kind("quantize")[0]
    assert first.attrs["scale"] == np.float32(127.0 / np.percentile(np.abs(x.numpy()), 99.0)).item()
    assert first.attrs["scale"] > plain.ops_of_kind("quantize")[0].attrs["scale"]
    linear = q.ops_of_kind("linear")[0]  # weights keep absmax per output channel
    assert np.array_equal(q.weights[linear.inputs[1]], plain.weights[plain.ops_of_kind("linear")[0].inputs[1]])
    assert quantize.verify(q, ctx)["bit_exact"]
    with pytest.raises(StepError, match="percentile 101"):
        quantize.run(graph, ctx, calibration="percentile", percentile=101.0)


def test_integer_reference_is_bit_exact_and_the_check_can_fail(monkeypatch):
    torch.manual_seed(0)
    graph, ctx = prepare(Tiny(), randn(1, 2, 10, 10))
    q = quantize.run(permute.run(graph, ctx), ctx)
    assert {"requantize", "conv2d", "max_pool2d"} <= {op.kind for op in q.ops}
    verdict = quantize.verify(q, ctx)
    assert verdict["bit_exact"] and verdict["integer_tensors_compared"] >= 8
    numpy_values = integer_reference(q, *ctx.inputs)
    conv = q.ops_of_kind("conv2d")[0]
    assert numpy_values[conv.outputs[0]].dtype == np.int32

    def truncating(op, args):  # what a careless integer path would do: no rounding
        acc = args[0].to(torch.float32) * graph_module.scale_tensor(op.attrs, tuple(args[0].shape))
        return torch.clamp(acc.trunc(), -128, 127).to(torch.int8)

    monkeypatch.setitem(graph_module.INTERPRETERS, "requantize", truncating)
    ctx.traced = None  # the context keeps the last trace (made by the right interpreter): run it again
    broken = quantize.verify(q, ctx)
    assert not broken["bit_exact"] and broken["first_mismatch"] is not None


def test_integer_check_takes_a_float_op_from_the_trace_only_for_the_very_same_arguments(monkeypatch):
    """The numpy integer path leaves float ops (softmax, norms) to the torch interpreter; given
    the trace, an op whose arguments have the trace's bits takes the trace's value (what the
    interpreter gives them), so the values are the ones computed alone; an op whose
    arguments differ in a bit is computed."""
    pipe = run_pipeline("llama_prefill", dict(seq=16, vocab=64, dim=32, layers=1, heads=2, kv_heads=1))
    q = pipe.graph
    consumers = q.consumers()
    # the scores' scaling: a float op (torch) reading a dequantize's output (numpy)
    deq = next(op for op in q.ops_of_kind("dequantize") if any(c.kind == "mul" for c in consumers[op.outputs[0]]))
    user = next(c for c in consumers[deq.outputs[0]] if c.kind == "mul")
    calls = []
    for kind in ("mul", "softmax"):
        real = graph_module.INTERPRETERS[kind]
        monkeypatch.setitem(graph_module.INTERPRETERS, kind,
                            lambda op, args, real=real: calls.append(op.name) or real(op, args))
    alone = dict(quantize.integer_values(q, *pipe.inputs))
    assert user.name in calls and q.ops_of_kind("softmax")[0].name in calls
    traced = q.trace(*pipe.inputs)
    calls.clear()
    shared = dict(quantize.integer_values(q, *pipe.inputs, traced=traced))
    assert calls == [] and alone.keys() == shared.keys()
    assert all(np.array_equal(quantize._bits(alone[n]), quantize._bits(shared[n])) for n in alone)
    off = dict(traced)
    off[deq.outputs[0]] = traced[deq.outputs[0]].clone()
    off[deq.outputs[0]].view(-1)[0] += 1.0  # the trace's argument of `user` differs from the numpy path's
    computed = dict(quantize.integer_values(q, *pipe.inputs, traced=off))
    assert calls == [user.name]  # computed; what follows it has the trace's arguments again
    assert all(np.array_equal(quantize._bits(alone[n]), quantize._bits(computed[n])) for n in alone)


def test_same_bits_compares_strided_views_by_their_bits_without_copies():
    """`_bits` views a float array of any layout as its bits; `_same_bits` takes the very same
    elements as equal without reading them, and tells a NaN, a signed zero or a strided view
    that differs in one element from the tensor beside it."""
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    base[0, 1], base[2, 1] = np.nan, -0.0  # both inside the view below
    view = base.T[1:, ::2]  # strided both ways
    bits = quantize._bits(view)
    assert bits.dtype == np.uint32 and np.shares_memory(bits, base)
    assert np.array_equal(bits, np.ascontiguousarray(view).view(np.uint32))
    tensor = torch.from_numpy(base).T[1:, ::2]
    assert quantize._same_bits([view], [tensor])  # the same elements (NaN included)
    copy = torch.from_numpy(np.ascontiguousarray(view))
    assert quantize._same_bits([view], [copy])  # other memory, same bits: read and compared
    zero = copy.clone()
    zero[zero.view(torch.int32) == np.float32(-0.0).view(np.int32)] = 0.0  # -0.0 == 0.0, not in bits
    assert torch.allclose(zero, copy, rtol=0, atol=0, equal_nan=True) and not quantize._same_bits([view], [zero])
    other = copy.clone()
    other[-1, -1] += 1.0
    assert not quantize._same_bits([view], [other])


@pytest.mark.parametrize("k", [300, 1023, 1024, 3000])  # float32 BLAS below 2**24 / (128 * 128) = 1024 terms
def test_integer_products_through_float_blas_equal_the_int64_path_bit_for_bit(k):
    rng = np.random.default_rng(k)
    a = rng.integers(-128, 128, (3, 40, k), dtype=np.int64).astype(np.int8)
    b = rng.integers(-128, 128, (k, 30), dtype=np.int64).astype(np.int8)
    a[0] = -128  # the extreme products: (-128) * (-128) summed over K
    b[:, :5] = -128
    want = np.matmul(a.astype(np.int64), b.astype(np.int64))
    got, bound = quantize._np_int_matmul(a, b)
    assert got.dtype == np.int32 and bound == k * 128 * 128 and np.array_equal(got, want)
    assert want[0, 0, 0] == k * 128 * 128
    bias = np.full(30, 2**31 - 1 - bound, dtype=np.int32)  # the largest bias no sum can wrap
    assert np.array_equal(quantize._np_accumulate(got.copy(), bound, bias), want + bias)
    over = np.full(30, 2**31 - 1, dtype=np.int32)  # can wrap: the int64 path, mod 2**32
    assert np.array_equal(quantize._np_accumulate(got.copy(), bound, over), quantize._np_wrap(want + over))
    # the PyTorch reference's integer products: the same bits
    op = Op("m", "matmul", [], [], {}, "", None)
    for extra in ([], [torch.from_numpy(bias)], [torch.from_numpy(over)]):
        ref = INTERPRETERS["matmul"](op, [torch.from_numpy(a), torch.from_numpy(b), *extra])
        expected = quantize._np_wrap(want + (extra[0].numpy().astype(np.int64) if extra else 0))
        assert ref.dtype == torch.int32 and np.array_equal(ref.numpy(), expected)
    x = rng.integers(-128, 128, (2, 6, 40), dtype=np.int64).astype(np.int8)
    w = rng.integers(-128, 128, (5, 6, 40), dtype=np.int64).astype(np.int8)
    got, _ = quantize._np_int_tensordot(x, w, ([1, 2], [1, 2]))
    assert np.array_equal(got, np.tensordot(x.astype(np.int64), w.astype(np.int64), axes=([1, 2], [1, 2])))


def test_integer_products_beyond_float64_exactness_stay_in_int64():
    # int32 operands whose partial sums pass 2**53: float64 would round them
    a = np.array([[2**30 - 1, 2**30 - 3, -(2**30) + 5]], dtype=np.int32)
    b = np.array([[2**30 - 7], [2**30 - 11], [2**30 - 13]], dtype=np.int32)
    exact = sum(int(x) * int(y) for x, y in zip(a[0], b[:, 0]))
    rounded = int(np.matmul(a.astype(np.float64), b.astype(np.float64))[0, 0])
    assert rounded != exact  # the guard matters on these values
    got, bound = quantize._np_int_matmul(a, b)
    assert bound is None and int(got[0, 0]) == exact


# --- the pipeline ---

def user_recipe(folder: Path, steps: str | None = None, step_file: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.py").write_text(textwrap.dedent("""\
        import torch
        from torch import nn


        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(8, 4)

            def forward(self, x):
                return torch.relu(self.fc(x))


        def load(rows: int = 3):
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                return Model().eval()


        def inputs(rows: int = 3):
            return (torch.randn(rows, 8, generator=torch.Generator().manual_seed(1)),)
    """))
    if steps is not None:
        (folder / "steps.toml").write_text(steps)
    if step_file is not None:
        (folder / "frontend").mkdir(exist_ok=True)
        (folder / "frontend" / "scale_up.py").write_text(step_file)
    return folder


SCALE_UP = textwrap.dedent('''\
    """A deliberately wrong step: multiplies the output by `factor`."""
    from dse.frontend import Rewriter

    OPTIONS = {"factor": (float, 1.1)}


    def run(graph, ctx, factor=1.1):
        rw = Rewriter(graph, "scale_up")
        for op in graph.ops:
            rw.keep(op)
        out = graph.outputs[0]
        spec = graph.tensors[out]
        new = rw.emit("mul", [out], spec.shape, spec.dtype, {"scalar": factor, "scalar_index": 1}, "test")
        return rw.finish([new])
''')


def test_pipeline_dumps_every_stage_in_order(tmp_path: Path):
    folder = user_recipe(tmp_path / "mine")
    result = run_pipeline(folder, {"rows": 5}, out_dir=tmp_path / "out")
    assert result.passed
    assert [s.dump for s in result.stages] == ["01-import.txt", "02-permute.txt", "03-quantize.txt"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [s.dump for s in result.stages]
    for stage, graph in zip(result.stages, result.graphs):
        assert (tmp_path / "out" / stage.dump).read_text() == graph.dump()
    assert "int8" in (tmp_path / "out" / "03-quantize.txt").read_text()
    assert result.stages[0].max_abs_error == 0.0 and result.stages[2].quantized
    assert result.graphs[0].tensors["x"].shape == (5, 8)
    assert not (folder / "output").exists()


def test_a_wrong_step_is_blamed_not_the_capture(tmp_path: Path):
    steps = '[[step]]\nname = "scale_up"\nfactor = 1.5\n\n[[step]]\nname = "quantize"\n'
    folder = user_recipe(tmp_path / "mine", steps, SCALE_UP)
    result = run_pipeline(folder)
    assert [(s.name, s.passed, s.blame) for s in result.stages] == [
        ("import", True, None), ("scale_up", False, "scale_up"), ("quantize", False, "scale_up")]
    stage = result.stages[1]
    assert stage.max_rel_error == pytest.approx(0.5, rel=1e-6) and "max abs error" in stage.error


def test_a_wrong_capture_is_blamed_on_the_capture(tmp_path: Path, monkeypatch):
    monkeypatch.setitem(graph_module.INTERPRETERS, "relu", lambda op, args: args[0])  # a broken lowering
    result = run_pipeline(user_recipe(tmp_path / "mine"))
    assert not result.stages[0].passed and {s.blame for s in result.stages} == {"capture"}


def test_a_step_that_cannot_apply_stops_the_pipeline(tmp_path: Path):
    folder = user_recipe(tmp_path / "mine", '[[step]]\nname = "select_last_token"\ndim = 5\n\n'
                                            '[[step]]\nname = "quantize"\n')
    result = run_pipeline(folder)
    assert [s.name for s in result.stages] == ["import", "select_last_token"]
    assert "cannot apply" in result.stages[1].error and not result.passed


@pytest.mark.parametrize("steps, field, allowed", [
    ('[[step]]\nname = "quantise"\n', "step[0].name", "quantize"),
    ('[[step]]\nname = "quantize"\nweights = "row"\n', "step[0].weights", "tensor, strip, channel"),
    ('[[step]]\nname = "quantize"\nbits = 4\n', "step[0].bits", "options of quantize"),
    ('[[step]]\nname = "quantize"\ntolerance = "big"\n', "step[0].tolerance", "a float"),
    ('[[step]]\nname = "permute"\n[[step]]\nname = "permute"\nchannels_last = 1\n', "step[1].channels_last", "a bool"),
    ('steps = ["permute"]\n', "steps", "step (an array"),
])
def test_bad_steps_file_names_file_field_and_allowed(tmp_path: Path, steps, field, allowed):
    folder = user_recipe(tmp_path / "mine", steps)
    with pytest.raises(InputError) as caught:
        load_steps(folder)
    assert caught.value.file == str(folder / "steps.toml")
    assert caught.value.field == field and allowed in caught.value.allowed


def test_steps_default_and_options_resolve():
    assert [s.name for s in load_steps(Path("/nonexistent"))] == ["permute", "quantize"]
    spec = resolve_step("quantize", {"tolerance": 1})
    assert spec.options == {"activations": "tensor", "weights": "channel", "fuse": True, "tolerance": 1.0,
                            "calibration": "absmax", "percentile": 99.99, "migration": 0.5}
    assert spec.tolerance == 1.0 and resolve_step("permute", {}).tolerance == 1e-5


def test_an_unchecked_pipeline_gives_the_same_graph_faster():
    """check=False (the mapper's and the model's path) skips the comparisons, not the steps."""
    from dse.frontend import run_pipeline

    # unchecked first: a checked entry of the graph cache would serve it (one key for both)
    unchecked = run_pipeline("lenet5", check=False)
    checked = run_pipeline("lenet5")
    assert not unchecked.checked and checked.checked
    assert unchecked.passed and [s.name for s in unchecked.stages] == [s.name for s in checked.stages]
    assert unchecked.graph.dump() == checked.graph.dump()
    assert all(s.outputs == [] for s in unchecked.stages) and checked.stages[-1].outputs


def test_unchanged_ops_are_taken_from_the_last_trace_and_equal_a_fresh_one():
    from dse.workload.graph import unchanged_values

    graph, ctx = prepare(nn.Sequential(nn.Linear(8, 6), nn.ReLU(), nn.Linear(6, 4), nn.Tanh()), randn(3, 8))
    before = graph.trace(*ctx.inputs)
    after = graph.copy()
    second = after.ops_of_kind("linear")[1]
    after.weights[second.inputs[1]] = after.weights[second.inputs[1]] * 2  # a step's new weight array
    known = unchanged_values(graph, before, after)
    first, relu = after.ops[0].outputs[0], after.ops_of_kind("relu")[0].outputs[0]
    assert set(known) == {first, relu}  # the new weight's op and what reads it are computed again
    fresh, reused = after.trace(*ctx.inputs), after.trace(*ctx.inputs, known=known)
    assert all(torch.equal(fresh[name], reused[name]) for name in fresh)
    assert not torch.equal(fresh[after.outputs[0]], before[graph.outputs[0]])


def test_the_pipeline_runs_each_float_op_once_across_its_stage_checks(tmp_path, monkeypatch):
    """Stage checks, the quantize step's calibration and its own check all need float
    forwards; each op is executed once per distinct op over distinct inputs."""
    runs = []
    for kind in ("linear", "matmul"):  # permute makes the linear a matmul of a pre-transposed weight
        real = graph_module.INTERPRETERS[kind]
        monkeypatch.setitem(graph_module.INTERPRETERS, kind, lambda op, args, real=real:
                            runs.append((op.kind, str(args[0].dtype))) or real(op, args))
    result = run_pipeline(user_recipe(tmp_path / "mine"))  # capture, permute, quantize: all checked
    assert result.passed and [s.name for s in result.stages] == ["import", "permute", "quantize"]
    # once each: the capture's linear, permute's matmul (its check; quantize's calibration takes
    # it), quantize's int8 matmul (its stage check; the step's own check takes it). Before
    # the reuse: the float matmul twice and the int8 matmul twice.
    assert sorted(runs) == [("linear", "torch.float32"), ("matmul", "torch.float32"), ("matmul", "torch.int8")]


@pytest.mark.parametrize("dtype", [np.float32, np.uint16, np.int8, np.float64, np.uint32])
def test_pretransposed_weight_is_the_transpose_copied_contiguous(dtype):
    w = (np.random.default_rng(0).standard_normal((37, 53)) * 100).astype(dtype)
    t = permute._transposed(w)
    assert t.dtype == w.dtype and t.flags.c_contiguous and np.array_equal(t, w.T) and not np.shares_memory(t, w)
