"""Declared pipelines from Python: check, run with Python stages, errors, a negative control."""

import pytest

import seqsync

# A copy stage writes slot `seq % 2` of `raw`, a kernel stage on another thread reads it and
# writes `out`, a host stage after the sync reads `out`: every read checked.
SPEC = """
[buffers]
raw = 2
out = 2
[[thread]]
name = "h2g"
[[thread.stage]]
name = "copy_in"
stream = "s_copy"
writes = ["raw"]
[[thread.stage]]
name = "kernel"
stream = "s_kernel"
reads = ["raw"]
writes = ["out"]
[[thread]]
name = "g2h"
[[thread.stage]]
name = "copy_out"
stream = "s_out"
reads = ["out"]
sync = true
"""


def stages(raw, out, got, wrong):
    def copy_in(seq, s):
        s.launch(lambda: raw.__setitem__(seq % 2, seq))

    def kernel(seq, s):
        def k():
            if raw[seq % 2] != seq:
                wrong.append(("kernel", seq, raw[seq % 2]))
            out[seq % 2] = seq * 2

        s.launch(k)

    def copy_out(seq, s):
        def c():
            if out[seq % 2] != seq * 2:
                wrong.append(("copy_out", seq, out[seq % 2]))
            got.append(seq)

        s.launch(c)

    return {"copy_in": copy_in, "kernel": kernel, "copy_out": copy_out}


def test_check_derives_the_rings_and_proves_the_schedule():
    p = seqsync.Pipeline.from_toml(SPEC)
    check = p.check()
    assert check.deadlock_free, check.verdict
    rings = {r["name"]: r for r in p.rings}
    assert rings["copy_in"]["nconsumers"] == 1
    assert rings["kernel"]["nconsumers"] >= 1


def test_a_run_reads_every_value_right_under_chaos():
    p = seqsync.Pipeline.from_toml(SPEC)
    for seed in (1, 2, 3):
        raw, out, got, wrong = [None, None], [None, None], [], []
        stats = p.run(seqsync.Backend("host", chaos=seed), stages(raw, out, got, wrong), batches=60)
        assert wrong == [], f"seed {seed}: {wrong[:3]}"
        assert got == list(range(60))
        assert stats["threads"]["h2g"]["iterations"] == 60


def test_negative_control_without_the_read_dependency_reads_wrong_values():
    """The same stages on a spec whose kernel does not declare that it reads `raw`: no wait
    orders it after the copy, and under chaos it reads stale slots. The check above would
    pass without the derived waits only if this one failed to see anything."""
    broken = SPEC.replace('reads = ["raw"]\nwrites = ["out"]', 'writes = ["out"]')
    assert broken != SPEC
    p = seqsync.Pipeline.from_toml(broken)
    wrong = []
    for seed in (1, 2, 3, 4):
        raw, out, got = [None, None], [None, None], []
        p.run(seqsync.Backend("host", chaos=seed), stages(raw, out, got, wrong), batches=60)
    assert wrong, "a kernel with no wait on the copy read nothing wrong"


def test_an_exception_in_a_stage_is_raised_with_stage_and_seq():
    p = seqsync.Pipeline.from_toml(SPEC)
    raw, out, got, wrong = [None, None], [None, None], [], []
    st = stages(raw, out, got, wrong)

    def kernel(seq, s):
        if seq == 7:
            raise ValueError("bad input at 7")

    st["kernel"] = kernel
    with pytest.raises(seqsync.StageError) as e:
        p.run(seqsync.Backend("host"), st, batches=20)
    assert (e.value.stage, e.value.seq) == ("kernel", 7)
    assert isinstance(e.value.__cause__, ValueError)


def test_a_missing_stage_function_is_named_before_anything_runs():
    p = seqsync.Pipeline.from_toml(SPEC)
    with pytest.raises(seqsync.StageError, match="copy_out") as e:
        p.run(seqsync.Backend("host"), {"copy_in": lambda q, s: None, "kernel": lambda q, s: None}, batches=3)
    # No call raised it: no seq.
    assert (e.value.stage, e.value.seq) == ("copy_out", None)


def test_a_malformed_spec_names_its_line():
    with pytest.raises(seqsync.PlanError) as e:
        seqsync.Pipeline.from_toml("[buffers]\nx = 2\n[[thread]]\nname = 3\n")
    assert e.value.line == 4


def test_a_stage_thread_keeps_its_python_thread_state_across_batches():
    """A run's thread makes its Python thread state once: what a stage keeps in a
    `threading.local` is there in its next call on the same thread (a thread state made and
    deleted per call would lose it, and cost a thread state per stage call)."""
    import threading

    p = seqsync.Pipeline.from_toml(SPEC)
    local = threading.local()
    lost = []

    def counting(name):
        def stage(seq, s):
            seen = getattr(local, "seen", None)
            if seq > 0 and seen != seq - 1:
                lost.append((name, seq, seen))
            local.seen = seq

        return stage

    st = {name: counting(name) for name in ("copy_in", "copy_out")}
    st["kernel"] = lambda q, s: None  # on copy_in's thread: leaves the local alone
    p.run(seqsync.Backend("host"), st, batches=30)
    assert lost == [], lost[:3]


def test_a_stage_stream_is_valid_only_during_its_call():
    p = seqsync.Pipeline.from_toml(SPEC)
    kept = []
    st = {
        "copy_in": lambda q, s: kept.append(s),
        "kernel": lambda q, s: None,
        "copy_out": lambda q, s: None,
    }
    p.run(seqsync.Backend("host"), st, batches=1)
    with pytest.raises(TypeError, match="returned"):
        kept[0].launch(lambda: None)


def test_set_changes_a_ring_size_and_refuses_a_bad_one():
    p = seqsync.Pipeline.from_toml(SPEC)
    bigger = p.set("copy_in.max_size=5")
    assert {r["name"]: r for r in bigger.rings}["copy_in"]["max_size"] == 5
    for bad in ("copy_in.max_size=0", "nosuch.max_size=2", "raw=4"):
        with pytest.raises(seqsync.PlanError):
            p.set(bad)


def test_a_builder_declares_the_same_pipeline_as_toml():
    built = (
        seqsync.Pipeline.builder()
        .buffer("raw", 2)
        .buffer("out", 2)
        .thread("h2g")
        .stage("copy_in", stream="s_copy", writes=["raw"])
        .stage("kernel", stream="s_kernel", reads=["raw"], writes=["out"])
        .thread("g2h")
        .stage("copy_out", stream="s_out", reads=["out"], sync=True)
        .build()
    )
    assert built.rings == seqsync.Pipeline.from_toml(SPEC).rings
    raw, out, got, wrong = [None, None], [None, None], [], []
    built.run(seqsync.Backend("host", chaos=7), stages(raw, out, got, wrong), batches=30)
    assert wrong == [] and got == list(range(30))


def test_a_builder_names_its_errors_and_builds_once():
    b = seqsync.Pipeline.builder().thread("t").stage("s", stream="a", reads=["nosuch"])
    with pytest.raises(seqsync.PlanError, match="nosuch"):
        b.build()
    with pytest.raises(TypeError, match="built already"):
        b.build()
    p = seqsync.Pipeline.builder().param("n", 3).buffer("x", "n").thread("t").stage("w", writes=["x"]).build()
    assert p.check().deadlock_free  # a host stage (no stream) writing a buffer sized by a parameter
