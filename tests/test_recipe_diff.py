"""`dse recipe diff A B`: two dump folders compared byte for byte (per file same / different
/ only in A / only in B; a text dump's first differing line, an array's first differing
index and largest absolute difference; exit 0 identical, 1 different, 2 bad input); and a
second `dse recipe check` keeping the first's dumps (its own go to DIR.2)."""

from __future__ import annotations

import json

import numpy as np

GEMM = ("gemm", "--param", "m=16", "--param", "n=16")


def test_a_second_check_keeps_the_first_dumps_and_diff_finds_them_identical(cli, tmp_path):
    out = tmp_path / "dumps"
    code, first, _ = cli("recipe", "check", *GEMM, "--param", "k=16", "--out", out)
    assert code == 0 and f"dumps: {out}/ (01-import.txt, 02-permute.txt, 03-quantize.txt)" in first
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    code, second, _ = cli("recipe", "check", *GEMM, "--param", "k=16", "--out", out)
    assert code == 0 and second.splitlines()[0] == (f"{out}/ holds an earlier check's dumps (kept; --force "
                                                    f"overwrites them): this check's go to {out}.2/")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # untouched
    code, same, _ = cli("recipe", "diff", out, f"{out}.2")
    assert code == 0, same
    assert same.splitlines()[2:] == ["same       01-import.txt", "same       02-permute.txt",
                                     "same       03-quantize.txt",
                                     "3 files: 3 same, 0 different, 0 only in A, 0 only in B; identical"]
    # Another shape (k=8) into the same folder: DIR.3; the dumps differ from line 2 on.
    code, third, _ = cli("recipe", "check", *GEMM, "--param", "k=8", "--out", out)
    assert code == 0 and f"go to {out}.3/" in third
    code, text, _ = cli("recipe", "diff", out, f"{out}.3", "--json")
    report = json.loads(text)
    assert code == 1 and not report["identical"] and report["counts"]["different"] == 3
    assert report["files"][0] == {"path": "01-import.txt", "status": "different",
                                  "detail": "line 2: A 'input  x: float32[16, 16]' B 'input  x: float32[16, 8]'"}
    # --force: written in place (the k=8 dumps over the first folder's)
    code, forced, _ = cli("recipe", "check", *GEMM, "--param", "k=8", "--out", out, "--force")
    assert code == 0 and "holds an earlier" not in forced and f"dumps: {out}/ " in forced
    assert cli("recipe", "diff", out, f"{out}.3")[0] == 0
    assert not (tmp_path / "dumps.4").exists()


def test_diff_names_each_file_and_where_arrays_and_bytes_differ(cli, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    (a / "inputs").mkdir(parents=True)
    (b / "inputs").mkdir(parents=True)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    y = x.copy()
    y[1, 2] += 0.5  # 6.0 -> 6.5
    y[2, 3] -= 2.0  # 11.0 -> 9.0: the largest gap
    np.save(a / "inputs" / "x.npy", x)
    np.save(b / "inputs" / "x.npy", y)
    q = np.array([[1, -3], [127, -128]], dtype=np.int8)
    r = q.copy()
    r[1, 1] = 127  # -128 -> 127: 255 apart, counted in int64, not wrapped in int8
    np.save(a / "q.npy", q)
    np.save(b / "q.npy", r)
    np.save(a / "shape.npy", np.zeros((2, 3), np.int32))
    np.save(b / "shape.npy", np.zeros((3, 2), np.int32))
    np.save(a / "same.npy", x)
    np.save(b / "same.npy", x)
    (a / "blob.bin").write_bytes(bytes([0, 1, 2, 0xFF, 4]))
    (b / "blob.bin").write_bytes(bytes([0, 1, 2, 0xFE, 4, 5]))
    (a / "01-import.txt").write_text("graph g\nop a\n")
    (b / "02-extra.txt").write_text("graph g\n")
    (a / "04-mlir.txt").write_text("module {\n}\n")  # the guide's case: only a trailing newline differs
    (b / "04-mlir.txt").write_text("module {\n}")
    code, out, _ = cli("recipe", "diff", a, b)
    assert code == 1
    assert out.splitlines()[2:] == [
        "only in A  01-import.txt",
        "only in B  02-extra.txt",
        "different  04-mlir.txt: same lines, different line endings or final newline",
        "different  blob.bin: byte 3 first differs (5 B vs 6 B)",
        "different  inputs/x.npy: array float32[3, 4]: 2 of 12 values differ, first at index [1, 2] "
        "(A 6.0 B 6.5), max abs difference 2",
        "different  q.npy: array int8[2, 2]: 1 of 4 values differ, first at index [1, 1] "
        "(A -128 B 127), max abs difference 255",
        "same       same.npy",
        "different  shape.npy: array A int32[2, 3] vs B int32[3, 2]",
        "8 files: 1 same, 5 different, 1 only in A, 1 only in B; different",
    ]


def test_diff_of_a_missing_folder_or_a_file_is_one_line_exit_2(cli, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "f.txt").write_text("x")
    code, out, err = cli("recipe", "diff", tmp_path / "a", tmp_path / "nope")
    assert code == 2 and out == "" and err.count("\n") == 1 and "field 'B'" in err and "nope" in err, err
    code, _, err = cli("recipe", "diff", tmp_path / "f.txt", tmp_path / "a")
    assert code == 2 and err.count("\n") == 1 and "field 'A'" in err and "a folder of dumps, not a file" in err, err
