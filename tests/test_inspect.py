"""Look inside a candidate (the design guides' rows): `dse map`'s stated buffering agrees
with the plan a sweep's candidate is lowered with; `dse recipe show --after` lists the
lowering's temporaries; `dse show c<ID> --program / --banks` list the emitted program and
the bank lifetimes of the program the emulator ran."""

from __future__ import annotations

import json

import pytest

from dse.chips import load_chip
from dse.mapping import Mapping
from dse.plan.matmul import plan_matmul
from dse.plan.mapper import gemm_shape

# the goban geometry of the bank_geometry_ppa sweep (8 banks of 512 rows), on one GEMM
GOBAN_8X512 = ("--chip", "goban", "--recipe", "gemm", "--params", "m=128", "n=1024", "k=256", "--set", "banks.count=8",
               "--set", "banks.rows=512")


def test_map_states_its_buffering_and_agrees_with_the_plan_a_sweep_uses(cli):
    code, out, _ = cli("map", *GOBAN_8X512)  # default: double buffering, 2 x (A 1 + B 1 + C 4) = 12 > 8 banks
    assert code == 3
    assert "assumes double buffering: 2 buffers per operand" in out and "needs 12 banks" in out
    code, out, _ = cli("map", *GOBAN_8X512, "--buffering", "single", "--json")
    assert code == 0
    got = json.loads(out)
    assert got["assumes"].startswith("single buffering: 1 buffer per operand")
    assert got["mapping"]["double_buffer"] is False
    # the very tile a sweep's single-buffered candidate is planned with (`plan_matmul`)
    from dse.frontend import run_pipeline

    graph = run_pipeline("gemm", dict(m=128, n=1024, k=256), check=False).graph
    chip = load_chip("goban", {"banks.count": 8, "banks.rows": 512})
    by_op = {op.name: op for op in graph.ops}
    for row in got["ops"]:
        plan = plan_matmul(chip, Mapping(policy="search", double_buffer=False), gemm_shape(graph, by_op[row["op"]]))
        assert plan.feasible and (row["best"]["tm"], row["best"]["tn"], row["best"]["tk"]) == (plan.tm, plan.tn, plan.tk)
        assert plan_matmul(chip, Mapping(policy="search"), gemm_shape(graph, by_op[row["op"]])).feasible is False
    code, _, err = cli("map", *GOBAN_8X512, "--buffering", "triple")
    assert code == 2 and "--buffering" in err and "single, double" in err


def test_recipe_show_after_quantize_lists_pad_and_im2col_temporaries_with_their_bytes(cli):
    args = ("recipe", "show", "resnet_block", "--after", "quantize", "--param", "channels=16", "--param", "size=8")
    code, out, _ = cli(*args)
    assert code == 0
    # conv 3x3, padding 1, 16 channels at 8x8: the padded image 1x10x10x16 int8 in a buffer
    # whose last two dims pad to 16 (1*10*16*16 B); im2col's A is 64 positions x 144 taps*C
    assert "conv2d_acc    pad         of x_cl_int8: int8[1x10x10x16]  2,560 B" in out
    assert "conv2d_acc    im2col      of x_cl_int8: int8[64x144]  9,216 B" in out
    assert "lowering temporaries: 4 buffer(s), 23,552 bytes" in out
    code, out, _ = cli(*args, "--json")
    got = json.loads(out)
    temps = [(t["op"], t["kind"], t["bytes"]) for t in got["temporaries"]]
    assert temps == [("conv2d_acc", "pad", 2560), ("conv2d_acc", "im2col", 9216),
                     ("conv2d_1_acc", "pad", 2560), ("conv2d_1_acc", "im2col", 9216)]
    assert {o["name"]: o["temp_bytes"] for o in got["ops"]}["conv2d_acc"] == 2560 + 9216
