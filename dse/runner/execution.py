"""Where candidates are evaluated: in this process, a local process pool, or Dask.

One code path: the driver cuts the work into chunks, an executor evaluates each chunk
(`evaluate_items`) wherever it runs and returns plain outcomes; only the driver writes
the store. A worker process that dies takes its chunk with it: the chunk's candidates
are retried once, one at a time, and a candidate that kills its worker again is
recorded as failed.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import os
import signal
import sys
import threading
import time
import traceback as tb
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing import get_context
from typing import Iterator

from emulator.thread_limits import limited

from ..analytical.moe import routed
from ..chips import validate_chip
from ..errors import InputError
from ..mapping import Candidate, mapping_from_dict
from ..records import MetricRow
from ..records.provenance import process_start
from .chain import EVALUATION, run_stages
from .cluster import CLUSTER_ENV, CONNECT_TIMEOUT_S
from .stages import AnalyticalResult, Outcome, Workload

# Test hook: a worker process SIGKILLs itself on a candidate whose hash starts with this.
KILL_ENV = "DSE_TEST_KILL_WORKER_ON"
# Test hook: a worker process hangs (sleeps for an hour) in the emulator stage of a candidate
# whose hash starts with this: a stand-in for an emulation that never ends.
HANG_ENV = "DSE_TEST_HANG_EMULATOR_ON"


@dataclass
class WorkItem:
    run_id: int  # the driver's handle for this evaluation
    config_json: str  # the chip config as canonical JSON (cheap to send, the cache key)
    mapping: dict
    hash: str = ""
    stage: str = "analytical"  # or "emulator": the run's stage, which picks its stages in chain.EVALUATION
    mapping_json: str = ""  # the mapping as canonical JSON, when the driver has it (the cache key)


def _failed(run_id: int, exc: BaseException) -> Outcome:
    return Outcome(run_id, "failed", error=f"{type(exc).__name__}: {exc}",
                   traceback="".join(tb.format_exception(type(exc), exc, exc.__traceback__)))


def evaluate_items(work, items: list[WorkItem], kill: str | None = None, hang: str | None = None) -> list[Outcome]:
    """A chunk of candidates through the chain's evaluation stages (`chain.EVALUATION`):
    analytical as one batch, emulator -> numerics one by one. A candidate that raises
    is isolated and reported failed; the others are unaffected. `kill` is the worker-death
    test hook (a hash prefix), never set in the driver's own process."""
    work = work if isinstance(work, Workload) else Workload(work)
    outcomes: dict[int, Outcome] = {}
    analytical: list[tuple[WorkItem, Candidate]] = []
    for item in items:
        if kill and item.hash.startswith(kill):
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            chip = _chip(item.config_json)
            mapping = _mapping(item.mapping_json) if item.mapping_json else mapping_from_dict(item.mapping, "(candidate)")
            cand = Candidate(chip, mapping)
            if item.hash:  # the driver hashed it already (the same content_hash): not again per item
                cand.__dict__["hash"] = item.hash
        except InputError as exc:
            outcomes[item.run_id] = Outcome(item.run_id, "infeasible",
                                            reason=f"invalid chip for this combination: {exc.field}: {exc.allowed}")
            continue
        if item.stage == "emulator":
            if hang is not None and item.hash.startswith(hang):
                time.sleep(3600)
            try:
                emulation = work.emulation_for(cand.mapping.quantize_choice, cand.mapping.workload)
            except Exception as exc:  # this granularity's frontend steps fail: the candidate's failure
                outcomes[item.run_id] = _failed(item.run_id, exc)
                continue
            try:
                evidence = run_stages((work.evaluation or EVALUATION)["emulator"], emulation, cand)
            except Exception as exc:  # a crash in lowering or emulation is this candidate's failed run
                outcomes[item.run_id] = _failed(item.run_id, exc)
                continue
            outcomes[item.run_id] = Outcome(item.run_id, evidence.status, evidence.reason, evidence.totals,
                                            evidence.metrics, evidence.error, artifacts=evidence.artifacts)
        else:
            analytical.append((item, cand))
    # One vectorised batch per analytical graph (candidates of one quantization granularity
    # and workload point).
    by_graph: dict = {}
    graph_of: dict[int, tuple] = {}  # by mapping object: a chunk's candidates share a few
    for pair in analytical:
        m = pair[1].mapping
        key = graph_of.get(id(m))
        if key is None:
            key = graph_of[id(m)] = (m.quantize_choice, json.dumps(m.workload, sort_keys=True) if m.workload else "")
        by_graph.setdefault(key, []).append(pair)
    if work.stages:  # a staged workload: every candidate runs every stage (the spec allows no graph knobs)
        by_graph = {}
        if analytical:
            _analytical_group(work.stages, analytical, work.calibration, outcomes, work.ppa_calibration)
    for (quantization, _), group in by_graph.items():
        try:
            graph = work.graph_for(quantization, group[0][1].mapping.workload)
        except Exception as exc:  # this granularity's steps do not apply: the candidates fail
            for item, _ in group:
                outcomes[item.run_id] = _failed(item.run_id, exc)
            continue
        if work.routing is not None:  # the MoE layers costed with the spec's routing

            route = routed(graph, *work.routing)
            if route.reason:
                for item, _ in group:
                    outcomes[item.run_id] = Outcome(item.run_id, "infeasible", route.reason, notes=route.note)
                continue
            graph = route.graph
        _analytical_group(graph, group, work.calibration, outcomes, work.ppa_calibration)
        if work.routing is not None:
            for item, _ in group:
                got = outcomes[item.run_id]
                got.notes = "; ".join(filter(None, [route.note, got.notes]))
                if got.status == "ok":
                    got.metrics.append(MetricRow("analytical", "expert_imbalance", route.imbalance, "ratio", "total", ""))
    return [outcomes[item.run_id] for item in items]


