//! CPU time by who spent it: the head, the bench's HTTP client, the simulated agents.
//!
//! `bench api` runs the head, its client and (in a process of their own) the simulated agents
//! on the same two cores, so a phase's CPU per actor is theirs together. The client's runtime
//! has threads of its own, named [`CLIENT_THREAD`], and the agents' process its own `/proc`
//! entry: the head's share is the process's time less the client's, which is what a head on a
//! machine of its own would spend.

use serde::Serialize;

/// The name of the client runtime's threads, by which their CPU time is told apart.
pub const CLIENT_THREAD: &str = "bench-client";

/// CPU seconds spent so far, user and system.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Reading {
    /// This whole process (the head and the client).
    process: f64,
    /// The client: the threads named [`CLIENT_THREAD`] and the main thread, which drives it.
    client: f64,
    /// The agents' process, when they run in one.
    agents: Option<f64>,
}

/// Where a phase's CPU time went, µs per item created.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Use {
    /// Everything: the head, the client and the agents.
    pub total_us: f64,
    /// The head (with the agents, when they ran in this process: `agents_us` is then `None`).
    pub head_us: f64,
    /// The bench's HTTP client (and the watchers' reading).
    pub client_us: f64,
    /// The simulated agents' process.
    pub agents_us: Option<f64>,
}

/// Reads the CPU time of this process, its client threads and the agents' process `agents`
/// (a process ID). `None` where `/proc` does not say (not Linux).
pub fn read(agents: Option<u32>) -> Option<Reading> {
    let process = seconds(&std::fs::read_to_string("/proc/self/stat").ok()?)?;
    let main = std::process::id().to_string();
    let mut client = 0.0;
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let tid = task.file_name();
        let is_main = tid.to_str() == Some(main.as_str());
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if is_main || comm.trim_end() == CLIENT_THREAD {
            // A thread that ended between the listing and the read counts nothing.
            let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
            client += seconds(&stat).unwrap_or(0.0);
        }
    }
    let agents = match agents {
        Some(pid) => Some(seconds(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)?),
        None => None,
    };
    Some(Reading { process, client, agents })
}

/// User and system time of a `/proc/…/stat` text: fields 14 and 15, in the kernel's clock
/// ticks of 1/100 s (`USER_HZ`, fixed for that file).
fn seconds(stat: &str) -> Option<f64> {
    // The command name (field 2) may hold spaces and parentheses; the fields after its last
    // `)` do not.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = |index: usize| fields.get(index)?.parse::<f64>().ok();
    Some((ticks(11)? + ticks(12)?) / 100.0)
}

/// What was spent between `before` and `after`, per item of `items`.
pub fn per_item(before: Option<Reading>, after: Option<Reading>, items: usize) -> Option<Use> {
    let (before, after) = (before?, after?);
    let per = |spent: f64| 1e6 * spent / items.max(1) as f64;
    let process = after.process - before.process;
    let client = after.client - before.client;
    let agents = after.agents.zip(before.agents).map(|(now, then)| now - then);
    Some(Use {
        total_us: per(process + agents.unwrap_or(0.0)),
        head_us: per(process - client),
        client_us: per(client),
        agents_us: agents.map(per),
    })
}

impl Use {
    /// `CPU 128 µs per actor: head 88, client 18, agents 22`.
    pub fn text(&self) -> String {
        let parts = match self.agents_us {
            Some(agents) => format!(
                "head {:.0}, client {:.0}, agents {agents:.0}",
                self.head_us, self.client_us
            ),
            None => format!("head and agents {:.0}, client {:.0}", self.head_us, self.client_us),
        };
        format!("CPU {:.0} µs per actor: {parts}", self.total_us)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_gives_user_and_system_time_whatever_the_command_name() {
        let stat = "42 (tokio (x) 1) R 1 2 3 4 5 6 7 8 9 10 250 150 0 0 20 0 1 0";
        assert_eq!(seconds(stat), Some(4.0));
        assert_eq!(seconds("42 (short) R 1"), None, "fields missing");
        assert_eq!(seconds("no parenthesis"), None);
    }

    #[test]
    fn use_per_item_splits_the_process_into_head_and_client_and_adds_the_agents() {
        let before = Reading { process: 1.0, client: 0.25, agents: Some(2.0) };
        let after = Reading { process: 2.0, client: 0.5, agents: Some(2.5) };
        let used = per_item(Some(before), Some(after), 1000).expect("both readings");
        assert_eq!(
            used,
            Use { total_us: 1500.0, head_us: 750.0, client_us: 250.0, agents_us: Some(500.0) }
        );
        assert_eq!(used.text(), "CPU 1500 µs per actor: head 750, client 250, agents 500");
        let in_process = Reading { agents: None, ..after };
        let used = per_item(Some(Reading { agents: None, ..before }), Some(in_process), 0)
            .expect("both readings");
        assert_eq!(used.agents_us, None);
        assert_eq!(used.total_us, 1e6, "no division by 0: per one item");
        assert!(used.text().contains("head and agents 750000"), "{}", used.text());
        assert_eq!(per_item(None, Some(after), 10), None, "a reading missing");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_is_read_and_its_main_thread_counts_as_the_client() {
        let reading = read(None).expect("/proc on Linux");
        assert!(reading.process >= reading.client && reading.client >= 0.0, "{reading:?}");
        assert_eq!(reading.agents, None);
        let own = read(Some(std::process::id())).expect("a process ID that exists");
        assert!(own.agents.is_some());
        assert_eq!(read(Some(u32::MAX)), None, "no such process");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_process_time_grows_with_work() {
        let process = || read(None).expect("/proc on Linux").process;
        let start = process();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let mut spins = 0u64;
        // The clock ticks every 10 ms of CPU: spin until it has, bounded.
        while process() <= start {
            spins = std::hint::black_box(spins.wrapping_add(1));
            assert!(std::time::Instant::now() < deadline, "30 s of spinning used no CPU time");
        }
    }
}
