//! What the process runner remembers across agent restarts (`state.json`), and what it reads
//! about processes from `/proc`.
//!
//! The state file lists every process the runner has running: work, attempt, PID, process
//! group and the process's start time (field 22 of `/proc/<pid>/stat`, clock ticks since
//! boot), plus the machine's boot ID. A later runner adopts an entry only if a process with
//! that PID still exists, is not a zombie, and started at the same tick of the same boot: a PID
//! the kernel has since given to another process is never adopted.
//!
//! The list changes twice per attempt, and rewriting the file each time (a rename over the old
//! one, which ext4 answers by flushing the new file and discarding the old one's blocks) cost
//! a fifth of a busy agent's CPU. So changes are appended to a journal beside it
//! (`state.journal`, one JSON line each: `{"seq":7,"add":{…}}`, `{"seq":8,"remove":{…}}`), and
//! the file itself is rewritten only now and then (when the journal has grown past a few
//! times the list), with the number of the last change it includes: a reader takes the file,
//! then the journal's later lines. The file is replaced atomically (written to
//! `state.json.tmp`, then renamed), so a crash leaves the old or the new list, never half of
//! one; a journal line is one `write`, and a torn last line is ignored. Neither is fsynced:
//! what they describe does not survive a power loss either.

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The file name of the state file in the runner's directory.
pub const STATE_FILE: &str = "state.json";
/// The journal of changes since the state file was written, beside it.
pub const JOURNAL_FILE: &str = "state.journal";
/// The journal is folded into the state file once it has more lines than this and than
/// [`COMPACT_FACTOR`] times the list.
const COMPACT_MIN: usize = 256;
const COMPACT_FACTOR: usize = 4;
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
    /// The last journal change this list includes.
    #[serde(default)]
    pub seq: u64,
}

impl StateFile {
    /// A file listing `processes` on this boot.
    pub fn new(processes: Vec<Entry>, boot_id: Option<String>) -> StateFile {
        StateFile { version: STATE_VERSION, boot_id, processes, seq: 0 }
    }

    /// Applies the journal's changes after `seq`; unreadable lines (a torn last write) are
    /// skipped.
    fn replay(&mut self, journal: &str) {
        for line in journal.lines() {
            let Ok(line) = serde_json::from_str::<Line>(line) else { continue };
            if line.seq <= self.seq {
                continue;
            }
            self.seq = line.seq;
            if let Some(entry) = line.add {
                if !self.processes.iter().any(|e| e.same(&entry)) {
                    self.processes.push(entry);
                }
            }
            if let Some(gone) = line.remove {
                self.processes.retain(|e| !e.same(&gone));
            }
        }
    }
}

impl Entry {
    fn same(&self, other: &Entry) -> bool {
        self.work_id == other.work_id && self.attempt == other.attempt && self.pid == other.pid
    }
}

/// One journal line: a change and its number.
#[derive(Debug, Serialize, Deserialize)]
struct Line {
    seq: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    add: Option<Entry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    remove: Option<Entry>,
}

/// Records the runner's changes: appends each to the journal, and folds the journal into the
/// state file when it has grown.
#[derive(Debug)]
pub struct Journal {
    dir: PathBuf,
    boot_id: Option<String>,
    file: std::fs::File,
    seq: u64,
    lines: usize,
}

impl Journal {
    /// Writes `processes` as the state file and starts an empty journal after it.
    pub fn start(
        dir: &Path,
        boot_id: Option<String>,
        processes: Vec<Entry>,
    ) -> io::Result<Journal> {
        let (old, _) = load(dir);
        let mut snapshot = StateFile::new(processes, boot_id.clone());
        snapshot.seq = old.seq;
        save(dir, &snapshot)?;
        let file = berth_api::local::open_private(&dir.join(JOURNAL_FILE), true)?;
        file.set_len(0)?;
        Ok(Journal { dir: dir.to_path_buf(), boot_id, file, seq: old.seq, lines: 0 })
    }

    /// Records that `entry` runs.
    pub fn add(&mut self, entry: &Entry, live: impl FnOnce() -> Vec<Entry>) -> io::Result<()> {
        self.append(Line { seq: self.seq + 1, add: Some(entry.clone()), remove: None }, live)
    }

    /// Records that `entry` no longer runs.
    pub fn remove(&mut self, entry: &Entry, live: impl FnOnce() -> Vec<Entry>) -> io::Result<()> {
        self.append(Line { seq: self.seq + 1, add: None, remove: Some(entry.clone()) }, live)
    }

    /// Appends `line`; folds the journal into the state file (the list `live` gives) when it
    /// has grown past [`COMPACT_MIN`] and [`COMPACT_FACTOR`] times the list.
    fn append(&mut self, line: Line, live: impl FnOnce() -> Vec<Entry>) -> io::Result<()> {
        use std::io::Write;
        let mut text = serde_json::to_vec(&line).map_err(io::Error::other)?;
        text.push(b'\n');
        // One write: appended whole, or (a crash mid-write) a torn last line that is skipped.
        self.file.write_all(&text)?;
        self.seq = line.seq;
        self.lines += 1;
        if self.lines > COMPACT_MIN {
            let processes = live();
            if self.lines > COMPACT_FACTOR * processes.len() {
                let mut snapshot = StateFile::new(processes, self.boot_id.clone());
                snapshot.seq = self.seq;
                save(&self.dir, &snapshot)?;
                // After the file: a crash between the two leaves lines the file includes,
                // which a reader skips by their numbers.
                self.file.set_len(0)?;
                self.lines = 0;
            }
        }
        Ok(())
    }
}

