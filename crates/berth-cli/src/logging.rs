//! Where the long-running commands' logs go: stderr, and a file in the data directory
//! (`DATA_DIR/berth.log` for a head or `berth up`, `DATA_DIR/agents/<node>/berth.log` for an
//! agent, so two processes never rotate one file), rotated by size.
//!
//! `--log-level` takes a level or per-module directives as `RUST_LOG` does (`info`,
//! `warn,berth_head=debug`); `$BERTH_LOG` sets it when the flag is absent. `--log-format json`
//! writes one JSON object per line (for log shippers); `text` is for people. The file is
//! written by a background thread that never drops a line (it blocks instead), so a warning
//! logged just before the process ends is in the file once the guard is dropped.

use std::path::Path;

use anyhow::{anyhow, Context};
use clap::{Args, ValueEnum};
use file_rotate::compression::Compression;
use file_rotate::suffix::AppendCount;
use file_rotate::{ContentLimit, FileRotate};
use tracing_appender::non_blocking::{NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::client::BadInput;

/// The log file's name.
pub const LOG_FILE: &str = "berth.log";
/// Size at which the log file is rotated (`berth.log` → `berth.log.1` → …).
pub const LOG_ROTATE_BYTES: usize = 16 * 1024 * 1024;
/// Rotated files kept beside the current one.
pub const LOG_KEEP_FILES: usize = 4;

/// Logging options of `berth start` and `berth up`.
#[derive(Debug, Args)]
pub struct LogOptions {
    /// What to log: a level (error, warn, info, debug, trace) or directives as RUST_LOG takes
    /// them (`warn,berth_head=debug`).
    #[arg(long, env = "BERTH_LOG", default_value = "info", value_name = "FILTER")]
    pub log_level: String,
    /// How log lines look, on stderr and in the log file.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// The format of log lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// `2026-11-25T10:00:00Z  WARN berth_head: message field=value`.
    Text,
    /// One JSON object per line: timestamp, level, target, fields (with the message).
    Json,
}

/// Keeps the log file's writer thread alive; dropping it writes out what is buffered.
#[must_use = "dropping the guard stops writing the log file"]
pub struct LogGuard {
    _file: WorkerGuard,
}

/// The filter `--log-level` asks for, or an error naming the flag and the rule.
fn filter(options: &LogOptions) -> anyhow::Result<EnvFilter> {
    EnvFilter::builder().parse(options.log_level.trim()).map_err(|e| {
        anyhow::Error::new(BadInput::new(format!(
            "--log-level: {:?} is not a level (error, warn, info, debug, trace) or a list of \
             TARGET=LEVEL directives: {e}",
            options.log_level
        )))
    })
}

/// Installs the process's log subscriber: stderr, and `dir/berth.log` rotated by size.
/// Call once, before the daemon starts; returns an error naming the flag or file at fault.
pub fn init(options: &LogOptions, dir: &Path) -> anyhow::Result<LogGuard> {
    let filter = filter(options)?;
    let path = dir.join(LOG_FILE);
    berth_api::local::private_dir(dir)
        .with_context(|| format!("cannot create the log directory {}", dir.display()))?;
    // FileRotate opens lazily and swallows errors: find an unwritable file here, with its path.
    // Mode 0600 for this file and the rotated ones: a log names work, nodes and errors.
    let mut open = std::fs::OpenOptions::new();
    open.read(true).create(true).append(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut open, 0o600);
    open.open(&path).with_context(|| format!("cannot write the log file {}", path.display()))?;
    berth_api::local::private_file(&path)
        .with_context(|| format!("cannot make the log file {} private", path.display()))?;
    let rotating = FileRotate::new(
        &path,
        AppendCount::new(LOG_KEEP_FILES),
        ContentLimit::BytesSurpassed(LOG_ROTATE_BYTES),
        Compression::None,
        Some(open),
    );
    let (file, guard) = NonBlockingBuilder::default().lossy(false).finish(rotating);
    let stderr_ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let (stderr_layer, file_layer) = match options.log_format {
        LogFormat::Text => (
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(stderr_ansi)
                .boxed(),
            tracing_subscriber::fmt::layer().with_writer(file).with_ansi(false).boxed(),
        ),
        LogFormat::Json => (
            tracing_subscriber::fmt::layer().json().with_writer(std::io::stderr).boxed(),
            tracing_subscriber::fmt::layer().json().with_writer(file).boxed(),
        ),
    };
    tracing_subscriber::registry()
        .with(filter)
        .with(stderr_layer)
        .with(file_layer)
        .try_init()
        .map_err(|e| anyhow!("cannot install the log subscriber: {e}"))?;
    Ok(LogGuard { _file: guard })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(level: &str) -> LogOptions {
        LogOptions { log_level: level.to_string(), log_format: LogFormat::Text }
    }

    #[test]
    fn levels_and_directives_are_accepted() {
        for level in ["info", "warn", "warn,berth_head=debug", " debug "] {
            assert!(filter(&options(level)).is_ok(), "{level}");
        }
    }

    #[test]
    fn a_bad_filter_names_the_flag() {
        let err = filter(&options("berth_head=loud")).unwrap_err().to_string();
        assert!(err.starts_with("--log-level: \"berth_head=loud\" is not a level"), "{err}");
    }
}
