"""Capture folds every input-free subgraph (positions, masks, index tables, shape
arithmetic) into constants, and reads split / chunk / unbind items as slices; checked
against PyTorch on hand-written modules."""

from __future__ import annotations

import torch
from torch import nn

from dse.workload.capture import capture, flat_outputs


class Masked(nn.Module):
    """Causal mask, positions and a cumulative index, all from shapes alone."""

    def __init__(self):
        super().__init__()
        self.register_buffer("table", torch.arange(12.0).reshape(3, 4) / 7)

    def forward(self, x):  # x: (b, s, d)
        s = x.shape[1]
        positions = torch.arange(s)
        mask = torch.ones(s, s, dtype=torch.bool).tril()
        scores = x @ x.transpose(1, 2)
        scores = torch.where(mask, scores, torch.full_like(scores, -1e4)).masked_fill(positions[None, None] > 3, -5.0)
        ramp = torch.cumsum(torch.ones(s), 0) + positions.float()
        looked_up = torch.index_select(self.table, 0, positions % 3)
        return scores.softmax(-1) @ x + ramp[None, :, None], looked_up


class Splits(nn.Module):
    def forward(self, x):  # x: (b, s, 3d)
        q, k, v = x.chunk(3, dim=-1)
        a, b = x.split([4, 8], dim=-1)
        first, *_ = x.unbind(1)
        return q * k + v, a.sum(-1), b, first


def test_input_free_ops_are_constants_and_the_graph_matches_pytorch():
    model = Masked().eval()
    x = torch.randn(2, 5, 6, generator=torch.Generator().manual_seed(0))
    graph = capture(model, x, name="masked")
    kinds = {op.kind for op in graph.ops}
    assert not kinds & {"arange", "cumsum", "ones", "full", "index_select", "tril"}, kinds
    values = graph.trace(x)
    for name, want in zip(graph.outputs, flat_outputs(model(x))):
        assert torch.allclose(values[name], want, atol=1e-5), name
    # the folded tensors are graph constants, of their own dtypes (a bool mask stays bool)
    assert any(spec.dtype == "bool" for name, spec in graph.tensors.items() if name in graph.weights)


def test_split_chunk_and_unbind_items_are_slices():
    model = Splits().eval()
    x = torch.randn(2, 3, 12, generator=torch.Generator().manual_seed(1))
    graph = capture(model, x, name="splits")
    assert {"slice", "select"} <= {op.kind for op in graph.ops}
    values = graph.trace(x)
    for name, want in zip(graph.outputs, model(x)):
        assert torch.equal(values[name], want), name


def test_model_outputs_flatten_in_the_graphs_order():
    out = {"logits": torch.ones(1), "extra": (torch.zeros(2), None, [torch.full((1,), 3.0)])}
    assert [t.tolist() for t in flat_outputs(out)] == [[1.0], [0.0, 0.0], [3.0]]


class ManyUnsupported(nn.Module):  # (cumsum and sort are supported since #34's routers)
    def forward(self, x):
        a = torch.cumprod(x, 1)  # FIRST: cumprod
        b = torch.kthvalue(a, 2, dim=-1).values  # FIRST: kthvalue
        return torch.cumprod(x, 0) + b[:, None]  # AGAIN: cumprod


def test_every_unsupported_op_is_reported_at_once_with_counts_and_first_lines():
    import pytest

    from dse.workload.capture import UnsupportedOpError

    with pytest.raises(UnsupportedOpError) as caught:
        capture(ManyUnsupported(), torch.randn(3, 4))
    lines = {text.split("# ")[-1]: i for i, text in enumerate(open(__file__).read().splitlines(), 1) if "# " in text}
    found = {u.op: u for u in caught.value.ops}
    assert set(found) == {"aten.cumprod.default", "aten.kthvalue.default"}, found
    assert found["aten.cumprod.default"].count == 2
    assert found["aten.cumprod.default"].source.endswith(f":{lines['FIRST: cumprod']}")
    assert found["aten.kthvalue.default"].source.endswith(f":{lines['FIRST: kthvalue']}")
    message = str(caught.value)
    assert "2 unsupported ops" in message and "aten.cumprod.default x2, first at" in message and "\n" not in message


UNSUPPORTED_RECIPE = """import torch


class M(torch.nn.Module):
    def forward(self, x):
        a = torch.cumprod(x, 1)
        return torch.kthvalue(a, 2, dim=-1).values[:, None] + torch.cumprod(x, 0)


def load():
    return M()


def inputs():
    return (torch.randn(3, 4),)
"""


