//! Flag values turned into the JSON of REST bodies, and body files read from disk.
//!
//! Maps are read in two forms, told apart by a leading `{`: `k1=v1,k2=v2` and an inline JSON
//! (or YAML flow) object. In the first form, commas inside parentheses do not separate items,
//! so selectors and tolerations keep their `in(a,b)`; and, for expressions, an item without
//! `=` continues the expression before it (`zone=exists(),!in(a,b)` is one key). Lists of
//! bundles are inline JSON (`[{"GPU":1},{"GPU":1}]`) or maps separated by `;`
//! (`GPU=1;GPU=1`).
//!
//! Nothing here checks resource names, amounts, label syntax or expressions: the head does,
//! with the same code as `berth explain`, and answers 400 with the field. What is checked here
//! is the shape a flag must have to become a body at all; breaking it is [`BadInput`].

use std::path::{Path, PathBuf};

use berth_api::rest::StringMap;
use berth_api::spec::{FileKind, InputError, Invalid};
use clap::Args;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use serde_saphyr::{MessageFormatter, NonFiniteFloatPolicy};

use super::BadInput;

/// The flags shared by `actor create` and `task submit`: the process and its placement.
#[derive(Clone, Debug, Default, Args)]
pub struct ProcessArgs {
    /// The program to run (required, here or as `command` in --file).
    #[arg(long, value_name = "CMD", allow_hyphen_values = true)]
    pub command: Option<String>,

    /// An argument of the program; repeat for more, in order (`--arg --port --arg 80`).
    #[arg(long = "arg", value_name = "ARG", allow_hyphen_values = true)]
    pub args: Vec<String>,

    /// An environment variable of the process, K=V (V may hold `=` and `,`); repeat for
    /// more.
    #[arg(long = "env", value_name = "K=V")]
    pub env: Vec<String>,

    /// What to reserve: `CPU=1,GPU=0.5,memory=4Gi`, or a JSON object (`{"CPU": 1}`).
    ///
    /// Without it (and without `resources` in --file), nothing is reserved.
    #[arg(long, value_name = "RESOURCES")]
    pub resources: Option<String>,

    /// A name for people.
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,

    /// The namespace (actor affinity looks for peers in it); default `default`.
    #[arg(long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,

    /// The scheduling strategy: DEFAULT, SPREAD, RANDOM, or a JSON object as in the request
    /// file, such as `{"type": "NODE_AFFINITY", "node_id": "gpu-2", "soft": true}`.
    #[arg(long, value_name = "STRATEGY", conflicts_with = "placement_group")]
    pub strategy: Option<String>,

    /// Place it into a placement group's reservation: `pg-7`, or `pg-7:1` for bundle 1.
    ///
    /// Short for `--strategy '{"type": "PLACEMENT_GROUP", "group": "pg-7", "bundle": 1}'`.
    #[arg(long, value_name = "PG[:BUNDLE]")]
    pub placement_group: Option<String>,

    /// Only nodes whose labels satisfy this: `key=expression,...` or a JSON object
    /// (`zone=in(us-west1-a,us-west1-b),gpu=!exists()`).
    #[arg(long, value_name = "SELECTOR", allow_hyphen_values = true)]
    pub label_selector: Option<String>,

    /// An alternative selector, tried in order when --label-selector finds no node that can
    /// take it now; repeat for more. `{}` (or an empty string) means any node.
    #[arg(long = "fallback", value_name = "SELECTOR", allow_hyphen_values = true)]
    pub fallback: Vec<String>,

    /// The taints it accepts: `key=expression,...` or a JSON object
    /// (`gpu_node=exists()`, `{"gpu_type": "in(A100)"}`).
    #[arg(long, value_name = "TOLERATIONS", allow_hyphen_values = true)]
    pub tolerations: Option<String>,

    /// A YAML or JSON file holding the whole body (the REST API's ActorCreate or TaskSubmit).
    ///
    /// Flags given as well replace the file's keys whole.
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,
}

