"""More ops of issue #34, each from a tiny module through capture, the frontend steps
(checked against PyTorch), the plan, the lowering and the emulator on goban with 1 and 4
workers (bit-exact on the integer path, the model within 2% of the emulator):
`scaled_dot_product_attention` with K and V broadcast over the query heads (Falcon's
multi-query layout), `slice_scatter` / `zero_` on a slice, and FFT mixing (`fft_fftn` +
`real`, as FNet) as DFT matrix products on the matrix Ball."""

from __future__ import annotations

import pytest
import torch

from dse.workload.capture import UnsupportedOpError, capture
from dse.workload.graph import INTERPRETERS, Op
from tests.test_simple_ops import checked as _checked

MODULES = {
    "multi_query": ("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.Linear(16, 16)
        self.kv = nn.Linear(16, 8)
        self.o = nn.Linear(16, 16)

    def forward(self, x):
        b, s, _ = x.shape
        q = self.q(x).view(b, s, 4, 4).transpose(1, 2)           # 4 query heads
        k, v = self.kv(x).view(b, s, 2, 1, 4).permute(2, 0, 3, 1, 4)  # one KV head each
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(y.transpose(1, 2).reshape(b, s, 16))
""", "torch.randn(2, 6, 16, generator=g)"),
}


def checked(tmp_path, name, steps=None):
    return _checked(tmp_path, name, MODULES, steps)


def test_multi_query_attention_left_whole_runs_on_the_core(tmp_path):
    prep, rep = checked(tmp_path, "multi_query")
    sdpa = next(op for op in prep.graph.ops if op.kind == "sdpa")
    assert [prep.graph.tensors[n].shape for n in sdpa.inputs] == [(2, 4, 6, 4), (2, 1, 6, 4), (2, 1, 6, 4)]
    assert {r.how for r in rep.lowered.ops if r.kind == "sdpa"} == {"core"}


def test_multi_query_attention_split_folds_the_heads_into_rows_on_the_matrix_ball(tmp_path):
    """K and V of one head are read in place: each batch is one (4 heads x 6) x 4 @ 4 x 6
    product, the K and V reshapes are views, nothing expands or repeats them."""
    prep, rep = checked(tmp_path, "multi_query", ["split_attention", "permute", "quantize"])
    g = prep.graph
    products = [op for op in g.ops if op.kind == "matmul" and "scaled_dot_product_attention" in op.name]
    assert [(op.attrs["batch"], op.attrs["M"], op.attrs["N"], op.attrs["K"]) for op in products] == \
        [(2, 24, 6, 4), (2, 24, 4, 6)]
    assert not any(op.kind in ("expand", "repeat") for op in g.ops)
    how = {r.name: r.how for r in rep.lowered.ops}
    assert all(how[op.name] == "matrix" for op in products)
    shared = [op for op in g.ops if op.name.endswith(("k_shared", "v_shared"))]
    assert len(shared) == 2 and all(how[op.name] == "view" for op in shared)

MODULES["slice_scatter"] = ("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x):
        y = self.fc(x)
        y = torch.slice_scatter(y, self.fc2(x), dim=2, start=4, end=7)
        y[:, 1:3].zero_()  # a shifted-window mask's way of blanking a band
        return torch.relu(y)
""", "torch.randn(1, 5, 8, generator=g)")


def test_slice_scatter_and_zero_on_a_slice_run_on_the_core(tmp_path):
    prep, rep = checked(tmp_path, "slice_scatter")
    scatters = [op for op in prep.pipe.graphs[0].ops if op.kind == "slice_scatter"]
    assert [(op.attrs["dim"], op.attrs["start"], op.attrs["end"]) for op in scatters] == [(2, 4, 7), (1, 1, 3)]
    zeros = prep.pipe.graphs[0].weights[scatters[1].inputs[1]]  # zero_ writes a constant band of zeros
    assert zeros.shape == (1, 2, 8) and not zeros.any()
    assert {r.how for r in rep.lowered.ops if r.kind == "slice_scatter"} == {"core"}


def test_slice_scatter_by_hand():
    op = Op("s", "slice_scatter", ["x", "src"], ["y"], {"dim": 1, "start": 0, "end": 4, "step": 2}, "", None)
    y = INTERPRETERS["slice_scatter"](op, [torch.zeros(2, 4, dtype=torch.int8), torch.tensor([[1, 2], [3, 4]])])
    assert y.tolist() == [[1, 0, 2, 0], [3, 0, 4, 0]] and y.dtype == torch.int8

MODULES["fnet"] = ("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.out = nn.Linear(8, 4)

    def forward(self, x):
        y = torch.fft.fftn(self.fc(x), dim=(-1, -2)).real  # FNet's Fourier mixing
        return self.out(y)
""", "torch.randn(2, 6, 8, generator=g)")


def test_fft_mixing_is_dft_products_on_the_matrix_ball(tmp_path):
    """FNet's real(fftn(x, dims=(-1, -2))): per dim a product by the constant cos and sin
    matrices, the last dim first; the float path within 1e-5 of torch.fft (float32 DFT
    sums), the integer path bit-exact."""
    prep, rep = checked(tmp_path, "fnet")
    captured = prep.pipe.graphs[0]
    dft = [op for op in captured.ops if op.name.startswith("real_")]
    assert sorted(op.kind for op in dft) == ["add", "linear", "linear", "linear", "linear", "permute", "permute",
                                             "permute"]
    assert prep.pipe.stages[0].max_rel_error < 1e-5
    how = {r.name: r.how for r in rep.lowered.ops}
    products = [op for op in prep.graph.ops if op.kind == "matmul" and op.name.startswith("real_")]
    assert len(products) == 4 and all(how[op.name] == "matrix" for op in products)


@pytest.mark.parametrize("dims", [None, (0, 2), (1,)])
def test_the_real_part_of_fftn_by_dft_products(dims):
    class M(torch.nn.Module):
        def forward(self, x):
            return torch.fft.fftn(x, dim=dims).real

    x = torch.randn(3, 5, 4, generator=torch.Generator().manual_seed(0))
    graph = capture(M(), x)
    assert {op.kind for op in graph.ops} <= {"linear", "permute", "add"}
    got, = graph.run(x)
    want = torch.fft.fftn(x.double(), dim=dims).real
    assert torch.allclose(got.double(), want, rtol=0, atol=1e-5 * want.abs().max().item())


def test_fftn_read_other_than_by_real_is_refused_by_name():
    class M(torch.nn.Module):
        def forward(self, x):
            return torch.fft.fftn(x, dim=(-1,)).abs()

    with pytest.raises(UnsupportedOpError, match="fft_fftn whose complex result is read other than by real"):
        capture(M(), torch.randn(2, 4))
