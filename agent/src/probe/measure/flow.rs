//! [`Flow`]: whether a reader of the body should go on reading (the answer of every body
//! read, also through a content decoder).

/// Whether more reads are worth making.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Keep reading.
    Continue,
    /// The event stream cannot be followed any more (a failure is recorded).
    Stop,
}
