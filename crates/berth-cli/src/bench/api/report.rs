//! `berth bench api`'s table: one row per measure, over one run or several.
//!
//! Over several runs each row shows the run that is the median by the row's figure, with the
//! range of the others: the details beside a rate (its p50 and p99, the owner's and the
//! store's load, the CPU per actor) are then those of one real run, not medians of columns
//! taken from different runs.

use comfy_table::{presets, Cell, CellAlignment, Table};

use super::{ApiResult, Load};

/// The table of `runs` (at least one), with the machine's line above it.
pub fn render(runs: &[ApiResult]) -> String {
    let first = &runs[0];
    let mut table = Table::new();
    table.load_style(presets::ASCII_MARKDOWN).set_header(vec!["measure", "result", "goal"]);
    let single = Median::of(runs, |r| r.actors_per_s);
    let burst = Median::of(runs, |r| r.burst_alive_s);
    let groups = Median::of(runs, |r| r.groups_per_s);
    let batched = Median::of(runs, |r| r.batch_actors_per_s);
    let watched = Median::of(runs, watched_ratio);
    let scale = Median::of(runs, |r| r.scale_alive_s);
    let memory = Median::of(runs, |r| r.scale_bytes_per_actor);
    let marginal = Median::of(runs, |r| r.scale_marginal_bytes_per_actor);
    let agents = Median::of(runs, |r| r.scale_agents_bytes_per_actor.unwrap_or(0.0));
    let agents_marginal =
        Median::of(runs, |r| r.scale_agents_marginal_bytes_per_actor.unwrap_or(0.0));
    let fewest_complete = runs.iter().map(|r| r.watchers_complete).min().unwrap_or(0);
    let rows = [
        (
            format!("durable actor creations/s ({} actors)", first.actors),
            format!(
                "{:.0} ({}p50 {:.1} ms, p99 {:.1} ms; {})",
                single.run.actors_per_s,
                single.range(0),
                single.run.actor_p50_ms,
                single.run.actor_p99_ms,
                load_text(&single.run.actor_load)
            ),
            "≥ 20000",
        ),
        (
            format!("{} actors ALIVE", first.burst),
            format!("{:.2} s{}", burst.run.burst_alive_s, burst.range_alone(2)),
            "≤ 2 s (10,000)",
        ),
        (
            format!("placement groups/s ({} groups)", first.groups),
            format!("{:.0}{}", groups.run.groups_per_s, groups.range_alone(0)),
            "≥ 5000",
        ),
        (
            format!(
                "batched actor creations/s ({} actors, {} per batch)",
                first.batch_actors, first.batch_size
            ),
            format!(
                "{:.0} ({}a batch's answer p50 {:.0} ms, p99 {:.0} ms; {})",
                batched.run.batch_actors_per_s,
                batched.range(0),
                batched.run.batch_p50_ms,
                batched.run.batch_p99_ms,
                load_text(&batched.run.batch_load)
            ),
            "≥ 100000",
        ),
        (
            format!("actor creations/s while {} clients watch", first.watchers),
            format!(
                "{:.0} ({:.0} % of {:.0} unwatched{}{})",
                watched.run.watched_actors_per_s,
                100.0 * watched_ratio(watched.run),
                watched.run.unwatched_actors_per_s,
                watched
                    .run
                    .watched_cpu
                    .zip(watched.run.unwatched_cpu)
                    .map(|(w, u)| format!(
                        "; CPU {:.0} against {:.0} µs per actor, the head's {:.0} against {:.0}",
                        w.total_us, u.total_us, w.head_us, u.head_us
                    ))
                    .unwrap_or_default(),
                watched.percent_range()
            ),
            "≥ 80 %",
        ),
        (
            "watchers that saw each change once, in order".to_string(),
            match runs.len() {
                1 => format!("{}/{}", fewest_complete, first.watchers),
                n => format!("{}/{} (the fewest of {n} runs)", fewest_complete, first.watchers),
            },
            "all",
        ),
        (
            format!("{} actors ALIVE on {} nodes (batches)", first.scale_actors, first.scale_nodes),
            format!("{:.2} s{}", scale.run.scale_alive_s, scale.range_alone(2)),
            "≤ 10 s (100,000)",
        ),
        (
            "memory grown per actor, the head's process (head, client)".to_string(),
            format!("{:.0} B{}", memory.run.scale_bytes_per_actor, memory.range_alone(0)),
            "≤ 1 KiB + the core's",
        ),
        (
            "  … over the second half (one more actor)".to_string(),
            format!(
                "{:.0} B{}",
                marginal.run.scale_marginal_bytes_per_actor,
                marginal.range_alone(0)
            ),
            "",
        ),
        (
            "memory grown per actor, the agents' process (simulated)".to_string(),
            optional_bytes(agents.run.scale_agents_bytes_per_actor),
            "",
        ),
        (
            "  … over the second half".to_string(),
            optional_bytes(agents_marginal.run.scale_agents_marginal_bytes_per_actor),
            "",
        ),
    ];
    for (measure, value, goal) in rows {
        table.add_row(vec![
            Cell::new(measure),
            Cell::new(value).set_alignment(CellAlignment::Right),
            Cell::new(goal),
        ]);
    }
    let over = match runs.len() {
        1 => String::new(),
        n => format!("; each figure the median of {n} runs, with their range"),
    };
    format!(
        "{} simulated nodes, {} connections, a {} ms assignment window, on this machine (phase 6: \
         its head and agents in processes of their own){over}\n{table}",
        first.nodes, first.concurrency, first.assignment_window_ms
    )
}

