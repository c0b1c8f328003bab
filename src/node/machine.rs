//! Facts about this machine that the Node object publishes: CPUs, memory, huge
//! pages, the root dir's filesystem size, machine/boot IDs, kernel, OS image,
//! architecture, and the node IP (from `--node-ip` or the default route).
//!
//! Called by the `node` thread before every status computation (through
//! `NodeInputs::machine`); cheap reads of small files. The roots (`/proc`, `/sys`,
//! `/etc`) are parameters, so tests point them at fixture trees. Parsers are pure
//! functions over file contents. Reading never fails as a whole: it returns what it
//! could read plus a list of problems, and the status generator reports what is missing.
//!
//! The node IP lookup reads the routing table from `/proc/net/route` (and
//! `/proc/net/ipv6_route`) and the interface's addresses with getifaddrs; it sends
//! nothing on the network.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A file that could not be read or understood.
#[derive(Clone, Debug, thiserror::Error)]
pub enum MachineError {
    #[error("read {path}: {source}")]
    Read {
        path: PathBuf,
        /// Shared so that the error stays `Clone` (problems are reported per pass).
        #[source]
        source: Arc<std::io::Error>,
    },
    #[error("parse {path}: {what}")]
    Parse { path: PathBuf, what: &'static str },
    #[error("statvfs {path}: {source}")]
    Statvfs {
        path: PathBuf,
        #[source]
        source: nix::errno::Errno,
    },
    #[error("node ip: getifaddrs: {0}")]
    Interfaces(#[source] nix::errno::Errno),
    #[error("node ip: {0}")]
    NodeIp(String),
}

/// Where the machine's files live (`/proc`, `/sys`, `/etc` on a real host).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachineRoots {
    pub proc: PathBuf,
    pub sys: PathBuf,
    pub etc: PathBuf,
}

impl MachineRoots {
    pub fn host() -> Self {
        Self {
            proc: PathBuf::from("/proc"),
            sys: PathBuf::from("/sys"),
            etc: PathBuf::from("/etc"),
        }
    }
}

/// Pages of one huge page size reserved on the machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HugePages {
    pub page_size_bytes: u64,
    pub count: u64,
}

/// What the node status needs from the machine. `None`: could not be read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MachineInfo {
    pub num_cpus: Option<u32>,
    pub memory_bytes: Option<u64>,
    /// `SwapTotal` (0 without swap); `None` when /proc/meminfo could not be read.
    pub swap_bytes: Option<u64>,
    /// Every huge page size the kernel supports, with the pages reserved.
    pub hugepages: Vec<HugePages>,
    /// Size of the filesystem holding the root dir.
    pub ephemeral_storage_bytes: Option<u64>,
    pub machine_id: String,
    pub system_uuid: String,
    pub boot_id: String,
    pub kernel_version: String,
    pub os_image: String,
    /// Go's name of the architecture (`amd64`, `arm64`, ...).
    pub architecture: String,
    pub node_ip: Option<IpAddr>,
}

/// Reads [`MachineInfo`] from injectable roots.
#[derive(Clone, Debug)]
pub struct MachineReader {
    pub roots: MachineRoots,
    /// Its filesystem's size is the ephemeral-storage capacity.
    pub root_dir: PathBuf,
    /// `--node-ip`; when `None` the default route's interface address is used.
    pub node_ip: Option<IpAddr>,
    /// Detection tries the IPv6 default route first (`--node-ip=::`).
    pub prefer_ipv6: bool,
}

impl MachineReader {
    pub fn new(roots: MachineRoots, root_dir: &Path, node_ip: Option<IpAddr>) -> Self {
        Self {
            roots,
            root_dir: root_dir.to_owned(),
            node_ip,
            prefer_ipv6: false,
        }
    }

    /// The same reader, detecting an IPv6 address first when `yes`.
    pub fn preferring_ipv6(mut self, yes: bool) -> Self {
        self.prefer_ipv6 = yes;
        self
    }

