//! Parsing tables for the v1 and v2 usage files, and both readers over the temp-dir
//! cgroupfs model.

use super::*;
use crate::cgroups::testfs::Model;

const V1_MEMORY_STAT: &str = "cache 8192\nrss 4096\ninactive_file 100\n\
total_cache 1048576\ntotal_rss 2097152\ntotal_inactive_file 524288\n\
total_pgfault 3000\ntotal_pgmajfault 7\n";

const V2_MEMORY_STAT: &str = "anon 2097152\nfile 1048576\nkernel 4096\n\
inactive_anon 0\nactive_anon 2097152\ninactive_file 524288\nactive_file 524288\n\
pgfault 3000\npgmajfault 7\n";

#[test]
fn memory_stat_tables() {
    let want = MemoryStat {
        inactive_file: Some(524288),
        rss: Some(2097152),
        pgfault: Some(3000),
        pgmajfault: Some(7),
    };
    let cases: &[(&str, MemoryStat, MemoryStat)] = &[
        (
            "v1 totals, not the local keys",
            parse_memory_stat_v1(V1_MEMORY_STAT),
            want,
        ),
        ("v2 names", parse_memory_stat_v2(V2_MEMORY_STAT), want),
        (
            "empty file",
            parse_memory_stat_v1(""),
            MemoryStat::default(),
        ),
        (
            "malformed lines are skipped",
            parse_memory_stat_v2("anon x\npgfault\ninactive_file 5\n"),
            MemoryStat {
                inactive_file: Some(5),
                ..Default::default()
            },
        ),
    ];
    for (name, got, want) in cases {
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn single_value_and_cpu_stat_tables() {
    let cases: &[(&str, Option<u64>, Option<u64>)] = &[
        (
            "cpuacct.usage",
            parse_single("123456789\n"),
            Some(123456789),
        ),
        ("memory.current", parse_single("4096"), Some(4096)),
        ("pids.current", parse_single("3\n"), Some(3)),
        ("garbage", parse_single("max"), None),
        (
            "cpu.stat usage_usec in ns",
            parse_cpu_stat_v2("usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n"),
            Some(1_500_000),
        ),
        (
            "cpu.stat without usage",
            parse_cpu_stat_v2("nr_periods 0\n"),
            None,
        ),
    ];
    for (name, got, want) in cases {
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn working_set_is_usage_minus_inactive_file_never_negative() {
    assert_eq!(working_set(1000, Some(300)), 700);
    assert_eq!(working_set(1000, None), 1000);
    assert_eq!(working_set(100, Some(300)), 0);
}

#[test]
fn meminfo_gives_total_used_and_inactive_file() {
    let text = "MemTotal:       16384 kB\nMemFree:         4096 kB\nInactive(file):   1024 kB\n";
    assert_eq!(
        parse_meminfo(text),
        Some((16384 * 1024, 12288 * 1024, Some(1024 * 1024)))
    );
    assert_eq!(parse_meminfo("MemFree: 1 kB\n"), None);
}

#[test]
fn v1_reader_reads_cpuacct_memory_and_pids() {
    let model = Model::v1();
    let name = "/kubepods/pod1";
    model.populate(name);
    model.set("cpuacct", name, "cpuacct.usage", "5000000000\n");
    model.set("memory", name, "memory.usage_in_bytes", "3145728\n");
    model.set("memory", name, "memory.stat", V1_MEMORY_STAT);
    model.set("pids", name, "pids.current", "4\n");
    let reader = reader_for(&model.layout());
    let got = reader.read(&CgroupName::parse(name).unwrap()).unwrap();
    assert_eq!(
        got,
        CgroupUsage {
            cpu_usage_ns: Some(5_000_000_000),
            memory_usage_bytes: Some(3145728),
            working_set_bytes: Some(3145728 - 524288),
            rss_bytes: Some(2097152),
            page_faults: Some(3000),
            major_page_faults: Some(7),
            pids: Some(4),
        }
    );
}

#[test]
fn v2_reader_reads_cpu_stat_memory_current_and_pids() {
    let model = Model::v2("cpu memory pids");
    let name = "/kubepods/pod1";
    model.populate(name);
    model.set(
        "",
        name,
        "cpu.stat",
        "usage_usec 2500000\nuser_usec 2000000\n",
    );
    model.set("", name, "memory.current", "3145728\n");
    model.set("", name, "memory.stat", V2_MEMORY_STAT);
    model.set("", name, "pids.current", "2\n");
    let reader = reader_for(&model.layout());
    let got = reader.read(&CgroupName::parse(name).unwrap()).unwrap();
    assert_eq!(
        got,
        CgroupUsage {
            cpu_usage_ns: Some(2_500_000_000),
            memory_usage_bytes: Some(3145728),
            working_set_bytes: Some(3145728 - 524288),
            rss_bytes: Some(2097152),
            page_faults: Some(3000),
            major_page_faults: Some(7),
            pids: Some(2),
        }
    );
}

#[test]
fn missing_files_leave_numbers_unset_and_a_missing_cgroup_is_an_error() {
    let model = Model::v2("cpu memory");
    let name = "/kubepods/pod2";
    model.populate(name);
    // A populated model cgroup has memory.current (0) but no cpu.stat or memory.stat.
    let reader = reader_for(&model.layout());
    let got = reader.read(&CgroupName::parse(name).unwrap()).unwrap();
    assert_eq!(got.cpu_usage_ns, None);
    assert_eq!(got.memory_usage_bytes, Some(0));
    assert_eq!(got.pids, None);
    let err = reader
        .read(&CgroupName::parse("/kubepods/nope").unwrap())
        .unwrap_err();
    assert!(matches!(err, StatsError::NoCgroup { .. }), "{err}");
}
