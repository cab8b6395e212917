"""Scans of issue #34: recurrences over time steps held as one `scan` op a layer and
direction (not seq_len unrolled copies), lowered as a loop of their step graph: LSTM and GRU
from tiny modules through capture, the frontend steps (checked against PyTorch), the plan,
the lowering and the emulator on goban with 1 and 4 workers (bit-exact on the integer path,
the model within 2% of the emulator)."""

from __future__ import annotations

import pytest
import torch

from dse.workload.capture import UnsupportedOpError, capture
from dse.workload.graph import INTERPRETERS, Op
from tests.test_simple_ops import checked as _checked

MODULES = {
    "gru": ("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(8, 16, batch_first=True)
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        y, _ = self.rnn(x)
        return self.head(y)
""", "torch.randn(2, 6, 8, generator=g)"),
    "lstm": ("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(8, 16, num_layers=2, bidirectional=True)
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        y, _ = self.rnn(x)
        return self.head(y)
""", "torch.randn(5, 3, 8, generator=g)"),
}


def checked(tmp_path, name, steps=None):
    return _checked(tmp_path, name, MODULES, steps)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_a_recurrence_is_one_scan_op_on_the_matrix_ball_per_step(tmp_path, name):
    prep, rep = checked(tmp_path, name)
    scans = [op for op in prep.graph.ops if op.kind == "scan"]
    assert len(scans) == (1 if name == "gru" else 4)  # one a layer and direction, whatever T
    assert all("h_scale" in op.attrs for op in scans)  # the recurrent product quantized
    assert {r.how for r in rep.lowered.ops if r.kind == "scan"} == {"scan"}
    # each step's product is a matrix-Ball op: T of them a scan (T = 6 for the GRU, 5 for the LSTM)
    steps = 6 if name == "gru" else 5
    labels = set(rep.lowered.labels.values())
    for op in scans:
        assert sum(f"{op.name} step " in label and label.endswith(".acc") for label in labels) == steps


def test_the_float_scan_is_within_1e_6_of_pytorch():
    torch.manual_seed(0)
    gru = torch.nn.GRU(8, 16, batch_first=True).eval()
    lstm = torch.nn.LSTM(8, 16, num_layers=2, bidirectional=True).eval()
    x = torch.randn(2, 7, 8)
    for module, inp in ((gru, x), (lstm, x.transpose(0, 1).contiguous())):
        class Wrap(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = module

            def forward(self, x):
                return self.m(x)[0]

        graph = capture(Wrap().eval(), inp)
        assert sum(op.kind == "scan" for op in graph.ops) == (1 if module is gru else 4)
        want = module(inp)[0]
        got = graph.run(inp)[0]
        # the cells are torch's own ops on the same views; the products' last bits depend on the
        # GEMM kernel's path (the weights' alignment: a graph's weights come from numpy), and
        # torch's CPU LSTM may run oneDNN's fused kernel
        assert (got - want).abs().max().item() < 1e-6


def test_an_lstm_cell_by_hand():
    """One LSTM step of one unit with hand-picked gates: i = f = o = sigmoid(0) = 0.5,
    g = tanh(0) = 0, c' = 0.5 c, h' = 0.5 tanh(0.5 c)."""
    cell = Op("c", "rnn_cell", [], [], {"cell": "lstm", "hidden": 1}, "", None)
    zeros = torch.zeros(1, 4)
    s = torch.tensor([[0.3, 2.0]])  # h, c
    out = INTERPRETERS["rnn_cell"](cell, [zeros, zeros, s])
    assert torch.allclose(out, torch.tensor([[0.5 * torch.tanh(torch.tensor(1.0)).item(), 1.0]]))


def test_a_state_read_by_the_model_is_refused_by_name():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = torch.nn.LSTM(4, 4)

        def forward(self, x):
            y, (h, c) = self.rnn(x)
            return y + c

    with pytest.raises(UnsupportedOpError, match="h_n / c_n of lstm.input"):
        capture(M().eval(), torch.randn(3, 1, 4))


LOOPS = {
    # a selective-scan-like recurrence written as a Python loop: export unrolls it, reroll finds it
    "ssm_loop": ("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.decay = nn.Linear(8, 8)
        self.inp = nn.Linear(8, 8)
        self.out = nn.Linear(8, 4)

    def forward(self, x):
        a = torch.sigmoid(self.decay(x))          # [B, T, 8]
        b = self.inp(x)
        state = torch.zeros(x.shape[0], 8)
        ys = []
        for t in range(x.shape[1]):
            state = a[:, t] * state + b[:, t]
            ys.append(torch.tanh(state))
        return self.out(torch.stack(ys, dim=1))
""", "torch.randn(2, 6, 8, generator=g)"),
}


def test_an_unrolled_loop_is_rerolled_into_one_scan_and_emulated(tmp_path):
    prep, rep = _checked(tmp_path, "ssm_loop", LOOPS, None)
    scans = [op for op in prep.graph.ops if op.kind == "scan"]
    assert len(scans) == 1 and scans[0].attrs["steps"] == 6
    assert not any(op.kind == "select" for op in prep.graph.ops)  # no per-step copies left
    assert {r.how for r in rep.lowered.ops if r.kind == "scan"} == {"scan"}


def _loop_module(steps: int, read_state: bool):
    class M(torch.nn.Module):
        def forward(self, a, b):
            state = torch.zeros(2, 4)
            ys = []
            for t in range(steps):
                state = a[:, t] * state + b[:, t]
                ys.append(state * 2)
            out = torch.stack(ys, dim=1)
            return out + state.unsqueeze(1) if read_state else out
    return M().eval()


@pytest.mark.parametrize("steps, read_state, scans", [(5, False, 1), (2, False, 0), (5, True, 0)])
def test_reroll_by_hand(steps, read_state, scans):
    """Five steps: one scan op over them, the same values as the unrolled loop; two steps (too
    few to tell a loop), or a last state read after the loop: left as captured."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.rand(2, steps, 4, generator=g), torch.randn(2, steps, 4, generator=g)
    module = _loop_module(steps, read_state)
    graph = capture(module, a, b)
    assert sum(op.kind == "scan" for op in graph.ops) == scans
    assert torch.allclose(graph.run(a, b)[0], module(a, b), atol=0, rtol=0)