    /// Everything that could be read, and what could not.
    pub fn read(&self) -> (MachineInfo, Vec<MachineError>) {
        let mut problems = Vec::new();
        let mut info = MachineInfo {
            architecture: go_arch(std::env::consts::ARCH).to_owned(),
            ..MachineInfo::default()
        };
        let proc = &self.roots.proc;

        let cpuinfo = proc.join("cpuinfo");
        info.num_cpus = match read(&cpuinfo).map(|t| parse_cpu_count(&t)) {
            Ok(Some(n)) => Some(n),
            other => {
                if let Err(e) = other {
                    problems.push(e);
                }
                // Containers and odd kernels: fall back to what the scheduler gives us.
                std::thread::available_parallelism()
                    .ok()
                    .and_then(|n| u32::try_from(n.get()).ok())
            }
        };

        let meminfo = proc.join("meminfo");
        info.memory_bytes = match read(&meminfo) {
            Ok(text) => {
                // A kernel without swap support has no SwapTotal line: no swap.
                info.swap_bytes = Some(parse_swap_total(&text).unwrap_or(0));
                let m = parse_mem_total(&text);
                if m.is_none() {
                    problems.push(parse_err(&meminfo, "no MemTotal line"));
                }
                m
            }
            Err(e) => {
                problems.push(e);
                None
            }
        };

        info.hugepages = read_hugepages(&self.roots.sys, &mut problems);

        info.ephemeral_storage_bytes = match filesystem_size(&self.root_dir) {
            Ok(size) => Some(size),
            Err(e) => {
                problems.push(e);
                None
            }
        };

        info.machine_id = read_trimmed(&self.roots.etc.join("machine-id"), &mut problems);
        info.boot_id = read_trimmed(&proc.join("sys/kernel/random/boot_id"), &mut problems);
        // Readable by root only, and absent on many ARM boards: not a problem.
        info.system_uuid = read(&self.roots.sys.join("class/dmi/id/product_uuid"))
            .map(|s| s.trim().to_owned())
            .unwrap_or_default();
        info.kernel_version = match read(&proc.join("sys/kernel/osrelease")) {
            Ok(s) => s.trim().to_owned(),
            Err(_) => nix::sys::utsname::uname()
                .map(|u| u.release().to_string_lossy().into_owned())
                .unwrap_or_default(),
        };
        info.os_image = read(&self.roots.etc.join("os-release"))
            .ok()
            .and_then(|t| parse_os_release_pretty_name(&t))
            .unwrap_or_else(|| "Linux".to_owned());

        info.node_ip = match self.node_ip {
            Some(ip) => Some(ip),
            None => match default_route_address(proc, self.prefer_ipv6) {
                Ok(ip) => Some(ip),
                Err(e) => {
                    problems.push(e);
                    None
                }
            },
        };
        (info, problems)
    }
}

impl MachineReader {
    /// The most tasks the kernel allows: the smaller of `kernel.pid_max` and
    /// `kernel.threads-max` (upstream's internal `pid` capacity, which sizes the
    /// `kubepods` cgroup's `pids.max`). `None` when neither can be read.
    pub fn max_pids(&self) -> Option<u64> {
        let kernel = self.roots.proc.join("sys/kernel");
        ["pid_max", "threads-max"]
            .iter()
            .filter_map(|file| read(&kernel.join(file)).ok())
            .filter_map(|text| text.trim().parse::<u64>().ok())
            .min()
    }
}

fn read(path: &Path) -> Result<String, MachineError> {
    std::fs::read_to_string(path).map_err(|source| MachineError::Read {
        path: path.to_owned(),
        source: Arc::new(source),
    })
}

fn read_trimmed(path: &Path, problems: &mut Vec<MachineError>) -> String {
    match read(path) {
        Ok(s) => s.trim().to_owned(),
        Err(e) => {
            problems.push(e);
            String::new()
        }
    }
}

fn parse_err(path: &Path, what: &'static str) -> MachineError {
    MachineError::Parse {
        path: path.to_owned(),
        what,
    }
}

/// Counts the `processor : N` entries of /proc/cpuinfo.
pub fn parse_cpu_count(cpuinfo: &str) -> Option<u32> {
    let n = cpuinfo
        .lines()
        .filter(|l| {
            l.split_once(':')
                .is_some_and(|(k, _)| k.trim_end() == "processor")
        })
        .count();
    u32::try_from(n).ok().filter(|&n| n > 0)
}

/// `MemTotal:  8049152 kB` of /proc/meminfo, in bytes.
pub fn parse_mem_total(meminfo: &str) -> Option<u64> {
    meminfo_bytes(meminfo, "MemTotal:")
}