def test_recipe_check_reports_unsupported_ops_as_one_line_and_as_json(tmp_path, cli):
    import json

    (tmp_path / "model.py").write_text(UNSUPPORTED_RECIPE)
    code, out, err = cli("recipe", "check", tmp_path, "--no-dump")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "2 unsupported ops: aten.cumprod.default x2, first at model.py:6" in err
    assert "aten.kthvalue.default at model.py:7" in err and "allowed: the " in err
    code, out, err = cli("recipe", "check", tmp_path, "--no-dump", "--json")
    assert code == 2
    error = json.loads(out)["error"]
    assert error["file"] == str(tmp_path / "model.py") and error["field"] == "workload.op"
    assert error["unsupported_ops"] == [
        {"op": "aten.cumprod.default", "count": 2, "source": "model.py:6", "code": "a = torch.cumprod(x, 1)"},
        {"op": "aten.kthvalue.default", "count": 1, "source": "model.py:7",
         "code": "return torch.kthvalue(a, 2, dim=-1).values[:, None] + torch.cumprod(x, 0)"}]
    assert "aten.linear" in error["allowed"].split(", ")


class Activations(nn.Module):
    def forward(self, x):
        return (nn.functional.hardtanh(x, -0.5, 0.7), nn.functional.relu6(x * 4), nn.functional.hardswish(x),
                nn.functional.hardsigmoid(x), nn.functional.leaky_relu(x, 0.2), nn.functional.mish(x),
                torch.clamp(x, min=-0.1), x.clamp(max=0.3))


def test_clamp_family_activations_match_pytorch_bit_for_bit():
    model = Activations().eval()
    x = torch.randn(4, 33, generator=torch.Generator().manual_seed(2)) * 3
    graph = capture(model, x, name="acts")
    assert {"clamp", "hardswish", "hardsigmoid", "leaky_relu", "mish"} <= {op.kind for op in graph.ops}
    values = graph.trace(x)
    for name, want in zip(graph.outputs, model(x)):
        assert torch.equal(values[name], want), name


def test_a_model_whose_forward_raises_is_one_line_naming_the_recipe(tmp_path):
    import pytest

    from dse.errors import InputError
    from dse.frontend import run_pipeline

    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "model.py").write_text(
        "import torch\n\n\nclass M(torch.nn.Module):\n    def forward(self, x):\n        return x @ torch.ones(3, 2)\n\n\n"
        "def load():\n    return M().eval()\n\n\ndef inputs():\n    return (torch.ones(2, 5),)\n")
    with pytest.raises(InputError) as caught:
        run_pipeline(folder)
    message = str(caught.value)
    assert "recipe broken" in message and "forward" in message and "RuntimeError" in message and "\n" not in message


class PadIndex(nn.Module):
    def __init__(self):
        super().__init__()
        self.table = nn.Parameter(torch.randn(7, 3, generator=torch.Generator().manual_seed(3)))
        self.register_buffer("rel", torch.tensor([[0, 6, 2], [3, 3, 1]]))

    def forward(self, x):  # x: (1, 2, 4, 4)
        bias = self.table[self.rel]  # a parameter indexed by a constant table: (2, 3, 3)
        padded = nn.functional.pad(x, (1, 2, 0, 1), value=0.5)
        return padded.sum() + bias.sum(-1), padded


def test_constant_pad_and_index_by_constant_tables_match_pytorch():
    model = PadIndex().eval()
    x = torch.randn(1, 2, 4, 4, generator=torch.Generator().manual_seed(4))
    graph = capture(model, x, name="padindex")
    assert {"pad", "index"} <= {op.kind for op in graph.ops}
    values = graph.trace(x)
    for name, want in zip(graph.outputs, model(x)):
        assert torch.equal(values[name], want), name


