"""Emulator: functional model (bit-exact Balls, DMA, banks), encodings, errors, counters."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest
import torch

import emulator
from emulator import (Barrier, CoreOp, DramTensor, EncodeError, ExecutionError, Fence, Fp2Int, Im2col, Int2Fp, Matmul,
                      Mset, Mvin, Mvout, Mxfp2Int, Program, ProgramError, Region, Relu, Transpose, VecMatmul, decode,
                      encode, run)
from emulator.chip import chip_from_dict
from emulator.programs import matmul_inputs, tiled_matmul


CONFIGS = Path(__file__).resolve().parents[1] / "chip_configs"


def load(name: str, **overrides) -> emulator.ChipConfig:
    """A shipped chip config, with nested overrides spelled ``section__field=value``."""
    with open(CONFIGS / f"{name}.toml", "rb") as f:
        data = tomllib.load(f)
    for dotted, value in overrides.items():
        d = data
        *path, last = dotted.split("__")
        for p in path:
            d = d.setdefault(p, {})
        d[last] = value
    return chip_from_dict(data)


@pytest.fixture(scope="module")
def toy():
    return load("toy")


@pytest.fixture(scope="module")
def goban():
    return load("goban")


RNG = np.random.default_rng(1234)


def i8(*shape):
    return RNG.integers(-128, 128, shape, dtype=np.int8)


def wrap32(x: np.ndarray) -> np.ndarray:
    return ((x.astype(np.int64) + 2 ** 31) % 2 ** 32 - 2 ** 31).astype(np.int32)


# --------------------------------------------------------------------------- the emulator stands alone
def test_emulator_does_not_import_dse(repo):
    import subprocess
    import sys
    code = ("import sys, emulator, emulator.run, emulator.programs, emulator.coreops; "
            "assert not any(m == 'dse' or m.startswith('dse.') for m in sys.modules), 'dse imported'")
    p = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    for path in (repo / "emulator").glob("*.py"):
        assert "import dse" not in path.read_text() and "from dse" not in path.read_text(), path


# --------------------------------------------------------------------------- matrix Ball
def test_matmul_bitwise_with_accumulation_chain_and_wraparound(toy):
    M, N, K = 32, 16, 48
    a1, b1, a2, b2 = i8(M, K), i8(N, K), i8(M, K), i8(N, K)
    c0 = np.full((M, N), 2 ** 31 - 5000, dtype=np.int32)  # forces int32 wraparound
    c0[::2] = -(2 ** 31) + 7
    prog = Program([[
        Mset(0, 1), Mset(1, 1), Mset(2, 1), Mset(3, 1), Mset(4, 4),
        Mvin(0, 0, M * K // 16), Mvin(1, 4096, N * K // 16), Mvin(2, 8192, M * K // 16), Mvin(3, 12288, N * K // 16),
        Mvin(4, 16384, M * N * 4 // 16),
        Matmul(0, 1, 4, M, N, K, accumulate=True), Matmul(2, 3, 4, M, N, K, dataflow="os", accumulate=True),
        Mvout(4, 32768, M * N * 4 // 16), Fence(),
        Matmul(0, 1, 4, M, N, K), Mvout(4, 40960, M * N * 4 // 16),
    ]], inputs={"a1": Region(0, (M, K)), "b1": Region(4096, (N, K)), "a2": Region(8192, (M, K)),
                "b2": Region(12288, (N, K)), "c0": Region(16384, (M, N), "int32")},
        outputs={"acc": Region(32768, (M, N), "int32"), "fresh": Region(40960, (M, N), "int32")})
    r = run(prog, toy, {"a1": a1, "b1": b1, "a2": a2, "b2": b2, "c0": c0})
    ref = c0.astype(np.int64) + a1.astype(np.int64) @ b1.T.astype(np.int64) + a2.astype(np.int64) @ b2.T.astype(np.int64)
    assert np.array_equal(r.outputs["acc"], wrap32(ref))
    assert np.array_equal(r.outputs["fresh"], (a1.astype(np.int32) @ b1.T.astype(np.int32)))


def test_matmul_base_rows_and_multi_col_operands(toy):
    # A in a col-2 bank (32-byte rows = one A row of K = 32); B from base row 3; C at base row 2.
    M, N, K = 16, 32, 32
    a, bt = i8(M, K), i8(N, K)
    prog = Program([[
        Mset(0, 2), Mset(1, 1), Mset(2, 8),
        Mvin(0, 0, M * K // 16),
        Mvin(1, 1024 - 48, N * K // 16 + 3),  # three junk lines first, so B starts at row 3
        Matmul(0, 1, 2, M, N, K, b_row=3, c_row=2),
        Mvout(2, 8192, (M + 2) * N * 4 // 16),
    ]], inputs={"a": Region(0, (M, K)), "b": Region(1024, (N, K))}, outputs={"c": Region(8192, (M + 2, N), "int32")})
    r = run(prog, toy, {"a": a, "b": bt})
    # C's rows are 128 bytes (col 8): base row 2 is byte 256 = int32 element 64 = matrix row 2 (N = 32).
    assert np.array_equal(r.outputs["c"][2:], a.astype(np.int32) @ bt.T.astype(np.int32))
    assert not r.outputs["c"][:2].any()


def test_matmul_large_k_is_exact(toy):
    M, N, K = 16, 16, 2048  # total K > 1024: one fp32 product would not be exact for adversarial values
    a = np.full((M, K), -128, dtype=np.int8)
    bt = np.full((N, K), -128, dtype=np.int8)
    a[0, 0] = 127
    prog = Program([[Mset(0, 2), Mset(1, 2), Mset(2, 4), Mvin(0, 0, M * K // 16), Mvin(1, M * K, N * K // 16),
                     Matmul(0, 1, 2, M, N, K), Mvout(2, 2 * M * K, M * N // 4)]],
                   inputs={"a": Region(0, (M, K)), "b": Region(M * K, (N, K))},
                   outputs={"c": Region(2 * M * K, (M, N), "int32")})
    r = run(prog, toy, {"a": a, "b": bt})
    assert np.array_equal(r.outputs["c"], a.astype(np.int64) @ bt.T.astype(np.int64))


def test_functional_pass_runs_blas_on_one_thread(toy, monkeypatch):
    """The products run with BLAS on one thread (a busy machine's spinning thread pool made
    them 15x slower), and the caller's thread count is back once the run ends."""
    import threadpoolctl

    from emulator import balls

    def blas_threads():
        return {i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"}

    before, seen, real = blas_threads(), [], balls.int_product_of_pieces

    def spy(a, b):
        seen.append(blas_threads())
        return real(a, b)

    monkeypatch.setattr(balls, "int_product_of_pieces", spy)
    M, N, K = 16, 16, 64
    prog = Program([[Mset(0, 1), Mset(1, 1), Mset(2, 4), Mvin(0, 0, M * K // 16), Mvin(1, M * K, N * K // 16),
                     Matmul(0, 1, 2, M, N, K), Mvout(2, 2 * M * K, M * N // 4)]],
                   inputs={"a": Region(0, (M, K)), "b": Region(M * K, (N, K))},
                   outputs={"c": Region(2 * M * K, (M, N), "int32")})
    a, bt = np.ones((M, K), np.int8), np.full((N, K), 2, np.int8)
    r = run(prog, toy, {"a": a, "b": bt})
    assert np.array_equal(r.outputs["c"], np.full((M, N), 2 * K))
    assert seen == [{1}] and blas_threads() == before


@pytest.mark.parametrize("widths", [[16], [1024], [1040], [512, 512, 16], [4095, 4095, 4095, 3], [48] * 40])
def test_product_of_pieces_is_the_exact_product_of_the_joined_operands(widths):
    from emulator.balls import int_product_of_pieces

    rng = np.random.default_rng(len(widths) + sum(widths))
    M, N = 5, 3
    a = [rng.integers(-128, 128, (M, k), dtype=np.int8) for k in widths]
    b = [rng.integers(-128, 128, (N, k), dtype=np.int8) for k in widths]
    a[0][0], b[0][0] = -128, -128  # row 0 x row 0: the largest products, one sign
    a[-1][1], b[-1][1] = 127, -128
    exact = np.concatenate(a, axis=1).astype(np.int64) @ np.concatenate(b, axis=1).astype(np.int64).T
    got = int_product_of_pieces(a, b)
    assert got.dtype == np.int32 and np.array_equal(got, exact)


def test_product_of_pieces_wraps_like_the_int32_accumulator():
    from emulator.balls import int_product_of_pieces

    k = 140_000  # 128 * 128 * k > 2**31: the exact sum overflows int32
    a = [np.full((2, 4000), -128, dtype=np.int8) for _ in range(k // 4000)]
    b = [np.full((2, 4000), -128, dtype=np.int8) for _ in range(k // 4000)]
    b[0][1] = 127
    exact = np.concatenate(a, axis=1).astype(np.int64) @ np.concatenate(b, axis=1).astype(np.int64).T
    assert exact.max() > 2 ** 31  # the case is the one it says
    assert np.array_equal(int_product_of_pieces(a, b), wrap32(exact))


def test_tiled_matmul_program_bitwise_on_one_and_four_cores(toy, goban):
    for chip, cores, layout in ((toy, 1, "blocked"), (toy, 1, "rowmajor"), (goban, 4, "blocked"), (goban, 4, "rowmajor")):
        M, N, K, t = 64, 64, 64, (32, 16, 32)
        prog = tiled_matmul(M, N, K, *t, cores=cores, layout=layout)
        a, bt, vals = matmul_inputs(M, N, K, *t, layout=layout, seed=cores)
        for mode in ("serial", "overlapped"):
            r = run(prog, chip, vals, mode=mode)
            assert np.array_equal(r.outputs["C"], a.astype(np.int32) @ bt.T.astype(np.int32)), (chip.name, layout, mode)


# --------------------------------------------------------------------------- other Balls
def _one_ball(chip, instr, src: np.ndarray, out_bytes: int, *, extra=None, col_dst=1):
    """MVIN src (uint8 view) to bank 0, run `instr` writing bank 2, MVOUT out_bytes of bank 2."""
    raw = np.ascontiguousarray(src).reshape(-1).view(np.uint8)
    lines = -(-raw.size // 16)
    pad = np.zeros(lines * 16, np.uint8)
    pad[:raw.size] = raw
    prog_list = [Mset(0, 1), Mset(1, 1), Mset(2, col_dst), Mvin(0, 0, lines)]
    inputs = {"src": Region(0, (lines * 16,), "uint8")}
    vals = {"src": pad}
    if extra is not None:
        e = np.ascontiguousarray(extra).reshape(-1).view(np.uint8)
        el = -(-e.size // 16)
        ep = np.zeros(el * 16, np.uint8)
        ep[:e.size] = e
        prog_list.append(Mvin(1, 1 << 16, el))
        inputs["extra"] = Region(1 << 16, (el * 16,), "uint8")
        vals["extra"] = ep
    out_lines = -(-out_bytes // 16)
    prog_list += [instr, Mvout(2, 1 << 17, out_lines)]
    prog = Program([prog_list], inputs=inputs, outputs={"out": Region(1 << 17, (out_lines * 16,), "uint8")})
    return run(prog, chip, vals).outputs["out"][:out_bytes]


def test_vecmatmul_bitwise(toy):
    K = 40
    x, y = i8(K, 16), i8(K, 16)
    prog = Program([[Mset(0, 1), Mset(1, 1), Mset(2, 4), Mvin(0, 0, K), Mvin(1, 1024, K),
                     VecMatmul(0, 1, 2, K, accumulate=False), VecMatmul(0, 1, 2, K), Mvout(2, 4096, 64)]],
                   inputs={"x": Region(0, (K, 16)), "y": Region(1024, (K, 16))},
                   outputs={"c": Region(4096, (16, 16), "int32")})
    c = run(prog, toy, {"x": x, "y": y}).outputs["c"]
    assert np.array_equal(c, 2 * (x.T.astype(np.int32) @ y.astype(np.int32)))


def test_im2col_matches_torch_unfold(toy):
    H, k, s, p = 10, 3, 2, 1
    img = i8(H, H)
    out = (H + 2 * p - k) // s + 1
    width = 16  # ceil(9 / 16) * 16
    got = _one_ball(toy, Im2col(0, 2, H, k, s, p), img, out * out * width).view(np.int8).reshape(out * out, width)
    ref = torch.nn.functional.unfold(torch.from_numpy(img.astype(np.float32))[None, None], k, padding=p, stride=s)
    ref = ref[0].T.numpy().astype(np.int8)  # (out*out, k*k)
    assert np.array_equal(got[:, :k * k], ref) and not got[:, k * k:].any()


def test_transpose_8_and_32_bit_blocks(toy):
    x8 = RNG.integers(0, 256, (32, 16), dtype=np.uint8)
    got = _one_ball(toy, Transpose(0, 2, 32, 8), x8, 512).reshape(32, 16)
    assert np.array_equal(got, np.concatenate([x8[:16].T, x8[16:].T]))
    x32 = RNG.integers(0, 2 ** 32, (8, 4), dtype=np.uint32)
    got = _one_ball(toy, Transpose(0, 2, 8, 32), x32, 128).view(np.uint32).reshape(8, 4)
    assert np.array_equal(got, np.concatenate([x32[:4].T, x32[4:].T]))


def test_relu_int8_and_int32(toy):
    x8 = i8(48)
    assert np.array_equal(_one_ball(toy, Relu(0, 2, 3, 8), x8, 48).view(np.int8), np.maximum(x8, 0))
    x32 = RNG.integers(-2 ** 31, 2 ** 31, 12, dtype=np.int32)
    assert np.array_equal(_one_ball(toy, Relu(0, 2, 3, 32), x32, 48).view(np.int32), np.maximum(x32, 0))


def test_fp2int_round_half_even_saturate_like_torch(toy):
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 63.5, 64.49, 1e10, -1e10, 127.5, -128.5, 3.25, -7.75, 0.0, -0.0],
                 dtype=np.float32)
    scale = 2.0
    ref = torch.round(torch.from_numpy(x) * torch.tensor(scale, dtype=torch.float32)).clamp(-128, 127).to(torch.int8)
    got8 = _one_ball(toy, Fp2Int(0, 2, 4, scale, 8), x, 16).view(np.int8)
    assert np.array_equal(got8, ref.numpy())
    ref32 = torch.round(torch.from_numpy(x) * scale).clamp(-2 ** 31, 2 ** 31 - 1).double().numpy()
    got32 = _one_ball(toy, Fp2Int(0, 2, 4, scale, 32), x, 64).view(np.int32)
    assert np.array_equal(got32.astype(np.float64), np.clip(ref32, -2 ** 31, 2 ** 31 - 1))
    special = np.array([np.nan, np.inf, -np.inf, 2.5], dtype=np.float32)
    assert _one_ball(toy, Fp2Int(0, 2, 1, 1.0, 8), special, 4).view(np.int8).tolist() == [0, 127, -128, 2]


def test_fp2int_writes_a_partial_line_under_the_byte_mask(toy):
    # 1 line of fp32 -> 4 int8: the other 12 bytes of the destination line keep their value.
    x = np.array([1.0, -2.0, 3.0, 300.0], dtype=np.float32)
    prog = Program([[Mset(0, 1), Mset(2, 1), Mvin(2, 64, 1), Mvin(0, 0, 1), Fp2Int(0, 2, 1, 1.0, 8),
                     Mvout(2, 128, 1)]], inputs={"x": Region(0, (4,), "fp32"), "keep": Region(64, (16,), "uint8")},
                   outputs={"y": Region(128, (16,), "uint8")})
    keep = np.arange(100, 116, dtype=np.uint8)
    y = run(prog, toy, {"x": x, "keep": keep}).outputs["y"]
    assert y[:4].view(np.int8).tolist() == [1, -2, 3, 127] and np.array_equal(y[4:], keep[4:])


def test_int2fp_and_requantize_bitwise_like_torch(toy):
    x = np.array([2 ** 24 + 1, -(2 ** 24) - 3, 7, -9, 2 ** 31 - 1, -(2 ** 31), 100, 1000], dtype=np.int32)
    scale = 0.0123
    got = _one_ball(toy, Int2Fp(0, 2, 2, scale, 32, 32), x, 32).view(np.float32)
    ref = (torch.from_numpy(x).float() * torch.tensor(scale, dtype=torch.float32)).numpy()
    assert np.array_equal(got.view(np.uint32), ref.view(np.uint32))
    got8 = _one_ball(toy, Int2Fp(0, 2, 2, scale, 32, 8), x, 8).view(np.int8)
    ref8 = torch.round(torch.from_numpy(x).float() * torch.tensor(scale, dtype=torch.float32)).clamp(-128, 127)
    assert np.array_equal(got8, ref8.to(torch.int8).numpy())
    x8 = i8(16)
    got = _one_ball(toy, Int2Fp(0, 2, 1, 0.5, 8, 32), x8, 64).view(np.float32)
    assert np.array_equal(got, x8.astype(np.float32) * np.float32(0.5))


def test_mxfp2int_hand_computed(toy):
    # Block 0: values 0.5, 1.5, -6, 3 ... with scale 2**1; block 1 with scale 2**-1; block 2 NaN scale.
    codes = np.zeros((3, 32), dtype=np.uint8)
    codes[0, :4] = [0b0001, 0b0011, 0b1111, 0b0101]  # 0.5, 1.5, -6, 3
    codes[1, :4] = [0b0001, 0b0011, 0b0110, 0b1101]  # 0.5, 1.5, 4, -3
    codes[2, :2] = [0b0010, 0b0010]
    payload = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    scales = np.array([128, 126, 255], dtype=np.uint8)
    got = _one_ball(toy, Mxfp2Int(0, 1, 2, 3), payload, 96, extra=scales).view(np.int8).reshape(3, 32)
    assert got[0, :4].tolist() == [1, 3, -12, 6]
    assert got[1, :4].tolist() == [0, 1, 2, -2]  # 0.25, 0.75, 2, -1.5 (half to even)
    assert not got[2].any() and not got[0, 4:].any()


def test_mxfp2int_rounding_is_half_to_even():
    from emulator.balls import mxfp2int
    codes = np.zeros((1, 32), dtype=np.uint8)
    codes[0, :4] = [0b0001, 0b0011, 0b0101, 0b0111]  # 0.5 1.5 3 6
    payload = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    assert mxfp2int(payload, np.array([127], np.uint8))[0, :4].tolist() == [0, 2, 3, 6]
    assert mxfp2int(payload, np.array([126], np.uint8))[0, :4].tolist() == [0, 1, 2, 3]  # 0.25 .75 1.5 3


# --------------------------------------------------------------------------- DMA and banks
def test_strided_dma_into_a_multi_col_bank_and_partial_row(toy):
    # Rows of 48 bytes (col 3) taken every 80 bytes; 7 beats = 2 full rows + 1 beat.
    img = RNG.integers(0, 256, 4096, dtype=np.uint8)
    prog = Program([[Mset(5, 3), Mvin(5, 16, 7, 80), Mvout(5, 2048, 7, 0), Mvout(5, 3072, 7, 100)]],
                   outputs={"flat": Region(2048, (112,), "uint8"), "spread": Region(3072, (248,), "uint8")})
    r = run(prog, toy, img)
    expect = np.concatenate([img[16:64], img[96:144], img[176:192]])
    assert np.array_equal(r.outputs["flat"], expect)
    spread = r.outputs["spread"]
    assert np.array_equal(spread[:48], expect[:48]) and np.array_equal(spread[100:148], expect[48:96])
    assert np.array_equal(spread[200:216], expect[96:])
    # beat i of a col-3 bank lands in physical bank i mod 3, row i // 3
    assert [r.counters.value("rows_written", core=0, bank=p) for p in range(4)] == [3, 2, 2, 0]
    assert r.counters.value("rows_read", core=0, bank=0) == 6


def test_bank_contents_survive_free_and_first_fit_reuse(toy):
    # bank 0 -> physical 0-1, bank 1 -> 2; free 0; bank 2 -> 0, bank 3 -> 1; free 1; bank 4 -> 2-4
    prog = Program([[Mset(0, 2), Mset(1, 1), Mvin(1, 0, 1), Mset(0, alloc=False), Mset(2, 1), Mset(3, 1),
                     Mset(1, alloc=False), Mset(4, 3), Mvout(3, 64, 1), Mvout(4, 128, 1)]],
                   inputs={"x": Region(0, (16,), "uint8")},
                   outputs={"y": Region(64, (16,), "uint8"), "z": Region(128, (16,), "uint8")})
    x = np.arange(1, 17, dtype=np.uint8)
    r = run(prog, toy, {"x": x})
    assert not r.outputs["y"].any()
    assert np.array_equal(r.outputs["z"], x)  # bank 4's line 0 is physical bank 2's row 0, which kept x
    assert r.counters.value("peak_allocated_rows", core=0) == 5 * 1024
    assert r.counters.value("peak_allocated_bytes", core=0) == 5 * 1024 * 16


def test_shared_memory_across_cores_and_a_barrier(goban):
    x = RNG.integers(0, 256, (16, 16), dtype=np.uint8)
    shared = goban.shared_memory.first_bank_id + 5

    def build(core):
        if core == 0:
            return [Mvin(shared, 0, 16), Barrier()]
        return [Barrier(), Mset(0, 1), Transpose(shared, 0, 16, 8), Mvout(0, 256 * core, 16), Fence()]

    prog = Program.spmd(build, 4, inputs={"x": Region(0, (16, 16), "uint8")},
                        outputs={f"y{c}": Region(256 * c, (16, 16), "uint8") for c in (1, 2, 3)})
    for mode in ("serial", "overlapped"):
        r = run(prog, goban, {"x": x}, mode=mode)
        for c in (1, 2, 3):
            assert np.array_equal(r.outputs[f"y{c}"], x.T)
        assert r.counters.value("rows_written", tile=0, bank="shared 5") == 16
        assert r.counters.value("rows_read", tile=0, bank="shared 5") == 48


# --------------------------------------------------------------------------- core ops
def test_core_ops_run_with_torchs_pool_on_one_thread(toy, monkeypatch):
    """The run limits OpenMP (torch's pool) to one thread, as BLAS: a core op sees one, and
    the caller's count is back afterwards (idle pool threads spun a core while the run went on)."""
    import emulator.coreops as co
    seen = []

    def probe(srcs, params):
        seen.append(torch.get_num_threads())
        return srcs[0]

    monkeypatch.setitem(co.KINDS, "probe", probe)
    monkeypatch.setitem(co.ARITY, "probe", (1, 1))
    was = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        prog = Program([[CoreOp("probe", DramTensor(64, (4,), "fp32"), (DramTensor(0, (4,), "fp32"),))]],
                       dram_bytes=128)
        run(prog, toy)
        assert seen == [1] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(was)


def test_core_ops_pack_cast_softmax_absmax_and_quantize(toy):
    x = RNG.standard_normal((4, 24)).astype(np.float32) * 3
    ints = RNG.integers(-2 ** 31, 2 ** 31, (4, 8), dtype=np.int32)
    prog = Program([[
        # packing: the 4 x 8 top-left block of a 4 x 24 fp32 matrix into a dense 4 x 8
        CoreOp("copy", DramTensor(2048, (4, 8), "fp32"), (DramTensor(0, (4, 8), "fp32", (96, 4)),)),
        CoreOp("softmax", DramTensor(2304, (4, 24), "fp32"), (DramTensor(0, (4, 24), "fp32"),)),
        CoreOp("absmax", DramTensor(2816, (4,), "fp32"), (DramTensor(0, (4, 24), "fp32"),), {"axis": 1}),
        CoreOp("quant_scale", DramTensor(2832, (), "fp32"), (DramTensor(0, (4, 24), "fp32"),)),
        CoreOp("cast", DramTensor(2848, (4, 24), "int8"), (DramTensor(0, (4, 24), "fp32"),)),
        CoreOp("add", DramTensor(3072, (4, 8), "int32"), (DramTensor(1024, (4, 8), "int32"),) * 2),
        CoreOp("layernorm", DramTensor(3328, (4, 24), "fp32"), (DramTensor(0, (4, 24), "fp32"),), elements=500),
    ]], inputs={"x": Region(0, (4, 24), "fp32"), "i": Region(1024, (4, 8), "int32")},
        outputs={"packed": Region(2048, (4, 8), "fp32"), "sm": Region(2304, (4, 24), "fp32"),
                 "amax": Region(2816, (4,), "fp32"), "scale": Region(2832, (), "fp32"),
                 "cast": Region(2848, (4, 24), "int8"), "sum": Region(3072, (4, 8), "int32"),
                 "ln": Region(3328, (4, 24), "fp32")})
    r = run(prog, toy, {"x": x, "i": ints})
    o = r.outputs
    t = torch.from_numpy(x)
    assert np.array_equal(o["packed"], x[:, :8])
    np.testing.assert_allclose(o["sm"], torch.softmax(t, -1).numpy(), rtol=1e-6, atol=1e-7)
    assert np.array_equal(o["amax"], np.abs(x).max(axis=1))
    assert o["scale"] == np.float32(127) / np.abs(x).max()
    assert np.array_equal(o["cast"], torch.round(t).clamp(-128, 127).to(torch.int8).numpy())
    assert np.array_equal(o["sum"], wrap32(2 * ints.astype(np.int64)))
    np.testing.assert_allclose(o["ln"], torch.nn.functional.layer_norm(t, (24,)).numpy(), rtol=1e-5, atol=1e-5)
    c = r.counters
    assert c.value("core_ops", core=0) == 7
    per = toy.cores.op_cycles_per_element
    elements = 32 + 96 + 96 + 96 + 96 + 32 + 500
    assert c.value("core_op_elements", core=0) == elements
    assert c.value("core_op_cycles", core=0) == sum(int(np.ceil(n * per)) for n in (32, 96, 96, 96, 96, 32, 500))
    assert c.value("cycles", core=0) == c.value("core_op_cycles", core=0)


def test_core_op_cycles_per_kind_come_from_the_config():
    chip = load("toy", cores__op_cycles={"softmax": 10.0})
    prog = Program([[CoreOp("softmax", DramTensor(0, (8,), "fp32"), (DramTensor(0, (8,), "fp32"),)),
                     CoreOp("relu", DramTensor(0, (8,), "fp32"), (DramTensor(0, (8,), "fp32"),))]], dram_bytes=64)
    assert run(prog, chip, None).cycles == 80 + 32


# --------------------------------------------------------------------------- encodings
ALL = [
    Mset(3, 4), Mset(3, alloc=False), Mvin(7, 0x7F_FFFF_FFF0, 12345, 4096), Mvout(2, 64, 1, 0), Fence(), Barrier(),
    Matmul(1, 2, 3, 4095, 16, 4080, "os", True, 127, 5, 9), VecMatmul(4, 5, 6, 77, False), Im2col(1, 2, 34, 7, 3, 3),
    Transpose(1, 2, 64, 32), Relu(9, 9, 5, 8), Fp2Int(1, 2, 3, 0.0078125, 8), Int2Fp(3, 4, 5, -1.5e-3, 8, 32),
    Mxfp2Int(1, 2, 3, 4), Mvin(40, 0, 1),
]


@pytest.mark.parametrize("ins", ALL, ids=lambda i: i.op)
def test_encode_decode_round_trip(toy, ins):
    f, rs1, rs2 = encode(ins, toy)
    assert 0 <= rs1 < 2 ** 64 and 0 <= rs2 < 2 ** 64
    assert decode(f, rs1, rs2, toy) == ins


def test_program_encodes_to_words_and_back(toy):
    prog = tiled_matmul(32, 32, 32, 16, 16, 16, cores=1)
    words = prog.encode(toy)
    assert words[0].shape == (prog.n_instructions, 3) and words[0].dtype == np.uint64
    back = Program.decode(words, toy, inputs=prog.inputs, outputs=prog.outputs)
    assert back.cores == prog.cores
    _, _, vals = matmul_inputs(32, 32, 32, 16, 16, 16)
    assert np.array_equal(run(back, toy, vals).outputs["C"], run(prog, toy, vals).outputs["C"])


def test_encoding_bit_positions(toy):
    f, rs1, rs2 = encode(Mvin(3, 0x1000, 16, 512), toy)
    assert f == 33 and rs1 == (3 << 20) | (16 << 30) and rs2 == 0x1000 | (512 << 39)
    f, rs1, rs2 = encode(Matmul(1, 2, 3, 16, 32, 48, "ws", True, 1, 2, 3), toy)
    assert f == 65 and rs1 == 1 | (2 << 10) | (3 << 20)
    assert rs2 == 16 | (32 << 12) | (48 << 24) | (1 << 36) | (1 << 37) | (1 << 38) | (2 << 45) | (3 << 52)
    f, rs1, rs2 = encode(Fp2Int(1, 2, 3, 1.0, 8), toy)
    assert rs2 == 0x3F800000 | (8 << 32)


@pytest.mark.parametrize("ins, field, width", [
    (Mvin(0, 1 << 39, 1), "addr", 39),
    (Mvin(0, 0, 1 << 34), "iter", 34),
    (Mvin(1024, 0, 1), "bank", 10),
    (Mvin(0, 0, 1, 1 << 19), "stride", 19),
    (Matmul(0, 1, 2, 4096, 16, 16), "M", 12),
    (Matmul(0, 1, 2, 16, 16, 16, a_row=128), "a_row", 7),
    (Im2col(0, 1, 256, 3), "size", 8),
    (Mset(0, 64), "col", 6),
    (Relu(0, 1, -1), "iter", 34),
])
def test_field_overflow_names_instruction_field_value_width(toy, ins, field, width):
    with pytest.raises(EncodeError) as e:
        encode(ins, toy)
    assert e.value.instruction == ins.op and e.value.field == field and e.value.width == width
    assert ins.op in str(e.value) and field in str(e.value) and f"{width}-bit" in str(e.value)
    prog = Program([[Mset(0, 1), Mset(1, 1), Mset(2, 4), ins]], dram_bytes=64)
    with pytest.raises(EncodeError, match=rf"core 0, instruction #3: {ins.op}: field {field}"):
        run(prog, toy, None)


def test_narrow_config_fields_are_enforced():
    chip = load("toy", isa__matrix_dim_bits=6)
    with pytest.raises(EncodeError, match="field N = 64 does not fit its 6-bit field"):
        encode(Matmul(0, 1, 2, 16, 64, 16), chip)
    with pytest.raises(EncodeError, match="core op"):
        encode(CoreOp("relu", None), chip)


# --------------------------------------------------------------------------- errors
@pytest.mark.parametrize("program, message", [
    ([Mvin(0, 0, 1)], r"core 0, instruction #0 MVIN\(bank=0.*destination bank 0 is not allocated"),
    ([Mset(1, 1), Mvout(0, 0, 1)], r"core 0, instruction #1 MVOUT\(bank=0.*source bank 0 is not allocated"),
    ([Mset(1, 1), Relu(1, 2, 1)], r"#1 RELU\(src=1, dst=2, iter=1, bits=8\): destination bank 2 is not allocated"),
    ([Mset(0, 1), Mvout(0, 0, 1025)], r"instruction #1 MVOUT.*1025 beats need 1025 rows of bank 0, which has 1024"),
    ([Mset(0, 1), Mvin(0, 4000, 16)], r"instruction #1 MVIN.*DRAM bytes \[0xfa0, 0x10a0\) are outside the 4096-byte"),
    ([Mset(0, 1), Mset(1, 1), Mset(2, 4), Matmul(0, 1, 2, 16, 16, 1024, a_row=64)],
     r"#3 MATMUL.*A needs rows 64..1087 of bank 0, which has 1024 addressable rows"),
    ([Mset(0, 1), Mset(1, 1), Mset(2, 1), Matmul(0, 1, 2, 16, 16, 16)], r"C bank 2 has col 1"),
    ([Mset(0, 1), Mset(1, 1), Mset(2, 4), Matmul(0, 1, 2, 16, 8, 16)], r"N a multiple of 16"),
    ([Mvin(40, 0, 1)], r"bank id 40 is neither a virtual bank \(0..15\) \(this chip has no shared memory\)"),
    ([Mset(0, 16), Mset(1, 1)], r"#1 MSET.*no 1 consecutive free banks \(16 of 16 in use"),
    ([Mset(0, 1), Mset(0, 1)], r"bank 0 is already allocated"),
    ([Mset(0, alloc=False)], r"bank 0 is not allocated"),
    ([Mset(0, 1), Transpose(0, 0, 8, 8)], r"8 lines is not a whole number of 16x16 blocks"),
    ([Mset(0, 1), Im2col(0, 0, 35, 3)], r"size <= 34"),
    ([Mset(0, 1), Mvout(0, 0, 2, 8)], r"stride 8 is below the 16-byte bank row"),
    ([CoreOp("softmax", DramTensor(4090, (4,), "fp32"), (DramTensor(0, (4,), "fp32"),))],
     r"#0 CORE.*outside the 4096-byte image"),
    ([CoreOp("nope", None)], r"unknown core op kind 'nope'"),
])
def test_execution_errors_name_core_instruction_and_operands(toy, program, message):
    with pytest.raises(ExecutionError, match=message) as e:
        run(Program([program], dram_bytes=4096), toy, None)
    assert e.value.core == 0


def test_missing_ball_and_program_errors(goban, toy):
    with pytest.raises(ExecutionError, match="chip goban has no relu Ball"):
        run(Program([[Mset(0, 1), Relu(0, 0, 1)]], dram_bytes=64), goban, None)
    with pytest.raises(ProgramError, match="instruction lists for 2 cores, chip toy has 1"):
        run(Program([[], []], dram_bytes=64), toy, None)
    with pytest.raises(ProgramError, match="different numbers of barriers"):
        run(Program([[Barrier()], [], [], []], dram_bytes=64), goban, None)
    with pytest.raises(ProgramError, match="input 'x' has shape"):
        run(Program([[]], inputs={"x": Region(0, (4,))}), toy, {"x": np.zeros(5, np.int8)})


# --------------------------------------------------------------------------- counters and traces
def test_counters_are_documented_and_consistent(toy):
    M = N = K = 32
    prog = tiled_matmul(M, N, K, 16, 16, 16)
    a, bt, vals = matmul_inputs(M, N, K, 16, 16, 16)
    r = run(prog, toy, vals)
    c = r.counters
    for row in c:
        assert row.unit and row.scope in ("chip", "core", "ball", "bank", "channel", "host") and row.event
    assert c.value("cycles") == r.cycles == c.value("cycles", core=0)
    assert c.value("busy_cycles", core=0) + c.value("idle_cycles", core=0) == r.cycles
    assert c.value("instructions", core=0) == prog.n_instructions
    assert c.value("ball_ops", core=0, ball="matrix") == 8
    assert c.value("ball_busy_cycles", core=0, ball="matrix") == 8 * (16 ** 3 // 16 + 16 * 16)
    assert c.value("dma_bytes_in", core=0) == 16 * 256 and c.value("dma_bytes_out", core=0) == 4 * 1024
    # blocked A/B tiles are one burst each; a C tile is 16 rows of 64 bytes, 2048 bytes apart
    assert c.value("dma_transfers_in", core=0) == 16 and c.value("dma_bursts", core=0) == 16 + 4 * 16
    assert c.total("rows_written") == 16 * 16 + 8 * 64 and c.total("rows_read") == 16 * 16 + 4 * 64 + 4 * 64
    assert c.value("host_exec_seconds") >= 0 and c.value("host_setup_seconds") >= 0
    assert {"name", "value", "unit", "scope", "event"} <= set(c.rows()[0])


def test_traces_in_the_framework_shapes(toy, tmp_path):
    import json
    prog = Program([[Mset(0, 1), Mset(1, 4), Mvin(0, 0, 16), Relu(0, 1, 16), Mvout(1, 256, 16)]],
                   dram_bytes=512)
    r = run(prog, toy, None, trace=True)
    assert run(prog, toy, None).trace is None
    ball = [e for e in r.trace.pmctrace if e["event"] == "ball"]
    assert ball == [{"event": "ball", "core": 0, "ball_id": 4, "rob_id": 3, "elapsed": 16}]
    assert [e["event"] for e in r.trace.pmctrace] == ["load", "ball", "store"]
    issues = [e for e in r.trace.itrace if e["event"] == "issue"]
    assert [e["op"] for e in issues] == ["MSET", "MSET", "MVIN", "RELU", "MVOUT"]
    assert {"event", "core", "pc", "bank", "col", "row", "rows", "cycle"} <= set(r.trace.mtrace[0])
    paths = r.trace.write(tmp_path)
    lines = paths["pmctrace"].read_text().splitlines()
    assert json.loads(lines[1])["event"] == "ball"


def test_functional_off_keeps_checks_and_timing(toy):
    prog = tiled_matmul(32, 32, 32, 16, 16, 16)
    _, _, vals = matmul_inputs(32, 32, 32, 16, 16, 16)
    on, off = run(prog, toy, vals), run(prog, toy, vals, functional=False)
    assert on.cycles == off.cycles
    assert [x.value for x in on.counters if x.scope != "host"] == [x.value for x in off.counters if x.scope != "host"]
    with pytest.raises(ExecutionError):
        run(Program([[Mvin(0, 0, 1)]], dram_bytes=64), toy, None, functional=False)


def test_a_run_in_place_writes_the_image_it_is_given_and_counts_the_same(toy):
    M, N, K, t = 64, 64, 64, (32, 16, 32)
    prog = tiled_matmul(M, N, K, *t, cores=1, layout="rowmajor")
    _, _, vals = matmul_inputs(M, N, K, *t, layout="rowmajor", seed=3)
    image = prog.image(vals)
    initial = image.copy()
    copied = run(prog, toy, image)
    assert np.array_equal(image, initial) and copied.dram is not image  # the default never writes its input
    in_place = run(prog, toy, image, in_place=True)
    assert in_place.dram is image and not np.array_equal(image, initial)
    assert np.array_equal(in_place.dram, copied.dram)
    assert in_place.cycles == copied.cycles
    assert [r for r in in_place.counters.rows() if not r["name"].startswith("host_")] == \
        [r for r in copied.counters.rows() if not r["name"].startswith("host_")]
    for bad in (bytes(initial), initial.astype(np.int16), initial[::2]):
        with pytest.raises(ProgramError, match="in_place=True takes the DRAM image itself"):
            run(prog, toy, bad, in_place=True)
