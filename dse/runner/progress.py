"""The sweep's progress bar (tqdm.auto: text on a terminal, a widget in Jupyter), whose
total is an estimate the sweep corrects as it learns it.

Its first total counts a slot per candidate the spec can ask for: the baseline, each hand
candidate, each grid point (or the trial budget). Slots that turn out to be a candidate
counted already (a grid point equal to the baseline, a knob made inactive by a `when`)
take their slot off the total; a sampler that stops early, or a wall-time limit, sets the
total to what was done when the sweep ends. A bar ends at its total on success: a
notebook's widget turns red when closed short of it, green when it reaches it.
"""

from __future__ import annotations

import math
import tomllib

# The [search] defaults (dse.runner.spec.Search reads them from here): the full grid when it
# has at most MAX_GRID points, else TRIALS sampled candidates.
MAX_GRID = 256
TRIALS = 40
# Above this many candidates a sweep is refused unless asked for (dse.runner.size).
MAX_CANDIDATES = 100_000


def planned(grid_size: int, sampler: str, trials: int, max_grid: int, hand: int) -> int:
    """How many candidates a sweep expects at its start: the baseline, the hand-picked, and
    the grid (`sampler` "grid", or "auto" with a grid of at most `max_grid` points) or the
    trial budget. The first total of the sweep's bar, and the live page's."""
    grid = sampler == "grid" or (sampler == "auto" and 0 < grid_size <= max_grid)
    return 1 + hand + (grid_size if grid else trials)


def planned_from_text(spec_text: str | None) -> int | None:
    """`planned` for a recorded spec (its TOML text); None when it cannot be read (an
    experiment recorded by hand, a spec of an older format): then no percentage is shown."""
    from .space import Knob

    try:
        data = tomllib.loads(spec_text or "")
        search = data.get("search", {})
        grid = math.prod(Knob(**k).grid_count() or 0 for k in data.get("space", []))
        return planned(grid, search.get("sampler", "auto"), int(search.get("trials", TRIALS)),
                       int(search.get("max_grid", MAX_GRID)), len(data.get("candidates", [])))
    except (tomllib.TOMLDecodeError, TypeError, ValueError, AttributeError):
        return None


def make_bar(total: int, initial: int, desc: str, disable: bool | None):
    from tqdm.auto import tqdm  # a widget in Jupyter (ipywidgets), text on a terminal

    # disable=None: no bar when stderr is not a terminal (logs, CI)
    return tqdm(total=total, initial=min(initial, total), disable=disable, desc=desc, unit="cand", mininterval=0.5)


def set_total(bar, total: int) -> None:
    """The bar's total changed to `total` (never below what it has done), on a terminal and
    in a notebook widget (whose bar keeps the max it was made with unless told)."""
    total = max(int(total), int(bar.n))
    if total == bar.total:
        return
    bar.total = total
    container = getattr(bar, "container", None)  # tqdm.notebook's (label, IntProgress, label)
    if container is not None:
        container.children[1].max = total
    bar.refresh()


def finish(bar, note: str = "") -> None:
    """A sweep that ended well: its bar at 100 % (the total is what was done), then closed
    (green in a notebook). `note`: why it did less than its first total, when it did."""
    if note:
        bar.set_postfix_str(note, refresh=False)
    set_total(bar, bar.n)
    bar.refresh()
