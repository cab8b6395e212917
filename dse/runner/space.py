"""The search space: typed knobs over chip and mapping fields, conditions, constraints.

A knob is categorical (`values`), an integer range (`low`, `high`, optional `step`, `log`)
or a float range (`low`, `high`, optional `log`, and `step` or `grid_points` for a grid).
A knob with `when` is active only when that expression over the other knobs holds; an
inactive knob keeps the baseline's value and is absent from the candidate's parameters.
Constraints are expressions over knob values that every candidate must satisfy; one that
fails is recorded as infeasible with the constraint as its reason, without evaluation.
"""

from __future__ import annotations

import itertools
import json
import math
from typing import TYPE_CHECKING, Any, Iterator, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from dse.records.outcomes import CONSTRAINT_REJECTED
from emulator.formula import Formula, FormulaError

if TYPE_CHECKING:  # optuna is the Optuna sampler's: a spec reads without it
    from optuna.distributions import BaseDistribution


# A knob over this target chooses which of the baseline chip's Balls the chip keeps.
BALL_SET_TARGET = "chip.balls"
# A knob over this target chooses the chip's core groups (each value a list of groups, each
# with its own hardware overrides); kept as canonical JSON text, so values stay hashable
# for the grid and Optuna, and turned back into the list when applied.
CORE_GROUPS_TARGET = "chip.cores.groups"


def core_groups(value: Any) -> str:
    """A list of core groups in its one spelling: canonical JSON (keys sorted, no spaces)."""
    if isinstance(value, str):  # the canonical text itself (a value already spelled so)
        try:
            value = json.loads(value)
        except ValueError:
            pass
    if not isinstance(value, list) or not all(isinstance(g, dict) for g in value):
        raise ValueError(f"a core-groups value is a list of groups (tables with role, count, ...), got {value!r}")
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def ball_set(value: Any) -> str:
    """A Ball set in its one spelling: the kinds sorted and comma-separated ("matrix,relu"),
    from a list of kinds or such a string in any order (a set, not a sequence)."""
    if isinstance(value, str):
        names = value.split(",")
    elif isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        names = list(value)
    else:
        raise ValueError(f"a Ball set is a list of Ball kinds or a comma-separated string, got {value!r}")
    return ",".join(sorted({n.strip() for n in names if n.strip()}))


