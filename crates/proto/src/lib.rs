//! Halyard native protocol (to be written).
