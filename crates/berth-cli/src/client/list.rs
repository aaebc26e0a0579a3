//! `berth list nodes|actors|tasks|pgs`: one line per object, filtered by the head.

use std::io::Write;

use berth_api::rest::{Actor, Group, Job, List, ListQuery, Node, Task};
use clap::{Args, ValueEnum};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::view;
use super::{api_path, json_text, write_out, BadInput, Client, HeadArgs, Output, OutputArgs};

/// The flags of `berth list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// What to list.
    #[arg(value_enum, value_name = "WHAT")]
    pub what: What,

    /// Only objects in this state (any case): ALIVE, DRAINING, SUSPECT or DEAD for nodes; PENDING,
    /// ALIVE, RESTARTING or DEAD for actors; PENDING, RUNNING, FINISHED, FAILED or CANCELLED
    /// for tasks; PENDING, CREATED, RESCHEDULING or REMOVED for placement groups; RUNNING,
    /// FINISHED, STOPPED or LOST for jobs.
    #[arg(long, value_name = "STATE")]
    pub state: Option<String>,

    /// Only actors, tasks or placement groups of this job (`job-3`).
    #[arg(long, value_name = "JOB_ID")]
    pub job: Option<String>,

    /// Only actors, tasks, placement groups or jobs of this namespace.
    #[arg(long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,

    /// Only actors or tasks on this node (its ID).
    #[arg(long, value_name = "NODE_ID")]
    pub node: Option<String>,

    /// Only nodes or actors with this label, KEY=VALUE (a node's labels, an actor's labels).
    #[arg(long, value_name = "KEY=VALUE")]
    pub label: Option<String>,

    /// Only objects whose name or ID contains this text, in any case (nodes: whose ID or
    /// address does).
    #[arg(long, value_name = "TEXT")]
    pub name: Option<String>,

    /// At most this many (the head's default: 1000); a last line gives the --cursor of the
    /// next page.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub limit: Option<u64>,

    /// The column to sort by, with - before it for descending: -created_at_ms is newest
    /// first; name, state, node_id… (the head says which columns a list has). Default:
    /// creation order (nodes: by ID).
    #[arg(long, value_name = "COLUMN", allow_hyphen_values = true)]
    pub sort: Option<String>,

    /// Start after the page that printed this cursor (with the same --sort and filters).
    #[arg(long, value_name = "CURSOR")]
    pub cursor: Option<String>,

    /// Instead of a list: the matching objects as they are, then each change as it happens,
    /// one line each (`--output json`: the head's change events), until Ctrl-C. Filters:
    /// --state, --label and --job.
    #[arg(long, conflicts_with_all = ["namespace", "node", "limit", "name", "sort", "cursor"])]
    pub watch: bool,

    #[command(flatten)]
    pub head: HeadArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// What `berth list` lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum What {
    /// The nodes: address, state, resources used/total, actor and task counts, taints,
    /// labels.
    #[value(alias = "node")]
    Nodes,
    /// The actors: name, namespace, state, node, resources, GPU instances, restarts, labels,
    /// and why each pending one waits.
    #[value(alias = "actor")]
    Actors,
    /// The tasks: state, node, resources, instances, attempts, exit code, and why each
    /// pending one waits.
    #[value(alias = "task")]
    Tasks,
    /// The placement groups: state, strategy, bundles and their nodes.
    #[value(alias = "pg", alias = "placement-groups", alias = "groups")]
    Pgs,
    /// The jobs (drivers' sessions): name, state, when they started and ended, and why.
    #[value(alias = "job")]
    Jobs,
}

impl What {
    fn collection(self) -> &'static str {
        match self {
            What::Nodes => "nodes",
            What::Actors => "actors",
            What::Tasks => "tasks",
            What::Pgs => "placement_groups",
            What::Jobs => "jobs",
        }
    }

    fn plural(self) -> &'static str {
        match self {
            What::Nodes => "nodes",
            What::Actors => "actors",
            What::Tasks => "tasks",
            What::Pgs => "placement groups",
            What::Jobs => "jobs",
        }
    }
}

