//! No link in the repository's Markdown rots: every relative link and image in every `.md` file
//! (README.md, CONTRIBUTING.md, docs/, python/, java/…) names a file or folder that exists, and
//! every `#anchor`, in the same page or another Markdown page, names one of that page's
//! headings, with GitHub's heading slugs. Links to other sites are not followed (the tests run
//! offline). Markdown is read by pulldown-cmark, as a renderer reads it.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

/// The repository's root: two levels above this crate.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("the repository")
}

/// Every Markdown file of the repository, but build output, dependencies and hidden folders.
fn markdown_files(root: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            let Ok(kind) = entry.file_type() else { continue };
            if kind.is_dir() {
                let skip = name.starts_with('.')
                    || ["target", "node_modules", "sim-results", "__pycache__"]
                        .contains(&name.as_str())
                    || name.ends_with("venv");
                if !skip {
                    stack.push(path);
                }
            } else if name.ends_with(".md") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

fn parser(text: &str) -> Parser<'_> {
    Parser::new_ext(text, Options::ENABLE_TABLES)
}

/// GitHub's anchor for a heading's text: lower case; letters, digits, `-` and `_` kept, spaces
/// made `-`, everything else dropped.
fn slug(text: &str) -> String {
    text.trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of one page's headings, as GitHub makes them: a repeated slug gets `-1`, `-2`…
fn anchors(text: &str) -> HashSet<String> {
    let mut found = HashSet::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut heading: Option<(String, Option<String>)> = None;
    for event in parser(text) {
        match event {
            Event::Start(Tag::Heading { id, .. }) => {
                heading = Some((String::new(), id.map(|id| id.to_string())));
            }
            Event::Text(t) | Event::Code(t) => {
                if let Some((text, _)) = heading.as_mut() {
                    text.push_str(&t);
                }
            }
            Event::End(TagEnd::Heading(_)) => {
                let (text, id) = heading.take().expect("a heading ends after it starts");
                let base = id.unwrap_or_else(|| slug(&text));
                let count = seen.entry(base.clone()).or_insert(0);
                let anchor = if *count == 0 { base.clone() } else { format!("{base}-{count}") };
                *count += 1;
                found.insert(anchor);
            }
            _ => {}
        }
    }
    found
}

/// Every link and image destination of a page, with the line it is on.
fn links(text: &str) -> Vec<(usize, String)> {
    let line_of = |offset: usize| text[..offset].matches('\n').count() + 1;
    parser(text)
        .into_offset_iter()
        .filter_map(|(event, range)| match event {
            Event::Start(Tag::Link { dest_url, .. })
            | Event::Start(Tag::Image { dest_url, .. }) => {
                Some((line_of(range.start), dest_url.to_string()))
            }
            _ => None,
        })
        .collect()
}

fn is_external(dest: &str) -> bool {
    let scheme = dest.split(':').next().unwrap_or("");
    dest.contains(':')
        && !scheme.is_empty()
        && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
}

/// What is wrong with the links of the page `file` (empty when nothing is).
fn broken_links(
    root: &Path,
    file: &Path,
    anchors_of: &mut impl FnMut(&Path) -> HashSet<String>,
) -> Vec<String> {
    let text = std::fs::read_to_string(file).expect("a Markdown file reads");
    let shown = file.strip_prefix(root).unwrap_or(file).display().to_string();
    let mut broken = Vec::new();
    for (line, dest) in links(&text) {
        if dest.is_empty() || is_external(&dest) {
            continue;
        }
        let (path, anchor) = match dest.split_once('#') {
            Some((path, anchor)) => (path, Some(anchor)),
            None => (dest.as_str(), None),
        };
        let target = if path.is_empty() {
            file.to_path_buf()
        } else if let Some(from_root) = path.strip_prefix('/') {
            root.join(from_root)
        } else {
            file.parent().expect("a file is in a folder").join(path)
        };
        if !target.exists() {
            broken.push(format!("{shown}:{line}: {dest}: no such file or folder"));
            continue;
        }
        let Some(anchor) = anchor else { continue };
        // Anchors into other kinds of file (a source line, `#L10`) are not checked.
        if target.extension().is_some_and(|e| e == "md") && !anchors_of(&target).contains(anchor) {
            broken.push(format!("{shown}:{line}: {dest}: no heading has the anchor #{anchor}"));
        }
    }
    broken
}

/// The anchors of a page, read once.
fn anchor_cache() -> impl FnMut(&Path) -> HashSet<String> {
    let mut cache: HashMap<PathBuf, HashSet<String>> = HashMap::new();
    move |path: &Path| {
        let key = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
        cache
            .entry(key)
            .or_insert_with(|| anchors(&std::fs::read_to_string(path).unwrap_or_default()))
            .clone()
    }
}

#[test]
fn every_relative_link_and_anchor_in_the_markdown_resolves() {
    let root = root();
    let files = markdown_files(&root);
    assert!(
        files.iter().any(|f| f.ends_with("README.md")),
        "no README.md under {}",
        root.display()
    );
    let mut anchors_of = anchor_cache();
    let broken: Vec<String> =
        files.iter().flat_map(|file| broken_links(&root, file, &mut anchors_of)).collect();
    assert!(
        broken.is_empty(),
        "{} broken link(s) in the Markdown files:\n{}",
        broken.len(),
        broken.join("\n")
    );
}

#[test]
fn slugs_are_githubs() {
    assert_eq!(slug("How Berth decides"), "how-berth-decides");
    assert_eq!(slug("Actor affinity (ACTOR_AFFINITY)"), "actor-affinity-actor_affinity");
    assert_eq!(slug("Labels, taints, selectors"), "labels-taints-selectors");
    assert_eq!(slug("berth validate"), "berth-validate");
    assert_eq!(slug("Decisions/s: `berth bench`"), "decisionss-berth-bench");
    let page = "# A\n\n## Same\n\n## Same\n\n### `code` and *emphasis*\n";
    let found = anchors(page);
    for anchor in ["a", "same", "same-1", "code-and-emphasis"] {
        assert!(found.contains(anchor), "{anchor} missing from {found:?}");
    }
}

#[test]
fn a_broken_link_or_anchor_is_found() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("other.md"), "# Other page\n\n## A section\n").unwrap();
    let page = dir.path().join("page.md");
    std::fs::write(
        &page,
        "# Page\n\n[fine](other.md#a-section) [fine](#page) [site](https://example.com/x)\n\
         [gone](missing.md) [no anchor](other.md#nowhere) [no local anchor](#nowhere)\n\
         ![picture](missing.png)\n",
    )
    .unwrap();
    let broken = broken_links(dir.path(), &page, &mut anchor_cache());
    assert_eq!(broken.len(), 4, "{broken:#?}");
    assert!(broken[0].contains("missing.md: no such file"), "{broken:#?}");
    assert!(broken[1].contains("#nowhere"), "{broken:#?}");
}
