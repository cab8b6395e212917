"""Every shipped recipe through `dse recipe check`: capture and each frontend step checked
against PyTorch, float and quantized; the recipe CLI; users' own model folders."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from dse.workload import list_recipes

SHIPPED = ["gemm", "gru_encoder", "lenet5", "llama_decode", "llama_layers", "llama_prefill", "mamba_block", "mixtral_moe",
           "mlp", "mobilenet_v3", "qwen2_gqa", "resnet18", "resnet_block", "temporal_conv", "vit_block", "vit_timm"]
# Small enough for CI; the defaults (resnet18 at 224x224, ...) run the same code.
SMALL = {
    "gemm": ["m=32", "n=48", "k=64"],
    "mamba_block": ["tokens=8"],
    "mlp": ["batch=8"],
    "resnet18": ["size=32"],
    "resnet_block": ["channels=16", "size=8"],
    "temporal_conv": ["length=48"],
    "vit_block": ["tokens=17", "dim=64", "heads=4"],
    "llama_decode": ["past=15", "dim=128", "heads=4", "kv_heads=2", "ffn=256", "vocab=256"],
    "llama_prefill": ["seq=16", "dim=128", "heads=4", "kv_heads=2", "ffn=256", "vocab=256"],
    "llama_layers": ["seq=8", "dim=32", "heads=2", "kv_heads=1", "ffn=64", "layers=2"],
    "qwen2_gqa": ["layers=1", "seq=8"],
    "mixtral_moe": ["batch=2", "dim=32", "ffn=64", "experts=4"],
    "vit_timm": ["depth=1", "dim=32", "heads=2"],
}
RECURRENT = {"gru_encoder"}
EXPECTED_STEPS = {
    "resnet18": ["fold_batch_norm", "permute", "quantize"],
    "resnet_block": ["fold_batch_norm", "permute", "quantize"],
    "vit_block": ["split_attention", "permute", "quantize"],
    "llama_prefill": ["select_last_token", "permute", "quantize"],
    "mobilenet_v3": ["fold_batch_norm", "permute", "quantize"],
}


def test_the_shipped_recipes_are_listed(cli):
    assert list_recipes() == SHIPPED
    code, out, _ = cli("recipe", "list")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[:2] == ["name", "steps"] and len(lines) == 1 + len(SHIPPED)
    assert "fold_batch_norm, permute, quantize" in next(line for line in lines if line.startswith("resnet18 "))
    code, out, _ = cli("recipe", "list", "--json")
    listed = {entry["name"]: entry for entry in json.loads(out)}
    assert listed["llama_prefill"]["steps"] == EXPECTED_STEPS["llama_prefill"]
    assert listed["mlp"]["steps"] == ["permute", "quantize"]


@pytest.mark.parametrize("name", SHIPPED)
def test_every_recipe_passes_check_float_and_quantized(cli, tmp_path: Path, name: str):
    args = [a for p in SMALL.get(name, []) for a in ("--param", p)]
    code, out, err = cli("recipe", "check", name, *args, "--json", "--out", tmp_path)
    report = json.loads(out)
    summary = {s["name"]: (s["max_abs_error"], s["max_rel_error"], s["passed"], s["error"]) for s in report["stages"]}
    print(name, json.dumps(summary))
    assert code == 0 and report["passed"], summary
    stages = report["stages"]
    assert [s["name"] for s in stages] == ["import"] + EXPECTED_STEPS.get(name, ["permute", "quantize"])
    assert [s["dump"] for s in stages] == [f"{i:02d}-{s['name']}.txt" for i, s in enumerate(stages, 1)]
    assert sorted(p.name for p in tmp_path.iterdir()) == [s["dump"] for s in stages]
    # float stages within 1e-5 of PyTorch; the capture itself is exact (a recurrence's cell is
    # torch's own ops, but its products' last bits follow the GEMM kernel's path: within 1e-6)
    assert stages[0]["max_abs_error"] == 0.0 or name in RECURRENT and stages[0]["max_rel_error"] <= 1e-6
    for stage in stages[:-1]:
        assert not stage["quantized"] and stage["tolerance"] == 1e-5 and stage["max_rel_error"] <= 1e-5
    quantized = stages[-1]
    assert quantized["quantized"] and quantized["details"]["bit_exact"]
    assert 0 < quantized["max_rel_error"] <= quantized["tolerance"]  # int8 is close, never free
    assert quantized["details"]["products"] >= 1
    dump = (tmp_path / quantized["dump"]).read_text()
    assert "int8[" in dump and "int32[" in dump and "= dequantize(" in dump
    assert quantized["macs"] == stages[-2]["macs"]  # quantization keeps every MAC


def test_check_prints_a_table_and_writes_dumps_where_asked(cli, tmp_path: Path):
    code, out, _ = cli("recipe", "check", "resnet_block", "--param", "channels=8", "--param", "size=6",
                       "--out", tmp_path / "dumps")
    assert code == 0
    lines = out.splitlines()
    assert lines[1].split()[:3] == ["stage", "ops", "MACs"]
    assert [line.split()[0] for line in lines[2:6]] == ["01-import", "02-fold_batch_norm", "03-permute",
                                                         "04-quantize"]
    assert all(line.split()[6] == "pass" for line in lines[2:6])
    assert "integer reference bit-exact: yes" in lines[5]
    assert lines[-1] == "passed"
    assert (tmp_path / "dumps" / "02-fold_batch_norm.txt").read_text().count("batch_norm(") == 0
    assert (tmp_path / "dumps" / "01-import.txt").read_text().count("batch_norm(") == 2


def test_show_lists_ops_shapes_and_counts(cli):
    code, out, _ = cli("recipe", "show", "gemm", "--param", "m=32", "--param", "n=16", "--param", "k=8")
    assert code == 0
    assert "input  x: float32[32, 8]" in out
    op_line = next(line for line in out.splitlines() if line.split()[:2] == ["matmul", "matmul"])
    assert op_line.split()[2:5] == ["float32[32,", "16]", str(32 * 16 * 8)]
    assert any(line.startswith("1 ops; total macs=4,096") for line in out.splitlines()[-3:])
    code, out, _ = cli("recipe", "show", "lenet5", "--after", "quantize", "--json")
    shown = json.loads(out)
    assert shown["stage"] == "03-quantize"
    assert {op["kind"] for op in shown["ops"]} >= {"quantize", "requantize", "conv2d", "dequantize"}
    assert shown["totals"]["macs"] == 416520
    code, out, _ = cli("recipe", "show", "mlp", "--param", "batch=2", "--dump")
    assert out.startswith("graph mlp\ninput  x: float32[2, 256]\n")


def user_model(folder: Path, body: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "model.py").write_text(textwrap.dedent(body))
    return folder


CONV_NET = """\
    import torch
    from torch import nn


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3, padding=1)
            self.head = nn.Linear(8, 4)

        def forward(self, x):
            y = torch.relu(self.conv(x)).mean((2, 3))
            return self.head(y)


    def load():
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            return Net().eval()


    def inputs():
        return (torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(1)),)
