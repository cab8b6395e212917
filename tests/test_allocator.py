"""The allocator of a whole model's run (`dse.allocator`): `dse emulate` of a chain run for real
under jemalloc (the default where the machine has it) and under the system's malloc, with
the same results and each naming its own, a single recipe on the system's; `dse recipe
chain` exec'd under it; freed memory kept, then given back above a size; the exec's
arguments; a Ctrl-C at the exec; a bad DSE_ALLOCATOR as one line and exit 2. Without
jemalloc installed the tests that need it skip, saying why; under CI=true (.ci/run installs
it) they fail."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from dse import allocator
from test_whole_model import CHAIN as WHOLE_MODEL

REPO = Path(__file__).resolve().parents[1]
SINGLE = ["-m", "dse", "emulate", "--chip", "toy", "--recipe", "gemm", "--param", "n=16", "--param", "k=16", "--json"]
CHAIN = WHOLE_MODEL.replace("repeat = 4", "repeat = 2")  # the tiny whole model, two layers


@pytest.fixture
def chain(tmp_path) -> Path:
    path = tmp_path / "chain.toml"
    path.write_text(CHAIN)
    return path


def _chain_emulate(chain: Path) -> list[str]:
    return ["-m", "dse", "emulate", "--chip", "goban", "--recipe", str(chain), "--json"]


def _jemalloc() -> str:
    path = allocator._installed()
    if path is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("libjemalloc2 is not installed (.ci/run installs it)")
        pytest.skip("libjemalloc2 is not installed (apt install libjemalloc2)")
    return path


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "MALLOC_CONF", allocator.ENV,
                                                            allocator._EXECED)}
    return {**env, "PYTHONPATH": str(REPO), **extra}


def _run(argv: list[str], cwd: Path, **extra) -> dict:
    done = subprocess.run([sys.executable, *argv], capture_output=True, text=True, cwd=cwd,
                          env=_env(**extra), timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_whole_model_runs_under_jemalloc_and_gives_what_the_system_malloc_gives(tmp_path, chain):
    _jemalloc()
    under_jemalloc = _run(_chain_emulate(chain), tmp_path)
    under_system = _run(_chain_emulate(chain), tmp_path, DSE_ALLOCATOR="system")
    assert under_jemalloc.pop("allocator").startswith("jemalloc 5.")
    assert not under_system.pop("allocator").startswith("jemalloc")
    assert under_jemalloc["passed"] and len(under_jemalloc["cycles"]) == 2 and min(under_jemalloc["cycles"]) > 0
    assert under_jemalloc == under_system


def test_a_single_recipe_keeps_the_system_malloc(tmp_path):
    _jemalloc()
    report = _run(SINGLE, tmp_path)
    assert not report["allocator"].startswith("jemalloc") and report["numerics"]["passed"]


def test_recipe_chain_execs_itself_under_jemalloc(tmp_path, chain):
    _jemalloc()
    p = subprocess.Popen([sys.executable, "-m", "dse", "recipe", "chain", str(chain)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=_env())
    _execed(p.pid)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    assert "passed" in out


def test_freed_memory_is_kept_until_given_back_above_its_threshold():
    """In a process started under jemalloc as the CLI starts it: 300 MB freed stay resident
    and counted as kept; a give-back above 1 GB (or above half the memory available, the
    default, on a machine with more than 600 MB free) leaves them; one above 0 returns them
    to the kernel."""
    path = _jemalloc()
    script = textwrap.dedent("""
        import json, numpy as np
        from dse import allocator
        def rss():
            return int(open("/proc/self/statm").read().split()[1]) * 4096
        a = np.ones(300 << 17)  # 300 MB
        before, _ = rss(), a.sum()
        del a
        kept, after_free = allocator.kept_bytes(), rss()
        above_gb = allocator.give_back_freed(above=1 << 30)
        default = allocator.give_back_freed()
        given = allocator.give_back_freed(above=0)
        print(json.dumps(dict(in_use=allocator.in_use(), before=before, kept=kept, after_free=after_free,
                              above_gb=above_gb, default=default, given=given, kept_after=allocator.kept_bytes(),
                              after_give_back=rss(), available=allocator.available_bytes())))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True,
                          env=_env(LD_PRELOAD=path, MALLOC_CONF=allocator.JEMALLOC_CONF))
    got = json.loads(done.stdout)
    assert got["in_use"].startswith("jemalloc")
    assert got["kept"] >= 300 << 20 and got["after_free"] > got["before"] - (20 << 20)
    assert got["above_gb"] is False and got["given"] is True
    assert got["default"] is (got["kept"] > got["available"] * allocator.GIVE_BACK_SHARE)
    assert got["kept_after"] < 16 << 20 and got["after_give_back"] < got["after_free"] - (280 << 20)


