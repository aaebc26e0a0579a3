//! Text for people: amounts, bars, times, states and the placement keys of a spec. Pure
//! functions of the API types, so each is tested alone. (The CLI has the same rules in
//! `berth-cli/src/client/view.rs`, for a terminal.)

use std::collections::BTreeMap;

use berth_api::rest::{ResourceUse, StringMap};
use serde::Serialize;
use serde_json::Value;

/// Shown for an empty value.
pub(crate) const NONE: &str = "—";

/// A serde enum's wire name: `ALIVE`, `PENDING`.
pub(crate) fn word<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(Value::String(text)) => text,
        Ok(other) => other.to_string(),
        Err(_) => "?".into(),
    }
}

/// The CSS class of a state's badge: `ok` (running as asked), `wait` (on its way or held
/// back), `bad` (failed or gone) or `done` (ended as asked).
pub(crate) fn state_class(state: &str) -> &'static str {
    match state {
        "ALIVE" | "RUNNING" | "CREATED" => "ok",
        "PENDING" | "RESTARTING" | "DRAINING" | "SUSPECT" | "RESCHEDULING" => "wait",
        "DEAD" | "FAILED" => "bad",
        _ => "done",
    }
}

/// An amount for people (see [`berth_api::text::amount`]).
pub(crate) use berth_api::text::amount;

/// One resource as a bar: `<meter>` takes `percent`; the text says `used / total`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Bar {
    /// The resource name.
    pub(crate) name: String,
    /// Reserved now, for people.
    pub(crate) used: String,
    /// The total, for people.
    pub(crate) total: String,
    /// Used over total, 0 to 100, rounded; any use at all shows at least 1.
    pub(crate) percent: u32,
}

impl Bar {
    /// The bar of one resource.
    pub(crate) fn new(name: &str, amounts: &ResourceUse) -> Bar {
        let (used, total) = (amounts.used.to_f64(), amounts.total.to_f64());
        let share = if total > 0.0 { (used / total).clamp(0.0, 1.0) } else { 0.0 };
        let mut percent = (share * 100.0).round() as u32;
        if share > 0.0 && percent == 0 {
            percent = 1;
        }
        if share < 1.0 && percent == 100 {
            percent = 99;
        }
        Bar {
            name: name.to_string(),
            used: amount(name, &amounts.used.to_string()),
            total: amount(name, &amounts.total.to_string()),
            percent,
        }
    }

    /// The bars of a resource map, by name.
    pub(crate) fn all<'a>(
        resources: impl IntoIterator<Item = (&'a str, &'a ResourceUse)>,
    ) -> Vec<Bar> {
        resources.into_iter().map(|(name, amounts)| Bar::new(name, amounts)).collect()
    }
}

/// CPU in cores from thousandths of a core: `1.50`.
pub(crate) fn cores(millicores: u64) -> String {
    format!("{:.2}", millicores as f64 / 1000.0)
}

/// Bytes with a binary unit, as memory amounts are shown: `1.5Gi`.
pub(crate) fn bytes(n: u64) -> String {
    amount("memory", &n.to_string())
}

/// What an attempt uses, measured: `CPU 0.99 · memory 10Mi · 2 processes (attempt 1)`; the
/// CPU is `—` on its first measurement.
pub(crate) fn work_use(w: &berth_api::rest::WorkMeasured) -> String {
    let cpu = w.cpu_millicores.map(cores).unwrap_or_else(|| NONE.to_string());
    let processes =
        if w.processes == 1 { "1 process".into() } else { format!("{} processes", w.processes) };
    format!("CPU {cpu} · memory {} · {processes} (attempt {})", bytes(w.memory_bytes), w.attempt)
}

impl Bar {
    /// A bar of what a machine uses, measured: `used` of `total` (both in the same unit), with
    /// their words.
    pub(crate) fn measured(name: &str, used: f64, total: f64, words: (String, String)) -> Bar {
        let share = if total > 0.0 { (used / total).clamp(0.0, 1.0) } else { 0.0 };
        let mut percent = (share * 100.0).round() as u32;
        if share > 0.0 && percent == 0 {
            percent = 1;
        }
        Bar { name: name.to_string(), used: words.0, total: words.1, percent }
    }

