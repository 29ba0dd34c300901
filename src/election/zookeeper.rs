//! ZooKeeper backend (in progress).
