"""A sweep's size before it starts: how many candidates the spec asks for, counted without
building one (a grid's points as the product of its knobs' value counts, a sampler's
trial budget, the baseline and the hand-picked), with the time and store growth they
would cost. A sweep above the spec's `[search] max_candidates` is refused unless asked
for (`dse sweep --yes-large`): a 10^7-point grid is a typo far more often than a plan.

The time and growth are stated constants, not measurements of this spec (measuring needs
the recipe's capture, seconds of torch, where the refusal takes a fraction of one):
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InputError
from .progress import MAX_CANDIDATES, planned  # noqa: F401  (the [search] default)
from .samplers import sampler_kind
from .spec import Spec

# The analytical phase per candidate, its records' writes included: 1.2 ms measured on a
# 1,200-candidate grid of a 64^3 gemm on goban (2 cores, SQLite); rounded up, since
# larger workloads cost more a candidate.
ANALYTICAL_SECONDS_PER_CANDIDATE = 0.0015
# An emulated candidate (`[stages] emulator`): a stated order of magnitude; a small gemm
# takes seconds, a transformer block minutes.
EMULATOR_SECONDS_PER_CANDIDATE = 30.0
# What a candidate adds to the store: its candidate and run rows, ~30 metric rows, ~13
# latest figures, 3 candidate_run rows and a packed figures row (about 50 rows); the same
# 1,200-candidate sweep grew a SQLite store by 6.1 kB a candidate.
ROWS_PER_CANDIDATE = 50
STORE_BYTES_PER_CANDIDATE = 6_100


@dataclass(frozen=True)
class SweepSize:
    candidates: int  # the most the spec can ask for (inactive knobs may collapse grid points)
    emulated: int  # of which the emulator stage would run
    seconds: float
    store_bytes: int

    def line(self) -> str:
        emulated = (f" + {self.emulated} emulated at ~{EMULATOR_SECONDS_PER_CANDIDATE:g} s each"
                    if self.emulated else "")
        return (f"~{_duration(self.seconds)} ({ANALYTICAL_SECONDS_PER_CANDIDATE * 1000:g} ms a candidate "
                f"analytically{emulated}, stated constants) and ~{_bytes(self.store_bytes)} of store growth "
                f"(~{ROWS_PER_CANDIDATE} rows, ~{STORE_BYTES_PER_CANDIDATE / 1000:g} kB a candidate)")


def sweep_size(spec: Spec) -> SweepSize:
    search, stages = spec.model.search, spec.model.stages
    kind = sampler_kind(spec)
    candidates = planned(spec.grid_size(), "grid" if kind == "grid" else "sampled", search.trials,
                         search.max_grid, len(spec.hand))
    emulated = {"none": 0, "top_k": min(stages.top_k, candidates), "all": candidates}[stages.emulator]
    seconds = candidates * ANALYTICAL_SECONDS_PER_CANDIDATE + emulated * EMULATOR_SECONDS_PER_CANDIDATE
    return SweepSize(candidates, emulated, seconds, candidates * STORE_BYTES_PER_CANDIDATE)


def check_size(spec: Spec, yes_large: bool = False) -> SweepSize:
    """The sweep's size; an `InputError` (nothing written) when it is above the spec's
    limit and `yes_large` is not given."""
    size = sweep_size(spec)
    limit = spec.model.search.max_candidates
    if size.candidates > limit and not yes_large:
        raise InputError(spec.path, "search.max_candidates", f"{size.candidates} candidates",
                         f"a sweep of at most {limit} candidates; this one would take {size.line()}; "
                         "pass --yes-large to run it anyway, or raise [search] max_candidates")
    return size


def _duration(seconds: float) -> str:
    for unit, span in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= span:
            return f"{seconds / span:.1f} {unit}"
    return f"{seconds:.0f} s"


def _bytes(n: float) -> str:
    for unit, span in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= span:
            return f"{n / span:.1f} {unit}"
    return f"{n:.0f} B"
