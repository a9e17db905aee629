//! Where an operator that fails inside a worker leaves its error for the worker loop.
//!
//! Operators cannot return errors through timely; they stop and leave the first failure
//! here, and the worker loop, which checks after every step, ends the run with it.

use std::cell::RefCell;
use std::rc::Rc;

/// An operator's failure: which operator, and the typed error of the contract it used.
#[derive(Debug, thiserror::Error)]
#[error("{operator}: {source}")]
pub struct OperatorError {
    pub operator: String,
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync + 'static>,
}

impl OperatorError {
    pub fn new(operator: &str, source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>) -> Self {
        OperatorError {
            operator: operator.to_owned(),
            source: source.into(),
        }
    }
}

/// The worker's slot for the first operator failure.
pub type ErrorSlot = Rc<RefCell<Option<OperatorError>>>;

/// Leaves `error` in the slot unless an earlier failure is there already.
pub fn report(slot: &ErrorSlot, error: OperatorError) {
    slot.borrow_mut().get_or_insert(error);
}
