//! Reading trace files: both pod-list widths, node lists, and bad rows named by file, line,
//! column and rule.

use std::path::PathBuf;

use berth_sim::{read_nodes, read_pods, PodRow};

fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    path
}

const POD_HEADER_11: &str = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,\
                             creation_time,deletion_time,scheduled_time\n";

#[test]
fn pod_lists_of_5_and_11_columns() {
    let dir = tempfile::tempdir().unwrap();
    let five = write(
        &dir,
        "five.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,12000,16384,1,1000\np1,6000,0,1,460\n\
         p2,88000,0,8,1000\np3,4000,8,0,0\n",
    );
    let pods = read_pods(&five).unwrap();
    assert_eq!(pods.len(), 4);
    assert_eq!(
        pods[1],
        PodRow {
            name: "p1".into(),
            cpu_milli: 6000,
            memory_mib: 0,
            num_gpu: 1,
            gpu_milli: 460,
            gpu_spec: Vec::new()
        }
    );
    assert_eq!(pods.iter().map(PodRow::gpu_demand_milli).collect::<Vec<_>>(), [1000, 460, 8000, 0]);

    let eleven = write(
        &dir,
        "eleven.csv",
        &format!(
            "{POD_HEADER_11}p0,12000,16384,1,1000,V100M32|V100M16|V100M32,LS,Running,0,12,0\n\
             p1,6000,12288,1,460,,BE,Pending,5,9,\n"
        ),
    );
    let pods = read_pods(&eleven).unwrap();
    assert_eq!(pods[0].gpu_spec, ["V100M16", "V100M32"], "sorted, duplicates dropped");
    assert!(pods[1].gpu_spec.is_empty());
}

#[test]
fn node_lists() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        &dir,
        "nodes.csv",
        "sn,cpu_milli,memory_mib,gpu,model\nopenb-node-0000,64000,262144,2,P100\ncpu-1,32000,1024,0,\n",
    );
    let nodes = read_nodes(&path).unwrap();
    assert_eq!(nodes.len(), 2);
    assert_eq!((nodes[0].gpus, nodes[0].model.as_str()), (2, "P100"));
    assert_eq!((nodes[1].gpus, nodes[1].model.as_str()), (0, ""));
}

#[test]
fn bad_rows_name_the_file_line_column_and_rule() {
    let dir = tempfile::tempdir().unwrap();
    let pod_header = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n";
    // (pod-list body after the header, line, column, words of the rule)
    let pod_cases: &[(&str, u64, Option<&str>, &str)] = &[
        (
            "p0,1000,0,1,1000\np1,x,0,1,1000\n",
            3,
            Some("cpu_milli"),
            "expected a whole number from 0, found \"x\"",
        ),
        ("p0,-5,0,1,1000\n", 2, Some("cpu_milli"), "found \"-5\""),
        ("p0,1000,,1,1000\n", 2, Some("memory_mib"), "found nothing"),
        (
            "p0,1000,0,1,1200\n",
            2,
            Some("gpu_milli"),
            "1200 is out of range: gpu_milli is per GPU, 1 to 1000",
        ),
        ("p0,1000,0,0,500\n", 2, Some("gpu_milli"), "must be 0 for a pod without GPUs"),
        ("p0,1000,0,2,500\n", 2, Some("gpu_milli"), "not allowed with num_gpu 2"),
        ("p0,1000,0,1,0\n", 2, Some("gpu_milli"), "the pod asks for GPUs"),
        ("p0,1000,0,5000,1000\n", 2, Some("num_gpu"), "5000 is too large; at most 4096"),
        // Values that would overflow once converted to Berth's units are refused at read.
        (
            "p0,100000000000000001,0,0,0\n",
            2,
            Some("cpu_milli"),
            "100000000000000001 is too large; at most 100000000000000000",
        ),
        ("p0,1000,95367432,0,0\n", 2, Some("memory_mib"), "at most 95367431"),
        (",1000,0,1,1000\n", 2, Some("name"), "every pod has a name"),
        ("p0,1000,0,1\n", 2, None, "has 4 fields; the header has 5"),
        ("p0,1000,0,1,1000,extra\n", 2, None, "has 6 fields"),
    ];
    for (body, line, column, rule) in pod_cases {
        let path = write(&dir, "pods.csv", &format!("{pod_header}{body}"));
        let err = read_pods(&path).unwrap_err();
        let shown = err.to_string();
        assert_eq!(err.line, Some(*line), "{body:?}: {shown}");
        assert_eq!(err.column.as_deref(), *column, "{body:?}: {shown}");
        assert!(err.rule.contains(rule), "{body:?}: {shown}");
        let at = match column {
            Some(column) => format!("pods.csv:{line}: column {column}: "),
            None => format!("pods.csv:{line}: "),
        };
        assert!(shown.contains(&at), "{shown}");
    }
    // gpu_spec in an 11-column file.
    let path =
        write(&dir, "spec.csv", &format!("{POD_HEADER_11}p0,1000,0,1,1000,A||B,LS,R,0,0,0\n"));
    let err = read_pods(&path).unwrap_err();
    assert_eq!((err.line, err.column.as_deref()), (Some(2), Some("gpu_spec")));
    assert!(err.rule.contains("empty model"), "{err}");
    let path =
        write(&dir, "spec.csv", &format!("{POD_HEADER_11}p0,1000,0,1,1000,a b,LS,R,0,0,0\n"));
    assert!(read_pods(&path).unwrap_err().to_string().contains("column gpu_spec"));

    // Headers and empty files.
    let path = write(&dir, "header.csv", "name,cpu,memory_mib,num_gpu,gpu_milli\np0,1,1,0,0\n");
    let err = read_pods(&path).unwrap_err();
    assert_eq!(err.line, Some(1));
    assert!(err.rule.contains("expected name,cpu_milli,memory_mib,num_gpu,gpu_milli or"), "{err}");
    let path = write(&dir, "empty.csv", pod_header);
    assert!(read_pods(&path).unwrap_err().to_string().contains("lists no pod"));
    let missing = dir.path().join("missing.csv");
    assert!(read_pods(&missing).unwrap_err().to_string().contains("cannot open"));

    // Node lists.
    let node_header = "sn,cpu_milli,memory_mib,gpu,model\n";
    let node_cases: &[(&str, u64, &str, &str)] = &[
        ("bad id!,1000,1,1,T4\n", 2, "sn", "is invalid"),
        ("n1,1000,1,2,\n", 2, "model", "the node has GPUs"),
        ("n1,1000,1,1,T4\nn1,1000,1,1,T4\n", 3, "sn", "listed twice"),
        ("n1,1000,1,1.5,T4\n", 2, "gpu", "found \"1.5\""),
        ("n1,1000,1,1,T 4\n", 2, "model", "\"T 4\" is invalid"),
    ];
    for (body, line, column, rule) in node_cases {
        let path = write(&dir, "nodes.csv", &format!("{node_header}{body}"));
        let err = read_nodes(&path).unwrap_err();
        assert_eq!((err.line, err.column.as_deref()), (Some(*line), Some(*column)), "{err}");
        assert!(err.rule.contains(rule), "{body:?}: {err}");
    }
}
