//! Checks of the documents: every relative link resolves to a file, and
//! every `#anchor` to a heading of the file it names (GitHub's slugs), so
//! a page moved or a heading renamed cannot leave a dead link; and the
//! README stays a user's page.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
};

/// The documents whose links are checked, from the workspace root:
/// these files and every `.md` in these folders.
const FILES: &[&str] = &[
    "README.md",
    "ARCHITECTURE.md",
    "CONTRIBUTING.md",
    "CHANGELOG.md",
    "deploy/README.md",
];
const FOLDERS: &[&str] = &["docs"];

/// A link that does not resolve: the document, the target as written,
/// and why.
#[derive(Debug, PartialEq, Eq)]
pub struct Dead {
    pub document: PathBuf,
    pub target: String,
    pub why: String,
}

/// The documents [`FILES`] and [`FOLDERS`] name under `root`.
pub fn documents(root: &Path) -> Vec<PathBuf> {
    let mut all: Vec<PathBuf> = FILES.iter().map(|f| root.join(f)).collect();
    for folder in FOLDERS {
        let Ok(entries) = std::fs::read_dir(root.join(folder)) else {
            continue;
        };
        let mut pages: Vec<PathBuf> = entries
            .filter_map(|e| Some(e.ok()?.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "md"))
            .collect();
        pages.sort();
        all.extend(pages);
    }
    all
}

/// The dead links of `documents`.
pub fn dead_links(documents: &[PathBuf]) -> Vec<Dead> {
    let mut dead = Vec::new();
    for document in documents {
        let Ok(text) = std::fs::read_to_string(document) else {
            dead.push(Dead {
                document: document.clone(),
                target: String::new(),
                why: "the document cannot be read".into(),
            });
            continue;
        };
        for target in links(&text) {
            if let Err(why) = resolve(document, &text, &target) {
                dead.push(Dead {
                    document: document.clone(),
                    target,
                    why,
                });
            }
        }
    }
    dead
}

/// Whether `target`, linked from `document` (whose text is `text`),
/// resolves.
fn resolve(document: &Path, text: &str, target: &str) -> Result<(), String> {
    if target.contains("://") || target.starts_with("mailto:") {
        return Ok(());
    }
    let (path, anchor) = match target.split_once('#') {
        Some((path, anchor)) => (path, Some(anchor)),
        None => (target, None),
    };
    let (file, text) = if path.is_empty() {
        (document.to_owned(), text.to_owned())
    } else {
        let file = document.parent().unwrap_or(Path::new(".")).join(path);
        if !file.exists() {
            return Err(format!("{} does not exist", file.display()));
        }
        let text = if file.is_file() {
            std::fs::read_to_string(&file).unwrap_or_default()
        } else {
            String::new()
        };
        (file, text)
    };
    let Some(anchor) = anchor else {
        return Ok(());
    };
    if anchors(&text).contains(anchor) {
        Ok(())
    } else {
        Err(format!("{} has no heading #{anchor}", file.display()))
    }
}

/// The targets of the inline links `[text](target)` outside code.
fn links(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in prose(text) {
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            let target = after[..end].split_whitespace().next().unwrap_or("");
            if !target.is_empty() {
                found.push(target.to_owned());
            }
            rest = &after[end..];
        }
    }
    found
}

/// The lines outside fenced code blocks, with inline code spans removed.
fn prose(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut kept = String::new();
        let mut in_code = false;
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
            } else if !in_code {
                kept.push(c);
            }
        }
        lines.push(kept);
    }
    lines
}

/// The anchors GitHub makes of a document's headings: lowercased, with
/// everything but letters, digits, spaces, `-` and `_` dropped and spaces
/// made `-`; a repeated one gets `-1`, `-2`...
pub fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let heading = line.trim_start_matches('#');
        if fenced || heading.len() == line.len() || !heading.starts_with(' ') {
            continue;
        }
        let slug: String = (heading.trim().to_lowercase().chars())
            .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let mut unique = slug.clone();
        let mut n = 0;
        while seen.contains(&unique) {
            n += 1;
            unique = format!("{slug}-{n}");
        }
        seen.insert(unique);
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> PathBuf {
        crate::workspace_root()
    }

    #[test]
    fn every_relative_link_and_anchor_in_the_documents_resolves() {
        let documents = documents(&root());
        assert!(documents.len() > FILES.len(), "no page in docs/");
        let dead = dead_links(&documents);
        assert!(dead.is_empty(), "dead links: {dead:#?}");
    }

    #[test]
    fn the_readme_is_a_page_of_at_most_250_lines_and_no_page_names_an_issue() {
        let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
        let lines = readme.lines().count();
        assert!(lines <= 250, "README.md has {lines} lines");
        for page in documents(&root()) {
            let text = std::fs::read_to_string(&page).unwrap().to_lowercase();
            let numbered = text.match_indices("issue ").any(|(at, word)| {
                text[at + word.len()..].starts_with(|c: char| c.is_ascii_digit())
            });
            assert!(
                !numbered,
                "{} names an issue by number: history belongs in git",
                page.display()
            );
        }
    }

    /// A dead file, a dead anchor and a live one are told apart, headings
    /// are slugged as GitHub does, and links in code are not links.
    #[test]
    fn dead_links_are_found_and_live_ones_pass() {
        let dir = tempfile::tempdir().unwrap();
        let page = dir.path().join("a.md");
        std::fs::write(
            dir.path().join("b.md"),
            "# The redirect and the node's firewall\n## Flags\n## Flags\n",
        )
        .unwrap();
        std::fs::write(
            &page,
            "# Top\n[ok](b.md#the-redirect-and-the-nodes-firewall) [ok](b.md#flags-1) \
             [ok](#top) [web](https://example.org/x#y)\n[gone](c.md) [bad](b.md#nope) \
             `[code](d.md)`\n```\n[fenced](e.md)\n```\n",
        )
        .unwrap();
        let dead: Vec<String> = (dead_links(&[page]).into_iter())
            .map(|d| d.target)
            .collect();
        assert_eq!(dead, ["c.md", "b.md#nope"]);
    }
}
