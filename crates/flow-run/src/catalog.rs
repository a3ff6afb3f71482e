//! The flows a daemon offers by name: loaded once at start from the flows
//! directory (`*.json` and `*.toml` files, each one flow IR, and `*.lua`
//! scripts producing one when the caller brings a Lua loader), each checked
//! against the IR (a document of the wrong shape named by the JSON pointer
//! of the place the IR's schema rejects, whatever its format) and given its
//! content hash. A run pins the hashes of its flow and of every flow it
//! calls, so editing a file never disturbs a run in flight.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use serde_json::Value;

use swarmd_flow::{Flow, Node, content_hash};

/// Longest flow file read, in bytes.
pub const MAX_FLOW_FILE_BYTES: u64 = 1024 * 1024;
/// Most flow files in the directory.
pub const MAX_FLOW_FILES: usize = 1_000;

/// Turns a flow script (its path and text) into flow IR, or says why not.
pub type LuaLoader<'a> = dyn Fn(&Path, &str) -> Result<Value, String> + 'a;

/// One flow the daemon offers.
#[derive(Debug, Clone)]
pub struct Entry {
    pub flow: Arc<Flow>,
    pub hash: String,
    /// Where it came from (`file:<path>`, or `inline`).
    pub source: String,
}

/// Flows by name.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    flows: BTreeMap<String, Entry>,
    /// The file stems of the flow files that could not be read: the names
    /// their flows most likely have, so that a flow calling one is not
    /// also reported as calling an unknown flow.
    unread: std::collections::BTreeSet<String>,
}

impl Catalog {
    /// Every `*.json` and `*.toml` flow in `dir` (none when it does not
    /// exist). Every problem is reported at once, each naming its file.
    pub fn load_dir(dir: &Path) -> Result<Catalog, Vec<String>> {
        Catalog::load(dir, None)
    }

    /// Like [`Catalog::load_dir`], and every `*.lua` file too: `lua` gets its
    /// path and text and returns the flow IR the script produces, or the
    /// message of why it produced none.
    pub fn load_dir_with(dir: &Path, lua: &LuaLoader<'_>) -> Result<Catalog, Vec<String>> {
        Catalog::load(dir, Some(lua))
    }

    /// Like [`Catalog::load_dir_with`], but the flows that were read come
    /// back beside the problems of the files that were not, so that a
    /// caller can lint them too and name every problem at once.
    pub fn read_dir_with(dir: &Path, lua: &LuaLoader<'_>) -> (Catalog, Vec<String>) {
        Catalog::read(dir, Some(lua))
    }

    fn load(dir: &Path, lua: Option<&LuaLoader<'_>>) -> Result<Catalog, Vec<String>> {
        let (catalog, problems) = Catalog::read(dir, lua);
        if problems.is_empty() {
            Ok(catalog)
        } else {
            Err(problems)
        }
    }

    fn read(dir: &Path, lua: Option<&LuaLoader<'_>>) -> (Catalog, Vec<String>) {
        let mut catalog = Catalog::default();
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return (catalog, Vec::new()),
            Err(e) => return (catalog, vec![format!("{}: {e}", dir.display())]),
        };
        let mut paths: Vec<_> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| match p.extension().and_then(|e| e.to_str()) {
                Some("json" | "toml") => true,
                Some("lua") => lua.is_some(),
                _ => false,
            })
            .collect();
        paths.sort();
        let mut problems = Vec::new();
        if paths.len() > MAX_FLOW_FILES {
            problems.push(format!(
                "{}: {} flow files, at most {MAX_FLOW_FILES} are read",
                dir.display(),
                paths.len()
            ));
            paths.truncate(MAX_FLOW_FILES);
        }
        for path in paths {
            match read_flow(&path, lua) {
                Ok(flow) => {
                    let source = format!("file:{}", path.display());
                    if let Some(other) = catalog.flows.get(&flow.name) {
                        problems.push(format!(
                            "{}: flow {} is also defined in {}",
                            path.display(),
                            flow.name,
                            other.source
                        ));
                        continue;
                    }
                    catalog.insert(flow, source);
                }
                Err(e) => {
                    if let Some(stem) = path.file_stem() {
                        catalog.unread.insert(stem.to_string_lossy().into_owned());
                    }
                    problems.push(format!("{}: {e}", path.display()));
                }
            }
        }
        (catalog, problems)
    }

    /// Adds (or replaces) a flow.
    pub fn insert(&mut self, flow: Flow, source: String) {
        let hash = content_hash(&flow);
        self.flows.insert(
            flow.name.clone(),
            Entry {
                flow: Arc::new(flow),
                hash,
                source,
            },
        );
    }

    pub fn get(&self, name: &str) -> Option<&Entry> {
        self.flows.get(name)
    }

    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.flows.values()
    }

    pub fn names(&self) -> impl Iterator<Item = &String> {
        self.flows.keys()
    }

    /// The file stems of the files a directory's read could not read.
    pub fn unread(&self) -> impl Iterator<Item = &String> {
        self.unread.iter()
    }

    pub fn len(&self) -> usize {
        self.flows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.flows.is_empty()
    }

    /// Every flow `flow` calls, directly or through others, by name; the
    /// name of the first one missing when one is.
    pub fn called_by(&self, flow: &Flow) -> Result<BTreeMap<String, Entry>, String> {
        let mut found = BTreeMap::new();
        let mut todo = calls(&flow.body);
        while let Some(name) = todo.pop() {
            if found.contains_key(&name) {
                continue;
            }
            let entry = self.flows.get(&name).ok_or_else(|| name.clone())?;
            todo.extend(calls(&entry.flow.body));
            found.insert(name, entry.clone());
        }
        Ok(found)
    }
}

