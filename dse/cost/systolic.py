"""Compute cycles of a GEMM on a generic R x C systolic array, equal to SCALE-Sim v3's.

A chip whose matrix Ball has ``timing = "systolic"`` takes its matrix-op latency from
here, in the cost model and in the emulator alike (both call `emulator.balls.systolic_cycles`).

Derivation (SCALE-Sim v3.0.0: ``topology_utils.load_arrays_gemm``,
``compute/systolic_compute_{ws,os,is}.py``, ``memory/double_buffered_scratchpad_mem.py``)
---------------------------------------------------------------------------------------
A GEMM topology row ``name, M, N, K`` becomes a convolution with an M x K ifmap, a 1 x K
filter and N filters, so SCALE-Sim's operand matrices are ``A`` (ifmap, M x K), ``B``
(filter, K x N) and ``C`` (ofmap, M x N) - the convention of ``C[M,N] = A[M,K] @ B[K,N]``.

Each dataflow maps an ``S_r`` x ``S_c`` operand onto the ``R`` x ``C`` array and streams
the third dimension ``T`` through it, in ``ceil(S_r/R) * ceil(S_c/C)`` folds run back to
back (a partial fold is padded to the full array). The compute model emits one demand line
a cycle; a fold's line count is the same for the ifmap, filter and ofmap streams:

* ws: ``S_r = K`` (rows), ``S_c = N`` (cols), ``T = M``. The ifmap stream of a fold is
  ``R`` lines of weight load, ``M`` input lines and ``C - 1`` drain lines, skewed over its
  ``R`` columns (``+ R - 1``): ``2R + C + M - 2`` lines.
* os: ``S_r = M``, ``S_c = N``, ``T = K``. ``K`` input lines and ``C - 1`` drain lines,
  skewed over ``R`` columns: ``R + C + K - 2`` lines.
* is: ``S_r = K``, ``S_c = M``, ``T = N``. As ws with A stationary and B streamed:
  ``2R + C + N - 2`` lines.

With no stall the memory system services line ``i`` at cycle ``i``, and SCALE-Sim's "Total
Cycles" is the last line's cycle, so compute cycles (total minus stalls) are

* ws: ``ceil(K/R) * ceil(N/C) * (2R + C + M - 2) - 1``
* os: ``ceil(M/R) * ceil(N/C) * (R + C + K - 2) - 1``
* is: ``ceil(K/R) * ceil(M/C) * (2R + C + N - 2) - 1``

``tests/test_systolic.py`` checks this against SCALE-Sim itself.
"""

from __future__ import annotations

from emulator.balls import systolic_cycles


def systolic_gemm_cycles(M, N, K, rows, cols, dataflow: str):
    """SCALE-Sim's compute cycles of ``C[M,N] = A[M,K] @ B[K,N]`` on a ``rows`` x ``cols``
    array with dataflow ``ws``, ``os`` or ``is`` (see the module docstring).

    An ``int`` for scalar arguments; numpy arrays broadcast (the cost model passes tiles)."""
    return systolic_cycles(M, N, K, rows, cols, dataflow)


__all__ = ["systolic_gemm_cycles"]
