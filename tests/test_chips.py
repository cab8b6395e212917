import pytest

from dse.chips import chip_hash, list_chips, load_chip
from dse.errors import InputError


def test_shipped_chips_load_with_their_figures():
    assert list_chips() == ["goban", "pebble", "poly", "toy"]
    toy, pebble, goban, poly = (load_chip(n) for n in ("toy", "pebble", "goban", "poly"))
    assert (toy.cores.count, toy.banks.count, toy.banks.rows, toy.banks.row_bytes) == (1, 16, 1024, 16)
    assert toy.private_sram_bytes == 256 * 1024
    assert toy.dma.burst_max_bytes == 1024 and toy.dma.beat_bytes == 16 and toy.dma.bursts_in_flight == 1
    assert len(pebble.balls) == 5 and pebble.clock_mhz == 100.0
    assert {b.kind for b in pebble.balls} == {"matrix", "transpose", "fp2int", "int2fp", "relu"}
    assert (goban.cores.count, goban.cores.tile_size, goban.banks.count, goban.dma.burst_max_bytes) == (4, 4, 20, 64)
    assert goban.shared_memory.enabled and {b.kind for b in goban.balls} == {"matrix", "fp2int", "int2fp", "transpose"}
    assert [(g.role, g.count) for g in poly.cores.groups] == [("prefill", 3), ("decode", 2)]
    matrix = toy.ball("matrix")
    assert (matrix.read_ports, matrix.write_ports) == (2, 4)
    # The framework's emulator latency: WS M*N*K/16 + M*N, OS M*N*K/16 + M*N/2.
    assert matrix.latency_formula("ws").cycles(M=32, N=32, K=64) == 32 * 32 * 64 // 16 + 32 * 32
    assert matrix.latency_formula("os").cycles(M=32, N=32, K=64) == 32 * 32 * 64 // 16 + 32 * 32 // 2
    assert toy.isa.max_value("matrix_dim") == 4095 and toy.isa.max_value("matrix_base_row") == 127


def test_identity_hash_is_stable_and_canonical(tmp_path, repo):
    a, b = load_chip("goban"), load_chip("goban")
    assert chip_hash(a) == chip_hash(b) and len(chip_hash(a)) == 64
    assert chip_hash(load_chip("goban", {"cores.count": 16})) != chip_hash(a)
    # Same content with keys in another order and defaults spelled out or left out: same identity.
    text = (repo / "chip_configs" / "goban.toml").read_text()
    lines = text.splitlines()
    name_line, desc_line = lines[1], lines[2]
    assert name_line.startswith("name") and desc_line.startswith("description")
    lines[1], lines[2] = desc_line, name_line
    text = "\n".join(lines).replace("clock_mhz = 1000.0\n", "") + "\n[front_end]\nrob_entries = 16\n"
    reordered = tmp_path / "g.toml"
    reordered.write_text(text)
    assert chip_hash(load_chip(reordered)) == chip_hash(a)


def test_goban_core_count_is_overridable():
    c = load_chip("goban", {"cores.count": 64})
    assert c.cores.count == 64 and c.cores.tile_size == 4


BAD = [  # (text in toy.toml, replacement, field, words of the allowed part)
    ("[banks]\ncount = 16", '[banks]\ncount = "16"', "banks.count", "valid integer"),  # wrong type
    ("rows = 1024", "rows = 0", "banks.rows", "greater than 0"),  # zero size
    ("[dma]\n", "[dma]\nlatency_cycles = -5\n", "dma.latency_cycles", "greater than or equal to 0"),  # negative
    ("[banks]\n", "[banks]\ncolour = 3\n", "banks.colour", "known keys here: acc_col"),  # unknown key
]


@pytest.mark.parametrize("old,new,field,allowed", BAD)
def test_bad_chip_configs_name_file_field_value_and_allowed(tmp_path, repo, run_cli, old, new, field, allowed):
    text = (repo / "chip_configs" / "toy.toml").read_text()
    assert old in text
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace(old, new, 1))
    with pytest.raises(InputError) as exc:
        load_chip(bad)
    assert exc.value.field == field and str(bad) in str(exc.value) and allowed in str(exc.value)
    code, out, err = run_cli("chips", "validate", bad)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and str(bad) in err and field in err and allowed in err


def test_unknown_ball_kind_lists_the_known_kinds(tmp_path, repo):
    bad = tmp_path / "fft.toml"
    bad.write_text((repo / "chip_configs" / "toy.toml").read_text().replace('kind = "relu"', 'kind = "fft"'))
    with pytest.raises(InputError) as exc:
        load_chip(bad)
    assert exc.value.field == "balls[4].kind" and exc.value.value == "fft"
    assert "'matrix'" in exc.value.allowed and "'mxfp2int'" in exc.value.allowed


def test_bad_latency_formula_and_unknown_chip(tmp_path, repo):
    bad = tmp_path / "f.toml"
    bad.write_text((repo / "chip_configs" / "toy.toml").read_text().replace('"16*K"', '"16*Q"'))
    with pytest.raises(InputError) as exc:
        load_chip(bad)
    assert "unknown name 'Q'" in str(exc.value) and "balls[1]" in exc.value.field
    with pytest.raises(InputError) as exc:
        load_chip("pebbles")
    assert "goban, pebble, poly, toy" in exc.value.allowed


def test_cli_lists_and_shows_chips(run_cli):
    code, out, _ = run_cli("chips", "list")
    assert code == 0 and all(n in out for n in ("toy", "pebble", "goban", "poly"))
    code, out, _ = run_cli("chips", "show", "goban", "--set", "cores.count=8")
    assert code == 0 and '"count": 8' in out and f"hash: {chip_hash(load_chip('goban', {'cores.count': 8}))}" in out
