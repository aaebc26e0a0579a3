//! The create bodies as they are read: every key at the top, unknown keys refused, each
//! placement field typed as it is in [`PlacementSpec`] (read once, with every rule a value can
//! check alone), then moved into the body's `placement`.

use serde::Deserialize;

use super::{default_retries, Lifetime, Ownership, StringMap, ThinStr};
use crate::spec::{
    ExpressionMap, FallbackEntry, GroupFallback, GroupStrategyName, Located, PlacementGroupSpec,
    PlacementSpec, ResourceMap, SelectorList, StrategySpec,
};

/// The placement keys of an actor or task body.
type Strategy = Option<Box<Located<StrategySpec>>>;
type Selector = Option<Box<Located<ExpressionMap>>>;

/// `POST /api/v1/actors`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ActorCreate {
    #[serde(default)]
    idempotency_key: Option<ThinStr>,
    #[serde(default)]
    job_id: Option<ThinStr>,
    #[serde(default)]
    owner_id: Option<ThinStr>,
    #[serde(default)]
    lifetime: Lifetime,
    #[serde(default)]
    name: Option<ThinStr>,
    #[serde(default)]
    namespace: Option<ThinStr>,
    #[serde(default)]
    labels: StringMap,
    command: ThinStr,
    #[serde(default)]
    args: Box<[String]>,
    #[serde(default)]
    env: StringMap,
    #[serde(default)]
    fork_server: bool,
    #[serde(default)]
    max_restarts: i32,
    resources: Located<ResourceMap>,
    #[serde(default)]
    scheduling_strategy: Strategy,
    #[serde(default)]
    label_selector: Selector,
    // `null` is no fallback, as for the other optional keys.
    #[serde(default)]
    fallback_strategy: Option<Vec<FallbackEntry>>,
    #[serde(default)]
    tolerations: Selector,
}

impl From<ActorCreate> for super::ActorCreate {
    fn from(b: ActorCreate) -> super::ActorCreate {
        super::ActorCreate {
            idempotency_key: b.idempotency_key,
            ownership: Ownership { job_id: b.job_id, owner_id: b.owner_id, lifetime: b.lifetime },
            name: b.name,
            namespace: b.namespace,
            labels: b.labels,
            command: b.command,
            args: b.args,
            env: b.env,
            fork_server: b.fork_server,
            max_restarts: b.max_restarts,
            placement: PlacementSpec {
                resources: b.resources,
                scheduling_strategy: b.scheduling_strategy,
                label_selector: b.label_selector,
                fallback_strategy: b.fallback_strategy.unwrap_or_default(),
                tolerations: b.tolerations,
            },
        }
    }
}

/// `POST /api/v1/tasks`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TaskSubmit {
    #[serde(default)]
    idempotency_key: Option<ThinStr>,
    #[serde(default)]
    job_id: Option<ThinStr>,
    #[serde(default)]
    owner_id: Option<ThinStr>,
    #[serde(default)]
    lifetime: Lifetime,
    #[serde(default)]
    name: Option<ThinStr>,
    #[serde(default)]
    namespace: Option<ThinStr>,
    command: ThinStr,
    #[serde(default)]
    args: Box<[String]>,
    #[serde(default)]
    env: StringMap,
    #[serde(default)]
    fork_server: bool,
    #[serde(default = "default_retries")]
    max_retries: u32,
    resources: Located<ResourceMap>,
    #[serde(default)]
    scheduling_strategy: Strategy,
    #[serde(default)]
    label_selector: Selector,
    #[serde(default)]
    fallback_strategy: Option<Vec<FallbackEntry>>,
    #[serde(default)]
    tolerations: Selector,
}

impl From<TaskSubmit> for super::TaskSubmit {
    fn from(b: TaskSubmit) -> super::TaskSubmit {
        super::TaskSubmit {
            idempotency_key: b.idempotency_key,
            ownership: Ownership { job_id: b.job_id, owner_id: b.owner_id, lifetime: b.lifetime },
            name: b.name,
            namespace: b.namespace,
            command: b.command,
            args: b.args,
            env: b.env,
            fork_server: b.fork_server,
            max_retries: b.max_retries,
            placement: PlacementSpec {
                resources: b.resources,
                scheduling_strategy: b.scheduling_strategy,
                label_selector: b.label_selector,
                fallback_strategy: b.fallback_strategy.unwrap_or_default(),
                tolerations: b.tolerations,
            },
        }
    }
}

/// `POST /api/v1/placement_groups`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct GroupCreate {
    #[serde(default)]
    idempotency_key: Option<ThinStr>,
    #[serde(default)]
    job_id: Option<ThinStr>,
    #[serde(default)]
    owner_id: Option<ThinStr>,
    #[serde(default)]
    lifetime: Lifetime,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    strategy: Option<GroupStrategyName>,
    bundles: Located<Vec<Located<ResourceMap>>>,
    #[serde(default)]
    bundle_label_selector: Option<SelectorList>,
    #[serde(default)]
    tolerations: Option<Located<ExpressionMap>>,
    #[serde(default)]
    fallback_strategy: Option<Vec<Located<GroupFallback>>>,
}

impl From<GroupCreate> for super::GroupCreate {
    fn from(b: GroupCreate) -> super::GroupCreate {
        super::GroupCreate {
            idempotency_key: b.idempotency_key,
            ownership: Ownership { job_id: b.job_id, owner_id: b.owner_id, lifetime: b.lifetime },
            name: b.name,
            namespace: b.namespace,
            placement: PlacementGroupSpec {
                strategy: b.strategy,
                bundles: b.bundles,
                bundle_label_selector: b.bundle_label_selector,
                tolerations: b.tolerations,
                fallback_strategy: b.fallback_strategy.unwrap_or_default(),
            },
        }
    }
}
