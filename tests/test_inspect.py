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

GOBAN_8X512 = ("--chip", "goban", "--recipe", "mlp", "--set", "banks.count=8", "--set", "banks.rows=512")


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

    graph = run_pipeline("mlp", {}, check=False).graph
    chip = load_chip("goban", {"banks.count": 8, "banks.rows": 512})
    by_op = {op.name: op for op in graph.ops}
    for row in got["ops"]:
        plan = plan_matmul(chip, Mapping(policy="search", double_buffer=False), gemm_shape(graph, by_op[row["op"]]))
        assert plan.feasible and (row["best"]["tm"], row["best"]["tn"], row["best"]["tk"]) == (plan.tm, plan.tn, plan.tk)
        assert plan_matmul(chip, Mapping(policy="search"), gemm_shape(graph, by_op[row["op"]])).feasible is False
    code, _, err = cli("map", *GOBAN_8X512, "--buffering", "triple")
    assert code == 2 and "--buffering" in err and "single, double" in err
