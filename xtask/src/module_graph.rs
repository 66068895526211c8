//! Which files of a crate import each other in a loop. A file imports the
//! file that defines what it names: a `use`, or a path in code that starts
//! at `crate`, `super`, `self`, a child module or a name it imported. A
//! name re-exported with `use` is followed to the file that defines it, so
//! a loop through a re-export counts, and a module that only re-exports
//! does not stand in for the files behind it. A child module is a part of
//! its parent (it sees the parent's private items), so what a file takes
//! from an enclosing module's file is not an import between modules.
//!
//! Paths inside macro calls are not seen (`syn` leaves them as tokens);
//! every module here also names what it uses in a `use`.
//!
//! Hand-written over `syn` because no maintained crate answers this for
//! one crate's files (cargo-modules draws the module tree, not the file
//! graph, and needs rust-analyzer).

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

use syn::visit_mut::VisitMut;

/// A module: the file it is written in, its child modules and what it
/// imports by name.
#[derive(Default)]
struct Module {
    file: PathBuf,
    children: BTreeSet<String>,
    /// Imported name -> the absolute path it names (`crate` is `[]`).
    aliases: BTreeMap<String, Vec<String>>,
    /// `use path::*`: absolute paths of the modules glob-imported.
    globs: Vec<Vec<String>>,
    /// Paths in this module's code and `use` items, relative as written.
    references: Vec<Vec<String>>,
}

/// The crate's modules, by absolute path.
#[derive(Default)]
pub struct Crate {
    modules: BTreeMap<Vec<String>, Module>,
    /// The modules declared `#[cfg(test)]`.
    tests: BTreeSet<Vec<String>>,
}

impl Crate {
    /// Reads the crate whose root file is `root` (`lib.rs` or `main.rs`).
    pub fn read(root: &Path) -> anyhow::Result<Self> {
        let mut krate = Crate::default();
        krate.read_file(root, Vec::new(), root.parent().unwrap_or(Path::new(".")))?;
        Ok(krate)
    }

    fn read_file(&mut self, file: &Path, path: Vec<String>, dir: &Path) -> anyhow::Result<()> {
        let text = std::fs::read_to_string(file)
            .map_err(|e| anyhow::anyhow!("reading {}: {e}", file.display()))?;
        let parsed = syn::parse_file(&text)
            .map_err(|e| anyhow::anyhow!("parsing {}: {e}", file.display()))?;
        self.read_items(file, path, dir, parsed.items)
    }

    fn read_items(
        &mut self,
        file: &Path,
        path: Vec<String>,
        dir: &Path,
        items: Vec<syn::Item>,
    ) -> anyhow::Result<()> {
        let mut module = Module {
            file: file.to_owned(),
            ..Module::default()
        };
        // Children first: a `use` may name one declared below it.
        for item in &items {
            if let syn::Item::Mod(m) = item {
                module.children.insert(m.ident.to_string());
            }
        }
        let mut nested = Vec::new();
        for mut item in items {
            match item {
                syn::Item::Mod(m) => {
                    if m.attrs.iter().any(is_cfg_test) {
                        let mut child = path.clone();
                        child.push(m.ident.to_string());
                        self.tests.insert(child);
                    }
                    nested.push((m.ident.to_string(), m.content.map(|(_, items)| items)));
                }
                syn::Item::Use(ref u) => {
                    let mut leaves = Vec::new();
                    use_leaves(&u.tree, Vec::new(), &mut leaves);
                    for (written, leaf) in leaves {
                        module.references.push(written.clone());
                        let absolute = absolute(&path, &module.children, &written);
                        match leaf {
                            Leaf::Name(name) => {
                                if let Some(absolute) = absolute {
                                    module.aliases.insert(name, absolute);
                                }
                            }
                            Leaf::Glob => module.globs.extend(absolute),
                        }
                    }
                }
                _ => {
                    let mut paths = Paths::default();
                    paths.visit_item_mut(&mut item);
                    module.references.extend(paths.0);
                }
            }
        }
        self.modules.insert(path.clone(), module);
        for (name, inline) in nested {
            let mut child = path.clone();
            child.push(name.clone());
            match inline {
                Some(items) => self.read_items(file, child, &dir.join(&name), items)?,
                None => {
                    let flat = dir.join(format!("{name}.rs"));
                    let (found, below) = if flat.exists() {
                        (flat, dir.join(&name))
                    } else {
                        (dir.join(&name).join("mod.rs"), dir.join(&name))
                    };
                    self.read_file(&found, child, &below)?;
                }
            }
        }
        Ok(())
    }

