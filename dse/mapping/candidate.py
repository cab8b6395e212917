"""A candidate is a chip config plus the mapping choices made for a workload on it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, PositiveInt, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from emulator.chip import ChipConfig

from ..errors import InputError, close_matches
from ..identity import candidate_hash


class Mapping(BaseModel):
    """How a workload is put on the chip (the part the sampler and the mapper choose)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    # "search": the mapper's best legal tile per op; "framework": the toolchain's greedy pick.
    policy: Literal["search", "framework"] = "search"
    dataflow: Literal["ws", "os", "is"] = "ws"
    workers: PositiveInt = 1
    # Split of each matmul's output tiles across workers.
    split: Literal["rows", "cols"] = "rows"
    # Two buffers per operand so DMA of the next tile overlaps compute of this one.
    double_buffer: bool = True
    # Quantization granularity of the weights (the recipe's quantize step, `weights`):
    # per tensor, per 16-channel strip or per output channel. None: the recipe's own steps
    # (left out of the candidate's identity, so hashes from before this field stay valid).
    quantization: Literal["tensor", "strip", "channel"] | None = None
    # Calibration rule of the activations' scales (the quantize step's `calibration`): "absmax"
    # (nothing clips), "percentile" or "mse" (`dse.frontend.quantize.thresholds`), over the
    # recipe's example inputs. None: the recipe's own steps (left out of the identity).
    calibration: Literal["absmax", "percentile", "mse"] | None = None
    # Granularity of the activations' scales (the quantize step's `activations`): "tensor",
    # "strip" (16 rows) or "channel" (one per input channel of a product by a weight, moved
    # into the weight: `dse.frontend.quantize`). None: the recipe's own steps (left out of
    # the identity).
    activation_scales: Literal["tensor", "strip", "channel"] | None = None
    # How work is split across workers: "tiles" (None, the default) splits each product's
    # output tiles with a barrier per op; "spans" gives each worker a temporal span of the
    # output and the whole stack over it plus halo (`dse.lower.spans`). None is left out
    # of the identity, as above.
    partition: Literal["tiles", "spans"] | None = None
    # The workload point a candidate runs, when a spec's knobs set one (workload.params.*,
    # workload.recipe): {param: value, "recipe": name}; None (left out of the identity):
    # the experiment's own workload.
    workload: dict[str, Any] | None = None
    # Where a matmul's read-only weight (B) tiles live: "per_worker" (None, the default) has
    # every worker MVIN its own copy into private banks; "shared" places one copy per tile
    # of cores in its shared memory (loaded once, split across the tile's workers, then a
    # BARRIER) that every worker's matrix Ball reads (`dse.plan.matmul`, `check_tiles`); with
    # partition = "spans" the whole stack's weights are loaded so before the spans, each in
    # shared banks of its own (`dse.plan.spans.shared_stack`). None is left out of the identity.
    weights: Literal["per_worker", "shared"] | None = None
    # A core-side activation between two convolutions (conv -> ReLU -> conv): "materialize"
    # (None, the default) writes it to DRAM and the next conv copies it; "fuse" applies it
    # in the next conv's first copy (pad or im2col gather), one core pass instead of two
    # (`dse.plan.graph_plan`); and attention's chain between QK^T and PV (dequantize, scaling,
    # mask, softmax, quantize) is one core pass over the scores' tiles (`dse.plan.chains`).
    # None is left out of the identity, as above.
    fusion: Literal["materialize", "fuse"] | None = None
    # Where the workload's stages (an LLM's phases) run: None ("spmd", the default, left out
    # of the identity) every stage on workers 0..W-1 one after another; "phase" each stage on
    # every core of the core group whose role names it, all at once; "layers" one graph cut
    # into contiguous ranges of ops at `cuts`, range r on every core of core group r, one
    # range after another, the tensors a range hands to the next through shared memory
    # (`handoff`); "pipeline" the same ranges with `requests` in flight (request k's range r
    # runs while request k + 1's range r - 1 does); "auto" whichever of those the model finds
    # fastest (`dse.plan.placement`, `dse.analytical.placed.resolve_auto`).
    placement: Literal["phase", "layers", "pipeline", "auto"] | None = None
    # A mixture of experts' expert ops (`dse.workload.moe`, `dse.plan.moe`): "split" (None, the
    # default) each expert's ops split over the workers, one expert after another (tensor
    # parallel experts); "spread" the experts dealt to the workers round robin, each whole on
    # its worker, all at once, one BARRIER after them (expert parallel). None is left out of
    # the identity.
    experts: Literal["split", "spread"] | None = None
    # Placement "layers" / "pipeline": the indices (in the graph's op order, from 0) of the
    # ops that begin the second, third, ... range: increasing, at least one.
    cuts: tuple[PositiveInt, ...] | None = None
    # How many requests (the workload's inputs, request k's rotated by k along their last
    # axis) the candidate runs: one after another (SPMD, "layers") or overlapped ("pipeline",
    # at least 2). None (1) is left out of the identity.
    requests: PositiveInt | None = None
    # Placement "layers" / "pipeline": how a tensor one range writes reaches the matmul of the next range
    # that reads it as A: "shared" (None, the default) the writing range's cores load its A
    # tiles into the tile's shared memory and the reading range's matrix Ball reads them
    # there, where that fits (else DRAM, as the candidate's notes say); "dram" always DRAM.
    handoff: Literal["shared", "dram"] | None = None
    # Activation layout at a channels-last region's edges: false (None, the default, left out
    # of the identity) stores every tensor in its logical layout, so each conversion the
    # frontend left is a core copy; true stores them channels-last (torch's channels_last
    # memory format), so a conversion whose producer or readers can take it is a view that
    # moves nothing (`dse.plan.layout`).
    channels_last: bool | None = None
    # A scan's recurrent weight (`dse.plan.scan.weight_residency`): "kept" (None, the default,
    # left out of the identity) loads its B tiles into the tile's shared memory once before the
    # loop, where the chip has it and they fit, and every step reads them there; "reloaded"
    # loads them into private banks again every step (the shared banks they would hold are
    # SRAM kept powered: the energy side of the trade).
    scan_weights: Literal["kept", "reloaded"] | None = None

    @property
    def quantize_choice(self) -> str | None:
        """The quantize step options this mapping sets, as one key of the graph it runs
        (`dse.frontend.steps.quantized_steps`): the weight granularity, then "+" and the
        calibration rule when one is set ("channel", "channel+mse", "+mse"); None: the
        recipe's own steps. With activation scales set, a third part after a second "+"
        ("channel++channel", "++channel")."""
        if self.activation_scales is not None:
            return f"{self.quantization or ''}+{self.calibration or ''}+{self.activation_scales}"
        if self.calibration is None:
            return self.quantization
        return f"{self.quantization or ''}+{self.calibration}"

    @field_validator("placement", mode="before")
    @classmethod
    def _spmd_is_the_default(cls, v):
        return None if v == "spmd" else v  # one spelling of the default, one identity

    @field_validator("handoff")
    @classmethod
    def _shared_is_the_default(cls, v):
        return None if v == "shared" else v

    @field_validator("requests")
    @classmethod
    def _one_is_the_default(cls, v):
        return None if v == 1 else v

    @field_validator("channels_last")
    @classmethod
    def _false_is_the_default(cls, v):
        return None if v is False else v

    @field_validator("partition")
    @classmethod
    def _tiles_is_the_default(cls, v):
        return None if v == "tiles" else v  # one spelling of the default, one identity

    @field_validator("scan_weights")
    @classmethod
    def _kept_is_the_default(cls, v):
        return None if v == "kept" else v

    @field_validator("weights")
    @classmethod
    def _per_worker_is_the_default(cls, v):
        return None if v == "per_worker" else v

    @field_validator("fusion")
    @classmethod
    def _materialize_is_the_default(cls, v):
        return None if v == "materialize" else v

    @model_validator(mode="after")
    def _knobs_that_go_together(self) -> "Mapping":
        if self.placement in ("layers", "pipeline") and not self.cuts:
            raise PydanticCustomError("fields", f"placement = {self.placement} with cuts, the indices of the ops "
                                      "that begin each range after the first (e.g. cuts = [12])",
                                      {"field": "cuts", "value": self.cuts})
        if self.placement == "pipeline" and (self.requests or 1) < 2:
            raise PydanticCustomError("fields", "placement = pipeline with requests >= 2 (the requests it overlaps)",
                                      {"field": "requests", "value": self.requests})
        if self.requests is not None and self.placement == "phase":
            raise PydanticCustomError("fields", "requests only with placement spmd, layers, pipeline or auto "
                                      "(a workload of stages runs once)", {"field": "requests", "value": self.requests})
        if self.requests is not None and self.partition == "spans":
            raise PydanticCustomError("fields", "requests only with partition = tiles",
                                      {"field": "requests", "value": self.requests})
        if self.cuts is not None and list(self.cuts) != sorted(set(self.cuts)):
            raise PydanticCustomError("fields", "cuts in increasing order, each op index once",
                                      {"field": "cuts", "value": list(self.cuts)})
        if self.cuts is not None and self.placement not in ("layers", "pipeline"):
            raise PydanticCustomError("fields", "cuts only with placement = layers or pipeline",
                                      {"field": "cuts", "value": list(self.cuts)})
        if self.handoff is not None and self.placement not in ("layers", "pipeline", "auto"):
            raise PydanticCustomError("fields", "handoff only with placement = layers, pipeline or auto",
                                      {"field": "handoff", "value": self.handoff})
        if self.placement in ("layers", "pipeline", "auto") and self.partition == "spans":
            raise PydanticCustomError("fields", "partition = tiles with placement = layers, pipeline or auto (spans "
                                      "run the whole stack on every worker)",
                                      {"field": "placement", "value": self.placement})
        if self.fusion == "fuse" and self.partition == "spans":
            raise PydanticCustomError("fields", "partition = tiles with fusion = fuse (spans lower each span's "
                                      "ops as they are)", {"field": "fusion", "value": self.fusion})
        if self.channels_last and self.partition == "spans":
            raise PydanticCustomError("fields", "partition = tiles with channels_last = true (spans lower each "
                                      "span's ops as they are)", {"field": "channels_last", "value": True})
        return self


