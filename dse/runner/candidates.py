"""A sweep's candidates from its knob values: the chip and mapping each set of parameters
gives, validated, in canonical form, and its identity (`dse.identity`).

The one definition of which candidate a proposal is: the sweep builds every candidate
here, and a rerun's shortcut (`dse.runner.rerun`) asks the store about the same hashes.
Imports no stage (no torch, pandas, SQLAlchemy or emulator machine).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Callable

from pydantic import BaseModel

from ..chips import set_dotted, validate_chip_text
from ..errors import InputError
from ..identity import CanonicalParts, candidate_hash_of_texts, canonical_json
from ..mapping import mapping_from_dict
from .spec import Spec


def mapping_data(mapping) -> dict:
    """A mapping as recorded and hashed: fields left unset (None) are omitted, so adding an
    optional field does not change the identity of candidates recorded before it."""
    return mapping.model_dump(mode="json", exclude_none=True)


@dataclass
class BuiltCandidate:
    params: dict
    config: dict
    mapping: dict
    hash: str
    reason: str  # why it is infeasible before any evaluation ('' if it is to be evaluated)
    config_json: str = ""
    mapping_json: str = ""
    chip: Any = None  # the chip as validated (None: the baseline's, or not validated)


def knob_key(names: list[str], params: dict):
    """The values of knobs `names` that `params` sets, as a dict key: a tuple of (name,
    value), or its canonical JSON where a value is a list or dict (core groups, a workload
    point)."""
    key = tuple([(name, params[name]) for name in names if name in params])
    try:
        hash(key)
    except TypeError:
        return canonical_json([list(kv) for kv in key])
    return key


def _values_of(names: list[str]):
    """The values of knobs `names` in a params dict, as a tuple (KeyError: one unset)."""
    if len(names) > 1:
        return operator.itemgetter(*names)
    if names:
        return lambda params, name=names[0]: (params[name],)
    return lambda params: ()


def _key(values, names: list[str], params: dict):
    """`knob_key` of `names` in `params`: when every knob is set and every value hashable
    (a grid's point, one C call), the values themselves, tagged apart from `knob_key`'s
    own (name, value) pairs; else `knob_key`'s."""
    try:
        key = ("all", values(params))
        hash(key)
        return key
    except (KeyError, TypeError):
        return knob_key(names, params)


class CandidateBuilder:
    """Builds a spec's candidates, validating each distinct chip and mapping once.
    `on_chip(config_json, chip)`: called with every validated chip (the sweep keeps them
    for its evaluation stages)."""

    def __init__(self, spec: Spec, on_chip: Callable[[str, Any], None] | None = None):
        self.spec = spec
        self.on_chip = on_chip
        self.baseline_data = {"config": spec.baseline_chip.model_dump(mode="json"),
                              "mapping": spec.baseline_mapping.model_dump(mode="json")}
        self._chips: dict[tuple, Any] = {}
        self._chip_knobs = [k.name for k in spec.model.space if k.target.startswith("chip.")] + [
            t for t in spec.hand_targets if t.startswith("chip.")]
        # what a mapping's overrides read (`Spec.overrides`: mapping and workload targets)
        self._mapping_knobs = [k.name for k in spec.model.space if not k.target.startswith("chip.")] + [
            t for t in spec.hand_targets if not t.startswith("chip.")]
        self._chip_values, self._mapping_values = _values_of(self._chip_knobs), _values_of(self._mapping_knobs)
        self._baseline_config = CanonicalParts(self.baseline_data["config"])
        self._chip_limits = spec.baseline_chip.data_with_limits().get("limits")
        self._sections: dict[tuple[str, str], Any] = {}  # (section, its canonical JSON) -> validated section
        self._as_given: dict[tuple[str, str], bool] = {}  # (section, its canonical JSON) -> it dumps as given
        self._mappings: dict[tuple, Any] = {}

    def chip_for(self, params: dict) -> tuple[dict, str, str, Any]:
        """(config data, its canonical JSON, why it is invalid or '', the validated chip or
        None) once per distinct chip:
        many candidates share a chip and differ in mapping only."""
        key = _key(self._chip_values, self._chip_knobs, params)
        hit = self._chips.get(key)
        if hit is None:
            chip_over = self.spec.overrides(params, "chip")
            # the baseline's data, its sections the knobs set copied: the rest is shared
            sections = {dotted.split(".", 1)[0] for dotted in chip_over}
            data, why = self._baseline_config.changed_copy(sections), ""
            set_dotted(data, chip_over, self.spec.path)
            chip = None
            text = self._baseline_config.text(data, sections)
            if chip_over:
                chip = self.chip_from_sections(data, sections)
                try:
                    as_given = chip is not None and self.dumps_as_given(data, sections)
                    if chip is None:  # the full validation: a knob outside a section, or an error to name
                        checked, checked_text = data, text
                        if self._chip_limits:  # the baseline's declared ranges bound the knobs too
                            checked = {**data, "limits": self._chip_limits}
                            checked_text = self._baseline_config.text(checked, sections | {"limits"})
                        chip = validate_chip_text(checked_text, checked, self.spec.path, field_prefix="chip.")
                    dumped = data if as_given else chip.model_dump(mode="json")
                    if dumped != data:  # validation normalised a value (an int given for a float): its form
                        data, text = dumped, canonical_json(dumped)
                except InputError as exc:
                    why = f"invalid chip for this combination: {exc.field}: {exc.allowed}"
            if chip is not None and self.on_chip is not None:
                self.on_chip(text, chip)
            hit = self._chips[key] = (data, text, why, chip)
        return hit

    def chip_from_sections(self, data: dict, sections: set[str]):
        """The candidate's chip from the baseline's with the knob-set sections replaced, each
        section validated once per distinct value (a sweep over chip knobs has many chips
        but few values of each section); None when a knob sets something else than a
        section or any check fails (the full validation then names the error)."""
        baseline = self.spec.baseline_chip
        fields = type(baseline).model_fields
        replaced = {}
        for name in sections:
            model = fields[name].annotation if name in fields else None
            if not (isinstance(model, type) and issubclass(model, BaseModel)):
                return None
            key = (name, canonical_json(data[name]))
            if key not in self._sections:
                try:
                    self._sections[key] = model.model_validate_json(key[1])
                except ValueError:
                    self._sections[key] = None
            if self._sections[key] is None:
                return None
            replaced[name] = self._sections[key]
        try:
            return baseline.with_sections(**replaced)
        except ValueError:
            return None

    def dumps_as_given(self, data: dict, sections: set[str]) -> bool:
        """Whether the chip `chip_from_sections` built of `data` dumps as `data` (the whole
        chip's dump, tens of microseconds a chip, not needed): every section a knob set dumps
        as given (read once per distinct value), and the others are the baseline's own.
        Technology and costs not: the chip's dump leaves them out when empty."""
        for name in sections:
            if name in ("technology", "costs"):
                return False
            key = (name, canonical_json(data[name]))
            same = self._as_given.get(key)
            if same is None:
                section = self._sections.get(key)
                same = self._as_given[key] = section is not None and section.model_dump(mode="json") == data[name]
            if not same:
                return False
        return True

    def mapping_for(self, params: dict) -> tuple[dict, str, str]:
        """(mapping data, its canonical JSON, why it is invalid or '') once per distinct
        mapping: a sweep has few mappings and many candidates."""
        key = _key(self._mapping_values, self._mapping_knobs, params)
        hit = self._mappings.get(key)
        if hit is None:
            map_over = self.spec.overrides(params, "mapping")
            mapping, why = {**self.baseline_data["mapping"], **map_over}, ""
            try:
                mapping = mapping_data(mapping_from_dict(mapping, str(self.spec.path)))
            except InputError as exc:
                why = f"invalid mapping for this combination: {exc.field}: {exc.allowed}"
            hit = self._mappings[key] = (mapping, canonical_json(mapping), why)
        return hit

    def build(self, params: dict) -> BuiltCandidate:
        config, config_json, reason, chip = self.chip_for(params)
        reason = reason or self.spec.space.violated(params)
        mapping, mapping_json, why = self.mapping_for(params)
        reason = reason or why
        return BuiltCandidate(params, config, mapping, candidate_hash_of_texts(config_json, mapping_json), reason,
                              config_json, mapping_json, chip)
