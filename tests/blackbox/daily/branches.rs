//! Placeholder: tests for `branches` (issue 28) land here.
