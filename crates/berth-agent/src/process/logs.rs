//! Where a work's files go: its working directory per attempt (`work/<work_id>-<attempt>/`)
//! and its logs, one pair per work for all its attempts (`logs/<work_id>.out` and `.err`),
//! appended to, with a header line at the start of each attempt.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// The directory of the attempts' working directories, under the runner's directory.
pub const WORK_DIR: &str = "work";
/// The directory of the logs, under the runner's directory.
pub const LOG_DIR: &str = "logs";

/// The work-ID check (shared with the agent, which applies it to log requests).
pub use crate::runner::invalid_work_id;

/// The working directory of attempt `attempt` of `work_id`.
pub fn work_dir(root: &Path, work_id: &str, attempt: u32) -> PathBuf {
    root.join(WORK_DIR).join(format!("{work_id}-{attempt}"))
}

/// The stdout log of `work_id`.
pub fn out_path(root: &Path, work_id: &str) -> PathBuf {
    root.join(LOG_DIR).join(format!("{work_id}.out"))
}

/// The stderr log of `work_id`.
pub fn err_path(root: &Path, work_id: &str) -> PathBuf {
    root.join(LOG_DIR).join(format!("{work_id}.err"))
}

/// Opens (creating, mode 0600: work prints what it likes, secrets included) the log at `path`
/// for appending.
pub fn open_append(path: &Path) -> io::Result<File> {
    berth_api::local::open_private(path, true)
}

/// Appends `line` (a newline added) to the log at `path`, ignoring errors: a note for the
/// reader, never a reason to fail.
pub fn note(path: &Path, line: &str) {
    if let Ok(mut file) = open_append(path) {
        let _ = writeln!(file, "{line}");
    }
}

/// The header line written to both logs before an attempt starts.
pub fn header(work_id: &str, attempt: u32, command: &str, args: &[String]) -> String {
    let mut shown = quote(command);
    for arg in args {
        shown.push(' ');
        shown.push_str(&quote(arg));
    }
    format!("=== berth: {work_id} attempt {attempt} starting at {}: {shown}", now_utc())
}

/// `text` as a shell reader would need it: as is when plain, else in single quotes.
fn quote(text: &str) -> String {
    let plain = !text.is_empty()
        && text.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b));
    if plain {
        text.to_string()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

/// The time now, UTC, as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn now_utc() -> String {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    format_utc(secs)
}

/// `secs` after the Unix epoch as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn format_utc(secs: u64) -> String {
    berth_api::text::utc(secs, 'T')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_format_as_utc() {
        assert_eq!(format_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(format_utc(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(format_utc(4_102_444_799), "2099-12-31T23:59:59Z");
    }

    #[test]
    fn work_ids_must_be_file_names() {
        for ok in ["actor-1", "task-22", "a.b_c"] {
            assert_eq!(invalid_work_id(ok), None, "{ok}");
        }
        for bad in ["", ".", "..", "../x", "a/b", ".hidden", "a b", "a\0b"] {
            assert!(invalid_work_id(bad).is_some(), "{bad:?}");
        }
        assert!(invalid_work_id(&"x".repeat(201)).is_some());
    }

    #[test]
    fn headers_show_the_command_as_typed() {
        let line = header("t", 2, "sh", &["-c".into(), "echo 'hi' there".into()]);
        assert!(line.starts_with("=== berth: t attempt 2 starting at "), "{line}");
        assert!(line.ends_with(r#": sh -c 'echo '\''hi'\'' there'"#), "{line}");
    }
}
