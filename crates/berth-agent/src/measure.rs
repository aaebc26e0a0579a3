//! Measured usage: what the machine and each running attempt use, read from Linux's `/proc`
//! at the heartbeat's pace (the [`Measured`] a heartbeat carries).
//!
//! - The machine: CPU from the first line of `/proc/stat` (busy time over all time between two
//!   looks, times the number of `cpuN` lines), memory from `/proc/meminfo` (`MemTotal` less
//!   `MemAvailable`, what the kernel could not hand out without swapping or dropping dirty
//!   pages).
//! - An attempt: every process of its process group (each attempt runs in a group of its
//!   own), found by one scan of `/proc/<pid>/stat`. CPU is the group's `utime + stime +
//!   cutime + cstime` (the children its processes waited for count too, so a shell loop that
//!   runs many short commands is not shown idle) over the wall time between two looks; memory
//!   is the sum of the processes' resident sets (pages shared between them are counted once
//!   per process, as `ps` would).
//!
//! No cgroups: the runner does not put attempts in cgroups, and process groups are what it
//! already tracks. A process that leaves its group (`setsid`) is no longer counted, and when a
//! process exits and is reaped outside the group its time leaves the sum: that interval then
//! shows less (never less than 0), not a wrong spike.
//!
//! CPU figures need two looks, so the first measurement of the machine, and of each attempt,
//! has none. Inside a container `/proc/stat` and `/proc/meminfo` describe the host.
//!
//! GPUs: their memory and utilisation come from NVML where the NVIDIA driver is (the `gpus`
//! module), and are absent elsewhere.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use berth_api::agent::{GpuMeasured, Measured, WorkMeasured};

use crate::gpus::{GpuSource, Nvml};

/// No GPU figures (a sampler of fixtures).
#[derive(Debug)]
struct NoGpus;

impl GpuSource for NoGpus {
    fn read(&mut self) -> Vec<GpuMeasured> {
        Vec::new()
    }
}

/// The machine's CPU time so far, in clock ticks (`USER_HZ`) summed over its CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTimes {
    /// Ticks spent doing something (everything but `idle` and `iowait`).
    pub busy: u64,
    /// All ticks.
    pub total: u64,
}

/// Parses `/proc/stat`: the aggregate `cpu` line's times and the number of `cpuN` lines
/// (logical CPUs). `None` when the aggregate line is missing or malformed.
pub fn parse_proc_stat(text: &str) -> Option<(CpuTimes, u32)> {
    let mut times = None;
    let mut cpus = 0u32;
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        match fields.next() {
            Some("cpu") => {
                // user nice system idle iowait irq softirq steal [guest guest_nice]: guest
                // time is already counted in user and nice, so only the first eight add up.
                let values: Vec<u64> =
                    fields.take(8).map(str::parse).collect::<Result<_, _>>().ok()?;
                if values.len() < 4 {
                    return None;
                }
                let total: u64 = values.iter().fold(0u64, |a, v| a.saturating_add(*v));
                let idle = values[3].saturating_add(values.get(4).copied().unwrap_or(0));
                times = Some(CpuTimes { busy: total.saturating_sub(idle), total });
            }
            Some(name)
                if name.len() > 3
                    && name.starts_with("cpu")
                    && name[3..].bytes().all(|b| b.is_ascii_digit()) =>
            {
                cpus = cpus.saturating_add(1);
            }
            _ => {}
        }
    }
    Some((times?, cpus.max(1)))
}

/// Parses `/proc/meminfo`: (bytes in use, total bytes), in use being `MemTotal` less
/// `MemAvailable` (less `MemFree` on kernels before 3.14, which lack `MemAvailable`).
pub fn parse_meminfo(text: &str) -> Option<(u64, u64)> {
    let kib = |key: &str| {
        text.lines().find_map(|line| {
            let rest = line.strip_prefix(key)?.strip_prefix(':')?;
            let mut words = rest.split_whitespace();
            let value: u64 = words.next()?.parse().ok()?;
            match words.next() {
                Some("kB") | None => value.checked_mul(1024),
                Some(_) => None,
            }
        })
    };
    let total = kib("MemTotal")?;
    let available = kib("MemAvailable").or_else(|| kib("MemFree"))?;
    Some((total.saturating_sub(available), total))
}

