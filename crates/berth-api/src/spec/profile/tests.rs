//! The profile file: the seed's examples, both forms, and every rule with its message.

use proptest::prelude::*;

use super::*;
use berth_core::pipeline::profile::{Pick, PreferenceSpec};
use berth_core::pipeline::scorers::strategy_fit::StrategyKind::{LeastAllocated, MostAllocated};

fn q(text: &str) -> Quantity {
    Quantity::parse(text).unwrap()
}

fn rules<T: Copy>(entries: &[(&str, T)]) -> ResourceRules<T> {
    ResourceRules::new(entries.iter().map(|(name, value)| (name.to_string(), *value)))
}

fn strategy(kind: StrategyKind, weight: u32) -> ResourceStrategy {
    ResourceStrategy { kind, weight }
}

fn load(text: &str) -> Profile {
    parse_profile(text).unwrap_or_else(|err| panic!("{err}\n{text}"))
}

// ---------------------------------------------------------------------------------------------
// The seed's profiles (the `arguments:` of each of its configurations, as written).

const SEED_STRATEGY_FIT: &str = "\
resourceStrategyFitWeight: 10
resources:
  nvidia.com/gpu:
    type: MostAllocated
    weight: 2
  cpu:
    type: LeastAllocated
    weight: 1
";

const SEED_RETENTION: &str = "\
sra.policy: retention
sra.resources: nvidia.com/t4, nvidia.com/a10
sra.retention.weight: 2
sra.retention.nvidia.com/t4: 1
sra.retention.nvidia.com/a10: 1
";

const SEED_PROPORTIONAL: &str = "\
sra:
  policy: proportional
  resources: nvidia.com/gpu,nvidia.com/v100-sxm2-16gb
  proportional:
    nvidia.com/gpu.cpu: 8
    nvidia.com/gpu.memory: 8
    nvidia.com/v100-sxm2-16gb.cpu: 16
    nvidia.com/v100-sxm2-16gb.memory: 16
";

const SEED_AI_SCENARIO: &str = "\
resourceStrategyFitWeight: 10
resources:
  nvidia.com/gpu:
    type: MostAllocated
    weight: 2
  cpu:
    type: LeastAllocated
    weight: 1
sra:
  policy: retention
  resources: nvidia.com/gpu
  retention:
    weight: 10
    nvidia.com/gpu: 1
";

/// The AI scenario as Volcano's user guide writes it, with flat `sra` keys.
const SEED_AI_SCENARIO_FLAT: &str = "\
resourceStrategyFitWeight: 10
resources:
  nvidia.com/gpu:
    type: MostAllocated
    weight: 2
  cpu:
    type: LeastAllocated
    weight: 1
sra.policy: retention
sra.resources: nvidia.com/gpu
sra.retention.weight: 10
sra.retention.nvidia.com/gpu: 1
";

fn seed_strategy_fit() -> ScorerSpec {
    ScorerSpec::ResourceStrategyFit {
        weight: 10,
        resources: rules(&[
            ("nvidia.com/gpu", strategy(MostAllocated, 2)),
            ("CPU", strategy(LeastAllocated, 1)),
        ]),
    }
}

#[test]
fn seed_profiles_load() {
    let gpu = Proportion { cpu: q("8"), memory_gb: q("8") };
    let v100 = Proportion { cpu: q("16"), memory_gb: q("16") };
    let ai = Profile {
        scorers: vec![
            seed_strategy_fit(),
            ScorerSpec::Retention { weight: 10, scarce: rules(&[("nvidia.com/gpu", 1)]) },
        ],
        filters: Vec::new(),
        preferences: Vec::new(),
        pick: Pick::TopK,
    };
    // (profile file, expected profile)
    let cases = [
        (SEED_STRATEGY_FIT, Profile::of_scorers(vec![seed_strategy_fit()])),
        (
            SEED_RETENTION,
            Profile {
                scorers: vec![ScorerSpec::Retention {
                    weight: 2,
                    scarce: rules(&[("nvidia.com/t4", 1), ("nvidia.com/a10", 1)]),
                }],
                filters: Vec::new(),
                preferences: Vec::new(),
                pick: Pick::TopK,
            },
        ),
        (
            SEED_PROPORTIONAL,
            Profile {
                scorers: Vec::new(),
                filters: vec![FilterSpec::Proportional {
                    primaries: rules(&[
                        ("nvidia.com/gpu", gpu),
                        ("nvidia.com/v100-sxm2-16gb", v100),
                    ]),
                }],
                preferences: Vec::new(),
                pick: Pick::TopK,
            },
        ),
        (SEED_AI_SCENARIO, ai.clone()),
        (SEED_AI_SCENARIO_FLAT, ai),
    ];
    for (text, expected) in cases {
        assert_eq!(load(text), expected, "{text}");
    }
}

#[test]
fn both_policies_together_and_hybrid() {
    let profile = load(
        "hybridWeight: 1\n\
         sra.policy: retention, proportional\n\
         sra.resources: [nvidia.com/gpu]\n\
         sra.proportional.nvidia.com/gpu.cpu: 4\n\
         sra.proportional.nvidia.com/gpu.memory: 0.5\n",
    );
    assert_eq!(
        profile.scorers,
        [
            ScorerSpec::Hybrid { weight: 1 },
            ScorerSpec::Retention { weight: 1, scarce: rules(&[("nvidia.com/gpu", 1)]) },
        ]
    );
    assert_eq!(
        profile.filters,
        [FilterSpec::Proportional {
            primaries: rules(&[(
                "nvidia.com/gpu",
                Proportion { cpu: q("4"), memory_gb: q("0.5") }
            )]),
        }]
    );
    let names: Vec<&str> = profile.filters().iter().map(|f| f.name()).collect();
    assert_eq!(names, ["sra_proportional"]);
}

