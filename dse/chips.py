"""Chip configs on disk: find, load, override, validate and identify them.

The schema is `emulator.chip.ChipConfig`; this module turns files and user overrides into
validated configs and turns every validation failure into an `InputError` that names the
file, the field, the value and what is allowed.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Mapping

from pydantic import ValidationError

from emulator.chip import ChipConfig, chip_from_dict
from emulator.costs import GivenFields

from .errors import InputError, close_matches, dotted_loc, dotted_paths, model_keys, read_toml, suggesting
from .identity import content_hash

CHIP_DIR = Path(__file__).resolve().parents[1] / "chip_configs"


def list_chips() -> list[str]:
    return sorted(p.stem for p in CHIP_DIR.glob("*.toml"))


def chip_path(name_or_path: str | Path) -> Path:
    """A shipped chip name (``goban``) or a path to a TOML file."""
    text = str(name_or_path)
    candidate = Path(text)
    if text.endswith(".toml") or candidate.parent != Path("."):
        if not candidate.is_file():
            raise InputError(candidate, "chip", text, "an existing chip config TOML file")
        return candidate
    path = CHIP_DIR / f"{text}.toml"
    if not path.is_file():
        raise suggesting(CHIP_DIR, "chip", text, "one of " + ", ".join(list_chips()) + " or a path to a .toml file",
                         list_chips())
    return path


def read_chip_data(path: Path) -> dict:
    return read_toml(path, "chip config TOML file")[1]


def load_chip(name_or_path: str | Path, overrides: Mapping[str, Any] | None = None,
              overrides_source: str | Path | None = None) -> ChipConfig:
    """Load and validate a chip, with optional dotted-path overrides (``{"cores.count": 16}``).

    Errors caused by an override name `overrides_source` (e.g. the experiment spec) when given.
    """
    path = chip_path(name_or_path)
    data = read_chip_data(path)
    chip = validate_chip(data, path)
    if overrides:
        chip = override_chip(chip, overrides, overrides_source or path)
    return chip


def validate_chip(data: dict, source: str | Path, field_prefix: str = "") -> ChipConfig:
    try:
        return chip_from_dict(data)
    except ValidationError as exc:
        raise _input_error(exc, data, source, field_prefix) from None


def validate_chip_text(text: str, data: dict, source: str | Path, field_prefix: str = "") -> ChipConfig:
    """`validate_chip` of data already encoded as JSON `text` (a sweep encodes each
    candidate chip's canonical JSON anyway): the same checks and errors."""
    try:
        return ChipConfig.model_validate_json(text)
    except ValidationError as exc:
        raise _input_error(exc, data, source, field_prefix) from None


def override_chip(chip: ChipConfig, overrides: Mapping[str, Any], source: str | Path) -> ChipConfig:
    return validate_chip(overridden_data(chip, overrides, source), source, field_prefix="chip.")


def overridden_data(chip: ChipConfig, overrides: Mapping[str, Any], source: str | Path) -> dict:
    """The chip's data with dotted-path overrides set, not yet validated."""
    return set_dotted(copy.deepcopy(chip.data_with_limits()), overrides, source)


def set_dotted(data: dict, overrides: Mapping[str, Any], source: str | Path) -> dict:
    """Set dotted-path overrides (``banks.count``) in a chip's plain data, in place: the one
    override implementation (`dse chips --set`, specs, the sweep's candidates)."""
    for dotted, value in overrides.items():
        node = data
        *parents, leaf = dotted.split(".")
        for part in parents:
            if part not in node and _optional_section(data, dotted, part):
                node[part] = {}  # a section left out because it is at its defaults (technology, costs)
            if not isinstance(node.get(part), dict):
                raise InputError(source, f"chip.{dotted}", value,
                                 "a path into the chip config, e.g. banks.count, cores.count, dma.burst_max_bytes",
                                 [f"chip.{p}" for p in close_matches(dotted, dotted_paths(data))])
            node = node[part]
        node[leaf] = value
    return data


def _optional_section(data: dict, dotted: str, part: str) -> bool:
    """Whether `part` of the override path `dotted` names a section of the schema that dumps
    leave out at its defaults (`emulator.costs`): created empty, then validated."""
    model: Any = ChipConfig
    for name in dotted.split("."):
        fields = getattr(model, "model_fields", {})
        if name not in fields:
            return False
        model = fields[name].annotation
        if name == part:
            return isinstance(model, type) and issubclass(model, GivenFields)
    return False


def capacity_notes(chip: ChipConfig) -> str:
    """What a candidate's record says about capacity the chip has but cannot use ("" when
    none): bank rows past the ISA's row-address field, for the chip's banks and for every
    core group whose own bank override goes past it."""
    uses_chip_banks = any(chip.core_chip(c).banks.rows == chip.banks.rows for c in range(chip.cores.count))
    notes = ([_unaddressable_note(chip, "banks", "each core's")]
             if chip.unaddressable_sram_bytes and uses_chip_banks else [])
    for i, group in enumerate(chip.cores.groups):
        if group.banks is None:
            continue
        own = chip.group_chip(i)
        if own.unaddressable_sram_bytes:
            notes.append(_unaddressable_note(own, f"cores.groups[{i}].banks", f"each {group.role} core's"))
    return "; ".join(notes)


def _unaddressable_note(chip: ChipConfig, field: str, whose: str) -> str:
    return (f"{field}.rows = {chip.banks.rows} but the {chip.isa.row_addr_bits}-bit row-address field "
            f"(isa.row_addr_bits) reaches {chip.addressable_rows} rows: {chip.unaddressable_sram_bytes:,} B of {whose} "
            f"SRAM ({chip.banks.count} banks x {chip.banks.rows - chip.addressable_rows} rows x {chip.banks.row_bytes} B) "
            "is unaddressable, reported as unaddressable_sram_bytes, not as private SRAM")


def chip_hash(chip: ChipConfig) -> str:
    """Stable identity of a config: sha256 of its canonical JSON form."""
    return content_hash(chip.model_dump(mode="json"))


def _input_error(exc: ValidationError, data: dict, source: str | Path, prefix: str) -> InputError:
    err = exc.errors()[0]
    loc = tuple(err["loc"])
    field = prefix + _dotted(loc) if loc else prefix.rstrip(".") or "(config)"
    value = err.get("input")
    if err["type"] == "chip_fields":  # a check over named fields (emulator.chip.fields_error)
        named = err["ctx"]["fields"]
        base = _dotted(loc)
        paths = [prefix + (f"{base}.{f}" if base else f) for f in named]
        value = next(iter(named.values())) if len(named) == 1 else dict(zip(paths, named.values()))
        return InputError(source, ", ".join(paths), value, err["ctx"]["reason"])
    if err["type"] == "extra_forbidden":
        known = model_keys(ChipConfig, loc[:-1])
        return InputError(source, field, value, "known keys here: " + ", ".join(known),
                          [prefix + dotted_loc((*loc[:-1], k)) for k in close_matches(loc[-1], known)])
    if err["type"] == "missing":
        value = None
    allowed = err["msg"].removeprefix("Value error, ").removeprefix("Input should be ")
    return InputError(source, field, value, allowed)


def _dotted(loc: tuple) -> str:
    """('balls', 0, 'kind') -> 'balls[0].kind'."""
    return dotted_loc(loc)