/// The query of `args`; filters that do not apply to what is listed are bad input.
pub fn query(args: &ListArgs) -> Result<ListQuery, BadInput> {
    let what = args.what;
    let misfit = |flag: &str, applies: &str| {
        BadInput::new(format!("{flag} does not apply to {}; it filters {applies}", what.plural()))
    };
    if args.namespace.is_some() && what == What::Nodes {
        return Err(misfit("--namespace", "actors, tasks and placement groups"));
    }
    if args.node.is_some() && matches!(what, What::Nodes | What::Pgs | What::Jobs) {
        return Err(misfit("--node", "actors and tasks"));
    }
    if args.job.is_some() && matches!(what, What::Nodes | What::Jobs) {
        return Err(misfit("--job", "actors, tasks and placement groups"));
    }
    if let Some(label) = &args.label {
        if matches!(what, What::Tasks | What::Pgs | What::Jobs) {
            return Err(misfit("--label", "nodes and actors"));
        }
        match label.split_once('=') {
            Some((key, _)) if !key.trim().is_empty() => {}
            _ => return Err(BadInput::new(format!("--label: {label:?} is not KEY=VALUE"))),
        }
    }
    Ok(ListQuery {
        state: args.state.clone(),
        namespace: args.namespace.clone(),
        node: args.node.clone(),
        label: args.label.clone(),
        job: args.job.clone(),
        name: args.name.clone(),
        limit: args.limit.map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
        sort: args.sort.clone(),
        cursor: args.cursor.clone(),
    })
}

/// Lists and prints.
pub fn run(args: &ListArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let query = query(args)?;
    let client = args.head.client()?;
    let output = args.output.output;
    if args.watch {
        let kind = match args.what {
            What::Nodes => "node",
            What::Actors => "actor",
            What::Tasks => "task",
            What::Pgs => "placement_group",
            What::Jobs => "job",
        };
        let watch = berth_api::rest::WatchQuery {
            kind: Some(kind.into()),
            job: query.job,
            label: query.label,
            state: query.state,
            ..Default::default()
        };
        return super::watch::follow(&client, watch, output, out);
    }
    let text = match args.what {
        What::Nodes => {
            fetch_render::<Node>(&client, &query, output, view::nodes_table, What::Nodes)?
        }
        What::Actors => {
            fetch_render::<Actor>(&client, &query, output, view::actors_table, What::Actors)?
        }
        What::Tasks => {
            fetch_render::<Task>(&client, &query, output, view::tasks_table, What::Tasks)?
        }
        What::Pgs => fetch_render::<Group>(&client, &query, output, view::groups_table, What::Pgs)?,
        What::Jobs => fetch_render::<Job>(&client, &query, output, view::jobs_table, What::Jobs)?,
    };
    write_out(out, &text)
}

fn fetch_render<T: DeserializeOwned + Serialize>(
    client: &Client,
    query: &ListQuery,
    output: Output,
    table: fn(&[T]) -> String,
    what: What,
) -> anyhow::Result<String> {
    let list: List<T> = client.get_query(&api_path(&[what.collection()]), query)?;
    match output {
        Output::Json => json_text(&list),
        Output::Table => Ok(render(&list, table, what)),
    }
}

