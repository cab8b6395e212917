"""An iterator drawn one item ahead on a background thread: the next item is computed while
the reader works on the one it took (`StreamedReference`: a graph's next reference value
while the emulator runs the epoch that produces it).

One item ahead, never more: the thread draws item k+1 once the reader has taken item k, and
waits until item k+1 is taken. A reader that lets each item go before taking the next holds
at most two at once. An item marked not `early` is drawn only once the reader asks for it, as
a plain iterator would (a value drawn early sits beside what the reader would have let go
first: a real layer's attention scores are 512 MB each).

The thread is the only one that touches the source iterator. An exception it raises is raised
to the reader (the very object) where the reader would have taken that item; the source then
counts as exhausted, as a generator that raised does. `close` stops the thread and waits for
it (the item it is drawing is finished and dropped: a torch kernel cannot be interrupted); a
reader that is dropped stops it too (without waiting)."""

from __future__ import annotations

import itertools
import threading
import weakref
from typing import Iterator, Sequence

_END = object()  # the source is exhausted (or raised, the error delivered first)


class _Slot:
    """What the reader and the thread share (not the `Ahead` itself, so that a dropped reader
    is collected while its thread still runs, and its finalizer stops it)."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.item = None
        self.full = False  # an item (or _END, or an error) is waiting to be taken
        self.asked = False  # the reader waits for the next item
        self.error: BaseException | None = None
        self.closed = False

    def stop(self) -> None:
        with self.cond:
            self.closed = True
            self.item, self.full = None, False
            self.cond.notify_all()


def _draw(source: Iterator, slot: _Slot, early: Sequence[bool]) -> None:
    try:
        for index in itertools.count():
            with slot.cond:
                while not slot.closed and (slot.full or not (slot.asked or index >= len(early) or early[index])):
                    slot.cond.wait()
                if slot.closed:
                    return
            try:
                item = next(source)
            except StopIteration:
                item = _END
            except BaseException as exc:  # noqa: BLE001 - raised on the reader's thread
                slot.error, item = exc, _END
            with slot.cond:
                if not slot.closed:
                    slot.item, slot.full = item, True
                    slot.cond.notify_all()
            if item is _END:
                return
            del item  # the reader's alone now: let go with it, not when the next is drawn
    finally:
        close = getattr(source, "close", None)
        if close is not None:
            close()  # a generator's own cleanup, on the thread that ran it


class Ahead:
    """`source`'s items in order, each drawn on a background thread (named `name`) as soon as
    the one before it is taken; item i only once asked for when ``early[i]`` is false (items
    past `early`'s end: as soon as the one before)."""

    def __init__(self, source: Iterator, name: str = "dse-ahead", early: Sequence[bool] = ()):
        self._slot = _Slot()
        self._thread = threading.Thread(target=_draw, args=(iter(source), self._slot, early), name=name,
                                        daemon=True)
        self._thread.start()
        self._stop = weakref.finalize(self, self._slot.stop)

    def __iter__(self) -> Ahead:
        return self

    def __next__(self):
        slot = self._slot
        with slot.cond:
            while not slot.full:
                if slot.closed:
                    raise StopIteration
                if not slot.asked:
                    slot.asked = True
                    slot.cond.notify_all()
                slot.cond.wait()  # a Ctrl-C here is raised as the reader's (its caller closes)
            slot.asked = False
            item = slot.item
            if item is not _END:  # (the end stays: every later call ends too)
                slot.item, slot.full = None, False
                slot.cond.notify_all()  # draw the next
        if item is _END:
            if slot.error is not None:
                error, slot.error = slot.error, None
                raise error
            raise StopIteration
        return item

    def close(self) -> None:
        """Stop drawing; return once the thread has ended."""
        self._stop()
        if self._thread is not threading.current_thread():
            self._thread.join()
