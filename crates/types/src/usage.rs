//! What attempts cost (docs/tasks.md, Budgets): a worker reports usage as a
//! `progress` event of stage `usage` whose note is a JSON object
//! (docs/agents-cli.md, Usage), whatever produced it. Each note is the
//! attempt's usage so far, so the attempt keeps, per field, the largest
//! value any of its notes reported, and a note that says less changes
//! nothing. The task adds up its closed attempts; `policy.max_tokens` and
//! `policy.max_cost_usd` bound that sum plus the open attempt's usage
//! (`task::Policy::over_budget`, applied by the engine's `budget`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The progress stage a usage note has.
pub const USAGE_STAGE: &str = "usage";
/// Models kept per attempt; a note naming more adds only the first, by name.
pub const MAX_MODELS: usize = 16;
/// Characters kept of a session id, a CLI or a model name.
const NAME_CHARS: usize = 128;

/// One attempt's usage as its worker reported it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AttemptUsage {
    /// The CLI that reported it (`claude`, `codex`, `gemini`), when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cli: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turns: Option<u64>,
    #[serde(flatten)]
    pub totals: UsageTotals,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub models: BTreeMap<String, ModelUsage>,
}

/// Tokens by kind and cost: an attempt's, a task's, or an agent's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct UsageTotals {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    pub cost_usd: f64,
}

/// One model's share of an attempt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ModelUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_usd: f64,
}

/// A usage note as written: every field may be absent, and unknown fields
/// are ignored; a field of another type makes it no usage note.
#[derive(Debug, Default, Deserialize)]
struct Note {
    cli: Option<String>,
    session_id: Option<String>,
    turns: Option<u64>,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_read_tokens: Option<u64>,
    cache_write_tokens: Option<u64>,
    cost_usd: Option<f64>,
    #[serde(default)]
    models: BTreeMap<String, NoteModel>,
}

#[derive(Debug, Default, Deserialize)]
struct NoteModel {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cost_usd: Option<f64>,
}

impl UsageTotals {
    /// The tokens `policy.max_tokens` counts: input plus output, as the
    /// worker reports them. Cache reads and writes are not counted (Codex
    /// and Gemini count cached input inside `input_tokens` already).
    pub fn tokens(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }

    pub fn is_zero(&self) -> bool {
        *self == UsageTotals::default()
    }

    /// Adds `other` field by field.
    pub fn add(&mut self, other: &UsageTotals) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cache_read_tokens = self
            .cache_read_tokens
            .saturating_add(other.cache_read_tokens);
        self.cache_write_tokens = self
            .cache_write_tokens
            .saturating_add(other.cache_write_tokens);
        self.cost_usd += other.cost_usd;
    }

    /// What `self` has beyond `before`, field by field (never negative).
    pub fn since(&self, before: &UsageTotals) -> UsageTotals {
        UsageTotals {
            input_tokens: self.input_tokens.saturating_sub(before.input_tokens),
            output_tokens: self.output_tokens.saturating_sub(before.output_tokens),
            cache_read_tokens: self
                .cache_read_tokens
                .saturating_sub(before.cache_read_tokens),
            cache_write_tokens: self
                .cache_write_tokens
                .saturating_sub(before.cache_write_tokens),
            cost_usd: (self.cost_usd - before.cost_usd).max(0.0),
        }
    }
}

impl AttemptUsage {
    /// Folds one usage note in: each field keeps the largest value reported.
    /// Returns false, changing nothing, when the note is not a JSON object
    /// of the usage shape. A cost that is negative or not finite is ignored.
    pub fn fold_note(&mut self, note: &str) -> bool {
        let Ok(note) = serde_json::from_str::<Note>(note) else {
            return false;
        };
        let name = |s: String| s.chars().take(NAME_CHARS).collect::<String>();
        if let Some(cli) = note.cli {
            self.cli = Some(name(cli));
        }
        if let Some(id) = note.session_id {
            self.session_id = Some(name(id));
        }
        raise_opt(&mut self.turns, note.turns);
        let t = &mut self.totals;
        raise(&mut t.input_tokens, note.input_tokens);
        raise(&mut t.output_tokens, note.output_tokens);
        raise(&mut t.cache_read_tokens, note.cache_read_tokens);
        raise(&mut t.cache_write_tokens, note.cache_write_tokens);
        raise_cost(&mut t.cost_usd, note.cost_usd);
        for (model, usage) in note.models {
            let model = name(model);
            if !self.models.contains_key(&model) && self.models.len() >= MAX_MODELS {
                continue;
            }
            let kept = self.models.entry(model).or_default();
            raise(&mut kept.input_tokens, usage.input_tokens);
            raise(&mut kept.output_tokens, usage.output_tokens);
            raise_cost(&mut kept.cost_usd, usage.cost_usd);
        }
        true
    }

    /// The model the attempt's usage is counted under in metrics: the one
    /// with the most output tokens (ties to the first by name), or
    /// `unknown` when no note named one.
    pub fn main_model(&self) -> &str {
        self.models
            .iter()
            .fold(None, |best: Option<(&String, u64)>, (name, m)| match best {
                Some((_, most)) if most >= m.output_tokens => best,
                _ => Some((name, m.output_tokens)),
            })
            .map_or("unknown", |(name, _)| name.as_str())
    }

    pub fn is_empty(&self) -> bool {
        *self == AttemptUsage::default()
    }
}

