//! The OpenAPI schemas of the placement types, written by hand as their serde forms are (maps
//! keyed by the user, a strategy that is a name or a map), and named by the placement types'
//! fields with `#[schema(value_type = …)]`.

use std::borrow::Cow;

use utoipa::openapi::schema::{
    AdditionalProperties, ArrayBuilder, ObjectBuilder, OneOfBuilder, Schema, SchemaType, Type,
};
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

fn string(description: &str) -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::String).description(Some(description))
}

fn names(description: &str, names: &[&str]) -> ObjectBuilder {
    string(description).enum_values(Some(names.iter().copied()))
}

/// A map whose keys the user chooses, each value `value`.
fn map_of(description: &str, value: impl Into<RefOr<Schema>>) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .description(Some(description))
        .additional_properties(Some(AdditionalProperties::RefOr(value.into())))
        .into()
}

/// The schema of a [`super::ResourceMap`].
pub(super) struct Resources;
/// The schema of an [`super::ExpressionMap`].
pub(super) struct Selector;
/// The schema of a [`super::GroupStrategyName`].
pub(super) struct GroupStrategy;
/// The schema of a [`super::StrategySpec`].
pub(super) struct SchedulingStrategy;

impl PartialSchema for Resources {
    fn schema() -> RefOr<Schema> {
        let amount = OneOfBuilder::new()
            .item(ObjectBuilder::new().schema_type(Type::Number).minimum(Some(0)))
            .item(string("A decimal with an optional suffix: \"0.5\", \"16Gi\", \"500m\""));
        map_of("Resource name to amount: {\"CPU\": 1, \"GPU\": 0.5, \"memory\": \"16Gi\"}", amount)
    }
}

impl ToSchema for Resources {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("Resources")
    }
}

impl PartialSchema for Selector {
    fn schema() -> RefOr<Schema> {
        map_of(
            "Label key to expression: \"a\", \"in(a,b)\", \"!in(a)\", \"exists()\", \"!exists()\"",
            string("An expression"),
        )
    }
}

impl ToSchema for Selector {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("Selector")
    }
}

impl PartialSchema for GroupStrategy {
    fn schema() -> RefOr<Schema> {
        names(
            "How bundles spread over nodes (any case)",
            &["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"],
        )
        .into()
    }
}

impl ToSchema for GroupStrategy {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("GroupStrategy")
    }
}

impl PartialSchema for SchedulingStrategy {
    fn schema() -> RefOr<Schema> {
        let boolean = || ObjectBuilder::new().schema_type(Type::Boolean);
        let expression = ObjectBuilder::new()
            .schema_type(Type::Object)
            .property("key", string("A label key of other actors"))
            .required("key")
            .property("operator", names("", &["IN", "NOT_IN", "EXISTS", "DOES_NOT_EXIST"]))
            .required("operator")
            .property("values", ArrayBuilder::new().items(string("A label value")))
            .property("soft", boolean())
            .property("topology_key", string("A node label key: the domain to share or avoid"));
        let map = ObjectBuilder::new()
            .schema_type(Type::Object)
            .description(Some("A strategy with its settings; `type` says which keys apply"))
            .property(
                "type",
                names(
                    "The strategy (any case)",
                    &[
                        "DEFAULT",
                        "SPREAD",
                        "RANDOM",
                        "NODE_AFFINITY",
                        "NODE_LABEL",
                        "ACTOR_AFFINITY",
                        "PLACEMENT_GROUP",
                    ],
                ),
            )
            .required("type")
            .property("node_id", string("NODE_AFFINITY: the node"))
            .property(
                "soft",
                OneOfBuilder::new()
                    .item(boolean().description(Some("NODE_AFFINITY: prefer, not require")))
                    .item(Selector::schema()),
            )
            .property("spill_on_unavailable", boolean())
            .property("fail_on_unavailable", boolean())
            .property("hard", Selector::schema())
            .property("expressions", ArrayBuilder::new().items(expression))
            .property(
                "match",
                names("ACTOR_AFFINITY: how hard expressions combine", &["all", "any"]),
            )
            .property("on_peer_moved", names("ACTOR_AFFINITY", &["stay", "follow"]))
            .property("group", string("PLACEMENT_GROUP: the group's ID"))
            .property(
                "bundle",
                ObjectBuilder::new().schema_type(SchemaType::new(Type::Integer)).minimum(Some(0)),
            );
        OneOfBuilder::new()
            .item(names("A strategy without settings (any case)", &["DEFAULT", "SPREAD", "RANDOM"]))
            .item(map)
            .into()
    }
}

impl ToSchema for SchedulingStrategy {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("SchedulingStrategy")
    }
}
