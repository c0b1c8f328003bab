//! A fake [`SystemdUnits`] for tests: records every call in order and, like systemd,
//! makes a started slice's cgroup (on the temp-dir cgroupfs model, with the kernel's
//! default files) and removes a stopped one's. A unit can be told to fail.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::{parse_slice, slice_path, Property, SystemdError, SystemdUnits};
use crate::cgroups::testfs::{populate_at, Model};

/// One call the fake received.
#[derive(Clone, Debug, PartialEq)]
pub enum UnitCall {
    Start(String, Vec<Property>),
    Set(String, Vec<Property>),
    Stop(String),
}

/// The fake; clones share the call log.
#[derive(Clone, Debug)]
pub struct FakeUnits {
    pub calls: Arc<Mutex<Vec<UnitCall>>>,
    /// Units whose start job fails ("failed"), as systemd reports a failed job.
    pub failing: Arc<Mutex<Vec<String>>>,
    root: PathBuf,
    v2: bool,
}

impl FakeUnits {
    /// A fake acting on `model`.
    pub fn on(model: &Model) -> FakeUnits {
        FakeUnits {
            calls: Arc::default(),
            failing: Arc::default(),
            root: model.root().to_owned(),
            v2: model.is_v2(),
        }
    }

    /// The calls so far.
    pub fn calls(&self) -> Vec<UnitCall> {
        self.calls.lock().unwrap().clone()
    }

    /// The names of the units started, in order.
    pub fn started(&self) -> Vec<String> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                UnitCall::Start(u, _) => Some(u),
                _ => None,
            })
            .collect()
    }

    fn dirs(&self, unit: &str) -> Vec<PathBuf> {
        let path = slice_path(&parse_slice(unit).unwrap()).unwrap();
        let relative = path.to_relative_path();
        if self.v2 {
            vec![self.root.join(relative)]
        } else {
            ["cpu", "cpuacct", "memory", "pids"]
                .iter()
                .map(|h| self.root.join(h).join(&relative))
                .collect()
        }
    }
}

impl SystemdUnits for FakeUnits {
    fn start_slice(&self, unit: &str, properties: Vec<Property>) -> Result<(), SystemdError> {
        self.calls
            .lock()
            .unwrap()
            .push(UnitCall::Start(unit.to_owned(), properties));
        if self.failing.lock().unwrap().iter().any(|u| u == unit) {
            return Err(SystemdError::JobFailed {
                unit: unit.to_owned(),
                result: "failed".into(),
            });
        }
        let path = slice_path(&parse_slice(unit).unwrap()).unwrap();
        // systemd makes the parent slices too, as real cgroups with their files.
        let mut at = crate::cgroups::CgroupName::root();
        for part in path.parts() {
            at = at.child(part).unwrap();
            if !self.dirs(at.base().unwrap()).iter().all(|d| d.is_dir()) {
                populate_at(&self.root, self.v2, &at.to_cgroupfs());
            }
        }
        Ok(())
    }

    fn set_properties(&self, unit: &str, properties: Vec<Property>) -> Result<(), SystemdError> {
        self.calls
            .lock()
            .unwrap()
            .push(UnitCall::Set(unit.to_owned(), properties));
        Ok(())
    }

    fn stop_unit(&self, unit: &str) -> Result<(), SystemdError> {
        self.calls
            .lock()
            .unwrap()
            .push(UnitCall::Stop(unit.to_owned()));
        // systemd removes the slice's cgroup: files first (the model's rmdir needs
        // empty directories), then the directory.
        for dir in self.dirs(unit) {
            if dir.is_dir() {
                std::fs::remove_dir_all(&dir).unwrap();
            }
        }
        Ok(())
    }
}
