"""One candidate identity and the canonical texts it is made of, checked on generated data."""

from __future__ import annotations

import random

from dse.chips import load_chip, set_dotted
from dse.identity import CanonicalParts, candidate_hash, candidate_hash_of_texts, canonical_json, content_hash
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
