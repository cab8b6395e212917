"""Core groups with their own hardware (#19): the effective chip of a group, checked once;
the emulator runs each core with its group's banks, Balls and core-op costs; a group
geometry the ISA cannot address is one line naming the group's field, exit 2."""

from __future__ import annotations

import numpy as np
import pytest

import emulator
from emulator import CoreOp, DramTensor, ExecutionError, Matmul, Mset, Mvin, Mvout, Program, Region, Relu
from dse.chips import chip_hash, load_chip
from dse.errors import InputError
from dse.lower import Infeasible, lower_placed
from dse.mapping import Candidate, Mapping
from dse.plan.placement import place, spmd_chip


def test_group_chips_carry_the_groups_hardware_and_nothing_else():
    poly = load_chip("poly")
    pre, dec = poly.group_chip(0), poly.group_chip(1)
    assert (pre.name, pre.cores.count, pre.banks) == ("poly.prefill", 3, poly.banks)
    assert [b.kind for b in pre.balls] == ["matrix", "transpose", "relu", "fp2int", "int2fp"]
    assert (dec.name, dec.cores.count, dec.banks.count, dec.banks.rows) == ("poly.decode", 2, 12, 1024)
    assert [b.kind for b in dec.balls] == ["matrix", "vecmatmul", "fp2int", "int2fp", "mxfp2int"]
    # the decode cores' own core-op cost; the chip's per-kind table still applies on top
    assert dec.core_cycles_per_element("softmax") == 2.0 and pre.core_cycles_per_element("softmax") == 4.0
    with_kind = load_chip("poly", {"cores.op_cycles": {"softmax": 9.0}})
    assert with_kind.group_chip(1).core_cycles_per_element("softmax") == 9.0
    # a group's banks set only the fields it names: the rest stay the chip's
    deep = load_chip("poly", {"banks.rows": 512})
    assert (deep.group_chip(1).banks.count, deep.group_chip(1).banks.rows) == (12, 512)
    assert poly.model_dump(mode="json")["cores"]["groups"][1]["banks"] == {"count": 12}
    # the Ball configs are the chip's own, latencies included
    assert dec.ball("matrix") == poly.ball("matrix")
    assert [poly.core_chip(c).name for c in range(5)] == ["poly.prefill"] * 3 + ["poly.decode"] * 2
    # a group overriding nothing leaves its cores on the chip itself, and identities unchanged
    plain = load_chip("poly", {"cores.groups": [{"role": "prefill", "count": 3}, {"role": "decode", "count": 2}]})
    assert plain.core_chip(4) is plain
    assert plain.model_dump(mode="json")["cores"]["groups"] == [{"role": "prefill", "count": 3},
                                                                {"role": "decode", "count": 2}]
    assert chip_hash(plain) != chip_hash(poly)


@pytest.mark.parametrize("group, field, allowed", [
    ({"banks": {"count": 2048}}, "chip.cores.groups[1].banks.count, chip.isa.bank_id_bits", "10-bit bank id field"),
    ({"banks": {"count": 2}}, "chip.cores.groups[1].banks.acc_col, chip.cores.groups[1].banks.count",
     "accumulator col 4 exceeds the 2 banks"),
    ({"banks": {"row_bytes": 32}}, "chip.cores.groups[1].banks.row_bytes", "the chip's 16"),
    ({"balls": ["matrix", "im2col"]}, "chip.cores.groups[1].balls", "allowed: matrix, vecmatmul"),
    ({"balls": []}, "chip.cores.groups[1].balls", "at least one"),
    ({"role": "prefill"}, "chip.cores.groups[1].role", "one group a role"),
    ({"op_cycles_per_element": 0.0}, "chip.cores.groups[1].op_cycles_per_element", "greater than 0"),
])
def test_a_group_geometry_the_isa_cannot_address_is_one_line(group, field, allowed):
    groups = [{"role": "prefill", "count": 3}, {"role": "decode", "count": 2, **group}]
    with pytest.raises(InputError) as exc:
        load_chip("poly", {"cores.groups": groups}, overrides_source="spec.toml")
    assert exc.value.field == field and allowed in str(exc.value) and "spec.toml" in str(exc.value)


def test_a_malformed_group_in_a_chip_file_exits_2(tmp_path, repo, run_cli):
    bad = tmp_path / "poly.toml"
    bad.write_text((repo / "chip_configs" / "poly.toml").read_text().replace("banks = { count = 12 }",
                                                                            "banks = { count = 2048 }"))
    code, out, err = run_cli("chips", "validate", bad)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert str(bad) in err and "cores.groups[1].banks.count, isa.bank_id_bits" in err and "2048" in err