impl ProcessArgs {
    /// The body keys these flags give: each flag given sets its key.
    pub fn keys(&self) -> Result<Map<String, Value>, BadInput> {
        let mut keys = Map::new();
        if let Some(command) = &self.command {
            keys.insert("command".into(), command.clone().into());
        }
        if !self.args.is_empty() {
            keys.insert("args".into(), self.args.clone().into());
        }
        if !self.env.is_empty() {
            let mut env = Map::new();
            for item in &self.env {
                let (key, value) = env_var(item)?;
                if env.insert(key.clone(), value.into()).is_some() {
                    return Err(BadInput::new(format!("--env: {key} is given twice")));
                }
            }
            keys.insert("env".into(), Value::Object(env));
        }
        if let Some(text) = &self.resources {
            keys.insert("resources".into(), resources(text)?);
        }
        for (key, value) in [("name", &self.name), ("namespace", &self.namespace)] {
            if let Some(value) = value {
                keys.insert(key.into(), value.clone().into());
            }
        }
        if let Some(text) = &self.strategy {
            keys.insert("scheduling_strategy".into(), strategy(text)?);
        }
        if let Some(text) = &self.placement_group {
            keys.insert("scheduling_strategy".into(), placement_group(text)?);
        }
        if let Some(text) = &self.label_selector {
            keys.insert("label_selector".into(), map_value(expressions(text, "--label-selector")?));
        }
        if !self.fallback.is_empty() {
            let alternatives = self
                .fallback
                .iter()
                .map(|text| {
                    let selector = map_value(expressions(text, "--fallback")?);
                    let mut alternative = Map::new();
                    alternative.insert("label_selector".into(), selector);
                    Ok(Value::Object(alternative))
                })
                .collect::<Result<Vec<_>, BadInput>>()?;
            keys.insert("fallback_strategy".into(), Value::Array(alternatives));
        }
        if let Some(text) = &self.tolerations {
            keys.insert("tolerations".into(), map_value(expressions(text, "--tolerations")?));
        }
        Ok(keys)
    }
}

/// The body of a create call: `file`'s keys (when given) with `keys` over them, as `T`.
/// `required` names the keys the body must have, with the flag that gives each; `defaults`
/// fills keys neither gave.
pub fn body<T: DeserializeOwned>(
    file: Option<&Path>,
    keys: Map<String, Value>,
    required: &[(&str, &str)],
    defaults: &[(&str, Value)],
) -> anyhow::Result<T> {
    let mut map = match file {
        Some(path) => document(path)?,
        None => Map::new(),
    };
    map.extend(keys);
    for (key, flag) in required {
        if !map.contains_key(*key) {
            let message = match file {
                Some(path) => format!("give {flag}, or `{key}` in {}", path.display()),
                None => format!("give {flag} (or `{key}` in a --file)"),
            };
            return Err(BadInput::new(message).into());
        }
    }
    for (key, value) in defaults {
        map.entry(key.to_string()).or_insert_with(|| value.clone());
    }
    serde_path_to_error::deserialize(Value::Object(map)).map_err(|err| {
        let field = err.path().to_string();
        let field = if field == "." { String::new() } else { field };
        let message = err.into_inner().to_string();
        match file {
            Some(path) => anyhow::Error::from(InputError::Invalid(Box::new(Invalid {
                kind: FileKind::Request,
                path: path.to_path_buf(),
                field,
                message,
                location: None,
                line_text: None,
            }))),
            None => BadInput::new(format!("{field}: {message}")).into(),
        }
    })
}

