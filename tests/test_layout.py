"""Activation layout as a knob (#19, mapping.channels_last): with true, the layout
conversions at a channels-last region's edge become views (the edge tensors stored
channels-last), decided once in the plan; the lowering and the model follow it, results stay
bit for bit, the saving is the conversions' core passes, and bad values exit 2."""

import json

import numpy as np
import pytest

from agreement import emulated_and_modelled, swept_spec
from dse.chips import load_chip
from dse.lower import lower
from dse.mapping import Candidate, Mapping
from dse.numerics.run import prepare_recipe
from dse.plan.graph_plan import plan_graph
from dse.plan.layout import REGION_EDGES, stored_orders


@pytest.fixture(scope="module")
def block():
    return prepare_recipe("resnet_block", {"channels": 16, "size": 8})


def test_the_region_edges_are_the_frontends_conversions():
    from dse.frontend.permute import CF_TO_CL, CL_TO_CF

    assert {r: set(d) for r, d in REGION_EDGES.items()} == {r: {tuple(CF_TO_CL[r]), tuple(CL_TO_CF[r])}
                                                            for r in CF_TO_CL}


def test_channels_last_plans_both_conversions_as_views_and_stores_the_input_nhwc(block):
    g = block.graph
    default = {p.op.name: p for p in plan_graph(g)}
    cl = {p.op.name: p for p in plan_graph(g, None, True)}
    assert [default[n].unit for n in ("x_cl", "conv2d_1_cf")] == ["core", "core"]
    assert [cl[n].unit for n in ("x_cl", "conv2d_1_cf")] == ["view", "view"]
    # the input is stored in x_cl's order: x_cl is then a padded row-major NHWC buffer, x a view
    assert stored_orders(g, True) == {"x": (0, 2, 3, 1)}
    assert cl["x_cl"].writes.standard and not cl["x_cl"].reads[0].standard
    # the second conversion reads the dequantized accumulator's buffer through strides
    assert cl["conv2d_1_cf"].writes.addr == cl["conv2d_1"].writes.addr
    # the default is left out of the identity: hashes from before the knob stay valid
    goban = load_chip("goban")
    assert Candidate(goban, Mapping(channels_last=False)).hash == Candidate(goban, Mapping()).hash
    assert "channels_last" not in Candidate(goban, Mapping(channels_last=False)).mapping_dict
    assert Candidate(goban, Mapping(channels_last=True)).hash != Candidate(goban, Mapping()).hash


def test_the_host_hands_the_input_over_channels_last(block):
    low = lower(block.graph, Candidate(load_chip("goban"), Mapping(channels_last=True)), block.inputs)
    x = block.inputs[0].numpy()
    base = low.locs["x_cl"]
    nhwc = np.array(low.image[base.addr:base.addr + base.nbytes].view(np.float32)).reshape(base.buffer_shape)
    assert np.array_equal(nhwc[:, :, :8, :], x.transpose(0, 2, 3, 1))  # W padded to 16 in the buffer
    assert np.array_equal(low.read(low.image, "x"), x)  # the logical NCHW input, read through strides


