"""Stable identities: the sha256 of a canonical JSON form (sorted keys, no spaces)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

# One encoder for every call: json.dumps with options builds a new one each time.
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), allow_nan=False)
# And the C encoder behind it made once too: `encode` makes one a call, two thirds of the
# time of encoding a small dict (a sweep encodes one a candidate). The same function with
# the same options, so the same text; without the circular-reference memo (a memo kept
# across calls would keep stale entries after an error): a cycle ends in RecursionError.
_C_ENCODE = (None if json.encoder.c_make_encoder is None else json.encoder.c_make_encoder(
    None, _ENCODER.default, json.encoder.encode_basestring_ascii, None, ":", ",", True, False, False))


def canonical_json(obj: Any) -> str:
    return _ENCODER.encode(obj) if _C_ENCODE is None else "".join(_C_ENCODE(obj, 0))


class CanonicalParts:
    """The canonical JSON of a dict whose entries mostly stay as they are: the text of each
    entry is kept, and only the entries named as changed are encoded again (a sweep's
    chips differ from the baseline in a section or two)."""

    def __init__(self, base: dict):
        self.base = base
        self.texts = {k: _ENCODER.encode(k) + ":" + _ENCODER.encode(v) for k, v in base.items()}

    def changed_copy(self, sections) -> dict:
        """A copy of the base sharing its unchanged entries; `sections` deep-copied."""
        data = dict(self.base)
        for k in sections:
            if k in self.base:
                data[k] = json.loads(_ENCODER.encode(self.base[k]))
        return data

    def text(self, data: dict, changed) -> str:
        """`canonical_json(data)` for a dict with the base's keys, equal to the base but in
        the `changed` entries."""
        return "{" + ",".join(_ENCODER.encode(k) + ":" + _ENCODER.encode(data[k]) if k in changed else self.texts[k]
                              for k in sorted(data)) + "}"


def content_hash(obj: Any) -> str:
    return hashlib.sha256(canonical_json(obj).encode()).hexdigest()


class Encoded:
    """A value already in canonical JSON: written to a JSON column as its text, unparsed
    and not encoded again (many candidates share a config; a batch encodes it once)."""

    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return f"Encoded({self.text!r})"


def json_text(obj: Any) -> str:
    """The store's JSON serializer: canonical JSON, pre-encoded text passed through."""
    return obj.text if type(obj) is Encoded else canonical_json(obj)


# The sha256 state after '{"config":<config>,"mapping":' by config text: a sweep's candidates
# share a few hundred chips of ~1.7 kB, so each candidate hashes only its mapping (tens of
# bytes) on a copy of its config's state, not the config again (the builder's one by one,
# the store's a batch at a time alike).
_CONFIG_HEADS: dict[str, Any] = {}
CONFIG_HEADS_KEPT = 2048


def _config_head(config_json: str):
    head = _CONFIG_HEADS.get(config_json)
    if head is None:
        if len(_CONFIG_HEADS) >= CONFIG_HEADS_KEPT:
            _CONFIG_HEADS.clear()
        head = _CONFIG_HEADS[config_json] = hashlib.sha256(('{"config":' + config_json + ',"mapping":').encode())
    return head


def candidate_hash_of_texts(config_json: str, mapping_json: str) -> str:
    """The candidate identity, ``content_hash({"config": config, "mapping": mapping})``,
    composed from the two parts' canonical JSON texts (canonical JSON nests, and "config"
    sorts before "mapping"): a sweep encodes each distinct config once and reuses it."""
    digest = _config_head(config_json).copy()
    digest.update((mapping_json + "}").encode())
    return digest.hexdigest()


def candidate_hash(config: Any, mapping: Any) -> str:
    """The one candidate identity: a chip config's and a mapping's data (plain JSON values)."""
    return candidate_hash_of_texts(canonical_json(config), canonical_json(mapping))


def workload_identity(recipe_source_hash: str, params: dict[str, Any], steps: list[dict[str, Any]],
                      torch_version: str, stages: list[dict[str, Any]] | None = None,
                      routing: dict[str, Any] | None = None) -> str:
    """The identity of the submitted work: the recipe's source, every parameter its load()
    and inputs() are called with (defaults included, so a default spelt out is the same
    work), the frontend steps (name, options, the hash of their code) and the torch
    version that captures it. Two experiments with equal identities ran the same work."""
    parts = {"recipe": recipe_source_hash, "params": params, "steps": steps, "torch": torch_version}
    if stages:  # a staged workload: every further stage's own recipe, params and steps (and role)
        parts["stages"] = stages
    if routing:  # a mixture of experts costed with a declared routing or capacity (not the recorded one)
        parts["routing"] = routing
    return content_hash(parts)
