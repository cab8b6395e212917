"""Chip sizes bounded at validation by what the ISA can address: every byte of a core's
banks needs a DRAM address (the 39-bit MVIN / MVOUT address), so `banks.rows = 2**40` is
refused when the config is read, naming the file, the fields, the values and the bound,
instead of failing later in the emulator with a MemoryError. Generated cases (hypothesis)
around the bound, for the chip's banks and a core group's (count from 4: the accumulator
spans 4 banks)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from dse.chips import validate_chip
from dse.errors import InputError

TOY = tomllib.loads((Path(__file__).resolve().parents[1] / "chip_configs" / "toy.toml").read_text())


def with_banks(rows: int, count: int, addr_bits: int = 39, group: bool = False) -> dict:
    data = {**TOY, "banks": {**TOY["banks"]}, "dma": {**TOY.get("dma", {}), "addr_bits": addr_bits}}
    if group:  # two groups of one core, the second with banks of its own
        data["cores"] = {"count": 2, "groups": [{"role": "a", "count": 1}, {"role": "b", "count": 1, "banks": {"rows": rows, "count": count}}]}
    else:
        data["banks"].update(rows=rows, count=count)
    return data


def test_rows_of_2_to_the_40_are_refused_naming_the_fields_and_the_bound():
    with pytest.raises(InputError) as caught:
        validate_chip(with_banks(2 ** 40, 16), "big.toml")
    message = str(caught.value)
    assert message.startswith("big.toml: field 'banks.rows, banks.count, banks.row_bytes, dma.addr_bits'")
    assert "'banks.rows': 1099511627776" in message
    assert ("16 banks of 1099511627776 rows x 16 bytes hold 281474976710656 bytes, more than the 39-bit DRAM "
            "address reaches (549755813888 bytes)") in message


@settings(max_examples=60, deadline=None)
@given(rows_log=st.integers(0, 64), extra=st.integers(0, 3), count=st.integers(4, 64),
       addr_bits=st.integers(20, 48), group=st.booleans())
def test_a_chip_is_valid_exactly_when_its_banks_fit_the_dram_address(rows_log, extra, count, addr_bits, group):
    rows = max(1, (1 << rows_log) - extra)
    fits = count * rows * TOY["banks"]["row_bytes"] <= 1 << addr_bits
    at = "cores.groups[1]." if group else ""
    try:
        chip = validate_chip(with_banks(rows, count, addr_bits, group), "gen.toml")
    except InputError as error:
        assert not fits, str(error)
        assert error.field.startswith(f"{at}banks.rows, {at}banks.count") and "DRAM address reaches" in error.allowed
    else:
        assert fits
        assert chip.dma.addr_bits == addr_bits
