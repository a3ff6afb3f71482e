//! Placeholder: tests for `cli_tables` (issue 28) land here.