    /// The file that defines what `written`, as written in module `from`,
    /// names; `None` outside the crate.
    fn target(&self, from: &[String], written: &[String]) -> Option<&Path> {
        let module = self.modules.get(from)?;
        let absolute = match written.first().map(String::as_str) {
            Some(first) if module.aliases.contains_key(first) => {
                let mut path = module.aliases[first].clone();
                path.extend(written[1..].iter().cloned());
                path
            }
            _ => absolute(from, &module.children, written)?,
        };
        self.walk(&absolute, 0)
    }

    /// Follows an absolute path through modules and re-exports to the file
    /// of the item it ends at.
    fn walk(&self, path: &[String], depth: usize) -> Option<&Path> {
        if depth > 16 {
            return None;
        }
        let mut current: Vec<String> = Vec::new();
        for (i, segment) in path.iter().enumerate() {
            let module = self.modules.get(&current)?;
            if module.children.contains(segment) {
                current.push(segment.clone());
                continue;
            }
            if let Some(target) = module.aliases.get(segment) {
                let mut next = target.clone();
                next.extend(path[i + 1..].iter().cloned());
                return self.walk(&next, depth + 1);
            }
            for glob in &module.globs {
                let mut next = glob.clone();
                next.extend(path[i..].iter().cloned());
                if let Some(found) = self.walk_glob(&next, depth + 1) {
                    return Some(found);
                }
            }
            return Some(&module.file);
        }
        self.modules.get(&current).map(|m| m.file.as_path())
    }

    /// [`Crate::walk`] for a name that may or may not come through a glob:
    /// only a name the glob's module has counts.
    fn walk_glob(&self, path: &[String], depth: usize) -> Option<&Path> {
        let (name, module) = path.split_last()?;
        let m = self.modules.get(module)?;
        (m.children.contains(name) || m.aliases.contains_key(name))
            .then(|| self.walk(path, depth))
            .flatten()
    }

    /// Each file's own module: the outermost one written in it.
    fn owners(&self) -> BTreeMap<&Path, &[String]> {
        let mut owner: BTreeMap<&Path, &[String]> = BTreeMap::new();
        for (path, module) in &self.modules {
            owner
                .entry(module.file.as_path())
                .or_insert(path.as_slice());
        }
        owner
    }

    /// Every file's imports of other files.
    pub fn edges(&self) -> BTreeMap<&Path, BTreeSet<&Path>> {
        let owner = self.owners();
        let mut edges: BTreeMap<&Path, BTreeSet<&Path>> = BTreeMap::new();
        for (path, module) in &self.modules {
            let from = module.file.as_path();
            let entry = edges.entry(from).or_default();
            let targets = (module.references.iter())
                .filter_map(|written| self.target(path, written))
                .chain(module.globs.iter().filter_map(|g| self.walk(g, 0)));
            for to in targets {
                let enclosing = owner.get(to).is_some_and(|m| path.starts_with(m));
                if to != from && !enclosing {
                    entry.insert(to);
                }
            }
        }
        edges
    }