/// What `/proc/<pid>/stat` says about a process's use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcessUse {
    /// Its process group.
    pub pgrp: i32,
    /// `utime + stime + cutime + cstime`, in clock ticks.
    pub ticks: u64,
    /// Its resident set, in pages.
    pub rss_pages: u64,
}

/// Parses the text of `/proc/<pid>/stat`. The command name (field 2) may hold spaces and
/// parentheses, so fields are counted after the last `)`.
pub fn parse_process_stat(text: &str) -> Option<ProcessUse> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // fields[0] is field 3 (state); field N is fields[N - 3].
    let number = |n: usize| fields.get(n - 3)?.parse::<i64>().ok();
    let ticks = [14, 15, 16, 17]
        .iter()
        .map(|&n| number(n).map(|v| v.max(0) as u64))
        .try_fold(0u64, |sum, v| v.map(|v| sum.saturating_add(v)))?;
    Some(ProcessUse {
        pgrp: i32::try_from(number(5)?).ok()?,
        ticks,
        rss_pages: number(24)?.max(0) as u64,
    })
}

/// One attempt to measure: its process group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    /// The work's ID.
    pub work_id: String,
    /// The attempt.
    pub attempt: u32,
    /// Its process group ID.
    pub pgid: i32,
}

/// The previous look at an attempt.
#[derive(Clone, Copy, Debug)]
struct Seen {
    pgid: i32,
    ticks: u64,
    at: Instant,
}

/// Measures the machine and process groups, remembering the previous look for CPU figures.
#[derive(Debug)]
pub struct Sampler {
    gpus: Box<dyn GpuSource>,
    root: PathBuf,
    ticks_per_second: u64,
    page_bytes: u64,
    machine: Option<CpuTimes>,
    groups: HashMap<(String, u32), Seen>,
}

impl Default for Sampler {
    fn default() -> Sampler {
        Sampler::new()
    }
}

impl Sampler {
    /// A sampler of this machine's `/proc`, and of its GPUs through NVML.
    pub fn new() -> Sampler {
        Sampler::with_root("/proc", clock_ticks(), page_bytes()).with_gpus(Box::<Nvml>::default())
    }

    /// This sampler with its GPU figures from `gpus`.
    pub fn with_gpus(mut self, gpus: Box<dyn GpuSource>) -> Sampler {
        self.gpus = gpus;
        self
    }

    /// A sampler reading `root` instead of `/proc` (tests give a directory of fixtures), with
    /// `ticks_per_second` clock ticks (`USER_HZ`) and pages of `page_bytes`.
    pub fn with_root(root: impl Into<PathBuf>, ticks_per_second: u64, page_bytes: u64) -> Sampler {
        Sampler {
            gpus: Box::new(NoGpus),
            root: root.into(),
            ticks_per_second: ticks_per_second.max(1),
            page_bytes,
            machine: None,
            groups: HashMap::new(),
        }
    }

