//! Placeholder: the dashboard renders diffs and charts (issue 28).
