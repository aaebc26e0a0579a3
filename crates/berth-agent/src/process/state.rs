//! What the process runner remembers across agent restarts (`state.json`), and what it reads
//! about processes from `/proc`.
//!
//! The state file lists every process the runner has running: work, attempt, PID, process
//! group and the process's start time (field 22 of `/proc/<pid>/stat`, clock ticks since
//! boot), plus the machine's boot ID. A later runner adopts an entry only if a process with
//! that PID still exists, is not a zombie, and started at the same tick of the same boot: a PID
//! the kernel has since given to another process is never adopted.
//!
//! The file is replaced atomically (written to `state.json.tmp`, then renamed), so a crash
//! leaves the old or the new list, never half of one. It is not fsynced: what it describes
//! does not survive a power loss either.

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The file name of the state file in the runner's directory.
pub const STATE_FILE: &str = "state.json";
const STATE_VERSION: u32 = 1;

/// One recorded process.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The work (actor or task) ID.
    pub work_id: String,
    /// The attempt.
    pub attempt: u32,
    /// `actor` or `task`.
    pub kind: String,
    /// The process ID of the command.
    pub pid: u32,
    /// Its process group (the PID: each command leads its own group).
    pub pgid: i32,
    /// Its start time, clock ticks after boot (`/proc/<pid>/stat` field 22); 0 when unknown.
    pub start_time: u64,
}

/// The whole file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateFile {
    /// The format version (1).
    pub version: u32,
    /// `/proc/sys/kernel/random/boot_id` when the file was written, if known.
    #[serde(default)]
    pub boot_id: Option<String>,
    /// The processes running.
    #[serde(default)]
    pub processes: Vec<Entry>,
}

impl StateFile {
    /// A file listing `processes` on this boot.
    pub fn new(processes: Vec<Entry>, boot_id: Option<String>) -> StateFile {
        StateFile { version: STATE_VERSION, boot_id, processes }
    }
}

/// Reads the state file in `dir`: an empty list when there is none. A file that cannot be
/// parsed is moved aside to `state.json.corrupt` (and an empty list returned with the reason),
/// so one bad write never stops an agent from starting.
pub fn load(dir: &Path) -> (StateFile, Option<String>) {
    let path = dir.join(STATE_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return (StateFile::default(), None),
        Err(e) => {
            return (StateFile::default(), Some(format!("cannot read {}: {e}", path.display())))
        }
    };
    match serde_json::from_str::<StateFile>(&text) {
        Ok(file) if file.version == STATE_VERSION => (file, None),
        Ok(file) => {
            let aside = set_aside(&path);
            let why = format!(
                "{} has format version {}, this agent reads {STATE_VERSION}; {aside}",
                path.display(),
                file.version
            );
            (StateFile::default(), Some(why))
        }
        Err(e) => {
            let aside = set_aside(&path);
            (StateFile::default(), Some(format!("{} is not valid: {e}; {aside}", path.display())))
        }
    }
}

fn set_aside(path: &Path) -> String {
    let aside = path.with_extension("json.corrupt");
    match std::fs::rename(path, &aside) {
        Ok(()) => format!("moved to {}", aside.display()),
        Err(e) => format!("could not move it aside: {e}"),
    }
}

/// Replaces the state file in `dir` with `file`: written to a temporary file, then renamed.
pub fn save(dir: &Path, file: &StateFile) -> io::Result<()> {
    let path = dir.join(STATE_FILE);
    let tmp: PathBuf = dir.join(format!("{STATE_FILE}.tmp"));
    let text = serde_json::to_vec_pretty(file).map_err(io::Error::other)?;
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, &path)
}

/// What `/proc/<pid>/stat` says about a process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    /// The state letter (`R`, `S`, `Z`, ...).
    pub state: char,
    /// The parent's PID.
    pub ppid: i32,
    /// The process group.
    pub pgrp: i32,
    /// The start time, clock ticks after boot.
    pub start_time: u64,
}

