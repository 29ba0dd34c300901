pub mod zk;
