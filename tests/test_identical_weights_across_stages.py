"""Identical read-only tensors bound across the stages of a staged workload (#32): two
stages (two recipes) built from the same seeded Linear and gain read byte-identical
weights; the staged lowering places each once (`Dram.bind_content`: by shape, dtype and
bytes) and the model counts it once (`bound_across_stages`, `bound_constants`), the
footprints equal. Before/after by turning the binding off in this process (no content
ever matches)."""

from __future__ import annotations

import numpy as np
import pytest

MODEL = '''"""A seeded Linear and gain: {body}."""

import torch
from torch import nn


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)
        self.g = nn.Parameter(torch.rand(16) + 0.5)

    def forward(self, x):
        return {body}


def load():
    torch.manual_seed(0)
    return M().eval()


def inputs():
    return (torch.randn(16, 16, generator=torch.Generator().manual_seed(1)),)
'''


def measured(folder, monkeypatch, bind: bool) -> dict:
    from dse.analytical import placed
    from dse.analytical.placed import bound_across_stages, estimate_placed
    from dse.chips import load_chip
    from dse.mapping import Candidate, Mapping
    from dse.numerics.run import StageWork, emulate_placed, prepare_recipe
    from dse.plan import memory
    from dse.plan.graph_plan import dram_footprint

    with monkeypatch.context() as patch:
        patch.setenv("DSE_CACHE_DIR", "off")
        if not bind:  # no two arrays' contents ever match: every stage places its own
            never_equal = lambda array: (object(),)  # noqa: E731
            patch.setattr(memory, "content_key", never_equal)  # the lowering's
            patch.setattr(placed, "content_key", never_equal)  # the model's
        preps = [prepare_recipe(str(folder / name), {}) for name in ("prefill", "decode")]
        stages = [("prefill", preps[0].graph), ("decode", preps[1].graph)]
        cand = Candidate(load_chip("toy"), Mapping(policy="framework", double_buffer=False, workers=1))
        totals, _ = estimate_placed(stages, [cand])
        graphs = [g for _, g in stages]
        footprint = sum(dram_footprint(g) for g in graphs) - bound_across_stages(graphs)
        rep = emulate_placed([StageWork(role, p.graph, p.inputs, p.expected, p.tolerance, p.reference_kind)
                              for (role, _), p in zip(stages, preps)], cand)
    return {"model": footprint + float(totals["workspace_bytes"].iloc[0]), "emulator": rep.result.dram.size,
            "weights": [{n: np.asarray(w).tobytes() for n, w in g.weights.items()} for g in graphs],
            "verdict": rep.verdict, "outputs": {k: np.asarray(v).copy() for k, v in rep.result.outputs.items()}}


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    folder = tmp_path_factory.mktemp("stages")
    for name, body in (("prefill", "self.fc(x) * self.g"), ("decode", "torch.relu(self.fc(x)) * self.g")):
        (folder / name).mkdir()
        (folder / name / "model.py").write_text(MODEL.format(body=body))
    with pytest.MonkeyPatch.context() as patch:
        return measured(folder, patch, bind=False), measured(folder, patch, bind=True)


def test_the_stages_read_byte_identical_weights(staged):
    before, _ = staged
    prefill, decode = before["weights"]
    assert sorted(prefill) == sorted(decode) == ["p_fc_bias_int32", "p_fc_weight_kn_int8", "p_g"]
    assert all(prefill[n] == decode[n] for n in prefill)


def test_weights_shared_by_two_stages_are_placed_and_counted_once(staged):
    before, after = staged
    # Placed once instead of once per stage: the Linear's blocked int8 copy (16 x 16 = 256 B,
    # both stages' tiles 16 x 16 x 16), its bias replicate (1 x 16 x 16 int32 = 1024 B) and
    # the gain (16 float32 = 64 B): 1344 B, by the emulator's image and by the model alike.
    assert before["emulator"] - after["emulator"] == 256 + 1024 + 64
    assert before["model"] == before["emulator"] and after["model"] == after["emulator"]


def test_the_bound_stages_are_still_bit_exact(staged):
    before, after = staged
    assert after["verdict"].integer_bit_exact and after["verdict"].passed
    assert before["outputs"].keys() == after["outputs"].keys()
    for name in after["outputs"]:
        assert np.array_equal(before["outputs"][name].view(np.uint8), after["outputs"][name].view(np.uint8))
