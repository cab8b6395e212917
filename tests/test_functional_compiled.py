"""The compiled functional pass (`emulator._functional_core`) against the Python loop, on what
tests/test_timing_compiled.py leaves aside: the field check it does in C (the same first bad
instruction and error as `Layout.check_all`, numpy integers and bools among the fields), the
hot instructions really taking the compiled paths, matrix chains kept in C meeting chains the
Python handler leaves (a matmul it is handed between compiled ones, into the same C region),
and transfers of partial rows and odd strides into multi-column banks.
"""

from __future__ import annotations

import numpy as np
import pytest

from emulator import Fence, Matmul, Mset, Mvin, Mvout, Program, run
from emulator import compiled as core_choice
from emulator.errors import EmulatorError
from emulator.isa import Barrier
from emulator.machine import Machine
from test_timing_compiled import machines_alike
from test_timing_fast_paths import chip


def _errors(monkeypatch, prog, c):
    out = []
    for core in ("python", "compiled"):
        monkeypatch.setenv(core_choice.ENV, core)
        with pytest.raises(EmulatorError) as exc:
            run(prog, c)
        out.append(str(exc.value))
    return out


@pytest.mark.parametrize("bad, where", [
    (Mvin(1024, 0, 4), "field bank = 1024"),  # bank_id_bits 10
    (Mvin(0, 0, 1 << 34), "field iter"),
    (Mvin(0, -16, 4), "field addr = -16"),
    (Mvout(2, 1 << 39, 4), "field addr"),
    (Matmul(0, 1, 2, 4096, 16, 16), "field M = 4096"),  # matrix_dim_bits 12
    (Matmul(0, 1, 2, 16, 16, 16, c_row=np.int64(128)), "field c_row = 128"),  # a numpy int, too wide
    (Mset(0, 64), "field col = 64"),
    (Mvin(0, 0, np.int32(-1)), "field iter = -1"),
])
def test_the_field_check_finds_the_same_first_bad_instruction(monkeypatch, bad, where):
    """The first instruction of the program with a field that does not fit, wherever it is
    and however its value is typed, is the one the error names, on either core."""
    c = chip("toy")
    for at in (0, 7):
        body = [Mset(0, 1), Mset(1, 1), Mset(2, 4), Mvin(0, 0, 16), Mvin(1, 256, 16),
                Matmul(0, 1, 2, 16, 16, 16), Mvout(2, 4096, 64), Fence()]
        body.insert(at, bad)
        body.append(Mvin(1 << 20, 0, 1))  # a later bad one: never the one named
        errors = _errors(monkeypatch, Program([body], dram_bytes=1 << 16), c)
        assert errors[0] == errors[1]
        assert f"core 0, instruction #{at}" in errors[1] and where in errors[1]


def test_numpy_and_bool_fields_run_alike(monkeypatch):
    """Fields that are numpy integers or bools (they fit) leave their instructions to the
    handlers; the run is the Python loop's, bit for bit."""
    c = chip("toy")
    prog = Program([[Mset(0, 1), Mset(1, 1), Mset(2, 4), Mvin(0, np.int64(0), 16), Mvin(True, 256, np.int32(16)),
                     Matmul(0, 1, 2, np.int64(16), 16, 16), Matmul(0, 1, 2, 16, 16, 16, accumulate=True),
                     Mvout(2, 4096, 64, np.uint16(0)), Fence()]], dram_bytes=1 << 16)
    img = np.random.default_rng(3).integers(0, 256, 1 << 16, dtype=np.uint8)
    state = machines_alike(monkeypatch, c, prog, img)
    a = img[:256].view(np.int8).reshape(16, 16).astype(np.int32)
    b = img[256:512].view(np.int8).reshape(16, 16).astype(np.int32)
    got = np.frombuffer(state[1], np.uint8)[4096:4096 + 1024].view(np.int32).reshape(16, 16)
    assert np.array_equal(got, 2 * (a @ b.T))


