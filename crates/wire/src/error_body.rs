//! The HTTP error body (docs/protocol.md, Errors): `{"error": "<human
//! message>", "code": "<machine code>"}`, plus `problems` on an
//! `invalid_flow` refusal and `files` on a refusal about a branch's files.

use serde::{Deserialize, Serialize};
use swarmd_types::ErrorCode;

/// A refusal's JSON body. `P` is the type of a lint problem: the server
/// writes its own, a client reads them as JSON values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody<P = serde_json::Value> {
    /// What went wrong, for a human.
    pub error: String,
    /// What went wrong, for a program (`ErrorCode`'s wire string).
    pub code: ErrorCode,
    /// The lint problems of a refused flow.
    #[serde(default = "Option::default", skip_serializing_if = "Option::is_none")]
    pub problems: Option<Vec<P>>,
    /// The files a refusal is about (a branch that cannot be applied).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<Vec<String>>,
}

impl<P> ErrorBody<P> {
    /// The plain body: a message and its code.
    pub fn new(code: ErrorCode, error: impl Into<String>) -> Self {
        ErrorBody {
            error: error.into(),
            code,
            problems: None,
            files: None,
        }
    }

    /// The body with the lint problems of a refused flow.
    pub fn with_problems(mut self, problems: Vec<P>) -> Self {
        self.problems = Some(problems);
        self
    }

    /// The body with the files the refusal is about.
    pub fn with_files(mut self, files: Vec<String>) -> Self {
        self.files = Some(files);
        self
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    #[test]
    fn the_plain_body_is_error_and_code_only() {
        let body = ErrorBody::<Value>::new(ErrorCode::RoleTaken, "taken");
        assert_eq!(
            serde_json::to_value(&body).unwrap(),
            json!({"error": "taken", "code": "role_taken"})
        );
    }

    #[test]
    fn problems_and_files_appear_when_set_and_read_back() {
        let body = ErrorBody::new(ErrorCode::InvalidFlow, "the flow fails lint")
            .with_problems(vec![
                json!({"pointer": "/body/ref", "code": "unknown_agent"}),
            ])
            .with_files(vec!["a.rs".to_owned()]);
        let text = json!({"error": "the flow fails lint", "code": "invalid_flow",
                          "problems": [{"pointer": "/body/ref", "code": "unknown_agent"}],
                          "files": ["a.rs"]});
        assert_eq!(serde_json::to_value(&body).unwrap(), text);
        assert_eq!(serde_json::from_value::<ErrorBody>(text).unwrap(), body);
    }

    #[test]
    fn a_client_reads_a_body_without_the_optional_fields() {
        let body: ErrorBody =
            serde_json::from_str(r#"{"error":"no","code":"not_found","x":1}"#).unwrap();
        assert_eq!(body, ErrorBody::new(ErrorCode::NotFound, "no"));
    }
}
