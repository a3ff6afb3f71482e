//! Placeholder: tests for `mcp_surface` (issue 28) land here.
