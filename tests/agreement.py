"""The check every knob's test makes: a candidate emulated bit-exact on the integer path,
and the model's latency within 2% of the emulator's.

Import it into a test module: `from agreement import emulated_and_modelled`."""

from dse.analytical import estimate, summarize
from dse.numerics import emulate_graph


def emulated_and_modelled(prep, cand, within: float = 0.02):
    """`prep` (a prepared recipe) emulated and costed on `cand`, both checked; returns the
    emulator's report, the model's total row and its per-op frame."""
    rep = emulate_graph(prep.graph, cand, prep.inputs, prep.expected, prep.tolerance, prep.reference_kind)
    assert rep.feasible, rep.reason
    assert rep.verdict.passed and rep.verdict.integer_bit_exact, rep.verdict
    per_op = estimate(prep.graph, [cand])
    model = summarize(per_op, [cand]).iloc[0]
    assert abs(model["latency_cycles"] / rep.cycles - 1) < within, (cand.mapping, model["latency_cycles"], rep.cycles)
    return rep, model, per_op
