//! The keys of the placement-quality scorers, `bestFit`, `fragmentation`, `capacity`,
//! `balance`, `cpuFragmentation` and `packing`, of the preference `keepLargeHosts`, and of how
//! the best-ranked nodes are picked, `pick` and `topKFraction`. The format is in
//! `docs/file-formats.md`; the rules of reading are the module's (dotted keys, no defaults for
//! invalid values, errors that name the key).

use super::{
    boolean, error, leaf_error, ratio, resource_name, value_error, weight, weight_value, Leaf,
    ProfileError, Value,
};
use berth_core::labels::{validate_value, ACCELERATOR_TYPE};
use berth_core::pipeline::profile::{Measure, Pick, PreferenceSpec, Profile, ScorerSpec, Shapes};
use berth_core::pipeline::scorers::fragmentation::Shape;
use berth_core::pipeline::scorers::ResourceRules;
use berth_core::Quantity;

/// The best-fit scorer's section.
pub(super) const BEST_FIT: &str = "bestFit";
/// The fragmentation scorer's section.
pub(super) const FRAGMENTATION: &str = "fragmentation";
/// The capacity scorer's section.
pub(super) const CAPACITY: &str = "capacity";
/// The balance scorer's section.
pub(super) const BALANCE: &str = "balance";
/// The CPU-fragment scorer's section.
pub(super) const CPU_FRAGMENTATION: &str = "cpuFragmentation";
/// The share packing scorer's section.
pub(super) const PACKING: &str = "packing";
/// Sections that turn their scorer on even when empty.
pub(super) const SCORER_SECTIONS: [&str; 6] =
    [BEST_FIT, FRAGMENTATION, CAPACITY, BALANCE, CPU_FRAGMENTATION, PACKING];

/// What `bestFit.resources` is when not given: CPU and GPU, alike (the FGD paper's baseline).
const BEST_FIT_DEFAULT: [(&str, u32); 2] = [("CPU", 1), ("GPU", 1)];

/// The settings this module reads.
#[derive(Default)]
struct MeasureSettings<'a> {
    /// The first setting: the scorer is on.
    on: Option<&'a Leaf<'a>>,
    weight: Option<u32>,
    shapes: Option<Shapes>,
}

/// The sections of the measures, in the order of [`MoreSettings::measures`].
const MEASURES: [(&str, Measure); 4] = [
    (FRAGMENTATION, Measure::Fragment),
    (CAPACITY, Measure::LostCapacity),
    (BALANCE, Measure::Balance),
    (CPU_FRAGMENTATION, Measure::CpuFragment),
];

#[derive(Default)]
pub(super) struct MoreSettings<'a> {
    /// The first `bestFit` setting: the scorer is on.
    best_fit: Option<&'a Leaf<'a>>,
    best_fit_weight: Option<u32>,
    best_fit_resources: Option<(Vec<(String, u32)>, &'a Leaf<'a>)>,
    /// `fragmentation`, `capacity`, `balance` and `cpuFragmentation`, in that order.
    measures: [MeasureSettings<'a>; 4],
    /// The first `packing` setting: the scorer is on.
    packing: Option<&'a Leaf<'a>>,
    packing_weight: Option<u32>,
    /// `keepLargeHosts: true` or `false`.
    keep_large_hosts: Option<bool>,
    /// `pick: best` (true) or `pick: top-k` (false).
    pick_best: Option<(bool, &'a Leaf<'a>)>,
    top_k_fraction: Option<(Quantity, &'a Leaf<'a>)>,
}

