"""The simpler ops of issue #34, each from a tiny module through capture, the frontend
steps (checked against PyTorch), the plan, the lowering and the emulator on goban with 1
and 4 workers (bit-exact on the integer path, the model within 2% of the emulator):
`repeat`, uneven adaptive average pooling, `linalg_vector_norm` / `normalize`, a
parameter-only subgraph with a batch norm of no running statistics (folded to a constant
weight) and conv3d (im2col and a GEMM on the matrix Ball, as conv2d)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dse.analytical import estimate, summarize
from dse.chips import load_chip
from dse.mapping import Candidate, Mapping
from dse.numerics import emulate_graph
from dse.numerics.run import prepare_recipe
from dse.workload.graph import INTERPRETERS, Op

MODULES = {
    "repeat": ("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return self.fc(x.repeat(1, 3, 1))
""", "torch.randn(1, 4, 8, generator=g)"),
    "adaptive_pool": ("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.pool = nn.AdaptiveAvgPool2d((6, 6))  # 13 x 13 -> 6 x 6: windows of 3 and 4, overlapping
        self.fc = nn.Linear(288, 4)

    def forward(self, x):
        return self.fc(self.pool(self.conv(x)).flatten(1))
""", "torch.randn(1, 3, 15, 15, generator=g)"),
    "normalize": ("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return nn.functional.normalize(self.fc(x), dim=-1) * torch.linalg.vector_norm(x, dim=-1, keepdim=True)
""", "torch.randn(1, 4, 8, generator=g)"),
    "standardized_weight": ("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(8, 4, 3, 3))
        self.gain = nn.Parameter(torch.rand(8) + 0.5)

    def forward(self, x):
        w = nn.functional.batch_norm(self.weight.reshape(1, 8, -1), None, None, weight=self.gain * 0.5,
                                     training=True, momentum=0.0, eps=1e-5).reshape_as(self.weight)
        return nn.functional.conv2d(x, w, padding=1)
""", "torch.randn(1, 4, 8, 8, generator=g)"),
    "conv3d": ("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv3d(3, 8, 3, padding=1, stride=(1, 2, 2))

    def forward(self, x):
        return torch.relu(self.conv(x))
""", "torch.randn(1, 3, 4, 8, 8, generator=g)"),
}

RECIPE = '''"""{name}: a tiny module."""
import torch
from torch import nn
{module}

def load():
    torch.manual_seed(0)
    return M().eval()


def inputs():
    g = torch.Generator().manual_seed(1)
    return ({inputs},)
'''


def checked(tmp_path, name, modules=None, steps=None):
    """The recipe checked (each stage against PyTorch, a quantized stage), and emulated on
    goban with 1 and 4 workers: bit-exact, the model within 2%. The prepared recipe and the
    emulator's report with 1 worker."""
    module, inputs = (modules or MODULES)[name]
    folder = tmp_path / name
    folder.mkdir()
    (folder / "model.py").write_text(RECIPE.format(name=name, module=module, inputs=inputs))
    if steps:
        (folder / "steps.toml").write_text("".join(f'[[step]]\nname = "{step}"\n' for step in steps))
    prep = prepare_recipe(folder)
    assert prep.pipe.passed, [(s.name, s.error) for s in prep.pipe.stages if not s.passed]
    assert any(s.quantized for s in prep.pipe.stages)
    reports = {}
    for workers in (1, 4):
        cand = Candidate(load_chip("goban"), Mapping(workers=workers))
        rep = emulate_graph(prep.graph, cand, prep.inputs, prep.expected, prep.tolerance, prep.reference_kind)
        assert rep.feasible, rep.reason
        assert rep.verdict.passed and rep.verdict.integer_bit_exact, rep.verdict
        model = summarize(estimate(prep.graph, [cand]), [cand]).iloc[0]
        assert abs(model["latency_cycles"] / rep.cycles - 1) < 0.02, (workers, model["latency_cycles"], rep.cycles)
        reports[workers] = rep
    return prep, reports[1]


