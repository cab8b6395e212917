"""The check every knob's test makes: a candidate emulated bit-exact on the integer path,
and the model's latency within 2% of the emulator's.

Import it into a test module: `from agreement import emulated_and_modelled`. Beside it, what
the placement tests share: the tiny llama they cut, a recipe prepared for them, and the
hand-off banks the plan decides."""

from dse.analytical import estimate, summarize
from dse.analytical.placed import estimate_layers
from dse.mapping import CandidateArrays
from dse.numerics import emulate_graph
from dse.numerics.run import prepare_recipe
from dse.plan.graph_plan import plan_graph
from dse.plan.placement import handoff_banks, handoffs, range_candidate, schedule

TINY_LLAMA = dict(vocab=64, dim=32, layers=1, heads=2, kv_heads=1, seq=16)


def prepared(recipe: str, params: dict):
    """`recipe` through its frontend steps with `params`, asserted to have passed them."""
    prep = prepare_recipe(recipe, params)
    assert not prep.failed, prep.failed
    return prep


def plan_banks(prep, cand):
    """The candidate's hand-off banks as the plan decides them (bases, banks), by matmul."""
    plans = plan_graph(prep.graph, cand.mapping.fusion, cand.mapping.channels_last)
    lay, reason = schedule(cand.chip, cand.mapping, len(plans))
    assert not reason, reason
    handed = handoffs(plans, lay.ranges, cand.mapping.weights != "shared")
    (got,) = handoff_banks(plans, lay.ranges, handed, lay.handoff_sets, lay.overlap,
                           [CandidateArrays.from_candidates([range_candidate(p, cand.mapping)]) for p in lay.places])
    return got.bases, got.banks


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
