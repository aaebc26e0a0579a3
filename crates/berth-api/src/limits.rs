//! The most of each kind of thing one request may hold: labels, selector expressions and their
//! values, bundles, batch items… A head refuses more before doing any work for the request
//! (400, naming the field and the limit); `berth start --head --limit NAME=N` changes one.
//!
//! Why counts and not only the body's size: under the 1 MiB (16 MiB for a batch) body limit a
//! request can name a million labels or a selector of 140,000 values, and the work a request
//! causes grows with such counts (every label is indexed, every value matched, every bundle
//! ranked on the nodes). The defaults are far above what a real request holds (a Kubernetes
//! node carries a few dozen labels; Ray's placement groups hold tens of bundles) and low
//! enough that the largest request allowed costs milliseconds.

use std::fmt;
use std::str::FromStr;

/// One kind of thing a request holds a bounded number of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Limit {
    /// Labels of one object: an actor's labels, a node's labels or taints, keys to remove.
    Labels,
    /// Expressions of one label selector (`label_selector`, a NODE_LABEL strategy's `hard`
    /// or `soft`, one bundle's selector) and of one ACTOR_AFFINITY strategy.
    Expressions,
    /// Values of one expression: `in(a,b,…)`, an affinity expression's `values`.
    Values,
    /// Tolerations of one request or group.
    Tolerations,
    /// Alternatives in `fallback_strategy`.
    Fallbacks,
    /// Bundles of one placement group (and of each of its alternatives).
    Bundles,
    /// Resources named by one request, bundle or node.
    Resources,
    /// Environment variables of one actor or task.
    Env,
    /// Arguments of one actor or task.
    Args,
    /// Items of one batch (`POST /api/v1/actors:batch`, `/api/v1/tasks:batch`).
    BatchItems,
    /// Task IDs of one `POST /api/v1/tasks:wait`.
    WaitIds,
}

impl Limit {
    /// Every limit, in the order the docs list them.
    pub const ALL: [Limit; 11] = [
        Limit::Labels,
        Limit::Expressions,
        Limit::Values,
        Limit::Tolerations,
        Limit::Fallbacks,
        Limit::Bundles,
        Limit::Resources,
        Limit::Env,
        Limit::Args,
        Limit::BatchItems,
        Limit::WaitIds,
    ];

