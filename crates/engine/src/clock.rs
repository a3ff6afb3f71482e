//! Wall-clock time as an injected dependency. The output store, the lowest
//! crate, owns `Clock`; the engine uses the same trait so one clock stamps
//! outputs, token expiry, leases and session idleness.

pub use swarmd_output_store::{Clock, ManualClock, SystemClock};
