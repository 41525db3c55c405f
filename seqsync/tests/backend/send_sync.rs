//! The public types can be shared across threads, as a pipeline needs.

use seqsync::backend::host::HostStream;
use seqsync::internal::backend::host::HostEvent;
use seqsync::{AnyBackend, EventRingbuf, HostBackend};

fn send_sync<T: Send + Sync>() {}

#[test]
fn public_types_are_send_and_sync() {
    send_sync::<HostBackend>();
    send_sync::<HostStream>();
    send_sync::<HostEvent>();
    send_sync::<EventRingbuf<HostBackend>>();
    send_sync::<AnyBackend>();
    send_sync::<EventRingbuf<AnyBackend>>();
    #[cfg(feature = "cuda")]
    {
        send_sync::<seqsync::backend::cuda::CudaBackend>();
        send_sync::<seqsync::internal::backend::cuda::CudaEvent>();
        send_sync::<EventRingbuf<seqsync::backend::cuda::CudaBackend>>();
    }
}
