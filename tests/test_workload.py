"""The workload layer against real PyTorch: captures run, match the module, count right."""

from __future__ import annotations

import hashlib
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

from dse.errors import InputError
from dse.workload import (
    Graph,
    OpCounts,
    UnsupportedOpError,
    capture,
    capture_recipe,
    list_recipes,
    load_recipe,
)
from dse.workload.recipes import RECIPES_DIR

REL_TOL = 1e-5
F32 = 4  # bytes


def assert_matches_module(graph: Graph, module: nn.Module, inputs: tuple) -> None:
    with torch.no_grad():
        expected = module(*inputs)
    expected = list(expected) if isinstance(expected, tuple) else [expected]
    actual = graph.run(*inputs)
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected):
        assert got.shape == want.shape and got.dtype == want.dtype
        max_abs = (got - want).abs().max().item()
        scale = want.abs().max().item()
        print(f"{graph.name}: max abs error {max_abs:.3e} (max |ref| {scale:.3e})")
        assert max_abs <= REL_TOL * max(scale, 1e-30), f"max abs error {max_abs:.3e} vs max |ref| {scale:.3e}"


def line_of(marker: str) -> int:
    lines = Path(__file__).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if marker in line and "line_of(" not in line)


@pytest.fixture(scope="module")
def mlp_graph() -> Graph:
    return capture_recipe("mlp")


# --- recipes captured and checked against the module ---

def test_gemm_matches_module_and_hand_counts():
    recipe = load_recipe("gemm")
    module, inputs = recipe.module.load(m=64, n=32, k=16), recipe.module.inputs(m=64, n=32, k=16)
    graph = capture(module, *inputs, name="gemm", source_path=recipe.path)
    assert_matches_module(graph, module, inputs)

    (op,) = graph.ops
    assert op.kind == "matmul"
    assert {k: op.attrs[k] for k in ("M", "N", "K", "batch")} == {"M": 64, "N": 32, "K": 16, "batch": 1}
    assert op.counts == OpCounts(
        macs=64 * 32 * 16,
        other_ops=0,
        bytes_read=(64 * 16 + 16 * 32) * F32,
        bytes_written=64 * 32 * F32,
        weight_bytes=16 * 32 * F32,
    )
    assert op.counts.macs == 32768
    assert op.source == f"model.py:{_line_in(recipe.path, 'return x @ self.w')}"