/// Creations per second while watched, as a share of those just before without watchers.
fn watched_ratio(run: &ApiResult) -> f64 {
    run.watched_actors_per_s / run.unwatched_actors_per_s
}

/// The run that is the median by one figure, and the figure's range over all runs.
struct Median<'a> {
    run: &'a ApiResult,
    /// The lowest figure over the runs.
    low: f64,
    /// The highest.
    high: f64,
    /// How many runs there were.
    runs: usize,
}

impl<'a> Median<'a> {
    /// The median run of `runs` by `figure`: the middle one, the lower middle one of an even
    /// number (a real run either way, not an average of two).
    fn of(runs: &'a [ApiResult], figure: impl Fn(&ApiResult) -> f64) -> Median<'a> {
        let mut sorted: Vec<&ApiResult> = runs.iter().collect();
        sorted.sort_by(|a, b| figure(a).total_cmp(&figure(b)));
        let run = sorted[(sorted.len() - 1) / 2];
        let (low, high) = (figure(sorted[0]), figure(sorted[sorted.len() - 1]));
        Median { run, low, high, runs: runs.len() }
    }

    /// `median of 3 runs, 13224 to 14176` (the figures times `scale`, then `unit`), or `None`
    /// for one run, which has no range.
    fn span(&self, decimals: usize, scale: f64, unit: &str) -> Option<String> {
        let (low, high) = (scale * self.low, scale * self.high);
        (self.runs > 1).then(|| {
            format!("median of {} runs, {low:.decimals$} to {high:.decimals$}{unit}", self.runs)
        })
    }

    /// The span to open a parenthesis: `median of 3 runs, 13224 to 14176; `.
    fn range(&self, decimals: usize) -> String {
        self.span(decimals, 1.0, "").map(|span| format!("{span}; ")).unwrap_or_default()
    }

    /// The span after a figure: ` (median of 3 runs, 0.74 to 0.78)`.
    fn range_alone(&self, decimals: usize) -> String {
        self.span(decimals, 1.0, "").map(|span| format!(" ({span})")).unwrap_or_default()
    }

    /// The span of a ratio, to close a parenthesis: `; median of 3 runs, 72 to 79 %`.
    fn percent_range(&self) -> String {
        self.span(0, 100.0, " %").map(|span| format!("; {span}")).unwrap_or_default()
    }
}

/// The head's load over a phase, in words: `owner busy 23 %; store 750 commits/s × 31 writes,
/// busy 93 %; CPU 128 µs per actor: head 88, client 18, agents 22`.
fn load_text(load: &Load) -> String {
    let cpu = load.cpu.map(|cpu| format!("; {}", cpu.text())).unwrap_or_default();
    format!(
        "owner busy {:.0} %; store {:.0} commits/s × {:.0} writes, busy {:.0} %{cpu}",
        100.0 * load.owner_busy,
        load.commits_per_s,
        load.writes_per_commit,
        100.0 * load.store_busy
    )
}

/// Bytes for the table, or `–` when not measured.
fn optional_bytes(bytes: Option<f64>) -> String {
    bytes.map_or_else(|| "–".to_string(), |b| format!("{b:.0} B"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run whose figures all derive from `n`, so that each row's median run is known.
    fn run(n: f64, watchers_complete: usize) -> ApiResult {
        ApiResult {
            nodes: 100,
            concurrency: 64,
            assignment_window_ms: 10,
            actors: 20_000,
            actors_per_s: 10_000.0 + n,
            actor_p50_ms: n,
            actor_p99_ms: 2.0 * n,
            actor_load: Load::default(),
            burst: 10_000,
            burst_alive_s: n / 10.0,
            groups: 5_000,
            groups_per_s: 5_000.0 + n,
            batch_actors: 100_000,
            batch_size: 1_000,
            batch_actors_per_s: 50_000.0 + n,
            batch_p50_ms: 10.0 * n,
            batch_p99_ms: 20.0 * n,
            batch_load: Load::default(),
            watchers: 1_000,
            watched_actors_per_s: 70.0 + n,
            unwatched_actors_per_s: 100.0,
            watched_cpu: None,
            unwatched_cpu: None,
            watchers_complete,
            scale_actors: 100_000,
            scale_nodes: 1_000,
            scale_alive_s: n,
            scale_bytes_per_actor: 2_000.0 + n,
            scale_marginal_bytes_per_actor: 1_000.0 + n,
            scale_agents_bytes_per_actor: Some(200.0 + n),
            scale_agents_marginal_bytes_per_actor: None,
        }
    }

    #[test]
    fn the_median_is_a_real_run_the_lower_middle_of_an_even_number() {
        let runs = [run(3.0, 0), run(1.0, 0), run(2.0, 0)];
        let median = Median::of(&runs, |r| r.actor_p50_ms);
        assert_eq!(median.run.actor_p50_ms, 2.0);
        assert_eq!((median.low, median.high, median.runs), (1.0, 3.0, 3));
        assert_eq!(median.range(1), "median of 3 runs, 1.0 to 3.0; ");
        assert_eq!(median.range_alone(0), " (median of 3 runs, 1 to 3)");
        let even = [run(4.0, 0), run(1.0, 0), run(3.0, 0), run(2.0, 0)];
        assert_eq!(Median::of(&even, |r| r.actor_p50_ms).run.actor_p50_ms, 2.0);
        let one = [run(5.0, 0)];
        let median = Median::of(&one, |r| r.actor_p50_ms);
        assert_eq!(
            (median.range(0), median.range_alone(0), median.percent_range()),
            (String::new(), String::new(), String::new())
        );
    }

    #[test]
    fn each_row_shows_its_median_run_with_the_range_and_the_fewest_complete_watchers() {
        let text = render(&[run(1.0, 1_000), run(3.0, 999), run(2.0, 1_000)]);
        assert!(text.contains("each figure the median of 3 runs"), "{text}");
        assert!(text.contains("64 connections, a 10 ms assignment window,"), "{text}");
        // The median run by creations/s is run(2): its p50 and p99 beside it, not run(1)'s.
        assert!(
            text.contains("10002 (median of 3 runs, 10001 to 10003; p50 2.0 ms, p99 4.0 ms;"),
            "{text}"
        );
        assert!(
            text.contains("50002 (median of 3 runs, 50001 to 50003; a batch's answer p50 20 ms")
        );
        assert!(
            text.contains("72 (72 % of 100 unwatched; median of 3 runs, 71 to 73 %)"),
            "{text}"
        );
        assert!(text.contains("0.20 s (median of 3 runs, 0.10 to 0.30)"), "{text}");
        assert!(text.contains("999/1000 (the fewest of 3 runs)"), "{text}");
        assert!(text.contains("1002 B (median of 3 runs, 1001 to 1003)"), "{text}");
        assert!(text.contains("202 B"), "the agents' memory of the median run: {text}");
    }

    #[test]
    fn one_run_is_shown_as_it_is() {
        let text = render(&[run(2.0, 1_000)]);
        assert!(!text.contains("median"), "{text}");
        assert!(text.contains("10002 (p50 2.0 ms, p99 4.0 ms; owner busy 0 %"), "{text}");
        assert!(text.contains(" 1000/1000 | all"), "{text}");
        assert!(text.contains(" – |"), "the agents' second half was not measured: {text}");
    }
}
