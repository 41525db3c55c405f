"""seqsync: order GPU work across CUDA streams and host threads by sequence id.

Rings (`EventRingbuf`), timelines (`Timeline`, `wait_all`, `wait_any`) and declared pipelines
(`Pipeline`) on the host backend (streams are worker threads that run Python callables in
order) or on CUDA, with streams from PyTorch, CuPy, `cuda.core` or a raw handle.

Every call that can block releases the GIL and is interrupted by Ctrl-C. Errors are
`seqsync.Error` subclasses named as the library's, with the numbers as attributes.

>>> import seqsync
>>> b = seqsync.Backend("host")
>>> copy, kernel = b.new_stream("copy"), b.new_stream("kernel")
>>> ring = seqsync.EventRingbuf(b, "copy", nconsumers=1, max_size=4)
>>> for seq in range(8):
...     copy.launch(lambda: None)
...     ring.record(seq, copy)
...     ring.wait(seq, kernel)
>>> kernel.synchronize()
>>> ring.next_seq
8
"""

from ._seqsync import *  # noqa: F401,F403
from ._seqsync import __version__  # noqa: F401
