//! The Kubernetes API as litelet sees it: wire types (serde) for the objects litelet
//! reads and writes, and `Quantity`. Only this module knows the JSON shape of API
//! objects; the rest of litelet works with these types.

pub mod event;
pub mod lease;
pub mod meta;
pub mod node;
pub mod pod;
pub mod quantity;
