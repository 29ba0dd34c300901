pub mod bench;
pub mod etcd;
pub mod fixture;
pub mod manual;
pub mod recorder;
pub mod zk;