/// Reads the state file in `dir` and the journal's changes after it: an empty list when there
/// is none. A file that cannot be parsed is moved aside to `state.json.corrupt` (and the
/// journal alone applied, with the reason), so one bad write never stops an agent from
/// starting.
pub fn load(dir: &Path) -> (StateFile, Option<String>) {
    let (mut file, problem) = load_file(dir);
    match std::fs::read_to_string(dir.join(JOURNAL_FILE)) {
        Ok(journal) => file.replay(&journal),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => {
            let why = format!("cannot read {}: {e}", dir.join(JOURNAL_FILE).display());
            return (file, Some(problem.map_or(why.clone(), |p| format!("{p}; {why}"))));
        }
    }
    (file, problem)
}

/// The state file alone.
fn load_file(dir: &Path) -> (StateFile, Option<String>) {
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

/// Replaces the state file in `dir` with `file`: written to a temporary file (mode 0600: it
/// names the work's commands), then renamed.
pub fn save(dir: &Path, file: &StateFile) -> io::Result<()> {
    use std::io::Write;
    let path = dir.join(STATE_FILE);
    let tmp: PathBuf = dir.join(format!("{STATE_FILE}.tmp"));
    let text = serde_json::to_vec_pretty(file).map_err(io::Error::other)?;
    berth_api::local::open_private(&tmp, false)?.write_all(&text)?;
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

    fn entry(n: u32) -> Entry {
        Entry {
            work_id: format!("task-{n}"),
            attempt: 1,
            kind: "task".into(),
            pid: 1000 + n,
            pgid: 1000 + n as i32,
            start_time: 7,
        }
    }

    fn pids(dir: &Path) -> Vec<u32> {
        let mut pids: Vec<u32> = load(dir).0.processes.iter().map(|e| e.pid).collect();
        pids.sort_unstable();
        pids
    }

    #[test]
    fn the_journal_after_the_file_gives_the_list() {
        let dir = tempfile::tempdir().unwrap();
        let mut journal = Journal::start(dir.path(), None, vec![entry(1)]).unwrap();
        let live = Vec::new;
        journal.add(&entry(2), live).unwrap();
        journal.add(&entry(3), live).unwrap();
        journal.remove(&entry(1), live).unwrap();
        assert_eq!(pids(dir.path()), [1002, 1003]);
        // The file alone still says what it said when written.
        let (file, _) = load_file(dir.path());
        assert_eq!(file.processes, [entry(1)]);
        // A torn last line (a crash mid-write) is skipped.
        use std::io::Write;
        let mut raw =
            std::fs::OpenOptions::new().append(true).open(dir.path().join(JOURNAL_FILE)).unwrap();
        raw.write_all(br#"{"seq":9,"add":{"work_id":"ta"#).unwrap();
        assert_eq!(pids(dir.path()), [1002, 1003]);
        // A new journal starts from the list as it is.
        let restarted = Journal::start(dir.path(), None, load(dir.path()).0.processes).unwrap();
        assert_eq!(restarted.seq, 3);
        assert_eq!(std::fs::read_to_string(dir.path().join(JOURNAL_FILE)).unwrap(), "");
        assert_eq!(pids(dir.path()), [1002, 1003]);
    }

    #[test]
    fn a_long_journal_is_folded_into_the_file_and_the_list_stays_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let mut journal = Journal::start(dir.path(), None, Vec::new()).unwrap();
        let mut model: Vec<Entry> = Vec::new();
        for n in 0..(3 * COMPACT_MIN as u32) {
            // Start n, end n - 2: two or three run at any time.
            model.push(entry(n));
            let live = || model.clone();
            journal.add(&entry(n), live).unwrap();
            if n >= 2 {
                model.retain(|e| e.pid != 1000 + n - 2);
                let live = || model.clone();
                journal.remove(&entry(n - 2), live).unwrap();
            }
            let mut want: Vec<u32> = model.iter().map(|e| e.pid).collect();
            want.sort_unstable();
            assert_eq!(pids(dir.path()), want, "after {n}");
        }
        let lines = std::fs::read_to_string(dir.path().join(JOURNAL_FILE)).unwrap().lines().count();
        assert!(lines <= COMPACT_MIN, "folded: {lines} lines left");
        assert!(load_file(dir.path()).0.seq > 0, "the file says which changes it includes");
    }

    #[test]
    fn lines_the_file_already_includes_are_skipped() {
        // A crash after the file was rewritten and before the journal was emptied.
        let dir = tempfile::tempdir().unwrap();
        let mut journal = Journal::start(dir.path(), None, Vec::new()).unwrap();
        journal.add(&entry(1), Vec::new).unwrap();
        journal.add(&entry(3), Vec::new).unwrap();
        // The newer file: by change 2, only entry 2 runs.
        let mut file = StateFile::new(vec![entry(2)], None);
        file.seq = 2;
        save(dir.path(), &file).unwrap();
        assert_eq!(pids(dir.path()), [1002], "older lines are not replayed over the newer file");
    }

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