impl<'a> MoreSettings<'a> {
    /// Reads `leaf` when it is one of this module's keys (and says so), or leaves it.
    pub(super) fn read(&mut self, leaf: &'a Leaf<'a>) -> Result<bool, ProfileError> {
        match leaf.key.as_str() {
            BEST_FIT => {
                self.best_fit.get_or_insert(leaf);
            }
            "bestFit.weight" => {
                self.best_fit.get_or_insert(leaf);
                self.best_fit_weight = Some(weight(leaf)?);
            }
            "bestFit.resources" => {
                self.best_fit.get_or_insert(leaf);
                self.best_fit_resources = Some((best_fit_resources(leaf)?, leaf));
            }
            FRAGMENTATION | CAPACITY | BALANCE | CPU_FRAGMENTATION => {
                self.measure(&leaf.key).on.get_or_insert(leaf);
            }
            key if key.ends_with(".weight") && self.is_measure(key) => {
                let section = self.measure(key);
                section.on.get_or_insert(leaf);
                section.weight = Some(weight(leaf)?);
            }
            key if key.ends_with(".shapes") && self.is_measure(key) => {
                let shapes = shapes(leaf)?;
                let section = self.measure(key);
                section.on.get_or_insert(leaf);
                section.shapes = Some(shapes);
            }
            PACKING => {
                self.packing.get_or_insert(leaf);
            }
            "packing.weight" => {
                self.packing.get_or_insert(leaf);
                self.packing_weight = Some(weight(leaf)?);
            }
            key if key.starts_with("packing.") => {
                return Err(leaf_error(leaf, "unknown key; packing takes weight"));
            }
            "keepLargeHosts" => self.keep_large_hosts = Some(boolean(leaf)?),
            "pick" => self.pick_best = Some((pick_best(leaf)?, leaf)),
            "topKFraction" => self.top_k_fraction = Some((fraction(leaf)?, leaf)),
            key if key.starts_with("bestFit.") => {
                return Err(leaf_error(leaf, "unknown key; bestFit takes weight and resources"));
            }
            key if self.is_measure(key) => {
                let section = key.split('.').next().unwrap_or(key);
                return Err(leaf_error(
                    leaf,
                    format!("unknown key; {section} takes weight and shapes"),
                ));
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// True when `key` is in the section of a measure (`fragmentation.…`, `capacity.…`,
    /// `balance.…`, `cpuFragmentation.…`).
    fn is_measure(&self, key: &str) -> bool {
        MEASURES
            .iter()
            .any(|(section, _)| key.strip_prefix(section).is_some_and(|rest| rest.starts_with('.')))
    }

    /// The settings of the measure whose section `key` is or is in.
    fn measure(&mut self, key: &str) -> &mut MeasureSettings<'a> {
        let section = key.split('.').next().unwrap_or(key);
        let i = MEASURES.iter().position(|(s, _)| *s == section).unwrap_or(0);
        &mut self.measures[i]
    }

    /// Adds the scorers that are on (after the others, in this order) and sets the pick.
    pub(super) fn apply(&self, profile: &mut Profile) -> Result<(), ProfileError> {
        if self.best_fit.is_some() {
            let resources = match &self.best_fit_resources {
                Some((resources, leaf)) => {
                    if resources.iter().all(|(_, w)| *w == 0) {
                        return Err(value_error(
                            leaf,
                            "the weights add up to 0, so every node would score alike; give at \
                             least one resource a weight above 0",
                        ));
                    }
                    resources.clone()
                }
                None => BEST_FIT_DEFAULT.iter().map(|(n, w)| (n.to_string(), *w)).collect(),
            };
            profile.scorers.push(ScorerSpec::BestFit {
                weight: self.best_fit_weight.unwrap_or(1),
                resources: ResourceRules::new(resources),
            });
        }
        for (settings, (_, measure)) in self.measures.iter().zip(MEASURES) {
            if settings.on.is_some() {
                profile.scorers.push(ScorerSpec::Fragmentation {
                    weight: settings.weight.unwrap_or(1),
                    shapes: settings.shapes.clone().unwrap_or(Shapes::Observed),
                    measure,
                });
            }
        }
        if self.packing.is_some() {
            profile.scorers.push(ScorerSpec::Packing { weight: self.packing_weight.unwrap_or(1) });
        }
        if self.keep_large_hosts == Some(true) {
            profile.preferences.push(PreferenceSpec::LargeHosts);
        }
        profile.pick = match (self.pick_best, self.top_k_fraction) {
            (Some((true, _)), Some((_, leaf))) => {
                return Err(leaf_error(
                    leaf,
                    "is set but pick is best; a fraction applies only to pick: top-k",
                ));
            }
            (_, Some((fraction, _))) => Pick::TopKFraction(fraction),
            (Some((true, _)), None) => Pick::Best,
            _ => Pick::TopK,
        };
        Ok(())
    }
}

/// `bestFit.resources`: a map of resource name (exact) to weight.
fn best_fit_resources(leaf: &Leaf<'_>) -> Result<Vec<(String, u32)>, ProfileError> {
    let Value::Map(entries) = &leaf.value.value else {
        return Err(value_error(
            leaf,
            format!(
                "expected a map of resource name to weight, such as {{cpu: 1, GPU: 1}}, found {}",
                leaf.value.value.describe()
            ),
        ));
    };
    if entries.is_empty() {
        return Err(value_error(leaf, "lists no resource; list at least one, or leave it out"));
    }
    let mut out: Vec<(String, u32)> = Vec::new();
    for (key, value) in entries {
        let written = key.value.0.trim();
        let entry = Leaf { key: format!("{}.{written}", leaf.key), at: key.referenced, value };
        let name = resource_name(written, false).map_err(|rule| leaf_error(&entry, rule))?;
        if out.iter().any(|(n, _)| *n == name) {
            return Err(leaf_error(&entry, format!("names {name} a second time")));
        }
        out.push((name, weight(&entry)?));
    }
    Ok(out)
}

/// `fragmentation.shapes`: `observed`, `learned`, or a list of `{cpu, gpu, accelerators,
/// weight}`.
fn shapes(leaf: &Leaf<'_>) -> Result<Shapes, ProfileError> {
    const HELP: &str = "expected `observed`, `learned` or a list of shapes such as \
                        [{cpu: 8, gpu: 0.5, weight: 30}]";
    let items = match &leaf.value.value {
        Value::Str(text) if text.trim().eq_ignore_ascii_case("observed") => {
            return Ok(Shapes::Observed)
        }
        Value::Str(text) if text.trim().eq_ignore_ascii_case("learned") => {
            return Ok(Shapes::Learned)
        }
        Value::Seq(items) if !items.is_empty() => items,
        Value::Seq(_) => {
            return Err(value_error(leaf, "lists no shape; list at least one, or say observed"))
        }
        other => return Err(value_error(leaf, format!("{HELP}, found {}", other.describe()))),
    };
    let mut shapes = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let entry = Leaf { key: format!("{}[{i}]", leaf.key), at: item.referenced, value: item };
        shapes.push(shape(&entry)?);
    }
    Ok(Shapes::Given(shapes))
}

/// One shape: `cpu` and `gpu` amounts (default 0), `accelerators` (default any), `weight`
/// (default 1).
fn shape(entry: &Leaf<'_>) -> Result<Shape, ProfileError> {
    let Value::Map(fields) = &entry.value.value else {
        return Err(value_error(
            entry,
            format!(
                "expected a shape such as {{cpu: 8, gpu: 0.5, weight: 30}}, found {}",
                entry.value.value.describe()
            ),
        ));
    };
    let mut shape =
        Shape { cpu: Quantity::ZERO, gpu: Quantity::ZERO, accelerators: Vec::new(), weight: 1 };
    for (key, value) in fields {
        let name = key.value.0.trim();
        let field = Leaf { key: format!("{}.{name}", entry.key), at: key.referenced, value };
        match name {
            "cpu" | "CPU" => shape.cpu = ratio(&field)?,
            "gpu" | "GPU" => {
                let gpu = ratio(&field)?;
                if gpu > Quantity::ONE && !gpu.is_whole() {
                    return Err(value_error(
                        &field,
                        format!(
                            "{gpu} is not allowed: a shape asks for a share of one GPU (below 1) \
                             or a whole number of GPUs"
                        ),
                    ));
                }
                shape.gpu = gpu;
            }
            "accelerators" => shape.accelerators = accelerators(&field)?,
            "weight" => {
                shape.weight = weight_value(&value.value).map_err(|r| value_error(&field, r))?
            }
            _ => {
                return Err(leaf_error(
                    &field,
                    "unknown key; a shape takes cpu, gpu, accelerators and weight",
                ))
            }
        }
    }
    Ok(shape)
}

/// Accelerator types: a list, or a text with `|` or `,` between names; sorted, unique.
fn accelerators(leaf: &Leaf<'_>) -> Result<Vec<String>, ProfileError> {
    let names: Vec<String> = match &leaf.value.value {
        Value::Str(text) => text.split(['|', ',']).map(|n| n.trim().to_string()).collect(),
        Value::Seq(items) => items
            .iter()
            .map(|item| match &item.value {
                Value::Str(text) => Ok(text.trim().to_string()),
                other => Err(error(
                    leaf.key.clone(),
                    format!("expected an accelerator type, found {}", other.describe()),
                    Some(item.referenced),
                )),
            })
            .collect::<Result<_, _>>()?,
        other => {
            return Err(value_error(
                leaf,
                format!(
                    "expected accelerator types, as a list or a text such as V100M16|V100M32, \
                     found {}",
                    other.describe()
                ),
            ))
        }
    };
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        if name.is_empty() {
            return Err(value_error(leaf, "has an empty accelerator type (a stray separator?)"));
        }
        validate_value(ACCELERATOR_TYPE, &name)
            .map_err(|err| value_error(leaf, err.to_string()))?;
        out.push(name);
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// `pick`: `best` (true) or `top-k` (false).
fn pick_best(leaf: &Leaf<'_>) -> Result<bool, ProfileError> {
    const HELP: &str = "use best (the best node, ties at random) or top-k (at random among the \
                        best k)";
    match &leaf.value.value {
        Value::Str(text) => match text.trim().to_ascii_lowercase().as_str() {
            "best" => Ok(true),
            "top-k" | "topk" | "top_k" => Ok(false),
            _ => Err(value_error(leaf, format!("unknown pick {text:?}; {HELP}"))),
        },
        other => {
            Err(value_error(leaf, format!("expected a pick, found {}; {HELP}", other.describe())))
        }
    }
}

/// `topKFraction`: above 0, at most 1.
fn fraction(leaf: &Leaf<'_>) -> Result<Quantity, ProfileError> {
    let fraction = ratio(leaf)?;
    if fraction.is_zero() || fraction > Quantity::ONE {
        return Err(value_error(
            leaf,
            format!("{fraction} is out of range; use a fraction above 0, at most 1"),
        ));
    }
    Ok(fraction)
}
