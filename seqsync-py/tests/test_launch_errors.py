"""An exception in launched work keeps its type and traceback: it is the cause of the
`synchronize` error of its stream, and of the `StageError` of a pipeline whose stage launched
it (with the stage and the seq)."""

import pytest

import seqsync

SPEC = """
[buffers]
raw = 2
[[thread]]
name = "t"
[[thread.stage]]
name = "fill"
stream = "a"
writes = ["raw"]
[[thread.stage]]
name = "use"
stream = "b"
reads = ["raw"]
sync = true
"""


@pytest.fixture
def host():
    return seqsync.Backend("host")


def test_synchronize_raises_with_the_launched_exception_as_its_cause(host):
    s = host.new_stream("s")

    def work():
        raise KeyError("missing frame")

    s.launch(work)
    with pytest.raises(seqsync.Error) as e:
        s.synchronize()
    assert isinstance(e.value.__cause__, KeyError), repr(e.value.__cause__)
    assert e.value.__cause__.__traceback__ is not None


def test_an_exception_in_a_stages_launched_work_is_the_stage_errors_cause(host):
    def fill(seq, s):
        def work():
            if seq == 3:
                raise ValueError("bad batch 3")

        s.launch(work)

    p = seqsync.Pipeline.from_toml(SPEC)
    with pytest.raises(seqsync.StageError) as e:
        p.run(host, {"fill": fill, "use": lambda q, s: None}, batches=10)
    assert isinstance(e.value.__cause__, ValueError), repr(e.value.__cause__)
    assert (e.value.stage, e.value.seq) == ("fill", 3)


def test_a_stream_that_kept_an_exception_does_not_keep_its_frames_locals(host):
    import gc
    import weakref

    class Worker:
        def __init__(self):
            self.s = host.new_stream("w")

        def step(self):
            big = bytearray(1 << 20)  # a local of the failing frame
            raise RuntimeError(f"step failed with {len(big)} bytes at hand")

    w = Worker()
    w.s.launch(w.step)
    with pytest.raises(seqsync.Error) as e:
        w.s.synchronize()
    assert isinstance(e.value.__cause__, RuntimeError)
    del e
    alive = weakref.ref(w)
    del w
    gc.collect()
    assert alive() is None, "the stream's kept exception holds the worker through its frame"
