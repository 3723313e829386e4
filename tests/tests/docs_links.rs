//! Every relative link in the project's Markdown resolves: the file (or directory) exists,
//! and a `#fragment` names a heading of the target page (GitHub's heading anchors). The
//! README is the front door and points into `docs/`; a moved or renamed page must not
//! leave a reader at a dead link.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// Directories never searched: build output, dependencies, VCS data.
const SKIP_DIRS: &[&str] = &[
    "target",
    "node_modules",
    ".git",
    ".venv",
    ".venv-package",
    ".tern",
    "cdk.out",
    ".test-out",
];

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            if !SKIP_DIRS.contains(&name.as_str()) {
                markdown_files(&path, out);
            }
        } else if name.ends_with(".md") {
            out.push(path);
        }
    }
}

/// The text of the page outside fenced code blocks, line by line.
fn prose_lines(text: &str) -> Vec<&str> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            lines.push(line);
        }
    }
    lines
}

/// Link targets of `[text](target)` and `![alt](target)` on one line, leaving out inline
/// code spans.
fn link_targets(line: &str) -> Vec<String> {
    let mut without_code = String::new();
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
        } else if !in_code {
            without_code.push(c);
        }
    }
    let mut targets = Vec::new();
    let mut rest = without_code.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let Some(end) = after.find(')') else { break };
        let target = after[..end].split_whitespace().next().unwrap_or("");
        targets.push(target.to_owned());
        rest = &after[end..];
    }
    targets
}

/// GitHub's anchor for a heading: lower case, punctuation other than `-` and `_` removed,
/// spaces to hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Every anchor a page defines: each heading's slug, with GitHub's `-1`, `-2` suffixes
/// for repeats.
fn anchors(text: &str) -> HashSet<String> {
    let mut seen = HashSet::new();
    for line in prose_lines(text) {
        let trimmed = line.trim_start();
        if !trimmed.starts_with('#') {
            continue;
        }
        let heading = trimmed.trim_start_matches('#');
        if !heading.starts_with(' ') {
            continue;
        }
        let base = slug(heading);
        let mut candidate = base.clone();
        let mut n = 0;
        while !seen.insert(candidate.clone()) {
            n += 1;
            candidate = format!("{base}-{n}");
        }
    }
    seen
}

#[test]
fn every_relative_link_in_the_docs_resolves() {
    let root = repo_root();
    let mut pages = Vec::new();
    markdown_files(&root, &mut pages);
    assert!(
        pages.iter().any(|p| p.ends_with("README.md")) && pages.len() > 5,
        "found too few Markdown pages under {}: {pages:?}",
        root.display()
    );
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in &pages {
        let text = std::fs::read_to_string(page).expect("readable page");
        for line in prose_lines(&text) {
            for target in link_targets(line) {
                if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                checked += 1;
                let (path, fragment) = match target.split_once('#') {
                    Some((p, f)) => (p, Some(f)),
                    None => (target.as_str(), None),
                };
                let file = if path.is_empty() {
                    page.clone()
                } else {
                    page.parent().expect("a page has a directory").join(path)
                };
                let shown = page.strip_prefix(&root).unwrap_or(page).display();
                if !file.exists() {
                    broken.push(format!("{shown}: {target} (no such file)"));
                    continue;
                }
                if let Some(fragment) = fragment
                    && file.extension().is_some_and(|e| e == "md")
                {
                    let target_text = std::fs::read_to_string(&file).expect("readable target");
                    if !anchors(&target_text).contains(fragment) {
                        broken.push(format!("{shown}: {target} (no heading with that anchor)"));
                    }
                }
            }
        }
    }
    assert!(
        checked > 20,
        "only {checked} relative links found: the scan is broken"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_readme_stays_a_front_door() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).expect("README.md");
    assert!(
        readme.len() < 25 * 1024,
        "README.md is {} bytes: keep it under 25 KB and move reference into docs/",
        readme.len()
    );
    for command in ["make demo", "make test"] {
        assert!(readme.contains(command), "README.md must show `{command}`");
    }
}

#[test]
fn slugs_follow_github() {
    assert_eq!(slug(" The `tern` CLI"), "the-tern-cli");
    assert_eq!(
        slug(" Alarms: what each means and what to do"),
        "alarms-what-each-means-and-what-to-do"
    );
    assert_eq!(
        slug(" Where Tern may connect (SSRF policy)"),
        "where-tern-may-connect-ssrf-policy"
    );
    let page = "# A\n## B b\n```\n# not a heading\n```\n## B b\n";
    let found = anchors(page);
    assert!(found.contains("a") && found.contains("b-b") && found.contains("b-b-1"));
    assert!(!found.contains("not-a-heading"));
}