#[test]
fn defaults_for_absent_keys() {
    // resourceStrategyFitWeight 10, a resource's weight 1, retention weights 1.
    let profile = load(
        "resources: {nvidia.com/*: {type: mostallocated}}\n\
         sra: {policy: Retention, resources: \"a.com/x, b.com/y\"}\n",
    );
    assert_eq!(
        profile.scorers,
        [
            ScorerSpec::ResourceStrategyFit {
                weight: 10,
                resources: rules(&[("nvidia.com/*", strategy(MostAllocated, 1))]),
            },
            ScorerSpec::Retention { weight: 1, scarce: rules(&[("a.com/x", 1), ("b.com/y", 1)]) },
        ]
    );
}

#[test]
fn wildcards_load_with_exact_names_first_then_the_longest() {
    let profile = load(
        "resources:\n\
         \x20 nvidia.com/*: {type: MostAllocated, weight: 1}\n\
         \x20 nvidia.com/mig/*: {type: LeastAllocated, weight: 3}\n\
         \x20 nvidia.com/a10: {type: LeastAllocated, weight: 2}\n",
    );
    let [ScorerSpec::ResourceStrategyFit { resources, .. }] = profile.scorers.as_slice() else {
        panic!("{profile:?}")
    };
    assert_eq!(resources.get("nvidia.com/a10"), Some(&strategy(LeastAllocated, 2)));
    assert_eq!(resources.get("nvidia.com/mig/1g.5gb"), Some(&strategy(LeastAllocated, 3)));
    assert_eq!(resources.get("nvidia.com/t4"), Some(&strategy(MostAllocated, 1)));
    assert_eq!(resources.get("amd.com/gpu"), None);
}

// ---------------------------------------------------------------------------------------------
// Both forms load to the same profile.

#[test]
fn nested_flat_and_mixed_forms_are_the_same_profile() {
    let nested = "\
sra:
  policy: retention, proportional
  resources: nvidia.com/t4, nvidia.com/a10
  retention:
    weight: 2
    nvidia.com/t4: 1
    nvidia.com/a10: 3
  proportional:
    nvidia.com/t4.cpu: 4
    nvidia.com/t4.memory: 16
    nvidia.com/a10.cpu: 8
    nvidia.com/a10.memory: 32
";
    let flat = "\
sra.retention.nvidia.com/a10: 3
sra.proportional.nvidia.com/a10.memory: 32
sra.policy: retention, proportional
sra.proportional.nvidia.com/t4.cpu: 4
sra.resources: nvidia.com/t4, nvidia.com/a10
sra.retention.weight: 2
sra.proportional.nvidia.com/t4.memory: 16
sra.retention.nvidia.com/t4: 1
sra.proportional.nvidia.com/a10.cpu: 8
";
    let mixed = "\
sra.policy: retention, proportional
sra:
  resources: [nvidia.com/t4, nvidia.com/a10]
  retention.weight: 2
sra.retention:
  nvidia.com/t4: 1
  nvidia.com/a10: 3
sra.proportional: {nvidia.com/t4.cpu: 4, nvidia.com/t4.memory: 16}
sra.proportional.nvidia.com/a10.cpu: 8
sra.proportional.nvidia.com/a10.memory: 32
";
    let expected = load(nested);
    assert_eq!(load(flat), expected);
    assert_eq!(load(mixed), expected);
}

/// `(sub-key, value)` pairs of one `sra` section.
type SectionSettings = Vec<(String, String)>;

