"""The check every knob's test makes: a candidate emulated bit-exact on the integer path,
and the model's latency within 2% of the emulator's.

Import it into a test module: `from agreement import emulated_and_modelled`."""

from dse.analytical import estimate, summarize
from dse.analytical.placed import estimate_layers
from dse.numerics import emulate_graph


def emulated_and_modelled(prep, cand, within: float = 0.02):
    """`prep` (a prepared recipe) emulated and costed on `cand`, both checked; returns the
    emulator's report, the model's total row and its per-op frame. A candidate of placement
    "layers" or "pipeline" is costed as its ranges (`estimate_layers`)."""
    rep = emulate_graph(prep.graph, cand, prep.inputs, prep.expected, prep.tolerance, prep.reference_kind)
    assert rep.feasible, rep.reason
    assert rep.verdict.passed and rep.verdict.integer_bit_exact, rep.verdict
    if cand.mapping.placement in ("layers", "pipeline"):
        totals, per_op, _ = estimate_layers(prep.graph, [cand])
        model = totals.iloc[0]
    else:
        per_op = estimate(prep.graph, [cand])
        model = summarize(per_op, [cand]).iloc[0]
    assert abs(model["latency_cycles"] / rep.cycles - 1) < within, (cand.mapping, model["latency_cycles"], rep.cycles)
    return rep, model, per_op


SMALL_BLOCK = {'recipe = "resnet_block"': 'recipe = "resnet_block"\nparams = { channels = 16, size = 8 }',
               'emulator = "all"': 'emulator = "none"'}


def swept_spec(repo, tmp_path, name: str, edits: dict[str, str] = SMALL_BLOCK):
    """`experiments/<name>.toml` with `edits` (text -> replacement) swept into a fresh store:
    the edited spec's text, its candidates, and its analytical totals by candidate hash."""
    from dse.records import Store
    from dse.runner import run_sweep

    spec = (repo / "experiments" / f"{name}.toml").read_text()
    for old, new in edits.items():
        assert old in spec, (name, old)
        spec = spec.replace(old, new)
    path = tmp_path / f"{name}.toml"
    path.write_text(spec)
    result = run_sweep(path, tmp_path / "r.db", progress=False)
    with Store(tmp_path / "r.db") as store:
        return spec, store.candidates(result.experiment_id), store.metric_table(result.experiment_id, "analytical").set_index("hash")