fn raise(kept: &mut u64, reported: Option<u64>) {
    if let Some(v) = reported {
        *kept = (*kept).max(v);
    }
}

fn raise_opt(kept: &mut Option<u64>, reported: Option<u64>) {
    if let Some(v) = reported {
        *kept = Some(kept.map_or(v, |k| k.max(v)));
    }
}

fn raise_cost(kept: &mut f64, reported: Option<f64>) {
    if let Some(v) = reported.filter(|v| v.is_finite() && *v >= 0.0) {
        *kept = kept.max(v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_are_running_totals_and_the_largest_value_stays() {
        let mut usage = AttemptUsage::default();
        assert!(usage.fold_note(
            r#"{"cli":"claude","session_id":"s1","input_tokens":10,"output_tokens":5,
                "models":{"m1":{"input_tokens":10,"output_tokens":5}}}"#
        ));
        assert!(usage.fold_note(
            r#"{"cli":"claude","turns":2,"input_tokens":30,"output_tokens":20,
                "cache_read_tokens":7,"cost_usd":0.25,
                "models":{"m1":{"input_tokens":30,"output_tokens":20,"cost_usd":0.25}}}"#
        ));
        // A later note that says less (a running note without cost, or an
        // older total) lowers nothing.
        assert!(usage.fold_note(r#"{"input_tokens":12,"output_tokens":3}"#));
        assert_eq!(usage.session_id.as_deref(), Some("s1"));
        assert_eq!(usage.turns, Some(2));
        assert_eq!(
            usage.totals,
            UsageTotals {
                input_tokens: 30,
                output_tokens: 20,
                cache_read_tokens: 7,
                cache_write_tokens: 0,
                cost_usd: 0.25,
            }
        );
        assert_eq!(usage.totals.tokens(), 50);
        assert_eq!(usage.models["m1"].cost_usd, 0.25);
        assert_eq!(usage.main_model(), "m1");
    }

    #[test]
    fn a_note_of_another_shape_changes_nothing() {
        let mut usage = AttemptUsage::default();
        for note in [
            "not json",
            "[1, 2]",
            r#"{"input_tokens": -3}"#,
            r#"{"input_tokens": "many"}"#,
        ] {
            assert!(!usage.fold_note(note), "{note}");
        }
        assert!(usage.is_empty());
        // A cost that is no amount is ignored; the rest of the note counts.
        assert!(usage.fold_note(r#"{"output_tokens": 4, "cost_usd": -1.0}"#));
        assert_eq!(usage.totals.output_tokens, 4);
        assert_eq!(usage.totals.cost_usd, 0.0);
        assert_eq!(usage.main_model(), "unknown");
    }

    #[test]
    fn models_are_capped_and_names_bounded() {
        let mut usage = AttemptUsage::default();
        let models: serde_json::Map<String, serde_json::Value> = (0..40)
            .map(|i| (format!("m{i:02}"), serde_json::json!({"output_tokens": i})))
            .collect();
        let note = serde_json::json!({"models": models, "session_id": "x".repeat(1000)});
        assert!(usage.fold_note(&note.to_string()));
        assert_eq!(usage.models.len(), MAX_MODELS);
        assert_eq!(usage.session_id.as_ref().map(|s| s.len()), Some(NAME_CHARS));
        // Known models still take updates past the cap.
        assert!(usage.fold_note(r#"{"models":{"m00":{"output_tokens":99},"zz":{}}}"#));
        assert_eq!(usage.models["m00"].output_tokens, 99);
        assert!(!usage.models.contains_key("zz"));
        assert_eq!(usage.main_model(), "m00");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// Whatever a worker writes as a note, folding it never panics and
        /// never lowers what the attempt already counted.
        #[test]
        fn any_note_folds_without_lowering_the_usage(
            input in proptest::option::of(proptest::prelude::any::<u64>()),
            output in proptest::option::of(proptest::prelude::any::<i64>()),
            cost in proptest::option::of(proptest::prelude::any::<f64>()),
            noise in "\\PC{0,60}",
        ) {
            let mut usage = AttemptUsage::default();
            usage.fold_note(r#"{"input_tokens": 5, "output_tokens": 5, "cost_usd": 0.5}"#);
            let before = usage.totals;
            let note = serde_json::json!({
                "input_tokens": input, "output_tokens": output, "cost_usd": cost,
                "models": {noise.clone(): {"output_tokens": input}},
            });
            usage.fold_note(&note.to_string());
            usage.fold_note(&noise);
            proptest::prop_assert!(usage.totals.input_tokens >= before.input_tokens);
            proptest::prop_assert!(usage.totals.output_tokens >= before.output_tokens);
            proptest::prop_assert!(usage.totals.cost_usd >= before.cost_usd);
            proptest::prop_assert!(usage.totals.cost_usd.is_finite());
            proptest::prop_assert!(usage.models.len() <= MAX_MODELS);
        }
    }

    #[test]
    fn since_and_add_never_go_negative_or_wrap() {
        let a = UsageTotals {
            input_tokens: 5,
            cost_usd: 0.1,
            ..UsageTotals::default()
        };
        let b = UsageTotals {
            input_tokens: 9,
            output_tokens: u64::MAX,
            cost_usd: 0.3,
            ..UsageTotals::default()
        };
        assert_eq!(a.since(&b), UsageTotals::default());
        let mut sum = b;
        sum.add(&b);
        assert_eq!(sum.output_tokens, u64::MAX);
        assert_eq!(b.since(&a).input_tokens, 4);
    }
}