    /// The machine's CPU and memory bars from its measurement (no CPU bar on the first one),
    /// then each GPU's memory, with how busy it was in its name.
    pub(crate) fn machine(m: &berth_api::rest::NodeMeasured) -> Vec<Bar> {
        let mut bars = Vec::with_capacity(2 + m.gpus.len());
        if let Some(millicores) = m.cpu_millicores {
            let cpus = f64::from(m.cpus);
            bars.push(Bar::measured(
                "CPU",
                millicores as f64 / 1000.0,
                cpus,
                (cores(millicores), m.cpus.to_string()),
            ));
        }
        bars.push(Bar::measured(
            "memory",
            m.memory_used_bytes as f64,
            m.memory_total_bytes as f64,
            (bytes(m.memory_used_bytes), bytes(m.memory_total_bytes)),
        ));
        for g in &m.gpus {
            let name = match g.utilization_percent {
                Some(busy) => format!("GPU {} memory ({busy}% busy)", g.index),
                None => format!("GPU {} memory", g.index),
            };
            bars.push(Bar::measured(
                &name,
                g.memory_used_bytes as f64,
                g.memory_total_bytes as f64,
                (bytes(g.memory_used_bytes), bytes(g.memory_total_bytes)),
            ));
        }
        bars
    }
}

