"""A trace that takes values from the previous one (`Graph.trace(previous=...)`, the frontend's
stage checks): equal bit for bit to a trace computed afresh, readers of a rewritten op reused
only when its value came out with the very same bits and layout, and a step that changes a
value still failing its check."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import torch
from torch import nn

from dse.frontend import Context, run_pipeline
from dse.frontend.pipeline import retained
from dse.workload import capture
from dse.workload import graph as graph_module
from dse.workload.graph import _identical


def _graph():
    module = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4), nn.Tanh()).eval()
    x = torch.randn(5, 8, generator=torch.Generator().manual_seed(0))
    return capture(module, x), (x,)


def _with_first_weight(graph, array):
    """`graph` with its first linear's weight replaced by `array` (a step's new weight)."""
    after = graph.copy()
    first = after.ops_of_kind("linear")[0]
    after.weights[first.inputs[1]] = array
    return after


def _bits_equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(_identical(a[n].contiguous(), b[n].contiguous()) for n in a)


def test_readers_of_a_rewritten_op_with_the_same_bits_are_taken_from_the_previous_trace():
    graph, inputs = _graph()
    before = graph.trace(*inputs)
    first = graph.ops_of_kind("linear")[0]
    # a new array with the same values: the linear is computed again, and gives the same bits
    after = _with_first_weight(graph, graph.weights[first.inputs[1]].copy())
    kept = dict(before)
    reused = after.trace(*inputs, previous=(graph.copy(), dict(before)))
    fresh = after.trace(*inputs)
    assert _bits_equal(reused, fresh)
    assert reused[first.outputs[0]] is kept[first.outputs[0]]  # computed, equal: the old tensor kept
    for op in after.ops[1:]:  # everything after it taken, not computed
        assert reused[op.outputs[0]] is kept[op.outputs[0]], op.name


def test_readers_of_a_rewritten_op_with_other_bits_are_computed_again():
    graph, inputs = _graph()
    before = graph.trace(*inputs)
    first = graph.ops_of_kind("linear")[0]
    w = graph.weights[first.inputs[1]]
    after = _with_first_weight(graph, (w * np.float32(1 + 2**-10)).astype(np.float32))
    reused = after.trace(*inputs, previous=(graph.copy(), dict(before)))
    fresh = after.trace(*inputs)
    assert _bits_equal(reused, fresh)
    out = after.outputs[0]
    assert reused[out] is not before[out] and not torch.equal(reused[out], before[out])


def test_the_previous_trace_is_consumed():
    """Each old value is dropped once the new trace has passed its op (a real layer's values
    are gigabytes): afterwards the previous dict holds nothing."""
    graph, inputs = _graph()
    old = graph.trace(*inputs)
    graph.trace(*inputs, previous=(graph.copy(), old))
    assert old == {}


def test_identical_means_same_bits_and_layout():
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    assert _identical(x, x.clone())
    assert not _identical(x, x.t().contiguous().t())  # the same values, other strides
    assert not _identical(torch.tensor([0.0]), torch.tensor([-0.0]))  # torch.equal takes them as equal
    nan = torch.tensor([float("nan"), 1.0])
    assert _identical(nan, nan.clone())  # torch.equal does not
    assert not _identical(x, x.to(torch.float64))
    assert _identical(torch.tensor([1, 2], dtype=torch.int8), torch.tensor([1, 2], dtype=torch.int8))
    assert not _identical(torch.tensor([1, 2], dtype=torch.int8), torch.tensor([1, 3], dtype=torch.int8))


COPY_WEIGHTS = textwrap.dedent('''\
    """Stores every linear's weight again as a new array, times `factor` (1: the same values)."""
    import numpy as np

    from dse.frontend import Rewriter

    OPTIONS = {"factor": (float, 1.0)}


    def run(graph, ctx, factor=1.0):
        rw = Rewriter(graph, "copy_weights")
        for op in graph.ops:
            if op.kind == "linear" and op.inputs[1] in graph.weights:
                w = rw.weight(op.inputs[1] + "_copy", graph.weights[op.inputs[1]] * np.float32(factor))
                rw.keep(op, inputs=[rw.get(op.inputs[0]), w] + [rw.get(n) for n in op.inputs[2:]])
            else:
                rw.keep(op)
        return rw.finish()
