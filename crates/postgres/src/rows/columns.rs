//! A group's rows as one array per column of each folded statement: what
//! `Group::commit` binds.

use std::collections::HashMap;

use uuid::Uuid;

use super::{Group, Row};

/// A group's rows as one array per column, in the statements' order.
#[derive(Default)]
#[allow(
    clippy::type_complexity,
    reason = "one tuple field per statement, one array per bound column"
)]
pub(super) struct Columns<'a> {
    pub(super) deleted_sessions: Vec<Uuid>,
    pub(super) deleted_posted: (Vec<Uuid>, Vec<i64>),
    pub(super) tasks: (
        Vec<Uuid>,
        Vec<&'a str>,
        Vec<&'a str>,
        Vec<Option<i64>>,
        Vec<Option<Uuid>>,
        Vec<Option<Uuid>>,
        Vec<Option<Uuid>>,
        Vec<Option<&'a str>>,
        Vec<&'a str>,
    ),
    pub(super) attempts: (Vec<Uuid>, Vec<i64>, Vec<&'a str>),
    pub(super) handles: (Vec<Uuid>, Vec<i64>, Vec<&'a [u8]>, Vec<i64>, Vec<&'a str>),
    pub(super) keys: (Vec<&'a str>, Vec<Uuid>),
    pub(super) sessions: (Vec<Uuid>, Vec<&'a str>),
    pub(super) posted: (Vec<Uuid>, Vec<i64>, Vec<Option<&'a str>>, Vec<&'a [u8]>),
    pub(super) events: (Vec<i64>, Vec<Option<Uuid>>, Vec<&'a str>, Vec<&'a str>),
    pub(super) audit: (Vec<i64>, Vec<Uuid>, Vec<&'a str>),
    pub(super) outputs: (
        Vec<Uuid>,
        Vec<i64>,
        Vec<i64>,
        Vec<i64>,
        Vec<&'a str>,
        Vec<bool>,
        Vec<&'a str>,
    ),
    pub(super) runs: (
        Vec<Uuid>,
        Vec<&'a str>,
        Vec<&'a str>,
        Vec<Option<Uuid>>,
        Vec<Option<&'a str>>,
        Vec<i64>,
        Vec<i64>,
        Vec<&'a str>,
    ),
    pub(super) flows: (Vec<&'a str>, Vec<&'a str>, Vec<&'a str>),
}

impl<'a> Columns<'a> {
    pub(super) fn of(group: &Group<'a>) -> Columns<'a> {
        let mut c = Columns {
            deleted_sessions: group.deleted_sessions.clone(),
            ..Columns::default()
        };
        for (task, attempt) in &group.deleted_posted {
            c.deleted_posted.0.push(*task);
            c.deleted_posted.1.push(*attempt);
        }
        for row in group.tasks.rows() {
            c.push_task(row, group);
        }
        let rows = group
            .attempts
            .rows()
            .chain(group.handles.rows())
            .chain(group.keys.rows())
            .chain(group.sessions.rows())
            .chain(group.posted.rows())
            .chain(group.events.iter().copied())
            .chain(group.audit.iter().copied());
        for row in rows {
            c.push(row);
        }
        // A key written by two runs of the group stays with the first.
        let mut run_keys: HashMap<&'a str, Uuid> = HashMap::new();
        for row in group.runs.rows() {
            if let Row::Run {
                id,
                flow,
                status,
                session,
                key,
                created_ms,
                updated_ms,
                record,
            } = row
            {
                let key = key
                    .as_deref()
                    .filter(|key| *run_keys.entry(key).or_insert(*id) == *id);
                let r = &mut c.runs;
                r.0.push(*id);
                r.1.push(flow);
                r.2.push(status);
                r.3.push(*session);
                r.4.push(key);
                r.5.push(*created_ms);
                r.6.push(*updated_ms);
                r.7.push(record);
            }
        }
        for row in group.flows.rows() {
            if let Row::Flow { hash, name, doc } = row {
                c.flows.0.push(hash);
                c.flows.1.push(name);
                c.flows.2.push(doc);
            }
        }
        for o in &group.outputs {
            c.outputs.0.push(o.task);
            c.outputs.1.push(o.attempt);
            c.outputs.2.push(o.seq);
            c.outputs.3.push(o.ts_ms);
            c.outputs.4.push(&o.producer);
            c.outputs.5.push(o.is_final);
            c.outputs.6.push(&o.event);
        }
        c
    }

    /// A task's folded row, with the first spec the group carried for it.
    fn push_task(&mut self, row: &'a Row, group: &Group<'a>) {
        if let Row::Task {
            id,
            status,
            agent,
            finished_ms,
            session,
            parent,
            continued_from,
            spec: _,
            body,
        } = row
        {
            let t = &mut self.tasks;
            t.0.push(*id);
            t.1.push(status);
            t.2.push(agent);
            t.3.push(*finished_ms);
            t.4.push(*session);
            t.5.push(*parent);
            t.6.push(*continued_from);
            t.7.push(group.task_specs.get(id).copied());
            t.8.push(body);
        }
    }

    fn push(&mut self, row: &'a Row) {
        match row {
            Row::Attempt {
                task,
                attempt,
                body,
            } => {
                self.attempts.0.push(*task);
                self.attempts.1.push(*attempt);
                self.attempts.2.push(body);
            }
            Row::Handle {
                task,
                attempt,
                digest,
                exp_secs,
                body,
            } => {
                let h = &mut self.handles;
                h.0.push(*task);
                h.1.push(*attempt);
                h.2.push(digest);
                h.3.push(*exp_secs);
                h.4.push(body);
            }
            Row::Key { key, task } => {
                self.keys.0.push(key);
                self.keys.1.push(*task);
            }
            Row::PutSession { sid, body } => {
                self.sessions.0.push(*sid);
                self.sessions.1.push(body);
            }
            Row::PutPosted {
                task,
                attempt,
                key,
                digest,
            } => {
                let p = &mut self.posted;
                p.0.push(*task);
                p.1.push(*attempt);
                p.2.push(key.as_deref());
                p.3.push(digest);
            }
            Row::Event {
                ts_ms,
                task,
                kind,
                body,
            } => {
                let e = &mut self.events;
                e.0.push(*ts_ms);
                e.1.push(*task);
                e.2.push(body);
                e.3.push(kind);
            }
            Row::Audit { ts_ms, task, body } => {
                self.audit.0.push(*ts_ms);
                self.audit.1.push(*task);
                self.audit.2.push(body);
            }
            // Tasks, deletes, outputs, runs and documents are gathered apart.
            Row::Task { .. }
            | Row::DeleteSession { .. }
            | Row::DeletePosted { .. }
            | Row::Output(_)
            | Row::Run { .. }
            | Row::Flow { .. } => {}
        }
    }
}
