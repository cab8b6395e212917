"""Each op checked at the BARRIER that closes it and the DRAM buffers given back during the run
(`dse.numerics.boundary`, ``emulate_graph(keep_image=False)``): the same verdict, per-op
records, cycles and counters as the whole image checked after the run; pages given back
really leave the resident set; a wrong emulated value is still caught at its boundary."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import emulator
from dse.chips import load_chip
from dse.mapping import Candidate, Mapping
from dse.numerics import compare, emulate_graph, verdict
from dse.numerics.boundary import BoundaryCheck, dram_touches
from dse.numerics.emitted import emit_graph
from dse.numerics.run import prepare_recipe
from dse.plan.memory import Dram, release_pages
from emulator import Barrier, CoreOp, DramTensor, Mset, Mvin, Mvout, Program, Region

# big enough that the attention's values and the MLP's span whole pages
LLAMA = dict(seq=64, vocab=64, dim=64, layers=1, heads=4, kv_heads=2)


@pytest.fixture(scope="module")
def llama():
    prep = prepare_recipe("llama_prefill", LLAMA)
    assert not prep.failed
    return prep


@pytest.mark.parametrize("workers", [1, 4])
def test_released_image_gives_the_kept_images_verdict_records_and_counters(llama, workers):
    cand = Candidate(load_chip("goban"), Mapping(workers=workers))
    inputs = list(llama.inputs)
    args = (llama.graph, cand, inputs, llama.expected, llama.tolerance, llama.reference_kind)
    kept = emulate_graph(*args, parts=llama.parts)
    given = emulate_graph(*args, parts=llama.parts, keep_image=False)
    assert kept.verdict.passed and kept.released_bytes == 0
    assert given.verdict.to_dict(ops=True) == kept.verdict.to_dict(ops=True)
    assert given.ops == kept.ops
    assert (given.cycles, given.counters) == (kept.cycles, kept.counters)
    # pages were given back: they read as zeros now, where the kept image holds values
    assert given.released_bytes > len(given.result.dram) // 2
    assert int((given.result.dram != kept.result.dram).sum()) > 0
    # the graph's outputs stay, bit for bit
    got, want = given.emitted.outputs(given.result.dram), kept.emitted.outputs(kept.result.dram)
    assert got.keys() == want.keys()
    assert all(got[n].tobytes() == want[n].tobytes() for n in got)


def _statm_resident() -> int:
    """This process's resident bytes (/proc/self/statm)."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_given_back_pages_leave_the_resident_set_and_read_as_zeros():
    dram = Dram()
    before_addr = dram.alloc(100)  # a neighbour sharing the first page
    addr = dram.alloc(64 << 20)
    after_addr = dram.alloc(100)  # and the last
    img = dram.image()
    img[:] = 7  # every page written: resident
    resident = _statm_resident()
    given = release_pages(img, addr, addr + (64 << 20))
    dropped = resident - _statm_resident()
    assert given >= (64 << 20) - 2 * 4096 and given % 4096 == 0
    assert dropped >= given - (1 << 20)  # the pages really went (a little noise from the allocator)
    assert not img[addr + 4096:addr + given].any()
    # the pages shared with the neighbours were kept, and so were the neighbours
    assert (img[before_addr:before_addr + 100] == 7).all() and (img[after_addr:after_addr + 100] == 7).all()
    assert (img[addr:-(-addr // 4096) * 4096] == 7).all()
    # written again, a page comes back
    img[addr + 4096] = 1
    assert img[addr + 4096] == 1
    # a copy is no mapping of its own: nothing is given back
    assert release_pages(img.copy(), 0, img.size) == 0


def test_a_wrong_emulated_value_is_caught_at_its_boundary(llama):
    """One core op of a mid-graph op made to write a constant: the check at its BARRIER names
    that op first, as the check of the kept final image does, with the same records."""
    chip = load_chip("goban")
    cand = Candidate(chip, Mapping(workers=4))
    graph, inputs = llama.graph, list(llama.inputs)
    reference = graph.trace(*inputs)
    verdicts = []
    for released in (False, True):
        low = emit_graph(graph, cand, inputs).lowereds[0][1]
        program = low.program
        ops = [op.name for op in graph.ops]
        output_of = {op.name: op.outputs[0] for op in graph.ops}
        # the first core op, past the first quarter of the graph, that writes its own op's output
        target = None
        for c, instrs in enumerate(program.cores):
            for pc, ins in enumerate(instrs):
                name = low.labels.get(id(ins))
                if type(ins) is CoreOp and ins.dst is not None and name in ops[len(ops) // 4:] \
                        and low.locs[output_of[name]].addr == ins.dst.addr and ins.dst.dtype == "int8":
                    target = (c, pc, name)
                    break
            if target:
                break
        c, pc, name = target
        ins = program.cores[c][pc]
        program.cores[c][pc] = CoreOp("fill", ins.dst, (), {"value": 77})
        if released:
            check = BoundaryCheck(graph, low, low.image, reference, chip)
            result = emulator.run(program, chip, low.image, in_place=True, boundary=check)
            v = verdict(graph, low, result.dram, check.finish(), reference, None, 0.05)
            assert check.released > 0
        else:
            result = emulator.run(program, chip, low.image)
            v = compare(graph, low, result.dram, reference, None, 0.05)
        verdicts.append(v)
    kept, given = verdicts
    assert not given.passed and not given.integer_bit_exact
    assert given.first_differing_op == kept.first_differing_op == name
    assert given.to_dict(ops=True) == kept.to_dict(ops=True)


def test_dram_touches_follow_the_machines_dma_geometry():
    """Hand-computed: an MVIN of 5 beats into a 2-column bank at stride 100 spans rows of
    2, 2 and 1 beats (2 strides and one beat past the address), in epoch 0; after a BARRIER
    an MVOUT (epoch 1, a write) and a core op reading one view and writing another."""
    chip = load_chip("goban")
    rb = chip.banks.row_bytes
    src = DramTensor(1000, (3, 4), "int32", (64, 4))
    dst = DramTensor(5000, (3, 4), "int8")
    program = Program([[Mset(0, 2), Mvin(0, 0, 5, 100), Barrier(), Mvout(0, 4096, 3), Mset(0, alloc=False),
                        CoreOp("copy", dst, (src,))]], {"dram": Region(0, (8192,), "uint8")}, {}, dram_bytes=8192)
    lo, hi, epoch, write = dram_touches(program, chip)
    assert lo.tolist() == [0, 4096, 1000, 5000]
    assert hi.tolist() == [2 * 100 + rb, 4096 + 3 * rb, 1000 + 2 * 64 + 3 * 4 + 4, 5012]
    assert epoch.tolist() == [0, 1, 1, 1]
    assert write.tolist() == [False, True, False, True]


def test_the_emulators_boundary_is_called_after_every_core_ran_each_epoch():
    """Two cores, each an MVOUT before and one after a BARRIER: at boundary 0 both first
    writes are in the image and neither second one; at boundary 1 all four."""
    chip = load_chip("goban")
    rb = chip.banks.row_bytes
    cores = [[Mset(0, 1), Mvin(0, 0, 1), Mvout(0, (1 + c) * 4096, 1), Barrier(), Mvout(0, (3 + c) * 4096, 1),
              Mset(0, alloc=False)] for c in range(2)]
    image = np.zeros(6 * 4096, dtype=np.uint8)
    image[:rb] = np.arange(1, rb + 1)
    row = image[:rb].copy()
    seen = []

    def boundary(epoch):
        seen.append((epoch, [bool((image[a:a + rb] == row).all()) for a in (4096, 8192, 12288, 16384)]))

    emulator.run(Program(cores, dram_bytes=image.size), chip, image, in_place=True, boundary=boundary)
    assert seen == [(0, [True, True, False, False]), (1, [True, True, True, True])]