/// `SwapTotal:  2097148 kB` of /proc/meminfo, in bytes (node status
/// `nodeInfo.swap.capacity`, LimitedSwap's share).
pub fn parse_swap_total(meminfo: &str) -> Option<u64> {
    meminfo_bytes(meminfo, "SwapTotal:")
}

/// The swap areas /proc/swaps lists (one line each after the header): the host has
/// swap on when this is not empty.
pub fn parse_active_swaps(proc_swaps: &str) -> Vec<String> {
    proc_swaps
        .lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.split_whitespace().next().unwrap_or_default().to_owned())
        .collect()
}

fn meminfo_bytes(meminfo: &str, key: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with(key))?;
    let mut fields = line[key.len()..].split_whitespace();
    let value: u64 = fields.next()?.parse().ok()?;
    match fields.next() {
        Some("kB") => value.checked_mul(1024),
        None => Some(value),
        Some(_) => None,
    }
}

/// `hugepages-2048kB` → 2 MiB in bytes.
pub fn parse_hugepage_dir(name: &str) -> Option<u64> {
    let kb: u64 = name
        .strip_prefix("hugepages-")?
        .strip_suffix("kB")?
        .parse()
        .ok()?;
    kb.checked_mul(1024)
}

fn read_hugepages(sys: &Path, problems: &mut Vec<MachineError>) -> Vec<HugePages> {
    let dir = sys.join("kernel/mm/hugepages");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        // No huge page support compiled in: nothing to report.
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(size) = parse_hugepage_dir(&name.to_string_lossy()) else {
            continue;
        };
        let path = entry.path().join("nr_hugepages");
        let count = match read(&path) {
            Ok(t) => match t.trim().parse::<u64>() {
                Ok(c) => c,
                Err(_) => {
                    problems.push(parse_err(&path, "not a number"));
                    continue;
                }
            },
            Err(e) => {
                problems.push(e);
                continue;
            }
        };
        out.push(HugePages {
            page_size_bytes: size,
            count,
        });
    }
    out.sort_by_key(|h| h.page_size_bytes);
    out
}

/// Size in bytes of the filesystem holding `dir` (or its nearest existing ancestor,
/// so a root dir not made yet still measures the disk it will live on).
pub fn filesystem_size(dir: &Path) -> Result<u64, MachineError> {
    let mut probe = dir;
    while !probe.exists() {
        match probe.parent() {
            Some(p) => probe = p,
            None => break,
        }
    }
    let st = nix::sys::statvfs::statvfs(probe).map_err(|source| MachineError::Statvfs {
        path: probe.to_owned(),
        source,
    })?;
    #[allow(clippy::useless_conversion)] // the field widths differ between targets
    let blocks = u64::from(st.blocks());
    #[allow(clippy::useless_conversion)]
    let frsize = u64::from(st.fragment_size());
    Ok(blocks.saturating_mul(frsize))
}

/// `PRETTY_NAME` of os-release, unquoted (`"Debian GNU/Linux 12 (bookworm)"`).
pub fn parse_os_release_pretty_name(text: &str) -> Option<String> {
    let value = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("PRETTY_NAME="))?
        .trim();
    let unquoted = if value.len() >= 2
        && ((value.starts_with('"') && value.ends_with('"'))
            || (value.starts_with('\'') && value.ends_with('\'')))
    {
        &value[1..value.len() - 1]
    } else {
        value
    };
    // Shell-style escapes inside double quotes.
    let mut out = String::with_capacity(unquoted.len());
    let mut chars = unquoted.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(n) = chars.next() {
                out.push(n);
            }
        } else {
            out.push(c);
        }
    }
    (!out.is_empty()).then_some(out)
}

/// Go's GOARCH for Rust's target architecture name.
pub fn go_arch(rust_arch: &str) -> &str {
    match rust_arch {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        "loongarch64" => "loong64",
        other => other,
    }
}

const RTF_UP: u32 = 0x1;

/// The interface of the IPv4 default route with the lowest metric, from the text of
/// /proc/net/route (columns: Iface Destination Gateway Flags RefCnt Use Metric Mask ...).
pub fn default_route_interface_v4(route: &str) -> Option<String> {
    route
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 8 {
                return None;
            }
            let flags = u32::from_str_radix(f[3], 16).ok()?;
            let metric: u32 = f[6].parse().ok()?;
            let default = f[1] == "00000000" && f[7] == "00000000";
            (default && flags & RTF_UP != 0).then(|| (metric, f[0].to_owned()))
        })
        .min_by_key(|(metric, _)| *metric)
        .map(|(_, iface)| iface)
}

