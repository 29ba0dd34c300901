//! Unit tests of the sweeper internals.
