//! `seqsync demo --processes 2`: this process is the producer and starts itself again as the
//! consumer (`--ipc-consumer NAME`, the same arguments otherwise); then the one-process
//! pipeline runs with the same arguments, for the ratio.

use std::io::Write;
use std::process::{Command, Stdio};

use seqsync_demo::demo::{self, TwoProcessReport, CONSUMER_READY};

use crate::{config_of, verified, DemoArgs, Failure};

pub(crate) fn run(a: DemoArgs) -> Result<(), Failure> {
    let config = config_of(&a, None, false);
    if let Some(name) = &a.ipc_consumer {
        let report = demo::run_consumer(&config, name, &mut || {
            println!("{CONSUMER_READY}");
            let _ = std::io::stdout().flush();
        })?;
        println!(
            "{}",
            serde_json::to_string(&report).expect("report serializes")
        );
        return Ok(());
    }
    let name = format!("seqsync-demo-{}", std::process::id());
    let exe = std::env::current_exe().map_err(|e| Failure {
        message: format!("cannot find this program to start the consumer: {e}"),
        code: 2,
    })?;
    // The same arguments (a subcommand or none), plus the consumer's role.
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut spawn = || {
        Command::new(&exe)
            .args(&args)
            .args(["--ipc-consumer", &name])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
    };
    let two = demo::run_producer(&config, &name, &mut spawn)?;
    // The one-process pipeline, same arguments, no baselines: the ratio's other side.
    let one = demo::run(&seqsync_demo::demo::DemoConfig {
        baselines: false,
        drop_wait: None,
        ..config
    })?;
    let ratio = two.gbps / one.gbps.max(1e-12);
    if a.json {
        let mut v = serde_json::to_value(&two).expect("report serializes");
        v["one_process_gbps"] = one.gbps.into();
        v["ratio_to_one_process"] = ratio.into();
        println!("{v}");
    } else {
        print_summary(&two, one.gbps, ratio);
    }
    if two.all_verified() {
        verified(&one)
    } else {
        let c = &two.consumer;
        Err(Failure {
            message: format!(
                "verification failed across processes: {} of {} batches matched ({} wrong, {} missing)",
                c.verified, two.batches, c.wrong, c.missing
            ),
            code: 1,
        })
    }
}

fn print_summary(r: &TwoProcessReport, one_gbps: f64, ratio: f64) {
    println!(
        "seqsync demo: the seed pipeline across two processes on {} ({})",
        r.backend, r.device
    );
    println!(
        "  producer pid {} (copy in, f, g, h), consumer pid {} (copy out, process_data); `out` ({} slots) shared; rings by {}",
        std::process::id(),
        r.consumer_pid,
        r.nout,
        r.mechanism
    );
    println!(
        "  {} batches of {} bytes: {} verified, {} wrong, {} missing",
        r.batches, r.batch_bytes, r.consumer.verified, r.consumer.wrong, r.consumer.missing
    );
    println!(
        "  two processes {:.3} GB/s ({:.3} s); one process {:.3} GB/s; ratio {:.3}",
        r.gbps, r.wall_s, one_gbps, ratio
    );
}
