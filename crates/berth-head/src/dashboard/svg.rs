//! Pictures drawn on the server as inline SVG: the overview's charts of the last hour, a
//! node's GPU map and a placement group's bundles on their nodes. Only presentation
//! attributes (no `style`), so they pass the page's Content Security Policy; every text is
//! escaped ([`format::attr`]); hovering a part shows its `<title>`.

use std::fmt::Write;

use super::format;

/// Fill colours of holders, in turn (distinct, readable on white and under black text).
const PALETTE: &[&str] = &["#7aa6d8", "#e3a857", "#8cc084", "#d98c9f", "#a99ad6", "#7fc6c0"];
/// The colour of what nobody holds.
const FREE: &str = "#eef0f3";

/// One line of a chart: when, what is used (or counted), and the total (none: a count).
pub(crate) struct Point {
    pub(crate) at_ms: u64,
    pub(crate) value: f64,
    pub(crate) total: Option<f64>,
}

/// A small time-series chart of the last hour to `now_ms`: `value` as a filled line, `total`
/// as a dashed one. `label` names it for screen readers and in its title.
pub(crate) fn chart(label: &str, unit: &str, points: &[Point], now_ms: u64) -> String {
    const W: f64 = 300.0;
    const H: f64 = 80.0;
    const HOUR_MS: f64 = 3_600_000.0;
    let top =
        points.iter().map(|p| p.total.unwrap_or(0.0).max(p.value)).fold(0.0_f64, f64::max).max(1.0);
    let x = |at: u64| {
        let age = now_ms.saturating_sub(at) as f64;
        ((HOUR_MS - age.min(HOUR_MS)) / HOUR_MS * W).clamp(0.0, W)
    };
    let y = |v: f64| (H - (v / top).clamp(0.0, 1.0) * H).clamp(0.0, H);
    let last = points.last();
    let now_text = match last {
        Some(Point { value, total: Some(total), .. }) => format!(
            "{} of {} now",
            format::amount(unit, &number(*value)),
            format::amount(unit, &number(*total))
        ),
        Some(p) => format!("{} now", format::amount(unit, &number(p.value))),
        None => "no samples yet".to_string(),
    };
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg class="chart" viewBox="0 0 {W} {}" width="{W}" height="{}" role="img" aria-label="{}: {} over the last hour">"#,
        H + 2.0,
        H + 2.0,
        format::attr(label),
        format::attr(&now_text)
    );
    let _ = write!(svg, "<title>{}: {}</title>", format::attr(label), format::attr(&now_text));
    let _ = write!(
        svg,
        r##"<rect x="0" y="0" width="{W}" height="{H}" fill="#fafbfc" stroke="#d0d5dc"/>"##
    );
    if points.len() >= 2 {
        let mut area = format!("M{:.1},{H} ", x(points[0].at_ms));
        for p in points {
            let _ = write!(area, "L{:.1},{:.1} ", x(p.at_ms), y(p.value));
        }
        let _ = write!(area, "L{:.1},{H} Z", x(points[points.len() - 1].at_ms));
        let _ =
            write!(svg, r##"<path d="{area}" fill="#b9d3ee" stroke="#3f6fa8" stroke-width="1"/>"##);
        if points.iter().any(|p| p.total.is_some()) {
            let line: Vec<String> = points
                .iter()
                .map(|p| format!("{:.1},{:.1}", x(p.at_ms), y(p.total.unwrap_or(0.0))))
                .collect();
            let _ = write!(
                svg,
                r##"<polyline points="{}" fill="none" stroke="#555" stroke-dasharray="4 3" stroke-width="1"/>"##,
                line.join(" ")
            );
        }
    }
    svg.push_str("</svg>");
    svg
}

/// A number for a chart's words: whole when it is, else two decimals.
fn number(value: f64) -> String {
    if (value - value.round()).abs() < 1e-9 {
        format!("{}", value.round() as i64)
    } else {
        format!("{value:.2}").trim_end_matches('0').to_string()
    }
}

/// What holds part of a GPU instance.
pub(crate) struct Holder {
    /// `actor-3`, `task-9`.
    pub(crate) id: String,
    /// Its page (`#actors/actor-3`).
    pub(crate) href: String,
    /// The part of the instance it holds, 0 to 1.
    pub(crate) share: f64,
}

