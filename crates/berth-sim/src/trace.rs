//! The trace files: node lists and pod lists of the Alibaba GPU trace v2023 ("openb"), read
//! and checked row by row.
//!
//! Node list: `sn,cpu_milli,memory_mib,gpu,model`. Pod list: `name,cpu_milli,memory_mib,
//! num_gpu,gpu_milli` and optionally `gpu_spec,qos,pod_phase,creation_time,deletion_time,
//! scheduled_time` (11 columns; the `multigpu*` files have 5). Columns after `gpu_spec` are
//! read past: the FGD simulator ignores them, and so does the replay.
//!
//! Every rule broken is an error that names the file, the line (1-based, the header is line
//! 1), the column and the rule; nothing panics and no value is repaired. The FGD simulator
//! rewrites `gpu_milli` above 1000 to 1000; no file of the trace has such a value, so here it is
//! an error rather than a silent change.

use std::fmt;
use std::path::{Path, PathBuf};

use berth_core::labels::{validate_value, ACCELERATOR_TYPE};
use berth_core::quantity::MAX_WHOLE;
use berth_core::NodeId;

/// Most GPUs on a node or in a pod (Berth's limit of instances per node).
const MAX_GPUS: u64 = 4096;
/// The most CPU a row may carry, in millicores: Berth's largest quantity. Larger values would
/// overflow once converted to 1/10000 units, so they are refused here, with their line.
pub const MAX_CPU_MILLI: u64 = MAX_WHOLE as u64 * 1000;
/// The most memory a row may carry, in MiB: Berth's largest quantity in bytes.
pub const MAX_MEMORY_MIB: u64 = MAX_WHOLE as u64 / (1 << 20);

/// A node of a node list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeRow {
    /// `sn`: the node's name, a valid node ID.
    pub name: String,
    /// CPU capacity in millicores.
    pub cpu_milli: u64,
    /// Memory capacity in MiB.
    pub memory_mib: u64,
    /// Whole GPUs.
    pub gpus: u32,
    /// The GPU model (becomes `berth.io/accelerator-type`); empty on CPU-only nodes.
    pub model: String,
}

/// A pod of a pod list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodRow {
    /// The pod's name.
    pub name: String,
    /// CPU request in millicores.
    pub cpu_milli: u64,
    /// Memory request in MiB.
    pub memory_mib: u64,
    /// GPUs requested: 0, or 1 (whole or shared), or several whole ones.
    pub num_gpu: u32,
    /// Per-GPU share in milli-GPU: 0 without GPUs, 1..=1000 with; 1000 when `num_gpu > 1`.
    pub gpu_milli: u32,
    /// The GPU models the pod accepts, sorted and unique; empty: any.
    pub gpu_spec: Vec<String>,
}

impl PodRow {
    /// The pod's GPU demand in milli-GPU: `num_gpu × gpu_milli`.
    pub fn gpu_demand_milli(&self) -> u64 {
        u64::from(self.num_gpu) * u64::from(self.gpu_milli)
    }
}

/// A trace file that cannot be used. Displays as `path:line: column name: rule`.
#[derive(Debug, thiserror::Error)]
pub struct TraceError {
    /// The file.
    pub path: PathBuf,
    /// The line (1-based; the header is 1), when the problem is on one.
    pub line: Option<u64>,
    /// The column, when the problem is in one.
    pub column: Option<String>,
    /// The rule broken, as a sentence.
    pub rule: String,
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.path.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if let Some(column) = &self.column {
            write!(f, ": column {column}")?;
        }
        write!(f, ": {}", self.rule)
    }
}

const NODE_COLUMNS: [&str; 5] = ["sn", "cpu_milli", "memory_mib", "gpu", "model"];
const POD_COLUMNS: [&str; 11] = [
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
];

