//! The workload's typical shapes, as the FGD paper takes them: the most frequent pod shapes
//! (CPU, GPU share, GPU count, accepted models) that together cover 95% of the trace's pods,
//! each weighted by its count. They define the fragmentation metric, and the fragmentation
//! scorer uses the same ones (the demand a head would observe).

use std::collections::BTreeMap;

use berth_core::pipeline::scorers::fragmentation::Shape;

use crate::convert::{cpu, pod_gpu};
use crate::trace::PodRow;

/// The share of pods the typical shapes cover, in percent.
pub const COVERAGE_PERCENT: u64 = 95;

/// The most frequent shapes of `pods` covering [`COVERAGE_PERCENT`] of them, most frequent
/// first (ties: by CPU, GPU and models, ascending), each weighted by its count.
pub fn typical_shapes(pods: &[PodRow]) -> Vec<Shape> {
    let mut counts: BTreeMap<(u64, u32, u32, &[String]), u32> = BTreeMap::new();
    for pod in pods {
        let key = (pod.cpu_milli, pod.num_gpu, pod.gpu_milli, pod.gpu_spec.as_slice());
        *counts.entry(key).or_default() += 1;
    }
    let mut ranked: Vec<_> = counts.into_iter().collect();
    // Stable: equal counts keep the key order.
    ranked.sort_by_key(|entry| std::cmp::Reverse(entry.1));
    let total = pods.len() as u64;
    let mut covered = 0u64;
    let mut shapes = Vec::new();
    for ((cpu_milli, num_gpu, gpu_milli, spec), count) in ranked {
        if covered * 100 >= COVERAGE_PERCENT * total {
            break;
        }
        covered += u64::from(count);
        let pod = PodRow {
            name: String::new(),
            cpu_milli,
            memory_mib: 0,
            num_gpu,
            gpu_milli,
            gpu_spec: spec.to_vec(),
        };
        shapes.push(Shape {
            cpu: cpu(cpu_milli),
            gpu: pod_gpu(&pod),
            accelerators: spec.to_vec(),
            weight: count,
        });
    }
    shapes
}