/// The table, or a line saying there is nothing; a last line when the limit cut the list, and
/// one when finished objects of this kind were forgotten.
pub fn render<T>(list: &List<T>, table: fn(&[T]) -> String, what: What) -> String {
    let mut text = if list.items.is_empty() {
        if list.total == 0 {
            format!("no {} match\n", what.plural())
        } else {
            format!("{} {} match; none shown\n", list.total, what.plural())
        }
    } else {
        table(&list.items)
    };
    if !list.items.is_empty() && list.total > list.items.len() {
        text.push_str(&format!(
            "({} of {} {} shown; raise --limit to see more)\n",
            list.items.len(),
            list.total,
            what.plural()
        ));
    }
    if let Some(cursor) = &list.next_cursor {
        text.push_str(&format!("(the next page: add --cursor {cursor})\n"));
    }
    if let Some(forgotten) = list.forgotten.filter(|f| f.dropped > 0) {
        text.push_str(&format!(
            "({} finished {} forgotten: the head keeps finished ones {} after they end, at most \
             {} of them)\n",
            forgotten.dropped,
            what.plural(),
            berth_api::text::duration_words(forgotten.keep_finished_s),
            forgotten.keep_finished
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::super::view::fixtures;
    use super::*;

    fn parse(argv: &[&str]) -> Result<ListArgs, clap::Error> {
        #[derive(Parser)]
        struct Wrapper {
            #[command(flatten)]
            args: ListArgs,
        }
        Wrapper::try_parse_from(std::iter::once("list").chain(argv.iter().copied())).map(|w| w.args)
    }

    #[test]
    fn filters_become_the_query() {
        let args =
            parse(&["actors", "--state", "alive", "--label", "app=web", "--limit", "5"]).unwrap();
        let q = query(&args).unwrap();
        assert_eq!(q.state.as_deref(), Some("alive"));
        assert_eq!(q.label.as_deref(), Some("app=web"));
        assert_eq!(q.limit, Some(5));
        assert_eq!(q.namespace, None);
        let args = parse(&["pg", "--namespace", "ml"]).unwrap();
        assert_eq!(args.what, What::Pgs);
        assert_eq!(query(&args).unwrap().namespace.as_deref(), Some("ml"));
    }

    #[test]
    fn misfit_filters_are_bad_input() {
        for (argv, want) in [
            (&["nodes", "--namespace", "x"][..], "--namespace does not apply to nodes"),
            (&["nodes", "--node", "n"][..], "--node does not apply to nodes"),
            (&["tasks", "--label", "a=b"][..], "--label does not apply to tasks"),
            (&["actors", "--label", "ab"][..], "not KEY=VALUE"),
        ] {
            let err = query(&parse(argv).unwrap()).unwrap_err();
            assert!(err.0.contains(want), "{argv:?}: {err}");
        }
        assert!(parse(&["things"]).is_err());
        assert!(parse(&["nodes", "--limit", "0"]).is_err());
    }

    #[test]
    fn cut_lists_say_so() {
        let list = List {
            items: vec![fixtures::node()],
            total: 3,
            next_cursor: Some("7b7d".into()),
            forgotten: None,
        };
        let text = render(&list, view::nodes_table, What::Nodes);
        assert!(
            text.ends_with(
                "(1 of 3 nodes shown; raise --limit to see more)\n(the next page: add --cursor \
                 7b7d)\n"
            ),
            "{text}"
        );
        let empty: List<Node> =
            List { items: vec![], total: 0, next_cursor: None, forgotten: None };
        assert_eq!(render(&empty, view::nodes_table, What::Nodes), "no nodes match\n");
    }

    #[test]
    fn forgotten_finished_objects_are_counted() {
        let forgotten =
            berth_api::rest::Forgotten { dropped: 12, keep_finished_s: 3600, keep_finished: 10 };
        let list: List<Node> =
            List { items: vec![], total: 0, next_cursor: None, forgotten: Some(forgotten) };
        let text = render(&list, view::nodes_table, What::Tasks);
        assert_eq!(
            text,
            "no tasks match\n(12 finished tasks forgotten: the head keeps finished ones 1 h after \
             they end, at most 10 of them)\n"
        );
        let none = List::<Node> { forgotten: Some(Default::default()), ..list };
        assert_eq!(render(&none, view::nodes_table, What::Tasks), "no tasks match\n");
    }

    #[test]
    fn query_string() {
        // The query as the head's extractor reads it: unset filters left out.
        let q = ListQuery { label: Some("app=web".into()), limit: Some(2), ..ListQuery::default() };
        let client = berth_client::http_builder(None).build().unwrap();
        let request = client.get("http://h:1/api/v1/actors").query(&q).build().unwrap();
        assert_eq!(request.url().query(), Some("label=app%3Dweb&limit=2"));
    }
}