def test_channels_last_removes_the_conversions_bit_exact_and_the_model_follows(block):
    chip = load_chip("goban")
    got = {}
    for workers in (1, 4):
        for cl in (False, True):
            cand = Candidate(chip, Mapping(workers=workers, channels_last=cl, fusion="fuse" if workers == 4 else None))
            rep, model, per_op = emulated_and_modelled(block, cand)
            dma = sum(rep.counters["dma_bytes_in"]) + sum(rep.counters["dma_bytes_out"])
            got[workers, cl] = (rep.cycles, model["latency_cycles"], dma, rep.peak_sram_bytes,
                                per_op[per_op["kind"] == "permute"]["cycles"].sum())
    # two (1, 16, 8, 8) fp32 conversions, 1024 elements at 4 cycles each: 8192 cycles on one
    # worker; on 4 the busiest worker's quarter plus its barrier, twice (with fusion on too)
    for workers, saved in ((1, 2 * 1024 * 4), (4, 2 * (1024 * 4 // 4 + 1))):
        off, on = got[workers, False], got[workers, True]
        assert off[0] - on[0] == off[1] - on[1] == off[4] == saved
        assert on[4] == 0
        assert off[2:4] == on[2:4]  # core copies: the DMA bytes and the banks are unchanged


def _chain(first: str, last: str, other: str | None):
    """x (1, 4, 3) -> `first` -> t -> permute (0, 2, 1) -> y -> `last` -> z, and x -> `other`."""
    from dse.workload.graph import Graph, Op, OpCounts, TensorSpec

    shapes = {"x": (1, 4, 3), "t": (1, 4, 3), "y": (1, 3, 4), "z": (1, 3, 4), "o": (1, 4, 3)}
    ops = [Op("first", first, ["x"], ["t"], {}, "", OpCounts()),
           Op("p", "permute", ["t"], ["y"], {"dims": [0, 2, 1]}, "", OpCounts()),
           Op("last", last, ["y"], ["z"], {}, "", OpCounts())]
    outputs = ["z"]
    if other:
        ops.append(Op("other", other, ["t"], ["o"], {}, "", OpCounts()))
        outputs.append("o")
    return Graph("chain", ops, {n: TensorSpec(n, s, "float32") for n, s in shapes.items()}, ["x"], outputs)


@pytest.mark.parametrize("first, last, other, unit, stored", [
    ("neg", "relu", None, "view", {"t": (0, 2, 1)}),  # a core op writes t in the permute's order
    ("neg", "neg", "relu", "view", {}),  # t is read by a ReLU too: y is a view of t instead
    ("relu", "relu", None, "core", {}),  # a ReLU (a Ball where the chip has one) writes t as it is,
    ("neg", "relu", "relu", "core", {}),  # or reads it; and so does y's reader: the permute stays
])
def test_a_conversion_is_a_view_only_where_its_producer_or_readers_take_the_layout(first, last, other, unit,
                                                                                   stored):
    import torch

    import emulator

    g = _chain(first, last, other)
    assert stored_orders(g, True) == stored
    assert plan_graph(g, None, True)[1].unit == unit and plan_graph(g)[1].unit == "core"
    x = torch.randn(1, 4, 3, generator=torch.Generator().manual_seed(0))
    cand = Candidate(load_chip("toy"), Mapping(channels_last=True))
    low = lower(g, cand, (x,))
    assert [r.how for r in low.ops][1] == ("view" if unit == "view" else "core")
    result = emulator.run(low.program, cand.chip, low.image)
    ref = g.trace(x)
    for name in ("t", "y", "z"):
        assert np.array_equal(low.read(result.dram, name), ref[name].numpy()), name


def test_a_sweep_over_channels_last_records_both_and_bad_values_are_exit_2(tmp_path, repo, cli):
    spec, cands, model = swept_spec(repo, tmp_path, "layout")
    by = {(m["workers"], m.get("channels_last", False), m.get("fusion", "materialize")): h
          for h, m in zip(cands["hash"], map(json.loads, cands["mapping"]))}
    assert len(by) == 8
    for w in (1, 4):
        for f in ("materialize", "fuse"):
            assert model.loc[by[w, True, f], "latency_cycles"] < model.loc[by[w, False, f], "latency_cycles"]
    for values, words in (('[false, "yes"]', ("mapping.channels_last", "'yes'", "boolean")),):
        bad = tmp_path / "bad.toml"
        bad.write_text(spec.replace("[false, true]", values))
        code, _, err = cli("sweep", bad, "--db", tmp_path / "bad.db", "--no-progress")
        assert code == 2 and str(bad) in err and all(w in err for w in words), err
        assert not (tmp_path / "bad.db").exists()
    spans = tmp_path / "spans.toml"
    spans.write_text(spec.replace('mapping = { workers = 4 }', 'mapping = { workers = 4, partition = "spans" }'))
    code, _, err = cli("sweep", spans, "--db", tmp_path / "spans.db", "--no-progress")
    assert code == 2 and "channels_last" in err and "partition = tiles" in err, err
    assert not (tmp_path / "spans.db").exists()
