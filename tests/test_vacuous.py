"""A check whose PyTorch reference cannot tell a right graph from a wrong one (an all-zero
output, an output that does not move when the inputs do) says "vacuous comparison" and
fails, unless the recipe declares it (`VACUOUS = "why"` in model.py)."""

from __future__ import annotations

import torch

from dse.frontend import run_pipeline
from dse.frontend.vacuous import redrawn_inputs, vacuous_outputs

RECIPE = '''"""A tiny MLP whose head is {what}."""
import torch
from torch import nn
{declaration}

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(8, 16)
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        return self.head(torch.relu(self.body(x)) * {fade})


def load():
    torch.manual_seed(0)
    net = Net()
    {head}
    return net.eval()


def inputs():
    return (torch.randn(2, 8, generator=torch.Generator().manual_seed(1)),)
'''


def recipe(folder, name, what="random", fade="1.0", head="", declaration=""):
    path = folder / name
    path.mkdir()
    (path / "model.py").write_text(RECIPE.format(what=what, fade=fade, head=head, declaration=declaration))
    return path


ZERO_HEAD = "torch.nn.init.zeros_(net.head.weight); torch.nn.init.zeros_(net.head.bias)"


def test_a_zero_head_is_a_vacuous_comparison_and_fails(tmp_path):
    pipe = run_pipeline(recipe(tmp_path, "zero", "zero", head=ZERO_HEAD))
    first = pipe.stages[0]
    assert not first.passed and not pipe.passed
    assert "vacuous comparison" in first.error and "all zeros" in first.error, first.error
    assert first.details["vacuous"] == [f"output {pipe.graphs[0].outputs[0]} is all zeros"]
    # the steps themselves matched the (zero) reference: only the comparison is at fault
    assert all(stage.passed for stage in pipe.stages[1:])


def test_an_output_that_ignores_the_inputs_is_vacuous(tmp_path):
    """The GoogLeNet case: activations faded (x 1e-30) so the output is the head's bias."""
    pipe = run_pipeline(recipe(tmp_path, "faded", "fed faded activations", fade="1e-30"))
    first = pipe.stages[0]
    assert not pipe.passed and "does not change when the inputs do" in first.error, first.error


def test_a_declared_vacuous_comparison_passes_and_still_says_so(tmp_path):
    pipe = run_pipeline(recipe(tmp_path, "declared", "zero", head=ZERO_HEAD,
                               declaration='VACUOUS = "a smoke test of the lowering only"'))
    assert pipe.passed, [(s.name, s.error) for s in pipe.stages]
    assert pipe.stages[0].details["vacuous_declared"] == "a smoke test of the lowering only"
    assert "all zeros" in pipe.stages[0].details["vacuous"][0]


def test_a_real_comparison_is_not_vacuous(tmp_path):
    pipe = run_pipeline(recipe(tmp_path, "real"))
    assert pipe.passed and "vacuous" not in pipe.stages[0].details


def test_recipe_check_names_the_vacuous_comparison(tmp_path, cli):
    code, out, err = cli("recipe", "check", recipe(tmp_path, "zero", "zero", head=ZERO_HEAD),
                         "--out", tmp_path / "dumps")
    assert code != 0 and "vacuous comparison" in out + err


def test_redrawn_inputs_and_the_rule_by_hand():
    floats = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    tokens = torch.tensor([[3, 7, 5]])
    flags = torch.tensor([True, False])
    same = torch.tensor([2, 2])
    drawn, changed = redrawn_inputs((floats, tokens, flags, same))
    assert changed and drawn[0].dtype == torch.float32 and drawn[0].shape == floats.shape
    assert not torch.equal(drawn[0], floats)
    assert drawn[1].dtype == tokens.dtype and 3 <= int(drawn[1].min()) and int(drawn[1].max()) <= 7
    assert drawn[2] is flags and drawn[3] is same  # nothing to redraw: kept
    assert redrawn_inputs((flags, same)) == ((flags, same), False)
    y = torch.tensor([1.0, -2.0])
    assert vacuous_outputs(["y"], [y], [y + 1e-4], 1e-5) == []  # moved 1e-4 > 1e-5 x max |y| = 2e-5
    assert vacuous_outputs(["y"], [y], [y + 1e-5], 1e-5)[0].startswith("output y does not change")
    assert vacuous_outputs(["y"], [torch.zeros(3)], None, 1e-5) == ["output y is all zeros"]
    assert vacuous_outputs(["y"], [y], None, 1e-5) == []  # nothing redrawn: only the zero test applies
