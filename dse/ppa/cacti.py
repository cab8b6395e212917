"""SRAM area, energy and leakage from CACTI 7, the binary ZigZag's package ships.

`zigzag-dse` carries CACTI's sources and a Linux binary (``zigzag/cacti/cacti_master``);
its config writer (`CactiConfig`) gives the baseline configuration ZigZag itself runs.
CACTI runs once per distinct memory (geometry, node, cell type, temperature): the answer
is kept on disk by the content of the configuration CACTI read (``$DSE_CACTI_CACHE_DIR``,
else ``$XDG_CACHE_HOME/dse/cacti``, else ``~/.cache/dse/cacti``) and in this process, so a
sweep's hot path never waits for it. Every run happens in a temporary folder of its own
(CACTI reads its technology tables from the working folder and writes its answer there),
so concurrent runs never meet.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

CACHE_ENV = "DSE_CACTI_CACHE_DIR"
FORMAT = "dse-cacti-1"  # bump when what is kept changes shape
TIMEOUT_S = 120
# what CACTI's working folder needs beside the configuration
DATA_FILES = ("tech_params", "contention.dat")


class CactiError(Exception):
    """CACTI cannot run here, or cannot organise the memory it was given."""


@dataclass(frozen=True)
class SramGeometry:
    """One SRAM macro as CACTI sees it: a single-ported RAM of `capacity` bytes read and
    written `width` bytes at a time, or a cache (`ways` > 0) of `width`-byte lines."""

    capacity: int
    width: int
    node_nm: int
    cell: str
    temperature_k: int
    ways: int = 0  # 0: a scratchpad RAM; else a cache of that associativity

    def describe(self) -> str:
        what = f"{self.ways}-way cache" if self.ways else "RAM"
        return (f"a {self.capacity:,}-byte {what} of {self.width}-byte rows at {self.node_nm} nm "
                f"({self.cell}, {self.temperature_k} K)")


@dataclass(frozen=True)
class SramFigures:
    area_mm2: float
    read_pj: float  # one access of `width` bytes
    write_pj: float
    leakage_mw: float  # standby leakage (subthreshold and gate)
    access_ns: float
    cycle_ns: float


def cacti_folder() -> Path:
    """The folder of ZigZag's CACTI (binary, technology tables); CactiError when absent."""
    spec = importlib.util.find_spec("zigzag")
    if spec is None or not spec.submodule_search_locations:
        raise CactiError("CACTI is not installed: dse runs the CACTI 7 binary zigzag-dse ships (make install puts "
                         "it in .venv); or give the SRAM figures in the chip config ([costs.banks] area_mm2, "
                         "read_pj, write_pj, leakage_mw, and likewise [costs.shared_memory], [costs.cache])")
    folder = Path(next(iter(spec.submodule_search_locations))) / "cacti" / "cacti_master"
    if not (folder / "cacti").is_file() or not all((folder / f).exists() for f in DATA_FILES):
        raise CactiError(f"CACTI is incomplete in {folder}: the binary 'cacti' and its technology tables "
                         f"({', '.join(DATA_FILES)}) are needed; reinstall zigzag-dse (make install)")
    return folder


def config_text(geometry: SramGeometry) -> str:
    """CACTI's configuration for `geometry`: ZigZag's baseline with the memory's own lines."""
    from zigzag.cacti.cacti_master.cacti_config_creator import CactiConfig

    config = CactiConfig()
    given = {
        "cache_size": geometry.capacity,
        "line_size": geometry.width,
        "IO_bus_width": geometry.width * 8,
        "associativity": geometry.ways or 1,
        "rd_wr_port": 1,  # single-ported: one read or one write a cycle (HARDWARE.md)
        "ex_rd_port": 0,
        "ex_wr_port": 0,
        "single_rd_port": 0,
        "bank_count": 1,
        "technology": geometry.node_nm / 1000,
        "mem_type": '"cache"' if geometry.ways else '"ram"',
    }
    user = [option["string"] + str(given.get(name, option["default"])) + "\n"
            for name, option in config.config_options.items()]
    baseline = []
    for line in config.baseline_config:
        if line.startswith(("-Data array cell type", "-Data array peripheral type", "-Tag array cell type",
                            "-Tag array peripheral type")):
            line = line.split(" - ")[0] + f' - "{geometry.cell}"\n'
        elif line.startswith("-operating temperature (K)"):
            line = f"-operating temperature (K) {geometry.temperature_k}\n"
        baseline.append(line)
    return "".join(baseline) + "".join(user)