/// One randomly generated profile, written both ways.
#[derive(Clone, Debug)]
struct Generated {
    hybrid: Option<u32>,
    strategy_fit_weight: Option<u32>,
    /// (name, MostAllocated?, weight)
    strategies: Vec<(&'static str, bool, Option<u32>)>,
    retention: bool,
    proportional: bool,
    retention_weight: Option<u32>,
    /// (name, retention weight, cpu, memory); at least one.
    scarce: Vec<(&'static str, Option<u32>, Quantity, Quantity)>,
}

const STRATEGY_NAMES: [&str; 5] =
    ["cpu", "memory", "nvidia.com/gpu", "nvidia.com/*", "example.com/fpga/*"];
const SCARCE_NAMES: [&str; 4] = ["nvidia.com/gpu", "nvidia.com/t4", "nvidia.com/a10", "TPU"];

fn amount() -> impl Strategy<Value = Quantity> {
    (0i64..2_000_000).prop_map(Quantity::from_units)
}

fn generated() -> impl Strategy<Value = Generated> {
    let strategies = proptest::sample::subsequence(STRATEGY_NAMES.to_vec(), 1..=5)
        .prop_flat_map(|names| {
            let n = names.len();
            (Just(names), prop::collection::vec((any::<bool>(), prop::option::of(0u32..20)), n))
        })
        .prop_map(|(names, specs)| {
            names
                .into_iter()
                .zip(specs)
                .map(|(name, (most, weight))| (name, most, weight))
                .collect()
        });
    let scarce = proptest::sample::subsequence(SCARCE_NAMES.to_vec(), 1..=4)
        .prop_flat_map(|names| {
            let n = names.len();
            (Just(names), prop::collection::vec((prop::option::of(1u32..5), amount(), amount()), n))
        })
        .prop_map(|(names, specs)| {
            names.into_iter().zip(specs).map(|(name, (w, cpu, mem))| (name, w, cpu, mem)).collect()
        });
    (
        prop::option::of(0u32..5),
        prop::option::of(0u32..20),
        prop::option::of(strategies),
        (any::<bool>(), any::<bool>()),
        prop::option::of(0u32..20),
        scarce,
    )
        .prop_map(
            |(
                hybrid,
                strategy_fit_weight,
                strategies,
                (retention, proportional),
                retention_weight,
                scarce,
            )| {
                Generated {
                    hybrid,
                    // A weight without resources is an error, tested elsewhere.
                    strategy_fit_weight: strategies.as_ref().and(strategy_fit_weight),
                    strategies: strategies.unwrap_or_default(),
                    // At least one policy, so that the file configures something.
                    retention: retention || !proportional,
                    proportional,
                    retention_weight,
                    scarce,
                }
            },
        )
}

impl Generated {
    /// The parts every form shares: hybridWeight and resources, in the nested form.
    fn common(&self) -> String {
        let mut text = String::new();
        if let Some(w) = self.hybrid {
            text.push_str(&format!("hybridWeight: {w}\n"));
        }
        if let Some(w) = self.strategy_fit_weight {
            text.push_str(&format!("resourceStrategyFitWeight: {w}\n"));
        }
        if !self.strategies.is_empty() {
            text.push_str("resources:\n");
            for (name, most, weight) in &self.strategies {
                let kind = if *most { "MostAllocated" } else { "LeastAllocated" };
                text.push_str(&format!("  {name}:\n    type: {kind}\n"));
                if let Some(w) = weight {
                    text.push_str(&format!("    weight: {w}\n"));
                }
            }
        }
        text
    }

    fn policy(&self) -> &'static str {
        match (self.retention, self.proportional) {
            (true, true) => "retention, proportional",
            (true, false) => "retention",
            _ => "proportional",
        }
    }

    fn names(&self) -> String {
        self.scarce.iter().map(|s| s.0).collect::<Vec<_>>().join(", ")
    }

    /// `(sub-key, value)` of every retention and proportional setting.
    fn sra_settings(&self) -> (SectionSettings, SectionSettings) {
        let mut retention = Vec::new();
        let mut proportional = Vec::new();
        if self.retention {
            if let Some(w) = self.retention_weight {
                retention.push(("weight".to_string(), w.to_string()));
            }
            for (name, weight, _, _) in &self.scarce {
                if let Some(w) = weight {
                    retention.push((name.to_string(), w.to_string()));
                }
            }
        }
        if self.proportional {
            for (name, _, cpu, memory) in &self.scarce {
                proportional.push((format!("{name}.cpu"), cpu.to_string()));
                proportional.push((format!("{name}.memory"), memory.to_string()));
            }
        }
        (retention, proportional)
    }

    fn nested(&self) -> String {
        let mut text = self.common();
        text.push_str(&format!(
            "sra:\n  policy: {}\n  resources: {}\n",
            self.policy(),
            self.names()
        ));
        let (retention, proportional) = self.sra_settings();
        for (section, settings) in [("retention", retention), ("proportional", proportional)] {
            if !settings.is_empty() {
                text.push_str(&format!("  {section}:\n"));
                for (key, value) in settings {
                    text.push_str(&format!("    {key}: {value}\n"));
                }
            }
        }
        text
    }

    /// Flat keys, in reverse order of the nested form (order does not matter).
    fn flat(&self) -> String {
        let mut lines = vec![
            format!("sra.policy: {}", self.policy()),
            format!("sra.resources: [{}]", self.names()),
        ];
        let (retention, proportional) = self.sra_settings();
        lines.extend(retention.into_iter().map(|(k, v)| format!("sra.retention.{k}: {v}")));
        lines.extend(proportional.into_iter().map(|(k, v)| format!("sra.proportional.{k}: {v}")));
        lines.reverse();
        self.common() + &lines.join("\n") + "\n"
    }

    /// The profile both should load to, built directly.
    fn expected(&self) -> Profile {
        let mut scorers = Vec::new();
        if let Some(weight) = self.hybrid {
            scorers.push(ScorerSpec::Hybrid { weight });
        }
        // A plugin weight of 0 turns the scorer off; a resource weight of 0 is 1 (Volcano).
        if !self.strategies.is_empty() && self.strategy_fit_weight != Some(0) {
            let resources = self.strategies.iter().map(|(name, most, weight)| {
                let name = if *name == "cpu" { "CPU" } else { name };
                let kind = if *most { MostAllocated } else { LeastAllocated };
                (name.to_string(), strategy(kind, weight.filter(|w| *w > 0).unwrap_or(1)))
            });
            scorers.push(ScorerSpec::ResourceStrategyFit {
                weight: self.strategy_fit_weight.unwrap_or(10),
                resources: ResourceRules::new(resources),
            });
        }
        if self.retention {
            let scarce = self.scarce.iter().map(|(n, w, _, _)| (n.to_string(), w.unwrap_or(1)));
            scorers.push(ScorerSpec::Retention {
                weight: self.retention_weight.unwrap_or(1),
                scarce: ResourceRules::new(scarce),
            });
        }
        let mut filters = Vec::new();
        if self.proportional {
            let primaries = self.scarce.iter().map(|(n, _, cpu, memory)| {
                (n.to_string(), Proportion { cpu: *cpu, memory_gb: *memory })
            });
            filters.push(FilterSpec::Proportional { primaries: ResourceRules::new(primaries) });
        }
        Profile { scorers, filters, preferences: Vec::new(), pick: Pick::TopK }
    }
}

proptest! {
    #[test]
    fn both_forms_load_to_the_same_profile(generated in generated()) {
        let nested = parse_profile(&generated.nested());
        let flat = parse_profile(&generated.flat());
        prop_assert_eq!(&nested, &Ok(generated.expected()), "nested:\n{}", generated.nested());
        prop_assert_eq!(&flat, &nested, "flat:\n{}", generated.flat());
    }
}

// ---------------------------------------------------------------------------------------------
// Every invalid case, with its key, rule and line.

#[test]
fn invalid_profiles_name_the_key_and_the_rule() {
    // (file, key, words of the rule, line)
    let cases: &[(&str, &str, &str, Option<u64>)] = &[
        ("", "", "the profile is empty", None),
        ("# only a comment\n", "", "the profile is empty", None),
        ("[1, 2]\n", "", "expected a map of settings, found a list", Some(1)),
        ("{}\n", "", "configures nothing", None),
        ("a: [\n", "", "", Some(1)),
        // Unknown keys.
        ("weight: 1\n", "weight", "unknown key; a profile takes hybridWeight", Some(1)),
        ("sra.polcy: retention\n", "sra.polcy", "unknown key; sra takes policy", Some(1)),
        ("sra:\n  polcy: retention\n", "sra.polcy", "unknown key; sra takes policy", Some(2)),
        (
            "resources:\n  CPU: {type: MostAllocated, wieght: 1}\n",
            "resources.CPU.wieght",
            "unknown key; a resource takes type and weight",
            Some(2),
        ),
        (
            "sra.policy: proportional\nsra.resources: g.com/x\nsra.proportional.g.com/x.gpu: 1\n",
            "sra.proportional.g.com/x.gpu",
            "takes <resource>.cpu and <resource>.memory",
            Some(3),
        ),
        // Wrong types.
        ("hybridWeight: one\n", "hybridWeight", "expected a weight (a whole number from 0), found the text \"one\"", Some(1)),
        ("resourceStrategyFitWeight: 2.0\n", "resourceStrategyFitWeight", "found 2.0", Some(1)),
        ("hybridWeight: true\n", "hybridWeight", "found true", Some(1)),
        ("hybridWeight:\n", "hybridWeight", "found nothing (null)", Some(1)),
        ("resources: [CPU]\n", "resources", "expected a map of resource name to {type, weight}", Some(1)),
        ("resources: {}\n", "resources", "lists no resource", Some(1)),
        ("resources: {CPU: MostAllocated}\n", "resources.CPU", "expected {type: MostAllocated or LeastAllocated", Some(1)),
        ("resources: {CPU: {type: 1}}\n", "resources.CPU.type", "expected a strategy type, found 1", Some(1)),
        ("sra: retention\n", "sra", "expected a map, found the text \"retention\"", Some(1)),
        ("sra.retention: 2\nsra.policy: retention\n", "sra.retention", "expected a map", Some(1)),
        ("sra.policy: [retention, 1]\nsra.resources: g.com/x\n", "sra.policy", "expected a policy name, found 1", Some(1)),
        ("sra.policy: retention\nsra.resources: {a: 1}\n", "sra.resources", "expected resource names", Some(2)),
        (
            "sra.policy: proportional\nsra.resources: g.com/x\nsra.proportional.g.com/x.cpu: \"8\"\n\
             sra.proportional.g.com/x.memory: 8\n",
            "sra.proportional.g.com/x.cpu",
            "expected a number such as 8 or 0.5, found the text \"8\"",
            Some(3),
        ),
        // Negative and out-of-range numbers.
        ("hybridWeight: -1\n", "hybridWeight", "-1 is negative; weights are whole numbers from 0", Some(1)),
        ("resourceStrategyFitWeight: 4294967296\n", "resourceStrategyFitWeight", "is too large", Some(1)),
        ("resources: {CPU: {type: MostAllocated, weight: 1.5}}\n", "resources.CPU.weight", "expected a whole number, found 1.5", Some(1)),
        ("sra.policy: retention\nsra.resources: g.com/x\nsra.retention.weight: -3\n", "sra.retention.weight", "-3 is negative", Some(3)),
        ("sra.policy: retention\nsra.resources: g.com/x\nsra.retention.g.com/x: -0.5\n", "sra.retention.g.com/x", "-0.5 is negative", Some(3)),
        ("hybridWeight: 4294967296\n", "hybridWeight", "is too large; weights are at most 4294967295", Some(1)),
        (
            "sra.policy: proportional\nsra.resources: g.com/x\nsra.proportional.g.com/x.cpu: -8\n\
             sra.proportional.g.com/x.memory: 8\n",
            "sra.proportional.g.com/x.cpu",
            "-8 is negative; proportions are 0 or more",
            Some(3),
        ),
        (
            "sra.policy: proportional\nsra.resources: g.com/x\nsra.proportional.g.com/x.cpu: 0.00001\n\
             sra.proportional.g.com/x.memory: 8\n",
            "sra.proportional.g.com/x.cpu",
            "below the resolution of 0.0001",
            Some(3),
        ),
        // Unknown strategy types and policies.
        ("resources: {CPU: {type: MostRequested}}\n", "resources.CPU.type", "unknown strategy type \"MostRequested\"; use MostAllocated (pack) or LeastAllocated (spread)", Some(1)),
        ("resources: {CPU: {weight: 1}}\n", "resources.CPU.type", "is required: MostAllocated (pack) or LeastAllocated (spread)", Some(1)),
        ("sra.policy: binpack\nsra.resources: g.com/x\n", "sra.policy", "unknown policy \"binpack\"", Some(1)),
        ("sra.policy: retention, retention\nsra.resources: g.com/x\n", "sra.policy", "names retention twice", Some(1)),
        ("sra.policy: retention,\nsra.resources: g.com/x\n", "sra.policy", "has an empty policy name", Some(1)),
        // Resource names.
        ("resources: {\"G PU\": {type: MostAllocated}}\n", "resources.G PU", "resource name \"G PU\" is invalid", Some(1)),
        ("resources: {\"*\": {type: MostAllocated}}\n", "resources.*", "is not a valid wildcard: write a prefix and one trailing *", Some(1)),
        ("resources: {nvidia.*/*: {type: MostAllocated}}\n", "resources.nvidia.*/*", "is not a valid wildcard: write a prefix and one trailing *", Some(1)),
        (
            "resources:\n  cpu: {type: MostAllocated}\n  CPU: {type: LeastAllocated}\n",
            "resources.CPU",
            "names the same resource, CPU, as the entry on line 2",
            Some(3),
        ),
        ("sra.policy: retention\nsra.resources: nvidia.com/*\n", "sra.resources", "wildcards are allowed only under resources", Some(2)),
        ("sra.policy: retention\nsra.resources: [g.com/x, \"b d\"]\n", "sra.resources", "resource name \"b d\" is invalid", Some(2)),
        ("sra.policy: retention\nsra.resources: g.com/x, g.com/x\n", "sra.resources", "lists g.com/x twice", Some(2)),
        // Settings that do not go together.
        ("sra.resources: g.com/x\n", "sra.policy", "is required when sra.resources is set", Some(1)),
        ("sra:\n  retention:\n    weight: 2\n", "sra.policy", "is required when sra.retention.weight is set", Some(3)),
        ("sra.policy: retention\n", "sra.resources", "is required with sra.policy", Some(1)),
        (
            "sra.policy: proportional\nsra.resources: g.com/x\nsra.retention.weight: 2\n\
             sra.proportional.g.com/x.cpu: 1\nsra.proportional.g.com/x.memory: 1\n",
            "sra.retention.weight",
            "is set but sra.policy does not include retention",
            Some(3),
        ),
        (
            "sra.policy: retention\nsra.resources: g.com/x\nsra.proportional.g.com/x.cpu: 1\n",
            "sra.proportional.g.com/x.cpu",
            "is set but sra.policy does not include proportional",
            Some(3),
        ),
        (
            "sra.policy: retention\nsra.resources: g.com/x\nsra.retention.g.com/y: 1\n",
            "sra.retention.g.com/y",
            "g.com/y is not listed in sra.resources",
            Some(3),
        ),
        (
            "sra.policy: retention\nsra.resources: g.com/x\nsra.retention.g.com/x: 0\n",
            "sra.retention",
            "add up to 0",
            Some(2),
        ),
        (
            "sra.policy: proportional\nsra.resources: g.com/x\nsra.proportional.g.com/x.memory: 8\n",
            "sra.proportional.g.com/x.cpu",
            "is required with sra.policy proportional: the CPUs to keep free per idle g.com/x",
            Some(1),
        ),
        (
            "sra.policy: proportional\nsra.resources: g.com/x\nsra.proportional.g.com/x.cpu: 8\n",
            "sra.proportional.g.com/x.memory",
            "the GB of memory (10^9 bytes) to keep free per idle g.com/x",
            Some(1),
        ),
        (
            "sra:\n  policy: retention\n  resources: g.com/x\nsra.policy: retention\n",
            "sra.policy",
            "is given twice (first on line 2)",
            Some(4),
        ),
    ];
    assert_refused(cases);
}

/// Each `(file, key, words of the rule, line)` is refused with that key, rule and line.
fn assert_refused(cases: &[(&str, &str, &str, Option<u64>)]) {
    for (text, key, rule, line) in cases {
        let err = match parse_profile(text) {
            Err(err) => err,
            Ok(profile) => panic!("{text:?} loaded: {profile:?}"),
        };
        assert_eq!(err.key, *key, "{text:?}: {err}");
        assert!(err.rule.contains(rule), "{text:?}: {err}");
        assert_eq!(err.location.map(|l| l.0), *line, "{text:?}: {err}");
        let shown = err.to_string();
        if !key.is_empty() {
            assert!(shown.starts_with(&format!("{key}: ")), "{shown}");
        }
    }
}

#[test]
fn duplicate_keys_are_rejected_by_the_parser() {
    let err = parse_profile("hybridWeight: 1\nhybridWeight: 2\n").unwrap_err();
    assert!(err.rule.to_lowercase().contains("duplicate"), "{err}");
    assert_eq!(err.location.map(|l| l.0), Some(2));
}

// ---------------------------------------------------------------------------------------------
// The placement-quality keys: bestFit, fragmentation, capacity, balance, cpuFragmentation,
// packing, pick, topKFraction.

#[test]
fn placement_quality_keys_load() {
    use berth_core::pipeline::profile::{Measure, Shapes};
    use berth_core::pipeline::scorers::fragmentation::Shape;
    let profile = load(
        "\
bestFit:
  weight: 2
  resources: {cpu: 1, GPU: 3}
fragmentation:
  weight: 30
  shapes:
    - {cpu: 8, gpu: 0.5, weight: 30}
    - {cpu: 4, gpu: 2, accelerators: V100M32|V100M16|V100M32}
    - {cpu: 2}
capacity: {}
pick: best
",
    );
    let shapes = vec![
        Shape { cpu: q("8"), gpu: q("0.5"), accelerators: Vec::new(), weight: 30 },
        Shape {
            cpu: q("4"),
            gpu: q("2"),
            accelerators: vec!["V100M16".to_string(), "V100M32".to_string()],
            weight: 1,
        },
        Shape { cpu: q("2"), gpu: Quantity::ZERO, accelerators: Vec::new(), weight: 1 },
    ];
    assert_eq!(
        profile,
        Profile {
            scorers: vec![
                ScorerSpec::BestFit { weight: 2, resources: rules(&[("CPU", 1), ("GPU", 3)]) },
                ScorerSpec::Fragmentation {
                    weight: 30,
                    shapes: Shapes::Given(shapes),
                    measure: Measure::Fragment,
                },
                ScorerSpec::Fragmentation {
                    weight: 1,
                    shapes: Shapes::Observed,
                    measure: Measure::LostCapacity,
                },
            ],
            filters: Vec::new(),
            preferences: Vec::new(),
            pick: Pick::Best,
        }
    );
    // Flat keys, defaults: bestFit counts CPU and GPU alike; shapes are observed.
    let flat = load("bestFit.weight: 1\nfragmentation.shapes: observed\ntopKFraction: 0.05\n");
    assert_eq!(
        flat.scorers,
        [
            ScorerSpec::BestFit { weight: 1, resources: rules(&[("CPU", 1), ("GPU", 1)]) },
            ScorerSpec::Fragmentation {
                weight: 1,
                shapes: Shapes::Observed,
                measure: Measure::Fragment,
            },
        ]
    );
    assert_eq!(flat.pick, Pick::TopKFraction(q("0.05")));
    assert_eq!(load("hybridWeight: 1\npick: top-k\n").pick, Pick::TopK);
    // Shapes learned from the requests ranked, as the default profile's on GPU clusters.
    assert_eq!(
        load("capacity.shapes: learned\n").scorers,
        [ScorerSpec::Fragmentation {
            weight: 1,
            shapes: Shapes::Learned,
            measure: Measure::LostCapacity,
        }]
    );
    // Balance, nested with a weight and learned shapes, as the default profile's.
    assert_eq!(
        load("balance:\n  weight: 50\n  shapes: learned\n").scorers,
        [ScorerSpec::Fragmentation {
            weight: 50,
            shapes: Shapes::Learned,
            measure: Measure::Balance,
        }]
    );
    // The CPU fragment, as the default profile's for GPU work while the CPU runs short.
    assert_eq!(
        load("cpuFragmentation:\n  weight: 100\n  shapes: learned\n").scorers,
        [ScorerSpec::Fragmentation {
            weight: 100,
            shapes: Shapes::Learned,
            measure: Measure::CpuFragment,
        }]
    );
    // Share packing, on with its section alone (weight 1) or with a weight.
    assert_eq!(load("packing: {}\n").scorers, [ScorerSpec::Packing { weight: 1 }]);
    assert_eq!(load("packing:\n  weight: 30\n").scorers, [ScorerSpec::Packing { weight: 30 }]);
    // Keeping hosts for the largest shapes: a preference, on its own or beside scorers.
    let keep = load("keepLargeHosts: true\n");
    assert_eq!(
        (keep.scorers.len(), keep.preferences.as_slice()),
        (0, &[PreferenceSpec::LargeHosts][..])
    );
    assert!(load("packing: {}\nkeepLargeHosts: false\n").preferences.is_empty());
    // The example profiles load.
    for text in [
        include_str!("../../../../../examples/profile-best-fit.yaml"),
        include_str!("../../../../../examples/profile-most-allocated-gpu.yaml"),
        include_str!("../../../../../examples/profile-fragmentation.yaml"),
    ] {
        assert_eq!(load(text).pick, Pick::Best, "{text}");
    }
}

#[test]
fn invalid_placement_quality_keys_name_the_key_and_the_rule() {
    // (file, key, words of the rule, line)
    let cases: &[(&str, &str, &str, Option<u64>)] = &[
        ("bestFit: 1\n", "bestFit", "expected a map", Some(1)),
        ("bestFit: {wieght: 1}\n", "bestFit.wieght", "bestFit takes weight and resources", Some(1)),
        ("bestFit: {resources: {CPU: 0}}\n", "bestFit.resources", "add up to 0", Some(1)),
        ("bestFit: {resources: {}}\n", "bestFit.resources", "lists no resource", Some(1)),
        (
            "bestFit: {resources: [CPU]}\n",
            "bestFit.resources",
            "expected a map of resource name",
            Some(1),
        ),
        (
            "bestFit: {resources: {cpu: 1, CPU: 2}}\n",
            "bestFit.resources.CPU",
            "names CPU a second time",
            Some(1),
        ),
        (
            "bestFit: {resources: {\"g/*\": 1}}\n",
            "bestFit.resources.g/*",
            "wildcards are allowed only under resources",
            Some(1),
        ),
        (
            "fragmentation: {shapes: all}\n",
            "fragmentation.shapes",
            "expected `observed`, `learned` or a list of shapes",
            Some(1),
        ),
        ("fragmentation: {shapes: []}\n", "fragmentation.shapes", "lists no shape", Some(1)),
        (
            "fragmentation:\n  shapes:\n    - {gpu: 1.5}\n",
            "fragmentation.shapes[0].gpu",
            "a share of one GPU (below 1) or a whole number",
            Some(3),
        ),
        (
            "fragmentation:\n  shapes:\n    - {cpu: -1}\n",
            "fragmentation.shapes[0].cpu",
            "",
            Some(3),
        ),
        (
            "fragmentation:\n  shapes:\n    - {gpus: 1}\n",
            "fragmentation.shapes[0].gpus",
            "a shape takes cpu, gpu, accelerators and weight",
            Some(3),
        ),
        (
            "fragmentation:\n  shapes:\n    - {gpu: 1, accelerators: \"A||B\"}\n",
            "fragmentation.shapes[0].accelerators",
            "empty accelerator type",
            Some(3),
        ),
        (
            "fragmentation:\n  shapes:\n    - {gpu: 1, accelerators: [\"a b\"]}\n",
            "fragmentation.shapes[0].accelerators",
            "\"a b\" is invalid",
            Some(3),
        ),
        (
            "fragmentation:\n  shapes:\n    - 3\n",
            "fragmentation.shapes[0]",
            "expected a shape such as",
            Some(3),
        ),
        (
            "capacity: {measure: fgd}\n",
            "capacity.measure",
            "capacity takes weight and shapes",
            Some(1),
        ),
        ("capacity.weight: -1\n", "capacity.weight", "is negative", Some(1)),
        ("balance: {mix: cpu}\n", "balance.mix", "balance takes weight and shapes", Some(1)),
        ("balance.weight: -2\n", "balance.weight", "is negative", Some(1)),
        ("balance: 5\n", "balance", "expected a map", Some(1)),
        (
            "cpuFragmentation: {cpu: 16}\n",
            "cpuFragmentation.cpu",
            "cpuFragmentation takes weight and shapes",
            Some(1),
        ),
        ("packing: {size: 1}\n", "packing.size", "packing takes weight", Some(1)),
        ("packing.weight: -3\n", "packing.weight", "is negative", Some(1)),
        ("packing: {}\nkeepLargeHosts: 2\n", "keepLargeHosts", "expected true or false", Some(2)),
        ("keepLargeHosts: false\n", "", "configures nothing", None),
        ("hybridWeight: 1\npick: first\n", "pick", "unknown pick \"first\"", Some(2)),
        ("hybridWeight: 1\ntopKFraction: 0\n", "topKFraction", "out of range", Some(2)),
        ("hybridWeight: 1\ntopKFraction: 1.5\n", "topKFraction", "out of range", Some(2)),
        (
            "hybridWeight: 1\npick: best\ntopKFraction: 0.5\n",
            "topKFraction",
            "pick is best",
            Some(3),
        ),
        ("pick: best\n", "", "configures nothing", None),
    ];
    assert_refused(cases);
}

// ---------------------------------------------------------------------------------------------
// Volcano's released form: `sra: {enable, resources, weight, resourceWeight}` and
// `proportional: {enable, resources, resourceProportion}`, with Volcano's defaults.

/// A Volcano scheduler configmap's `arguments:` for the plugin, both policies on.
const VOLCANO_RELEASED: &str = "\
resourceStrategyFitWeight: 10
resources:
  nvidia.com/gpu:
    type: MostAllocated
    weight: 2
  cpu:
    type: LeastAllocated
    weight: 1
sra:
  enable: true
  resources: nvidia.com/gpu
  weight: 10
  resourceWeight:
    nvidia.com/gpu: 1
proportional:
  enable: true
  resources: nvidia.com/gpu
  resourceProportion:
    nvidia.com/gpu.cpu: 4
    nvidia.com/gpu.memory: 8
";

/// The same settings in the design document's form.
const DESIGN_FORM: &str = "\
resourceStrategyFitWeight: 10
resources:
  nvidia.com/gpu: {type: MostAllocated, weight: 2}
  cpu: {type: LeastAllocated, weight: 1}
sra:
  policy: retention, proportional
  resources: nvidia.com/gpu
  retention: {weight: 10, nvidia.com/gpu: 1}
  proportional: {nvidia.com/gpu.cpu: 4, nvidia.com/gpu.memory: 8}
";

#[test]
fn volcano_released_form_reads_to_the_design_forms_profile() {
    let volcano = load(VOLCANO_RELEASED);
    assert_eq!(volcano, load(DESIGN_FORM));
    let gpu = Proportion { cpu: q("4"), memory_gb: q("8") };
    assert_eq!(
        volcano.filters,
        [FilterSpec::Proportional { primaries: rules(&[("nvidia.com/gpu", gpu)]) }]
    );
    assert_eq!(
        volcano.scorers[1],
        ScorerSpec::Retention { weight: 10, scarce: rules(&[("nvidia.com/gpu", 1)]) }
    );
}

#[test]
fn volcano_defaults_apply_in_volcanos_form() {
    let spread = |name: &str| (name.to_string(), strategy(LeastAllocated, 1));
    let default_fit = ScorerSpec::ResourceStrategyFit {
        weight: 10,
        resources: ResourceRules::new([spread("CPU"), spread("memory")]),
    };
    // No resources: Volcano's plugin still scores, CPU and memory spread, weight 10. A
    // negative resource weight is 1, an absent one 1.
    let profile = load(
        "sra:\n  enable: true\n  resources: a.com/x, a.com/y\n  weight: 3\n  \
         resourceWeight: {a.com/x: -2}\n",
    );
    assert_eq!(
        profile.scorers,
        [
            default_fit.clone(),
            ScorerSpec::Retention { weight: 3, scarce: rules(&[("a.com/x", 1), ("a.com/y", 1)]) },
        ]
    );
    // sra.weight absent is Volcano's 0: retention off; RSF still runs.
    let profile = load("sra: {enable: true, resources: a.com/x}\n");
    assert_eq!(profile.scorers, std::slice::from_ref(&default_fit));
    // enable: false leaves a policy off.
    let profile = load("sra: {enable: false, resources: a.com/x, weight: 5}\n");
    assert_eq!(profile.scorers, std::slice::from_ref(&default_fit));
    // resourceStrategyFitWeight 0 turns RSF off, negative is 10; resource weights ≤ 0 are 1.
    let profile =
        load("resourceStrategyFitWeight: 0\nsra: {enable: true, resources: a.com/x, weight: 2}\n");
    assert_eq!(
        profile.scorers,
        [ScorerSpec::Retention { weight: 2, scarce: rules(&[("a.com/x", 1)]) }]
    );
    let profile = load(
        "resourceStrategyFitWeight: -5\nresources:\n  cpu: {type: MostAllocated, weight: 0}\n  \
         memory: {type: LeastAllocated, weight: -3}\n",
    );
    assert_eq!(
        profile.scorers,
        [ScorerSpec::ResourceStrategyFit {
            weight: 10,
            resources: rules(&[
                ("CPU", strategy(MostAllocated, 1)),
                ("memory", strategy(LeastAllocated, 1))
            ]),
        }]
    );
    // Proportions: absent or negative are 1.
    let profile = load(
        "proportional:\n  enable: true\n  resources: a.com/x\n  resourceProportion: {a.com/x.cpu: -1}\n",
    );
    let one = Proportion { cpu: q("1"), memory_gb: q("1") };
    assert_eq!(
        profile.filters,
        [FilterSpec::Proportional { primaries: rules(&[("a.com/x", one)]) }]
    );
    assert_eq!(profile.scorers, [default_fit]);
    // A pasted Volcano wildcard without a slash.
    let profile = load("resources: {\"nvidia.*\": {type: MostAllocated}}\n");
    let [ScorerSpec::ResourceStrategyFit { resources, .. }] = profile.scorers.as_slice() else {
        panic!("{profile:?}")
    };
    assert!(resources.get("nvidia.com/gpu").is_some());
}

#[test]
fn volcanos_form_is_checked_and_not_mixed_with_the_design_form() {
    let cases: &[(&str, &str, &str, Option<u64>)] = &[
        (
            "sra:\n  policy: retention\n  resources: a.com/x\n  weight: 2\n",
            "sra.weight",
            "is Volcano's released form of the SRA settings, and sra.policy (line 2) the design document's",
            Some(4),
        ),
        (
            "sra.policy: proportional\nsra.resources: a.com/x\nsra.proportional.a.com/x.cpu: 1\n\
             sra.proportional.a.com/x.memory: 1\nproportional: {enable: true, resources: a.com/x}\n",
            "proportional.enable",
            "a profile uses one form",
            Some(5),
        ),
        ("sra: {resources: a.com/x, weight: 2}\n", "sra.enable", "is required with the other sra settings", Some(1)),
        ("proportional: {resources: a.com/x}\n", "proportional.enable", "is required", Some(1)),
        ("sra: {enable: yes, weight: 1}\n", "sra.enable", "expected true or false", Some(1)),
        ("sra: {enable: true, weight: 2}\n", "sra.resources", "is required with sra.enable: true", Some(1)),
        (
            "sra: {enable: true, resources: a.com/x, weight: 1, resourceWeight: {a.com/y: 2}}\n",
            "sra.resourceWeight",
            "a.com/y is not listed in sra.resources",
            Some(1),
        ),
        ("sra: {enable: true, resources: a.com/x, weight: 1.5}\n", "sra.weight", "expected a whole number, found 1.5", Some(1)),
        ("sra: {enable: true, resources: a.com/x, resourceWeight: [1]}\n", "sra.resourceWeight", "expected a map of resource name to weight", Some(1)),
        (
            "proportional:\n  enable: true\n  resources: a.com/x\n  resourceProportion: {a.com/y.cpu: 2}\n",
            "proportional.resourceProportion",
            "a.com/y is not listed in proportional.resources",
            Some(4),
        ),
        (
            "proportional:\n  enable: true\n  resources: a.com/x\n  resourceProportion: {a.com/x.gpu: 2}\n",
            "proportional.resourceProportion.a.com/x.gpu",
            "takes <resource>.cpu and <resource>.memory",
            Some(4),
        ),
        ("proportional: {enable: true, resources: a.com/x, ratio: 2}\n", "proportional.ratio", "unknown key", Some(1)),
        ("proportional: {enable: true}\n", "proportional.resources", "is required with proportional.enable: true", Some(1)),
        // What Volcano turns into LeastAllocated in silence is an error here.
        ("resources: {cpu: {type: Balanced}}\nsra: {enable: false}\n", "resources.cpu.type", "unknown strategy type \"Balanced\"", Some(1)),
    ];
    assert_refused(cases);
}
