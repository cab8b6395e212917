"""`dse emulate matmul`: the emulator from the command line."""

import json


def test_emulate_matmul_prints_both_modes(cli):
    code, out, err = cli("emulate-matmul", "--chip", "toy", "--size", "64", "64", "64", "--tile", "32", "32", "32")
    assert code == 0, err
    assert "matches numpy" in out and "serial / overlapped" in out


def test_emulate_matmul_json_trace_and_overrides(cli, tmp_path):
    code, out, err = cli("emulate-matmul", "--chip", "goban", "--cores", "4", "--size", "64", "64", "64",
                         "--tile", "16", "16", "16", "--mode", "overlapped", "--json", "--trace", tmp_path,
                         "--set", "dma.latency_cycles=10")
    assert code == 0, err
    rep = json.loads(out)
    e = rep["modes"]["overlapped"]
    assert e["matches_numpy"] and e["cycles"] > 0 and e["core3"]["matrix_busy_cycles"] == 16 * 512
    assert (tmp_path / "overlapped" / "pmctrace.ndjson").read_text().count('"event":"ball"') == 64


def test_emulate_bad_input_exits_2(cli):
    code, out, err = cli("emulate-matmul", "--size", "64", "64", "64", "--tile", "24", "32", "32")
    assert code == 2 and "multiple of 16" in err
    code, out, err = cli("emulate-matmul", "--set", "dma.nope=1")
    assert code == 2 and "dma.nope" in err
