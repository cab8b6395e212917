"""Frontend steps: target-dependent rewrites of a captured graph (quantize, permute,
batch-norm folding, attention splitting, last-token selection), each dumped and checked
against PyTorch by the pipeline. A recipe lists its steps in `steps.toml`.

Names load on first use (PEP 562): a cached pipeline's result is served without torch.
"""

from dse.lazy import lazy_attributes

_SOURCES = {
    "pipeline": ("Context", "OutputCheck", "PipelineResult", "StageResult", "check_graph", "run_pipeline"),
    "quantize": ("integer_reference",),
    "rewrite": ("Rewriter", "StepError"),
    "steps": ("BUILTIN", "DEFAULT_STEPS", "FLOAT_TOLERANCE", "StepDef", "StepSpec", "available_steps", "load_steps",
              "parse_step_list", "resolve_step"),
}
__getattr__ = lazy_attributes(__name__, _SOURCES)


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