def _analytical_group(graph, group: list[tuple[WorkItem, Candidate]], calibration, outcomes,
                      ppa_calibration=None) -> None:
    try:
        results = _analytical_batch(graph, [cand for _, cand in group], calibration, ppa_calibration)
    except Exception:  # find the culprit: evaluate one at a time
        results = []
        for _, cand in group:
            try:
                results.append(_analytical_batch(graph, [cand], calibration, ppa_calibration)[0])
            except Exception as exc:
                results.append(exc)
    for (item, _), res in zip(group, results):
        if isinstance(res, BaseException):
            outcomes[item.run_id] = _failed(item.run_id, res)
        else:
            outcomes[item.run_id] = Outcome(item.run_id, "ok" if res.feasible else "infeasible", res.reason,
                                            res.totals, res.metrics(), notes=res.notes)


def _analytical_batch(graph, cands: list[Candidate], calibration: dict | None = None,
                      ppa_calibration: dict | None = None) -> list[AnalyticalResult]:
    # The one call into the model, kept as a seam: tests inject a crashing candidate here.
    (stage,) = EVALUATION["analytical"]
    return stage.run(graph, cands, calibration, ppa_calibration)


# Validated chips by canonical config JSON: a sweep has fewer chips than candidates, and
# the driver hands over the chips it validated itself (`remember_chip`), so a batch the
# driver evaluates in its own process validates none again (a sweep over chip knobs has a
# chip a candidate: validation was half of its time).
_VALIDATED_CHIPS: dict[str, object] = {}
VALIDATED_CHIPS_KEPT = 8192


def remember_chip(config_json: str, chip) -> None:
    if len(_VALIDATED_CHIPS) >= VALIDATED_CHIPS_KEPT:
        _VALIDATED_CHIPS.pop(next(iter(_VALIDATED_CHIPS)))  # the oldest
    _VALIDATED_CHIPS[config_json] = chip


def _chip(config_json: str):
    chip = _VALIDATED_CHIPS.get(config_json)
    if chip is None:
        chip = validate_chip(json.loads(config_json), "(candidate)", field_prefix="chip.")
        remember_chip(config_json, chip)
    return chip


