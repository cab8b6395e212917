"""Whether the PyTorch reference a check compares with can tell a right graph from a wrong one.

A reference output that is all zeros (a zero-initialised head: timm's MLP-Mixer,
torchvision's ViT), or one that does not change when the inputs do (a random-weight
GoogLeNet, whose activations fade until its output is its final bias whatever the
input), is matched by a graph that computes nothing: such a comparison is *vacuous*.
The module is run once more on inputs drawn afresh (float inputs from a normal
distribution with their mean and spread, integer inputs uniformly over the range they
span; bool inputs are kept); an output that moves by no more than the float check's own
tolerance (`FLOAT_TOLERANCE` of its largest magnitude) cannot be seen to move by the
check either.

The redraw is a whole forward on inputs of the very shapes: a shorter sequence or a slice of
the batch would run another module (another mask, other tables) and show that one's output
moves, not this one's, so it is not cut; nor can the expected output's forward serve, being
on the other inputs (#35, policy C). A repeated structure's later instances skip the check
with the rest of their frontend checks (`dse.frontend.repeated`).

A recipe that knows its comparison is vacuous says so in its model.py:
``VACUOUS = "why"``; the check then passes and still names the outputs.
"""

from __future__ import annotations

from typing import Any

DECLARATION = "VACUOUS"
SEED = 20260101


def redrawn_inputs(inputs: tuple) -> tuple[tuple, bool]:
    """Fresh inputs like `inputs` (same shapes and dtypes) and whether any of them changed."""
    import torch

    generator = torch.Generator().manual_seed(SEED)
    out, changed = [], False
    for x in inputs:
        if not isinstance(x, torch.Tensor) or x.numel() == 0 or x.dtype == torch.bool:
            out.append(x)
        elif x.is_floating_point():
            spread = float(x.double().std()) if x.numel() > 1 else 0.0
            spread = spread or float(x.double().abs().max()) or 1.0
            drawn = torch.randn(x.shape, generator=generator, dtype=torch.float64) * spread + float(x.double().mean())
            out.append(drawn.to(x.dtype))
            changed = True
        elif not x.is_complex():
            low, high = int(x.min()), int(x.max())
            if high > low:
                out.append(torch.randint(low, high + 1, x.shape, generator=generator, dtype=x.dtype))
                changed = True
            else:
                out.append(x)
        else:
            out.append(x)
    return tuple(out), changed


def vacuous_outputs(names: list[str], expected: list, redrawn: list | None, tolerance: float) -> list[str]:
    """One line per output whose comparison is vacuous: all zeros, or (given the outputs on
    redrawn inputs) moved by no more than `tolerance` of its largest magnitude."""
    found = []
    for i, want in enumerate(expected):
        name = names[i] if i < len(names) else f"#{i}"
        if want.numel() == 0:
            continue
        scale = float(want.double().abs().max())
        if scale == 0:
            found.append(f"output {name} is all zeros")
            continue
        if redrawn is None or i >= len(redrawn) or tuple(redrawn[i].shape) != tuple(want.shape):
            continue
        moved = float((redrawn[i].double() - want.double()).abs().max())
        if moved <= tolerance * scale:
            found.append(f"output {name} does not change when the inputs do (moved {moved:.2e}, "
                         f"max |output| {scale:.2e})")
    return found


def declared(module: Any) -> str | None:
    """The recipe's reason for accepting a vacuous comparison (``VACUOUS`` in model.py)."""
    value = getattr(module, DECLARATION, None)
    if value is None or value is False:
        return None
    return value if isinstance(value, str) and value.strip() else "declared"