/// Text escaped for an HTML attribute value or element (for the few bits of HTML built
/// outside a template).
pub(crate) fn attr(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Milliseconds since the Unix epoch as UTC: `2023-11-14 22:13:20Z`.
pub(crate) fn time(ms: u64) -> String {
    berth_api::text::utc(ms / 1000, ' ')
}

/// A JSON value for people: strings without quotes, the rest as compact JSON.
pub(crate) fn plain(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// An optional placement key of a spec, or [`NONE`].
pub(crate) fn optional(value: Option<&impl Serialize>) -> String {
    value
        .and_then(|v| serde_json::to_value(v).ok())
        .map(|v| plain(&v))
        .unwrap_or_else(|| NONE.to_string())
}

/// A resource map as given in a body (`{"CPU": 1, "GPU": "0.5"}`): `CPU 1, GPU 0.5`.
pub(crate) fn spec_resources(resources: &impl Serialize) -> String {
    match &serde_json::to_value(resources).unwrap_or_default() {
        Value::Object(map) if map.is_empty() => "nothing".into(),
        Value::Object(map) => map
            .iter()
            .map(|(name, value)| format!("{name} {}", amount(name, &plain(value))))
            .collect::<Vec<_>>()
            .join(", "),
        other => plain(other),
    }
}

/// A resource map of a bundle or a demand shape: `CPU 4, GPU 1`.
pub(crate) fn shape(resources: &StringMap) -> String {
    if resources.is_empty() {
        return "nothing".into();
    }
    resources.iter().map(|(n, a)| format!("{n} {}", amount(n, a))).collect::<Vec<_>>().join(", ")
}

/// `k=v, k2=v2`, or [`NONE`].
pub(crate) fn pairs(map: &StringMap) -> String {
    if map.is_empty() {
        return NONE.into();
    }
    map.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", ")
}

/// Instance IDs per resource: `GPU [0, 1]`, or [`NONE`].
pub(crate) fn instances(map: &BTreeMap<String, Vec<u32>>) -> String {
    if map.is_empty() {
        return NONE.into();
    }
    map.iter()
        .map(|(name, ids)| {
            let ids: Vec<String> = ids.iter().map(u32::to_string).collect();
            format!("{name} [{}]", ids.join(", "))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A command line as a shell would take it back: arguments with spaces or quotes in quotes.
pub(crate) fn command_line(command: &str, args: &[String]) -> String {
    std::iter::once(command)
        .chain(args.iter().map(String::as_str))
        .map(|word| {
            let safe = !word.is_empty()
                && word.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
            if safe {
                word.to_string()
            } else {
                format!("'{}'", word.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// One path segment of a URL: every byte but the unreserved ones (`A-Z a-z 0-9 - . _ ~`)
/// percent-encoded, so a node ID can never add a segment, a query or a fragment.
pub(crate) fn segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The dashboard's link (a `#` route) to an actor, task or group, from its kind word
/// (`actor`, `task`, `placement_group`).
pub(crate) fn link(kind: &str, id: &str) -> String {
    let page = match kind {
        "actor" => "actors",
        "task" => "tasks",
        "job" => "jobs",
        _ => "groups",
    };
    format!("#{page}/{}", segment(id))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(used: &str, total: &str) -> ResourceUse {
        let amount = |text: &str| berth_core::Quantity::parse(text).unwrap();
        ResourceUse { total: amount(total), used: amount(used), available: Default::default() }
    }

    #[test]
    fn amounts_of_memory_get_binary_units_and_others_stay() {
        assert_eq!(amount("memory", "17179869184"), "16Gi");
        assert_eq!(amount("object_store_memory", "1610612736"), "1.5Gi");
        assert_eq!(amount("memory", "512"), "512");
        assert_eq!(amount("GPU", "0.5"), "0.5");
        assert_eq!(amount("memory", "lots"), "lots");
    }

    #[test]
    fn measured_use_reads_in_cores_and_binary_units() {
        assert_eq!(cores(1500), "1.50");
        assert_eq!(cores(7), "0.01");
        assert_eq!(bytes(10 << 20), "10Mi");
        let w = berth_api::rest::WorkMeasured {
            work_id: "task-1".into(),
            attempt: 2,
            at_ms: 1,
            cpu_millicores: Some(990),
            memory_bytes: 1536 << 20,
            processes: 1,
        };
        assert_eq!(work_use(&w), "CPU 0.99 · memory 1.5Gi · 1 process (attempt 2)");
        let first = berth_api::rest::WorkMeasured { cpu_millicores: None, processes: 3, ..w };
        assert_eq!(work_use(&first), "CPU — · memory 1.5Gi · 3 processes (attempt 2)");
        let m = berth_api::rest::NodeMeasured {
            at_ms: 1,
            cpu_millicores: Some(2000),
            cpus: 8,
            memory_used_bytes: 1 << 30,
            memory_total_bytes: 4 << 30,
            gpus: vec![berth_api::rest::GpuMeasured {
                index: 1,
                memory_used_bytes: 4 << 30,
                memory_total_bytes: 16 << 30,
                utilization_percent: Some(45),
            }],
            work: vec![],
        };
        let bars: Vec<_> =
            Bar::machine(&m).into_iter().map(|b| (b.name, b.used, b.total, b.percent)).collect();
        assert_eq!(
            bars,
            [
                ("CPU".to_string(), "2.00".to_string(), "8".to_string(), 25),
                ("memory".to_string(), "1Gi".to_string(), "4Gi".to_string(), 25),
                ("GPU 1 memory (45% busy)".to_string(), "4Gi".to_string(), "16Gi".to_string(), 25)
            ]
        );
    }

    #[test]
    fn bars_show_any_use_and_only_a_full_resource_as_full() {
        let cases = [
            (("0", "8"), 0),
            (("2", "8"), 25),
            (("1", "1000"), 1),
            (("999", "1000"), 99),
            (("8", "8"), 100),
            (("9", "8"), 100),
            (("1", "0"), 0),
        ];
        for ((used, total), percent) in cases {
            assert_eq!(Bar::new("CPU", &usage(used, total)).percent, percent, "{used}/{total}");
        }
        let memory = Bar::new("memory", &usage("1073741824", "4294967296"));
        assert_eq!((memory.used.as_str(), memory.total.as_str()), ("1Gi", "4Gi"));
    }

    #[test]
    fn times_are_utc() {
        assert_eq!(time(0), "1970-01-01 00:00:00Z");
        assert_eq!(time(1_700_000_000_000), "2023-11-14 22:13:20Z");
    }

    #[test]
    fn segments_cannot_escape_their_place_in_a_url() {
        assert_eq!(segment("sim-00001"), "sim-00001");
        assert_eq!(segment("a/b?c#d e"), "a%2Fb%3Fc%23d%20e");
        assert_eq!(segment("ü"), "%C3%BC");
        assert_eq!(link("placement_group", "pg-3"), "#groups/pg-3");
        assert_eq!(link("actor", "actor-1"), "#actors/actor-1");
    }

    #[test]
    fn states_have_a_badge_class() {
        assert_eq!(state_class("ALIVE"), "ok");
        assert_eq!(state_class("PENDING"), "wait");
        assert_eq!(state_class("FAILED"), "bad");
        assert_eq!(state_class("REMOVED"), "done");
    }

    #[test]
    fn spec_text() {
        let resources = serde_json::json!({"CPU": 1, "GPU": "0.5"});
        assert_eq!(spec_resources(&resources), "CPU 1, GPU 0.5");
        assert_eq!(command_line("sh", &["-c".into(), "echo hi".into()]), "sh -c 'echo hi'");
        assert_eq!(pairs(&StringMap::new()), NONE);
        assert_eq!(optional(None::<&String>), NONE);
    }
}