@functools.lru_cache(maxsize=4096)
def _mapping(mapping_json: str):
    """Validated mapping per distinct mapping (a sweep has a handful)."""
    return mapping_from_dict(json.loads(mapping_json), "(candidate)")


# -- executors --------------------------------------------------------------------------

class InlineExecutor:
    """Evaluate in the driver's own process."""

    workers = 1

    def __init__(self, work):
        self.work = work

    def run(self, chunks: list[list[WorkItem]], timeout: float | None = None) -> Iterator[list[Outcome]]:
        # No limit here: a stage that needs one runs in a PoolExecutor (see Sweep._emulator_step).
        for chunk in chunks:
            yield evaluate_items(self.work, chunk)

    def close(self) -> None:
        pass


_WORKER_WORK = None
_WORKER_KILL: str | None = None
_WORKER_HANG: str | None = None


# How often a pool worker looks for its driver (it exits within about this long of the
# driver's death, whatever it is running).
ORPHAN_POLL_S = 0.5


def _exit_with_driver(driver_pid: int | None) -> None:
    """Make this worker end when the driver that started its pool is gone, even if the
    driver died by SIGKILL (no cleanup of its own ran): on Linux the kernel SIGKILLs it
    when its parent (the forkserver, which exits once the driver is gone) dies, and a
    daemon thread checks every ORPHAN_POLL_S seconds that the parent and the driver
    (pid and start time: a zombie or a reused pid counts as gone) are still there, and
    calls os._exit when not, whatever the worker's main thread is busy with."""
    if sys.platform.startswith("linux"):
        try:
            PR_SET_PDEATHSIG = 1
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):  # no prctl: the thread alone
            pass

    parent = os.getppid()
    driver_start = process_start(driver_pid) if driver_pid else None

    def gone() -> bool:
        if os.getppid() != parent:
            return True
        if driver_pid is None:
            return False
        if driver_start is not None:
            return process_start(driver_pid) != driver_start
        try:
            os.kill(driver_pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass
        return False

    def watch() -> None:
        while True:
            time.sleep(ORPHAN_POLL_S)
            if gone():
                os._exit(70)  # EX_SOFTWARE: nobody is left to take this worker's result

    if gone():
        os._exit(70)
    threading.Thread(target=watch, name="dse-orphan-watch", daemon=True).start()


def _init_worker(work, kill: str | None, driver_pid: int | None = None, hang: str | None = None) -> None:
    global _WORKER_WORK, _WORKER_KILL, _WORKER_HANG
    _WORKER_WORK, _WORKER_KILL, _WORKER_HANG = work, kill, hang
    _exit_with_driver(driver_pid)
    # Ctrl-C reaches the whole process group; the driver alone decides how to stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # One thread per worker process: the pool is the parallelism, and the BLAS and torch
    # thread pools of every worker would oversubscribe the cores (2-4x slower per item).
    limited(1)  # (kept: the limiter is not undone)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)


def _warm() -> None:
    """A task that only makes the pool start a worker."""


def _evaluate_in_worker(items: list[WorkItem]) -> list[Outcome]:
    return evaluate_items(_WORKER_WORK, items, _WORKER_KILL, _WORKER_HANG)


class PoolExecutor:
    """A local process pool. The graph is sent once per worker, not once per chunk."""

    def __init__(self, work, workers: int):
        self.work, self.workers = work, workers
        # forkserver: workers fork from a clean server that has imported this module once,
        # so they start fast without inheriting the driver's threads.
        self._ctx = get_context("forkserver")
        # The emulator stage needs torch and the lowering: import them once in the server
        # rather than once per worker.
        preload = [__name__] + (["dse.numerics.run"] if getattr(work, "emulation", None) is not None else [])
        self._ctx.set_forkserver_preload(preload)
        self._retired: list[threading.Thread] = []  # manager threads of broken pools
        self._pool = self._new_pool()
        if getattr(work, "emulation", None) is not None or getattr(work, "emulations", None):
            # The workers (torch, the lowering) start now, in the background, while the
            # driver runs the analytical stage itself: the emulator stage finds them ready.
            for _ in range(workers):
                self._pool.submit(_warm)

    def _new_pool(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(self.workers, mp_context=self._ctx, initializer=_init_worker,
                                   initargs=(self.work, os.environ.get(KILL_ENV), os.getpid(), os.environ.get(HANG_ENV)))

    def _restart(self) -> None:
        self._retire(self._pool)
        self._pool = self._new_pool()

    def _retire(self, pool: ProcessPoolExecutor) -> None:
        """Stop a broken pool for good. Python 3.11's pool can spawn a worker in `submit`
        while its manager thread is terminating the pool after a worker died; that late
        worker is never terminated, and the manager thread then joins it forever (and
        the interpreter, which joins the manager at exit, with it). Every `submit` to this
        pool has returned by now, so the workers it ever started are all in
        `pool._processes`: kill them, then the manager's join returns."""
        workers = list((getattr(pool, "_processes", None) or {}).values())
        manager = getattr(pool, "_executor_manager_thread", None)  # shutdown forgets it
        pool.shutdown(wait=False, cancel_futures=True)
        for process in workers:
            if process.is_alive():
                process.kill()
        if manager is not None:
            self._retired.append(manager)

    def _submit(self, items: list[WorkItem]):
        try:
            return self._pool.submit(_evaluate_in_worker, items)
        except BrokenProcessPool:  # broken since its last result was read: start afresh
            self._restart()
            return self._pool.submit(_evaluate_in_worker, items)

    def run(self, chunks: list[list[WorkItem]], timeout: float | None = None) -> Iterator[list[Outcome]]:
        """Each chunk's outcomes, as they complete. With `timeout` (seconds), a chunk still
        running that long after a worker took it is recorded failed, saying so, and the
        pool is restarted (its workers killed); the other chunks in flight run again."""
        if timeout is not None:
            yield from self._run_timed(chunks, timeout)
            return
        pending = {self._submit(c): c for c in chunks}
        suspects: list[WorkItem] = []
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            broken = False
            for fut in done:
                chunk = pending.pop(fut)
                try:
                    yield fut.result()
                except BrokenProcessPool:
                    broken = True
                    suspects.extend(chunk)
            if broken:
                # Every chunk in flight fails with the pool; which one killed it is unknown.
                for fut, chunk in pending.items():
                    fut.cancel()
                    suspects.extend(chunk)
                pending.clear()
                self._restart()
        # The retry: each suspect alone, so a candidate that kills its worker again is
        # found and recorded failed, and the others complete.
        for item in suspects:
            fut = self._submit([item])
            try:
                yield fut.result()
            except BrokenProcessPool as exc:
                self._restart()
                yield [Outcome(item.run_id, "failed",
                               error=f"worker process died twice evaluating this candidate ({exc})")]

    def _run_timed(self, chunks: list[list[WorkItem]], timeout: float) -> Iterator[list[Outcome]]:
        # At most one chunk per worker in flight, so a chunk's clock starts as a worker takes it.
        wait([self._submit_warm() for _ in range(self.workers)], timeout=timeout)
        queue, suspects = list(chunks), []
        for limit, chunks_left, alone in ((self.workers, queue, False), (1, suspects, True)):
            running: dict = {}  # future -> (chunk, deadline)
            while chunks_left or running:
                while chunks_left and len(running) < limit:
                    chunk = chunks_left.pop(0)
                    running[self._submit(chunk)] = (chunk, time.monotonic() + timeout)
                done, _ = wait(running, timeout=min(0.25, timeout), return_when=FIRST_COMPLETED)
                broken = False
                for fut in done:
                    chunk, _ = running.pop(fut)
                    try:
                        yield fut.result()
                    except BrokenProcessPool as exc:
                        broken = True
                        if alone:
                            yield [Outcome(i.run_id, "failed",
                                           error=f"worker process died twice evaluating this candidate ({exc})")
                                   for i in chunk]
                        else:
                            suspects.append(chunk)
                now = time.monotonic()
                expired = [fut for fut, (_, deadline) in running.items() if now > deadline]
                for fut in expired:
                    chunk, _ = running.pop(fut)
                    why = (f"exceeded the time limit of {timeout:g} s per candidate ([stages] candidate_timeout_s); "
                           "its worker process was killed")
                    yield [Outcome(i.run_id, "failed", reason=why, error=why) for i in chunk]
                if expired or broken:
                    # The other chunks in flight did nothing wrong: again, first in line.
                    others = [chunk for chunk, _ in running.values()]
                    if broken and not alone:
                        suspects.extend(others)
                    else:
                        chunks_left[:0] = others
                    running.clear()
                    self._restart()

    def _submit_warm(self):
        try:
            return self._pool.submit(_warm)
        except BrokenProcessPool:
            self._restart()
            return self._pool.submit(_warm)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        for manager in self._retired:
            manager.join()  # returns once it has joined the killed workers
        self._retired.clear()


class DaskExecutor:
    """Dask distributed: the same chunks as tasks on a cluster's workers."""

    def __init__(self, work, address: str, connect_timeout: float = CONNECT_TIMEOUT_S):
        from distributed import Client

        # Reachable (check_cluster), yet maybe no Dask scheduler (another service on the
        # port) or one that does not answer: the same time limit, then one line.
        client = Client.__new__(Client)  # a handle on it even when its constructor fails
        try:
            client.__init__(address, set_as_default=False, timeout=f"{connect_timeout}s")
        except Exception as error:  # noqa: BLE001 - a web server's reply read as a frame is a MemoryError
            with contextlib.suppress(Exception):
                client.close(timeout=1)
            client.status = "closed"  # else its __del__ closes it again, printing a traceback at exit
            raise InputError("--cluster", "cluster", address,
                             f"a Dask scheduler answering within {connect_timeout:g} s (--connect-timeout); "
                             f"{type(error).__name__}: {' '.join(str(error).split())[:300]}") from None
        self.client = client
        self.workers = max(1, len(self.client.scheduler_info().get("workers", {})))
        self._graph = self.client.scatter(work, broadcast=True)
        self._kill = os.environ.get(KILL_ENV)

    def run(self, chunks: list[list[WorkItem]], timeout: float | None = None) -> Iterator[list[Outcome]]:
        # `timeout` is not applied on a cluster (a task cannot be stopped from here).
        from distributed import as_completed

        futures = {self.client.submit(evaluate_items, self._graph, c, self._kill, pure=False): c for c in chunks}
        suspects: list[WorkItem] = []
        for fut in as_completed(list(futures), loop=self.client.loop):
            try:
                yield fut.result()
            except Exception:  # a lost worker (KilledWorker) or a transport error
                suspects.extend(futures[fut])
        for item in suspects:
            fut = self.client.submit(evaluate_items, self._graph, [item], self._kill, pure=False)
            try:
                yield fut.result()
            except Exception as exc:
                yield [Outcome(item.run_id, "failed", error=f"worker lost twice evaluating this candidate ({exc})")]

    def close(self) -> None:
        self.client.close()


def make_executor(work, workers: int = 1, cluster: str | None = None, connect_timeout: float = CONNECT_TIMEOUT_S):
    """`work`: a Workload, or just the graph for an analytical-only sweep."""
    work = work if isinstance(work, Workload) else Workload(work)
    cluster = cluster or os.environ.get(CLUSTER_ENV)
    if cluster:
        return DaskExecutor(work, cluster, connect_timeout)
    if workers > 1:
        return PoolExecutor(work, workers)
    return InlineExecutor(work)


__all__ = ["WorkItem", "Workload", "Outcome", "evaluate_items", "InlineExecutor", "PoolExecutor", "DaskExecutor",
           "make_executor", "KILL_ENV", "HANG_ENV"]