def test_the_memory_available_is_read_from_meminfo():
    text = "MemTotal:       24683784 kB\nMemFree:        20112480 kB\nMemAvailable:   23536124 kB\n"
    assert allocator.available_bytes(text) == 23536124 * 1024
    assert allocator.available_bytes("MemTotal: 1 kB\n") is None
    assert allocator.available_bytes() > 0  # this machine's own


def test_under_the_system_malloc_nothing_is_kept_or_given_back():
    if allocator.in_use().startswith("jemalloc"):
        pytest.skip("this test process itself runs under jemalloc")
    assert allocator.kept_bytes() is None and allocator.give_back_freed(above=0) is False
    assert allocator.in_use().split()[0] in ("glibc", "system")


def test_the_exec_preloads_jemalloc_once_and_keeps_a_users_own_settings(monkeypatch):
    path = _jemalloc()
    monkeypatch.setattr(allocator, "in_use", lambda: "glibc 2.36")  # (this process may run under either)
    base = _env()
    assert allocator.exec_args(base) is None  # not the CLI's own process: a caller of main(argv) is never replaced
    monkeypatch.setattr(allocator, "_CLI_PROCESS", True)
    executable, argv, env = allocator.exec_args(base)
    assert executable == sys.executable and argv == sys.orig_argv
    assert env["LD_PRELOAD"] == path and env["MALLOC_CONF"] == allocator.JEMALLOC_CONF
    # a user's own preloads are kept after it, and a user's own MALLOC_CONF is theirs
    env = allocator.exec_args({**base, "LD_PRELOAD": "/opt/x.so", "MALLOC_CONF": "narenas:1"})[2]
    assert env["LD_PRELOAD"] == f"{path} /opt/x.so" and env["MALLOC_CONF"] == "narenas:1"
    assert allocator.exec_args({**base, "DSE_ALLOCATOR": "system"}) is None
    assert allocator.exec_args({**base, allocator._EXECED: "1"}) is None  # exec'd already
    monkeypatch.setattr(allocator, "in_use", lambda: "jemalloc 5.3.0")
    assert allocator.exec_args(base) is None  # preloaded by the user


@settings(max_examples=12, deadline=None)
@given(st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=12).filter(
    lambda v: v not in allocator.CHOICES))
def test_a_bad_allocator_choice_is_named_in_one_line(value):
    with pytest.raises(allocator.InputError) as caught:
        allocator.chosen({allocator.ENV: value})
    assert allocator.ENV in str(caught.value) and repr(value) in str(caught.value)
    assert "jemalloc or system" in str(caught.value)


@pytest.mark.parametrize("as_json", [False, True])
def test_a_bad_allocator_choice_stops_the_command_with_exit_2(tmp_path, chain, as_json):
    argv = _chain_emulate(chain) if as_json else _chain_emulate(chain)[:-1]
    done = subprocess.run([sys.executable, *argv], capture_output=True, text=True, cwd=tmp_path,
                          env=_env(DSE_ALLOCATOR="tcmalloc"), timeout=120, check=False)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "DSE_ALLOCATOR" in done.stderr and "'tcmalloc'" in done.stderr
    assert "Traceback" not in done.stderr
    if as_json:
        assert json.loads(done.stdout)["error"]["field"] == "DSE_ALLOCATOR"
    else:
        assert done.stdout == ""


def _execed(pid: int, timeout: float = 60.0) -> None:
    """Wait until process `pid` has exec'd itself under jemalloc (its environment, as /proc
    shows it, is the new one)."""
    marker = allocator._EXECED.encode() + b"="
    until = time.monotonic() + timeout
    while marker not in Path(f"/proc/{pid}/environ").read_bytes():
        assert time.monotonic() < until, "the command never exec'd itself"
        time.sleep(0.0005)


@pytest.mark.parametrize("after", [0.0, 0.005, 0.015, 0.03, 0.1])
def test_ctrl_c_just_after_the_exec_is_one_line_and_130(tmp_path, chain, after):
    """SIGINT `after` seconds after the CLI exec'd itself under jemalloc, while the new
    interpreter starts (its SIGINT handler not yet installed: the default action would kill
    it, -2): blocked across the exec and delivered once the CLI can handle it, 130 and the
    one line. (Without the block, the first three points here died by the signal.)"""
    _jemalloc()
    p = subprocess.Popen([sys.executable, *_chain_emulate(chain)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, cwd=tmp_path, env=_env())
    _execed(p.pid)
    time.sleep(after)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 130, (p.returncode, err)
    assert err.strip().count("\n") == 0 and "interrupted; rerun to resume" in err, err