/// A node's GPU map: a bar per instance, split by the work holding parts of it.
pub(crate) fn gpu_map(node: &str, instances: &[(u32, Vec<Holder>)]) -> String {
    const LABEL: f64 = 56.0;
    const BAR: f64 = 300.0;
    const ROW: f64 = 24.0;
    let height = ROW * instances.len() as f64;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg class="gpu-map" viewBox="0 0 {} {height}" width="{}" height="{height}" role="img" aria-label="GPU instances of {} and what holds them">"#,
        LABEL + BAR,
        LABEL + BAR,
        format::attr(node)
    );
    let mut colours = std::collections::BTreeMap::new();
    for (row, (instance, holders)) in instances.iter().enumerate() {
        let top = row as f64 * ROW;
        let _ = write!(
            svg,
            r##"<text x="0" y="{:.1}" font-size="12" fill="#333">GPU {instance}</text>"##,
            top + 16.0
        );
        let mut x = LABEL;
        for holder in holders {
            let share = holder.share.clamp(0.0, 1.0);
            let width = share * BAR;
            let next = colours.len();
            let fill = *colours.entry(holder.id.clone()).or_insert(PALETTE[next % PALETTE.len()]);
            let title = format!("{} holds {} of GPU {instance}", holder.id, number(share));
            let _ = write!(
                svg,
                r##"<a href="{}"><rect class="holder" data-holder="{}" data-instance="{instance}" data-share="{}" x="{x:.1}" y="{:.1}" width="{width:.1}" height="{:.1}" fill="{fill}" stroke="#fff"><title>{}</title></rect>"##,
                format::attr(&holder.href),
                format::attr(&holder.id),
                number(share),
                top + 2.0,
                ROW - 6.0,
                format::attr(&title)
            );
            if width >= 60.0 {
                let _ = write!(
                    svg,
                    r##"<text x="{:.1}" y="{:.1}" font-size="11" fill="#111">{}</text>"##,
                    x + 4.0,
                    top + 15.0,
                    format::attr(&holder.id)
                );
            }
            svg.push_str("</a>");
            x += width;
        }
        let free = (LABEL + BAR - x).max(0.0);
        if free > 0.05 {
            let _ = write!(
                svg,
                r##"<rect class="free" data-instance="{instance}" x="{x:.1}" y="{:.1}" width="{free:.1}" height="{:.1}" fill="{FREE}" stroke="#d0d5dc"><title>{} of GPU {instance} held by no actor or task</title></rect>"##,
                top + 2.0,
                ROW - 6.0,
                number(free / BAR)
            );
        }
    }
    svg.push_str("</svg>");
    svg
}

/// A placement group's bundle, for its map.
pub(crate) struct BundleBox {
    pub(crate) index: usize,
    /// `GPU 1, CPU 2`.
    pub(crate) resources: String,
}

/// A placement group's bundles on their nodes: a column per node (and one for bundles not
/// placed), a box per bundle in it.
pub(crate) fn bundle_map(columns: &[(String, Vec<BundleBox>)]) -> String {
    const COL: f64 = 170.0;
    const GAP: f64 = 10.0;
    const HEAD: f64 = 22.0;
    const BOX: f64 = 30.0;
    let rows = columns.iter().map(|(_, b)| b.len()).max().unwrap_or(0) as f64;
    let width = (COL + GAP) * columns.len() as f64;
    let height = HEAD + rows * (BOX + 4.0) + 6.0;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg class="bundle-map" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" aria-label="Where the bundles are">"#
    );
    for (col, (node, bundles)) in columns.iter().enumerate() {
        let left = col as f64 * (COL + GAP);
        let _ = write!(
            svg,
            r##"<rect x="{left}" y="0" width="{COL}" height="{height}" fill="#f5f7fa" stroke="#c5ccd6"/><text x="{:.1}" y="15" font-size="12" font-weight="bold" fill="#222">{}</text>"##,
            left + 6.0,
            format::attr(node)
        );
        for (row, bundle) in bundles.iter().enumerate() {
            let top = HEAD + row as f64 * (BOX + 4.0);
            let title = format!("bundle {} ({}) on {node}", bundle.index, bundle.resources);
            let _ = write!(
                svg,
                r##"<g class="bundle" data-bundle="{}" data-node="{}"><rect x="{:.1}" y="{top:.1}" width="{:.1}" height="{BOX}" fill="{}" stroke="#fff"/><text x="{:.1}" y="{:.1}" font-size="11" fill="#111">#{} {}</text><title>{}</title></g>"##,
                bundle.index,
                format::attr(node),
                left + 4.0,
                COL - 8.0,
                PALETTE[bundle.index % PALETTE.len()],
                left + 9.0,
                top + 19.0,
                bundle.index,
                format::attr(&clip(&bundle.resources, 22)),
                format::attr(&title)
            );
        }
    }
    svg.push_str("</svg>");
    svg
}

fn clip(text: &str, most: usize) -> String {
    if text.chars().count() <= most {
        text.to_string()
    } else {
        format!("{}…", text.chars().take(most - 1).collect::<String>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gpu_map_splits_an_instance_between_its_holders_and_escapes_them() {
        let svg = gpu_map(
            "node-<1>",
            &[(
                0,
                vec![
                    Holder { id: "actor-1".into(), href: "#actors/actor-1".into(), share: 0.5 },
                    Holder { id: "actor-<2>".into(), href: "#actors/x".into(), share: 0.5 },
                ],
            )],
        );
        assert!(
            svg.contains(r#"data-holder="actor-1" data-instance="0" data-share="0.5""#),
            "{svg}"
        );
        assert!(svg.contains("actor-&lt;2&gt; holds 0.5 of GPU 0"), "{svg}");
        assert!(!svg.contains("<2>") && !svg.contains("node-<1>"));
        assert!(!svg.contains(r#"class="free""#), "a whole instance held leaves nothing free");
        let half =
            gpu_map("n", &[(1, vec![Holder { id: "t".into(), href: "#".into(), share: 0.25 }])]);
        assert!(half.contains("0.75 of GPU 1 held by no actor or task"), "{half}");
    }

    #[test]
    fn a_chart_says_the_latest_value_and_draws_a_line_once_there_are_two_samples() {
        let now = 10_000_000;
        let one = [Point { at_ms: now, value: 3.0, total: Some(14.0) }];
        let svg = chart("GPU", "GPU", &one, now);
        assert!(svg.contains("GPU: 3 of 14 now"), "{svg}");
        assert!(!svg.contains("<path"));
        let two = [
            Point { at_ms: now - 60_000, value: 1.0, total: None },
            Point { at_ms: now, value: 2.5, total: None },
        ];
        let svg = chart("Waiting", "", &two, now);
        assert!(svg.contains("<path") && !svg.contains("<polyline"), "{svg}");
        assert!(svg.contains("2.5 now"));
    }
}