/// The catalog's flows are the ones a run calls, so lint counts their
/// steps and follows their calls.
impl swarmd_flow::lint::Callees for Catalog {
    fn callee(&self, name: &str) -> Option<&Flow> {
        self.flows.get(name).map(|entry| &*entry.flow)
    }
}

/// The flow names a graph's `call` nodes name.
fn calls(node: &Node) -> Vec<String> {
    let mut out = Vec::new();
    if let Node::Call { flow, .. } = node {
        out.push(flow.clone());
    }
    for (_, child) in node.children() {
        out.extend(calls(child));
    }
    out
}

fn read_flow(path: &Path, lua: Option<&LuaLoader<'_>>) -> Result<Flow, String> {
    let size = std::fs::metadata(path).map_err(|e| e.to_string())?.len();
    if size > MAX_FLOW_FILE_BYTES {
        return Err(format!(
            "{size} bytes, at most {MAX_FLOW_FILE_BYTES} are read"
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    match (path.extension().and_then(|e| e.to_str()), lua) {
        (Some("toml"), _) => {
            let value: toml::Value = toml::from_str(&text).map_err(|e| e.to_string())?;
            let json = serde_json::to_value(value).map_err(|e| e.to_string())?;
            crate::flow_from_value(&json)
        }
        (Some("lua"), Some(lua)) => {
            let json = lua(path, &text)?;
            crate::flow_from_value(&json)
                .map_err(|e| format!("the script's table is not a flow: {e}"))
        }
        // Syntax errors by line and column; a document of the wrong shape
        // by the pointer of the place the IR's schema rejects.
        _ => {
            let json: Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
            crate::flow_from_value(&json)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_of_json_and_toml_flows_loads_with_every_problem_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("a.json"),
            r#"{"name": "a", "body": {"kind": "call", "flow": "b",
                "in": {"op": "lit", "value": 1}, "out": {"op": "path", "at": "$.r"}}}"#,
        )
        .unwrap();
        std::fs::write(
            dir.path().join("b.toml"),
            "name = \"b\"\n[body]\nkind = \"let\"\nat = { op = \"path\", at = \"$.x\" }\nvalue = { op = \"lit\", value = 2 }\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("notes.txt"), "ignored").unwrap();
        let catalog = Catalog::load_dir(dir.path()).unwrap();
        assert_eq!(catalog.names().collect::<Vec<_>>(), ["a", "b"]);
        let a = catalog.get("a").unwrap();
        assert!(a.hash.starts_with("sha256:"));
        let called = catalog.called_by(&a.flow).unwrap();
        assert_eq!(called.keys().collect::<Vec<_>>(), ["b"]);

        std::fs::write(dir.path().join("c.json"), r#"{"name": "c", "bodyy": 1}"#).unwrap();
        std::fs::write(
            dir.path().join("d.json"),
            r#"{"name": "a", "body": {"kind": "seq", "children": []}}"#,
        )
        .unwrap();
        let problems = Catalog::load_dir(dir.path()).unwrap_err();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("c.json"), "{problems:?}");
        assert!(problems[1].contains("also defined"), "{problems:?}");
    }

    #[test]
    fn lua_files_load_through_the_loader_with_their_problems_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("good.lua"), "good").unwrap();
        std::fs::write(dir.path().join("bad.lua"), "bad").unwrap();
        std::fs::write(dir.path().join("odd.lua"), "odd").unwrap();
        // Without a loader, scripts are not flow files.
        assert!(Catalog::load_dir(dir.path()).unwrap().is_empty());

        let loader = |path: &Path, text: &str| -> Result<Value, String> {
            assert!(path.ends_with(format!("{text}.lua")));
            match text {
                "good" => Ok(serde_json::json!({"name": "g", "body":
                    {"kind": "seq", "children": []}})),
                "odd" => Ok(serde_json::json!({"name": "o", "bodyy": {}})),
                _ => Err("lua error: bad.lua:1: boom".into()),
            }
        };
        let problems = Catalog::load_dir_with(dir.path(), &loader).unwrap_err();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(
            problems[0].ends_with("bad.lua: lua error: bad.lua:1: boom"),
            "{problems:?}"
        );
        assert!(
            problems[1].contains(
                "odd.lua: the script's table is not a flow: /bodyy: unknown field `bodyy`"
            ),
            "{problems:?}"
        );

        std::fs::remove_file(dir.path().join("bad.lua")).unwrap();
        std::fs::remove_file(dir.path().join("odd.lua")).unwrap();
        let catalog = Catalog::load_dir_with(dir.path(), &loader).unwrap();
        let entry = catalog.get("g").unwrap();
        assert!(entry.source.ends_with("good.lua"), "{}", entry.source);
    }

    #[test]
    fn a_json_file_of_the_wrong_shape_is_named_by_pointer_and_bad_syntax_by_line() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("shape.json"),
            r#"{"name": "shape", "body": {"kind": "seq", "children": [
                {"kind": "step", "ref": "coder", "out": {"op": "path", "at": "$.r"}}]}}"#,
        )
        .unwrap();
        std::fs::write(
            dir.path().join("syntax.json"),
            "{\"name\": \"syntax\",\n  \"body\": }",
        )
        .unwrap();
        let problems = Catalog::load_dir(dir.path()).unwrap_err();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(
            problems[0].contains("shape.json: /body/children/0: ")
                && problems[0].contains("\"in\""),
            "{problems:?}"
        );
        assert!(
            problems[1].contains("syntax.json: ") && problems[1].contains("line 2 column"),
            "{problems:?}"
        );
    }

    #[test]
    fn a_missing_directory_is_an_empty_catalog() {
        let dir = tempfile::tempdir().unwrap();
        assert!(
            Catalog::load_dir(&dir.path().join("none"))
                .unwrap()
                .is_empty()
        );
    }
}
