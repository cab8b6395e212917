"""One Llama-3-8B-shaped layer's program, chip and starting DRAM image as `dse emulate` lowers
them (`dse.numerics.run.emulate_recipe`, its emulator run caught before it starts), for the
benches that time the emulator's run alone in one process. The layer's graph cache goes to a
folder of its own, removed at exit (a seq-2048 cache is 2 GB)."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LAYER = dict(dim=4096, heads=32, kv_heads=8, head_dim=128, ffn=14336, layers=1)


_DROPPED = ("in_place", "boundary", "cuts")


class _Lowered(Exception):
    pass


def lowered_layer(seq: int, prefix: str) -> dict:
    """{"program", "chip", "image", "kw"}: what `emulator.run` would have been given (`kw` its
    keywords but in_place and the op-boundary checks, `dse.numerics.boundary`, whose release
    of dead buffers would zero the caught image's pages on the first timed run), and "run":
    `emulator.run` itself."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    cache = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, cache, True)
    os.environ["DSE_CACHE_DIR"] = cache
    os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")  # as `dse emulate` sets it
    import emulator
    import dse.numerics.run as run
    from dse.chips import load_chip
    from dse.mapping import Mapping

    caught = {}
    inner = emulator.run

    def catch(program, chip, dram=None, **kw):
        caught.update(program=program, chip=chip, image=dram, kw={k: v for k, v in kw.items() if k not in _DROPPED})
        raise _Lowered

    emulator.run = catch
    try:
        run.emulate_recipe("llama_prefill", load_chip("goban"), Mapping(workers=4), {"seq": seq, **LAYER})
    except _Lowered:
        pass
    finally:
        emulator.run = inner
    return {**caught, "run": inner}