/// A YAML or JSON file holding one mapping, as a JSON object. Errors name the file, and the
/// line and column when the parser gives them.
pub fn document(path: &Path) -> Result<Map<String, Value>, InputError> {
    let text = std::fs::read_to_string(path).map_err(|source| InputError::Read {
        kind: FileKind::Request,
        path: path.to_path_buf(),
        source,
    })?;
    let invalid = |message: String, location: Option<(u64, u64)>| {
        let line_text = location.and_then(|(line, _)| {
            text.lines().nth(usize::try_from(line.checked_sub(1)?).ok()?).map(str::to_string)
        });
        InputError::Invalid(Box::new(Invalid {
            kind: FileKind::Request,
            path: path.to_path_buf(),
            field: String::new(),
            message,
            location,
            line_text,
        }))
    };
    if text.lines().all(|l| l.trim().is_empty() || l.trim_start().starts_with('#')) {
        return Err(invalid("the file is empty; expected a mapping".into(), None));
    }
    match parse_yaml(&text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => {
            Err(invalid("expected a mapping (key: value lines, or a JSON object)".into(), None))
        }
        Err(err) => {
            let location =
                err.location().filter(|l| l.line() > 0).map(|l| (l.line(), l.column().max(1)));
            Err(invalid(
                serde_saphyr::UserMessageFormatter.format_message(&err).into_owned(),
                location,
            ))
        }
    }
}

/// YAML (or JSON: it is YAML too) as a JSON value, read as the request files are: only
/// `true`/`false` are booleans, and `.nan`/`.inf` stay text for the head to reject.
pub fn parse_yaml(text: &str) -> Result<Value, serde_saphyr::Error> {
    let options = serde_saphyr::options! {
        strict_booleans: true,
        non_finite_float_policy: NonFiniteFloatPolicy::AsString,
    };
    serde_saphyr::from_str_with_options(text, options)
}

/// An inline JSON (or YAML flow) value given to `flag`.
fn inline(text: &str, flag: &str) -> Result<Value, BadInput> {
    parse_yaml(text).map_err(|err| {
        let message = serde_saphyr::UserMessageFormatter.format_message(&err).into_owned();
        BadInput::new(format!("{flag}: {text:?} is not valid JSON: {message}"))
    })
}

/// Splits `text` at the commas outside parentheses.
fn split_items(text: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                items.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&text[start..]);
    items
}

/// A string map from an inline JSON object: strings as they are, numbers and booleans as
/// their text (`{"gpu_node": true}` is `gpu_node=true`).
fn object_of_strings(text: &str, flag: &str) -> Result<StringMap, BadInput> {
    let Value::Object(map) = inline(text, flag)? else {
        return Err(BadInput::new(format!("{flag}: {text:?} is not a JSON object")));
    };
    map.into_iter()
        .map(|(key, value)| match value {
            Value::String(s) => Ok((key, s)),
            Value::Number(n) => Ok((key, n.to_string())),
            Value::Bool(b) => Ok((key, b.to_string())),
            other => Err(BadInput::new(format!(
                "{flag}: the value of {key:?} must be a string, not {other}"
            ))),
        })
        .collect()
}

/// `k1=v1,k2=v2`, or a JSON object of strings, as a map. Keys and values are trimmed; a key
/// given twice is an error.
pub fn pairs(text: &str, flag: &str) -> Result<StringMap, BadInput> {
    read_map(text, flag, false)
}

/// Like [`pairs`] for selectors and tolerations: commas inside parentheses stay, an item
/// without `=` continues the expression before it, and `key!=value` means `key=!value`.
pub fn expressions(text: &str, flag: &str) -> Result<StringMap, BadInput> {
    read_map(text, flag, true)
}

