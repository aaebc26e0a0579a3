//! The profile file: [`parse_profile`], into the core's typed [`Profile`]. The format is in `docs/file-formats.md`.
//!
//! A profile file is the `arguments:` map of Volcano's `resource-strategy-fit` plugin (seed
//! 001), so the seed's examples can be pasted in, plus `hybridWeight` for Berth's own hybrid
//! scorer. The seed writes the `sra` settings in two forms, and both are read:
//!
//! - nested: `sra: {policy: retention, resources: …, retention: {weight: 2, nvidia.com/t4: 1}}`;
//! - flat keys: `sra.policy: retention`, `sra.retention.weight: 2`, `sra.retention.nvidia.com/t4: 1`.
//!
//! Both are read the same way: the document is parsed into a tree, the maps `sra`,
//! `sra.retention` and `sra.proportional` are flattened into dotted keys (the two forms may
//! even be mixed, but a setting given twice is an error), and each dotted key is checked.
//! Errors name the key in that dotted spelling (`sra.retention.nvidia.com/t4`,
//! `resources.cpu.type`) and the rule; no invalid value is replaced by a default, and nothing
//! panics. Absent keys have documented defaults: `resourceStrategyFitWeight` 10 (Volcano's),
//! a resource's `weight` 1, `sra.retention.weight` 1, a scarce resource's weight 1.
//!
//! Volcano's released plugin reads the SRA settings in a third form, and that is read too, so
//! a Volcano scheduler configmap's `arguments:` can be pasted as it is:
//!
//! - `sra: {enable, resources, weight, resourceWeight: {<name>: N}}` (retention) and
//!   `proportional: {enable, resources, resourceProportion: {<name>.cpu: N, <name>.memory: N}}`,
//!   with Volcano's defaults (see [`Settings::volcano`]).
//!
//! A file uses the design document's form or Volcano's for its SRA settings, not both.
//!
//! Resource names follow Berth's rules; `cpu`, the Kubernetes spelling the seed uses, means
//! Berth's `CPU`.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::{Location, MessageFormatter, NonFiniteFloatPolicy, Spanned};
use thiserror::Error;

use berth_core::pipeline::profile::{FilterSpec, Profile, ScorerSpec};
use berth_core::pipeline::scorers::sra::Proportion;
use berth_core::pipeline::scorers::strategy_fit::{ResourceStrategy, StrategyKind};
use berth_core::pipeline::scorers::{wildcard_prefix, ResourceRules};
use berth_core::{Quantity, ResourceRegistry};

/// A profile file that breaks a rule. Displays as `key: rule`.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub struct ProfileError {
    /// The key in the seed's dotted spelling (`sra.retention.weight`,
    /// `resources.nvidia.com/gpu.type`); empty for the document as a whole.
    pub key: String,
    /// The rule broken, as a sentence.
    pub rule: String,
    /// Line and column (1-based) of the offending key or value, when known.
    pub location: Option<(u64, u64)>,
}

impl fmt::Display for ProfileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            f.write_str(&self.rule)
        } else {
            write!(f, "{}: {}", self.key, self.rule)
        }
    }
}

/// `resourceStrategyFitWeight` when the file lists `resources` without it (Volcano's default).
pub const DEFAULT_STRATEGY_FIT_WEIGHT: u32 = 10;

/// What ResourceStrategyFit scores when it runs without `resources` (Volcano's default): CPU
/// and memory, each spread (LeastAllocated) with weight 1.
pub const DEFAULT_STRATEGY_FIT_RESOURCES: [&str; 2] = ["CPU", "memory"];

/// Reads a profile file. See the module documentation and `docs/file-formats.md`.
pub fn parse_profile(text: &str) -> Result<Profile, ProfileError> {
    let blank = text.lines().all(|line| {
        let line = line.trim();
        line.is_empty() || line.starts_with('#')
    });
    if blank {
        return Err(error(
            "",
            "the profile is empty; expected a map such as `sra.policy: retention` \
             (see docs/file-formats.md)",
            None,
        ));
    }
    let options = serde_saphyr::options! {
        strict_booleans: true,
        // `.nan` and `.inf` become text, which the number rules reject by name.
        non_finite_float_policy: NonFiniteFloatPolicy::AsString,
    };
    let root: Spanned<Value> =
        serde_saphyr::from_str_with_options(text, options).map_err(|err| {
            let rule = serde_saphyr::UserMessageFormatter.format_message(&err).into_owned();
            error("", rule, err.location())
        })?;
    let Value::Map(entries) = &root.value else {
        let rule = format!("expected a map of settings, found {}", root.value.describe());
        return Err(error("", rule, Some(root.referenced)));
    };
    let mut leaves = Vec::new();
    flatten("", entries, &mut leaves)?;
    Settings::read(&leaves)?.into_profile()
}

fn error(key: impl Into<String>, rule: impl Into<String>, at: Option<Location>) -> ProfileError {
    let location = at.filter(|l| l.line() > 0).map(|l| (l.line(), l.column().max(1)));
    ProfileError { key: key.into(), rule: rule.into(), location }
}

// ---------------------------------------------------------------------------------------------
// The document as a tree.