impl Stat {
    /// A zombie (exited, not yet reaped) or dead process.
    pub fn is_gone(&self) -> bool {
        matches!(self.state, 'Z' | 'X' | 'x')
    }
}

/// Parses the text of `/proc/<pid>/stat`. The command name (field 2) is in parentheses and
/// may itself hold spaces and parentheses, so fields are counted after the last `)`.
pub fn parse_stat(text: &str) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // fields[0] is field 3 (state); field N is fields[N - 3].
    Some(Stat {
        state: fields.first()?.chars().next()?,
        ppid: fields.get(1)?.parse().ok()?,
        pgrp: fields.get(2)?.parse().ok()?,
        start_time: fields.get(19)?.parse().ok()?,
    })
}

/// The `/proc` view of process `pid`; `None` when it does not exist (or there is no `/proc`).
pub fn stat(pid: u32) -> Option<Stat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// True when process `pid` is the one recorded in `entry`: it exists, is not a zombie, and
/// started at the recorded time (its group is not compared: a command may leave its group).
pub fn is_same_process(entry: &Entry) -> bool {
    stat(entry.pid).is_some_and(|s| {
        !s.is_gone() && (entry.start_time == 0 || s.start_time == entry.start_time)
    })
}

/// This boot's ID (Linux), to tell a recorded process from one of an earlier boot.
pub fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok().map(|s| s.trim().to_string())
}

/// True when some process other than a zombie is in process group `pgid`, by a scan of
/// `/proc`. `None` when `/proc` cannot be read (the caller then trusts `kill(0)`).
pub fn group_has_live_member(pgid: i32) -> Option<bool> {
    let dir = std::fs::read_dir("/proc").ok()?;
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if stat(pid).is_some_and(|s| s.pgrp == pgid && !s.is_gone()) {
            return Some(true);
        }
    }
    Some(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_command_name() {
        let text = "4242 (my (odd) cmd) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 \
                    987654 1000000 100 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0";
        let stat = parse_stat(text).unwrap();
        assert_eq!(stat, Stat { state: 'S', ppid: 1, pgrp: 4242, start_time: 987654 });
        assert!(!stat.is_gone());
        assert!(parse_stat("1 (x) Z 0 1").is_none(), "too few fields");
        assert!(parse_stat("garbage").is_none());
    }

    #[test]
    fn this_process_is_seen_as_itself() {
        let pid = std::process::id();
        let me = stat(pid).expect("/proc/self/stat");
        assert!(!me.is_gone());
        let entry = Entry {
            work_id: "w".into(),
            attempt: 1,
            kind: "task".into(),
            pid,
            pgid: me.pgrp,
            start_time: me.start_time,
        };
        assert!(is_same_process(&entry));
        assert!(!is_same_process(&Entry { start_time: me.start_time + 1, ..entry.clone() }));
        assert!(!is_same_process(&Entry { pid: u32::MAX - 1, ..entry }));
        assert!(boot_id().is_some_and(|id| !id.is_empty()));
        assert_eq!(group_has_live_member(me.pgrp), Some(true));
    }

    #[test]
    fn the_file_round_trips_and_a_corrupt_one_is_set_aside() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(load(dir.path()), (StateFile::default(), None));
        let entry = Entry {
            work_id: "actor-1".into(),
            attempt: 2,
            kind: "actor".into(),
            pid: 10,
            pgid: 10,
            start_time: 99,
        };
        let file = StateFile::new(vec![entry], Some("boot".into()));
        save(dir.path(), &file).unwrap();
        assert_eq!(load(dir.path()), (file, None));
        assert!(!dir.path().join("state.json.tmp").exists());

        std::fs::write(dir.path().join(STATE_FILE), "{not json").unwrap();
        let (loaded, why) = load(dir.path());
        assert_eq!(loaded, StateFile::default());
        assert!(why.unwrap().contains("is not valid"));
        assert!(dir.path().join("state.json.corrupt").exists());
        assert!(!dir.path().join(STATE_FILE).exists());
    }
}
