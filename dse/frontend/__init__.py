"""Frontend steps: target-dependent rewrites of a captured graph (quantize, permute,
batch-norm folding, attention splitting, last-token selection), each dumped and checked
against PyTorch by the pipeline. A recipe lists its steps in `steps.toml`.

Names load on first use (PEP 562): a cached pipeline's result is served without torch.
"""

import importlib

_SOURCES = {
    "pipeline": ("Context", "OutputCheck", "PipelineResult", "StageResult", "check_graph", "run_pipeline"),
    "quantize": ("integer_reference",),
    "rewrite": ("Rewriter", "StepError"),
    "steps": ("BUILTIN", "DEFAULT_STEPS", "FLOAT_TOLERANCE", "StepDef", "StepSpec", "available_steps", "load_steps",
              "parse_step_list", "resolve_step"),
}
_MODULE_OF = {name: module for module, names in _SOURCES.items() for name in names}


def __getattr__(name: str):
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "BUILTIN",
    "DEFAULT_STEPS",
    "FLOAT_TOLERANCE",
    "Context",
    "OutputCheck",
    "PipelineResult",
    "Rewriter",
    "StageResult",
    "StepDef",
    "StepError",
    "StepSpec",
    "available_steps",
    "check_graph",
    "integer_reference",
    "load_steps",
    "parse_step_list",
    "resolve_step",
    "run_pipeline",
]