/// Reads a node list (`sn,cpu_milli,memory_mib,gpu,model`).
pub fn read_nodes(path: &Path) -> Result<Vec<NodeRow>, TraceError> {
    let mut file = TraceFile::open(path, &NODE_COLUMNS, &[5])?;
    let mut nodes: Vec<NodeRow> = Vec::new();
    while let Some(row) = file.next_row()? {
        let name = row.text(0).to_string();
        NodeId::new(&name).map_err(|err| row.error(0, err.rule()))?;
        if let Some(first) = nodes.iter().position(|n| n.name == name) {
            return Err(row.error(
                0,
                format!("node {name} is listed twice (first on data row {})", first + 1),
            ));
        }
        let gpus = row.whole(3, MAX_GPUS)? as u32;
        let model = row.text(4).trim().to_string();
        validate_value(ACCELERATOR_TYPE, &model).map_err(|err| row.error(4, err.to_string()))?;
        if gpus > 0 && model.is_empty() {
            return Err(row.error(4, "is empty, but the node has GPUs: name their model"));
        }
        nodes.push(NodeRow {
            name,
            cpu_milli: row.whole(1, MAX_CPU_MILLI)?,
            memory_mib: row.whole(2, MAX_MEMORY_MIB)?,
            gpus,
            model,
        });
    }
    if nodes.is_empty() {
        return Err(file.error("lists no node"));
    }
    Ok(nodes)
}

/// Reads a pod list (5 or 11 columns).
pub fn read_pods(path: &Path) -> Result<Vec<PodRow>, TraceError> {
    let mut file = TraceFile::open(path, &POD_COLUMNS, &[5, 11])?;
    let mut pods = Vec::new();
    while let Some(row) = file.next_row()? {
        let name = row.text(0).trim().to_string();
        if name.is_empty() {
            return Err(row.error(0, "is empty: every pod has a name"));
        }
        let num_gpu = row.whole(3, MAX_GPUS)? as u32;
        let gpu_milli = row.whole(4, u64::MAX)?;
        let rule = match (num_gpu, gpu_milli) {
            (0, 0) => None,
            (0, _) => Some("must be 0 for a pod without GPUs (num_gpu 0)".to_string()),
            (_, 0) => {
                Some("is 0, but the pod asks for GPUs: give the share per GPU, 1 to 1000".into())
            }
            (_, m) if m > 1000 => {
                Some(format!("{m} is out of range: gpu_milli is per GPU, 1 to 1000"))
            }
            (n, m) if n > 1 && m != 1000 => Some(format!(
                "{m} is not allowed with num_gpu {n}: a pod with several GPUs takes whole ones \
                 (1000)"
            )),
            _ => None,
        };
        if let Some(rule) = rule {
            return Err(row.error(4, rule));
        }
        let gpu_spec = if row.len() > 5 { row.models(5)? } else { Vec::new() };
        pods.push(PodRow {
            name,
            cpu_milli: row.whole(1, MAX_CPU_MILLI)?,
            memory_mib: row.whole(2, MAX_MEMORY_MIB)?,
            num_gpu,
            gpu_milli: gpu_milli as u32,
            gpu_spec,
        });
    }
    if pods.is_empty() {
        return Err(file.error("lists no pod"));
    }
    Ok(pods)
}

/// A CSV file with a checked header.
struct TraceFile<'p> {
    path: &'p Path,
    reader: csv::Reader<std::fs::File>,
    columns: &'static [&'static str],
    width: usize,
    record: csv::StringRecord,
}

