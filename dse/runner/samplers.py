"""Where candidates come from: a full grid, random draws, Optuna TPE or NSGA-II.

Every sampler proposes parameter dicts in batches and is told the outcome of each.
Optuna is only a sampler: its study lives in memory and is rebuilt from the records
(`replay`), so the store stays the one source of truth and a rerun resumes.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import numpy as np

from .space import Space
from .spec import Spec

if TYPE_CHECKING:  # imported by the Optuna sampler itself: a grid (or a recorded rerun) needs no optuna
    import optuna

INFEASIBLE_VALUE = math.inf
NSGA2_POPULATION = 50  # Optuna's default population size
# NSGA-II breeds each generation from its parent population alone, yet Optuna scans every
# trial of the study on every ask: past this many trials the study is rebuilt holding
# only that population, so the sampler's time per trial stays flat (see OptunaSampler._compact).
NSGA2_COMPACT_AT = 4 * NSGA2_POPULATION
# Optuna's NSGA-II keeps a trial's generation in this system attribute (optuna 4.2).
NSGA2_GENERATION_KEY = "nsga2:generation"


@dataclass
class Proposal:
    params: dict[str, Any]
    token: Any = None  # the sampler's handle (an Optuna trial), given back in `tell`


@dataclass
class Observation:
    params: dict[str, Any]
    feasible: bool
    totals: dict[str, float] = field(default_factory=dict)


def objective_values(spec: Spec, feasible: bool, totals: dict) -> list[float]:
    """What a sampler is told: infeasible candidates are worst on every objective."""
    values = []
    for obj in spec.model.objectives:
        v = totals.get(obj.metric)
        if not feasible or v is None or (isinstance(v, float) and math.isnan(v)):
            v = INFEASIBLE_VALUE if obj.direction == "minimize" else -INFEASIBLE_VALUE
        values.append(float(v))
    return values


class Sampler:
    exhaustive = False  # True when the sampler enumerates a finite set (no trial budget)
    batch: int | None = None  # how many candidates to ask at once with no spec setting (None: the driver's default)
    generational = False  # True when the outcomes of a batch are to be told together (NSGA-II)

    def replay(self, recorded: Sequence[Observation]) -> None:
        """Learn from candidates recorded by an earlier run."""

    def ask(self, n: int) -> list[Proposal]:
        raise NotImplementedError

    def tell(self, proposal: Proposal, obs: Observation, repeat: bool = False) -> None:
        """The outcome of a proposal; `repeat`: its candidate was evaluated before (the
        outcome is the recorded one)."""


class GridSampler(Sampler):
    exhaustive = True

    def __init__(self, space: Space):
        self._points: Iterator[dict] = space.grid()

    def ask(self, n: int) -> list[Proposal]:
        out = []
        for params in self._points:
            out.append(Proposal(params))
            if len(out) == n:
                break
        return out


class RandomSampler(Sampler):
    """Independent uniform draws, without repeating a point it drew or was told of before:
    in a finite space the batches stay full of new candidates until the space runs low
    (then a batch comes back short, after a bounded number of draws)."""

    DRAWS_PER_PROPOSAL = 20  # give up on a batch after this many draws per asked proposal

    def __init__(self, space: Space, seed: int):
        self.space = space
        self.rng = np.random.default_rng(seed)
        self.seen: set[tuple] = set()

    @staticmethod
    def _key(params: dict[str, Any]) -> tuple:
        return tuple(sorted((k, repr(v)) for k, v in params.items()))

    def replay(self, recorded: Sequence[Observation]) -> None:
        self.seen.update(self._key(o.params) for o in recorded)

    def ask(self, n: int) -> list[Proposal]:
        out: list[Proposal] = []
        for _ in range(self.DRAWS_PER_PROPOSAL * n):
            params = self.space.sample(self.rng)
            key = self._key(params)
            if key in self.seen:
                continue
            self.seen.add(key)
            out.append(Proposal(params))
            if len(out) == n:
                break
        return out


class OptunaSampler(Sampler):
    """TPE or NSGA-II over the space, with infeasible candidates as constraint violations."""

    def __init__(self, spec: Spec, kind: str):
        import optuna

        self.spec, self.space, self.kind = spec, spec.space, kind
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.compactions = 0  # how often the NSGA-II study was rebuilt from its parent population
        if kind == "nsga2":
            # A generation's children are drawn from the parent generations alone (only
            # completed trials count), so a whole generation is asked at once at no cost
            # to the search: one store transaction per generation, not per few trials.
            self.batch = NSGA2_POPULATION
            self.generational = True
        self.study = self._new_study()

    def _new_study(self) -> optuna.Study:
        import optuna

        seed = self.spec.model.search.seed
        if seed is not None and self.compactions:  # a rebuilt study's sampler: its own, reproducible draws
            seed = (seed + 7919 * self.compactions) % 2**32
        with warnings.catch_warnings():  # constraints_func and multivariate are marked experimental
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            if self.kind == "nsga2":
                sampler = optuna.samplers.NSGAIISampler(seed=seed, constraints_func=_constraint,
                                                        population_size=NSGA2_POPULATION)
            else:
                sampler = optuna.samplers.TPESampler(seed=seed, constraints_func=_constraint, n_startup_trials=8,
                                                     multivariate=True, group=True)
        return optuna.create_study(directions=[o.direction for o in self.spec.model.objectives], sampler=sampler)

    def parent_population(self) -> tuple[int, list[optuna.trial.FrozenTrial]]:
        """NSGA-II's generation and parent population: what its next children are bred from."""
        # Optuna's own selection (elitism over every completed generation, with constraints);
        # a private method of the pinned optuna (4.2), so the rebuilt study is exactly its state.
        return self.study.sampler._collect_parent_population(self.study)

    def _compact(self) -> None:
        """Rebuild a long NSGA-II study as its parent population alone, as generation 0.

        Equivalent for the search: NSGA-II's next parent population is the elite of the
        next generation together with this one, whatever came before it; the elite of a
        full population is that population itself. Only between generations (no trial
        running), so every proposal has been told."""
        import optuna

        if not self.generational or len(self.study.get_trials(deepcopy=False)) < NSGA2_COMPACT_AT:
            return
        if self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            return
        generation, parents = self.parent_population()
        if generation < 0:
            return
        self.compactions += 1
        study = self._new_study()
        for trial in parents:
            study.add_trial(optuna.trial.create_trial(
                params=trial.params, distributions=trial.distributions, values=trial.values,
                user_attrs=trial.user_attrs, system_attrs={**trial.system_attrs, NSGA2_GENERATION_KEY: 0}))
        self.study = study

    def replay(self, recorded: Sequence[Observation]) -> None:
        import optuna

        knobs = {k.name: k for k in self.space.knobs}
        dists = {k.name: k.distribution() for k in self.space.knobs}
        for obs in recorded:
            params = obs.params
            if any(name not in knobs or not _in_range(knobs[name], v) for name, v in params.items()):
                continue  # e.g. a baseline whose values lie outside the space
            self.study.add_trial(optuna.trial.create_trial(
                params=params, distributions={n: dists[n] for n in params},
                values=objective_values(self.spec, obs.feasible, obs.totals),
                user_attrs={"constraint": (0.0 if obs.feasible else 1.0,)}))

    def ask(self, n: int) -> list[Proposal]:
        self._compact()
        out = []
        for _ in range(n):
            trial = self.study.ask()
            out.append(Proposal(self.space.suggest(trial), trial))
        return out

    def tell(self, proposal: Proposal, obs: Observation, repeat: bool = False) -> None:
        import optuna

        trial = proposal.token
        if trial is None:
            return
        if repeat and self.generational:
            # A repeat told as a member of its generation would fill the generation with
            # copies of the fittest candidates: the population loses its diversity, NSGA-II
            # proposes ever more repeats and its time per new candidate grows. Failed, the
            # trial is no member: a generation holds distinct candidates.
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
            return
        trial.set_user_attr("constraint", (0.0 if obs.feasible else 1.0,))
        self.study.tell(trial, objective_values(self.spec, obs.feasible, obs.totals))