''')


def _recipe(folder: Path, factor: float) -> Path:
    folder.mkdir(parents=True)
    (folder / "model.py").write_text(textwrap.dedent("""\
        import torch
        from torch import nn


        def load():
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4), nn.Tanh()).eval()


        def inputs():
            return (torch.randn(5, 8, generator=torch.Generator().manual_seed(1)),)
    """))
    (folder / "steps.toml").write_text(f'[[step]]\nname = "copy_weights"\nfactor = {factor}\n')
    (folder / "frontend").mkdir()
    (folder / "frontend" / "copy_weights.py").write_text(COPY_WEIGHTS)
    return folder


def test_a_stage_whose_values_did_not_change_runs_only_its_rewritten_ops(tmp_path, monkeypatch):
    runs = []
    for kind in ("linear", "relu", "tanh"):
        real = graph_module.INTERPRETERS[kind]
        monkeypatch.setitem(graph_module.INTERPRETERS, kind, lambda op, args, real=real, kind=kind:
                            runs.append(kind) or real(op, args))
    result = run_pipeline(_recipe(tmp_path / "same", 1.0))
    assert result.passed and [s.name for s in result.stages] == ["import", "copy_weights"]
    assert result.stages[1].max_abs_error == 0.0
    # the capture's check runs all four ops; the step's check its two linears (new weights),
    # whose values came out the same: the relu and tanh reading them are taken
    assert sorted(runs) == ["linear"] * 4 + ["relu", "tanh"]


def test_a_step_that_changes_the_values_still_fails_its_check(tmp_path):
    result = run_pipeline(_recipe(tmp_path / "off", 1.001))
    assert not result.passed
    stage = result.stages[1]
    assert stage.name == "copy_weights" and not stage.passed and stage.blame == "copy_weights"
    assert stage.max_rel_error > 1e-5 and "max abs error" in stage.error


def test_the_stage_checks_reuse_equals_a_trace_from_scratch(tmp_path):
    """The last stage's values, as the pipeline's reusing traces left them, against the same
    graph traced alone."""
    folder = _recipe(tmp_path / "same", 1.0)
    result = run_pipeline(folder)
    from dse.workload.recipes import instantiate, load_recipe

    recipe = load_recipe(folder)
    module, inputs = instantiate(recipe)
    ctx = Context(recipe, module, inputs, [], {})
    for graph in result.graphs:
        reused, alone = ctx.trace(graph), graph.trace(*inputs)
        assert retained(graph) <= reused.keys() <= alone.keys()  # the kept values, and no other op's
        assert _bits_equal(reused, {name: alone[name] for name in reused})


LLAMA = dict(seq=16, vocab=64, dim=32, layers=1, heads=2, kv_heads=1, head_dim=16, ffn=64)


def test_the_kept_integer_values_equal_the_final_graph_traced_alone():
    """`run_pipeline(keep_bytes=...)`: the final graph's integer values as its stage check
    traced them (reusing the float stages' traces) are the graph's own trace, bit for bit."""
    pipe = run_pipeline("llama_prefill", LLAMA, keep_bytes=1 << 30)
    graph = pipe.graph
    assert pipe.passed and pipe.kept
    fresh = graph.trace(*pipe.inputs)
    integer = {op.outputs[0] for op in graph.ops if graph.tensors[op.outputs[0]].dtype in ("int8", "int32")}
    assert set(pipe.kept) == integer
    assert all(_identical(pipe.kept[n].contiguous(), fresh[n].contiguous()) for n in integer)
    assert run_pipeline("llama_prefill", LLAMA).kept is None  # a cache hit: nothing kept


def test_kept_values_leave_the_largest_out_to_fit_the_budget():
    from dse.frontend.pipeline import kept_values

    pipe = run_pipeline("llama_prefill", LLAMA, keep_bytes=1 << 30)
    sizes = {n: v.untyped_storage().nbytes() for n, v in pipe.kept.items()}
    assert len({v.untyped_storage().data_ptr() for v in pipe.kept.values()}) == len(sizes)  # none shared
    kept = kept_values(pipe.graph, pipe.kept, sum(sizes.values()) - 1)
    (left_out,) = set(sizes) - set(kept)  # one byte short: one of the largest goes
    assert sizes[left_out] == max(sizes.values())
    assert kept_values(pipe.graph, pipe.kept, sum(sizes.values())).keys() == sizes.keys()
    assert kept_values(pipe.graph, pipe.kept, 0) == {}


def test_the_streamed_reference_takes_known_values_and_computes_the_rest():
    from dse.numerics.run import StreamedReference

    pipe = run_pipeline("llama_prefill", LLAMA, keep_bytes=1 << 30)
    graph, inputs = pipe.graph, pipe.inputs
    fresh = graph.trace(*inputs)
    known = dict(pipe.kept)
    given = dict(known)
    ref = StreamedReference(graph, inputs, known)
    for op in graph.ops:  # in op order, as `compare` reads them
        name = op.outputs[0]
        got = ref[name]
        if name in given:
            assert got is given[name]
            assert name not in known  # taken over: the caller's dict lets it go
        assert _identical(got.contiguous(), fresh[name].contiguous()), name
    assert given and not known
    # a wrong known value is what the reference gives: it must be the graph's own (the check's)
    name = next(iter(given))
    wrong = given[name] + 1
    assert torch.equal(StreamedReference(graph, inputs, {name: wrong})[name], wrong)


def test_emulate_recipe_gives_the_same_report_with_the_kept_reference(monkeypatch):
    from dse.chips import load_chip
    from dse.mapping import Mapping
    from dse.numerics import run as numerics_run

    chip = load_chip("goban")
    monkeypatch.setenv("DSE_CACHE_DIR", "off")  # each run its own pipeline: kept values every time
    with_kept = numerics_run.emulate_recipe("llama_prefill", chip, Mapping(workers=2), LLAMA)
    monkeypatch.setattr(numerics_run, "KEPT_REFERENCE_BYTES", 0)
    without = numerics_run.emulate_recipe("llama_prefill", chip, Mapping(workers=2), LLAMA)
    assert with_kept.verdict.passed and with_kept.verdict.integer_bit_exact
    assert with_kept.cycles == without.cycles and with_kept.counters == without.counters
    assert with_kept.verdict.to_dict() == without.verdict.to_dict()
