//! The detail files of both versions, parsed and read from temp-dir cgroups.

use std::fs;

use super::*;

fn write(dir: &Path, files: &[(&str, &str)]) {
    fs::create_dir_all(dir).unwrap();
    for (name, text) in files {
        fs::write(dir.join(name), text).unwrap();
    }
}

#[test]
fn limit_and_list_formats() {
    assert_eq!(v1_limit("9223372036854771712\n"), None, "v1 unlimited");
    assert_eq!(v1_limit("134217728\n"), Some(134217728));
    assert_eq!(v2_limit("max\n"), None);
    assert_eq!(v2_limit("67108864\n"), Some(67108864));
    assert_eq!(parse_cpu_max("max 100000\n"), (None, Some(100000)));
    assert_eq!(parse_cpu_max("50000 100000\n"), (Some(50000), Some(100000)));
    assert_eq!(parse_procs("12\n40\n41\n"), (3, Some(12)));
    assert_eq!(parse_procs(""), (0, None));
    assert_eq!(
        (weight_as_shares(1), weight_as_shares(10_000)),
        (2, 262_144)
    );
}

#[test]
fn block_io_of_both_versions_by_device() {
    let mut io = Vec::new();
    parse_blkio_v1(
        "8:0 Read 4096\n8:0 Write 8192\n8:0 Sync 1\n8:0 Total 12288\n253:1 Read 10\nTotal 12298\n",
        true,
        &mut io,
    );
    parse_blkio_v1("8:0 Read 3\n8:0 Write 5\n", false, &mut io);
    assert_eq!(
        io,
        vec![
            DeviceIo {
                major: 8,
                minor: 0,
                read_bytes: 4096,
                write_bytes: 8192,
                reads: 3,
                writes: 5,
                ..Default::default()
            },
            DeviceIo {
                major: 253,
                minor: 1,
                read_bytes: 10,
                ..Default::default()
            },
        ]
    );
    let v2 = parse_io_stat("8:0 rbytes=4096 wbytes=8192 rios=3 wios=5 dbytes=0 dios=0\nbad line\n");
    assert_eq!(v2, vec![io[0].clone()]);
}

#[test]
fn v1_detail_from_the_cpu_cpuacct_memory_pids_and_blkio_hierarchies() {
    let root = tempfile::tempdir().unwrap();
    let dir = |h: &str| root.path().join(h).join("kubepods/pod1/c1");
    write(
        &dir("cpu"),
        &[
            (
                "cpu.stat",
                "nr_periods 120\nnr_throttled 30\nthrottled_time 4500000000\n",
            ),
            ("cpu.shares", "512\n"),
            ("cpu.cfs_quota_us", "50000\n"),
            ("cpu.cfs_period_us", "100000\n"),
        ],
    );
    // An older kernel: no usage_user, the stat file in clock ticks.
    write(
        &dir("cpuacct"),
        &[("cpuacct.stat", "user 250\nsystem 50\n")],
    );
    write(
        &dir("memory"),
        &[
            (
                "memory.stat",
                "cache 1\npgfault 9\npgmajfault 1\ntotal_cache 4096\ntotal_mapped_file 1024\n\
                 total_swap 0\ntotal_pgfault 90\n",
            ),
            ("memory.failcnt", "2\n"),
            ("memory.max_usage_in_bytes", "65536\n"),
            (
                "memory.oom_control",
                "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n",
            ),
            ("memory.limit_in_bytes", "134217728\n"),
            ("memory.memsw.limit_in_bytes", "9223372036854771712\n"),
            ("memory.soft_limit_in_bytes", "9223372036854771712\n"),
            ("cgroup.procs", "77\n78\n"),
        ],
    );
    write(&dir("pids"), &[("pids.max", "max\n")]);
    write(
        &dir("blkio"),
        &[
            ("blkio.throttle.io_service_bytes_recursive", "Total 0\n"),
            (
                "blkio.io_service_bytes_recursive",
                "8:0 Read 100\n8:0 Write 200\nTotal 300\n",
            ),
            (
                "blkio.throttle.io_serviced_recursive",
                "8:0 Read 1\n8:0 Write 2\nTotal 3\n",
            ),
        ],
    );
    let (cpu, cpuacct, memory, pids, blkio) = (
        dir("cpu"),
        dir("cpuacct"),
        dir("memory"),
        dir("pids"),
        dir("blkio"),
    );
    let got = v1(
        V1Dirs {
            cpu: Some(&cpu),
            cpuacct: Some(&cpuacct),
            memory: Some(&memory),
            pids: Some(&pids),
            blkio: Some(&blkio),
        },
        100,
    );
    let want = CgroupDetail {
        cpu_user_ns: Some(2_500_000_000),
        cpu_system_ns: Some(500_000_000),
        cfs_periods: Some(120),
        cfs_throttled_periods: Some(30),
        cfs_throttled_ns: Some(4_500_000_000),
        memory_cache: Some(4096),
        memory_mapped_file: Some(1024),
        memory_swap: Some(0),
        memory_failcnt: Some(2),
        memory_max_usage: Some(65536),
        local_pgfault: Some(9),
        local_pgmajfault: Some(1),
        oom_kills: Some(1),
        tasks_max: None,
        processes: Some(2),
        first_pid: Some(77),
        spec: CgroupSpec {
            cpu_shares: Some(512),
            cpu_quota_us: Some(50000),
            cpu_period_us: Some(100000),
            memory_limit: Some(134217728),
            memory_swap_limit: None,
            memory_reservation: None,
        },
        io: vec![DeviceIo {
            major: 8,
            minor: 0,
            read_bytes: 100,
            write_bytes: 200,
            reads: 1,
            writes: 2,
            ..Default::default()
        }],
    };
    assert_eq!(got, want);
    // No quota: -1.
    fs::write(cpu.join("cpu.cfs_quota_us"), "-1\n").unwrap();
    let unlimited = v1(
        V1Dirs {
            cpu: Some(&cpu),
            ..Default::default()
        },
        100,
    );
    assert_eq!(unlimited.spec.cpu_quota_us, None);
}