def mapping_from_dict(data: dict, source: str = "(mapping)", field_prefix: str = "mapping.") -> Mapping:
    try:
        return Mapping.model_validate_json(json.dumps(data))
    except ValidationError as exc:
        err = exc.errors()[0]
        ctx = err.get("ctx") or {}
        if not err["loc"] and "field" in ctx:  # a check over several fields names the one it blames
            err = {**err, "loc": (ctx["field"],), "input": ctx["value"]}
        field = field_prefix + ".".join(str(p) for p in err["loc"])
        suggestions: list[str] = []
        if err["type"] == "extra_forbidden":
            allowed = "known keys: " + ", ".join(sorted(Mapping.model_fields))
            suggestions = [field_prefix + k for k in close_matches(err["loc"][-1], Mapping.model_fields)]
        else:
            allowed = err["msg"].removeprefix("Input should be ")
        raise InputError(source, field, err.get("input"), allowed, suggestions) from None


@dataclass(frozen=True)
class Candidate:
    chip: ChipConfig
    mapping: Mapping

    @cached_property
    def config_dict(self) -> dict:
        return self.chip.model_dump(mode="json")

    @cached_property
    def mapping_dict(self) -> dict:
        return self.mapping.model_dump(mode="json", exclude_none=True)

    @cached_property
    def hash(self) -> str:
        """Identity of the candidate: same chip and same mapping, same hash."""
        return candidate_hash(self.config_dict, self.mapping_dict)