fn read_map(text: &str, flag: &str, expressions: bool) -> Result<StringMap, BadInput> {
    let trimmed = text.trim();
    if trimmed.starts_with('{') {
        return object_of_strings(trimmed, flag);
    }
    let mut map = StringMap::new();
    if trimmed.is_empty() {
        return Ok(map);
    }
    let mut last: Option<String> = None;
    for item in split_items(trimmed) {
        let item = item.trim();
        let Some((key, value)) = item.split_once('=') else {
            match (&last, expressions, item.is_empty()) {
                (Some(key), true, false) => {
                    let expression = map.get_mut(key).expect("the last key is in the map");
                    expression.push(',');
                    expression.push_str(item);
                    continue;
                }
                (_, _, true) => {
                    return Err(BadInput::new(format!(
                        "{flag}: an empty item in {text:?}; expected KEY=VALUE,KEY=VALUE"
                    )))
                }
                _ => {
                    return Err(BadInput::new(format!(
                        "{flag}: {item:?} is not KEY=VALUE (in {text:?})"
                    )))
                }
            }
        };
        let (mut key, mut value) = (key.trim().to_string(), value.trim().to_string());
        if expressions && key.ends_with('!') {
            key.pop();
            key = key.trim_end().to_string();
            value.insert(0, '!');
        }
        if key.is_empty() {
            return Err(BadInput::new(format!("{flag}: {item:?} has an empty key")));
        }
        if map.insert(key.clone(), value).is_some() {
            return Err(BadInput::new(format!("{flag}: {key:?} is given twice")));
        }
        last = Some(key);
    }
    Ok(map)
}

/// A string map as a JSON object.
pub fn map_value(map: StringMap) -> Value {
    Value::Object(map.into_iter().map(|(k, v)| (k, Value::String(v))).collect())
}

/// `--resources`: `CPU=1,GPU=0.5` (amounts as text: `{"CPU": "1", "GPU": "0.5"}`), or a JSON
/// object whose amounts are numbers or text.
pub fn resources(text: &str) -> Result<Value, BadInput> {
    resource_map(text, "--resources")
}

fn resource_map(text: &str, flag: &str) -> Result<Value, BadInput> {
    let trimmed = text.trim();
    if !trimmed.starts_with('{') {
        return Ok(map_value(pairs(trimmed, flag)?));
    }
    let value = inline(trimmed, flag)?;
    let Value::Object(map) = &value else {
        return Err(BadInput::new(format!("{flag}: {text:?} is not a JSON object")));
    };
    for (name, amount) in map {
        if !(amount.is_number() || amount.is_string()) {
            return Err(BadInput::new(format!(
                "{flag}: the amount of {name} must be a number or text, not {amount}"
            )));
        }
    }
    Ok(value)
}

/// `--env K=V`: split at the first `=`.
pub fn env_var(text: &str) -> Result<(String, String), BadInput> {
    match text.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => {
            Ok((key.trim().to_string(), value.to_string()))
        }
        _ => Err(BadInput::new(format!("--env: {text:?} is not K=V"))),
    }
}

/// `--strategy`: a name (DEFAULT, SPREAD, RANDOM; the head checks it) or a JSON object.
pub fn strategy(text: &str) -> Result<Value, BadInput> {
    let trimmed = text.trim();
    if trimmed.starts_with('{') {
        let value = inline(trimmed, "--strategy")?;
        return match value {
            Value::Object(_) => Ok(value),
            _ => Err(BadInput::new(format!("--strategy: {text:?} is not a JSON object"))),
        };
    }
    let word =
        !trimmed.is_empty() && trimmed.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !word {
        return Err(BadInput::new(format!(
            "--strategy: {text:?} is neither a strategy name (DEFAULT, SPREAD, RANDOM) nor a JSON \
             object"
        )));
    }
    Ok(Value::String(trimmed.to_string()))
}

/// `--placement-group pg-7[:1]`: the PLACEMENT_GROUP strategy.
pub fn placement_group(text: &str) -> Result<Value, BadInput> {
    let (group, bundle) = match text.trim().rsplit_once(':') {
        Some((group, index)) => {
            let index: u64 = index.parse().map_err(|_| {
                BadInput::new(format!(
                    "--placement-group: bundle {index:?} is not an index (0, 1, …)"
                ))
            })?;
            (group, Some(index))
        }
        None => (text.trim(), None),
    };
    if group.is_empty() {
        return Err(BadInput::new("--placement-group: the group ID is empty"));
    }
    let mut strategy = Map::new();
    strategy.insert("type".into(), "PLACEMENT_GROUP".into());
    strategy.insert("group".into(), group.into());
    if let Some(bundle) = bundle {
        strategy.insert("bundle".into(), bundle.into());
    }
    Ok(Value::Object(strategy))
}

