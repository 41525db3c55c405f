"""Type stubs of seqsync's Python bindings."""

from typing import Any, Callable, Mapping, Optional, Sequence, Tuple

__version__: str

class Error(Exception): ...
class InvalidArgument(Error):
    ring: str
class OutOfOrder(Error):
    ring: str
    expected: int
    got: int
class Overflow(Error):
    ring: str
    seq: int
    oldest: int
    max_size: int
    nconsumers: int
class NotYetProduced(Error):
    ring: str
    seq: int
    next: int
class Stale(Error):
    ring: str
    seq: int
    current: int
    max_size: int
    nconsumers: int
class OverConsumed(Error):
    ring: str
    seq: int
    nconsumers: int
class Stopped(Error):
    ring: str
    reason: str
class StageError(Error):
    stage: str
    seq: int
class Exhausted(Error): ...
class DoubleFree(Error): ...
class ForeignMemory(Error): ...
class AllocSize(Error): ...
class NonMonotonic(Error):
    timeline: str
    current: int
    got: int
class ValueOutOfRange(Error):
    timeline: str
    got: int
    max: int
class Timeout(Error):
    waited_for: str
    timeout: float
class TimelineFailed(Error):
    timeline: str
    value: int
class Cancelled(Error):
    reason: str
class TimelineDropped(Error): ...
class WaitBeforeSignalUnsupported(Error): ...
class Stalled(Error):
    timeout_ms: int
    threads: list[str]
class NoDevice(Error): ...
class BackendError(Error):
    backend: str
    op: str
    code: Optional[int]
class PlanError(Error):
    line: Optional[int]

StreamLike = Any  # a Stream, an object with __cuda_stream__, a torch/CuPy stream, an int

class Backend:
    def __init__(self, kind: str = "auto") -> None: ...
    @property
    def kind(self) -> str: ...
    def new_stream(self, name: str = "stream") -> Stream: ...
    def stream(self, obj: StreamLike = None) -> Stream: ...

class Stream:
    @property
    def name(self) -> str: ...
    @property
    def handle(self) -> Optional[int]: ...
    def launch(self, f: Callable[[], Any]) -> None: ...
    def synchronize(self) -> None: ...
    def __cuda_stream__(self) -> Tuple[int, int]: ...

class StageStream:
    @property
    def name(self) -> str: ...
    @property
    def handle(self) -> Optional[int]: ...
    def launch(self, f: Callable[[], Any]) -> None: ...
    def __cuda_stream__(self) -> Tuple[int, int]: ...

class EventRingbuf:
    def __init__(self, backend: Backend, name: str, nconsumers: int, max_size: int) -> None: ...
    name: str
    nconsumers: int
    max_size: int
    next_seq: int
    stopped: bool
    def record(self, seq: int, stream: StreamLike = None, *, blocking: bool = False) -> None: ...
    def record_host(self, seq: int, *, blocking: bool = False) -> None: ...
    def wait(self, seq: int, stream: StreamLike = None, *, blocking: bool = False) -> None: ...
    def synchronize(self, seq: int, *, blocking: bool = False) -> None: ...
    def stop(self, reason: str = "stopped from Python") -> None: ...
    def recording(self, seq: int, stream: StreamLike = None, *, blocking: bool = False) -> Recording:
        """`with ring.recording(seq, stream):` records seq when the block ends; an exception
        records nothing and stops the ring."""
    def __enter__(self) -> EventRingbuf: ...
    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        """Stops the ring."""

class Recording:
    def __enter__(self) -> int: ...
    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool: ...

class Timeline:
    def __init__(self, backend: Backend, name: str, initial: int = 0) -> None: ...
    name: str
    mechanism: str
    failed: bool
    def query(self) -> int: ...
    def signal(self, v: int) -> None: ...
    def signal_on(self, v: int, stream: StreamLike = None) -> None: ...
    def wait_on(self, v: int, stream: StreamLike = None) -> None: ...
    def wait(self, v: int, timeout: Optional[float] = None) -> None: ...
    def fail(self, reason: str = "failed from Python") -> None: ...
    def __enter__(self) -> Timeline: ...
    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        """Fails the timeline when an exception leaves the block."""

def wait_all(list: Sequence[Tuple[Timeline, int]], timeout: Optional[float] = None) -> None: ...
def wait_any(list: Sequence[Tuple[Timeline, int]], timeout: Optional[float] = None) -> Optional[int]:
    """The index of a reached pair (None for an empty list); raises Timeout."""

class Check:
    deadlock_free: bool
    verdict: str
    plan_json: str

class PipelineBuilder:
    def param(self, name: str, value: int) -> PipelineBuilder: ...
    def buffer(self, name: str, slots: int | str) -> PipelineBuilder: ...
    def thread(self, name: str) -> PipelineBuilder: ...
    def stage(
        self,
        name: str,
        *,
        stream: Optional[str] = None,
        reads: Sequence[str] = (),
        writes: Sequence[str] = (),
        sync: bool = False,
    ) -> PipelineBuilder: ...
    def build(self) -> Pipeline: ...

class Pipeline:
    @staticmethod
    def builder() -> PipelineBuilder: ...
    @staticmethod
    def from_toml(text: str) -> Pipeline: ...
    @staticmethod
    def from_path(path: str) -> Pipeline: ...
    def set(self, assignment: str) -> Pipeline: ...
    @property
    def rings(self) -> list[dict[str, Any]]: ...
    def check(self) -> Check: ...
    def run(
        self,
        backend: Backend,
        stages: Mapping[str, Callable[[int, Optional[StageStream]], Any]],
        *,
        batches: int,
        after_sync: Optional[Mapping[str, Callable[[int], Any]]] = None,
        streams: Optional[Mapping[str, StreamLike]] = None,
        stall_timeout: Optional[float] = 10.0,
    ) -> dict[str, Any]: ...
