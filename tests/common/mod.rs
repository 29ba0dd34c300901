pub mod bench;
pub mod etcd;
pub mod fixture;
pub mod manual;
pub mod pods_api;
pub mod recorder;
pub mod zk;
