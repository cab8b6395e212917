"""One candidate identity and the canonical texts it is made of, checked on generated data."""

from __future__ import annotations

import json
import random

from dse.chips import load_chip, set_dotted
from dse.identity import (CanonicalParts, candidate_hash, candidate_hash_of_texts,
                          canonical_json, content_hash)
from dse.mapping import Candidate, Mapping


def _value(rng: random.Random, depth: int = 0):
    pick = rng.random()
    if depth < 3 and pick < 0.3:
        return {f"k{rng.randint(0, 9)}": _value(rng, depth + 1) for _ in range(rng.randint(0, 4))}
    if depth < 3 and pick < 0.45:
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return rng.choice([rng.randint(-5, 5), rng.random(), "é\"x", True, None])


def test_candidate_hash_is_the_content_hash_of_config_and_mapping():
    rng = random.Random(1)
    for _ in range(200):
        config, mapping = _value(rng), _value(rng)
        want = content_hash({"config": config, "mapping": mapping})
        assert candidate_hash(config, mapping) == want
        assert candidate_hash_of_texts(canonical_json(config), canonical_json(mapping)) == want
    cand = Candidate(load_chip("goban"), Mapping(workers=2))
    assert cand.hash == candidate_hash(cand.config_dict, cand.mapping_dict)


def test_a_config_shared_by_many_mappings_hashes_each_pair_as_a_whole(monkeypatch):
    # each config's hash state is reused for every mapping after it, and forgotten past the
    # kept count: every pair still the content hash of the whole
    import dse.identity as identity

    monkeypatch.setattr(identity, "CONFIG_HEADS_KEPT", 3)
    rng = random.Random(2)
    configs = [canonical_json(_value(rng)) for _ in range(5)]
    mappings = [canonical_json(_value(rng)) for _ in range(4)]
    for _ in range(2):
        for config in configs:
            for mapping in mappings:
                want = content_hash({"config": json.loads(config), "mapping": json.loads(mapping)})
                assert candidate_hash_of_texts(config, mapping) == want
    assert len(identity._CONFIG_HEADS) <= 3


def test_canonical_parts_equal_a_full_encoding_and_leave_the_base_alone():
    rng = random.Random(2)
    for _ in range(200):
        base = {f"s{i}": _value(rng) for i in range(rng.randint(1, 6))}
        before = canonical_json(base)
        parts = CanonicalParts(base)
        changed = set(rng.sample(sorted(base), rng.randint(0, len(base))))
        data = parts.changed_copy(changed)
        for k in changed:
            data[k] = {"new": _value(rng)} if rng.random() < 0.5 else _value(rng)
        assert parts.text(data, changed) == canonical_json(data)
        assert canonical_json(base) == before


def test_a_chip_knob_copy_shares_only_the_sections_it_does_not_set():
    base = load_chip("goban").model_dump(mode="json")
    parts = CanonicalParts(base)
    data = parts.changed_copy({"dma"})
    set_dotted(data, {"dma.latency_cycles": 7}, "spec.toml")
    assert base["dma"]["latency_cycles"] != 7 and data["banks"] is base["banks"]
    assert parts.text(data, {"dma"}) == canonical_json(data)


def test_declared_ranges_are_not_part_of_a_chips_identity():
    """goban declares cores.count in 1..64: the range is checked on every load and override
    but left out of dumps, hashes and records, so declaring it changed no identity."""
    from dse.chips import chip_hash
    from emulator.chip import chip_from_dict

    chip = load_chip("goban")
    assert chip.limits and "limits" in chip.data_with_limits() and "limits" not in chip.model_dump(mode="json")
    plain = chip_from_dict(chip.model_dump(mode="json"))
    assert not plain.limits and chip_hash(plain) == chip_hash(chip)
    assert Candidate(plain, Mapping()).hash == Candidate(chip, Mapping()).hash


SECTION_SPEC = """
[experiment]
name = "sections"
hypothesis = "chip knobs"

[workload]
recipe = "mlp"
params = { batch = 8 }

[baseline]
chip = "goban"

[[space]]
name = "burst"
target = "chip.dma.burst_max_bytes"
values = [64, 80, 256]

[[space]]
name = "beat"
target = "chip.dma.beat_bytes"
values = [16, 32]

[[space]]
name = "rows"
target = "chip.banks.rows"
values = [256, 1024]

[[objectives]]
metric = "latency_cycles"

[search]
sampler = "grid"
"""