#[test]
fn v2_detail_from_the_unified_files() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("kubepods/pod1/c1");
    write(
        &dir,
        &[
            (
                "cpu.stat",
                "usage_usec 3000000\nuser_usec 2000000\nsystem_usec 1000000\nnr_periods 40\n\
                 nr_throttled 4\nthrottled_usec 250000\n",
            ),
            ("cpu.weight", "100\n"),
            ("cpu.max", "20000 100000\n"),
            (
                "memory.stat",
                "anon 1\nfile 8192\nfile_mapped 512\npgfault 5\npgmajfault 0\n",
            ),
            ("memory.swap.current", "4096\n"),
            ("memory.events", "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n"),
            ("memory.max", "268435456\n"),
            ("memory.swap.max", "max\n"),
            ("memory.low", "0\n"),
            ("pids.max", "1024\n"),
            ("cgroup.procs", "900\n"),
            (
                "io.stat",
                "259:0 rbytes=10 wbytes=20 rios=1 wios=2 dbytes=0 dios=0\n",
            ),
        ],
    );
    let got = v2(&dir);
    assert_eq!(got.cpu_user_ns, Some(2_000_000_000));
    assert_eq!(got.cfs_throttled_ns, Some(250_000_000));
    assert_eq!(
        got.spec.cpu_shares,
        Some(2597),
        "cAdvisor's map of weight 100"
    );
    assert_eq!(got.spec.cpu_quota_us, Some(20000));
    assert_eq!(got.spec.memory_limit, Some(268435456));
    assert_eq!(got.spec.memory_swap_limit, None);
    assert_eq!(got.spec.memory_reservation, None, "low 0 is no reservation");
    assert_eq!(
        (got.memory_cache, got.memory_mapped_file),
        (Some(8192), Some(512))
    );
    assert_eq!(got.memory_swap, Some(4096));
    assert_eq!((got.memory_failcnt, got.oom_kills), (Some(3), Some(1)));
    assert_eq!(
        got.memory_max_usage, None,
        "no memory.peak before Linux 5.19"
    );
    assert_eq!(got.tasks_max, Some(1024));
    assert_eq!((got.processes, got.first_pid), (Some(1), Some(900)));
    assert_eq!(got.io.len(), 1);
    assert_eq!(got.io[0].write_bytes, 20);
    assert_eq!(v2(&root.path().join("missing")), CgroupDetail::default());
}
