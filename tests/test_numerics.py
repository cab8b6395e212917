"""Every shipped recipe, lowered and emulated on toy, pebble and goban (1 and 4 workers):
the integer path bit-exact against the quantized PyTorch reference, the outputs within
the declared tolerance of the float model; the unmodified-graph check; the CLI."""

from __future__ import annotations

import json

import pytest

from dse.chips import load_chip
from dse.frontend import run_pipeline
from dse.mapping import Candidate, Mapping
from dse.numerics import emulate_graph, emulate_recipe
from dse.workload.recipes import instantiate, load_recipe

SMALL = {
    "gemm": dict(m=32, n=48, k=40),
    "mlp": dict(batch=8),
    "lenet5": dict(batch=1),
    "resnet_block": dict(channels=16, size=8),
    "temporal_conv": dict(length=32, mels=16, channels=16, out_channels=16),
    "vit_block": dict(tokens=17, dim=32, heads=2, mlp_ratio=2),
    "llama_decode": dict(past=15, vocab=64, dim=32, layers=1, heads=2, kv_heads=1),
    "llama_prefill": dict(seq=16, vocab=64, dim=32, layers=1, heads=2, kv_heads=1),
    "resnet18": dict(size=16, batch=1, classes=10),
}
TARGETS = [("toy", 1), ("pebble", 1), ("goban", 1), ("goban", 4)]


@pytest.mark.parametrize("recipe", sorted(SMALL))
def test_recipe_bit_exact_on_every_chip(recipe):
    params = SMALL[recipe]
    pipe = run_pipeline(recipe, params)
    assert pipe.passed
    module, inputs = instantiate(load_recipe(recipe), **params)
    tolerance = max(s.tolerance for s in pipe.stages)
    float_graph = next(g for s, g in reversed(list(zip(pipe.stages, pipe.graphs))) if not s.quantized)
    ref = float_graph.trace(*inputs)
    expected = [ref[n] for n in float_graph.outputs]
    cycles = {}
    for chip_name, workers in TARGETS:
        chip = load_chip(chip_name)
        rep = emulate_graph(pipe.graph, Candidate(chip, Mapping(workers=workers, split="cols")), inputs, expected,
                            tolerance)
        assert rep.feasible, rep.reason
        v = rep.verdict
        assert v.integer_bit_exact and v.integer_tensors > 0, (chip_name, workers, v.first_differing_op)
        assert v.outputs_bit_exact, (chip_name, workers, v.first_differing_op)
        assert v.first_differing_op is None
        assert v.outputs_within_tolerance and v.max_rel_error <= tolerance, (chip_name, v.max_rel_error)
        assert v.passed
        assert rep.cycles > 0 and 0 < rep.peak_sram_bytes <= chip.private_sram_bytes
        cycles[(chip_name, workers)] = rep.cycles
    assert cycles[("goban", 4)] <= cycles[("goban", 1)] * 1.01


def test_unmodified_graph_check_and_report():
    rep = emulate_recipe("mlp", load_chip("toy"), Mapping(policy="framework"), SMALL["mlp"], check_unmodified=True)
    u = rep.verdict.unmodified
    assert rep.verdict.passed and u["passed"] is True and u["first_differing_op"] is None and u["blame"] is None
    assert u["max_abs_error"] <= u["tolerance"] * 1e-3 and [o["part"] for o in u["outputs"]] == ["linear_2"]
    d = rep.to_dict()
    assert d["numerics"]["integer_bit_exact"] and d["cycles"] == rep.cycles > 0
    assert [o["how"] for o in d["ops"]].count("matrix") == 3


