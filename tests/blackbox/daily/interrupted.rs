//! Placeholder: tests for `interrupted` (issue 28) land here.
