"""A stage's trace keeps only what is read afterwards (`Context.trace`, `retained`): the
outputs, each costly op's value and its activation operands, the integer values; the rest
goes after its last reader and is computed again, with the same bits, when a later trace
needs it. Its checks run during the trace (`watch`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

from dse.frontend import Context, check_graph, permute, quantize
from dse.frontend.pipeline import retained
from dse.workload import capture
from dse.workload import graph as graph_module
from dse.workload.graph import _identical


class Block(nn.Module):
    """linear -> relu -> mul -> linear -> tanh -> add: two products, four cheap ops."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(8, 16), nn.Linear(16, 4)

    def forward(self, x):
        return torch.tanh(self.fc2(torch.relu(self.fc1(x)) * 2.0)) + 1.0


def _block():
    torch.manual_seed(0)
    module = Block().eval()
    x = torch.randn(5, 8, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = [module(x)]
    graph = capture(module, x)
    return graph, Context(None, module, (x,), expected, {})


def test_a_trace_keeps_the_outputs_the_products_and_their_operands_only():
    graph, ctx = _block()
    assert [op.kind for op in graph.ops] == ["linear", "relu", "mul", "linear", "tanh", "add"]
    linear, relu, mul, linear_1, tanh, add = (op.outputs[0] for op in graph.ops)
    # by hand: the input and mul (the products' operands), both products, the output
    assert retained(graph) == {graph.inputs[0], linear, mul, linear_1, add}
    values = ctx.trace(graph)
    assert values.keys() == {graph.inputs[0], linear, mul, linear_1, add}  # relu, tanh and the weights went
    alone = graph.trace(*ctx.inputs)
    assert all(_identical(values[n], alone[n]) for n in values)


def test_a_value_let_go_and_computed_again_has_the_same_bits_and_its_readers_are_taken(monkeypatch):
    graph, ctx = _block()
    kept = ctx.trace(graph)
    tanh = graph.ops_of_kind("tanh")[0].outputs[0]
    relu = graph.ops_of_kind("relu")[0].outputs[0]
    assert tanh not in kept and relu not in kept
    runs = []
    for kind in ("linear", "relu", "mul", "tanh", "add"):
        real = graph_module.INTERPRETERS[kind]
        monkeypatch.setitem(graph_module.INTERPRETERS, kind,
                            lambda op, args, real=real, kind=kind: runs.append(kind) or real(op, args))
    after = graph.copy()  # another graph object with the same ops: traced with the previous one's values
    assert ctx.trace(after).keys() == kept.keys() and runs == []  # every reader taken: relu and tanh never needed
    ctx.trace(graph)  # (the first graph again: its values as before)
    seen = {}
    values = ctx.trace(after, watch=lambda op, live: seen.update({op.outputs[0]: live[op.outputs[0]]}))
    # relu and tanh (let go) computed again from the kept values; the products and the mul taken
    assert sorted(runs) == ["relu", "tanh"]
    for name in (op.outputs[0] for op in graph.ops if op.kind in ("linear", "mul", "add")):
        assert values[name] is kept[name]
    alone = graph.trace(*ctx.inputs)
    assert all(_identical(seen[n], alone[n]) for n in seen) and seen.keys() == {op.outputs[0] for op in graph.ops}


def test_the_same_graph_again_is_not_run_and_a_watch_runs_it():
    graph, ctx = _block()
    first = ctx.trace(graph)
    assert ctx.trace(graph).keys() == first.keys()  # the kept values, nothing computed
    assert all(ctx.trace(graph)[n] is first[n] for n in first)
    watched = []
    ctx.trace(graph, watch=lambda op, live: watched.append(op.name))
    assert watched == [op.name for op in graph.ops]
    graph.ops[-1].attrs["other"] = 2.0  # edited in place: no longer the graph traced
    ran = []
    ctx.trace(graph, watch=lambda op, live: ran.append(op.name))
    assert ran == [op.name for op in graph.ops]


def test_a_value_unlike_its_spec_is_found_during_the_trace():
    graph, ctx = _block()
    tanh = graph.ops_of_kind("tanh")[0].outputs[0]
    spec = graph.tensors[tanh]
    graph.tensors[tanh] = type(spec)(spec.name, (5, 5), spec.dtype)
    _, problems = check_graph(graph, ctx, 1e-5)
    assert problems == [f"tensor {tanh}: spec {graph.tensors[tanh]} but the op computes float32[5, 4]"]


def test_the_integer_check_during_the_trace_still_fails_a_wrong_value(monkeypatch):
    graph, ctx = _block()
    q = quantize.run(permute.run(graph, ctx), ctx)
    verdict = quantize.verify(q, ctx)
    assert verdict["passed"] and verdict["bit_exact"] and verdict["integer_tensors_compared"] >= 4

    last = q.ops_of_kind("quantize")[-1]
    real = graph_module.INTERPRETERS["quantize"]
    monkeypatch.setitem(graph_module.INTERPRETERS, "quantize",  # the torch reference one off in the last quantize
                        lambda op, args: real(op, args) + torch.ones((), dtype=torch.int8) * (op is last))
    ctx.traced = None  # the context keeps the last trace (made by the right interpreter): run it again
    broken = quantize.verify(q, ctx)
    assert not broken["bit_exact"] and broken["first_mismatch"] == last.outputs[0]


def _rss_and_peak() -> tuple[int, int]:
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return tuple(int(fields[k].split()[0]) * 1024 for k in ("VmRSS", "VmHWM"))


def _peak_growth(run) -> int:
    """How far the resident set rises above where it started while `run` runs (VmHWM reset first)."""
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM back to VmRSS
    before, _ = _rss_and_peak()
    result = run()
    _, peak = _rss_and_peak()
    del result
    return peak - before


def test_a_mid_size_graph_traced_for_a_stage_peaks_far_lower():
    """Eight cheap ops over 64 MB tensors after a product: a trace keeping every value holds
    all eight; the stage's trace about three at a time (each mmap'd, given back when freed)."""

    class Elementwise(nn.Module):
        def forward(self, x):
            y = x @ x[:1024, :].t()  # a product: kept, as its operand x (the input)
            for _ in range(4):
                y = torch.sin(y) * 1.5
            return y.sum(0)

    x = torch.randn(16384, 1024, generator=torch.Generator().manual_seed(0))  # 64 MB
    module = Elementwise().eval()
    graph = capture(module, x)
    ctx = Context(None, module, (x,), [], {})
    size = x.numel() * 4
    everything = _peak_growth(lambda: graph.trace(x))
    stage = _peak_growth(lambda: ctx.trace(graph))
    assert everything >= 8 * size  # the product, four sines, four muls: all held
    assert stage <= 4 * size, (stage / size, everything / size)
    ctx.traced = ctx.traced_graph = None
    np.testing.assert_array_equal(graph.trace(x)[graph.outputs[0]].numpy(), ctx.trace(graph)[graph.outputs[0]].numpy())


def test_the_integer_products_row_blocks_give_the_bits_of_one_exact_product(monkeypatch):
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, size=(2, 3, 37, 64), dtype=np.int8)
    b = rng.integers(-128, 128, size=(2, 1, 64, 29), dtype=np.int8)
    exact = np.matmul(a.astype(np.int64), b.astype(np.int64))
    monkeypatch.setattr(quantize, "ROWS_ELEMENTS", 6 * 29 * 5)  # blocks of 5 rows: 8 blocks, the last of 2
    got, bound = quantize._np_int_matmul(a, b)
    assert got.dtype == np.int32 and bound == 64 * 128 * 128
    np.testing.assert_array_equal(got, exact)


