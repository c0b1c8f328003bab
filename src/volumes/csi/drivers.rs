//! The CSI drivers registered on this node (upstream `csiDrivers` store): name →
//! endpoint and node id, written by the plugin watcher thread, read by pod workers.
//! One small lock, never held across a call.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

/// One registered driver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Driver {
    /// The driver's socket, as GetInfo named it.
    pub endpoint: PathBuf,
    /// The node id NodeGetInfo returned.
    pub node_id: String,
    /// The registration socket that announced it (a removed socket deregisters).
    pub registration: PathBuf,
}

/// Shared set of registered drivers (clone = same set).
#[derive(Clone, Default)]
pub struct Drivers {
    inner: Arc<Mutex<BTreeMap<String, Driver>>>,
}

impl Drivers {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Driver>> {
        // Entries are replaced whole; a panic elsewhere cannot tear one.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds or replaces driver `name`.
    pub fn insert(&self, name: &str, driver: Driver) {
        self.lock().insert(name.to_owned(), driver);
    }

    /// Driver `name`, if registered.
    pub fn get(&self, name: &str) -> Option<Driver> {
        self.lock().get(name).cloned()
    }

    /// Removes the driver announced by registration socket `socket`; returns its name.
    pub fn remove_by_socket(&self, socket: &std::path::Path) -> Option<String> {
        let mut map = self.lock();
        let name = map
            .iter()
            .find(|(_, d)| d.registration == socket)
            .map(|(n, _)| n.clone())?;
        map.remove(&name);
        Some(name)
    }

    /// Names of every registered driver.
    pub fn names(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }
}
