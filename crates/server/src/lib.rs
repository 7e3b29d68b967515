//! Halyard server (being written).
