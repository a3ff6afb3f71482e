//! The built-in tools, each declared once as a `ToolEntry`: the `Tool`
//! `tools/list` shows (name, description, schemas, annotations) and the
//! function `tools/call` runs for that name. The verb modules declare their
//! entries; `Registry` holds them in list order with an index by name, built
//! once per daemon and shared by every connection.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use rmcp::RoleServer;
use rmcp::handler::server::common::{schema_for_input, schema_for_output};
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use rmcp::service::RequestContext;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::json;

use super::{Outcome, arguments, bearer_of, schema};
use swarmd_api::app::AppState;
use swarmd_api::http::auth::Caller;

/// One call of a built-in tool: what its function may use.
pub(super) struct Call<'a> {
    pub(super) state: &'a AppState,
    /// The caller the `/mcp` route authenticated.
    pub(super) caller: &'a Caller,
    /// The arguments, already within the nesting bound.
    pub(super) args: Option<JsonObject>,
    /// The request, for progress notifications and cancellation.
    pub(super) context: &'a RequestContext<RoleServer>,
}

impl<'a> Call<'a> {
    /// The bearer the `/mcp` request carried, for a call another cluster
    /// node serves.
    pub(super) fn bearer(&self) -> Option<&'a str> {
        bearer_of(self.context)
    }
}

/// The function behind a built-in tool whose arguments are `I`.
pub(super) type Handler<I> = for<'a> fn(Call<'a>, I) -> BoxFuture<'a, Outcome>;

/// A tool's function with its arguments' decoding: the arguments are
/// read into the type whose schema `tools/list` shows, once, here.
type Decoding = Box<dyn for<'a> Fn(Call<'a>) -> BoxFuture<'a, Outcome> + Send + Sync>;

/// A built-in tool: what `tools/list` shows and what `tools/call` runs.
pub(super) struct ToolEntry {
    tool: Tool,
    call: Decoding,
}

impl ToolEntry {
    pub(super) fn tool(&self) -> &Tool {
        &self.tool
    }

    pub(super) fn call<'a>(&self, call: Call<'a>) -> BoxFuture<'a, Outcome> {
        (self.call)(call)
    }
}

/// A tool whose input is `I` and whose structured output is `O`, served by
/// `call` with the arguments read into `I` (refused with a `bad_request`
/// naming the field when they do not fit it).
pub(super) fn entry<I, O>(
    name: &'static str,
    description: &'static str,
    read_only: bool,
    call: Handler<I>,
) -> ToolEntry
where
    I: JsonSchema + DeserializeOwned + Send + 'static,
    O: JsonSchema + 'static,
{
    let call: Decoding = Box::new(move |mut c: Call<'_>| -> BoxFuture<'_, Outcome> {
        match arguments::<I>(c.args.take()) {
            Ok(args) => call(c, args),
            Err(refused) => Box::pin(std::future::ready(Err(refused))),
        }
    });
    // Our argument types derive their schemas; a failure is a bug caught by
    // the catalogue test, so the fallback (any object) never ships.
    let input = schema_for_input::<I>()
        .unwrap_or_else(|_| Arc::new(JsonObject::from_iter([("type".into(), json!("object"))])));
    let tool = Tool::new(name, description, schema::standard(&input))
        .with_raw_output_schema(schema::standard(&schema_for_output::<O>()))
        .with_annotations(ToolAnnotations::new().read_only(read_only));
    ToolEntry { tool, call }
}

/// The built-in tools in `tools/list` order, found by name for `tools/call`.
pub(crate) struct Registry {
    entries: Vec<ToolEntry>,
    /// Each name's position in `entries`.
    by_name: HashMap<Cow<'static, str>, usize>,
}

impl Registry {
    /// The registry of `declared`, in its order. A name declared twice
    /// keeps its first entry only, so what is listed is what is called; the
    /// registry test refuses duplicates.
    pub(super) fn new(declared: Vec<ToolEntry>) -> Self {
        let mut entries = Vec::with_capacity(declared.len());
        let mut by_name = HashMap::with_capacity(declared.len());
        for entry in declared {
            if !by_name.contains_key(&entry.tool.name) {
                by_name.insert(entry.tool.name.clone(), entries.len());
                entries.push(entry);
            }
        }
        Registry { entries, by_name }
    }

    /// The tools, in `tools/list` order.
    pub(super) fn tools(&self) -> impl Iterator<Item = &Tool> {
        self.entries.iter().map(ToolEntry::tool)
    }

    /// The entry named `name`, if it is a built-in tool.
    pub(super) fn get(&self, name: &str) -> Option<&ToolEntry> {
        self.by_name.get(name).and_then(|&at| self.entries.get(at))
    }

    pub(super) fn contains(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.tools().map(|tool| &tool.name))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::Value;

    use super::super::{builtins, catalogue};
    use super::*;

    #[test]
    fn every_builtin_name_is_declared_once() {
        for aliases in [false, true] {
            let mut counts = BTreeMap::<String, usize>::new();
            for entry in builtins(aliases) {
                *counts.entry(entry.tool().name.to_string()).or_default() += 1;
            }
            let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
            assert!(twice.is_empty(), "declared more than once: {twice:?}");
        }
    }

    #[test]
    fn every_listed_builtin_tool_is_the_one_a_call_of_its_name_runs() {
        for aliases in [false, true] {
            let registry = catalogue(aliases);
            assert_eq!(registry.tools().count(), builtins(aliases).len());
            for tool in registry.tools() {
                let entry = registry.get(&tool.name);
                let routed = entry.map(|entry| std::ptr::from_ref(entry.tool()));
                assert_eq!(routed, Some(std::ptr::from_ref(tool)), "{}", tool.name);
            }
            let upstream = registry.tools().filter(|t| t.name.starts_with("mse_"));
            assert_eq!(upstream.count(), if aliases { 6 } else { 0 });
            assert_eq!(registry.get("mse_ack").is_some(), aliases);
            assert!(registry.get("no_such_tool").is_none());
        }
    }

    #[test]
    fn a_name_declared_twice_is_listed_and_called_as_its_first_entry() {
        let first: Handler<JsonObject> = |_, _| Box::pin(async { Ok(Value::from(1)) });
        let second: Handler<JsonObject> = |_, _| Box::pin(async { Ok(Value::from(2)) });
        let registry = Registry::new(vec![
            entry::<JsonObject, JsonObject>("twice", "the first declaration", true, first),
            entry::<JsonObject, JsonObject>("once", "the only declaration", true, second),
            entry::<JsonObject, JsonObject>("twice", "the second declaration", true, second),
        ]);
        let names: Vec<_> = registry.tools().map(|t| t.name.to_string()).collect();
        assert_eq!(names, ["twice", "once"]);
        let kept = registry.get("twice").map(|e| e.tool().description.clone());
        assert_eq!(kept, Some(Some("the first declaration".into())));
    }
}