    /// The groups of sibling modules that import each other in a loop,
    /// each module standing for its file and every file below it but its
    /// tests: `a` and `b` when a file of `a` or under it imports one of `b`
    /// or under it, and the other way round, even if no two files make a
    /// loop. Each pair by the modules' paths, in order.
    pub fn module_cycles(&self) -> Vec<Vec<String>> {
        let owner = self.owners();
        // Tests import what they test from anywhere; the layering is the
        // code's.
        let in_test = |m: &[String]| self.tests.iter().any(|t| m.starts_with(t));
        let mut siblings: BTreeMap<&[String], BTreeSet<&[String]>> = BTreeMap::new();
        for (from, targets) in self.edges() {
            let Some(&a) = owner.get(from).filter(|a| !in_test(a)) else {
                continue;
            };
            for to in targets {
                let Some(&b) = owner.get(to).filter(|b| !in_test(b)) else {
                    continue;
                };
                let common = a.iter().zip(b).take_while(|(x, y)| x == y).count();
                // One inside the other: a parent and its part.
                if common == a.len() || common == b.len() {
                    continue;
                }
                (siblings.entry(&a[..=common]).or_default()).insert(&b[..=common]);
            }
        }
        let mut pairs = Vec::new();
        for (a, targets) in &siblings {
            for b in targets {
                if a < b && siblings.get(b).is_some_and(|t| t.contains(a)) {
                    pairs.push(vec![a.join("::"), b.join("::")]);
                }
            }
        }
        pairs
    }

    /// The groups of files that import each other in a loop (strongly
    /// connected components of more than one file), each sorted.
    pub fn cycles(&self) -> Vec<Vec<PathBuf>> {
        let edges = self.edges();
        strongly_connected(&edges)
            .into_iter()
            .filter(|group| group.len() > 1)
            .map(|group| group.into_iter().map(Path::to_owned).collect())
            .collect()
    }
}

enum Leaf {
    Name(String),
    Glob,
}

/// `#[cfg(test)]`.
fn is_cfg_test(attr: &syn::Attribute) -> bool {
    matches!(&attr.meta, syn::Meta::List(list)
        if list.path.is_ident("cfg") && list.tokens.to_string() == "test")
}

/// Each leaf of a `use` tree: its path as written and the name it binds.
fn use_leaves(tree: &syn::UseTree, prefix: Vec<String>, out: &mut Vec<(Vec<String>, Leaf)>) {
    match tree {
        syn::UseTree::Path(p) => {
            let mut prefix = prefix;
            prefix.push(p.ident.to_string());
            use_leaves(&p.tree, prefix, out);
        }
        syn::UseTree::Name(n) if n.ident == "self" => {
            let name = prefix.last().cloned().unwrap_or_default();
            out.push((prefix, Leaf::Name(name)));
        }
        syn::UseTree::Name(n) => {
            let mut path = prefix;
            path.push(n.ident.to_string());
            out.push((path, Leaf::Name(n.ident.to_string())));
        }
        syn::UseTree::Rename(r) => {
            let mut path = prefix;
            if r.ident != "self" {
                path.push(r.ident.to_string());
            }
            out.push((path, Leaf::Name(r.rename.to_string())));
        }
        syn::UseTree::Glob(_) => out.push((prefix, Leaf::Glob)),
        syn::UseTree::Group(g) => {
            for tree in &g.items {
                use_leaves(tree, prefix.clone(), out);
            }
        }
    }
}

