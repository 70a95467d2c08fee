"""A script's own DataLoader workers are not a busy machine.

On 2 cores, `num_workers=2` workers share the CPUs with the training process, whose threads then wait for a CPU
in steps where the script's processes did not fill every CPU. Those waits were put down to other processes:
the window left such steps out ("waited 8.2 ms of its 13.9 ms for a CPU held by other processes (busy
machine)") and the steps timed after it were marked disturbed, which `verify` and `diff` leave out, flattering
the workers on a small machine. Now a wait is the script's own when nobody else used the CPUs lately (the
machine's CPU time less the script's), and short of that, as much of it as the workers ran."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfaudit.collect import clock
from perfaudit.collect.clock import OthersShare, machine_cpu_s, own_cpu, waited_for_others

BURN = "import time\nwhile time.process_time() < {s}: pass\n"


def test_a_wait_on_a_machine_nobody_else_used_is_the_scripts_own():
    # 8 ms of a 14 ms step waiting, the script at 60 % of 2 CPUs: as before, the others' unless told otherwise
    assert waited_for_others(0.008, 0.014, own_cpu_s=0.017, cpus=2) == 0.008
    # nobody else ran lately: the wait is the script's own threads and workers waiting for each other
    assert waited_for_others(0.008, 0.014, own_cpu_s=0.017, cpus=2, children_cpu_s=0.004, recent_share=0.01) == 0.0
    # others hold 70 % of the CPUs (two busy loops): the workers' 4 ms is the script's, the rest the others'
    assert waited_for_others(0.008, 0.014, own_cpu_s=0.017, cpus=2, children_cpu_s=0.004,
                             recent_share=0.7) == pytest.approx(0.004)
    # the workers ran longer than the wait: all of it can be theirs
    assert waited_for_others(0.008, 0.014, own_cpu_s=0.017, cpus=2, children_cpu_s=0.010, recent_share=0.7) == 0.0
    # the share unknown (a short span, no /proc/stat): the workers' time still counts
    assert waited_for_others(0.008, 0.014, own_cpu_s=0.017, cpus=2, children_cpu_s=0.003) == pytest.approx(0.005)


def test_the_others_share_is_the_machines_cpu_time_less_the_scripts(monkeypatch):
    readings = iter([10.0, 10.0, 10.3, 10.9])  # the machine's CPU seconds at each update
    monkeypatch.setattr(clock, "machine_cpu_s", lambda: next(readings))
    now = iter([100.0, 100.06, 100.3, 100.6])
    monkeypatch.setattr(clock.time, "monotonic", lambda: next(now))
    share = OthersShare(cpus=2)
    assert share.update(own_cpu_s=5.0) is None          # nothing to compare with yet
    assert share.update(own_cpu_s=5.0) is None          # 60 ms: shorter than /proc/stat's ticks can tell
    assert share.update(own_cpu_s=5.28) == pytest.approx(0.02 / 0.6)   # 0.3 s of the machine's, 0.28 the script's
    # 0.3 s later: compared with the mark a quarter second back, others ran 0.5 of 0.6 CPU seconds
    assert share.update(own_cpu_s=5.38) == pytest.approx(0.5 / 0.6)


def test_the_machine_counts_other_processes_cpu_and_the_script_its_ended_workers():
    """A child that ran 0.3 CPU seconds: the machine counted it (10 ms ticks), and the script's own CPU keeps it
    after it ended (DataLoader workers end with each epoch: the own figure must not drop then)."""
    machine0, (own0, children0) = machine_cpu_s(), own_cpu()
    if machine0 is None:
        pytest.skip("no /proc/stat on this OS")
    child = subprocess.Popen([sys.executable, "-c", BURN.format(s=0.3) + "import sys; sys.stdin.read()\n"],
                             stdin=subprocess.PIPE)
    try:
        while own_cpu()[1] - children0 < 0.3:   # CPU time, not wall time: the same on a busy machine
            time.sleep(0.01)
        running = own_cpu()
    finally:
        child.communicate(b"")
    ended = own_cpu()
    assert ended[1] >= running[1] >= children0 + 0.3      # kept after the child ended
    assert ended[0] >= running[0] >= own0 + 0.3
    assert machine_cpu_s() - machine0 >= 0.25              # within the ticks' grain of what the child ran


def test_a_step_that_did_not_wait_reads_the_machine_only_every_fifty_ms(monkeypatch):
    """/proc/stat takes 20-30 µs to read, at every step boundary of a 1 ms step: only a step that waited asks."""
    reads = []
    monkeypatch.setattr(clock, "machine_cpu_s", lambda: reads.append(1) or 10.0 + len(reads))
    now = iter([100.0, 100.01, 100.02, 100.06, 100.08])
    monkeypatch.setattr(clock.time, "monotonic", lambda: next(now))
    share = OthersShare(cpus=2)
    share.update(own_cpu_s=5.0, wanted=False)    # the first mark
    share.update(own_cpu_s=5.0, wanted=False)    # 10 ms later: skipped
    share.update(own_cpu_s=5.0, wanted=True)     # a step that waited: read
    share.update(own_cpu_s=5.0, wanted=False)    # 40 ms after the last mark: skipped
    share.update(own_cpu_s=5.0, wanted=False)    # 60 ms: a mark
    assert len(reads) == 3


@given(waited=st.floats(0, 10), wall=st.floats(0, 10), own=st.none() | st.floats(0, 40), cpus=st.integers(1, 256),
       children=st.none() | st.floats(-1, 40), share=st.none() | st.floats(-1, 2))
def test_the_others_part_of_a_wait_is_never_more_than_the_wait_nor_below_zero(waited, wall, own, cpus, children, share):
    others = waited_for_others(waited, wall, own, cpus, children, share)
    assert 0.0 <= others <= waited