def test_the_previous_values_below_a_changed_value_go_when_it_is_computed():
    graph, ctx = _block()
    old = graph.trace(*ctx.inputs)  # every value
    after = graph.copy()
    w = after.ops[0].inputs[1]
    after.weights[w] = (after.weights[w] * np.float32(1 + 2**-10)).astype(np.float32)  # the first linear's values change
    left = {}
    values = after.trace(*ctx.inputs, previous=(graph.copy(), old),
                         watch=lambda op, live: left.setdefault(op.outputs[0], set(old)))
    assert left[after.ops[0].outputs[0]] == set()  # nothing below it could be taken: all gone at its own step
    alone = after.trace(*ctx.inputs)
    assert all(_identical(values[n], alone[n]) for n in alone)


def test_the_integer_check_compares_block_by_block_and_finds_one_element_off(monkeypatch):
    """An attention's int8 x int8 product and the quantize ops are compared a block at a time
    (`_agrees_in_blocks`); one element off in the last block still fails, named."""
    from dse.frontend import run_pipeline

    pipe = run_pipeline("llama_prefill", dict(seq=16, vocab=64, dim=32, layers=1, heads=2, kv_heads=1))
    q = pipe.graph
    scores = next(op for op in q.ops_of_kind("matmul") if all(q.tensors[n].dtype == "int8" for n in op.inputs)
                  and not any(n in q.weights for n in op.inputs))
    ctx = Context(None, None, pipe.inputs, [], {})
    monkeypatch.setattr(quantize, "ROWS_ELEMENTS", 16)  # blocks of one row
    assert quantize.verify(q, ctx)["bit_exact"]
    real = graph_module.INTERPRETERS["matmul"]

    def one_off(op, args):
        value = real(op, args)
        if op is scores:
            value = value.clone()
            value[..., -1, -1] += 1
        return value

    monkeypatch.setitem(graph_module.INTERPRETERS, "matmul", one_off)
    ctx.traced = None
    broken = quantize.verify(q, ctx)
    assert not broken["bit_exact"] and broken["first_mismatch"] == scores.outputs[0]


def test_the_vacuous_forward_runs_before_the_traces_and_puts_a_touched_buffer_back():
    """The module on redrawn inputs runs before the stages (`_check_vacuous`): a forward that
    writes a buffer in place (which the captured graph reads as a weight) leaves it as it was."""
    from dse.frontend.pipeline import _check_vacuous

    class Counting(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("seen", torch.zeros(3))

        def forward(self, x):
            self.seen.add_(x.sum(0))  # a running statistic, touched by every forward
            return x * 2.0

    module = Counting().eval()
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
    array = module.seen.numpy()  # the graph's view of the buffer
    before = array.copy()
    found = _check_vacuous(None, module, (x,), [x * 2.0], ["out"])
    assert found == [] and np.array_equal(array, before)


def test_a_previous_value_of_another_spec_goes_before_the_trace_starts():
    graph, ctx = _block()
    old = graph.trace(*ctx.inputs)
    after = graph.copy()
    tanh = after.ops_of_kind("tanh")[0].outputs[0]
    spec = after.tensors[tanh]
    after.tensors[tanh] = type(spec)(spec.name, (5, 4), "float64")  # the namesake of another spec: never taken
    left = {}
    after.trace(*ctx.inputs, previous=(graph.copy(), old),
                watch=lambda op, live: left.setdefault(op.outputs[0], set(old)))
    first = after.ops[0].outputs[0]
    assert tanh not in left[first] and after.ops[1].outputs[0] in left[first]
