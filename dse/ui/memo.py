"""What the workbench's views compute from a whole experiment (its judgement, its search
history, the figures its candidate table is sorted and filtered by): computed once per
state of the records and shared by every request until they change. A sorted, filtered
page of 100,000 candidates is then ranked in memory from the one read of the figures
(`queries.rankable`, which the judgement reads too) and reads its 50 rows, without judging
every candidate again; the figure itself is still the one computation
(`acceptance.judge_experiment`), only not repeated.

The state: the experiment's row as read for the request, and the store's `revision` (a
candidate or run added, a run finished or crashed: anything a figure, an outcome or a
verdict reads). Decisions and notes are read fresh by the views, not kept here."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Callable

KEPT = 32  # results kept (a few views x a few experiments)


class Memo:
    def __init__(self, store, kept: int = KEPT):
        self.store = store
        self.kept = kept
        self._lock = threading.Lock()
        self._items: OrderedDict[tuple, Any] = OrderedDict()

    def get(self, exp: dict, what: tuple, compute: Callable[[], Any]) -> Any:
        """`compute()` for the experiment `exp` (its row, as read now) and `what` (the view
        and its arguments), or the value it gave at the same state of the records."""
        key = (repr(sorted(exp.items(), key=lambda kv: kv[0])), self.store.revision(), what)
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        value = compute()  # outside the lock: two first requests may both compute, alike
        with self._lock:
            self._items[key] = value
            while len(self._items) > self.kept:
                self._items.popitem(last=False)
        return value