    /// Measures the machine and `groups` now (`now` is when, for the CPU figures). `None` when
    /// the machine's figures cannot be read (no `/proc`): nothing is reported then.
    pub fn sample(&mut self, groups: &[Group], now: Instant) -> Option<Measured> {
        let (times, cpus) = parse_proc_stat(&read(&self.root.join("stat"))?)?;
        let (memory_used_bytes, memory_total_bytes) =
            parse_meminfo(&read(&self.root.join("meminfo"))?)?;
        let cpu_millicores = self.machine.and_then(|before| {
            let busy = times.busy.checked_sub(before.busy)?;
            let total = times.total.checked_sub(before.total).filter(|t| *t > 0)?;
            let millicores = u128::from(busy) * u128::from(cpus) * 1000 / u128::from(total);
            u64::try_from(millicores).ok()
        });
        self.machine = Some(times);
        let found = self.scan(groups);
        let mut work = Vec::with_capacity(groups.len());
        let mut seen = HashMap::with_capacity(groups.len());
        for (group, (ticks, rss_pages, processes)) in groups.iter().zip(found) {
            let key = (group.work_id.clone(), group.attempt);
            let cpu_millicores = self.groups.get(&key).and_then(|before| {
                // A reused group ID is another group: no figure until the next look.
                if before.pgid != group.pgid {
                    return None;
                }
                let millis = now.checked_duration_since(before.at)?.as_millis();
                if millis == 0 {
                    return None;
                }
                let delta = u128::from(ticks.saturating_sub(before.ticks));
                // ticks / (ticks per second) / (millis / 1000) cores, × 1000 for millicores.
                let millicores = delta * 1_000_000 / (u128::from(self.ticks_per_second) * millis);
                u64::try_from(millicores).ok()
            });
            seen.insert(key, Seen { pgid: group.pgid, ticks, at: now });
            work.push(WorkMeasured {
                work_id: group.work_id.clone(),
                attempt: group.attempt,
                cpu_millicores,
                memory_bytes: rss_pages.saturating_mul(self.page_bytes),
                processes,
            });
        }
        // Attempts no longer running are forgotten.
        self.groups = seen;
        let gpus = self.gpus.read();
        Some(Measured { cpu_millicores, cpus, memory_used_bytes, memory_total_bytes, work, gpus })
    }

    /// For each group: (ticks, resident pages, processes), by one pass over `root`.
    fn scan(&self, groups: &[Group]) -> Vec<(u64, u64, u32)> {
        let mut found = vec![(0u64, 0u64, 0u32); groups.len()];
        if groups.is_empty() {
            return found;
        }
        let index: HashMap<i32, usize> =
            groups.iter().enumerate().map(|(i, g)| (g.pgid, i)).collect();
        let Ok(dir) = std::fs::read_dir(&self.root) else { return found };
        for entry in dir.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_digit()) {
                continue;
            }
            // A process may end between the listing and the read: skipped.
            let Some(text) = read(&entry.path().join("stat")) else { continue };
            let Some(usage) = parse_process_stat(&text) else { continue };
            if let Some(&i) = index.get(&usage.pgrp) {
                let slot = &mut found[i];
                slot.0 = slot.0.saturating_add(usage.ticks);
                slot.1 = slot.1.saturating_add(usage.rss_pages);
                slot.2 = slot.2.saturating_add(1);
            }
        }
        found
    }
}

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// Clock ticks per second (`USER_HZ`), the unit of `/proc`'s CPU times.
fn clock_ticks() -> u64 {
    #[cfg(unix)]
    if let Ok(Some(n)) = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK) {
        if n > 0 {
            return n as u64;
        }
    }
    // Linux's USER_HZ on every architecture it runs on.
    100
}