/// The interface of the IPv6 default route with the lowest metric, from the text of
/// /proc/net/ipv6_route (dest, dest prefix, src, src prefix, next hop, metric, refcnt,
/// use, flags, iface; hex fields).
pub fn default_route_interface_v6(route: &str) -> Option<String> {
    route
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 10 {
                return None;
            }
            let default = f[0].chars().all(|c| c == '0') && f[1] == "00";
            let metric = u32::from_str_radix(f[5], 16).ok()?;
            let flags = u32::from_str_radix(f[8], 16).ok()?;
            let usable = flags & RTF_UP != 0 && f[9] != "lo";
            (default && usable).then(|| (metric, f[9].to_owned()))
        })
        .min_by_key(|(metric, _)| *metric)
        .map(|(_, iface)| iface)
}

/// The address to publish among an interface's addresses of one family: the first
/// that is neither loopback nor link-local.
pub fn choose_address(addrs: &[IpAddr], want_v4: bool) -> Option<IpAddr> {
    addrs.iter().copied().find(|ip| match ip {
        IpAddr::V4(v4) => want_v4 && !v4.is_loopback() && !v4.is_link_local(),
        IpAddr::V6(v6) => !want_v4 && !v6.is_loopback() && (v6.segments()[0] & 0xffc0) != 0xfe80,
    })
}

/// The addresses of one network interface (getifaddrs).
pub fn interface_addresses(iface: &str) -> Result<Vec<IpAddr>, MachineError> {
    let all = nix::ifaddrs::getifaddrs().map_err(MachineError::Interfaces)?;
    let mut out = Vec::new();
    for a in all.filter(|a| a.interface_name == iface) {
        let Some(addr) = a.address else { continue };
        if let Some(v4) = addr.as_sockaddr_in() {
            out.push(IpAddr::V4(v4.ip()));
        } else if let Some(v6) = addr.as_sockaddr_in6() {
            out.push(IpAddr::V6(v6.ip()));
        }
    }
    Ok(out)
}

/// The node IP when none is configured: the address of the IPv4 default route's
/// interface, else of the IPv6 default route's (upstream's ChooseHostInterface order);
/// IPv6 first when `prefer_ipv6` (`--node-ip=::`).
pub fn default_route_address(proc: &Path, prefer_ipv6: bool) -> Result<IpAddr, MachineError> {
    let v4 = std::fs::read_to_string(proc.join("net/route"))
        .ok()
        .and_then(|t| default_route_interface_v4(&t));
    let v6 = std::fs::read_to_string(proc.join("net/ipv6_route"))
        .ok()
        .and_then(|t| default_route_interface_v6(&t));
    let mut order = [(&v4, true), (&v6, false)];
    if prefer_ipv6 {
        order.reverse();
    }
    for (iface, want_v4) in order {
        if let Some(iface) = iface {
            if let Some(ip) = choose_address(&interface_addresses(iface)?, want_v4) {
                return Ok(ip);
            }
        }
    }
    Err(MachineError::NodeIp(match (v4, v6) {
        (None, None) => "no default route; set --node-ip".to_owned(),
        (a, b) => format!(
            "default route interface {} has no usable address; set --node-ip",
            a.or(b).unwrap_or_default()
        ),
    }))
}