def test_the_hot_instructions_take_the_compiled_paths(monkeypatch):
    """On the tiled matmul only the MSETs reach a Python handler, and the first matmul of
    its shape (which works out and checks the latency once): the fast paths are what the
    equality tests exercise, not the handlers twice."""
    from emulator.programs import matmul_inputs, tiled_matmul
    c = chip("goban")
    prog = tiled_matmul(64, 64, 64, 16, 16, 16, cores=2)
    _, _, vals = matmul_inputs(64, 64, 64, 16, 16, 16)
    monkeypatch.setenv(core_choice.ENV, "compiled")
    m = Machine(c, prog, prog.image(vals))
    calls: dict[str, int] = {}

    def counted(cls, handler):
        def call(*args):
            calls[cls.__name__] = calls.get(cls.__name__, 0) + 1
            return handler(*args)
        return call

    m.handlers = {cls: counted(cls, h) for cls, h in m.handlers.items()}
    m.run()
    assert calls == {"Mset": 20, "Matmul": 1}
    assert sum(len(r) for r in m.records) == prog.n_instructions


def test_compiled_chains_meet_the_handlers(monkeypatch):
    """Accumulating matmuls into one C region, some handed to the Python handler (a numpy
    int field), some compiled, in every order, then stored: each pass sees the other's
    pending products applied; the result is the exact sum, alike on both cores."""
    c = chip("toy")
    rng = np.random.default_rng(11)
    steps = 8
    img = rng.integers(0, 256, 1 << 16, dtype=np.uint8)
    want = np.zeros((16, 16), np.int64)
    body = [Mset(0, 1), Mset(1, 1), Mset(2, 4)]
    for k in range(steps):
        body += [Mvin(0, k * 512, 16), Mvin(1, k * 512 + 256, 16)]
        m_field = np.int64(16) if rng.random() < 0.5 else 16  # the handler or the compiled path
        body.append(Matmul(0, 1, 2, m_field, 16, 16, accumulate=k > 0))
        a = img[k * 512:k * 512 + 256].view(np.int8).reshape(16, 16).astype(np.int64)
        b = img[k * 512 + 256:k * 512 + 512].view(np.int8).reshape(16, 16).astype(np.int64)
        want += a @ b.T
        if k == steps // 2:
            body.append(Mvout(2, 32768, 64))  # a store in the middle applies what is pending
    body += [Mvout(2, 40960, 64), Fence()]
    state = machines_alike(monkeypatch, c, Program([body], dram_bytes=1 << 16), img)
    got = np.frombuffer(state[1], np.uint8)[40960:40960 + 1024].view(np.int32).reshape(16, 16)
    assert np.array_equal(got, want.astype(np.int32))