def test_chips_built_from_validated_sections_record_what_full_validation_records(tmp_path, monkeypatch):
    """The sweep's fast path (sections validated once, chip-wide checks again) and the full
    validation of every candidate chip give the same candidates, outcomes and reasons,
    invalid combinations (an 80-byte burst of 32-byte beats) included."""
    from dse.records import Store
    from dse.runner import Sweep, load_spec
    from dse.runner import candidates as candidates_module
    from dse.runner.execution import make_executor
    from dse.runner.stages import analytical_graph

    graph = analytical_graph("mlp", {"batch": 8})
    path = tmp_path / "s.toml"
    path.write_text(SECTION_SPEC)
    recorded = []
    for fast in (True, False):
        if not fast:
            monkeypatch.setattr(candidates_module.CandidateBuilder, "chip_from_sections", lambda self, data, sections: None)
        with Store(tmp_path / f"r{fast}.db") as store:
            Sweep(load_spec(path), graph, store, make_executor(graph, 1), progress=False).run()
            cands = store.candidates("sections").sort_values("hash")
            runs = store.runs("sections").merge(cands[["id", "hash"]], left_on="candidate_id", right_on="id")
            recorded.append(sorted(zip(runs["hash"], runs["status"], runs["reason"].fillna(""))))
    assert recorded[0] == recorded[1]
    assert sum(status == "infeasible" and "beat_bytes" in reason for _, status, reason in recorded[0]) == 2


def test_canonical_json_is_json_dumps_sorted_and_compact_over_generated_values():
    """canonical_json calls the C encoder made once (not one a call): the same text as
    json.dumps with the canonical options, the same errors for NaN and for what JSON lacks."""
    import json
    import math

    import pytest

    rng = random.Random(7)
    atoms = [0, -1, 2**70, 0.1, -0.0, 1e300, 5e-324, True, False, None, "", "é\u2603\n\"\\", "a b"]

    def value(depth: int):
        roll = rng.random()
        if depth > 3 or roll < 0.4:
            return rng.choice(atoms)
        if roll < 0.7:
            return [value(depth + 1) for _ in range(rng.randrange(4))]
        return {rng.choice(["b", "a", "é", "10", "9", "x.y"]) + str(rng.randrange(3)): value(depth + 1)
                for _ in range(rng.randrange(5))}

    for _ in range(300):
        v = value(0)
        assert canonical_json(v) == json.dumps(v, sort_keys=True, separators=(",", ":"), allow_nan=False)
    assert canonical_json("top") == '"top"' and canonical_json(1.5) == "1.5"
    for bad, error in ((math.nan, ValueError), ({"k": [math.inf]}, ValueError), ({"k": object()}, TypeError)):
        with pytest.raises(error):
            canonical_json(bad)
    assert canonical_json({"k": [1]}) == '{"k":[1]}'  # nothing left behind by the errors


def test_repeated_config_texts_hash_as_each_pairs_content_hash():
    """A config's part of the digest is taken once and copied (the store's batch and the
    builder alike): each pair still hashes to its own content_hash, whatever the repeats."""
    configs = [{"banks": {"count": n, "rows": 512}, "name": "goban é"} for n in (16, 20)]
    mappings = [{"workers": w, "dataflow": d} for w in (1, 2) for d in ("ws", "os")]
    for i in range(11):
        config, mapping = configs[i % 2], mappings[i % 4]
        assert candidate_hash_of_texts(canonical_json(config), canonical_json(mapping)) == content_hash(
            {"config": config, "mapping": mapping})


def test_a_chip_built_from_sections_records_its_own_dump(tmp_path):
    """The builder reads a chip's dump from its sections (each set section's dump, the rest
    the baseline's): every built chip's recorded config is the chip's own dump, a section
    value the dump drops (a technology node at its default, a core group's field given as
    None) included."""
    from dse.runner import load_spec
    from dse.runner.candidates import CandidateBuilder
    from dse.runner.samplers import make_sampler

    text = SECTION_SPEC.replace('name = "sections"', 'name = "dumps"') + """
[[space]]
name = "node"
target = "chip.technology.node_nm"
values = [22, 45]

[[space]]
name = "groups"
target = "chip.cores.groups"
values = [[{role = "a", count = 2, op_cycles = {}}, {role = "b", count = 2, op_cycles_per_element = 2.0}], []]
"""
    path = tmp_path / "d.toml"
    path.write_text(text)
    spec = load_spec(path)
    builder = CandidateBuilder(spec)
    built = [builder.build(p.params) for p in make_sampler(spec).ask(1000)]
    # a core group's field given as None: the dump leaves it out (the recorded config with it)
    # (the node left unset: no technology section, which is never read from the sections)
    valid = {k: v for k, v in next(b for b in built if not b.reason).params.items() if k != "node"}
    built.append(builder.build({**valid, "groups": [{"role": "a", "count": 2, "balls": None},
                                                    {"role": "b", "count": 2}]}))
    assert built[-1].chip is not None and "balls" not in built[-1].config["cores"]["groups"][0]
    chips = [b for b in built if b.chip is not None]
    assert len(chips) > 8
    for b in chips:
        dumped = b.chip.model_dump(mode="json")
        assert b.config == dumped
        assert b.config_json == canonical_json(b.config)
    assert any(builder.dumps_as_given(b.config, {"dma", "banks", "cores"}) for b in chips)  # the shortcut taken
    # the default node dropped from the dump: not read from the sections
    assert {b.config.get("technology", {}).get("node_nm") for b in chips} == {None, 45}
