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