    /// Its name, as `--limit NAME=N` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Limit::Labels => "labels",
            Limit::Expressions => "expressions",
            Limit::Values => "values",
            Limit::Tolerations => "tolerations",
            Limit::Fallbacks => "fallbacks",
            Limit::Bundles => "bundles",
            Limit::Resources => "resources",
            Limit::Env => "env",
            Limit::Args => "args",
            Limit::BatchItems => "batch-items",
            Limit::WaitIds => "wait-ids",
        }
    }

    /// What it counts, for messages and help: "labels per object".
    pub fn counts(self) -> &'static str {
        match self {
            Limit::Labels => "labels per object",
            Limit::Expressions => "expressions per selector",
            Limit::Values => "values per expression",
            Limit::Tolerations => "tolerations per request",
            Limit::Fallbacks => "fallback alternatives",
            Limit::Bundles => "bundles per placement group",
            Limit::Resources => "resources per request",
            Limit::Env => "environment variables",
            Limit::Args => "arguments",
            Limit::BatchItems => "items per batch",
            Limit::WaitIds => "task IDs per wait",
        }
    }

    /// Its value when not set.
    pub fn default_value(self) -> usize {
        match self {
            Limit::Labels => 64,
            Limit::Expressions => 32,
            Limit::Values => 256,
            Limit::Tolerations => 32,
            Limit::Fallbacks => 16,
            Limit::Bundles => 1_024,
            Limit::Resources => 64,
            Limit::Env => 256,
            Limit::Args => 1_024,
            Limit::BatchItems => 10_000,
            Limit::WaitIds => 10_000,
        }
    }

    /// The limit on what a JSON body's key `key` holds, wherever it appears: `labels` counts
    /// labels, `bundles` bundles, `label_selector` expressions… (`None` for other keys).
    pub fn of_key(key: &str) -> Option<Limit> {
        Some(match key {
            "labels" => Limit::Labels,
            "label_selector" | "hard" | "soft" | "expressions" => Limit::Expressions,
            "values" => Limit::Values,
            "tolerations" => Limit::Tolerations,
            "fallback_strategy" => Limit::Fallbacks,
            "bundles" | "bundle_label_selector" => Limit::Bundles,
            "resources" => Limit::Resources,
            "env" => Limit::Env,
            "args" => Limit::Args,
            "items" => Limit::BatchItems,
            "task_ids" => Limit::WaitIds,
            _ => return None,
        })
    }

    /// True when the key's value maps label keys to expressions (whose values [`Limit::Values`]
    /// counts): a selector or tolerations.
    pub fn holds_expressions(key: &str) -> bool {
        matches!(key, "label_selector" | "hard" | "soft" | "tolerations")
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Limit {
    type Err = String;

    fn from_str(text: &str) -> Result<Limit, String> {
        Limit::ALL.into_iter().find(|l| l.name() == text).ok_or_else(|| {
            let names: Vec<&str> = Limit::ALL.iter().map(|l| l.name()).collect();
            format!("no limit {text:?}; the limits are {}", names.join(", "))
        })
    }
}

/// The limits a head applies: each [`Limit`]'s value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits([usize; Limit::ALL.len()]);

impl Default for Limits {
    fn default() -> Limits {
        Limits(Limit::ALL.map(Limit::default_value))
    }
}

impl Limits {
    /// The most of `limit` one request may hold.
    pub fn get(&self, limit: Limit) -> usize {
        self.0[limit as usize]
    }

    /// Sets `limit` to `most`.
    pub fn set(&mut self, limit: Limit, most: usize) {
        self.0[limit as usize] = most;
    }

    /// The message refusing more of `limit` at `field` than allowed: "labels holds more than
    /// 64 (labels per object); …".
    pub fn refusal(&self, limit: Limit, field: &str) -> String {
        format!(
            "{field} holds more than {} ({}); the head's --limit {}=N allows more",
            self.get(limit),
            limit.counts(),
            limit.name()
        )
    }
}

/// One `--limit NAME=N` setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitSetting {
    /// Which limit.
    pub limit: Limit,
    /// Its value.
    pub most: usize,
}

impl FromStr for LimitSetting {
    type Err = String;

    fn from_str(text: &str) -> Result<LimitSetting, String> {
        let (name, value) = text
            .split_once('=')
            .ok_or_else(|| format!("expected NAME=N (such as bundles=4096), not {text:?}"))?;
        let limit: Limit = name.trim().parse()?;
        let most: usize =
            value.trim().parse().map_err(|_| format!("{name}: {value:?} is not a whole number"))?;
        if most == 0 {
            return Err(format!("{name}: a limit is at least 1"));
        }
        Ok(LimitSetting { limit, most })
    }
}

/// How many values the expression `text` names: those of `in(…)` or `!in(…)`, counted by
/// their commas (no label value may hold one); 0 for `exists()`, `!key` and plain values.
pub fn expression_values(text: &str) -> usize {
    match (text.find('('), text.rfind(')')) {
        (Some(open), Some(close)) if open < close => {
            let inner = &text[open + 1..close];
            if inner.trim().is_empty() {
                0
            } else {
                inner.bytes().filter(|&b| b == b',').count() + 1
            }
        }
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_limit_has_a_name_that_reads_back_and_a_default() {
        let limits = Limits::default();
        for (i, limit) in Limit::ALL.into_iter().enumerate() {
            assert_eq!(limit as usize, i, "ALL is in declaration order");
            assert_eq!(limit.name().parse::<Limit>(), Ok(limit));
            assert!(limits.get(limit) >= 8, "{limit}");
        }
        for (text, values) in [("in(a,b,c)", 3), ("!in(x)", 1), ("exists()", 0), ("a", 0)] {
            assert_eq!(expression_values(text), values, "{text}");
        }
        let setting: LimitSetting = "bundles=4096".parse().unwrap();
        assert_eq!(setting, LimitSetting { limit: Limit::Bundles, most: 4096 });
        for (bad, says) in [
            ("bundles", "expected NAME=N"),
            ("bunches=3", "the limits are labels, expressions"),
            ("labels=-1", "not a whole number"),
            ("labels=0", "at least 1"),
        ] {
            let err = bad.parse::<LimitSetting>().unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }
}
