"""The reference drawn on a thread of its own (`dse.numerics.ahead.Ahead`, `StreamedReference`):
the source's items in order, one drawn ahead and never two, an item not marked early drawn only
when asked; the source's error raised to the reader as itself; the thread gone once closed,
dropped, or the run it serves interrupted or failed."""

from __future__ import annotations

import gc
import signal
import threading
import time

import pytest
import torch

from dse.chips import load_chip
from dse.mapping import Candidate, Mapping
from dse.numerics import emulate_graph
from dse.numerics import run as numerics_run
from dse.numerics.ahead import Ahead
from dse.numerics.run import StreamedReference, prepare_recipe

LLAMA = dict(seq=64, vocab=64, dim=64, layers=1, heads=4, kv_heads=2)


class Source:
    """Items 0, 1, ... n-1, each drawn noted (and by which thread); `fail` at that index."""

    def __init__(self, n: int, fail: int | None = None):
        self.n, self.fail, self.drawn, self.threads, self.closed = n, fail, [], set(), False

    def __iter__(self):
        try:
            for i in range(self.n):
                self.threads.add(threading.current_thread().name)
                if i == self.fail:
                    raise ValueError(f"item {i} failed")
                self.drawn.append(i)
                yield i
        finally:
            self.closed = True


def settle(condition, seconds: float = 5.0) -> bool:
    """Whether `condition()` holds within `seconds` (the drawing thread's pace is its own)."""
    end = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > end:
            return False
        time.sleep(0.005)
    return True


def alive(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == name and t.is_alive()]


def test_items_in_order_on_another_thread_then_the_end_for_good():
    src = Source(5)
    ahead = Ahead(iter(src), "test-ahead")
    assert list(ahead) == [0, 1, 2, 3, 4]
    assert src.threads == {"test-ahead"}
    with pytest.raises(StopIteration):
        next(ahead)
    assert settle(lambda: not alive("test-ahead")) and src.closed


def test_one_item_ahead_and_never_two():
    src = Source(10)
    ahead = Ahead(iter(src), "test-ahead")
    assert settle(lambda: src.drawn == [0])
    time.sleep(0.05)
    assert src.drawn == [0]  # the first waits to be taken: nothing more drawn
    assert next(ahead) == 0
    assert settle(lambda: src.drawn == [0, 1])  # drawn while the reader works on item 0
    time.sleep(0.05)
    assert src.drawn == [0, 1]
    assert next(ahead) == 1 and next(ahead) == 2
    assert settle(lambda: src.drawn == [0, 1, 2, 3])
    ahead.close()


def test_an_item_not_marked_early_is_drawn_only_when_asked():
    src = Source(4)
    ahead = Ahead(iter(src), "test-ahead", early=[True, False, True])
    assert next(ahead) == 0
    time.sleep(0.1)
    assert src.drawn == [0]  # item 1 waits for the reader
    assert next(ahead) == 1
    assert settle(lambda: src.drawn == [0, 1, 2])  # item 2 early again
    assert list(ahead) == [2, 3]  # past the marks: early


def test_the_sources_error_reaches_the_reader_as_itself_in_its_place():
    src = Source(5, fail=2)
    ahead = Ahead(iter(src), "test-ahead")
    assert next(ahead) == 0 and next(ahead) == 1
    with pytest.raises(ValueError, match="item 2 failed"):
        next(ahead)
    with pytest.raises(StopIteration):  # exhausted, as a generator that raised is
        next(ahead)
    assert settle(lambda: not alive("test-ahead"))


def test_closed_or_dropped_the_thread_ends_and_the_source_is_closed():
    src = Source(100)
    ahead = Ahead(iter(src), "test-ahead")
    assert next(ahead) == 0
    ahead.close()
    assert not alive("test-ahead") and src.closed  # close waits for the thread
    with pytest.raises(StopIteration):
        next(ahead)
    src = Source(100)
    ahead = Ahead(iter(src), "test-ahead")
    assert next(ahead) == 0
    del ahead
    gc.collect()
    assert settle(lambda: not alive("test-ahead")) and src.closed


