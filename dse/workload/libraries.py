"""Model libraries beside the CPU torch: what makes `import torchvision` work.

The registry's torchvision for torch 2.13 (0.28.0) is a CUDA build: its C extension
(`torchvision/_C.so`) links CUDA libraries this machine lacks, so it is not loaded, and
then `torchvision/_meta_registrations.py` registers fake kernels for `torchvision::nms`
and `torchvision::qnms`, two operators that only the extension defines; the import stops
with "operator torchvision::nms does not exist". The classification models use none of
the C ops (nms, roi_align, deform_conv...). Defining the two schemas first, exactly as the
extension declares them, lets the import finish; calling either op still fails loudly
("no kernel"), as it should without the extension. When the extension loads (a CPU build
of torchvision), its own definitions are used and nothing here runs.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch

# The schemas the extension declares (torchvision/csrc/ops/nms.cpp, quantized/cpu/qnms_kernel.cpp).
_SCHEMAS = {
    "nms": "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
}
_library: torch.library.Library | None = None  # kept alive: dropping it drops the definitions


def _defined(name: str) -> bool:
    """Whether the operator `torchvision::<name>` exists (with or without a kernel)."""
    try:
        torch._C._dispatch_has_kernel_for_dispatch_key(f"torchvision::{name}", "CPU")
    except RuntimeError:
        return False
    return True


def prepare_torchvision() -> None:
    """Make `import torchvision` succeed on the CPU torch; idempotent, a no-op when
    torchvision is not installed, already imported, or its extension loads."""
    global _library
    if _library is not None or importlib.util.find_spec("torchvision") is None:
        return
    if "torchvision" in sys.modules:
        return
    if all(_defined(name) for name in _SCHEMAS):
        return
    if _extension_loads():
        return
    _library = torch.library.Library("torchvision", "FRAGMENT")
    for name, schema in _SCHEMAS.items():
        if not _defined(name):
            _library.define(schema)


def _extension_loads() -> bool:
    """Whether torchvision's own C extension loads here (then it defines the ops itself)."""
    spec = importlib.util.find_spec("torchvision")
    folder = Path(spec.origin).parent
    library = next(folder.glob("_C*.so"), None)
    if library is None:
        return False
    try:
        torch.ops.load_library(str(library))
    except (OSError, RuntimeError):
        return False
    return True
