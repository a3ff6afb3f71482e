//! The nodes that steer evaluation rather than start work: a loop (its
//! counter, its condition, at most `MAX_LOOP_ITERATIONS` times), a `try`
//! (its body's writes undone when it fails, the error handed to `catch`;
//! the flow's budget, when the try is the flow's body, over its body only)
//! and a `call` of a sub-flow, evaluated inline under the call's key once
//! its input matches the called flow's `input_schema`, under its own
//! budget.

use serde_json::{Value, json};

use super::eval::{Eval, MAX_CALL_DEPTH, MAX_LOOP_ITERATIONS, Place, Res, failed, shallow, write};
use crate::expr::Expr;
use crate::ir::{Flow, Node};

impl Eval<'_> {
    pub(super) fn looped(
        &mut self,
        counter: &Expr,
        cond: &Expr,
        body: &Node,
        max: Option<u32>,
        at: &Place,
        mut ctx: Value,
    ) -> Res {
        let mut latest = 0;
        // A `max` within the bound ends the loop quietly; past it, or
        // without one, reaching the bound fails the run.
        let quiet = max.filter(|m| *m <= MAX_LOOP_ITERATIONS);
        let bound = quiet.unwrap_or(MAX_LOOP_ITERATIONS);
        for i in 0..=bound {
            ctx = match write(counter, ctx, Value::from(i)) {
                Ok(ctx) => ctx,
                Err(reason) => return failed(reason),
            };
            match cond.test(&ctx) {
                Ok(false) => break,
                Ok(true) if i == bound && quiet.is_some() => break,
                Ok(true) if i == bound => {
                    return failed(format!(
                        "{}: the loop ran {bound} times without ending",
                        at.pointer
                    ));
                }
                Ok(true) => {}
                Err(e) => return failed(format!("{}/cond: {e}", at.pointer)),
            }
            match self.node(body, &at.child("body").instance(format!("#{i}")), ctx) {
                Res::Done { ctx: next, seq } => {
                    ctx = next;
                    latest = latest.max(seq);
                }
                other => return other,
            }
        }
        Res::Done { ctx, seq: latest }
    }

    pub(super) fn tried(
        &mut self,
        body: &Node,
        catch: &Node,
        err_at: Option<&Expr>,
        at: &Place,
        ctx: Value,
    ) -> Res {
        let before = ctx.clone();
        // The flow's budget, when this try is the flow's body, caps the
        // try's body only: past it the catch runs.
        let budget = self.body_budget.take();
        match self.flow_budgeted(budget, body, &at.child("body"), ctx) {
            Res::Failed { reason, seq } => {
                let ctx = match err_at {
                    Some(target) => match write(target, before, Value::String(reason)) {
                        Ok(ctx) => ctx,
                        Err(reason) => return failed(reason),
                    },
                    None => before,
                };
                match self.node(catch, &at.child("catch"), ctx) {
                    Res::Done { ctx, seq: later } => Res::Done {
                        ctx,
                        seq: seq.max(later),
                    },
                    other => other,
                }
            }
            other => other,
        }
    }

    pub(super) fn call(
        &mut self,
        flow: &str,
        input: &Expr,
        out: &Expr,
        at: &Place,
        ctx: Value,
    ) -> Res {
        if at.call_depth >= MAX_CALL_DEPTH {
            return failed(format!(
                "{}: calls nest deeper than {MAX_CALL_DEPTH}",
                at.pointer
            ));
        }
        let Some(callee) = self.called.get(flow) else {
            return failed(format!("{}: no flow named {flow}", at.pointer));
        };
        let input = match input
            .eval(&ctx)
            .map_err(|e| e.to_string())
            .and_then(shallow)
        {
            Ok(v) => v,
            Err(e) => return failed(format!("{}/in: {e}", at.pointer)),
        };
        if let Err(why) = self.fits_input(flow, callee, &input) {
            return failed(format!(
                "{}/in: the input does not match the input_schema of flow {flow}: {why}",
                at.pointer
            ));
        }
        let inner = Place {
            scope: format!("{}>{flow}", at.key()),
            pointer: "/body".into(),
            inst: String::new(),
            call_depth: at.call_depth + 1,
        };
        let named = format!("flow {flow}: ");
        match self.flow_body_at(callee, &named, &inner, json!({ "input": input })) {
            Res::Done { ctx: sub, seq } => {
                let result = match &callee.output {
                    Some(expr) => match expr.eval(&sub) {
                        Ok(v) => v,
                        Err(e) => return failed(format!("flow {flow}: output: {e}")),
                    },
                    None => sub,
                };
                match write(out, ctx, result) {
                    Ok(ctx) => Res::Done { ctx, seq },
                    Err(reason) => Res::Failed { reason, seq },
                }
            }
            other => other,
        }
    }

    /// Whether `input` matches the `input_schema` of `callee` (flow
    /// `name`), as a run's input must match its flow's: else why not, each
    /// mismatch with the JSON pointer of its place in the input. The
    /// schema is compiled once per evaluation.
    fn fits_input(&mut self, name: &str, callee: &Flow, input: &Value) -> Result<(), String> {
        let Some(schema) = &callee.input_schema else {
            return Ok(());
        };
        let validator = self
            .validators
            .entry(name.to_owned())
            .or_insert_with(|| {
                jsonschema::validator_for(schema)
                    .map_err(|e| format!("its input_schema is not a valid JSON Schema: {e}"))
            })
            .as_ref()
            .map_err(Clone::clone)?;
        match crate::mismatch::mismatches(validator, input, "input") {
            None => Ok(()),
            Some(why) => Err(why),
        }
    }
}
