"""A repeated structure captured and checked once (#35: the lead's policy B).

The 32 decoder layers of a whole model are one structure with 32 sets of weights. The
first instance runs the whole frontend (`run_pipeline`: capture, every stage's check
against PyTorch, the vacuous check, quantize's integer check) and is remembered as a
`Structure`: its captured graph with each weight named by the module tensor it holds
(`slots`). A later instance whose structure key is the same (same recipe, same params
but its index, same steps) is not exported again: its module's own tensors are put in
those slots (`substituted`), and the steps run on that graph (its own calibration, its
own quantization of its own weights) without the per-stage float checks, the vacuous
check or quantize's numpy check. What it still gets:
- its module's forward on its inputs (the float reference chain's value there);
- the float graph it was quantized from, against that forward, within FLOAT_TOLERANCE:
  free, since calibration traces that graph anyway, and it is what catches a weight put
  in the wrong slot (a graph's emulation is compared with that same graph's reference,
  which a wrong weight does not disturb);
- downstream, as every stage: its emulated outputs bit for bit against its own integer
  reference, and the chain's last outputs against the float chain.
A module tensor missing, of another shape or dtype, or a buffer whose values differ from
the first instance's (a folded constant of the captured graph may derive from it) is no
reuse: `substituted` says why and the instance is checked in full.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from dse.workload.graph import Graph


@dataclass
class Structure:
    key: str
    source: str  # the instance checked in full, as the notes name it ("llama_layers[layer=0]")
    captured: Graph  # its captured graph; the slot weights let go (they are its module's memory)
    slots: dict[str, str]  # graph weight -> the module tensor (parameter or buffer) it holds
    buffers: dict[str, str]  # module buffer -> sha256 of its bytes at the first instance
    steps: list = field(default_factory=list)  # the StepSpecs it ran


def structure_key(recipe_path: str, params: dict[str, Any], index: str | None, steps) -> str:
    """Same recipe file, same params but the repetition's `index`, same steps: one structure."""
    same = {k: v for k, v in params.items() if k != index}
    steps = None if steps is None else [(s.name, s.options) for s in steps]
    text = json.dumps({"recipe": str(recipe_path), "params": same, "steps": steps}, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


def _tensors(module) -> dict[str, Any]:
    return {**dict(module.named_parameters()), **dict(module.named_buffers())}


def _digest(tensor) -> str:
    import torch

    return hashlib.sha256(tensor.detach().contiguous().view(-1).view(torch.uint8).numpy()).hexdigest()


def remember(key: str, source: str, graph: Graph, module, steps) -> Structure | None:
    """The captured `graph` of `module` as a structure to reuse: each weight found as the very
    memory of one of the module's tensors (the capture keeps parameters and buffers
    uncopied). A weight that is none (a folded constant) stays in the graph as it is: it is
    a function of the shapes and buffers alone, or of parameters only when the capture
    folded a parameter subgraph, which the float check of a reused instance would catch."""
    tensors = _tensors(module)
    owner = {(t.data_ptr(), t.numel() * t.element_size()): name for name, t in tensors.items() if t.numel()}
    slots = {}
    for name, array in graph.weights.items():
        held = owner.get((array.__array_interface__["data"][0], array.nbytes))
        if held is not None:
            slots[name] = held
    captured = graph.copy()
    captured.weights = {name: array for name, array in graph.weights.items() if name not in slots}
    buffers = {name: _digest(t) for name, t in module.named_buffers()}
    return Structure(key, source, captured, slots, buffers, list(steps))


def substituted(structure: Structure, module) -> tuple[Graph | None, str]:
    """The structure's captured graph with `module`'s tensors in its slots, or (None, why not)."""
    from dse.workload.interpret import dtype_name, weight_array

    tensors = _tensors(module)
    for name, digest in structure.buffers.items():
        buffer = tensors.get(name)
        if buffer is None or _digest(buffer) != digest:
            return None, f"buffer {name} differs from {structure.source}'s"
    graph = structure.captured.copy()
    for slot, name in structure.slots.items():
        tensor, spec = tensors.get(name), graph.tensors[slot]
        if tensor is None or tuple(tensor.shape) != spec.shape or dtype_name(tensor.dtype) != spec.dtype:
            return None, f"module tensor {name} is not {spec}"
        graph.weights[slot] = weight_array(tensor, copy=False)
    return graph, ""
