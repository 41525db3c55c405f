import os

import pytest


def cuda_available():
    try:
        import seqsync

        seqsync.Backend("cuda")
        return True
    except Exception:
        return False


@pytest.fixture
def cuda():
    """A CUDA backend; skipped without a GPU, a failure with SEQSYNC_REQUIRE_GPU=1."""
    import seqsync

    try:
        return seqsync.Backend("cuda")
    except seqsync.Error as e:
        if os.environ.get("SEQSYNC_REQUIRE_GPU") == "1":
            pytest.fail(f"SEQSYNC_REQUIRE_GPU=1 but no GPU: {e}")
        pytest.skip(f"needs a GPU: {e}")

def catch(f):
    """What `f()` raised (None if nothing): for checks on an exception raised in another thread."""
    try:
        f()
    except Exception as e:  # noqa: BLE001 - the test looks at what was raised
        return e
    return None
