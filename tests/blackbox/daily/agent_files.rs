//! Placeholder: tests for `agent_files` (issue 28) land here.
