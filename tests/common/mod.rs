pub mod etcd;
pub mod zk;
