"""Capture and the reference interpreter for every op kind beyond the skeleton's, against
PyTorch; hand-computed counts; the integer semantics the quantized graph relies on."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dse.errors import InputError
from dse.workload import UnsupportedOpError, capture, capture_recipe
from dse.workload.graph import Op, OpCounts, scale_tensor, wrap_int32

REL_TOL = 1e-5


def assert_close(graph, module, inputs):
    with torch.no_grad():
        expected = module(*inputs)
    expected = list(expected) if isinstance(expected, tuple) else [expected]
    actual = graph.run(*inputs)
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected):
        assert got.shape == want.shape and got.dtype == want.dtype
        error = (got - want).abs().max().item()
        assert error <= REL_TOL * want.abs().max().item(), error


class Vision(nn.Module):
    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.conv = nn.Conv2d(3, 8, 3, stride=2, padding=1, dilation=1)
        self.bn = nn.BatchNorm2d(8)
        self.conv1d = nn.Conv1d(4, 6, 3, padding=2, dilation=2)
        with torch.no_grad():
            self.bn.running_mean.copy_(torch.randn(8, generator=g))
            self.bn.running_var.copy_(torch.rand(8, generator=g) + 0.5)

    def forward(self, x, y):
        a = torch.relu(self.bn(self.conv(x)))  # [1, 8, 8, 8]
        p = F.max_pool2d(a, 3, stride=2, padding=1)  # [1, 8, 4, 4]
        q = F.avg_pool2d(a, 2)  # [1, 8, 4, 4]
        g = F.adaptive_avg_pool2d(p + q, 1).flatten(1)  # [1, 8]
        t = torch.sigmoid(self.conv1d(y)) * torch.tanh(y[:, :1].expand(1, 6, 10))
        return g, a.mean((2, 3)), t


class Text(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(16, 8)
        self.ln = nn.LayerNorm(8)
        self.register_buffer("table", torch.linspace(-1, 1, 40).reshape(5, 8))

    def forward(self, ids, pos, q, k, v, mask):
        x = self.emb(ids) + F.embedding(pos, self.table)  # [1, 3, 8]
        x = self.ln(x)
        r = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        half = torch.cat([-r[..., 4:], r[..., :4]], dim=-1) * torch.exp(-r.abs()) - torch.sqrt(r * r + 1)
        sm = torch.softmax(half, dim=-1) + torch.cos(r) - torch.sin(r)
        att = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.3)
        causal = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        last = sm[:, -1]  # select
        stacked = torch.stack([last, last * 2], dim=1)  # [1, 2, 8]
        wide = last.unsqueeze(1).expand(1, 3, 8) + sm.sum(-1, keepdim=True)
        return sm, att, causal, stacked, wide, x.transpose(1, 2)


def _text_inputs():
    g = torch.Generator().manual_seed(2)
    return (torch.tensor([[1, 5, 9]]), torch.tensor([[0, 1, 2]]), torch.randn(1, 2, 3, 4, generator=g),
            torch.randn(1, 2, 5, 4, generator=g), torch.randn(1, 2, 5, 6, generator=g),
            torch.randn(3, 5, generator=g))


def test_vision_ops_match_pytorch_and_are_typed():
    module = Vision().eval()
    g = torch.Generator().manual_seed(1)
    inputs = (torch.randn(1, 3, 16, 16, generator=g), torch.randn(1, 4, 10, generator=g))
    graph = capture(module, *inputs, name="vision")
    assert_close(graph, module, inputs)
    kinds = [op.kind for op in graph.ops]
    for kind in ("conv2d", "batch_norm", "relu", "max_pool2d", "avg_pool2d", "mean", "conv1d", "sigmoid", "tanh",
                 "slice", "expand", "reshape", "mul", "add"):
        assert kind in kinds, kind
    conv = graph.ops_of_kind("conv2d")[0]
    # out [1, 8, 8, 8]: M = 64 positions, N = 8 channels, K = 3 * 3 * 3
    assert {k: conv.attrs[k] for k in ("M", "N", "K", "stride", "padding", "dilation", "layout", "weight_layout")} == {
        "M": 64, "N": 8, "K": 27, "stride": [2, 2], "padding": [1, 1], "dilation": [1, 1], "layout": "NCHW",
        "weight_layout": "OIHW"}
    assert conv.counts == OpCounts(macs=64 * 8 * 27, other_ops=64 * 8, bytes_read=(3 * 256 + 8 * 27 + 8) * 4,
                                   bytes_written=512 * 4, weight_bytes=(8 * 27 + 8) * 4)
    conv1d = graph.ops_of_kind("conv1d")[0]
    assert conv1d.attrs["dilation"] == [2] and conv1d.attrs["padding"] == [2]
    assert conv1d.counts.macs == 10 * 6 * 4 * 3
    pool = graph.ops_of_kind("max_pool2d")[0]
    assert pool.counts.other_ops == 9 * 8 * 16  # kernel elements per output element
    assert graph.ops_of_kind("batch_norm")[0].counts.other_ops == 2 * 512
    global_pool = [op for op in graph.ops_of_kind("mean") if op.attrs["keepdim"]]
    assert [op.attrs["dims"] for op in global_pool] == [[2, 3]]  # adaptive_avg_pool2d(1) is a mean


def test_text_ops_match_pytorch_and_count():
    module = Text().eval()
    inputs = _text_inputs()
    graph = capture(module, *inputs, name="text")
    assert_close(graph, module, inputs)
    kinds = {op.kind for op in graph.ops}
    assert {"embedding", "layer_norm", "pow", "mean", "rsqrt", "cat", "neg", "exp", "sqrt", "softmax", "cos", "sin",
            "sdpa", "select", "stack", "expand", "sum", "permute"} <= kinds
    masked, causal = graph.ops_of_kind("sdpa")
    assert masked.attrs == {"batch": 2, "S": 3, "T": 5, "D": 4, "Dv": 6, "scale": 0.3, "is_causal": False,
                            "has_mask": True}
    assert masked.counts.macs == 2 * 3 * 5 * (4 + 6)
    assert masked.counts.other_ops == 7 * 2 * 3 * 5  # scale + softmax (5) + mask, per score
    assert causal.attrs["is_causal"] and causal.attrs["scale"] is None
    embedding = graph.ops_of_kind("embedding")[0]
    assert embedding.counts.bytes_read == 3 * 8 * 4 + 3 * 8  # the gathered rows + int64 ids
    assert embedding.counts.weight_bytes == 16 * 8 * 4  # the whole table is model size
    norm = graph.ops_of_kind("layer_norm")[0]
    assert norm.attrs == {"normalized_shape": [8], "eps": 1e-5, "has_weight": True, "has_bias": True}
    assert norm.counts.other_ops == 7 * 24
    views = graph.ops_of_kind("select", "expand", "slice")
    assert views and all(op.counts.bytes_read == op.counts.bytes_written == 0 for op in views)


def test_decomposition_path_keeps_the_new_ops_whole():
    """An in-place op forces decomposition; conv, batch norm, layer norm, softmax and
    attention must still arrive as single ops."""

    class InPlace(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(2, 4, 3)
            self.bn = nn.BatchNorm2d(4)
            self.ln = nn.LayerNorm(9)
            self.act = nn.ReLU(inplace=True)

        def forward(self, x):
            y = self.act(self.bn(self.conv(x)))  # [1, 4, 3, 3]
            z = self.ln(y.flatten(2))  # [1, 4, 9]
            return torch.softmax(z, -1), F.scaled_dot_product_attention(z, z, z), F.max_pool2d(y, 2, ceil_mode=True)

    module = InPlace().eval()
    x = torch.randn(1, 2, 5, 5, generator=torch.Generator().manual_seed(0))
    graph = capture(module, x)
    assert_close(graph, module, (x,))
    kinds = [op.kind for op in graph.ops]
    for kind in ("conv2d", "batch_norm", "layer_norm", "softmax", "sdpa", "max_pool2d"):
        assert kinds.count(kind) == 1, (kind, kinds)


class Transposed(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.ConvTranspose2d(4, 4, 3)

    def forward(self, x):
        return self.conv(x)  # UNSUPPORTED: transposed conv


def test_transposed_conv_is_refused_with_the_op_and_the_line():
    with pytest.raises(UnsupportedOpError) as caught:
        capture(Transposed().eval(), torch.randn(1, 4, 6, 6))
    message = str(caught.value)
    line = next(i for i, text in enumerate(Path(__file__).read_text().splitlines(), 1)
                if "UNSUPPORTED: transposed conv" in text and "next(" not in text)
    assert "conv_transpose2d" in message
    assert f"test_workload_ops.py:{line}" in message


def test_unsupported_op_in_a_user_recipe_names_the_recipe_path(tmp_path: Path):
    folder = tmp_path / "my_model"
    folder.mkdir()
    (folder / "model.py").write_text(textwrap.dedent("""\
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = torch.relu(x)
                return torch.kthvalue(y, 2).values  # (topk is supported since #34)


        def load():
            return Model().eval()


        def inputs():
            return (torch.randn(3, 5),)
    """))
    with pytest.raises(UnsupportedOpError) as caught:
        capture_recipe(folder)
    assert "aten.kthvalue" in str(caught.value) and "model.py:8" in str(caught.value)
    assert caught.value.file == str((folder / "model.py").resolve())
    assert isinstance(caught.value, InputError)


# --- the integer semantics of the quantized kinds ---

def _op(kind, **attrs):
    return Op(kind, kind, [], [kind], attrs, "", OpCounts())


def test_quantize_rounds_half_to_even_and_saturates():
    from dse.workload.graph import INTERPRETERS

    x = torch.tensor([0.25, 0.75, 1.25, -0.25, -0.75, 100.0, -100.0, 0.0])
    q = INTERPRETERS["quantize"](_op("quantize", scale=2.0, scale_axes=[], scale_groups=[]), [x])
    # x * 2 = 0.5, 1.5, 2.5, -0.5, -1.5, 200, -200, 0 -> half to even, then [-128, 127]
    assert q.dtype == torch.int8
    assert q.tolist() == [0, 2, 2, 0, -2, 127, -128, 0]


def test_requantize_and_dequantize_apply_fp32_multipliers_per_channel():
    from dse.workload.graph import INTERPRETERS

    acc = torch.tensor([[100, -300], [2**24 + 1, 7], [5, -6], [-3, 10]], dtype=torch.int32)
    attrs = dict(scale=[0.5, 0.25], scale_axes=[1], scale_groups=[1])
    requantized = INTERPRETERS["requantize"](_op("requantize", **attrs), [acc])
    # 2.5 -> 2, -1.5 -> -2, -1.5 -> -2, 2.5 -> 2: ties go to the even integer
    assert requantized.dtype == torch.int8
    assert requantized.tolist() == [[50, -75], [127, 2], [2, -2], [-2, 2]]
    deq = INTERPRETERS["dequantize"](_op("dequantize", **attrs), [acc])
    # 2**24 + 1 is not an fp32: it rounds to 2**24 (nearest even) before the multiply
    assert deq.dtype == torch.float32 and deq[:2].tolist() == [[50.0, -75.0], [2.0**23, 1.75]]


def test_scale_tensor_expands_strips_and_channels():
    strips = scale_tensor({"scale": [1.0, 2.0], "scale_axes": [0], "scale_groups": [16]}, (20, 3))
    assert strips.shape == (20, 1) and strips[:16].eq(1).all() and strips[16:].eq(2).all()
    grid = scale_tensor({"scale": [[1.0, 2.0], [3.0, 4.0]], "scale_axes": [1, 2], "scale_groups": [16, 1]},
                        (2, 17, 2))
    assert grid.shape == (1, 17, 2)
    assert grid[0, 15].tolist() == [1.0, 2.0] and grid[0, 16].tolist() == [3.0, 4.0]
    with pytest.raises(ValueError):
        scale_tensor({"scale": [1.0], "scale_axes": [], "scale_groups": []}, (4,))


def test_integer_products_wrap_around_like_a_32_bit_accumulator():
    from dse.workload.graph import INTERPRETERS

    a = torch.full((1, 200000), 127, dtype=torch.int8)  # 200000 * 127 * 127 > 2**31
    b = torch.full((1, 200000), 127, dtype=torch.int8)
    acc = INTERPRETERS["linear"](_op("linear"), [a, b])
    exact = 200000 * 127 * 127
    assert acc.dtype == torch.int32 and acc.item() == exact - 2**32
    assert wrap_int32(torch.tensor([2**31, -(2**31) - 1])).tolist() == [-(2**31), 2**31 - 1]
    # a conv sums the same way, bias included
    x = torch.tensor([[[[1, -2], [3, 4]]]], dtype=torch.int8)
    w = torch.tensor([[[[2, 1], [-1, 3]]]], dtype=torch.int8)
    op = _op("conv2d", stride=[1, 1], padding=[0, 0], dilation=[1, 1], layout="NCHW", weight_layout="OIHW")
    out = INTERPRETERS["conv2d"](op, [x, w, torch.tensor([10], dtype=torch.int32)])
    assert out.dtype == torch.int32 and out.flatten().tolist() == [1 * 2 - 2 * 1 - 3 + 4 * 3 + 10]
    assert np.array_equal(out.numpy(), np.array([[[[19]]]], dtype=np.int32))


@pytest.mark.parametrize("capability", ["AVX2", "DEFAULT", "AVX512"])
def test_int8_gemm_serves_only_where_the_cpu_has_its_fast_kernel(capability, monkeypatch):
    """torch's int8 GEMM without AVX-512 is a reference loop (130x slower than float32 BLAS on an
    AMD EPYC): products go to the float path there, with the same exact sums."""
    import dse.workload.interpret as interpret
    from dse.workload.graph import INTERPRETERS

    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    monkeypatch.setattr(interpret, "_INT8_GEMM", None)
    calls = []
    monkeypatch.setattr(torch, "_int_mm", lambda *args, **kwargs: calls.append(1) or torch.ops.aten._int_mm(*args, **kwargs))
    assert interpret._int8_gemm_used() == (capability == "AVX512" and interpret._int8_gemm_exact())
    calls.clear()  # the exactness probe's own calls
    g = torch.Generator().manual_seed(1)
    a = torch.randint(-128, 128, (2, 40, 300), generator=g, dtype=torch.int8)
    b = torch.randint(-128, 128, (300, 24), generator=g, dtype=torch.int8)
    got = INTERPRETERS["matmul"](_op("matmul"), [a, b])
    assert torch.equal(got, (a.to(torch.int64) @ b.to(torch.int64)).to(torch.int32))
    assert bool(calls) == interpret._int8_gemm_used()


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("int8_gemm", [True, False])
def test_integer_products_are_the_exact_sums_on_either_path(seed, int8_gemm, monkeypatch):
    """linear and matmul of int8 operands: the int64 sums (which fit int32 here), by torch's
    int8 GEMM (where it is exact on this machine) and by the float slices alike, on batched,
    broadcast, strided and extreme operands, bias included."""
    import dse.workload.interpret as interpret
    from dse.workload.graph import INTERPRETERS

    if int8_gemm and not interpret._int8_gemm_exact():
        pytest.skip("torch's int8 GEMM is not exact on this machine: the float path serves")
    monkeypatch.setattr(interpret, "_INT8_GEMM", int8_gemm)
    g = torch.Generator().manual_seed(seed)
    k = [3, 64, 1030, 2048, 17, 4096][seed]
    a = torch.randint(-128, 128, ([2, 1][seed % 2], 3, 5, k), generator=g, dtype=torch.int8)
    a[..., 0, :] = -128  # every term -128 x -128 in a row of A and a column of B
    b = torch.randint(-128, 128, (3, k, 7), generator=g, dtype=torch.int8)[:, :, ::2]  # strided
    b[..., 0] = -128
    want = (a.to(torch.int64) @ b.to(torch.int64)).to(torch.int32)
    got = INTERPRETERS["matmul"](_op("matmul"), [a, b])
    assert got.dtype == torch.int32 and torch.equal(got, want)
    w = torch.randint(-128, 128, (9, k), generator=g, dtype=torch.int8)
    bias = torch.randint(-1000, 1000, (9,), generator=g, dtype=torch.int32)
    got = INTERPRETERS["linear"](_op("linear"), [a, w, bias])
    assert torch.equal(got, (a.to(torch.int64) @ w.T.to(torch.int64) + bias).to(torch.int32))
