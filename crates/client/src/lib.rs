//! Halyard client (to be written).
