//! A temporary directory for a process runner that leaves no process behind: when the test
//! ends, passing or failing, every process its state file still lists (and that is still the
//! process recorded, by its start time) is killed with its group. Runners never kill on drop,
//! by design, so without this a failing test would leave its `sleep 1000` running. The
//! directory may also hold one runner directory per node (`SimCluster`'s process runners).

#![allow(dead_code)]

use std::path::Path;

use berth_agent::process::kill_recorded;

pub struct RunnerDir(tempfile::TempDir);

impl RunnerDir {
    pub fn new() -> RunnerDir {
        RunnerDir(tempfile::tempdir().expect("a temporary directory"))
    }

    pub fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for RunnerDir {
    fn drop(&mut self) {
        kill_recorded(self.path());
        for entry in std::fs::read_dir(self.path()).into_iter().flatten().flatten() {
            if entry.path().is_dir() {
                kill_recorded(&entry.path());
            }
        }
    }
}