@pytest.mark.parametrize("a_col, b_col", [(1, 1), (2, 3), (3, 2), (3, 4)])
def test_operands_in_wide_banks_gather_alike(monkeypatch, a_col, b_col):
    """Matmuls reading A and B from multi-column banks (each operand row one or several runs
    of adjacent lines in an SRAM row, starting mid-row where K is not a whole row), at row
    offsets, accumulating into a four-column C, each shape twice (its first goes to the
    handler, the second to the compiled path): the exact products, and bank bytes, DRAM and
    counters the Python loop's."""
    c = chip("goban")
    rng = np.random.default_rng(a_col * 10 + b_col)
    img = rng.integers(0, 256, 1 << 14, dtype=np.uint8)
    M, N = 6, 48
    body = [Mset(0, a_col), Mset(1, b_col), Mset(2, 4), Mvin(0, 0, 64), Mvin(1, 1024, 256)]
    want = np.zeros((M, N), np.int64)
    for i, (K, a_row, b_row) in enumerate(((48, 1, 2), (48, 1, 2), (32, 0, 0), (32, 0, 0))):
        body.append(Matmul(0, 1, 2, M, N, K, accumulate=i > 0, a_row=a_row, b_row=b_row))
        a0, b0 = a_row * 16 * a_col, 1024 + b_row * 16 * b_col
        a = img[a0:a0 + M * K].view(np.int8).reshape(M, K).astype(np.int64)
        b = img[b0:b0 + N * K].view(np.int8).reshape(N, K).astype(np.int64)
        want += a @ b.T
    body += [Mvout(2, 8192, M * N * 4 // 16), Fence()]
    prog = Program([body], dram_bytes=1 << 14)
    state = machines_alike(monkeypatch, c, prog, img)
    got = np.frombuffer(state[1], np.uint8)[8192:8192 + M * N * 4].view(np.int32).reshape(M, N)
    assert np.array_equal(got, want.astype(np.int32))
    monkeypatch.setenv(core_choice.ENV, "compiled")
    m = Machine(c, prog, img.copy())
    handled = []
    matmul = m.handlers[Matmul]
    m.handlers = {**m.handlers, Matmul: lambda *args: handled.append(1) or matmul(*args)}
    m.run()
    assert len(handled) == 2  # the second of each shape was the compiled path's


@pytest.mark.parametrize("col", [1, 3])
@pytest.mark.parametrize("functional", [True, False])
def test_partial_rows_and_strides_move_alike(monkeypatch, col, functional):
    """MVIN and MVOUT of whole and partial bank rows, contiguous and strided (a stride below,
    at and above the row width), into and out of single- and three-column banks, across a
    barrier: bank bytes, DRAM, counters and records the Python loop's."""
    c = chip("goban")
    W = 16 * col
    body = [Mset(0, col), Mset(1, 4)]
    for it, stride in ((7, 0), (6, 0), (5, W + 8), (9, 100), (1, 0), (0, 0), (12, max(16, W - 16))):
        body += [Mvin(0, 64 * it, it, stride), Mvout(0, 8192 + 512 * it, it, stride if stride >= W else 0)]
    body += [Barrier(), Mvin(1, 256, 16), Mvout(1, 12288, 16, 80), Fence()]
    prog = Program([body, [Barrier()]], dram_bytes=1 << 14)
    img = np.random.default_rng(col).integers(0, 256, 1 << 14, dtype=np.uint8)
    machines_alike(monkeypatch, c, prog, img, functional=functional)


@pytest.mark.parametrize("core", ["python", "compiled"])
def test_a_run_machine_is_freed_without_the_collector(monkeypatch, core):
    """A machine is no reference cycle: dropping it frees it and its records at once, not at
    the cyclic collector's next pass (which walked every record, 35-60 ms a 100,000-instruction
    run)."""
    import gc
    import weakref
    from emulator.programs import matmul_inputs, tiled_matmul
    monkeypatch.setenv(core_choice.ENV, core)
    c = chip("goban")
    prog = tiled_matmul(64, 64, 64, 16, 16, 16, cores=2)
    _, _, vals = matmul_inputs(64, 64, 64, 16, 16, 16)
    was = gc.isenabled()
    gc.disable()
    try:
        m = Machine(c, prog, prog.image(vals))
        m.run()
        gone = weakref.ref(m)
        del m
        assert gone() is None
    finally:
        if was:
            gc.enable()


def test_the_issue_slot_set_is_a_set_of_cycles():
    """The compiled timing pass's issue slots (`_timing_sets.h`: open addressing, union-find
    pointers to the next free cycle) answer as the Python model's set does: the first cycle
    from the request not taken, then taken; cycles below a floor forgotten. Runs of taken
    cycles, requests inside them, growth past the table, and pruning."""
    from emulator._timing_core import take_slots
    rng = np.random.default_rng(7)
    for trial in range(8):
        requests, base = [], 0
        for _ in range(1500):
            if rng.random() < 0.01:
                base += int(rng.integers(0, 50))
                requests.append(("keep_from", base))
            else:
                requests.append(base + int(rng.integers(0, 40 if trial % 2 else 4000)))
        taken, want = set(), []
        for q in requests:
            if isinstance(q, tuple):
                taken = {x for x in taken if x >= q[1]}
                continue
            while q in taken:
                q += 1
            taken.add(q)
            want.append(q)
        assert take_slots(requests) == want


MATMUL_SHAPES = [(1, 16, 16), (3, 16, 48), (17, 32, 64), (16, 48, 96), (5, 16, 160)]


def _one_matmul(M: int, N: int, K: int):
    """One matmul of int8 operands covering the whole range (-128 x -128 included): its
    program, DRAM image and the exact product."""
    rng = np.random.default_rng(M * 1000 + N * 10 + K)
    a = rng.integers(-128, 128, (M, K), dtype=np.int8)
    b = rng.integers(-128, 128, (N, K), dtype=np.int8)
    a[0], b[:, 0] = -128, -128
    img = np.zeros(1 << 16, np.uint8)
    img[:M * K] = a.view(np.uint8).reshape(-1)
    img[16384:16384 + N * K] = b.view(np.uint8).reshape(-1)
    body = [Mset(0, 1), Mset(1, 1), Mset(2, 4), Mvin(0, 0, M * K // 16), Mvin(1, 16384, N * K // 16),
            Matmul(0, 1, 2, M, N, K), Mvout(2, 32768, M * N * 4 // 16), Fence()]
    return Program([body], dram_bytes=1 << 16), img, (a.astype(np.int64) @ b.T.astype(np.int64)).astype(np.int32)


@pytest.mark.parametrize("M, N, K", MATMUL_SHAPES)
def test_the_matrix_product_kernel_is_exact_on_odd_shapes(monkeypatch, M, N, K):
    """Rows in pairs with one left over, columns in fours, K below, at and past the kernel's
    32-term step: the exact products, on both cores."""
    prog, img, want = _one_matmul(M, N, K)
    state = machines_alike(monkeypatch, chip("toy"), prog, img)
    got = np.frombuffer(state[1], np.uint8)[32768:32768 + M * N * 4].view(np.int32).reshape(M, N)
    assert np.array_equal(got, want)


def test_the_avx2_kernel_gives_the_same_products():
    """With DSE_EMULATOR_NO_VNNI set (read when the compiled core loads: a fresh process) the
    AVX2 kernel runs: the same DRAM bytes as this process's kernel, for every shape above."""
    import os
    import subprocess
    import sys

    from emulator import _functional_core as fc

    script = ("import sys, numpy as np\nsys.path.insert(0, 'tests')\n"
              "from test_functional_compiled import MATMUL_SHAPES, _one_matmul\n"
              "from test_timing_fast_paths import chip\nfrom emulator import run, _functional_core as fc\n"
              "print(fc.kernel_in_use())\n"
              "for s in MATMUL_SHAPES:\n    prog, img, _ = _one_matmul(*s)\n"
              "    sys.stdout.write(run(prog, chip('toy'), img).dram[32768:40960].tobytes().hex() + '\\n')\n")
    outs = []
    for env in ({"DSE_EMULATOR_NO_VNNI": "1"}, {}):
        p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                           env={**os.environ, "DSE_EMULATOR_CORE": "compiled", **env},
                           cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        kernel, _, images = p.stdout.partition("\n")
        outs.append((kernel, images))
    best = fc.kernels()[0]
    assert [k for k, _ in outs] == ["avx2" if "avx2" in fc.kernels() else "generic", best]
    assert outs[0][1] == outs[1][1] and len(outs[0][1].splitlines()) == len(MATMUL_SHAPES)


# ---------------------------------------------------------------------- the product kernels
# `_functional_kernels.h`: vnni8 (vpdpbusd on A + 128 as u8 and B as s8, the bias taken off
# with 128 x B's row sums; K panels of 4096 terms, B in panels of 64 rows, blocks of 4 x 4),
# vnni16 (the previous kernel, vpdpwssd on operands widened to int16), avx2 (vpmaddwd: A's
# rows widened to int16 per K panel of 2048 terms, zeros past K; B's widened in registers;
# blocks of 4 x 3, B in panels of 48 rows), avx2_v1 (the previous AVX2 kernel) and generic (the
# int8 values back, plain sums). Each kernel this CPU runs against numpy's int64 product
# wrapped to int32.

def _wrapped(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a.astype(np.int64) @ b.T.astype(np.int64)).astype(np.int32)  # astype wraps mod 2**32


def _kernels_agree(a: np.ndarray, b: np.ndarray, row_bytes=None) -> None:
    from emulator import _functional_core as fc
    want = _wrapped(a, b)
    for name in fc.kernels():
        got = fc.matmul_nt(a, b, name, row_bytes=row_bytes)
        assert got.dtype == np.int32 and got.shape == want.shape
        assert np.array_equal(got, want), (name, a.shape, b.shape, row_bytes)


@pytest.mark.parametrize("seed", range(6))
def test_every_kernel_gives_the_exact_products_on_generated_shapes(seed):
    """M and N from 1 (rows and columns of a 4 x 4 block left over, columns across a panel of
    64), K below, at and past the 64-term step and the 4096-term panel, never a multiple of
    the vector width unless drawn so; values over the whole int8 range."""
    rng = np.random.default_rng(seed)
    for _ in range(6):
        M, N = int(rng.integers(1, 14)), int(rng.choice([rng.integers(1, 14), rng.integers(60, 140)]))
        K = int(rng.choice([rng.integers(1, 200), 64 * int(rng.integers(1, 5)), rng.integers(4090, 4300)]))
        a = rng.integers(-128, 128, (M, K), dtype=np.int8)
        b = rng.integers(-128, 128, (N, K), dtype=np.int8)
        _kernels_agree(a, b)


@pytest.mark.parametrize("av, bv", [(-128, -128), (-128, 127), (127, 127), (127, -128), (0, -128), (-1, 1)])
def test_every_kernel_is_exact_at_the_extremes(av, bv):
    """Operands at -128 and 127 (A's bias at its ends: 0 and 255 as u8; B's row sums at their
    largest), whole and in a checkerboard with random values."""
    rng = np.random.default_rng(abs(av * 300 + bv))
    for M, N, K in ((1, 1, 1), (4, 4, 64), (5, 7, 65), (6, 66, 4161)):
        a = np.full((M, K), av, np.int8)
        b = np.full((N, K), bv, np.int8)
        _kernels_agree(a, b)
        a[::2, 1::2] = rng.integers(-128, 128, a[::2, 1::2].shape, dtype=np.int8)
        b[1::2, ::3] = rng.integers(-128, 128, b[1::2, ::3].shape, dtype=np.int8)
        _kernels_agree(a, b)


@pytest.mark.parametrize("M, N, K", [(3, 2, 0), (1, 1, 1), (3, 2, 15), (5, 7, 16), (4, 3, 17), (7, 5, 33), (9, 50, 100),
                                     (2, 49, 2047), (6, 97, 2049), (13, 11, 4161)])
def test_every_kernel_is_exact_on_rows_longer_than_k(M, N, K):
    """Operand rows longer than K (a chain's buffers keep their width: `cap` bytes, K less),
    random bytes past K (none may join a sum); no term at all (zero sums); K below, at and past one vector step (16, 32,
    64 terms), past a K panel (2048, 4096); M and N past whole blocks (4 x 3, 4 x 4) and B's
    panels (48, 64 rows)."""
    rng = np.random.default_rng(M * N + K)
    a = rng.integers(-128, 128, (M, K), dtype=np.int8)
    b = rng.integers(-128, 128, (N, K), dtype=np.int8)
    a[-1], b[-1] = -128, -128  # the last row and column, computed in a block of repeats
    for extra in (0, 64, 192):
        _kernels_agree(a, b, row_bytes=(K + 63) // 64 * 64 + extra)


def test_matmul_nt_refuses_rows_shorter_than_k():
    from emulator import _functional_core as fc
    for row_bytes in (64, 136):  # below K; not a multiple of 64
        with pytest.raises(ValueError, match="row_bytes"):
            fc.matmul_nt(np.zeros((2, 100), np.int8), np.zeros((3, 100), np.int8), row_bytes=row_bytes)


def test_every_kernel_wraps_as_int32():
    """Sums past int32 wrap mod 2**32 (the Python model's int32 sums): 16384 x K reaches 2**31
    at K = 2**17; the sums here go round once or twice, upwards and downwards, across K
    panels, and B's row sums times 128 wrap too."""
    K = (1 << 18) + 77
    a = np.full((3, K), -128, np.int8)
    a[1] = 127
    a[2, ::2] = 127
    b = np.full((5, K), -128, np.int8)
    b[1] = 127
    b[3, 1::3] = 0
    want = _wrapped(a, b)
    assert abs(int(a[0].astype(np.int64) @ b[0].astype(np.int64))) > 1 << 32  # really past int32
    _kernels_agree(a, b)
    assert want[0, 0] == np.int32(((16384 * K + (1 << 31)) % (1 << 32)) - (1 << 31))


def test_use_kernel_names_a_kernel_this_cpu_runs():
    from emulator import _functional_core as fc
    assert fc.kernels()[-1] == "generic" and set(fc.kernels()) <= set(fc.KERNELS)
    with pytest.raises(ValueError, match="this CPU runs"):
        fc.use_kernel("nope")
    with pytest.raises(ValueError, match="this CPU runs"):
        fc.matmul_nt(np.zeros((1, 1), np.int8), np.zeros((1, 1), np.int8), "nope")
    was = fc.kernel_in_use()
    assert fc.use_kernel("generic") == was and fc.kernel_in_use() == "generic"
    fc.use_kernel(was)
    assert fc.kernel_in_use() == was


def _chain_program(rng, M: int, N: int, K: int, steps: int, restart_at) -> tuple:
    """A chain of `steps` matmuls into one C region (odd M allowed; accumulating but at the
    first step and at `restart_at`), C stored mid-chain (after step 3) and at the end (at
    40960): the program, a random DRAM image and the exact final C (int64)."""
    img = rng.integers(0, 256, 1 << 16, dtype=np.uint8)
    want = np.zeros((M, N), np.int64)
    body = [Mset(0, 1), Mset(1, 1), Mset(2, 4)]
    for k in range(steps):
        a_at, b_at = k * 4096, k * 4096 + 1024
        acc = k > 0 and k not in restart_at
        body += [Mvin(0, a_at, M * K // 16), Mvin(1, b_at, N * K // 16), Matmul(0, 1, 2, M, N, K, accumulate=acc)]
        prod = _wrapped(img[a_at:a_at + M * K].view(np.int8).reshape(M, K),
                        img[b_at:b_at + N * K].view(np.int8).reshape(N, K))
        want = want + prod if acc else prod.astype(np.int64)
        if k == 3:
            body.append(Mvout(2, 32768, M * N * 4 // 16))
    body += [Mvout(2, 40960, M * N * 4 // 16), Fence()]
    return Program([body], dram_bytes=1 << 16), img, want


def test_every_kernel_gives_the_same_dram_image(monkeypatch):
    """The emulator's chains on each kernel: accumulating matmuls (K 48 a step, 7 steps: 336
    terms, a 16-term tail), odd M, stored mid-chain and at the end: the exact sums, and the
    same bytes on every kernel."""
    from emulator import _functional_core as fc
    prog, img, want = _chain_program(np.random.default_rng(5), 5, 48, 48, 7, restart_at=())
    c = chip("toy")
    monkeypatch.setenv(core_choice.ENV, "compiled")
    images = []
    was = fc.kernel_in_use()
    try:
        for name in fc.kernels():
            fc.use_kernel(name)
            images.append(run(prog, c, img.copy()).dram.tobytes())
    finally:
        fc.use_kernel(was)
    assert all(im == images[0] for im in images)
    got = np.frombuffer(images[0], np.uint8)[40960:40960 + want.size * 4].view(np.int32).reshape(want.shape)
    assert np.array_equal(got, want.astype(np.int32))


# ---------------------------------------------------------------------- products on two threads
# A large product's output rows are split between the calling thread and one started for it
# (`product_split`): each sum is still one thread's, in its kernel's order, so the bits are
# the one-thread product's. `split=0` splits every product of two rows or more.

@pytest.mark.parametrize("seed", range(4))
def test_two_thread_product_equals_the_one_thread_product(seed):
    """Odd and tiny M and N (2 and 3 rows: a split inside a 4-row block; 5 to 13, 61 to 139),
    K across the 64-term step and the 4096-term panel, on every kernel; and a real chain's
    shape above the default threshold."""
    from emulator import _functional_core as fc
    rng = np.random.default_rng(100 + seed)
    shapes = [(int(rng.choice([2, 3, rng.integers(5, 14), rng.integers(61, 140)])),
               int(rng.choice([1, rng.integers(2, 14), rng.integers(60, 140)])),
               int(rng.choice([rng.integers(1, 200), rng.integers(4090, 4300)]))) for _ in range(5)]
    shapes.append((64, 256, 4096))  # 2**26 multiply-adds: split by default too
    for M, N, K in shapes:
        a = rng.integers(-128, 128, (M, K), dtype=np.int8)
        b = rng.integers(-128, 128, (N, K), dtype=np.int8)
        want = _wrapped(a, b)
        for name in fc.kernels():
            one = fc.matmul_nt(a, b, name, split=1 << 62)
            two = fc.matmul_nt(a, b, name, split=0)
            assert np.array_equal(one, want) and np.array_equal(two, one), (name, M, N, K)
    assert fc.split_threshold() <= 64 * 256 * 4096


def test_two_thread_chains_give_the_same_dram_image(monkeypatch):
    """The emulator's chains with every product split (threshold 0) and with none: accumulating
    and overwriting matmuls, odd M, stored mid-chain and at the end: the same bytes, and the
    exact sums."""
    from emulator import _functional_core as fc
    # the third step starts the sum again: accumulate off
    prog, img, want = _chain_program(np.random.default_rng(9), 7, 48, 48, 6, restart_at=(2,))
    c = chip("toy")
    monkeypatch.setenv(core_choice.ENV, "compiled")
    images = []
    was = fc.split_threshold()
    try:
        for macs in (0, 1 << 62):
            fc.split_threshold(macs)
            images.append(run(prog, c, img.copy()).dram.tobytes())
    finally:
        fc.split_threshold(was)
    assert images[0] == images[1]
    got = np.frombuffer(images[0], np.uint8)[40960:40960 + want.size * 4].view(np.int32).reshape(want.shape)
    assert np.array_equal(got, want.astype(np.int32))


def test_a_forked_child_splits_products_without_the_parents_helper():
    """The helper thread is the parent's: a child forked after it started (a sweep's pool
    worker) has none, takes every block itself, and gets the same product (no hang)."""
    import multiprocessing
    from emulator import _functional_core as fc
    rng = np.random.default_rng(7)
    a = rng.integers(-128, 128, (37, 300), dtype=np.int8)
    b = rng.integers(-128, 128, (29, 300), dtype=np.int8)
    want = fc.matmul_nt(a, b, split=0)  # the parent's helper running
    with multiprocessing.get_context("fork").Pool(1) as pool:
        got = pool.apply_async(fc.matmul_nt, (a, b), {"split": 0}).get(timeout=60)
    assert np.array_equal(got, want) and np.array_equal(want, _wrapped(a, b))