impl<'p> TraceFile<'p> {
    /// Opens `path` and checks that its header is the first `n` of `columns` for an `n` in
    /// `widths`.
    fn open(
        path: &'p Path,
        columns: &'static [&'static str],
        widths: &[usize],
    ) -> Result<TraceFile<'p>, TraceError> {
        let fail = |line: Option<u64>, rule: String| TraceError {
            path: path.to_path_buf(),
            line,
            column: None,
            rule,
        };
        let file =
            std::fs::File::open(path).map_err(|err| fail(None, format!("cannot open: {err}")))?;
        let mut reader =
            csv::ReaderBuilder::new().has_headers(true).flexible(true).from_reader(file);
        let header = reader.headers().map_err(|err| fail(Some(1), csv_rule(&err)))?.clone();
        let names: Vec<&str> = header.iter().map(str::trim).collect();
        let expected = |n: usize| columns[..n].join(",");
        let width = widths.iter().copied().find(|&n| names == columns[..n]).ok_or_else(|| {
            let wanted: Vec<String> = widths.iter().map(|&n| expected(n)).collect();
            fail(
                Some(1),
                format!("the header is {:?}; expected {}", names.join(","), wanted.join(" or ")),
            )
        })?;
        Ok(TraceFile { path, reader, columns, width, record: csv::StringRecord::new() })
    }

    fn error(&self, rule: impl Into<String>) -> TraceError {
        TraceError { path: self.path.to_path_buf(), line: None, column: None, rule: rule.into() }
    }

    /// The next data row, checked for its number of fields.
    fn next_row(&mut self) -> Result<Option<Row<'_>>, TraceError> {
        let more = self.reader.read_record(&mut self.record).map_err(|err| TraceError {
            path: self.path.to_path_buf(),
            line: err.position().map(|p| p.line()),
            column: None,
            rule: csv_rule(&err),
        })?;
        if !more {
            return Ok(None);
        }
        let line = self.record.position().map_or(0, |p| p.line());
        if self.record.len() != self.width {
            return Err(TraceError {
                path: self.path.to_path_buf(),
                line: Some(line),
                column: None,
                rule: format!(
                    "has {} fields; the header has {} ({})",
                    self.record.len(),
                    self.width,
                    self.columns[..self.width].join(",")
                ),
            });
        }
        Ok(Some(Row { file: self, line }))
    }
}

/// The message of a CSV error without its own position (the caller adds it).
fn csv_rule(err: &csv::Error) -> String {
    match err.kind() {
        csv::ErrorKind::Utf8 { .. } => "is not valid UTF-8".to_string(),
        csv::ErrorKind::Io(io) => format!("cannot read: {io}"),
        _ => format!("is not valid CSV: {err}"),
    }
}

/// One data row.
struct Row<'f> {
    file: &'f TraceFile<'f>,
    line: u64,
}

impl Row<'_> {
    fn len(&self) -> usize {
        self.file.record.len()
    }

    fn text(&self, column: usize) -> &str {
        self.file.record.get(column).unwrap_or("")
    }

    fn error(&self, column: usize, rule: impl Into<String>) -> TraceError {
        TraceError {
            path: self.file.path.to_path_buf(),
            line: Some(self.line),
            column: Some(self.file.columns[column].to_string()),
            rule: rule.into(),
        }
    }

    /// A whole number from 0 to `max`.
    fn whole(&self, column: usize, max: u64) -> Result<u64, TraceError> {
        let text = self.text(column).trim();
        let value: u64 = text.parse().map_err(|_| {
            let found = if text.is_empty() { "nothing".to_string() } else { format!("{text:?}") };
            self.error(column, format!("expected a whole number from 0, found {found}"))
        })?;
        if value > max {
            return Err(self.error(column, format!("{value} is too large; at most {max}")));
        }
        Ok(value)
    }

    /// GPU models separated by `|` (empty: any), each a label value; sorted, unique.
    fn models(&self, column: usize) -> Result<Vec<String>, TraceError> {
        let text = self.text(column).trim();
        if text.is_empty() {
            return Ok(Vec::new());
        }
        let mut models = Vec::new();
        for model in text.split('|').map(str::trim) {
            if model.is_empty() {
                return Err(self.error(column, format!("{text:?} has an empty model between '|'")));
            }
            validate_value(ACCELERATOR_TYPE, model)
                .map_err(|err| self.error(column, err.to_string()))?;
            models.push(model.to_string());
        }
        models.sort();
        models.dedup();
        Ok(models)
    }
}