/// The size of a memory page, the unit of `/proc`'s resident set sizes.
fn page_bytes() -> u64 {
    #[cfg(unix)]
    if let Ok(Some(n)) = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE) {
        if n > 0 {
            return n as u64;
        }
    }
    4096
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const STAT: &str = "cpu  1000 10 290 8000 200 0 0 0 0 0\n\
                        cpu0 500 5 145 4000 100 0 0 0 0 0\n\
                        cpu1 500 5 145 4000 100 0 0 0 0 0\n\
                        intr 1 2 3\n\
                        ctxt 42\n\
                        cpu_weird 1\n";

    const MEMINFO: &str = "MemTotal:       16000000 kB\n\
                           MemFree:         1000000 kB\n\
                           MemAvailable:    12000000 kB\n\
                           Buffers:           62848 kB\n";

    // A command name with spaces and parentheses, as a process may choose.
    fn process_stat(pid: u32, pgrp: i32, utime: u64, cutime: u64, rss: u64) -> String {
        format!(
            "{pid} (sh -c (x)) S 1 {pgrp} {pgrp} 0 -1 4194304 100 0 0 0 {utime} 5 {cutime} 0 20 0 \
             1 0 1202693 3133440 {rss} 18446744073709551615 1 2 3 0 0 0 0 0 0 0 0 0 17 1 0 0 0"
        )
    }

    #[test]
    fn proc_stat_gives_busy_and_total_ticks_and_cpus() {
        let (times, cpus) = parse_proc_stat(STAT).unwrap();
        // total = 1000+10+290+8000+200; idle = 8000 + iowait 200.
        assert_eq!(times, CpuTimes { busy: 1300, total: 9500 });
        assert_eq!(cpus, 2);
        // Guest columns are not added twice.
        let guest = "cpu  10 0 0 90 0 0 0 0 50 50\n";
        assert_eq!(parse_proc_stat(guest).unwrap().0, CpuTimes { busy: 10, total: 100 });
        assert_eq!(parse_proc_stat("intr 1\n"), None);
        assert_eq!(parse_proc_stat("cpu  x y z\n"), None);
        assert_eq!(parse_proc_stat("cpu  1 2\n"), None);
    }

    #[test]
    fn meminfo_gives_used_and_total_bytes() {
        assert_eq!(parse_meminfo(MEMINFO), Some((4_000_000 * 1024, 16_000_000 * 1024)));
        // Before MemAvailable existed: MemFree.
        let old = "MemTotal: 100 kB\nMemFree: 40 kB\n";
        assert_eq!(parse_meminfo(old), Some((60 * 1024, 100 * 1024)));
        assert_eq!(parse_meminfo("MemFree: 40 kB\n"), None);
        assert_eq!(parse_meminfo("MemTotal: 100 MB\nMemFree: 1 kB\n"), None);
        // A prefix of another key is not the key.
        assert_eq!(parse_meminfo("MemTotalX: 5 kB\nMemFree: 1 kB\n"), None);
    }

    #[test]
    fn process_stat_reads_past_a_name_with_parentheses() {
        let usage = parse_process_stat(&process_stat(42, 40, 300, 7, 250)).unwrap();
        // utime 300 + stime 5 + cutime 7 + cstime 0.
        assert_eq!(usage, ProcessUse { pgrp: 40, ticks: 312, rss_pages: 250 });
        assert_eq!(parse_process_stat("42 (x) S 1 2"), None);
        assert_eq!(parse_process_stat("no parenthesis"), None);
    }

    fn write(root: &Path, path: &str, text: &str) {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn sampler_gives_cpu_from_the_second_look_and_sums_each_group() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, "stat", STAT);
        write(root, "meminfo", MEMINFO);
        // Group 40: two processes; group 50: one; pid 60 belongs to no attempt.
        write(root, "40/stat", &process_stat(40, 40, 100, 0, 100));
        write(root, "41/stat", &process_stat(41, 40, 50, 0, 20));
        write(root, "50/stat", &process_stat(50, 50, 0, 0, 10));
        write(root, "60/stat", &process_stat(60, 60, 999, 0, 999));
        write(root, "self/stat", "not a pid directory");
        let groups = [
            Group { work_id: "task-1".into(), attempt: 1, pgid: 40 },
            Group { work_id: "actor-2".into(), attempt: 3, pgid: 50 },
            Group { work_id: "task-9".into(), attempt: 1, pgid: 70 },
        ];
        let mut sampler = Sampler::with_root(root, 100, 4096);
        let start = Instant::now();
        let first = sampler.sample(&groups, start).unwrap();
        assert_eq!(first.cpu_millicores, None);
        assert_eq!(first.cpus, 2);
        assert_eq!(first.memory_used_bytes, 4_000_000 * 1024);
        assert_eq!(first.memory_total_bytes, 16_000_000 * 1024);
        let work: Vec<_> = first
            .work
            .iter()
            .map(|w| (w.work_id.as_str(), w.cpu_millicores, w.memory_bytes, w.processes))
            .collect();
        assert_eq!(
            work,
            [
                ("task-1", None, 120 * 4096, 2),
                ("actor-2", None, 10 * 4096, 1),
                ("task-9", None, 0, 0)
            ]
        );

        // One second later: the machine did 500 more busy ticks of 1000 (2 CPUs: 1 core), group
        // 40 used 150 more ticks (1.5 cores at 100 ticks/s), group 50 none.
        let stat = "cpu  1500 10 290 8500 200 0 0 0 0 0\ncpu0 0\ncpu1 0\n";
        write(root, "stat", stat);
        write(root, "40/stat", &process_stat(40, 40, 200, 0, 100));
        write(root, "41/stat", &process_stat(41, 40, 100, 0, 30));
        let second = sampler.sample(&groups, start + Duration::from_secs(1)).unwrap();
        assert_eq!(second.cpu_millicores, Some(1000));
        let cpu: Vec<_> = second.work.iter().map(|w| w.cpu_millicores).collect();
        assert_eq!(cpu, [Some(1500), Some(0), Some(0)]);
        assert_eq!(second.work[0].memory_bytes, 130 * 4096);

        // A process that left the sum (reaped elsewhere) shows 0, never a negative figure; an
        // attempt under a new group ID starts over.
        std::fs::remove_file(root.join("41/stat")).unwrap();
        let moved = [
            Group { work_id: "task-1".into(), attempt: 1, pgid: 40 },
            Group { work_id: "actor-2".into(), attempt: 3, pgid: 60 },
        ];
        let third = sampler.sample(&moved, start + Duration::from_secs(2)).unwrap();
        let cpu: Vec<_> = third.work.iter().map(|w| w.cpu_millicores).collect();
        assert_eq!(cpu, [Some(0), None]);
    }

    /// GPUs as a fixed list (the NVML source is tested in `gpus`).
    #[derive(Debug)]
    struct TwoGpus;

    impl GpuSource for TwoGpus {
        fn read(&mut self) -> Vec<GpuMeasured> {
            (0..2)
                .map(|index| GpuMeasured {
                    index,
                    memory_used_bytes: u64::from(index + 1) << 30,
                    memory_total_bytes: 16 << 30,
                    utilization_percent: (index == 0).then_some(70),
                })
                .collect()
        }
    }

    #[test]
    fn the_gpus_source_figures_go_with_the_machines() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "stat", STAT);
        write(dir.path(), "meminfo", MEMINFO);
        let mut sampler = Sampler::with_root(dir.path(), 100, 4096);
        assert!(sampler.sample(&[], Instant::now()).unwrap().gpus.is_empty(), "none by default");
        let mut sampler = sampler.with_gpus(Box::new(TwoGpus));
        let gpus = sampler.sample(&[], Instant::now()).unwrap().gpus;
        let figures: Vec<_> =
            gpus.iter().map(|g| (g.index, g.memory_used_bytes, g.utilization_percent)).collect();
        assert_eq!(figures, [(0, 1 << 30, Some(70)), (1, 2 << 30, None)]);
    }

    #[test]
    fn no_proc_means_no_measurement() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Sampler::with_root(dir.path(), 100, 4096).sample(&[], Instant::now()), None);
    }

    #[test]
    fn this_machine_can_be_measured() {
        if !Path::new("/proc/stat").exists() {
            return;
        }
        let mut sampler = Sampler::new();
        let measured = sampler.sample(&[], Instant::now()).unwrap();
        assert!(measured.cpus >= 1);
        assert!(measured.memory_total_bytes > 0);
        assert!(measured.memory_used_bytes <= measured.memory_total_bytes);
    }
}