/// The machine's hostname, lowercased as upstream does for the default node name.
pub fn hostname() -> Option<String> {
    let h = nix::unistd::gethostname().ok()?;
    let h = h.to_string_lossy().trim().to_lowercase();
    (!h.is_empty()).then_some(h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    const CPUINFO: &str = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: x\n\n\
                           processor\t: 1\nvendor_id\t: GenuineIntel\n\n\
                           processor\t: 2\n\nprocessor\t: 3\nflags\t\t: fpu processor_x\n";
    const CPUINFO_ARM: &str = "processor\t: 0\nBogoMIPS\t: 108.00\nFeatures\t: fp asimd\n\n\
                               processor\t: 1\nBogoMIPS\t: 108.00\n\nHardware\t: BCM2835\n";
    const MEMINFO: &str = "MemTotal:        8049152 kB\nMemFree:         1234 kB\n";
    const ROUTE: &str =
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
        wlan0\t00000000\t0101A8C0\t0003\t0\t0\t600\t00000000\t0\t0\t0\n\
        eth0\t00000000\t0100000A\t0003\t0\t0\t100\t00000000\t0\t0\t0\n\
        eth0\t0000000A\t00000000\t0001\t0\t0\t100\t00FFFFFF\t0\t0\t0\n\
        docker0\t000011AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n";
    const ROUTE6: &str = "00000000000000000000000000000000 00 00000000000000000000000000000000 00 fe800000000000000000000000000001 00000400 00000001 00000000 00000003 eth1\n\
        fd000000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001 eth1\n\
        00000000000000000000000000000000 00 00000000000000000000000000000000 00 00000000000000000000000000000000 ffffffff 00000001 00000000 00200200 lo\n";

    #[test]
    fn parses_cpuinfo() {
        assert_eq!(parse_cpu_count(CPUINFO), Some(4));
        assert_eq!(parse_cpu_count(CPUINFO_ARM), Some(2));
        assert_eq!(parse_cpu_count("vendor_id: x\n"), None);
    }

    #[test]
    fn parses_meminfo() {
        assert_eq!(parse_mem_total(MEMINFO), Some(8049152 * 1024));
        assert_eq!(parse_mem_total("MemFree: 1 kB\n"), None);
        assert_eq!(parse_mem_total("MemTotal: x kB\n"), None);
        assert_eq!(parse_mem_total("MemTotal: 5 MB\n"), None);
        assert_eq!(
            parse_swap_total("MemTotal: 8 kB\nSwapTotal:  2097148 kB\n"),
            Some(2097148 * 1024)
        );
        assert_eq!(parse_swap_total("MemTotal: 8 kB\n"), None);
    }

    #[test]
    fn active_swaps_are_the_lines_after_the_header() {
        let off = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n";
        assert!(parse_active_swaps(off).is_empty());
        let on = format!("{off}/swapfile                               file\t\t2097148\t\t0\t\t-2\n/dev/vda3 partition 1000 0 -3\n");
        assert_eq!(parse_active_swaps(&on), ["/swapfile", "/dev/vda3"]);
        assert!(parse_active_swaps("").is_empty());
    }

    #[test]
    fn parses_os_release() {
        let text = "NAME=\"Debian GNU/Linux\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nID=debian\n";
        assert_eq!(
            parse_os_release_pretty_name(text).as_deref(),
            Some("Debian GNU/Linux 12 (bookworm)")
        );
        assert_eq!(
            parse_os_release_pretty_name("PRETTY_NAME=Alpine\\ Linux\n").as_deref(),
            Some("Alpine Linux")
        );
        assert_eq!(
            parse_os_release_pretty_name("PRETTY_NAME='Ubuntu 24.04 LTS'\n").as_deref(),
            Some("Ubuntu 24.04 LTS")
        );
        assert_eq!(parse_os_release_pretty_name("NAME=x\n"), None);
        assert_eq!(parse_os_release_pretty_name("PRETTY_NAME=\"\"\n"), None);
    }

    #[test]
    fn default_routes() {
        assert_eq!(default_route_interface_v4(ROUTE).as_deref(), Some("eth0"));
        assert_eq!(default_route_interface_v4("Iface\tDestination\n"), None);
        // A route that is down does not count.
        let down = "Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\n\
                    eth0\t00000000\t0100000A\t0002\t0\t0\t100\t00000000\n";
        assert_eq!(default_route_interface_v4(down), None);
        assert_eq!(default_route_interface_v6(ROUTE6).as_deref(), Some("eth1"));
    }

    #[test]
    fn chooses_addresses() {
        let addrs: Vec<IpAddr> = ["127.0.0.1", "169.254.0.5", "10.0.0.7", "fe80::1", "fd00::7"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        assert_eq!(
            choose_address(&addrs, true),
            Some("10.0.0.7".parse().unwrap())
        );
        assert_eq!(
            choose_address(&addrs, false),
            Some("fd00::7".parse().unwrap())
        );
        assert_eq!(choose_address(&addrs[..2], true), None);
    }

    #[test]
    fn hugepage_dirs() {
        assert_eq!(parse_hugepage_dir("hugepages-2048kB"), Some(2 << 20));
        assert_eq!(parse_hugepage_dir("hugepages-1048576kB"), Some(1 << 30));
        assert_eq!(parse_hugepage_dir("hugepages-x"), None);
        assert_eq!(go_arch("x86_64"), "amd64");
        assert_eq!(go_arch("aarch64"), "arm64");
        assert_eq!(go_arch("riscv64"), "riscv64");
    }

    fn write(path: &Path, text: &str) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    #[test]
    fn max_pids_is_the_smaller_kernel_task_limit() {
        let dir = tempfile::tempdir().unwrap();
        let roots = MachineRoots {
            proc: dir.path().join("proc"),
            sys: dir.path().join("sys"),
            etc: dir.path().join("etc"),
        };
        let reader = MachineReader::new(roots.clone(), dir.path(), None);
        assert_eq!(reader.max_pids(), None);
        write(&roots.proc.join("sys/kernel/pid_max"), "4194304\n");
        assert_eq!(reader.max_pids(), Some(4_194_304));
        write(&roots.proc.join("sys/kernel/threads-max"), "62542\n");
        assert_eq!(reader.max_pids(), Some(62_542));
    }

    #[test]
    fn reads_a_fixture_machine() {
        let dir = tempfile::tempdir().unwrap();
        let roots = MachineRoots {
            proc: dir.path().join("proc"),
            sys: dir.path().join("sys"),
            etc: dir.path().join("etc"),
        };
        write(&roots.proc.join("cpuinfo"), CPUINFO);
        write(&roots.proc.join("meminfo"), MEMINFO);
        write(&roots.proc.join("sys/kernel/random/boot_id"), "b0071d\n");
        write(&roots.proc.join("sys/kernel/osrelease"), "6.6.20-edge\n");
        write(&roots.etc.join("machine-id"), "m4ch1ne\n");
        write(&roots.etc.join("os-release"), "PRETTY_NAME=\"Edge OS 1\"\n");
        write(&roots.sys.join("class/dmi/id/product_uuid"), "UUID-1\n");
        let hp = roots.sys.join("kernel/mm/hugepages");
        write(&hp.join("hugepages-2048kB/nr_hugepages"), "16\n");
        write(&hp.join("hugepages-1048576kB/nr_hugepages"), "0\n");
        let reader = MachineReader::new(
            roots.clone(),
            &dir.path().join("root/not/made/yet"),
            Some("192.168.1.20".parse().unwrap()),
        );
        let (info, problems) = reader.read();
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(info.num_cpus, Some(4));
        assert_eq!(info.memory_bytes, Some(8049152 * 1024));
        assert_eq!(
            info.hugepages,
            [
                HugePages {
                    page_size_bytes: 2 << 20,
                    count: 16
                },
                HugePages {
                    page_size_bytes: 1 << 30,
                    count: 0
                }
            ]
        );
        assert!(info.ephemeral_storage_bytes.is_some_and(|b| b > 0));
        assert_eq!(info.machine_id, "m4ch1ne");
        assert_eq!(info.boot_id, "b0071d");
        assert_eq!(info.system_uuid, "UUID-1");
        assert_eq!(info.kernel_version, "6.6.20-edge");
        assert_eq!(info.os_image, "Edge OS 1");
        assert_eq!(info.node_ip, Some("192.168.1.20".parse().unwrap()));
        assert_eq!(info.architecture, go_arch(std::env::consts::ARCH));

        // An empty machine: problems named by path, fallbacks where upstream has them.
        let empty = tempfile::tempdir().unwrap();
        let bare = MachineRoots {
            proc: empty.path().join("proc"),
            sys: empty.path().join("sys"),
            etc: empty.path().join("etc"),
        };
        let (info, problems) = MachineReader::new(bare, empty.path(), None).read();
        assert_eq!(info.memory_bytes, None);
        assert!(
            info.num_cpus.is_some(),
            "falls back to available parallelism"
        );
        assert_eq!(info.os_image, "Linux");
        assert_eq!(info.node_ip, None);
        let text: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
        assert!(text.iter().any(|t| t.contains("meminfo")), "{text:?}");
        assert!(text.iter().any(|t| t.contains("machine-id")), "{text:?}");
        assert!(text.iter().any(|t| t.starts_with("node ip: ")), "{text:?}");
    }

    #[test]
    fn loopback_interface_has_an_address() {
        // getifaddrs on the real machine: "lo" carries 127.0.0.1 (reads only).
        let addrs = interface_addresses("lo").unwrap();
        assert!(
            addrs.contains(&IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)),
            "{addrs:?}"
        );
    }
}