@pytest.mark.parametrize("name, kind", [("repeat", "repeat"), ("adaptive_pool", "adaptive_avg_pool2d"),
                                        ("normalize", "vector_norm")])
def test_a_core_op_checks_and_emulates(tmp_path, name, kind):
    prep, rep = checked(tmp_path, name)
    ops = [op for op in prep.graph.ops if op.kind == kind]
    assert ops and {r.how for r in rep.lowered.ops if r.kind == kind} == {"core"}


def test_the_new_ops_by_hand():
    x = torch.arange(25.0).reshape(1, 1, 5, 5)
    pool = Op("p", "adaptive_avg_pool2d", ["x"], ["y"], {"output_size": [3, 3]}, "", None)
    y = INTERPRETERS["adaptive_avg_pool2d"](pool, [x])
    # rows and columns in windows [0, 2), [1, 4), [3, 5): the middle one is 3 wide
    assert y[0, 0, 0, 0].item() == (0 + 1 + 5 + 6) / 4 and y[0, 0, 1, 1].item() == 12.0
    norm = Op("n", "vector_norm", ["x"], ["y"], {"ord": 2.0, "dims": [1], "keepdim": False}, "", None)
    assert INTERPRETERS["vector_norm"](norm, [torch.tensor([[3.0, 4.0], [5.0, 12.0]])]).tolist() == [5.0, 13.0]
    repeat = Op("r", "repeat", ["x"], ["y"], {"repeats": [2, 1]}, "", None)
    assert INTERPRETERS["repeat"](repeat, [torch.tensor([[1, 2]])]).tolist() == [[1, 2], [1, 2]]


def test_a_weight_standardised_by_a_batch_norm_folds_to_a_constant(tmp_path):
    """NF-Nets' scaled weight standardisation: the batch norm over the weight (no running
    statistics), the gain multiplied in and the reshape are one constant weight."""
    prep, rep = checked(tmp_path, "standardized_weight")
    captured = prep.pipe.graphs[0]
    assert [op.kind for op in captured.ops] == ["conv2d"]
    torch.manual_seed(0)
    weight, gain = torch.randn(8, 4, 3, 3), torch.rand(8) + 0.5
    rows = weight.reshape(8, -1).double()
    want = (rows - rows.mean(1, keepdim=True)) / torch.sqrt(rows.var(1, unbiased=False, keepdim=True) + 1e-5)
    want = (want * (gain.double() * 0.5)[:, None]).reshape(8, 4, 3, 3).numpy()
    got = captured.weights[captured.ops[0].inputs[1]]
    assert np.allclose(got, want, rtol=1e-5, atol=1e-6)


def test_conv3d_runs_as_im2col_and_a_gemm_on_the_matrix_ball(tmp_path):
    prep, rep = checked(tmp_path, "conv3d")
    conv = next(op for op in prep.graph.ops if op.kind == "conv3d")
    assert conv.attrs["layout"] == "NDHWC" and conv.attrs["weight_layout"] == "DHWIO"
    assert (conv.attrs["M"], conv.attrs["N"], conv.attrs["K"]) == (4 * 4 * 4, 8, 27 * 3)  # positions, channels, taps x C
    assert prep.graph.tensors[conv.inputs[0]].dtype == "int8"
    assert {r.how for r in rep.lowered.ops if r.kind == "conv3d"} == {"matrix"}
    # stored channels-last (mapping.channels_last), the region's 5-D conversions are views
    cand = Candidate(load_chip("goban"), Mapping(channels_last=True))
    stored = emulate_graph(prep.graph, cand, prep.inputs, prep.expected, prep.tolerance, prep.reference_kind)
    assert stored.verdict.passed and stored.verdict.integer_bit_exact, stored.verdict
    assert {r.how for r in stored.lowered.ops if r.kind == "permute"} == {"view"} and stored.cycles < rep.cycles