/// `--bundles`: a JSON list of resource maps (`[{"GPU": 1}, {"GPU": 1}]`), or maps separated
/// by `;` (`GPU=1;GPU=1,CPU=4`).
pub fn bundles(text: &str) -> Result<Value, BadInput> {
    let trimmed = text.trim();
    if trimmed.starts_with('[') {
        let value = inline(trimmed, "--bundles")?;
        let Value::Array(items) = &value else {
            return Err(BadInput::new(format!("--bundles: {text:?} is not a JSON list")));
        };
        if let Some(i) = items.iter().position(|b| !b.is_object()) {
            return Err(BadInput::new(format!(
                "--bundles: bundle {i} is not a resource map ({})",
                items[i]
            )));
        }
        return Ok(value);
    }
    if trimmed.is_empty() {
        return Err(BadInput::new("--bundles: no bundle given"));
    }
    let items = trimmed
        .split(';')
        .map(|bundle| resource_map(bundle, "--bundles"))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Value::Array(items))
}

/// A JSON list of selectors, one per bundle (`--bundle-label-selector`).
pub fn selector_list(text: &str, flag: &str) -> Result<Value, BadInput> {
    let value = inline(text.trim(), flag)?;
    match &value {
        Value::Array(items) if items.iter().all(Value::is_object) => Ok(value),
        _ => Err(BadInput::new(format!(
            "{flag}: {text:?} is not a JSON list of selectors, one per bundle"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use berth_api::rest::{ActorCreate, TaskSubmit};
    use serde_json::json;

    use super::*;

    fn map(pairs: &[(&str, &str)]) -> StringMap {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn resources_both_forms() {
        assert_eq!(resources("CPU=1,GPU=0.5").unwrap(), json!({"CPU": "1", "GPU": "0.5"}));
        assert_eq!(
            resources(" CPU = 2 , memory=4Gi ").unwrap(),
            json!({"CPU": "2", "memory": "4Gi"})
        );
        assert_eq!(resources(r#"{"CPU": 1, "GPU": 0.5}"#).unwrap(), json!({"CPU": 1, "GPU": 0.5}));
        assert_eq!(resources(r#"{"memory": "16Gi"}"#).unwrap(), json!({"memory": "16Gi"}));
        assert_eq!(resources("{CPU: 1}").unwrap(), json!({"CPU": 1}));
        assert_eq!(resources("").unwrap(), json!({}));
        for (bad, why) in [
            ("CPU", "not KEY=VALUE"),
            ("CPU=1,,GPU=1", "empty item"),
            ("CPU=1,CPU=2", "given twice"),
            ("=1", "empty key"),
            ("{\"CPU\": [1]}", "number or text"),
            ("{\"CPU\": 1", "not valid JSON"),
        ] {
            let err = resources(bad).unwrap_err().0;
            assert!(err.starts_with("--resources: ") && err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn pairs_both_forms() {
        assert_eq!(
            pairs("app=web,tier=front", "--labels").unwrap(),
            map(&[("app", "web"), ("tier", "front")])
        );
        assert_eq!(pairs("empty=", "--labels").unwrap(), map(&[("empty", "")]));
        assert_eq!(
            pairs(r#"{"gpu_node": "true", "n": 3, "b": true}"#, "--append").unwrap(),
            map(&[("gpu_node", "true"), ("n", "3"), ("b", "true")])
        );
        assert!(pairs(r#"{"a": null}"#, "--labels").unwrap_err().0.contains("must be a string"));
        assert!(pairs(r#"["a"]"#, "--labels").is_err());
        // No continuation for plain pairs.
        assert!(pairs("a=1,b", "--labels").unwrap_err().0.contains("\"b\" is not KEY=VALUE"));
    }

    #[test]
    fn expressions_keep_commas_in_parentheses() {
        let cases = [
            ("zone=in(a,b)", vec![("zone", "in(a,b)")]),
            ("zone=in(a, b),gpu=!exists()", vec![("zone", "in(a, b)"), ("gpu", "!exists()")]),
            (
                "zone=exists(),!in(a,b),tier=web",
                vec![("zone", "exists(),!in(a,b)"), ("tier", "web")],
            ),
            ("gpu!=a100", vec![("gpu", "!a100")]),
            ("gpu_node=exists()", vec![("gpu_node", "exists()")]),
            (r#"{"gpu_type": "in(A100,H100)"}"#, vec![("gpu_type", "in(A100,H100)")]),
            ("", vec![]),
        ];
        for (text, want) in cases {
            assert_eq!(expressions(text, "--label-selector").unwrap(), map(&want), "{text}");
        }
        assert!(expressions("in(a,b)", "--label-selector")
            .unwrap_err()
            .0
            .contains("not KEY=VALUE"));
    }

    #[test]
    fn strategies() {
        assert_eq!(strategy("SPREAD").unwrap(), json!("SPREAD"));
        assert_eq!(
            strategy(r#"{"type": "NODE_AFFINITY", "node_id": "gpu-2", "soft": true}"#).unwrap(),
            json!({"type": "NODE_AFFINITY", "node_id": "gpu-2", "soft": true})
        );
        assert_eq!(strategy("{type: SPREAD}").unwrap(), json!({"type": "SPREAD"}));
        assert!(strategy("node affinity").is_err());
        assert!(strategy("[1]").is_err());
        assert_eq!(
            placement_group("pg-7:1").unwrap(),
            json!({"type": "PLACEMENT_GROUP", "group": "pg-7", "bundle": 1})
        );
        assert_eq!(
            placement_group("pg-7").unwrap(),
            json!({"type": "PLACEMENT_GROUP", "group": "pg-7"})
        );
        assert!(placement_group("pg-7:x").is_err());
        assert!(placement_group(":1").is_err());
    }

    #[test]
    fn bundle_forms() {
        assert_eq!(bundles(r#"[{"GPU":1},{"GPU":1}]"#).unwrap(), json!([{"GPU": 1}, {"GPU": 1}]));
        assert_eq!(
            bundles("GPU=1;GPU=1,CPU=4").unwrap(),
            json!([{"GPU": "1"}, {"GPU": "1", "CPU": "4"}])
        );
        assert!(bundles("[1, 2]").unwrap_err().0.contains("bundle 0"));
        assert!(bundles("").is_err());
        assert!(selector_list(r#"[{"zone": "a"}, {}]"#, "--bundle-label-selector").is_ok());
        assert!(selector_list(r#"{"zone": "a"}"#, "--bundle-label-selector").is_err());
    }

    #[test]
    fn env_vars() {
        assert_eq!(env_var("A=1").unwrap(), ("A".into(), "1".into()));
        assert_eq!(env_var("OPTS=a=b,c").unwrap(), ("OPTS".into(), "a=b,c".into()));
        assert_eq!(env_var("EMPTY=").unwrap(), ("EMPTY".into(), String::new()));
        assert!(env_var("NOVALUE").is_err());
        assert!(env_var("=x").is_err());
    }

    fn process(flags: &[&str]) -> ProcessArgs {
        use clap::Parser;
        #[derive(Parser)]
        struct Wrapper {
            #[command(flatten)]
            args: ProcessArgs,
        }
        let argv = std::iter::once("test").chain(flags.iter().copied());
        Wrapper::try_parse_from(argv).unwrap().args
    }

    #[test]
    fn flags_become_a_body() {
        let args = process(&[
            "--command",
            "python",
            "--arg",
            "serve.py",
            "--arg",
            "--port=80",
            "--env",
            "A=1",
            "--resources",
            "CPU=1,GPU=0.5",
            "--namespace",
            "ml",
            "--strategy",
            "SPREAD",
            "--label-selector",
            "zone=in(a,b)",
            "--fallback",
            "{}",
            "--tolerations",
            "gpu_node=exists()",
        ]);
        let body: TaskSubmit =
            body(None, args.keys().unwrap(), &[("command", "--command")], &[]).unwrap();
        assert_eq!(&*body.command, "python");
        assert_eq!(&*body.args, ["serve.py", "--port=80"]);
        assert_eq!(body.env, map(&[("A", "1")]));
        assert_eq!(body.namespace.as_deref(), Some("ml"));
        assert_eq!(
            serde_json::to_value(&body.placement).unwrap(),
            json!({
                "resources": {"CPU": 1, "GPU": 0.5},
                "scheduling_strategy": "SPREAD",
                "label_selector": {"zone": "in(a,b)"},
                "fallback_strategy": [{"label_selector": {}}],
                "tolerations": {"gpu_node": "exists()"},
            })
        );
        assert_eq!(body.max_retries, berth_api::rest::DEFAULT_TASK_RETRIES);
    }

    #[test]
    fn missing_command_is_bad_input() {
        let err =
            body::<ActorCreate>(None, Map::new(), &[("command", "--command")], &[]).unwrap_err();
        let bad = err.downcast_ref::<BadInput>().expect("bad input");
        assert!(bad.0.contains("give --command"), "{bad}");
    }

    #[test]
    fn file_then_flags() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("actor.yaml");
        std::fs::write(
            &path,
            "command: sleep\nargs: ['60']\nresources: {CPU: 1}\nlabels: {app: web}\nmax_restarts: 2\n",
        )
        .unwrap();
        let args = process(&["--file", path.to_str().unwrap(), "--resources", "GPU=1"]);
        let body: ActorCreate =
            body(Some(&path), args.keys().unwrap(), &[("command", "--command")], &[]).unwrap();
        assert_eq!(&*body.command, "sleep");
        assert_eq!(&*body.args, ["60"]);
        // The flag replaced the file's resources whole.
        assert_eq!(placed_resources(&body.placement), json!({"GPU": 1}));
        assert_eq!(body.labels, map(&[("app", "web")]));
        assert_eq!(body.max_restarts, 2);

        // A JSON file works the same.
        std::fs::write(&path, r#"{"command": "true", "resources": {"CPU": "0.5"}}"#).unwrap();
        let body: ActorCreate = body_of(&path);
        assert_eq!(placed_resources(&body.placement), json!({"CPU": 0.5}));
    }

    /// The resources of a body, as it sends them.
    fn placed_resources(placement: &berth_api::spec::PlacementSpec) -> serde_json::Value {
        serde_json::to_value(placement).unwrap()["resources"].clone()
    }

    fn body_of<T: DeserializeOwned>(path: &Path) -> T {
        body(Some(path), Map::new(), &[("command", "--command")], &[("resources", json!({}))])
            .unwrap()
    }

    #[test]
    fn bad_files_name_the_file_and_field() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.yaml");
        let check = |text: &str, want: &[&str]| {
            std::fs::write(&path, text).unwrap();
            let err =
                body::<ActorCreate>(Some(&path), Map::new(), &[], &[("resources", json!({}))])
                    .unwrap_err();
            let input = err.downcast_ref::<InputError>().expect("an input error");
            let shown = input.to_string();
            for part in want {
                assert!(shown.contains(part), "{text:?}: {shown}");
            }
            assert!(shown.contains("a.yaml"), "{shown}");
        };
        check("command: x\nresorces: {}\n", &["unknown field `resorces`"]);
        check("command: x\nlabels: {app: [1]}\n", &["labels.app"]);
        check("command: [x\n", &[":1:"]);
        check("# nothing\n", &["empty"]);
        check("- a\n", &["mapping"]);
        let missing = dir.path().join("missing.yaml");
        let err = body::<ActorCreate>(Some(&missing), Map::new(), &[], &[]).unwrap_err();
        assert!(err.to_string().contains("cannot read request file"), "{err}");
    }
}
