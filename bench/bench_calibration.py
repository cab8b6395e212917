"""Quantization choices against end-to-end error: full-size MobileNetV2, MnasNet 0.5,
EfficientNet-B0 and MobileViT-XXS (random weights, 64 x 64 inputs) through `permute` and
`quantize`, with each weight granularity (`mapping.quantization`), each activation
calibration rule (`mapping.calibration`) and per-tensor or per-channel activation scales
(`mapping.activation_scales`; "channel" with the default migration 0.5).

    .venv/bin/python bench/bench_calibration.py [--size 64] [--only NAME ...]

Prints a Markdown table: the quantize stage's max error of each output relative to its
largest PyTorch magnitude (the 5% tolerance of `recipe check`), and whether the integer
path is bit-exact against the numpy reference. One run each (the figures are errors, not
times).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dse.frontend import run_pipeline  # noqa: E402
from dse.frontend.steps import parse_step_list  # noqa: E402
from dse.workload.libraries import prepare_torchvision  # noqa: E402

MODELS = {
    "MobileNetV2": "torchvision.models.mobilenet_v2(num_classes=10)",
    "MnasNet 0.5": "torchvision.models.mnasnet0_5(num_classes=10)",
    "EfficientNet-B0": "timm.create_model('efficientnet_b0', pretrained=False, num_classes=10)",
    "MobileViT-XXS": "timm.create_model('mobilevit_xxs', pretrained=False, num_classes=10)",
}
RECIPE = '''import timm
import torch
import torchvision


def load():
    torch.manual_seed(0)
    return ({model}).eval()


def inputs():
    return (torch.randn(1, 3, {size}, {size}, generator=torch.Generator().manual_seed(1)),)
'''
# (activations, weights, calibration)
CHOICES = [("tensor", "tensor", "absmax"), ("tensor", "channel", "absmax"), ("tensor", "channel", "percentile"),
           ("tensor", "channel", "mse"), ("channel", "channel", "absmax"), ("channel", "channel", "percentile"),
           ("channel", "channel", "mse")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--only", nargs="*", default=None)
    args = parser.parse_args()
    prepare_torchvision()
    root = Path(tempfile.mkdtemp())
    print("| model | " + " | ".join(f"A {a} / W {w} / {c}" for a, w, c in CHOICES) + " |")
    print("|---|" + "---|" * len(CHOICES))
    for name, model in MODELS.items():
        if args.only and name not in args.only:
            continue
        folder = root / name.replace(" ", "_")
        folder.mkdir()
        (folder / "model.py").write_text(RECIPE.format(model=model, size=args.size))
        cells = []
        for activations, weights, calibration in CHOICES:
            steps = parse_step_list(f"permute,quantize:activations={activations}:weights={weights}"
                                    f":calibration={calibration}", folder)
            stage = run_pipeline(folder, steps=steps).stages[-1]
            exact = "" if stage.details.get("bit_exact", True) else " (not bit-exact)"
            cells.append(f"{100 * stage.max_rel_error:.2f}%{' pass' if stage.passed else ''}{exact}")
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
