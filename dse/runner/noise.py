"""Whether two candidates' emulator host times differ for real or by the noise of the host.

The emulator's run of a candidate is timed `host_time_repeats` times (its min, median and
max recorded, kind `emulator_host_time`). A difference between two candidates' medians no
larger than the spread of either's repeats (max - min) is noise; so is any difference
between two identical designs (the same config and mapping: the same program). Every view
that sets two host times side by side (`dse compare`, the report) says it with
`host_time_comparison`'s words, not as a bare ratio."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

HOST_TIME = "emulator_host_time"


@dataclass(frozen=True)
class HostTimeComparison:
    a: float  # median seconds of A's timed runs
    b: float
    ratio: float  # b / a
    noise: bool | None  # True: within the noise; False: a real difference; None: the spread is unknown
    words: str  # "B/A 1.59x: within the repeats' spread (...): noise, not a difference"


def _spread(figures: Mapping[str, float]) -> tuple[float, float] | None:
    """(min, max) of the timed runs, when at least two were timed and the max recorded."""
    low, high, runs = figures.get("run_seconds_min"), figures.get("run_seconds_max"), figures.get("runs")
    if low is None or high is None or runs is None or runs < 2 or low != low or high != high:
        return None
    return float(low), float(high)


def _range(name: str, figures: Mapping[str, float], spread: tuple[float, float] | None) -> str:
    if spread is None:
        return f"{name}: 1 run" if figures.get("runs", 1) < 2 else f"{name}: spread not recorded"
    return f"{name}: {spread[0]:.4g}-{spread[1]:.4g} s over {int(figures['runs'])} runs"


def host_time_comparison(a: Mapping[str, float], b: Mapping[str, float], identical: bool = False,
                         names: tuple[str, str] = ("A", "B")) -> HostTimeComparison | None:
    """Two candidates' host times compared: `a`, `b` their `emulator_host_time` figures by
    name; `identical`: the two are the same design. None when either has no median."""
    ma, mb = a.get("run_seconds_median"), b.get("run_seconds_median")
    if ma is None or mb is None or ma != ma or mb != mb or ma <= 0:
        return None
    ratio = mb / ma
    sa, sb = _spread(a), _spread(b)
    spreads = f"{_range(names[0], a, sa)}, {_range(names[1], b, sb)}"
    head = f"{names[1]}/{names[0]} {ratio:.3g}x"
    if identical:
        return HostTimeComparison(ma, mb, ratio, True, f"{head}: identical designs, so the difference is the host's "
                                                       f"noise, not the design's ({spreads})")
    widest = max((s[1] - s[0] for s in (sa, sb) if s is not None), default=None)
    if widest is None:
        return HostTimeComparison(ma, mb, ratio, None, f"{head}: not judged, the repeats' spread is unknown "
                                                       f"({spreads}; set [stages] host_time_repeats >= 2)")
    if abs(mb - ma) <= widest:
        return HostTimeComparison(ma, mb, ratio, True, f"{head}: within the repeats' spread ({spreads}): noise, "
                                                       "not a difference")
    return HostTimeComparison(ma, mb, ratio, False, f"{head}: beyond the repeats' spread ({spreads})")
