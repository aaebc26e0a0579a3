//! Phase 6's simulated agents in a process of their own (`bench api --case
//! agents:NODES:PER_NODE:ADDRESS`), so that the head's process holds only the head and the
//! HTTP client and its memory figures are the head's, with the agents' reported beside them.
//!
//! The parent speaks to the child over its standard input and output, one line each way:
//! the agent token first (never on the command line, where `ps` shows it); the child answers
//! `registered` once every node has registered; each `memory` line is answered with the
//! child's resident bytes (after the allocator returned its free pages); end of input stops
//! the agents.

use std::io::{BufRead, Write};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use berth_agent::{SimCluster, SimNode};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

/// How long the nodes may take to register.
const REGISTER_WITHIN: Duration = Duration::from_secs(120);

/// The `--case` that runs `nodes` simulated nodes, each with `per_node` CPUs, for the head
/// at `address`.
pub fn case(nodes: usize, per_node: usize, address: &str) -> String {
    format!("agents:{nodes}:{per_node}:{address}")
}

/// The nodes, CPUs per node and head address of an [`case`] text.
fn parse(case: &str) -> anyhow::Result<(usize, usize, String)> {
    let mut parts = case.splitn(4, ':');
    let (Some("agents"), Some(nodes), Some(per_node), Some(address)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        bail!("--case: the agents case is agents:NODES:PER_NODE:ADDRESS, not {case:?}");
    };
    let number = |field: &str, text: &str| -> anyhow::Result<usize> {
        match text.parse::<usize>() {
            Ok(n) if n > 0 => Ok(n),
            _ => bail!("--case: {field} must be a whole number of at least 1, not {text:?}"),
        }
    };
    if address.is_empty() {
        bail!("--case: ADDRESS must be the head's HOST:PORT, not empty");
    }
    Ok((number("NODES", nodes)?, number("PER_NODE", per_node)?, address.to_string()))
}

/// The simulated nodes: `nodes` of them, named `scale-00000` on, each with `per_node` CPUs.
pub fn scale_nodes(nodes: usize, per_node: usize) -> Vec<SimNode> {
    (0..nodes)
        .map(|i| SimNode::new(format!("scale-{i:05}")).resource("CPU", &per_node.to_string()))
        .collect()
}

/// True when `case` names the agents' process.
pub fn is_case(case: &str) -> bool {
    case.starts_with("agents:")
}

/// The child's side: runs the agents until its input ends.
pub fn run_case(case: &str) -> anyhow::Result<()> {
    let (nodes, per_node, address) = parse(case)?;
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut token = String::new();
    input.read_line(&mut token).context("cannot read the agent token")?;
    let token = token.trim_end();
    if token.is_empty() {
        bail!("the agents' process reads the agent token on the first line of its input");
    }
    // Each node keeps a connection to the head.
    super::raise_open_files(nodes + 256)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let sim = runtime.block_on(async {
        let sim = SimCluster::start(&address, token, scale_nodes(nodes, per_node))
            .map_err(|e| anyhow!("{e}"))?;
        sim.wait_registered(REGISTER_WITHIN).await.map_err(|e| anyhow!("{e}"))?;
        anyhow::Ok(sim)
    })?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "registered")?;
    out.flush()?;
    // The agents run on the runtime's threads while this one waits for the parent.
    for line in input.lines() {
        match line?.as_str() {
            "memory" => {
                crate::bench::release_free_memory();
                writeln!(out, "{}", crate::bench::retention::memory().0)?;
                out.flush()?;
            }
            other => bail!("the agents' process takes `memory` or the end of input, not {other:?}"),
        }
    }
    let _ = runtime.block_on(sim.shutdown());
    Ok(())
}

/// The parent's side: the agents' process.
pub struct AgentsProcess {
    child: Child,
    input: ChildStdin,
    output: Lines<BufReader<ChildStdout>>,
}

impl AgentsProcess {
    /// Starts `program`'s agents for the head at `address` and waits until they registered.
    pub async fn start(
        program: &Path,
        address: &str,
        token: &str,
        nodes: usize,
        per_node: usize,
    ) -> anyhow::Result<AgentsProcess> {
        let mut child = tokio::process::Command::new(program)
            .args(["bench", "api", "--case", &case(nodes, per_node, address)])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot run {}", program.display()))?;
        let input = child.stdin.take().context("the agents' process has no input")?;
        let output = child.stdout.take().context("the agents' process has no output")?;
        let mut agents = AgentsProcess { child, input, output: BufReader::new(output).lines() };
        agents.send(token).await?;
        match agents.output.next_line().await? {
            Some(line) if line == "registered" => Ok(agents),
            other => bail!("the agents' process did not register its nodes (it said {other:?})"),
        }
    }

    /// The agents' process's ID (`None` once it has ended).
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// The agents' process's resident bytes now.
    pub async fn memory(&mut self) -> anyhow::Result<u64> {
        self.send("memory").await?;
        let line = self.output.next_line().await?.context("the agents' process ended")?;
        line.parse().with_context(|| format!("the agents' process answered {line:?}"))
    }

    /// Stops the agents and waits for their process to end.
    pub async fn stop(self) -> anyhow::Result<()> {
        let AgentsProcess { mut child, input, output } = self;
        drop((input, output));
        let status = child.wait().await?;
        if !status.success() {
            bail!("the agents' process ended with {status}");
        }
        Ok(())
    }

    async fn send(&mut self, line: &str) -> anyhow::Result<()> {
        self.input.write_all(format!("{line}\n").as_bytes()).await?;
        self.input.flush().await.context("the agents' process stopped reading")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_case_carries_the_nodes_and_the_address_and_refuses_bad_ones() {
        let text = case(1000, 101, "127.0.0.1:4567");
        assert!(is_case(&text));
        assert_eq!(parse(&text).unwrap(), (1000, 101, "127.0.0.1:4567".to_string()));
        for (bad, words) in [
            ("agents:0:1:a:1", "NODES must be a whole number of at least 1"),
            ("agents:2:x:a:1", "PER_NODE must be a whole number"),
            ("agents:2:3:", "ADDRESS must be the head's HOST:PORT"),
            ("agents:2", "agents:NODES:PER_NODE:ADDRESS"),
        ] {
            let err = parse(bad).unwrap_err().to_string();
            assert!(err.starts_with("--case: ") && err.contains(words), "{bad}: {err}");
        }
    }
}