def _line_in(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_mlp_matches_module(mlp_graph: Graph):
    recipe = load_recipe("mlp")
    assert_matches_module(mlp_graph, recipe.module.load(), recipe.module.inputs())


def test_mlp_linear_attrs_and_counts(mlp_graph: Graph):
    linears = mlp_graph.ops_of_kind("linear")
    assert [(op.attrs["M"], op.attrs["N"], op.attrs["K"]) for op in linears] == [
        (128, 1024, 256), (128, 1024, 1024), (128, 256, 1024)
    ]
    assert all(op.attrs["batch"] == 1 and op.attrs["has_bias"] for op in linears)
    first = linears[0]
    assert first.counts.macs == 128 * 256 * 1024
    assert first.counts.other_ops == 128 * 1024  # the bias add
    assert first.counts.bytes_read == (128 * 256 + 1024 * 256 + 1024) * F32
    assert first.counts.bytes_written == 128 * 1024 * F32
    assert first.counts.weight_bytes == (1024 * 256 + 1024) * F32
    assert [op.kind for op in mlp_graph.ops] == ["linear", "relu", "linear", "relu", "linear"]

    totals = mlp_graph.totals()
    assert totals.macs == 128 * (256 * 1024 + 1024 * 1024 + 1024 * 256)
    n_params = sum(p.numel() for p in load_recipe("mlp").module.load().parameters())
    assert totals.weight_bytes == n_params * F32

    frame = mlp_graph.counts_frame()
    assert list(frame.columns) == [
        "name", "kind", "macs", "other_ops", "bytes_read", "bytes_written", "weight_bytes", "source"
    ]
    assert len(frame) == 5 and frame["macs"].sum() == totals.macs
    assert frame["source"].str.startswith("model.py:").all()


def test_dump_is_stable_across_captures(mlp_graph: Graph):
    again = capture_recipe("mlp")
    assert again.dump() == mlp_graph.dump()
    assert "linear: float32[128, 1024] = linear(x, p_fc1_weight, p_fc1_bias)" in again.dump()
    assert len(again.dump().splitlines()) == 1 + 1 + 6 + 5 + 1 + 1  # header, input, weights, ops, output, total


def test_recipe_params_reach_the_graph():
    graph = capture_recipe("mlp", batch=4)
    assert graph.tensors[graph.inputs[0]].shape == (4, 256)
    assert graph.ops_of_kind("linear")[0].attrs["M"] == 4
    with pytest.raises(InputError, match="workload.params"):
        capture_recipe("gemm", rows=3)


def test_load_is_deterministic_and_leaves_the_global_rng_alone():
    recipe = load_recipe("mlp")
    state = torch.random.get_rng_state()
    first, second = recipe.module.load(), recipe.module.load()
    assert torch.equal(torch.random.get_rng_state(), state)
    for a, b in zip(first.parameters(), second.parameters()):
        assert torch.equal(a, b)
    assert torch.equal(recipe.module.inputs()[0], recipe.module.inputs()[0])


# --- every kind through the interpreter ---

class Zoo(nn.Module):
    """Touches every kind, plus forms that need decomposition (in-place ReLU, a lifted
    constant, eval-mode dropout) and ones the reference interpreter must get right
    (scalar on the left, alpha, rounding mode, vector @ matrix)."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.proj = nn.Linear(8, 6)
        self.w = nn.Parameter(torch.randn(6, 5, generator=g))
        self.register_buffer("shift", torch.randn(5, generator=g))
        self.drop = nn.Dropout(0.1)
        self.act = nn.ReLU(inplace=True)

    def forward(self, x, v):
        h = self.act(self.drop(self.proj(x)))  # [2, 3, 6]
        h = h @ self.w + self.shift  # [2, 3, 5]
        h = 1 - h * 0.5 / 3
        h = nn.functional.gelu(h, approximate="tanh") - nn.functional.silu(h)
        h = h.transpose(1, 2).contiguous().flatten(1).view(2, 5, 3).permute(0, 2, 1)
        z = torch.bmm(h, h.mT).unsqueeze(1).squeeze(1)  # [2, 3, 3]
        u = torch.matmul(v, self.w) / torch.tensor(2.0)  # [6] @ [6, 5]
        return z.sub(z * 3, alpha=2), u, torch.div(u * 7, 2, rounding_mode="floor")


def test_zoo_runs_like_the_module():
    torch.manual_seed(0)
    module = Zoo().eval()
    g = torch.Generator().manual_seed(3)
    inputs = (torch.randn(2, 3, 8, generator=g), torch.randn(6, generator=g))
    graph = capture(module, *inputs, name="zoo")
    assert_matches_module(graph, module, inputs)
    kinds = {op.kind for op in graph.ops}
    assert kinds == {"linear", "matmul", "add", "sub", "mul", "div", "relu", "gelu", "silu", "reshape", "permute"}
    matvec = [op for op in graph.ops_of_kind("matmul") if graph.tensors[op.inputs[0]].shape == (6,)]
    assert [(op.attrs["M"], op.attrs["N"], op.attrs["K"], op.attrs["batch"]) for op in matvec] == [(1, 5, 6, 1)]
    assert graph.ops_of_kind("linear")[0].attrs == {"M": 6, "N": 6, "K": 8, "batch": 1, "has_bias": True}


def test_addmm_keeps_bias_and_operand_order():
    class AddMm(nn.Module):
        def __init__(self):
            super().__init__()
            g = torch.Generator().manual_seed(0)
            self.b = nn.Parameter(torch.randn(5, generator=g))
            self.w = nn.Parameter(torch.randn(4, 5, generator=g))

        def forward(self, x):
            return torch.addmm(self.b, x, self.w, beta=0.5)

    module, x = AddMm().eval(), torch.randn(3, 4, generator=torch.Generator().manual_seed(1))
    graph = capture(module, x)
    assert_matches_module(graph, module, (x,))
    (op,) = graph.ops
    assert op.kind == "matmul" and op.inputs == ["x", "p_w", "p_b"]
    assert op.attrs == {"M": 3, "N": 5, "K": 4, "batch": 1, "has_bias": True, "beta": 0.5}
    assert op.counts.macs == 3 * 5 * 4 and op.counts.other_ops == 3 * 5


class Counts(nn.Module):  # ops declared as one aten call with attributes (`ATEN_CALLS`)
    def forward(self, x, labels):
        running = torch.cumsum(x, dim=-1)
        counted = torch.cumsum(labels, 0, dtype=torch.float32)
        return running, counted, nn.functional.one_hot(labels, 5)


def test_aten_calls_with_attributes_capture_and_run_as_torch():
    x, labels = torch.randn(3, 4), torch.tensor([4, 0, 2, 2])
    graph = capture(Counts(), x, labels)
    attrs = {op.kind: [] for op in graph.ops}
    for op in graph.ops:
        attrs[op.kind].append(op.attrs)
    assert attrs["cumsum"] == [{"dim": 1, "dtype": None}, {"dim": 0, "dtype": "float32"}]
    assert attrs["one_hot"] == [{"classes": 5}]
    running, counted, hot = graph.run(x, labels)
    assert torch.equal(running, torch.cumsum(x, -1))
    assert counted.dtype == torch.float32 and torch.equal(counted, torch.tensor([4.0, 4.0, 6.0, 8.0]))
    assert hot.dtype == torch.int64 and hot.tolist() == [[0, 0, 0, 0, 1], [1, 0, 0, 0, 0], [0, 0, 1, 0, 0],
                                                           [0, 0, 1, 0, 0]]


# --- errors ---

class CumProd(nn.Module):  # (cumsum and sort are supported since #34's routers)
    def forward(self, x):
        return torch.cumprod(torch.relu(x), 0)  # UNSUPPORTED: cumprod


class KthValue(nn.Module):
    def forward(self, x):
        return torch.kthvalue(x, 2, dim=-1).values  # UNSUPPORTED: kthvalue


@pytest.mark.parametrize("module, aten_op, marker", [
    (CumProd(), "aten.cumprod", "UNSUPPORTED: cumprod"),
    (KthValue(), "aten.kthvalue", "UNSUPPORTED: kthvalue"),
])
def test_unsupported_op_names_the_op_and_the_line(module, aten_op, marker):
    with pytest.raises(UnsupportedOpError) as caught:
        capture(module, torch.randn(4, 4))
    message = str(caught.value)
    assert aten_op in message
    assert f"test_workload.py:{line_of(marker)}" in message
    assert isinstance(caught.value, InputError) and caught.value.field == "workload.op"


def test_unsupported_op_in_a_recipe_names_the_recipe(tmp_path: Path):
    folder = tmp_path / "odd-recipe"  # a hyphen: not an importable package name
    folder.mkdir()
    model = folder / "model.py"
    model.write_text(textwrap.dedent("""\
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x * 2
                return torch.cumprod(y, 1)


        def load():
            return Model().eval()


        def inputs():
            return (torch.ones(2, 3),)
    """))
    with pytest.raises(UnsupportedOpError) as caught:
        capture_recipe(folder)
    message = str(caught.value)
    assert "aten.cumprod" in message and "model.py:8" in message
    assert caught.value.file == str(model.resolve())


def test_missing_recipe_lists_known_recipes():
    assert {"gemm", "mlp"} <= set(list_recipes())
    with pytest.raises(InputError) as caught:
        load_recipe("no_such_model")
    error = caught.value
    assert error.field == "workload.recipe" and error.value == "no_such_model"
    assert error.file == str(RECIPES_DIR)
    assert "gemm" in error.allowed.split(", ") and "mlp" in error.allowed.split(", ")
    assert not isinstance(error, UnsupportedOpError)


def test_model_without_inputs_is_an_input_error(tmp_path: Path):
    (tmp_path / "model.py").write_text("def load():\n    return None\n")
    with pytest.raises(InputError, match="inputs"):
        load_recipe(tmp_path)


def test_source_hash_is_sha256_of_the_file():
    first, second = load_recipe("gemm"), load_recipe(RECIPES_DIR / "gemm" / "model.py")
    expected = hashlib.sha256((RECIPES_DIR / "gemm" / "model.py").read_bytes()).hexdigest()
    assert first.source_hash == second.source_hash == expected
    assert first.name == second.name == "gemm"
    assert first.path == RECIPES_DIR / "gemm" / "model.py"


def test_a_trace_that_keeps_some_values_lets_the_others_go_and_computes_the_same():
    class Chain(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(6, 5), nn.Linear(5, 3)

        def forward(self, x):
            h = torch.relu(self.a(x))
            return self.b(h) + h.sum(-1, keepdim=True), h

    torch.manual_seed(0)
    module, x = Chain().eval(), torch.randn(4, 6)
    graph = capture(module, x, name="chain")
    full = graph.trace(x)
    kept = graph.trace(x, keep=set(graph.outputs))
    assert set(kept) == set(graph.outputs) and len(full) > len(kept)
    assert all(torch.equal(kept[n], full[n]) for n in graph.outputs)
    assert_matches_module(graph, module, (x,))  # run(): the outputs of a trace keeping only them


def test_a_streamed_trace_gives_every_op_value_in_order_and_serves_a_late_question():
    from dse.numerics.run import StreamedReference

    torch.manual_seed(1)
    module = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3)).eval()
    x = torch.randn(2, 6)
    graph = capture(module, x, name="seq")
    full = graph.trace(x)
    streamed = list(graph.stream(x))
    assert [n for n, _ in streamed] == [op.outputs[0] for op in graph.ops]
    assert all(torch.equal(v, full[n]) for n, v in streamed)
    ref = StreamedReference(graph, (x,))
    names = [op.outputs[0] for op in graph.ops]
    assert all(torch.equal(ref[n], full[n]) and torch.equal(ref[n], full[n]) for n in names[1:])  # in order, twice each
    assert torch.equal(ref[names[0]], full[names[0]])  # asked after its turn: a whole trace answers


def test_a_captured_parameter_is_read_in_place_not_copied():
    import numpy as np

    module = nn.Linear(4, 3).eval()
    graph = capture(module, torch.randn(2, 4), name="lin")
    (weight,) = [a for a in graph.weights.values() if a.shape == (3, 4)]
    assert np.shares_memory(weight, module.weight.detach().numpy()) and np.array_equal(weight, module.weight.detach())