def test_cli_emulate_json(cli):
    code, out, err = cli("emulate", "--chip", "goban", "--recipe", "gemm", "--param", "m=32", "--param", "n=48",
                         "--param", "k=40", "--workers", "4", "--mapping", "framework", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["feasible"] and d["numerics"]["passed"] and d["numerics"]["integer_bit_exact"]
    assert d["mapping"]["workers"] == 4 and d["mapping"]["policy"] == "framework"
    assert d["cycles"] > 0 and d["peak_sram_bytes"] > 0 and len(d["counters"]["instructions"]) == 4


def test_cli_emulate_text_and_errors(cli):
    code, out, _ = cli("emulate", "--chip", "toy", "--recipe", "gemm", "--param", "m=16", "--param", "n=16",
                       "--param", "k=16")
    assert code == 0 and "emulated cycles" in out and "bit-exact" in out
    code, _, err = cli("emulate", "--chip", "nochip", "--recipe", "gemm")
    assert code == 2 and "field 'chip'" in err and len(err.strip().splitlines()) == 1
    code, _, err = cli("emulate", "--chip", "toy", "--recipe", "gemm", "--workers", "2")
    assert code == 2 and "--workers" in err
    code, _, err = cli("emulate", "--chip", "toy", "--recipe", "no_such_recipe")
    assert code == 2 and len(err.strip().splitlines()) == 1
    code, out, _ = cli("emulate", "--chip", "toy", "--recipe", "gemm", "--set", "banks.count=4", "--param", "m=32",
                       "--param", "n=48", "--param", "k=40")
    assert code == 3 and "infeasible" in out and "bank budget" in out


def test_cli_emulate_matmul_still_parses(cli):
    code, out, _ = cli("emulate-matmul", "--size", "32", "32", "32", "--tile", "16", "16", "16", "--mode", "serial")
    assert code == 0 and "matches numpy" in out


USER_MODEL = '''"""A user's model: two linears with a ReLU."""
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(24, 40)
        self.b = nn.Linear(40, 8)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def load(rows: int = 5) -> Net:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return Net().eval()


def inputs(rows: int = 5):
    return (torch.randn(rows, 24, generator=torch.Generator().manual_seed(1)),)
'''


def test_users_own_model_folder(cli, tmp_path):
    folder = tmp_path / "mynet"
    folder.mkdir()
    (folder / "model.py").write_text(USER_MODEL)
    code, out, err = cli("emulate", "--chip", "goban", "--recipe", folder, "--workers", "4", "--split", "cols",
                         "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["numerics"]["integer_bit_exact"] and d["numerics"]["passed"]
    assert [o["how"] for o in d["ops"]].count("matrix") == 2


def test_cli_emulate_temporal_spans(cli):
    code, out, err = cli("emulate", "--chip", "goban", "--recipe", "temporal_conv", "--param", "length=40",
                         "--param", "mels=16", "--param", "channels=16", "--param", "out_channels=16",
                         "--workers", "4", "--partition", "spans", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["numerics"]["passed"] and d["numerics"]["outputs_bit_exact"] and d["numerics"]["integer_bit_exact"]
    assert d["ops"][0] == {"spans": [[0, 10], [10, 20], [20, 30], [30, 40]]}
    assert len(d["counters"]["peak_allocated_bytes"]) == 4  # the private SRAM of every worker
    code, out, _ = cli("emulate", "--chip", "goban", "--recipe", "gemm", "--workers", "4", "--partition", "spans")
    assert code == 3 and "no temporal axis" in out


def test_max_error_in_slices_is_the_whole_tensors(monkeypatch):
    import numpy as np

    from dse import numerics

    monkeypatch.setattr(numerics, "ERR_CHUNK", 3)  # slices of 3 elements: every case crosses slices
    want = np.array([[1.0, 2.0, np.inf, -4.0], [5.0, 6.0, 7.0, 8.0]], dtype=np.float32)
    assert numerics._err(want.copy(), want) == 0.0  # equal values, infinity included
    got = want.copy()
    got[1, 3] = 8.5  # the last slice
    got[0, 1] = 1.75
    assert numerics._err(got, want) == 0.5
    assert numerics._err(got[:, ::2], want[:, ::2]) == 0.0  # a strided view: the elements it holds
    got[0, 0] = np.nan
    assert numerics._err(got, want) == float("inf")
    assert numerics._err(np.zeros(0, np.int8), np.zeros(0, np.int8)) == 0.0


def test_compare_gives_equal_bits_the_error_the_slices_give():
    """A bit-equal tensor skips `_err`'s float64 pass: its error must still be what `_err`
    says (0, or inf where a NaN sits), and a differing one is measured."""
    import numpy as np

    from dse import numerics

    pipe = run_pipeline("mlp", SMALL["mlp"])
    graph = pipe.graph
    reference = {k: v.numpy().copy() for k, v in graph.trace(*pipe.inputs).items()}
    got = {k: v.copy() for k, v in reference.items()}
    floats = [op.outputs[0] for op in graph.ops if reference[op.outputs[0]].dtype.kind == "f"]
    ints = [op.outputs[0] for op in graph.ops if reference[op.outputs[0]].dtype.kind == "i"]
    assert floats and len(ints) >= 2
    got[floats[0]].reshape(-1)[0] = reference[floats[0]].reshape(-1)[0] = np.nan  # equal bits, a NaN
    got[ints[1]].reshape(-1)[0] += 3  # differs

    class Lowered:
        fused = frozenset()

        def read(self, image, name, copy=True):
            return got[name]

    v = numerics.compare(graph, Lowered(), None, reference, None, 1e-5, "quantized")
    errors = {c.name: c.max_abs_error for c in v.ops}
    by_name = {op.outputs[0]: op.name for op in graph.ops}
    for name in (floats[0], ints[0], ints[1]):
        assert errors[by_name[name]] == numerics._err(got[name], reference[name])
    assert errors[by_name[floats[0]]] == float("inf") and errors[by_name[ints[0]]] == 0.0
    assert errors[by_name[ints[1]]] == 3.0 and not v.integer_bit_exact
    assert v.first_differing_op == by_name[ints[1]]  # equal bits with a NaN are equal


def test_emulating_on_the_lowered_image_itself_changes_nothing_but_the_rerun():
    pipe = run_pipeline("mlp", SMALL["mlp"])
    cand = Candidate(load_chip("goban"), Mapping(workers=4))
    kept = emulate_graph(pipe.graph, cand, list(pipe.inputs))
    given = emulate_graph(pipe.graph, cand, list(pipe.inputs), keep_image=False)
    assert given.verdict.passed and given.verdict.integer_bit_exact
    assert given.verdict.to_dict(ops=True) == kept.verdict.to_dict(ops=True)
    assert (given.cycles, given.counters) == (kept.cycles, kept.counters)
    assert kept.rerun is not None and given.rerun is None
    assert given.result.dram is given.lowered.image  # the run wrote the lowered image


def _bits_equal(a, b) -> bool:
    import numpy as np

    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def test_float_stand_in_is_the_stage_checks_own_outputs_fresh_or_cached():
    """After last-token selection the float reference is the last float stage's outputs as
    its check computed them (kept, not run again): the very bits `Graph.run` gives, also once
    the pipeline is served from the graph cache."""
    from dse.numerics.run import prepare_recipe

    params = SMALL["llama_prefill"]
    for served in (False, True):  # the first run fills the cache, the second is served from it
        prep = prepare_recipe("llama_prefill", params)
        pipe = prep.pipe
        index = max(i for i, s in enumerate(pipe.stages) if not s.quantized)
        assert pipe.stages[index].name == "permute" and pipe.stage_outputs(index) is not None
        assert pipe.stage_outputs(0) is None  # the import stage's outputs are the module's own
        fresh = pipe.graphs[index].run(*pipe.inputs)
        assert len(prep.expected) == len(fresh) == 3
        assert all(_bits_equal(a.numpy(), b.numpy()) for a, b in zip(prep.expected, fresh)), served
        # the outputs the stand-in replaces are the module's narrowed to the last token
        assert tuple(prep.expected[0].shape) == (1, 1, params["vocab"])


def test_kept_stand_in_gives_the_verdict_a_separately_computed_reference_gives():
    """The emulated run checked against the kept float stand-in and against one computed
    separately (`Graph.run` of the same stage's graph): the same verdict, op by op, the
    same max errors."""
    from dse.numerics.run import prepare_recipe

    prep = prepare_recipe("llama_prefill", SMALL["llama_prefill"])
    index = max(i for i, s in enumerate(prep.pipe.stages) if not s.quantized)
    separate = prep.pipe.graphs[index].run(*prep.inputs)
    cand = Candidate(load_chip("goban"), Mapping(workers=4))
    shared = emulate_graph(prep.graph, cand, prep.inputs, prep.expected, prep.tolerance, prep.reference_kind)
    alone = emulate_graph(prep.graph, cand, prep.inputs, separate, prep.tolerance, prep.reference_kind)
    assert shared.verdict.passed and shared.verdict.integer_bit_exact and shared.verdict.max_abs_error > 0
    assert shared.verdict.to_dict(ops=True) == alone.verdict.to_dict(ops=True)
    # a stand-in that is wrong beyond the tolerance fails the same run
    off = [separate[0] + 1.0] + separate[1:]
    bad = emulate_graph(prep.graph, cand, prep.inputs, off, prep.tolerance, prep.reference_kind)
    assert bad.verdict.integer_bit_exact and not bad.verdict.outputs_within_tolerance and not bad.verdict.passed


def test_a_wrong_emulated_product_still_fails_the_numerics(cli, monkeypatch):
    """One wrong bit in one matrix-Ball product (the emulator's chain product made off by
    one): the integer path differs, the first differing op is that product's, exit 1."""
    from emulator import balls

    real = balls.int_product_of_pieces
    wrong = []

    def off_by_one_once(a, b):
        p = real(a, b)
        if not wrong:
            p[0, 0] += 1
            wrong.append(p.shape)
        return p

    monkeypatch.setattr(balls, "int_product_of_pieces", off_by_one_once)
    params = [x for k, v in SMALL["llama_prefill"].items() for x in ("--param", f"{k}={v}")]
    code, out, _ = cli("emulate", "--chip", "goban", "--recipe", "llama_prefill", *params, "--workers", "4", "--json")
    d = json.loads(out)
    assert wrong and code == 1
    v = d["numerics"]
    assert not v["passed"] and not v["integer_bit_exact"] and v["first_differing_op"].endswith("_acc")
    monkeypatch.setattr(balls, "int_product_of_pieces", real)
    code, out, _ = cli("emulate", "--chip", "goban", "--recipe", "llama_prefill", *params, "--workers", "4", "--json")
    assert code == 0 and json.loads(out)["numerics"]["first_differing_op"] is None