def test_the_emulator_runs_each_core_with_its_groups_hardware():
    poly = load_chip("poly")
    dram = np.zeros(4096, dtype=np.uint8)
    src, dst = DramTensor(0, (64,), "fp32"), DramTensor(1024, (64,), "fp32")
    copy = CoreOp("copy", dst, (src,))
    # 13 consecutive banks: a prefill core has 16, a decode core 12
    prog = Program([[Mset(0, 13), Mvin(0, 0, 13, 0), Mvout(0, 2048, 13, 0), Mset(0, alloc=False), copy],
                    [], [], [copy], []], {"dram": Region(0, (4096,), "uint8")}, {}, dram_bytes=4096)
    res = emulator.run(prog, poly, dram)
    cs = res.counters
    assert cs.value("peak_allocated_bytes", core=0) == 13 * 16 * 1024
    # the core-op cost of each core's group: 64 elements at 4 and at 2 cycles
    assert cs.value("core_op_cycles", core=0) == 256 and cs.value("core_op_cycles", core=3) == 128
    assert len([r for r in cs.rows() if r["name"] == "rows_read" and r.get("core") == 3]) == 12
    bad = Program([[], [], [], [Mset(0, 13)], []], {"dram": Region(0, (4096,), "uint8")}, {}, dram_bytes=4096)
    with pytest.raises(ExecutionError, match="no 13 consecutive free banks.*of 12"):
        emulator.run(bad, poly, dram)
    relu = Program([[], [], [], [Mset(0, 1), Mset(1, 1), Relu(0, 1, 4, 8)], []],
                   {"dram": Region(0, (4096,), "uint8")}, {}, dram_bytes=4096)
    with pytest.raises(ExecutionError, match="chip poly.decode has no relu Ball"):
        emulator.run(relu, poly, dram)
    relu.cores[0], relu.cores[3] = relu.cores[3], []
    emulator.run(relu, poly, dram)  # a prefill core has the ReLU Ball


def test_placements_and_their_reasons():
    poly = load_chip("poly")
    places, reason = place(poly, "phase", 1, ["prefill", "decode"])
    assert reason == "" and [(p.role, p.cores, p.chip.name) for p in places] == [
        ("prefill", (0, 1, 2), "poly.prefill"), ("decode", (3, 4), "poly.decode")]
    assert spmd_chip(poly, 3)[0].name == "poly.prefill" and spmd_chip(poly, 4)[1].startswith(
        "4 workers span core groups prefill, decode of chip poly")
    same = load_chip("poly", {"cores.groups": []})
    assert spmd_chip(same, 5) == (same, "")
    _, reason = place(same, "phase", 1, ["prefill"])
    assert reason == "placement \"phase\" puts stage 'prefill' on the core group of that role, but chip poly has " \
                     "no core groups"
    with pytest.raises(Infeasible, match="no core groups"):
        lower_placed([("prefill", None, [])], Candidate(same, Mapping(placement="phase")))
    assert Mapping(placement="spmd").placement is None  # one spelling of the default, one identity


def test_a_group_may_have_its_own_config_of_a_ball():
    """Decode cores with their own matrix Ball (an 8x8 array: a quarter of the MACs a cycle):
    the emulator times each core's Matmul with its own group's latency formula."""
    poly = load_chip("poly")
    groups = [g.model_dump(mode="json") for g in poly.cores.groups]
    groups[1]["ball_configs"] = [{"kind": "matrix", "read_ports": 2, "write_ports": 4, "array_rows": 8,
                                  "array_cols": 8, "latency": {"ws": "M*N*K/4 + M*N", "os": "M*N*K/4 + M*N/2"}}]
    chip = load_chip("poly", {"cores.groups": groups})
    assert chip.group_chip(1).ball("matrix").latency["ws"] == "M*N*K/4 + M*N"
    assert chip.group_chip(0).ball("matrix") == poly.ball("matrix")
    product = [Mset(0, 1), Mset(1, 1), Mset(2, 4), Matmul(0, 1, 2, 16, 16, 16)]
    prog = Program([list(product), [], [], list(product), []], {"dram": Region(0, (4096,), "uint8")}, {},
                   dram_bytes=4096)
    cs = emulator.run(prog, chip, np.zeros(4096, dtype=np.uint8)).counters
    busy = [cs.total("ball_busy_cycles", core=c, ball="matrix") for c in (0, 3)]
    assert busy == [16 * 16 * 16 / 16 + 16 * 16, 16 * 16 * 16 / 4 + 16 * 16]
    groups[1]["ball_configs"][0]["kind"] = "relu"
    groups[1]["ball_configs"][0]["latency"] = {"default": "iter"}
    with pytest.raises(InputError) as exc:
        load_chip("poly", {"cores.groups": groups})
    assert exc.value.field == "chip.cores.groups[1].ball_configs[0].kind" and "allowed kinds: matrix" in str(exc.value)