def _in_range(knob, value) -> bool:
    if knob.type == "categorical":
        return value in knob.values
    return isinstance(value, (int, float)) and knob.low <= value <= knob.high


def _constraint(trial: optuna.trial.FrozenTrial) -> Sequence[float]:
    # Optuna reads <= 0 as feasible: infeasible candidates steer the search away.
    return trial.user_attrs.get("constraint", (0.0,))


def sampler_kind(spec: Spec) -> str:
    s = spec.model.search
    if s.sampler != "auto":
        return s.sampler
    if spec.grid_size() and spec.grid_size() <= s.max_grid:
        return "grid"
    # TPE handles several objectives too, and unlike NSGA-II it learns from the first
    # handful of trials rather than after whole generations: better for small budgets.
    return "tpe"


def make_sampler(spec: Spec) -> Sampler:
    kind = sampler_kind(spec)
    if kind == "grid":
        return GridSampler(spec.space)
    if kind == "random":
        return RandomSampler(spec.space, spec.model.search.seed)
    return OptunaSampler(spec, kind)


def batch_size(spec: Spec, sampler: Sampler, workers: int) -> int:
    """How many candidates a sweep asks for at once: the spec's, else the sampler's, else
    GRID_BATCH for a grid or random draws, else two per worker (at least 4)."""
    kind = sampler_kind(spec)
    return spec.model.search.batch or sampler.batch or (GRID_BATCH if kind in ("grid", "random")
                                                         else max(4, 2 * workers))


# The vectorised model's cost per call is mostly fixed (numpy over the candidate axis):
# 256 candidates a call ran at 2.7 k/s, 2,320 at 9.3 k/s (bench/bench_sweep.py). A batch
# this large is a second or two of a driver's work, and one transaction of its records.
GRID_BATCH = 4096
