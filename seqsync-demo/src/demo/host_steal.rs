//! The hypervisor's steal time: how long this machine's CPUs were ready to run but were given no
//! physical CPU (Linux `/proc/stat`, the `steal` column of its `cpu` line). On the lent GPU
//! machines a run that lost CPU time this way lost most of its throughput, or fell behind its
//! rate, with nothing wrong in the engine (BENCHMARKS.md §13, run O), so a report says how much
//! its timed runs lost.

/// Milliseconds in a `/proc/stat` tick: USER_HZ is 100 ticks a second on x86-64 and arm64.
const MS_PER_TICK: f64 = 10.0;

/// Steal time so far, all CPUs together, in milliseconds; `None` where there is no
/// `/proc/stat` (not Linux) or its `cpu` line has no steal column.
pub(crate) fn steal_ms() -> Option<f64> {
    parse(&std::fs::read_to_string("/proc/stat").ok()?)
}

/// The steal column of `/proc/stat`'s `cpu` line (the eighth number), in milliseconds.
fn parse(stat: &str) -> Option<f64> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let ticks: u64 = line.split_whitespace().nth(8)?.parse().ok()?;
    Some(ticks as f64 * MS_PER_TICK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_steal_column_of_the_cpu_line_in_milliseconds() {
        let stat = "cpu  7404 12 3106 912036 411 0 96 37 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n";
        assert_eq!(parse(stat), Some(370.0));
    }

    #[test]
    fn no_steal_column_or_no_cpu_line_is_none() {
        assert_eq!(
            parse("cpu  1 2 3 4 5 6 7\n"),
            None,
            "a kernel without steal"
        );
        assert_eq!(parse("cpu0 1 2 3 4 5 6 7 8 9\n"), None, "no total line");
        assert_eq!(parse("cpu  1 2 3 4 5 6 7 x\n"), None, "not a number");
        assert_eq!(parse(""), None);
    }

    #[test]
    fn on_linux_the_machine_says_its_steal() {
        if cfg!(target_os = "linux") {
            assert!(steal_ms().is_some_and(|ms| ms >= 0.0));
        }
    }
}
