"""Stable identities: the sha256 of a canonical JSON form (sorted keys, no spaces)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

# One encoder for every call: json.dumps with options builds a new one each time.
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), allow_nan=False)


def canonical_json(obj: Any) -> str:
    return _ENCODER.encode(obj)


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
    return obj.text if type(obj) is Encoded else _ENCODER.encode(obj)


def candidate_hash_of_texts(config_json: str, mapping_json: str) -> str:
    """The candidate identity, ``content_hash({"config": config, "mapping": mapping})``,
    composed from the two parts' canonical JSON texts (canonical JSON nests, and "config"
    sorts before "mapping"): a sweep encodes each distinct config once and reuses it."""
    return hashlib.sha256(('{"config":' + config_json + ',"mapping":' + mapping_json + "}").encode()).hexdigest()


def candidate_hash(config: Any, mapping: Any) -> str:
    """The one candidate identity: a chip config's and a mapping's data (plain JSON values)."""
    return candidate_hash_of_texts(canonical_json(config), canonical_json(mapping))
