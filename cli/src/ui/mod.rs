//! All terminal output of the CLI: campaign progress (bars or plain lines).

pub mod progress;