class Knob(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    target: str = Field(pattern=r"^(chip|mapping|workload)\.[A-Za-z0-9_.]+$")
    values: list[Any] | None = Field(None, min_length=1)
    type: Literal["int", "float", "categorical"] | None = None
    low: int | float | None = None
    high: int | float | None = None
    step: int | float | None = Field(None, gt=0)
    log: bool = False
    grid_points: int | None = Field(None, ge=2)
    when: str | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> "Knob":
        if self.target == BALL_SET_TARGET:
            if self.values is None:
                raise ValueError("a Ball set knob lists its values: each a list of Ball kinds or a "
                                 "comma-separated string, e.g. [\"matrix,relu\", \"matrix\"] or [[\"matrix\"]]")
            self.values = [ball_set(v) for v in self.values]
        if self.target == CORE_GROUPS_TARGET and self.values is not None:
            self.values = [core_groups(v) for v in self.values]
        if self.values is not None:
            if self.low is not None or self.high is not None:
                raise ValueError("give either values or low/high, not both")
            self.type = self.type or "categorical"
            if self.type != "categorical":
                raise ValueError("values make a categorical knob")
            return self
        if self.low is None or self.high is None:
            raise ValueError("a knob needs values, or low and high")
        if not self.low < self.high:
            raise ValueError(f"low {self.low} must be below high {self.high}")
        if self.type is None:  # written as whole numbers (4, not 4.0): an int knob
            whole = [v for v in (self.low, self.high, self.step) if v is not None]
            self.type = "int" if all(isinstance(v, int) for v in whole) else "float"
        if self.log and self.low <= 0:
            raise ValueError("a log-scaled knob needs low > 0")
        if self.log and self.step is not None:
            raise ValueError("a knob is either log-scaled or stepped, not both")
        if self.type == "int":
            for v in (self.low, self.high, self.step):
                if v is not None and not float(v).is_integer():
                    raise ValueError(f"an int knob needs whole numbers, got {v}")
        return self

    # -- the values a knob can take ----------------------------------------------------
    def distribution(self) -> BaseDistribution:
        from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

        if self.type == "categorical":
            return CategoricalDistribution(self.values)
        if self.type == "int":
            return IntDistribution(int(self.low), int(self.high), log=self.log, step=int(self.step or 1))
        return FloatDistribution(self.low, self.high, log=self.log, step=self.step)

    def grid_values(self) -> list[Any] | None:
        """The values a grid visits (None if the knob has no finite grid)."""
        if self.type == "categorical":
            return list(self.values)
        if self.type == "int":
            if self.log:  # powers of two inside the range: the usual sweep of sizes
                lo, hi = int(self.low), int(self.high)
                out = [1 << k for k in range(max(lo, 1).bit_length() - 1, hi.bit_length()) if lo <= 1 << k <= hi]
                return out or [lo]
            return list(range(int(self.low), int(self.high) + 1, int(self.step or 1)))
        if self.step is not None:
            n = int(math.floor((self.high - self.low) / self.step + 1e-9)) + 1
            return [float(self.low + i * self.step) for i in range(n)]
        if self.grid_points is not None:
            space = np.geomspace if self.log else np.linspace
            return [float(v) for v in space(self.low, self.high, self.grid_points)]
        return None

    def grid_count(self) -> int | None:
        """How many values `grid_values` visits, counted without listing them (a knob of
        10^7 integers is a number here, not a list); None if the knob has no finite grid."""
        if self.type == "categorical":
            return len(self.values)
        if self.type == "int":
            if self.log:  # at most 64 powers of two: listing them is counting them
                return len(self.grid_values())
            return (int(self.high) - int(self.low)) // int(self.step or 1) + 1
        if self.step is not None:
            return int(math.floor((self.high - self.low) / self.step + 1e-9)) + 1
        return self.grid_points

    def sample(self, rng: np.random.Generator) -> Any:
        if self.type == "categorical":
            return self.values[int(rng.integers(len(self.values)))]
        if self.type == "int":
            if self.log:
                return int(round(math.exp(rng.uniform(math.log(self.low), math.log(self.high)))))
            step = int(self.step or 1)
            return int(self.low) + step * int(rng.integers((int(self.high) - int(self.low)) // step + 1))
        if self.log:
            return float(math.exp(rng.uniform(math.log(self.low), math.log(self.high))))
        if self.step is not None:
            n = int(math.floor((self.high - self.low) / self.step + 1e-9)) + 1
            return float(self.low + self.step * int(rng.integers(n)))
        return float(rng.uniform(self.low, self.high))


class Constraint(BaseModel):
    model_config = ConfigDict(extra="forbid")

    expr: str
    reason: str = ""


class Space:
    """Knobs in spec order (a condition may only name knobs listed before it)."""

    def __init__(self, knobs: list[Knob], constraints: list[Constraint], baseline_values: dict[str, Any]):
        self.knobs = knobs
        self.constraints = constraints
        self.baseline_values = baseline_values  # knob name -> the baseline's value at its target
        names = [k.name for k in knobs]
        self._when_formulas = {k.name: Formula(k.when, names[:i], allow_strings=True)
                               for i, k in enumerate(knobs) if k.when}
        self._constraint_formulas = [Formula(c.expr, names, allow_strings=True) for c in constraints]

    @staticmethod
    def check(knobs: list[Knob], constraints: list[Constraint]) -> list[tuple[str, str, str]]:
        """Problems as (field, value, message) without building the space."""
        problems = []
        names = [k.name for k in knobs]
        for i, k in enumerate(knobs):
            if k.when:
                try:
                    Formula(k.when, names[:i], allow_strings=True)
                except FormulaError as exc:
                    problems.append((f"space[{i}].when", k.when, f"an expression over the knobs listed before it ({exc})"))
        for i, c in enumerate(constraints):
            try:
                Formula(c.expr, names, allow_strings=True)
            except FormulaError as exc:
                problems.append((f"constraints[{i}].expr", c.expr, f"an expression over the knob names ({exc})"))
        return problems

    @property
    def names(self) -> list[str]:
        return [k.name for k in self.knobs]

    def active(self, name: str, params: dict[str, Any]) -> bool:
        cond = self._when_formulas.get(name)
        if cond is None:
            return True
        return bool(cond(**self.full(params)))

    def full(self, params: dict[str, Any]) -> dict[str, Any]:
        """Every knob's value: the candidate's, or the baseline's where inactive or absent."""
        return {**self.baseline_values, **params}

    def violated(self, params: dict[str, Any]) -> str:
        """The first constraint the parameters break, as a reason ('' if none)."""
        if not self.constraints:
            return ""
        values = self.full(params)
        for constraint, formula in zip(self.constraints, self._constraint_formulas):
            if not bool(formula(**values)):
                return (f"{CONSTRAINT_REJECTED} {constraint.expr!r}: it does not hold"
                        + (f" ({constraint.reason})" if constraint.reason else ""))
        return ""

    def prune_inactive(self, params: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k in self.knobs:
            if k.name in params and self.active(k.name, out):
                out[k.name] = params[k.name]
        return out

    def grid_size(self) -> int:
        """The grid's points before inactive knobs collapse some of them (an upper bound),
        counted, not listed."""
        return math.prod(k.grid_count() or 0 for k in self.knobs)

    def grid(self) -> Iterator[dict[str, Any]]:
        axes = [k.grid_values() for k in self.knobs]
        names = self.names
        seen = set()
        if not self._when_formulas:  # every knob active: a point is its values, in knob order
            for combo in itertools.product(*axes):
                if combo not in seen:  # (a value listed twice)
                    seen.add(combo)
                    yield dict(zip(names, combo))
            return
        for combo in itertools.product(*axes):
            params = self.prune_inactive(dict(zip(names, combo)))
            key = tuple(sorted(params.items(), key=lambda kv: kv[0]))
            if key not in seen:  # inactive knobs collapse several grid points into one
                seen.add(key)
                yield params

    def sample(self, rng: np.random.Generator) -> dict[str, Any]:
        params: dict[str, Any] = {}
        for k in self.knobs:
            if self.active(k.name, params):
                params[k.name] = k.sample(rng)
        return params

    def suggest(self, trial) -> dict[str, Any]:
        """Ask an Optuna trial for the active knobs (define-by-run, so conditions hold)."""
        params: dict[str, Any] = {}
        for k in self.knobs:
            if self.active(k.name, params):
                params[k.name] = _suggest(trial, k)
        return params


def _suggest(trial, knob: Knob) -> Any:
    if knob.type == "categorical":
        return trial.suggest_categorical(knob.name, knob.values)
    if knob.type == "int":
        return trial.suggest_int(knob.name, int(knob.low), int(knob.high), step=int(knob.step or 1), log=knob.log)
    return trial.suggest_float(knob.name, knob.low, knob.high, step=knob.step, log=knob.log)
