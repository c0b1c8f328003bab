//! Network usage and machine facts for `/metrics/cadvisor`, read from `/proc` (and
//! `/sys` for device names) under injectable roots.
//!
//! A pod's network usage is that of its sandbox's network namespace, read as cAdvisor
//! reads it: `/proc/<pid>/net/dev` of a process in the sandbox (the pause process),
//! skipping the loopback and the host side of veth pairs. The node's is the same file
//! of litelet's own namespace. Pure parsers; the callers do the reading on the
//! `stats` thread.

use std::path::Path;

/// Counters of one network interface.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetDev {
    pub name: String,
    pub rx_bytes: u64,
    pub rx_packets: u64,
    pub rx_errors: u64,
    pub rx_dropped: u64,
    pub tx_bytes: u64,
    pub tx_packets: u64,
    pub tx_errors: u64,
    pub tx_dropped: u64,
}

/// Interfaces cAdvisor leaves out: loopback, veth ends, docker and nerdctl bridges.
const IGNORED_PREFIXES: &[&str] = &["lo", "veth", "docker", "nerdctl"];

/// `/proc/<pid>/net/dev` (two header lines, then `name: rx... tx...`), ignored
/// interfaces left out (pure).
pub fn parse_net_dev(text: &str) -> Vec<NetDev> {
    text.lines()
        .skip(2)
        .filter_map(|line| {
            let (name, rest) = line.split_once(':')?;
            let name = name.trim();
            if IGNORED_PREFIXES.iter().any(|p| name.starts_with(p)) {
                return None;
            }
            let f: Vec<u64> = rest
                .split_whitespace()
                .map(|v| v.parse().unwrap_or(0))
                .collect();
            let at = |i: usize| f.get(i).copied().unwrap_or(0);
            Some(NetDev {
                name: name.to_owned(),
                rx_bytes: at(0),
                rx_packets: at(1),
                rx_errors: at(2),
                rx_dropped: at(3),
                tx_bytes: at(8),
                tx_packets: at(9),
                tx_errors: at(10),
                tx_dropped: at(11),
            })
        })
        .collect()
}

/// The interfaces of the network namespace of `pid` (None: the reader's own).
pub fn read_net_dev(proc_root: &Path, pid: Option<u32>) -> Vec<NetDev> {
    let path = match pid {
        Some(pid) => proc_root.join(pid.to_string()).join("net/dev"),
        None => proc_root.join("net/dev"),
    };
    std::fs::read_to_string(path)
        .map(|t| parse_net_dev(&t))
        .unwrap_or_default()
}

/// What cAdvisor's `machine_*` series say, and their labels.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MachineInfo {
    /// Logical CPUs.
    pub cores: u64,
    pub physical_cores: u64,
    pub sockets: u64,
    pub boot_id: String,
    pub machine_id: String,
    pub system_uuid: String,
}

/// Logical CPUs, physical cores and sockets from `/proc/cpuinfo` (pure).
pub fn parse_cpuinfo(text: &str) -> (u64, u64, u64) {
    let mut logical = 0;
    let mut cores = std::collections::BTreeSet::new();
    let mut sockets = std::collections::BTreeSet::new();
    let mut socket = String::new();
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim().to_owned();
        match key.trim() {
            "processor" => logical += 1,
            "physical id" => {
                socket = value.clone();
                sockets.insert(value);
            }
            "core id" => {
                cores.insert((socket.clone(), value));
            }
            _ => {}
        }
    }
    // Some architectures (and VMs) give no topology: one core per CPU, one socket.
    let physical = if cores.is_empty() {
        logical
    } else {
        cores.len() as u64
    };
    (logical, physical, (sockets.len() as u64).max(1))
}

/// The machine facts, from `proc_root`, `sys_root` and `/etc/machine-id`.
pub fn read_machine(proc_root: &Path, sys_root: &Path, etc_root: &Path) -> MachineInfo {
    let read = |path: &Path| {
        std::fs::read_to_string(path)
            .map(|t| t.trim().to_owned())
            .unwrap_or_default()
    };
    let (cores, physical_cores, sockets) = parse_cpuinfo(&read(&proc_root.join("cpuinfo")));
    MachineInfo {
        cores,
        physical_cores,
        sockets,
        boot_id: read(&proc_root.join("sys/kernel/random/boot_id")),
        machine_id: read(&etc_root.join("machine-id")),
        system_uuid: read(&sys_root.join("class/dmi/id/product_uuid")),
    }
}

/// `/dev/<name>` of a block device from its `uevent` (`DEVNAME=sda`) (pure).
pub fn parse_devname(uevent: &str) -> Option<String> {
    uevent
        .lines()
        .find_map(|l| l.strip_prefix("DEVNAME="))
        .map(|name| format!("/dev/{}", name.trim()))
}

/// The device name of `major:minor`, from `/sys/dev/block`; empty when unknown.
pub fn device_name(sys_root: &Path, major: u32, minor: u32) -> String {
    let uevent = sys_root.join(format!("dev/block/{major}:{minor}/uevent"));
    std::fs::read_to_string(uevent)
        .ok()
        .and_then(|t| parse_devname(&t))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn net_dev_counters_without_loopback_and_veth() {
        let text = "Inter-|   Receive                                                |  Transmit\n \
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n\
    lo:  1000      10    0    0    0     0          0         0     1000      10    0    0    0     0       0          0\n\
  eth0: 52000     400    1    2    0     0          0         0    31000     300    3    4    0     0       0          0\n\
vethab12:   5       1    0    0    0     0          0         0        5       1    0    0    0     0       0          0\n";
        assert_eq!(
            parse_net_dev(text),
            vec![NetDev {
                name: "eth0".into(),
                rx_bytes: 52000,
                rx_packets: 400,
                rx_errors: 1,
                rx_dropped: 2,
                tx_bytes: 31000,
                tx_packets: 300,
                tx_errors: 3,
                tx_dropped: 4,
            }]
        );
        assert!(parse_net_dev("").is_empty());
    }

    #[test]
    fn cpuinfo_topology_and_device_names() {
        let two_cores_one_socket = "processor\t: 0\nphysical id\t: 0\ncore id\t: 0\n\n\
processor\t: 1\nphysical id\t: 0\ncore id\t: 1\n\nprocessor\t: 2\nphysical id\t: 0\ncore id\t: 0\n";
        assert_eq!(parse_cpuinfo(two_cores_one_socket), (3, 2, 1));
        assert_eq!(parse_cpuinfo("processor : 0\nprocessor : 1\n"), (2, 2, 1));
        assert_eq!(
            parse_devname("MAJOR=8\nMINOR=0\nDEVNAME=sda\nDEVTYPE=disk\n"),
            Some("/dev/sda".into())
        );
        assert_eq!(parse_devname("MAJOR=8\n"), None);
    }
}