def test_a_ctrl_c_while_the_reader_waits_is_the_readers():
    """SIGINT to the main thread while it waits for an item the thread is still drawing: the
    reader gets the KeyboardInterrupt; closed, the thread ends once that item is drawn."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("SIGINT raised as KeyboardInterrupt in this thread only")
    release = threading.Event()

    def slow():
        yield 0
        release.wait(10)  # a long kernel
        yield 1

    ahead = Ahead(slow(), "test-ahead")
    assert next(ahead) == 0
    timer = threading.Timer(0.1, signal.pthread_kill, (threading.main_thread().ident, signal.SIGINT))
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        next(ahead)
    release.set()
    ahead.close()
    assert not alive("test-ahead")


@pytest.fixture(scope="module")
def llama():
    prep = prepare_recipe("llama_prefill", LLAMA)
    assert not prep.failed
    return prep


def test_the_streamed_reference_computes_on_one_torch_thread_of_its_own(llama, monkeypatch):
    """Its values are drawn on its thread with torch's pool at one thread (the emulator's run
    has the other core), the reader's own count untouched, and they are the trace's."""
    from dse.workload import interpret

    seen = set()
    matmul = interpret.INTERPRETERS["matmul"]

    def watched(op, args):
        seen.add((threading.current_thread().name, torch.get_num_threads()))
        return matmul(op, args)

    monkeypatch.setitem(interpret.INTERPRETERS, "matmul", watched)
    mine = torch.get_num_threads()
    graph = llama.graph
    full = graph.trace(*llama.inputs)
    seen.clear()
    ref = StreamedReference(graph, llama.inputs)
    for op in graph.ops:
        assert torch.equal(ref[op.outputs[0]], full[op.outputs[0]])
    ref.close()
    assert seen == {("dse-reference", 1)}
    assert torch.get_num_threads() == mine


def test_the_reference_thread_keeps_one_torch_thread_after_an_explicit_count(llama, monkeypatch):
    """A process that called torch.set_num_threads (a notebook, an earlier test): torch's first
    call on a new thread sets OpenMP's count there to that number, which must not undo the
    reference thread's limit (it did, made before that first call)."""
    from dse.workload import interpret

    seen = set()
    matmul = interpret.INTERPRETERS["matmul"]

    def watched(op, args):
        seen.add(torch.get_num_threads())
        return matmul(op, args)

    monkeypatch.setitem(interpret.INTERPRETERS, "matmul", watched)
    was = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        ref = StreamedReference(llama.graph, llama.inputs)
        for op in llama.graph.ops:
            ref[op.outputs[0]]
        ref.close()
        assert seen == {1} and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(was)


def _run(llama, **kwargs):
    cand = Candidate(load_chip("goban"), Mapping(workers=4))
    return emulate_graph(llama.graph, cand, list(llama.inputs), llama.expected, llama.tolerance,
                         llama.reference_kind, parts=llama.parts, keep_image=False, **kwargs)


def test_a_run_interrupted_at_a_boundary_leaves_no_reference_thread(llama, monkeypatch):
    calls = []
    original = numerics_run.BoundaryCheck.__call__

    def interrupted(self, epoch):
        calls.append(epoch)
        if len(calls) == 3:
            raise KeyboardInterrupt
        original(self, epoch)

    monkeypatch.setattr(numerics_run.BoundaryCheck, "__call__", interrupted)
    before = threading.active_count()
    with pytest.raises(KeyboardInterrupt):
        _run(llama)
    assert not alive("dse-reference") and threading.active_count() == before


def test_a_reference_that_fails_fails_the_run_with_its_own_error_and_no_thread_left(llama, monkeypatch):
    from dse.workload import interpret

    softmax = interpret.INTERPRETERS["softmax"]

    def broken(op, args):
        raise RuntimeError("softmax broke")

    monkeypatch.setitem(interpret.INTERPRETERS, "softmax", broken)
    with pytest.raises(RuntimeError, match="^softmax broke$"):
        _run(llama)
    assert not alive("dse-reference")
    monkeypatch.setitem(interpret.INTERPRETERS, "softmax", softmax)


def test_many_runs_leave_no_thread_and_give_todays_report(llama):
    before = threading.active_count()
    reports = [_run(llama) for _ in range(3)]
    assert threading.active_count() == before and not alive("dse-reference")
    assert all(r.verdict.passed for r in reports)
    assert len({(r.cycles, str(r.verdict.to_dict(ops=True))) for r in reports}) == 1