/// A YAML value, with the location of every key and value.
#[derive(Debug)]
enum Value {
    Map(Vec<(Spanned<KeyText>, Spanned<Value>)>),
    Seq(Vec<Spanned<Value>>),
    Str(String),
    Int(i128),
    Float(f64),
    Bool(bool),
    Null,
}

impl Value {
    /// What was found, for "expected …, found …".
    fn describe(&self) -> String {
        match self {
            Value::Map(_) => "a map".to_string(),
            Value::Seq(_) => "a list".to_string(),
            Value::Str(text) => format!("the text {text:?}"),
            Value::Int(n) => n.to_string(),
            // `{:?}` keeps the point: `2.0`, which says why a weight of 2.0 is refused.
            Value::Float(x) => format!("{x:?}"),
            Value::Bool(b) => b.to_string(),
            Value::Null => "nothing (null)".to_string(),
        }
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(ValueVisitor)
    }
}

struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Int(v.into()))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Int(v.into()))
    }
    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Value, E> {
        Ok(Value::Int(v))
    }
    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Value, E> {
        Ok(Value::Int(i128::try_from(v).unwrap_or(i128::MAX)))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Ok(Value::Float(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::Str(v.to_string()))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        Value::deserialize(deserializer)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Spanned<Value>>()? {
            items.push(item);
        }
        Ok(Value::Seq(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut entries = Vec::new();
        while let Some(entry) = map.next_entry::<Spanned<KeyText>, Spanned<Value>>()? {
            entries.push(entry);
        }
        Ok(Value::Map(entries))
    }
}

/// A map key as text (`1: x` has the key `1`).
#[derive(Debug)]
struct KeyText(String);

impl<'de> Deserialize<'de> for KeyText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<KeyText, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = KeyText;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key such as sra.policy or nvidia.com/gpu")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<KeyText, E> {
                Ok(KeyText(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<KeyText, E> {
                Ok(KeyText(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<KeyText, E> {
                Ok(KeyText(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<KeyText, E> {
                Ok(KeyText(v.to_string()))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<KeyText, E> {
                Ok(KeyText(v.to_string()))
            }
        }
        deserializer.deserialize_any(KeyVisitor)
    }
}

// ---------------------------------------------------------------------------------------------
// Flattening: both forms become dotted keys.

/// The maps whose keys are joined to theirs with a dot: `sra: {policy: x}` is `sra.policy: x`.
const SECTIONS: [&str; 10] = [
    "sra",
    "sra.retention",
    "sra.proportional",
    "proportional",
    scorers::BEST_FIT,
    scorers::FRAGMENTATION,
    scorers::CAPACITY,
    scorers::BALANCE,
    scorers::CPU_FRAGMENTATION,
    scorers::PACKING,
];

/// One setting: its dotted key, where the key was written, and its value.
struct Leaf<'a> {
    key: String,
    at: Location,
    value: &'a Spanned<Value>,
}

fn flatten<'a>(
    prefix: &str,
    entries: &'a [(Spanned<KeyText>, Spanned<Value>)],
    out: &mut Vec<Leaf<'a>>,
) -> Result<(), ProfileError> {
    for (key, value) in entries {
        let key_text = key.value.0.trim();
        let path =
            if prefix.is_empty() { key_text.to_string() } else { format!("{prefix}.{key_text}") };
        if SECTIONS.contains(&path.as_str()) {
            let Value::Map(inner) = &value.value else {
                let rule = format!("expected a map, found {}", value.value.describe());
                return Err(error(path, rule, Some(value.referenced)));
            };
            // A scorer's section turns the scorer on even when empty (`bestFit: {}`).
            if scorers::SCORER_SECTIONS.contains(&path.as_str()) {
                out.push(Leaf { key: path.clone(), at: key.referenced, value });
            }
            flatten(&path, inner, out)?;
            continue;
        }
        if let Some(first) = out.iter().find(|leaf| leaf.key == path) {
            let rule = format!(
                "is given twice (first on line {}); the nested and the flat form name the same \
                 setting, so give it once",
                first.at.line()
            );
            return Err(error(path, rule, Some(key.referenced)));
        }
        out.push(Leaf { key: path, at: key.referenced, value });
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Reading the settings.

/// Every setting of the file, checked one by one; [`Settings::into_profile`] checks how they
/// go together.
#[derive(Default)]
struct Settings<'a> {
    hybrid_weight: Option<u32>,
    strategy_fit_weight: Option<(u32, &'a Leaf<'a>)>,
    resources: Option<(Vec<(String, ResourceStrategy)>, &'a Leaf<'a>)>,
    policy: Option<(Policies, &'a Leaf<'a>)>,
    sra_resources: Option<(Vec<String>, &'a Leaf<'a>)>,
    retention_weight: Option<(u32, &'a Leaf<'a>)>,
    /// `sra.retention.<name>`: (name, weight, the setting).
    retention: Vec<(String, u32, &'a Leaf<'a>)>,
    /// `sra.proportional.<name>.<cpu|memory>`: (name, secondary, amount, the setting).
    proportional: Vec<(String, Secondary, Quantity, &'a Leaf<'a>)>,
    /// Volcano's released form: `sra.enable`, `sra.weight`, `sra.resourceWeight` and
    /// `proportional.*`.
    volcano: VolcanoSettings<'a>,
    /// `bestFit`, `fragmentation`, `capacity`, `balance`, `packing`, `keepLargeHosts`,
    /// `pick` and `topKFraction`.
    more: scorers::MoreSettings<'a>,
}

/// `sra.resourceWeight`: (resource, weight, where).
type ResourceWeights = Vec<(String, u32, Location)>;
/// `proportional.resourceProportion`: (resource, secondary, amount, where).
type Proportions = Vec<(String, Secondary, Quantity, Location)>;

/// The settings only Volcano's released form has.
#[derive(Default)]
struct VolcanoSettings<'a> {
    sra_enable: Option<(bool, &'a Leaf<'a>)>,
    /// `sra.weight` as written: 0 or less leaves retention off, as in Volcano.
    sra_weight: Option<(i128, &'a Leaf<'a>)>,
    sra_resource_weight: Option<(ResourceWeights, &'a Leaf<'a>)>,
    proportional_enable: Option<(bool, &'a Leaf<'a>)>,
    proportional_resources: Option<(Vec<String>, &'a Leaf<'a>)>,
    proportion: Option<(Proportions, &'a Leaf<'a>)>,
}

impl<'a> VolcanoSettings<'a> {
    /// The first setting of this form, if any (for "mixes the forms" errors).
    fn first(&self) -> Option<&'a Leaf<'a>> {
        [
            self.sra_enable.map(|(_, leaf)| leaf),
            self.sra_weight.map(|(_, leaf)| leaf),
            self.sra_resource_weight.as_ref().map(|(_, leaf)| *leaf),
            self.proportional_enable.map(|(_, leaf)| leaf),
            self.proportional_resources.as_ref().map(|(_, leaf)| *leaf),
            self.proportion.as_ref().map(|(_, leaf)| *leaf),
        ]
        .into_iter()
        .flatten()
        .min_by_key(|leaf| (leaf.at.line(), leaf.at.column()))
    }

    fn sra_given(&self) -> bool {
        self.sra_enable.is_some() || self.sra_weight.is_some() || self.sra_resource_weight.is_some()
    }
}

/// Which SRA policies are on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Policies {
    retention: bool,
    proportional: bool,
}

/// The secondary resources of the proportional policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Secondary {
    Cpu,
    Memory,
}

const TOP_LEVEL_KEYS: &str = "hybridWeight, resourceStrategyFitWeight, resources, sra \
                              (nested, or as flat keys such as sra.policy), proportional \
                              (Volcano's form), bestFit, fragmentation, capacity, balance, \
                              packing, keepLargeHosts, pick and topKFraction";

impl<'a> Settings<'a> {
    fn read(leaves: &'a [Leaf<'a>]) -> Result<Settings<'a>, ProfileError> {
        let mut settings = Settings::default();
        for leaf in leaves {
            let key = leaf.key.as_str();
            match key {
                "hybridWeight" => settings.hybrid_weight = Some(weight(leaf)?),
                "resourceStrategyFitWeight" => {
                    // Volcano's rule: negative is the default; 0 turns the scorer off.
                    let weight = match integer(leaf)? {
                        0 => 0,
                        _ => weight_or(leaf, DEFAULT_STRATEGY_FIT_WEIGHT)?,
                    };
                    settings.strategy_fit_weight = Some((weight, leaf));
                }
                "resources" => settings.resources = Some((strategies(leaf)?, leaf)),
                "sra.policy" => settings.policy = Some((policies(leaf)?, leaf)),
                "sra.resources" => settings.sra_resources = Some((scarce_names(leaf)?, leaf)),
                "sra.retention.weight" => settings.retention_weight = Some((weight(leaf)?, leaf)),
                "sra.enable" => settings.volcano.sra_enable = Some((boolean(leaf)?, leaf)),
                "sra.weight" => settings.volcano.sra_weight = Some((integer(leaf)?, leaf)),
                "sra.resourceWeight" => {
                    settings.volcano.sra_resource_weight = Some((resource_weights(leaf)?, leaf));
                }
                "proportional.enable" => {
                    settings.volcano.proportional_enable = Some((boolean(leaf)?, leaf));
                }
                "proportional.resources" => {
                    settings.volcano.proportional_resources = Some((scarce_names(leaf)?, leaf));
                }
                "proportional.resourceProportion" => {
                    settings.volcano.proportion = Some((resource_proportions(leaf)?, leaf));
                }
                _ if key.starts_with("proportional.") => {
                    return Err(leaf_error(
                        leaf,
                        "unknown key; proportional (Volcano's form) takes enable, resources and \
                         resourceProportion",
                    ));
                }
                _ if settings.more.read(leaf)? => {}
                _ => {
                    if let Some(name) = key.strip_prefix("sra.retention.") {
                        let name = key_resource_name(name, leaf, false)?;
                        settings.retention.push((name, weight(leaf)?, leaf));
                    } else if let Some(rest) = key.strip_prefix("sra.proportional.") {
                        let (name, secondary) = proportional_key(rest, leaf)?;
                        let name = key_resource_name(name, leaf, false)?;
                        settings.proportional.push((name, secondary, ratio(leaf)?, leaf));
                    } else if key.starts_with("sra.") {
                        return Err(leaf_error(
                            leaf,
                            "unknown key; sra takes policy, resources, retention and proportional \
                             (the design document's form) or enable, resources, weight and \
                             resourceWeight (Volcano's released form)",
                        ));
                    } else {
                        return Err(leaf_error(
                            leaf,
                            format!("unknown key; a profile takes {TOP_LEVEL_KEYS}"),
                        ));
                    }
                }
            }
        }
        Ok(settings)
    }

    /// Checks how the settings go together and builds the profile.
    fn into_profile(self) -> Result<Profile, ProfileError> {
        let volcano = self.volcano.first();
        if let (Some(theirs), Some(ours)) = (volcano, self.design_sra_first()) {
            return Err(leaf_error(
                theirs,
                format!(
                    "is Volcano's released form of the SRA settings, and {} (line {}) the design \
                     document's; a profile uses one form",
                    ours.key,
                    ours.at.line()
                ),
            ));
        }
        let mut profile = Profile::of_scorers(Vec::new());
        if let Some(weight) = self.hybrid_weight {
            profile.scorers.push(ScorerSpec::Hybrid { weight });
        }
        // ResourceStrategyFit runs when the file configures it, and in Volcano's form always,
        // as Volcano's plugin does (weight 10 and CPU and memory spread, unless given); a
        // weight of 0 turns it off, as in Volcano.
        if self.strategy_fit_weight.is_some() || self.resources.is_some() || volcano.is_some() {
            let weight = self.strategy_fit_weight.map_or(DEFAULT_STRATEGY_FIT_WEIGHT, |(w, _)| w);
            let resources = match self.resources.clone() {
                Some((resources, _)) => resources,
                None => DEFAULT_STRATEGY_FIT_RESOURCES
                    .iter()
                    .map(|name| {
                        let spread =
                            ResourceStrategy { kind: StrategyKind::LeastAllocated, weight: 1 };
                        (name.to_string(), spread)
                    })
                    .collect(),
            };
            if weight > 0 {
                profile.scorers.push(ScorerSpec::ResourceStrategyFit {
                    weight,
                    resources: ResourceRules::new(resources),
                });
            }
        }
        if volcano.is_some() {
            self.volcano_sra(&mut profile)?;
        } else {
            self.sra(&mut profile)?;
        }
        self.more.apply(&mut profile)?;
        if profile.scorers.is_empty()
            && profile.filters.is_empty()
            && profile.preferences.is_empty()
        {
            return Err(error(
                "",
                "the profile configures nothing; set hybridWeight, resources or sra \
                 (see docs/file-formats.md)",
                None,
            ));
        }
        Ok(profile)
    }

    /// The first SRA setting only the design document's form has.
    fn design_sra_first(&self) -> Option<&'a Leaf<'a>> {
        [
            self.policy.as_ref().map(|(_, leaf)| *leaf),
            self.retention_weight.as_ref().map(|(_, leaf)| *leaf),
            self.retention.first().map(|(_, _, leaf)| *leaf),
            self.proportional.first().map(|(_, _, _, leaf)| *leaf),
        ]
        .into_iter()
        .flatten()
        .min_by_key(|leaf| (leaf.at.line(), leaf.at.column()))
    }

    /// Volcano's released SRA settings, with Volcano's defaults: a scarce resource's weight is
    /// 1 unless given (a negative one is 1, as in Volcano), retention runs only with
    /// `sra.enable: true` and `sra.weight` above 0 (Volcano's default weight is 0), and a
    /// proportion not given, or negative, is 1. Where Volcano ignores a setting in silence
    /// (no `enable`, a weight for a resource not listed), Berth refuses it with the key.
    fn volcano_sra(&self, profile: &mut Profile) -> Result<(), ProfileError> {
        let v = &self.volcano;
        if v.sra_given() || self.sra_resources.is_some() {
            let names = self.sra_resources.as_ref().map(|(names, _)| names.as_slice());
            let enable = enabled("sra", v.sra_enable, v.first())?;
            let weights: &[(String, u32, Location)] =
                v.sra_resource_weight.as_ref().map_or(&[], |(w, _)| w.as_slice());
            for (name, _, at) in weights {
                if !names.unwrap_or(&[]).contains(name) {
                    let rule = format!("{name} is not listed in sra.resources");
                    return Err(error("sra.resourceWeight", rule, Some(*at)));
                }
            }
            let weight = v.sra_weight.map_or(0, |(w, _)| w);
            if enable && weight > 0 {
                let Some(names) = names else {
                    return Err(required("sra.resources", "sra.enable: true", v.sra_enable));
                };
                let weight = u32::try_from(weight).map_err(|_| {
                    let (_, leaf) = v.sra_weight.expect("a weight above 0 was given");
                    value_error(
                        leaf,
                        format!("{weight} is too large; weights are at most {}", u32::MAX),
                    )
                })?;
                let scarce: Vec<(String, u32)> = names
                    .iter()
                    .map(|name| {
                        let given = weights.iter().find(|(n, _, _)| n == name);
                        (name.clone(), given.map_or(1, |(_, w, _)| *w))
                    })
                    .collect();
                // All weights 0: every node scores alike, so it would only shift totals.
                if scarce.iter().any(|(_, w)| *w > 0) {
                    profile
                        .scorers
                        .push(ScorerSpec::Retention { weight, scarce: ResourceRules::new(scarce) });
                }
            }
        }
        let proportional_given = v.proportional_enable.is_some()
            || v.proportional_resources.is_some()
            || v.proportion.is_some();
        if proportional_given {
            let enable = enabled("proportional", v.proportional_enable, v.first())?;
            let names = v.proportional_resources.as_ref().map(|(names, _)| names.as_slice());
            let proportions: &[(String, Secondary, Quantity, Location)] =
                v.proportion.as_ref().map_or(&[], |(p, _)| p.as_slice());
            for (name, _, _, at) in proportions {
                if !names.unwrap_or(&[]).contains(name) {
                    let rule = format!("{name} is not listed in proportional.resources");
                    return Err(error("proportional.resourceProportion", rule, Some(*at)));
                }
            }
            if enable {
                let Some(names) = names else {
                    return Err(required(
                        "proportional.resources",
                        "proportional.enable: true",
                        v.proportional_enable,
                    ));
                };
                let one = Quantity::from_u64(1).expect("1 is a quantity");
                let amount = |name: &str, secondary: Secondary| {
                    proportions
                        .iter()
                        .find(|(n, s, _, _)| n == name && *s == secondary)
                        .map_or(one, |(_, _, amount, _)| *amount)
                };
                let primaries = names.iter().map(|name| {
                    let proportion = Proportion {
                        cpu: amount(name, Secondary::Cpu),
                        memory_gb: amount(name, Secondary::Memory),
                    };
                    (name.clone(), proportion)
                });
                profile
                    .filters
                    .push(FilterSpec::Proportional { primaries: ResourceRules::new(primaries) });
            }
        }
        Ok(())
    }

    /// The SRA policies: checks `sra.*` together and adds their stages.
    fn sra(&self, profile: &mut Profile) -> Result<(), ProfileError> {
        let first_sra_leaf = [
            self.sra_resources.as_ref().map(|(_, leaf)| *leaf),
            self.retention_weight.as_ref().map(|(_, leaf)| *leaf),
            self.retention.first().map(|(_, _, leaf)| *leaf),
            self.proportional.first().map(|(_, _, _, leaf)| *leaf),
        ]
        .into_iter()
        .flatten()
        .min_by_key(|leaf| (leaf.at.line(), leaf.at.column()));
        let Some((policies, policy_leaf)) = self.policy else {
            return match first_sra_leaf {
                None => Ok(()),
                Some(leaf) => Err(error(
                    "sra.policy",
                    format!(
                        "is required when {} is set: name the policy, retention or \
                         proportional, or both",
                        leaf.key
                    ),
                    Some(leaf.at),
                )),
            };
        };
        let Some((names, names_leaf)) = &self.sra_resources else {
            return Err(error(
                "sra.resources",
                "is required with sra.policy: list the scarce resources, such as nvidia.com/gpu",
                Some(policy_leaf.at),
            ));
        };
        self.sra_retention(policies, names, names_leaf, profile)?;
        self.sra_proportional(policies, names, policy_leaf, profile)
    }

    /// Retention: a weight per scarce resource (1 unless given) and the policy weight.
    fn sra_retention(
        &self,
        policies: Policies,
        names: &[String],
        names_leaf: &Leaf<'_>,
        profile: &mut Profile,
    ) -> Result<(), ProfileError> {
        if let Some((_, leaf)) = &self.retention_weight {
            if !policies.retention {
                return Err(policy_off(leaf, "retention"));
            }
        }
        for (name, _, leaf) in &self.retention {
            if !policies.retention {
                return Err(policy_off(leaf, "retention"));
            }
            listed(names, name, leaf)?;
        }
        if !policies.retention {
            return Ok(());
        }
        let scarce: Vec<(String, u32)> = names
            .iter()
            .map(|name| {
                let given = self.retention.iter().find(|(n, _, _)| n == name);
                (name.clone(), given.map_or(1, |(_, weight, _)| *weight))
            })
            .collect();
        if scarce.iter().all(|(_, weight)| *weight == 0) {
            return Err(error(
                "sra.retention",
                "the weights of the scarce resources add up to 0, so no node would be \
                 avoided; give at least one a weight above 0",
                Some(names_leaf.at),
            ));
        }
        let weight = self.retention_weight.map_or(1, |(weight, _)| weight);
        profile.scorers.push(ScorerSpec::Retention { weight, scarce: ResourceRules::new(scarce) });
        Ok(())
    }

    /// Proportional: CPU and memory per idle unit, both required for every primary.
    fn sra_proportional(
        &self,
        policies: Policies,
        names: &[String],
        policy_leaf: &Leaf<'_>,
        profile: &mut Profile,
    ) -> Result<(), ProfileError> {
        for (name, _, _, leaf) in &self.proportional {
            if !policies.proportional {
                return Err(policy_off(leaf, "proportional"));
            }
            listed(names, name, leaf)?;
        }
        if !policies.proportional {
            return Ok(());
        }
        let mut primaries = Vec::new();
        for name in names {
            let amount = |secondary: Secondary| {
                self.proportional
                    .iter()
                    .find(|(n, s, _, _)| n == name && *s == secondary)
                    .map(|(_, _, amount, _)| *amount)
            };
            let (Some(cpu), Some(memory_gb)) = (amount(Secondary::Cpu), amount(Secondary::Memory))
            else {
                let (suffix, what) = match amount(Secondary::Cpu) {
                    None => ("cpu", "CPUs"),
                    Some(_) => ("memory", "GB of memory (10^9 bytes)"),
                };
                return Err(error(
                    format!("sra.proportional.{name}.{suffix}"),
                    format!(
                        "is required with sra.policy proportional: the {what} to keep free per \
                         idle {name}"
                    ),
                    Some(policy_leaf.at),
                ));
            };
            primaries.push((name.clone(), Proportion { cpu, memory_gb }));
        }
        profile.filters.push(FilterSpec::Proportional { primaries: ResourceRules::new(primaries) });
        Ok(())
    }
}

/// `name` must be one of `sra.resources`.
fn listed(names: &[String], name: &str, leaf: &Leaf<'_>) -> Result<(), ProfileError> {
    if names.iter().any(|n| n == name) {
        Ok(())
    } else {
        Err(leaf_error(leaf, format!("{name} is not listed in sra.resources")))
    }
}

/// A key of a policy that `sra.policy` does not name.
fn policy_off(leaf: &Leaf<'_>, policy: &str) -> ProfileError {
    leaf_error(leaf, format!("is set but sra.policy does not include {policy}"))
}

fn leaf_error(leaf: &Leaf<'_>, rule: impl Into<String>) -> ProfileError {
    error(leaf.key.clone(), rule, Some(leaf.at))
}

fn value_error(leaf: &Leaf<'_>, rule: impl Into<String>) -> ProfileError {
    error(leaf.key.clone(), rule, Some(leaf.value.referenced))
}

/// `section.enable` of Volcano's form: required once the section has any setting.
fn enabled(
    section: &str,
    enable: Option<(bool, &Leaf<'_>)>,
    first: Option<&Leaf<'_>>,
) -> Result<bool, ProfileError> {
    match enable {
        Some((enable, _)) => Ok(enable),
        None => Err(error(
            format!("{section}.enable"),
            format!(
                "is required with the other {section} settings of Volcano's form: true turns \
                 the policy on, false off (Volcano leaves it off without it)"
            ),
            first.map(|leaf| leaf.at),
        )),
    }
}

/// `key` is missing, and `with` (where it was written) needs it.
fn required(key: &str, with: &str, leaf: Option<(bool, &Leaf<'_>)>) -> ProfileError {
    error(
        key,
        format!("is required with {with}: list the scarce resources, such as nvidia.com/gpu"),
        leaf.map(|(_, leaf)| leaf.at),
    )
}

/// `true` or `false`.
fn boolean(leaf: &Leaf<'_>) -> Result<bool, ProfileError> {
    match &leaf.value.value {
        Value::Bool(b) => Ok(*b),
        other => {
            Err(value_error(leaf, format!("expected true or false, found {}", other.describe())))
        }
    }
}

/// A whole number, negative allowed (Volcano gives negative weights a default).
fn integer(leaf: &Leaf<'_>) -> Result<i128, ProfileError> {
    match &leaf.value.value {
        Value::Int(n) => Ok(*n),
        other => {
            Err(value_error(leaf, format!("expected a whole number, found {}", other.describe())))
        }
    }
}

/// A weight Volcano's way: a whole number; 0 or less is `default`.
fn weight_or(leaf: &Leaf<'_>, default: u32) -> Result<u32, ProfileError> {
    match integer(leaf)? {
        n if n <= 0 => Ok(default),
        n => u32::try_from(n).map_err(|_| {
            value_error(leaf, format!("{n} is too large; weights are at most {}", u32::MAX))
        }),
    }
}

/// The entries of a map setting, each as its own leaf `key.<entry>`.
fn entries<'v>(leaf: &Leaf<'v>, what: &str) -> Result<Vec<Leaf<'v>>, ProfileError> {
    let Value::Map(entries) = &leaf.value.value else {
        return Err(value_error(
            leaf,
            format!("expected a map of {what}, found {}", leaf.value.value.describe()),
        ));
    };
    Ok(entries
        .iter()
        .map(|(key, value)| Leaf {
            key: format!("{}.{}", leaf.key, key.value.0.trim()),
            at: key.referenced,
            value,
        })
        .collect())
}

/// `sra.resourceWeight`: resource name to weight; a negative weight is 1 (Volcano's rule), 0
/// stays 0.
fn resource_weights(leaf: &Leaf<'_>) -> Result<ResourceWeights, ProfileError> {
    let mut out: ResourceWeights = Vec::new();
    for entry in entries(leaf, "resource name to weight, such as {nvidia.com/gpu: 1}")? {
        let written = entry.key[leaf.key.len() + 1..].to_string();
        let name = key_resource_name(&written, &entry, false)?;
        if out.iter().any(|(n, _, _)| *n == name) {
            return Err(leaf_error(&entry, format!("names {name} twice")));
        }
        let weight = match integer(&entry)? {
            n if n < 0 => 1,
            n => u32::try_from(n).map_err(|_| {
                value_error(&entry, format!("{n} is too large; weights are at most {}", u32::MAX))
            })?,
        };
        out.push((name, weight, entry.at));
    }
    Ok(out)
}

/// `proportional.resourceProportion`: `<resource>.cpu` and `<resource>.memory` to amounts; a
/// negative amount is 1 (Volcano's rule).
fn resource_proportions(leaf: &Leaf<'_>) -> Result<Proportions, ProfileError> {
    let mut out: Proportions = Vec::new();
    let what = "<resource>.cpu and <resource>.memory to amounts, such as {nvidia.com/gpu.cpu: 8}";
    for entry in entries(leaf, what)? {
        let written = entry.key[leaf.key.len() + 1..].to_string();
        let (name, secondary) = proportional_key(&written, &entry)?;
        let name = key_resource_name(name, &entry, false)?;
        if out.iter().any(|(n, s, _, _)| *n == name && *s == secondary) {
            return Err(leaf_error(&entry, "is given twice"));
        }
        let negative = match &entry.value.value {
            Value::Int(n) => *n < 0,
            Value::Float(x) => *x < 0.0,
            _ => false,
        };
        let amount =
            if negative { Quantity::from_u64(1).expect("1 is a quantity") } else { ratio(&entry)? };
        out.push((name, secondary, amount, entry.at));
    }
    Ok(out)
}

/// A weight: a whole number from 0 to 4294967295.
fn weight(leaf: &Leaf<'_>) -> Result<u32, ProfileError> {
    weight_value(&leaf.value.value).map_err(|rule| value_error(leaf, rule))
}

fn weight_value(value: &Value) -> Result<u32, String> {
    match value {
        Value::Int(n) if *n < 0 => {
            Err(format!("{n} is negative; weights are whole numbers from 0"))
        }
        Value::Int(n) => u32::try_from(*n)
            .map_err(|_| format!("{n} is too large; weights are at most {}", u32::MAX)),
        Value::Float(x) if *x < 0.0 => {
            Err(format!("{x} is negative; weights are whole numbers from 0"))
        }
        other => {
            Err(format!("expected a weight (a whole number from 0), found {}", other.describe()))
        }
    }
}

/// A proportion: a non-negative number with at most 4 decimal places.
fn ratio(leaf: &Leaf<'_>) -> Result<Quantity, ProfileError> {
    let amount = match &leaf.value.value {
        Value::Int(n) if *n < 0 => Err(format!("{n} is negative; proportions are 0 or more")),
        Value::Int(n) => {
            Quantity::from_u64(u64::try_from(*n).unwrap_or(u64::MAX)).map_err(|err| err.to_string())
        }
        Value::Float(x) => Quantity::from_f64(*x).map_err(|err| err.to_string()),
        other => Err(format!("expected a number such as 8 or 0.5, found {}", other.describe())),
    };
    amount.map_err(|rule| value_error(leaf, rule))
}

/// `resources:`: a map of resource name (or `prefix/*`) to `{type, weight}`.
fn strategies(leaf: &Leaf<'_>) -> Result<Vec<(String, ResourceStrategy)>, ProfileError> {
    let Value::Map(entries) = &leaf.value.value else {
        return Err(value_error(
            leaf,
            format!(
                "expected a map of resource name to {{type, weight}}, such as \
                 {{nvidia.com/gpu: {{type: MostAllocated, weight: 2}}}}, found {}",
                leaf.value.value.describe()
            ),
        ));
    };
    if entries.is_empty() {
        return Err(value_error(
            leaf,
            "lists no resource; list at least one, or leave resources out",
        ));
    }
    let mut out: Vec<(String, ResourceStrategy, u64)> = Vec::new();
    for (key, value) in entries {
        let written = key.value.0.trim();
        let entry = Leaf { key: format!("resources.{written}"), at: key.referenced, value };
        let name = key_resource_name(written, &entry, true)?;
        if let Some((_, _, line)) = out.iter().find(|(n, _, _)| *n == name) {
            return Err(leaf_error(
                &entry,
                format!("names the same resource, {name}, as the entry on line {line}"),
            ));
        }
        out.push((name, strategy(&entry)?, key.referenced.line()));
    }
    Ok(out.into_iter().map(|(name, strategy, _)| (name, strategy)).collect())
}

/// One entry of `resources:`: `{type: MostAllocated, weight: 2}` (`weight` defaults to 1).
fn strategy(entry: &Leaf<'_>) -> Result<ResourceStrategy, ProfileError> {
    let Value::Map(fields) = &entry.value.value else {
        return Err(value_error(
            entry,
            format!(
                "expected {{type: MostAllocated or LeastAllocated, weight: N}}, found {}",
                entry.value.value.describe()
            ),
        ));
    };
    let mut kind = None;
    let mut weight_given = None;
    for (key, value) in fields {
        let field = Leaf {
            key: format!("{}.{}", entry.key, key.value.0.trim()),
            at: key.referenced,
            value,
        };
        match key.value.0.trim() {
            "type" => kind = Some(strategy_kind(&field)?),
            // Volcano's rule: a weight of 0 or less is 1.
            "weight" => weight_given = Some(weight_or(&field, 1)?),
            _ => return Err(leaf_error(&field, "unknown key; a resource takes type and weight")),
        }
    }
    let Some(kind) = kind else {
        return Err(error(
            format!("{}.type", entry.key),
            "is required: MostAllocated (pack) or LeastAllocated (spread)",
            Some(entry.at),
        ));
    };
    Ok(ResourceStrategy { kind, weight: weight_given.unwrap_or(1) })
}

fn strategy_kind(leaf: &Leaf<'_>) -> Result<StrategyKind, ProfileError> {
    const HELP: &str = "use MostAllocated (pack) or LeastAllocated (spread)";
    match &leaf.value.value {
        Value::Str(text) => match text.trim().to_ascii_lowercase().as_str() {
            "mostallocated" => Ok(StrategyKind::MostAllocated),
            "leastallocated" => Ok(StrategyKind::LeastAllocated),
            _ => Err(value_error(leaf, format!("unknown strategy type {text:?}; {HELP}"))),
        },
        other => Err(value_error(
            leaf,
            format!("expected a strategy type, found {}; {HELP}", other.describe()),
        )),
    }
}

/// `sra.policy`: `retention`, `proportional`, or both (`retention, proportional` or a list).
fn policies(leaf: &Leaf<'_>) -> Result<Policies, ProfileError> {
    const HELP: &str = "use retention, proportional, or both (\"retention, proportional\")";
    let mut policies = Policies::default();
    for (name, _) in names_of(leaf, "policy")? {
        let flag = match name.to_ascii_lowercase().as_str() {
            "retention" => &mut policies.retention,
            "proportional" => &mut policies.proportional,
            _ => return Err(value_error(leaf, format!("unknown policy {name:?}; {HELP}"))),
        };
        if *flag {
            return Err(value_error(leaf, format!("names {name} twice")));
        }
        *flag = true;
    }
    Ok(policies)
}

/// `sra.resources`: exact resource names, `a, b` or a list.
fn scarce_names(leaf: &Leaf<'_>) -> Result<Vec<String>, ProfileError> {
    let mut names: Vec<String> = Vec::new();
    for (written, at) in names_of(leaf, "resource")? {
        let name = resource_name(&written, false)
            .map_err(|rule| error(leaf.key.clone(), rule, Some(at)))?;
        if names.contains(&name) {
            return Err(value_error(leaf, format!("lists {name} twice")));
        }
        names.push(name);
    }
    Ok(names)
}

/// The names in a comma-separated text or a list of texts, trimmed, each with its location;
/// at least one, none empty. `what` is the singular noun for messages.
fn names_of(leaf: &Leaf<'_>, what: &str) -> Result<Vec<(String, Location)>, ProfileError> {
    let at = leaf.value.referenced;
    let items: Vec<(String, Location)> = match &leaf.value.value {
        Value::Str(text) => text.split(',').map(|part| (part.trim().to_string(), at)).collect(),
        Value::Seq(items) => items
            .iter()
            .map(|item| match &item.value {
                Value::Str(text) => Ok((text.trim().to_string(), item.referenced)),
                other => Err(error(
                    leaf.key.clone(),
                    format!("expected a {what} name, found {}", other.describe()),
                    Some(item.referenced),
                )),
            })
            .collect::<Result<_, _>>()?,
        other => {
            return Err(value_error(
                leaf,
                format!(
                    "expected {what} names, as a text with commas or a list, found {}",
                    other.describe()
                ),
            ))
        }
    };
    if items.iter().any(|(name, _)| name.is_empty()) {
        return Err(value_error(leaf, format!("has an empty {what} name (a stray comma?)")));
    }
    Ok(items)
}

/// `nvidia.com/gpu.cpu` → (`nvidia.com/gpu`, CPU).
fn proportional_key<'k>(
    rest: &'k str,
    leaf: &Leaf<'_>,
) -> Result<(&'k str, Secondary), ProfileError> {
    let parsed = rest.rsplit_once('.').and_then(|(name, secondary)| match secondary {
        "cpu" => Some((name, Secondary::Cpu)),
        "memory" => Some((name, Secondary::Memory)),
        _ => None,
    });
    parsed.ok_or_else(|| {
        leaf_error(
            leaf,
            "unknown key; sra.proportional takes <resource>.cpu and <resource>.memory, such as \
             nvidia.com/gpu.cpu",
        )
    })
}

/// A resource name as Berth spells it (`cpu` is `CPU`), or the rule it breaks; with
/// `wildcard`, `prefix/*` is accepted as written.
fn resource_name(written: &str, wildcard: bool) -> Result<String, String> {
    let written = written.trim();
    if written == "cpu" {
        return Ok("CPU".to_string());
    }
    let checked = match wildcard_prefix(written) {
        Some(prefix) if wildcard => prefix,
        Some(_) => {
            return Err(format!(
                "{written} is a wildcard, and wildcards are allowed only under resources; name \
                 each resource"
            ))
        }
        None if written.contains('*') => {
            return Err(format!(
                "{written:?} is not a valid wildcard: write a prefix and one trailing *, such \
                 as nvidia.com/*"
            ))
        }
        None => written,
    };
    // The registry owns the naming rule; a scratch registry applies it.
    ResourceRegistry::default().intern(checked).map_err(|err| err.to_string())?;
    Ok(written.to_string())
}

/// [`resource_name`] for the resource named in a key, such as `sra.retention.<name>`.
fn key_resource_name(
    written: &str,
    leaf: &Leaf<'_>,
    wildcard: bool,
) -> Result<String, ProfileError> {
    resource_name(written, wildcard).map_err(|rule| leaf_error(leaf, rule))
}

mod scorers;
#[cfg(test)]
mod tests;
