"""Scans of issue #34: recurrences over time steps held as one `scan` op a layer and
direction (not seq_len unrolled copies), lowered as a loop of their step graph: LSTM and GRU
from tiny modules through capture, the frontend steps (checked against PyTorch), the plan,
the lowering and the emulator on goban with 1 and 4 workers (bit-exact on the integer path,
the model within 2% of the emulator); the recurrent weight kept in shared memory across the
steps where it fits, loaded again each step where it does not."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dse.analytical import estimate, summarize
from dse.chips import load_chip
from dse.mapping import Candidate, Mapping
from dse.mapping.params import CandidateArrays
from dse.numerics import emulate_graph
from dse.numerics.run import prepare_recipe
from dse.units.scan import scan_notes
from dse.runner.stages import placed_graph_batch
from dse.workload.capture import UnsupportedOpError, capture
from dse.workload.graph import INTERPRETERS, Op
from emulator import Matmul, Mvin
from tests.test_simple_ops import RECIPE
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


# --- where the recurrent weight lives across the steps (dse.plan.scan.weight_residency) ---

@pytest.fixture(scope="module")
def gru(tmp_path_factory):
    """The GRU of MODULES (6 steps, 16 hidden: W_hh is 48 x 16, three 16 x 16 B tiles), checked."""
    folder = tmp_path_factory.mktemp("residency") / "gru"
    folder.mkdir()
    module, inputs = MODULES["gru"]
    (folder / "model.py").write_text(RECIPE.format(name="gru", module=module, inputs=inputs))
    prep = prepare_recipe(folder)
    assert prep.pipe.passed
    return prep


def _run(prep, chip, mapping):
    """The emulator's report (bit-exact, the model within 2% of it) and the scan's B loads:
    (MVINs into shared banks, MVINs of a step's product, MATMULs of a step reading B in shared memory)."""
    cand = Candidate(chip, mapping)
    rep = emulate_graph(prep.graph, cand, prep.inputs, prep.expected, prep.tolerance, prep.reference_kind)
    assert rep.feasible and rep.verdict.passed and rep.verdict.integer_bit_exact, rep.verdict
    model = summarize(estimate(prep.graph, [cand]), [cand]).iloc[0]
    assert abs(model["latency_cycles"] / rep.cycles - 1) < 0.02, (model["latency_cycles"], rep.cycles)
    first = chip.shared_memory.first_bank_id
    low = rep.lowered
    shared_loads = step_loads = shared_reads = 0
    for core in low.program.cores:
        for ins in core:
            label = low.labels.get(id(ins), "")
            if not label.startswith("gru_l0_scan"):
                continue
            if isinstance(ins, Mvin) and ins.bank >= first and chip.shared_memory.enabled:
                assert " step " not in label  # before the loop
                shared_loads += 1
            elif isinstance(ins, Mvin) and label.endswith(".acc"):
                step_loads += 1
            elif isinstance(ins, Matmul):
                shared_reads += chip.shared_memory.enabled and ins.b >= first
    return rep, (shared_loads, step_loads, shared_reads)


@pytest.mark.parametrize("workers", [1, 4])
def test_the_recurrent_weight_is_loaded_once_where_it_fits(gru, workers):
    """goban: W_hh's three B tiles loaded into shared memory once before the 6 steps and read
    there by each step's three MATMULs; reloaded (the knob), the same outputs, bit for bit,
    each step loading A and the three B tiles into private banks, in more cycles."""
    goban = load_chip("goban")
    kept, (shared, step, reads) = _run(gru, goban, Mapping(workers=workers))
    assert (shared, step, reads) == (3, 6 * 1, 6 * 3)  # a step loads only its A (h quantized)
    again, (shared, step, reads) = _run(gru, goban, Mapping(workers=workers, scan_weights="reloaded"))
    assert (shared, step, reads) == (0, 6 * (1 + 3), 0)
    for name, value in kept.result.outputs.items():
        assert np.array_equal(value, again.result.outputs[name])
    assert kept.cycles < again.cycles
    # the lowering's record and the model's candidate notes: the same words
    (record,) = [o for o in kept.lowered.ops if o.kind == "scan"]
    params = CandidateArrays.from_candidates([Candidate(goban, Mapping(workers=workers))])
    assert record.note == scan_notes(gru.graph, params)[0]
    assert record.note.startswith("scan gru_l0_scan: weight p_rnn_weight_hh_l0_int8 kept in shared memory across "
                                  "its 6 steps (3 B tiles loaded once before the loop); scan gru_l0_scan: state in "
                                  "DRAM between steps")


@pytest.mark.parametrize("chip, why", [
    ("toy", "chip toy has no shared memory"),
    ("goban_8rows", "its B tiles do not fit the shared memory"),  # 128-byte shared banks: no tile fits
])
def test_where_the_weight_does_not_fit_each_step_loads_it(gru, chip, why):
    config = load_chip("goban", {"shared_memory.rows": 8}) if chip == "goban_8rows" else load_chip(chip)
    rep, (shared, step, reads) = _run(gru, config, Mapping())
    (record,) = [o for o in rep.lowered.ops if o.kind == "scan"]
    _, tn, tk = record.tile  # the product's tile: W_hh (48 x 16) in 48/tn x 16/tk B tiles
    assert (shared, step, reads) == (0, 6 * (1 + 48 // tn * (16 // tk)), 0)
    assert "weight p_rnn_weight_hh_l0_int8 loaded into banks again every step (" + why in record.note
    assert record.note == scan_notes(gru.graph, CandidateArrays.from_candidates([Candidate(config, Mapping())]))[0]


@pytest.mark.parametrize("mapping, kept", [
    (Mapping(workers=4, placement="layers", cuts=(3,)), True),  # ranges one after another
    (Mapping(workers=4, placement="pipeline", cuts=(5,), requests=2), False),  # parts at once on the tile
])
def test_a_placed_scan_keeps_its_weight_only_alone_on_the_shared_memory(gru, mapping, kept):
    cand = Candidate(load_chip("goban"), mapping)
    rep = emulate_graph(gru.graph, cand, gru.inputs, gru.expected, gru.tolerance, gru.reference_kind)
    assert rep.feasible and rep.verdict.passed and rep.verdict.integer_bit_exact, rep.verdict
    (model,) = placed_graph_batch(gru.graph, [cand])
    assert abs(model.totals["latency_cycles"] / rep.cycles - 1) < 0.02, (model.totals["latency_cycles"], rep.cycles)
    said = "kept in shared memory" if kept else "loaded into banks again every step (the placement runs parts at once"
    assert f"weight p_rnn_weight_hh_l0_int8 {said}" in model.notes
