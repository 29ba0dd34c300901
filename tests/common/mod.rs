pub mod bench;
pub mod etcd;
pub mod recorder;
pub mod zk;
