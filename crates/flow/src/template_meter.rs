//! What a template's work may cost beyond its instruction count.
//!
//! minijinja's fuel counts instructions, but one instruction can do work
//! that grows with a value: a filter (`sort`, `unique`, `string`, `map`…)
//! over a list of a million items, or an `in` or `==` over one. A loop of
//! such instructions over a large run variable would hold an async worker
//! for hours. So a rendering is bounded twice:
//!
//! - every filter is charged the size of the value it is given (about one
//!   unit per item and per 8 bytes of text, times the log of the item count
//!   for the sorting ones), and a rendering's filters may spend at most
//!   [`FILTER_WORK`] units;
//! - the fuel is scaled down for templates that name large variables: the
//!   instructions times the size of the variables the template names stay
//!   under [`INSTRUCTION_WORK`] (full fuel up to about 2 000 units of
//!   them, 200 instructions for a million-item list).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use minijinja::value::{Rest, ValueKind};
use minijinja::{Environment, Error, ErrorKind, State, Value as Jinja};
use serde_json::Value;

/// Units of work one rendering's filters may spend.
pub(super) const FILTER_WORK: u64 = 20_000_000;
/// Instructions times the size of the named variables, at most.
pub(super) const INSTRUCTION_WORK: u64 = 200_000_000;
/// The fuel of a template over the largest variables allowed: enough to
/// pick a few fields of them.
const MIN_FUEL: u64 = 100;
/// The filters whose cost is a sort of their input.
const SORTING: &[&str] = &["sort", "unique", "dictsort", "groupby"];

/// The work a rendering's filters have spent, shared by their wrappers.
#[derive(Debug, Clone, Default)]
pub(super) struct Meter(Arc<AtomicU64>);

impl Meter {
    /// Adds `units`; an error once the rendering has spent more than
    /// [`FILTER_WORK`].
    fn charge(&self, filter: &str, units: u64) -> Result<(), Error> {
        let spent = self
            .0
            .fetch_add(units, Ordering::Relaxed)
            .saturating_add(units);
        if spent <= FILTER_WORK {
            return Ok(());
        }
        Err(Error::new(
            ErrorKind::InvalidOperation,
            format!(
                "the template's filters (`{filter}` last) would do more than {FILTER_WORK} units \
                 of work (one per item or 8 bytes of the values they are given): give them \
                 smaller values, picked with a path expression first"
            ),
        ))
    }
}

/// The fuel for a template naming `names` of the context `ctx`: `full`,
/// or less when the named variables are large (see the module's head).
pub(super) fn fuel(full: u64, ctx: &Value, names: impl IntoIterator<Item = String>) -> u64 {
    let cap = INSTRUCTION_WORK / MIN_FUEL;
    let mut size = 0u64;
    for name in names {
        if let Some(value) = ctx.get(&name) {
            size = size.saturating_add(json_size(value, cap));
        }
        if size >= cap {
            break;
        }
    }
    (INSTRUCTION_WORK / size.max(1)).clamp(MIN_FUEL, full)
}

