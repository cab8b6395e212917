"""Layout conversions split across workers (#19): a permute on the core is cut by output
rows (the source along the axis that output axis reads), in the plan (`split_plan`), so the
lowering emits the parts and the model charges the busiest; copies are exact, so results
stay bit for bit."""

import pytest

from emulator import CoreOp

from agreement import emulated_and_modelled
from dse.chips import load_chip
from dse.cost.core import GRAPH_OP
from dse.lower import lower
from dse.mapping import Candidate, Mapping
from dse.numerics.run import prepare_recipe
from dse.plan import split_plan
from dse.workload.graph import Op, OpCounts


def permute(dims):
    return Op("p", "permute", ["x"], ["y"], {"dims": list(dims)}, "x.permute", OpCounts())


def test_a_permute_is_cut_by_its_first_output_axis_of_at_least_two():
    # NCHW (1, 3, 4, 5) -> NHWC (1, 4, 5, 3): output axis 1 (H) reads source axis 2
    assert split_plan(GRAPH_OP, permute((0, 2, 3, 1)), (1, 4, 5, 3), [(1, 3, 4, 5)]) == (1, [2])
    # NHWC (2, 4, 5, 3) -> NCHW (2, 3, 4, 5): the batch axis, read from the source's batch
    assert split_plan(GRAPH_OP, permute((0, 3, 1, 2)), (2, 3, 4, 5), [(2, 4, 5, 3)]) == (0, [0])
    assert split_plan(GRAPH_OP, permute((1, 0)), (1, 1), [(1, 1)]) is None


@pytest.fixture(scope="module")
def block():
    return prepare_recipe("resnet_block", {"channels": 16, "size": 8})


def test_resnet_blocks_permutes_run_on_every_worker_bit_exact_and_the_model_follows(block):
    chip = load_chip("goban")
    permutes = [op.name for op in block.graph.ops if op.kind == "permute"]
    assert len(permutes) == 2
    per_op = {}
    for workers in (1, 4):
        cand = Candidate(chip, Mapping(workers=workers))
        low = lower(block.graph, cand, block.inputs)
        for core in low.program.cores:  # every worker runs a part of each permute
            assert sum(isinstance(i, CoreOp) and i.kind == GRAPH_OP and i.params["op"].kind == "permute"
                       for i in core) == 2
        rep, model, e = emulated_and_modelled(block, cand)
        per_op[workers] = e.set_index("op").loc[permutes, "cycles"].tolist()
    # (1, 16, 8, 8) int8 / int32 permutes: 1024 elements at 4 cycles, the busiest of 4 workers
    # 2 of the 8 rows (+ the barrier's cycle)
    assert per_op[1] == [4 * 1024] * 2
    assert per_op[4] == [4 * 1024 // 4 + 1] * 2
