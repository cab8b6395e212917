"""Identical read-only payloads bound to one copy: a Linear applied twice is permuted and
quantized once per use into byte-identical int8 tensors; the frontend keeps one (by content),
the lowering lays its blocked copy out once per layout (`Dram.constant`) and the model counts it once
(`dse.units.matrix.bound_bytes`). Before/after by turning the binding off in this process."""

from __future__ import annotations

import numpy as np
import pytest

MODEL = '''"""One Linear applied twice: y = fc(relu(fc(x)))."""

import torch
from torch import nn


class Twice(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.fc = nn.Linear(d, d, bias=False)

    def forward(self, x):
        return self.fc(torch.relu(self.fc(x)))


def load(d: int = 16):
    torch.manual_seed(0)
    return Twice(d).eval()


def inputs(d: int = 16):
    return (torch.randn(16, d, generator=torch.Generator().manual_seed(1)),)
'''


def measured(folder, monkeypatch, bind: bool) -> dict:
    """The twice-applied Linear through its frontend steps, the model and the emulator, with
    the binding on or off (off: as before it existed)."""
    from dse.analytical.estimate import estimate, summarize
    from dse.chips import load_chip
    from dse.frontend import rewrite
    from dse.mapping import Candidate, Mapping
    from dse.numerics.run import emulate_graph, prepare_recipe
    from dse.plan import memory
    from dse.plan.graph_plan import dram_footprint
    from dse.ppa.assess import assess_candidates
    from dse.units import matrix

    with monkeypatch.context() as patch:
        patch.setenv("DSE_CACHE_DIR", "off")
        if not bind:
            patch.setattr(rewrite.Rewriter, "_identical_weights", lambda self, read: {})
            patch.setattr(memory.Dram, "constant", lambda self, key, array, name="": self.blob(array, name))
            patch.setattr(matrix, "bound_bytes", lambda cost, plan, plans, act: 0)
        prep = prepare_recipe(str(folder), {})
        graph = prep.graph
        cand = Candidate(load_chip("toy"), Mapping(policy="framework", double_buffer=False, workers=1))
        (model,) = summarize(estimate(graph, [cand]), [cand]).to_dict("records")
        assess_candidates([model], [cand], [float(dram_footprint(graph))], {})
        rep = emulate_graph(graph, cand, prep.inputs, prep.expected, prep.tolerance, prep.reference_kind)
    counters = rep.result.counters
    return {"weights": {n: w.tobytes() for n, w in graph.weights.items()},
            "model_footprint": model["dram_footprint_bytes"], "model_dma": model["dma_bytes"],
            "emulator_footprint": rep.result.dram.size,
            "emulator_dma": counters.total("dma_bytes_in") + counters.total("dma_bytes_out"),
            "verdict": rep.verdict, "outputs": {k: np.asarray(v).copy() for k, v in rep.result.outputs.items()}}


@pytest.fixture(scope="module")
def twice(tmp_path_factory):
    folder = tmp_path_factory.mktemp("twice")
    (folder / "model.py").write_text(MODEL)
    with pytest.MonkeyPatch.context() as patch:
        return measured(folder, patch, bind=False), measured(folder, patch, bind=True)


def test_a_linear_applied_twice_holds_one_int8_weight(twice):
    before, after = twice
    # Permuted and quantized once per use: two names, the same 16 x 16 int8 bytes.
    assert sorted(before["weights"]) == ["p_fc_weight_kn_1_int8", "p_fc_weight_kn_int8"]
    assert before["weights"]["p_fc_weight_kn_int8"] == before["weights"]["p_fc_weight_kn_1_int8"]
    assert list(after["weights"]) == ["p_fc_weight_kn_int8"]
    assert after["weights"]["p_fc_weight_kn_int8"] == before["weights"]["p_fc_weight_kn_int8"]


def test_the_blocked_weight_is_laid_out_and_counted_once_by_model_and_emulator(twice):
    before, after = twice
    # The DRAM image holds the weight's blocked copy (16 x 16 int8, one 16 x 16 tile: 256 B,
    # 64-byte aligned) once instead of once per use; the model foresees the image exactly.
    assert before["emulator_footprint"] - after["emulator_footprint"] == 16 * 16
    assert before["model_footprint"] == before["emulator_footprint"]
    assert after["model_footprint"] == after["emulator_footprint"]
    # Each use still moves its B tile into the banks (freed between the two products): the
    # DMA traffic stays, the model's equal to the emulator's.
    assert after["emulator_dma"] == before["emulator_dma"] == after["model_dma"] == before["model_dma"]


def test_the_bound_copy_is_still_bit_exact(twice):
    before, after = twice
    assert after["verdict"].integer_bit_exact and after["verdict"].passed
    assert before["outputs"].keys() == after["outputs"].keys()
    for name in after["outputs"]:
        assert np.array_equal(before["outputs"][name].view(np.uint8), after["outputs"][name].view(np.uint8))