"""


def test_a_users_folder_is_a_recipe(cli, tmp_path: Path):
    folder = user_model(tmp_path / "my-net", CONV_NET)
    code, out, _ = cli("recipe", "check", folder, "--json", "--no-dump")
    report = json.loads(out)
    assert code == 0 and report["passed"] and report["recipe"] == "my-net"
    assert [s["name"] for s in report["stages"]] == ["import", "permute", "quantize"]
    assert report["out_dir"] is None and not (folder / "output").exists()
    code, out, _ = cli("recipe", "check", folder, "--steps", "quantize:weights=tensor:tolerance=0.2", "--json",
                       "--no-dump")
    stages = json.loads(out)["stages"]
    assert [s["name"] for s in stages] == ["import", "quantize"] and stages[1]["options"]["weights"] == "tensor"


def test_bad_input_is_one_line_and_exit_code_2(cli, tmp_path: Path):
    code, _, err = cli("recipe", "check", "no_such_recipe")
    assert code == 2 and "workload.recipe" in err and "resnet18" in err and len(err.strip().splitlines()) == 1
    code, _, err = cli("recipe", "check", "gemm", "--param", "rows=3")
    assert code == 2 and "workload.params" in err
    code, _, err = cli("recipe", "check", "gemm", "--param", "m")
    assert code == 2 and "KEY=VALUE" in err
    code, _, err = cli("recipe", "check", "gemm", "--steps", "quantize:weights=row")
    assert code == 2 and "tensor, strip, channel" in err
    code, _, err = cli("recipe", "show", "gemm", "--after", "fold_batch_norm")
    assert code == 2 and "permute, quantize" in err
    folder = user_model(tmp_path / "odd", CONV_NET.replace("y = torch.relu(self.conv(x)).mean((2, 3))",
                                                           "y = torch.cumprod(self.conv(x), 1).mean((2, 3))"))
    code, out, err = cli("recipe", "check", folder, "--no-dump")
    assert code == 2 and out == ""
    assert "aten.cumprod" in err and "model.py:12" in err and str(folder / "model.py") in err


def test_a_failing_check_exits_1(cli, tmp_path: Path):
    code, out, _ = cli("recipe", "check", "gemm", "--steps", "quantize:tolerance=1e-6", "--no-dump")
    assert code == 1 and out.splitlines()[-1] == "FAILED" and "FAIL (blame: quantize)" in out
