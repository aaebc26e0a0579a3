//! The FGD authors' own results, read from `fgd_published_alloc.csv` in the trace folder, so
//! that a run prints Berth's numbers beside them (never typed in by hand).
//!
//! The file (see the trace folder's README): `trace,policy,k,alloc_mean,alloc_sd,seeds`, the
//! GPU allocation (%) at k = 80, 90, 100, 110, 130, mean and standard deviation over 10 seeds,
//! for the six policies of the FGD paper on the 13 traces they ran. Only the `fgd` rows are
//! kept: they are what Berth is compared with.

use std::collections::BTreeMap;
use std::path::Path;

/// The file's name in the trace folder.
pub const FILE: &str = "fgd_published_alloc.csv";
/// The policy whose rows are kept.
pub const POLICY: &str = "fgd";

/// FGD's published mean allocation (%) by trace and `k`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Published {
    alloc: BTreeMap<(String, usize), f64>,
}

impl Published {
    /// Reads `path`; an error names the file and the line (1-based, the header is line 1).
    pub fn read(path: &Path) -> Result<Published, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|err| format!("{}: cannot read: {err}", path.display()))?;
        Published::parse(&text).map_err(|err| format!("{}: {err}", path.display()))
    }

    /// The file in `dir`, if it is there: `Ok(None)` when it is not.
    pub fn in_dir(dir: &Path) -> Result<Option<Published>, String> {
        let path = dir.join(FILE);
        if !path.is_file() {
            return Ok(None);
        }
        Published::read(&path).map(Some)
    }

    /// Parses the file's text.
    pub fn parse(text: &str) -> Result<Published, String> {
        let mut reader = csv::Reader::from_reader(text.as_bytes());
        let header = reader.headers().map_err(|err| format!("line 1: {err}"))?.clone();
        let column = |name: &str| {
            header
                .iter()
                .position(|h| h.trim() == name)
                .ok_or_else(|| format!("line 1: no `{name}` column"))
        };
        let (trace, policy, k, mean) =
            (column("trace")?, column("policy")?, column("k")?, column("alloc_mean")?);
        let mut alloc = BTreeMap::new();
        for (i, record) in reader.records().enumerate() {
            let line = i + 2;
            let record = record.map_err(|err| format!("line {line}: {err}"))?;
            let field = |c: usize| record.get(c).map(str::trim).unwrap_or_default();
            if field(policy) != POLICY {
                continue;
            }
            let k: usize = field(k)
                .parse()
                .map_err(|_| format!("line {line}: k `{}` is not a whole number", field(k)))?;
            let value: f64 =
                field(mean).parse().ok().filter(|v: &f64| v.is_finite()).ok_or_else(|| {
                    format!("line {line}: alloc_mean `{}` is not a number", field(mean))
                })?;
            alloc.insert((field(trace).to_string(), k), value);
        }
        Ok(Published { alloc })
    }

    /// FGD's mean allocation on `trace` at `k`, if published.
    pub fn fgd(&self, trace: &str, k: usize) -> Option<f64> {
        self.alloc.get(&(trace.to_string(), k)).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_fgd_rows_by_trace_and_k() {
        let text = "trace,policy,k,alloc_mean,alloc_sd,seeds\n\
                    default,best_fit,100,92.86,0.14,10\n\
                    default,fgd,100,95.23,0.10,10\n\
                    default,fgd,80,80.01,0.02,10\n";
        let published = Published::parse(text).unwrap();
        assert_eq!(published.fgd("default", 100), Some(95.23));
        assert_eq!(published.fgd("default", 80), Some(80.01));
        assert_eq!(published.fgd("default", 90), None);
        assert_eq!(published.fgd("cpu0", 100), None);
    }

    #[test]
    fn a_bad_number_names_its_line() {
        let text = "trace,policy,k,alloc_mean\ndefault,fgd,100,x\n";
        assert_eq!(Published::parse(text).unwrap_err(), "line 2: alloc_mean `x` is not a number");
        assert!(Published::parse("trace,k\n").unwrap_err().contains("no `policy` column"));
    }
}
