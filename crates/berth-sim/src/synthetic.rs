//! A small trace in openb's format, made from a seed, so that the replay and its tests run from
//! a checkout of the repository alone (the Alibaba traces are found through `--traces-dir` or
//! `BERTH_TRACES`). Its shapes follow the `default` trace's broad mix, counted off that trace:
//! nodes mostly 8-GPU and 2-GPU machines of a few models; pods about 13 % without a GPU, 48 % one
//! whole GPU, 38 % a share of one (a handful of common shares), 1 % two to eight GPUs, and a few
//! asking for a GPU model. It is not the production trace: figures on it say nothing of
//! placement quality in production; it is for tests that compare policies on one input.
//!
//! `tests/data/` holds `trace(SEED, NODES, PODS)`'s output, and a test checks the files are
//! exactly what the generator makes.

use std::fmt::Write as _;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The seed, node count and pod count of the trace kept in `tests/data/`.
pub const BUNDLED: (u64, usize, usize) = (2026, 160, 1600);

/// Node shapes: (CPU millicores, memory MiB, GPUs, model, weight).
const NODES: [(u64, u64, u32, &str, u32); 5] = [
    (96_000, 393_216, 8, "G2", 45),
    (104_000, 524_288, 2, "T4", 32),
    (64_000, 262_144, 2, "P100", 11),
    (128_000, 786_432, 8, "G3", 7),
    (96_000, 786_432, 8, "V100M32", 5),
];

/// GPU shares a pod of part of one GPU asks for (millis), each equally likely.
const SHARES: [u32; 8] = [810, 470, 320, 650, 230, 460, 590, 160];

/// The node list and the pod list (CSV texts, openb's columns), from `seed`.
pub fn trace(seed: u64, nodes: usize, pods: usize) -> (String, String) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let total: u32 = NODES.iter().map(|n| n.4).sum();
    let mut node_list = String::from("sn,cpu_milli,memory_mib,gpu,model\n");
    for i in 0..nodes {
        let mut pick = rng.random_range(0..total);
        let (cpu, memory, gpus, model, _) = *NODES
            .iter()
            .find(|n| {
                let found = pick < n.4;
                pick = pick.saturating_sub(n.4);
                found
            })
            .unwrap_or(&NODES[0]);
        let _ = writeln!(node_list, "synth-node-{i:04},{cpu},{memory},{gpus},{model}");
    }
    let mut pod_list = String::from(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,\
         deletion_time,scheduled_time\n",
    );
    for i in 0..pods {
        let roll = rng.random_range(0..100u32);
        let (num_gpu, gpu_milli) = match roll {
            0..13 => (0u32, 0u32),
            13..61 => (1, 1000),
            61..99 => (1, SHARES[rng.random_range(0..SHARES.len())]),
            _ => ([2u32, 4, 8][rng.random_range(0..3)], 1000),
        };
        let cpu = 1000 * rng.random_range(1..=16u64) * u64::from(num_gpu.max(1));
        let memory = 1024 * rng.random_range(2..=64u64);
        let spec = if num_gpu > 0 && rng.random_range(0..20) == 0 { "G2|V100M32" } else { "" };
        let created = i as u64 * 600;
        let _ = writeln!(
            pod_list,
            "synth-pod-{i:04},{cpu},{memory},{num_gpu},{gpu_milli},{spec},LS,Running,{created},{},{created}",
            created + 86_400
        );
    }
    (node_list, pod_list)
}
