"""The analytical model: closed-form cycles, bytes and SRAM of the plan (`dse.plan`) for
arrays of candidates, summed from the emulator's charges (`dse.cost`), without running
anything; and its calibration against emulator or RTL evidence."""

from .estimate import MODEL_VERSION, estimate, summarize

__all__ = ["MODEL_VERSION", "estimate", "summarize"]
