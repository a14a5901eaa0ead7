//! Rendering errors for people: one line, the message followed by its causes.

/// The error's message followed by its sources, `: `-separated: "cannot read /x:
/// Input/output error (os error 5)". gRPC statuses and the agent's own stderr use it.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
