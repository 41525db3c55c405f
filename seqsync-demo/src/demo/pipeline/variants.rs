//! The threads the seed's two variants add: KeepInput's release thread, and HostRing's pair of
//! g2h threads (one launches copies into free host output batches, one synchronizes and
//! processes).

use super::traced::{Kernels, Tracer};
use super::{Checker, Rings, RunOptions, Streams};
use crate::demo::device::Device;
use seqsync::{Blocking, Result};

/// KeepInput: release each host input batch once its copy has finished.
pub(super) fn release_thread<D: Device>(
    dev: &D,
    st: &Streams<D>,
    r: &Rings<D>,
    opt: &RunOptions<'_>,
) -> Result<()> {
    let t = Tracer::new(opt, st, "thread release");
    let (evrb_h2g, released) = (t.timed(&r.h2g), t.untimed(&r.released));
    for s in 0..opt.batches {
        dev.chaos_pause();
        evrb_h2g.synchronize(s, Blocking::Yes)?;
        // Counts releases; h2g's get_data waits on it with synchronize_with_producer.
        released.record(&st.h2g, s, Blocking::No)?;
    }
    Ok(())
}

/// HostRing: launch each g2h copy into a free host output batch.
pub(super) fn g2h_launch_thread<D: Device>(
    dev: &D,
    st: &Streams<D>,
    r: &Rings<D>,
    opt: &RunOptions<'_>,
) -> Result<()> {
    let k = opt.host_slots as i64;
    let t = Tracer::new(opt, st, "thread g2h-launch");
    let launch = Kernels::new(dev, st, opt);
    let (evrb_h, evrb_g2h) = (t.timed(&r.h), t.timed(&r.g2h));
    for s in 0..opt.batches {
        dev.chaos_pause();
        // Host batch s % k is free once the processing thread has finished s - k.
        t.time("wait free host slot", s, || {
            r.processed.synchronize_with_producer(s - k)
        })?;
        // The g2h copy, as in the seed's g2h thread.
        evrb_h.wait(&st.g2h, s, Blocking::Yes)?;
        launch.copy_out(s, (s % k) as usize)?;
        evrb_g2h.record(&st.g2h, s, Blocking::Yes)?;
    }
    Ok(())
}

/// HostRing: synchronize on each g2h copy and process it.
pub(super) fn g2h_process_thread<D: Device>(
    dev: &D,
    st: &Streams<D>,
    r: &Rings<D>,
    checker: &Checker,
    opt: &RunOptions<'_>,
) -> Result<()> {
    let k = opt.host_slots as i64;
    let t = Tracer::new(opt, st, "thread g2h-process");
    let (evrb_g2h, processed) = (t.timed(&r.g2h), t.untimed(&r.processed));
    for s in 0..opt.batches {
        dev.chaos_pause();
        // Produced on the launch thread: blocking.
        evrb_g2h.synchronize(s, Blocking::Yes)?;
        t.time("process_data", s, || {
            checker.process(dev, (s % k) as usize, s)
        });
        processed.record(&st.g2h, s, Blocking::No)?;
        if let Some(p) = opt.progress {
            p(s + 1);
        }
    }
    Ok(())
}