/// `written` made absolute from module `from`, if it starts at `crate`,
/// `super`, `self` or a child of `from`.
fn absolute(
    from: &[String],
    children: &BTreeSet<String>,
    written: &[String],
) -> Option<Vec<String>> {
    let mut base = from.to_vec();
    let mut rest = written;
    match written.first().map(String::as_str)? {
        "crate" => {
            base.clear();
            rest = &written[1..];
        }
        "self" => rest = &written[1..],
        "super" => {
            while rest.first().is_some_and(|s| s == "super") {
                base.pop()?;
                rest = &rest[1..];
            }
        }
        first if children.contains(first) => {}
        _ => return None,
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

/// Every path of two or more segments in an item's code.
#[derive(Default)]
struct Paths(Vec<Vec<String>>);

impl VisitMut for Paths {
    fn visit_path_mut(&mut self, path: &mut syn::Path) {
        if path.segments.len() > 1 && path.leading_colon.is_none() {
            self.0
                .push(path.segments.iter().map(|s| s.ident.to_string()).collect());
        }
        syn::visit_mut::visit_path_mut(self, path);
    }

    /// A `use` inside a function body.
    fn visit_item_use_mut(&mut self, item: &mut syn::ItemUse) {
        let mut leaves = Vec::new();
        use_leaves(&item.tree, Vec::new(), &mut leaves);
        self.0.extend(leaves.into_iter().map(|(path, _)| path));
    }
}

/// Tarjan's strongly connected components.
fn strongly_connected<T: Ord + Copy>(edges: &BTreeMap<T, BTreeSet<T>>) -> Vec<Vec<T>> {
    struct State<T> {
        index: BTreeMap<T, usize>,
        low: BTreeMap<T, usize>,
        stack: Vec<T>,
        on_stack: BTreeSet<T>,
        groups: Vec<Vec<T>>,
    }
    fn visit<T: Ord + Copy>(node: T, edges: &BTreeMap<T, BTreeSet<T>>, s: &mut State<T>) {
        let i = s.index.len();
        s.index.insert(node, i);
        s.low.insert(node, i);
        s.stack.push(node);
        s.on_stack.insert(node);
        for &next in edges.get(&node).into_iter().flatten() {
            if !s.index.contains_key(&next) {
                visit(next, edges, s);
                let low = s.low[&node].min(s.low[&next]);
                s.low.insert(node, low);
            } else if s.on_stack.contains(&next) {
                let low = s.low[&node].min(s.index[&next]);
                s.low.insert(node, low);
            }
        }
        if s.low[&node] == s.index[&node] {
            let mut group = Vec::new();
            while let Some(top) = s.stack.pop() {
                s.on_stack.remove(&top);
                group.push(top);
                if top == node {
                    break;
                }
            }
            group.sort();
            s.groups.push(group);
        }
    }
    let mut state = State {
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        groups: Vec::new(),
    };
    for &node in edges.keys() {
        if !state.index.contains_key(&node) {
            visit(node, edges, &mut state);
        }
    }
    state.groups
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A crate of `files` (path, text) in a temporary directory, read from
    /// its `lib.rs`; the directory lives as long as the first value.
    fn crate_of(files: &[(&str, &str)]) -> (tempfile::TempDir, Crate) {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            let path = dir.path().join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        let krate = Crate::read(&dir.path().join("lib.rs")).unwrap();
        (dir, krate)
    }

    fn cycles_of(root: &str) -> Vec<Vec<PathBuf>> {
        let root = crate::workspace_root().join(root);
        let krate = Crate::read(&root).unwrap();
        let base = root.parent().unwrap().to_owned();
        (krate.cycles().into_iter())
            .map(|group| {
                (group.into_iter())
                    .map(|f| f.strip_prefix(&base).unwrap_or(&f).to_owned())
                    .collect()
            })
            .collect()
    }

    /// Pairs of sibling modules of ssh-fwd that import each other, found
    /// when this check came: each is to be broken, and the list may only
    /// shrink (the test fails on a pair missing from it, and on a pair
    /// listed that is gone).
    /// `reservation/binding.rs` decides on a `World` and `reservation/
    /// watch.rs` feeds the world's dirty log, while the world is built of
    /// reservations' leases.
    const KNOWN_PAIRS: [[&str; 2]; 1] = [["controller::reservation", "controller::world"]];

    #[test]
    fn no_two_sibling_modules_import_each_other_through_their_files() {
        for root in [
            "ssh-fwd/src/lib.rs",
            "ssh-fwd-common/src/lib.rs",
            "ssh-fwd-ebpf/src/main.rs",
            "tests/src/lib.rs",
            "xtask/src/main.rs",
        ] {
            let krate = Crate::read(&crate::workspace_root().join(root)).unwrap();
            let pairs = krate.module_cycles();
            let known: Vec<Vec<String>> = match root {
                "ssh-fwd/src/lib.rs" => (KNOWN_PAIRS.iter())
                    .map(|p| p.iter().map(|m| (*m).to_owned()).collect())
                    .collect(),
                _ => Vec::new(),
            };
            assert_eq!(
                pairs, known,
                "{root}: sibling modules importing each other (left: found; a new pair is a \
                 layering loop to break, a known pair gone comes off KNOWN_PAIRS)"
            );
        }
    }

    #[test]
    fn no_two_files_of_ssh_fwd_import_each_other_in_a_loop() {
        let cycles = cycles_of("ssh-fwd/src/lib.rs");
        assert!(cycles.is_empty(), "import loops: {cycles:#?}");
    }

    #[test]
    fn no_two_files_of_the_other_crates_import_each_other_in_a_loop() {
        for root in [
            "ssh-fwd-common/src/lib.rs",
            "ssh-fwd-ebpf/src/main.rs",
            "tests/src/lib.rs",
            "tests/tests/main.rs",
            "xtask/src/main.rs",
        ] {
            let cycles = cycles_of(root);
            assert!(cycles.is_empty(), "{root}: import loops: {cycles:#?}");
        }
    }

    /// A loop that runs through a re-export is found, a file that only
    /// re-exports is not taken for the file behind it, and a child's use of
    /// its parent is no loop.
    #[test]
    fn a_loop_through_a_re_export_is_found() {
        let (dir, krate) = crate_of(&[
            ("lib.rs", "mod a;\nmod b;\nmod c;\n"),
            ("a.rs", "pub use inner::Thing;\nmod inner;\npub fn f() {}\n"),
            (
                "a/inner.rs",
                "pub struct Thing;\nfn g() { crate::b::h(); }\n",
            ),
            ("b.rs", "use crate::a::Thing;\npub fn h() {}\n"),
            (
                "c.rs",
                "mod d;\npub fn k() { super::a::f(); }\nfn m() { d::n(); }\n",
            ),
            ("c/d.rs", "pub fn n() { super::k(); }\n"),
        ]);
        let names: Vec<Vec<String>> = (krate.cycles().into_iter())
            .map(|group| {
                (group.into_iter())
                    .map(|f| f.strip_prefix(dir.path()).unwrap().display().to_string())
                    .collect()
            })
            .collect();
        assert_eq!(names, [["a/inner.rs", "b.rs"]]);
    }

    /// Two sibling modules whose files import each other only through
    /// their children are in a loop; a child's use of its parent is none.
    #[test]
    fn a_loop_between_sibling_modules_through_their_children_is_found() {
        let (_dir, krate) = crate_of(&[
            ("lib.rs", "mod plan;\nmod reservation;\nmod other;\n"),
            (
                "plan.rs",
                "pub use action::Action;\nmod action;\nmod serve;\n",
            ),
            ("plan/action.rs", "pub struct Action;\n"),
            (
                "plan/serve.rs",
                "fn f() { crate::reservation::upkeep::g(); }\n",
            ),
            ("reservation.rs", "pub mod upkeep;\n"),
            (
                "reservation/upkeep.rs",
                "use crate::plan::Action;\npub fn g() {}\n",
            ),
            ("other.rs", "mod part;\npub fn h() {}\n"),
            (
                "other/part.rs",
                "fn k() { super::h(); crate::plan::Action; }\n",
            ),
        ]);
        assert!(krate.cycles().is_empty(), "no two files make a loop");
        assert_eq!(krate.module_cycles(), [["plan", "reservation"]]);
    }
}
