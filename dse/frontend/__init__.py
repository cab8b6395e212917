"""Frontend steps: target-dependent rewrites of a captured graph (quantize, permute,
batch-norm folding, attention splitting, last-token selection), each dumped and checked
against PyTorch by the pipeline. A recipe lists its steps in `steps.toml`."""

from dse.frontend.pipeline import Context, OutputCheck, PipelineResult, StageResult, check_graph, run_pipeline
from dse.frontend.quantize import integer_reference
from dse.frontend.rewrite import Rewriter, StepError
from dse.frontend.steps import (
    BUILTIN,
    DEFAULT_STEPS,
    FLOAT_TOLERANCE,
    StepDef,
    StepSpec,
    available_steps,
    load_steps,
    parse_step_list,
    resolve_step,
)

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