/// Replaces each filter of `filters` with one charging `meter` the size of
/// its input before it runs the builtin, kept under a name no template
/// can write (`raw:<name>`).
pub(super) fn meter_filters(
    env: &mut Environment<'static>,
    filters: &[&'static str],
    meter: &Meter,
) {
    register_raw(env);
    for name in filters.iter().copied().filter(|name| *name != "join") {
        let meter = meter.clone();
        let raw = format!("raw:{name}");
        let sorting = SORTING.contains(&name);
        env.add_filter(name, move |state: &State, args: Rest<Jinja>| {
            let size = args.0.first().map_or(1, |input| size(input, FILTER_WORK));
            let units = if sorting {
                size.saturating_mul(u64::from(size.max(2).ilog2()))
            } else {
                size
            };
            meter.charge(name, units)?;
            state.apply_filter(&raw, &args.0)
        });
    }
}

/// `join`'s charge: the size of the values it joins.
pub(super) fn charge_join(meter: &Meter, values: &Jinja) -> Result<(), Error> {
    meter.charge("join", size(values, FILTER_WORK))
}

/// The builtin filters under `raw:` names.
fn register_raw(env: &mut Environment<'static>) {
    use minijinja::filters as f;
    env.add_filter("raw:abs", f::abs);
    env.add_filter("raw:attr", f::attr);
    env.add_filter("raw:bool", f::bool);
    env.add_filter("raw:capitalize", f::capitalize);
    env.add_filter("raw:count", f::length);
    env.add_filter("raw:d", f::default);
    env.add_filter("raw:default", f::default);
    env.add_filter("raw:dictsort", f::dictsort);
    env.add_filter("raw:first", f::first);
    env.add_filter("raw:float", f::float);
    env.add_filter("raw:groupby", f::groupby);
    env.add_filter("raw:int", f::int);
    env.add_filter("raw:items", f::items);
    env.add_filter("raw:last", f::last);
    env.add_filter("raw:length", f::length);
    env.add_filter("raw:lower", f::lower);
    env.add_filter("raw:map", f::map);
    env.add_filter("raw:max", f::max);
    env.add_filter("raw:min", f::min);
    env.add_filter("raw:reject", f::reject);
    env.add_filter("raw:rejectattr", f::rejectattr);
    env.add_filter("raw:reverse", f::reverse);
    env.add_filter("raw:round", f::round);
    env.add_filter("raw:safe", f::safe);
    env.add_filter("raw:select", f::select);
    env.add_filter("raw:selectattr", f::selectattr);
    env.add_filter("raw:slice", f::slice);
    env.add_filter("raw:sort", f::sort);
    env.add_filter("raw:string", f::string);
    env.add_filter("raw:sum", f::sum);
    env.add_filter("raw:title", f::title);
    env.add_filter("raw:trim", f::trim);
    env.add_filter("raw:unique", f::unique);
    env.add_filter("raw:upper", f::upper);
}

/// A template value's size in units: one per value, and one more per 8
/// bytes of text; counted no further than past `cap`.
fn size(value: &Jinja, cap: u64) -> u64 {
    let mut total = 0u64;
    let mut pending = vec![value.clone()];
    while let Some(value) = pending.pop() {
        total = total.saturating_add(1);
        match value.kind() {
            ValueKind::String => {
                let bytes = value.as_str().map_or(0, str::len);
                total = total.saturating_add(bytes as u64 / 8);
            }
            ValueKind::Bytes => {
                let bytes = value.as_bytes().map_or(0, <[u8]>::len);
                total = total.saturating_add(bytes as u64 / 8);
            }
            ValueKind::Seq | ValueKind::Map | ValueKind::Iterable => {
                let is_map = value.kind() == ValueKind::Map;
                if let Ok(items) = value.try_iter() {
                    for item in items {
                        if total.saturating_add(pending.len() as u64) > cap {
                            break;
                        }
                        if is_map && let Ok(entry) = value.get_item(&item) {
                            pending.push(entry);
                        }
                        pending.push(item);
                    }
                }
            }
            _ => {}
        }
        if total.saturating_add(pending.len() as u64) > cap {
            return cap.saturating_add(1);
        }
    }
    total
}

/// A run variable's size in the same units, counted no further than past
/// `cap`.
fn json_size(value: &Value, cap: u64) -> u64 {
    let mut total = 0u64;
    let mut pending = vec![value];
    while let Some(value) = pending.pop() {
        total = total.saturating_add(1);
        match value {
            Value::String(text) => total = total.saturating_add(text.len() as u64 / 8),
            Value::Array(items) => pending.extend(items),
            Value::Object(map) => {
                total = total.saturating_add(map.len() as u64);
                pending.extend(map.values());
            }
            _ => {}
        }
        if total.saturating_add(pending.len() as u64) > cap {
            return cap.saturating_add(1);
        }
    }
    total
}