def cache_dir() -> Path | None:
    configured = os.environ.get(CACHE_ENV)
    if configured is not None:
        return None if configured.strip().lower() in ("", "off", "0", "none") else Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "dse" / "cacti"


def _binary_identity(folder: Path) -> str:
    binary = folder / "cacti"
    stat = binary.stat()
    return f"{stat.st_size}:{int(stat.st_mtime)}"


def sram_figures(geometry: SramGeometry) -> SramFigures:
    """CACTI's figures for `geometry`: from this process's memo, the disk cache, or a run."""
    return _figures(geometry)


@functools.lru_cache(maxsize=1024)
def _figures(geometry: SramGeometry) -> SramFigures:
    folder = cacti_folder()
    text = config_text(geometry)
    key = hashlib.sha256(f"{FORMAT}\n{_binary_identity(folder)}\n{text}".encode()).hexdigest()
    cached = _load(key)
    if cached is not None:
        return cached
    figures = _run(folder, text, geometry)
    _store(key, figures, geometry)
    return figures


def _load(key: str) -> SramFigures | None:
    folder = cache_dir()
    if folder is None:
        return None
    try:
        data = json.loads((folder / f"{key}.json").read_text())
        return SramFigures(**data["figures"])
    except (OSError, ValueError, KeyError, TypeError):
        return None  # absent or unreadable: CACTI runs again and the entry is rewritten


def _store(key: str, figures: SramFigures, geometry: SramGeometry) -> None:
    folder = cache_dir()
    if folder is None:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump({"format": FORMAT, "geometry": asdict(geometry), "figures": asdict(figures)}, f)
        os.replace(tmp, folder / f"{key}.json")
    except OSError:
        pass  # a cache that cannot be written costs a rerun of CACTI, nothing else


def _run(folder: Path, text: str, geometry: SramGeometry) -> SramFigures:
    with tempfile.TemporaryDirectory(prefix="dse-cacti-") as work:
        for name in DATA_FILES:
            os.symlink(folder / name, Path(work) / name)
        (Path(work) / "mem.cfg").write_text(text)
        try:
            done = subprocess.run([str(folder / "cacti"), "-infile", "mem.cfg"], cwd=work, capture_output=True,
                                  text=True, errors="replace", timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise CactiError(f"CACTI did not answer for {geometry.describe()} within {TIMEOUT_S} s") from None
        except OSError as exc:
            raise CactiError(f"CACTI cannot run on this machine ({folder / 'cacti'}: {exc.strerror or exc}); "
                             "build it from the sources beside it (make in that folder) or give the SRAM "
                             "figures in the chip config ([costs.banks] area_mm2, read_pj, write_pj, "
                             "leakage_mw)") from None
        out = Path(work) / "mem.cfg.out"
        rows = out.read_text().splitlines() if out.is_file() else []
    if len(rows) < 2:
        said = [line.strip() for line in (done.stdout + done.stderr).splitlines()
                if "error" in line.lower() or "invalid" in line.lower()]
        why = said[0] if said else (f"exit code {done.returncode}" if done.returncode else "no result")
        raise CactiError(f"CACTI cannot organise {geometry.describe()} ({why})")
    return _parse(rows[0], rows[-1], geometry)


def _parse(header: str, row: str, geometry: SramGeometry) -> SramFigures:
    names = [h.strip() for h in header.split(",")]
    values = dict(zip(names, (v.strip() for v in row.split(","))))

    def number(name: str) -> float:
        try:
            value = float(values[name])
        except (KeyError, ValueError):
            raise CactiError(f"CACTI's answer for {geometry.describe()} has no number for {name!r}") from None
        return value

    return SramFigures(area_mm2=number("Area (mm2)"), read_pj=number("Dynamic read energy (nJ)") * 1000,
                       write_pj=number("Dynamic write energy (nJ)") * 1000,
                       leakage_mw=number("Standby leakage per bank(mW)"), access_ns=number("Access time (ns)"),
                       cycle_ns=number("Random cycle time (ns)"))


__all__ = ["CACHE_ENV", "CactiError", "SramFigures", "SramGeometry", "cacti_folder", "config_text", "sram_figures"]