class VisionOps(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.GroupNorm(2, 4)

    def forward(self, x):  # x: (1, 4, 5, 6)
        y = self.norm(x)
        up = nn.functional.interpolate(y, scale_factor=2, mode="nearest")
        smooth = nn.functional.interpolate(y, size=(7, 9), mode="bilinear", align_corners=False)
        shifted = torch.roll(y, shifts=(1, -2), dims=(2, 3))
        return up, smooth, shifted, y.amax(dim=(2, 3)), y.amin(dim=1, keepdim=True)


def test_group_norm_upsampling_roll_and_max_min_match_pytorch_bit_for_bit():
    model = VisionOps().eval()
    with torch.no_grad():
        model.norm.weight.uniform_(0.5, 1.5, generator=torch.Generator().manual_seed(5))
    x = torch.randn(1, 4, 5, 6, generator=torch.Generator().manual_seed(6))
    graph = capture(model, x, name="vision")
    assert {"group_norm", "upsample", "roll", "amax", "amin"} <= {op.kind for op in graph.ops}
    values = graph.trace(x)
    for name, want in zip(graph.outputs, model(x)):
        assert torch.equal(values[name], want), name


def test_a_denormal_tensor_gets_a_finite_scale():
    """127 / absmax overflows fp32 for denormal magnitudes (MobileViT has such a tensor):
    they take scale 1, as an all-zero tensor does, and quantize to zero."""
    import numpy as np

    from dse.frontend.quantize import calibrate

    tiny = np.array([[1e-39, -2e-40], [0.0, 3e-40]], dtype=np.float32)
    for axis, granularity in ((None, "tensor"), (0, "channel")):
        scale = calibrate(tiny, axis, granularity)
        assert np.all(np.isfinite(scale.values)) and np.all(scale.values == 1.0)
    normal = calibrate(np.array([0.5, -2.0], dtype=np.float32), None, "tensor")
    assert normal.values[0] == np.float32(127.0 / 2.0)


INDEXING_RECIPE = """import torch


class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(16, 8)
        self.register_buffer("table", torch.tensor([3, 1, 0, 2]))

    def forward(self, x, ids):  # x: (4, 8) float, ids: (4, 3) int64
        picked = torch.gather(x, 1, ids)
        columns = torch.index_select(x, 1, self.table)
        top, where = torch.max(x, dim=1)
        low, at = x.min(dim=-1, keepdim=True)
        rows = self.emb(ids.to(torch.int32))  # embedding with int32 indices
        return picked, columns, top, where, low, at, rows, torch.max(x), x.argmax(-1), torch.relu(rows).sum()


def load():
    torch.manual_seed(0)
    return M().eval()


def inputs():
    g = torch.Generator().manual_seed(0)
    return (torch.randn(4, 8, generator=g), torch.randint(0, 8, (4, 3), generator=g))
"""


def test_gather_index_select_max_min_with_indices_and_int32_embedding_run_bit_exact(tmp_path):
    """gather, index_select, max / min with their indices, argmax, whole-tensor max and an
    embedding read with int32 indices: captured bit for bit against PyTorch, and emulated on
    goban with 1 and 4 workers bit-exact (indices int64, the cast an int64 -> int32 op)."""
    from dse.chips import load_chip
    from dse.mapping import Candidate, Mapping
    from dse.numerics import emulate_graph
    from dse.numerics.run import prepare_recipe

    (tmp_path / "model.py").write_text(INDEXING_RECIPE)
    prep = prepare_recipe(tmp_path)
    assert prep.pipe.passed, [(s.name, s.error) for s in prep.pipe.stages if not s.passed]
    graph = prep.pipe.graphs[0]
    kinds = {op.kind for op in graph.ops}
    assert {"gather", "index", "amax", "argmax", "amin", "argmin", "cast", "embedding"} <= kinds, kinds
    assert graph.tensors[graph.outputs[3]].dtype == "int64"
    values = graph.trace(*prep.inputs)
    for name, want in zip(graph.outputs, prep.expected):
        assert torch.equal(values[name], want), name
    for workers in (1, 4):
        cand = Candidate(load_chip("goban"), Mapping(workers=workers))
        rep = emulate_graph(prep.graph, cand, prep.inputs, prep.expected, prep.tolerance, prep.reference_kind)
        assert rep.feasible and rep.verdict.passed and rep.verdict.max_abs_error == 0, rep.verdict


def test_a_model_export_cannot_capture_is_one_line_naming_the_source_line(tmp_path, cli):
    """Data-dependent control flow: torch.export fails (and would print partial graphs to
    stderr); dse says so in one line with the model's line, exit 2."""
    (tmp_path / "model.py").write_text(
        "import torch\n\n\nclass M(torch.nn.Module):\n    def forward(self, x):\n        if x.sum() > 0:\n"
        "            return x * 2\n        return x - 1\n\n\ndef load():\n    return M()\n\n\n"
        "def inputs():\n    return (torch.ones(4),)\n")
    code, out, err = cli("recipe", "check", tmp_path, "--no-dump")
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert "field 'workload.capture'" in err and "at model.py:6 ('if x.sum() > 0:')" in err
