"""Every measurement, tag and field name epochscope writes or reads.

This module is the contract between agent, workloads, collector and dashboard: it is the
only place those names are spelled. Elsewhere, write ``Disk.READ_BYTES`` rather than
``"read_bytes"``.

A field name is a ``str`` that also carries its kind (counter, gauge or text), its unit and
a help line, so the Prometheus exposition and the collector's arithmetic know how to treat
it without a second table.

Units: base units, as Prometheus and node_exporter use them: bytes, seconds, joules,
counts. Cumulative counters of bytes and counts are integers; counters of seconds or
joules are floats (whole seconds would quantise a 1 Hz rate); gauges are floats. A name
ends in its unit (``_bytes``, ``_seconds``), so the Prometheus name is
``epochscope_<measurement>_<field>[_total]`` and ``promtool check metrics`` finds nothing
to say (``tests/system/test_promtool.py``).

A few fields are one Prometheus family with a label rather than a name each: the CPU
modes are ``epochscope_cpu_seconds_total{mode="user"}`` (node_exporter's
``node_cpu_seconds_total``), while line protocol keeps one field per mode
(``cpu user_seconds=...``), as Telegraf does.
"""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar

PROMETHEUS_NAMESPACE = "epochscope"


class Kind(StrEnum):
    COUNTER = "counter"  # cumulative, only grows (a drop is a reset)
    GAUGE = "gauge"  # a level at the time of the sample
    TEXT = "text"  # a string field (workload events, labels)


class FieldName(str):
    """A field name with its kind, unit and help text.

    ``family``/``labels``/``family_help``: where the field is one sample of a shared
    Prometheus family (``family`` replaces the field name in the metric name and
    ``labels`` tell the samples apart); empty for a field that is a family of its own.
    """

    kind: Kind
    unit: str
    help: str
    family: str
    labels: tuple[tuple[str, str], ...]
    family_help: str

    def __new__(
        cls,
        name: str,
        kind: Kind,
        unit: str,
        help: str,
        family: str = "",
        labels: tuple[tuple[str, str], ...] = (),
        family_help: str = "",
    ) -> FieldName:
        self = super().__new__(cls, name)
        self.kind = kind
        self.unit = unit
        self.help = help
        self.family = family
        self.labels = labels
        self.family_help = family_help
        return self

    @property
    def is_counter(self) -> bool:
        return self.kind is Kind.COUNTER


def counter(name: str, unit: str, help: str) -> FieldName:
    return FieldName(name, Kind.COUNTER, unit, help)


def gauge(name: str, unit: str, help: str) -> FieldName:
    return FieldName(name, Kind.GAUGE, unit, help)


def text(name: str, help: str) -> FieldName:
    return FieldName(name, Kind.TEXT, "", help)


CPU_MODE_HELP = "Seconds all CPUs spent in each mode (/proc/stat, USER_HZ ticks / SC_CLK_TCK)"


def cpu_mode(mode: str, help: str) -> FieldName:
    """``<mode>_seconds`` in line protocol, ``epochscope_cpu_seconds_total{mode=...}``
    in Prometheus."""
    return FieldName(
        f"{mode}_seconds",
        Kind.COUNTER,
        "seconds",
        help,
        family="seconds",
        labels=((Tag.MODE, mode),),
        family_help=CPU_MODE_HELP,
    )


class Tag:
    """Tag (label) names."""

    HOST = "host"
    DEVICE = "device"
    KIND = "kind"
    INTERFACE = "interface"
    PORT = "port"
    MODE = "mode"  # Prometheus only: the CPU mode of epochscope_cpu_seconds_total
    MOUNTPOINT = "mountpoint"
    SERVER = "server"
    EXPORT = "export"
    NFS_VERSION = "nfs_version"
    PROTO = "proto"
    DUPLICATE_OF = "duplicate_of"
    GPU = "gpu"
    UUID = "uuid"
    NAME = "name"
    MIG = "mig"  # "<GPU instance id>/<compute instance id>" of a MIG device
    PID = "pid"
    RUN_ID = "run_id"
    RANK = "rank"
    FRAMEWORK = "framework"
    SAMPLER = "sampler"  # the agent's sampler an agent_sampler point is about
    JOB_ID = "job_id"  # a Slurm job's id, on the per-job series (jobs sampler) only
    UID = "uid"  # slurm_job: the job owner's numeric uid
    USER = "user"  # slurm_job: the job owner's name, where it resolves
    ACCOUNT = "account"  # slurm_job: SLURM_JOB_ACCOUNT of a job process
    PARTITION = "partition"  # slurm_job: SLURM_JOB_PARTITION of a job process
    METHOD = "method"  # ceiling: how the ceiling was measured
    GPUS = "gpus"  # slurm_job: the job's GPUs as Slurm or CUDA names them ("0,1", "GPU-...")
    COMMAND = "command"  # process: the process's name as the kernel keeps it (comm)


class DiskKind:
    """Values of the ``kind`` tag on ``disk`` points. Node totals use ``DISK`` only."""

    DISK = "disk"
    PARTITION = "partition"
    VIRTUAL = "virtual"  # loop, dm, md, zram, ram, nbd...: their I/O lands on a disk too


class InterfaceKind:
    """Values of the ``kind`` tag on ``net`` points. Node totals exclude ``LOOPBACK``."""

    LOOPBACK = "loopback"
    PHYSICAL = "physical"
    VIRTUAL = "virtual"  # /sys/devices/virtual/net: bridges, veth, tunnels


class Measurement:
    """Base of the measurement specs below: a name, its tags and its fields."""

    NAME: ClassVar[str]
    TAGS: ClassVar[tuple[str, ...]]

    @classmethod
    def fields(cls) -> dict[str, FieldName]:
        return {
            str(value): value
            for klass in reversed(cls.__mro__)
            for value in vars(klass).values()
            if isinstance(value, FieldName)
        }


class Cpu(Measurement):
    """Whole-node CPU time from /proc/stat, in seconds (ticks / SC_CLK_TCK)."""

    NAME = "cpu"
    TAGS = (Tag.HOST,)
    USER_SECONDS = cpu_mode("user", "Time in user mode, all CPUs")
    NICE_SECONDS = cpu_mode("nice", "Time in user mode at low priority")
    SYSTEM_SECONDS = cpu_mode("system", "Time in kernel mode")
    IDLE_SECONDS = cpu_mode("idle", "Idle time")
    IOWAIT_SECONDS = cpu_mode("iowait", "Idle time with I/O outstanding")
    IRQ_SECONDS = cpu_mode("irq", "Time servicing interrupts")
    SOFTIRQ_SECONDS = cpu_mode("softirq", "Time servicing softirqs")
    STEAL_SECONDS = cpu_mode("steal", "Time stolen by the hypervisor")
    CPUS_ONLINE = gauge("cpus_online", "count", "CPUs with a per-CPU line in /proc/stat")


class Memory(Measurement):
    """/proc/meminfo levels and /proc/vmstat paging counters."""

    NAME = "memory"
    TAGS = (Tag.HOST,)
    TOTAL_BYTES = gauge("total_bytes", "bytes", "MemTotal")
    FREE_BYTES = gauge("free_bytes", "bytes", "MemFree")
    AVAILABLE_BYTES = gauge("available_bytes", "bytes", "MemAvailable")
    CACHED_BYTES = gauge("cached_bytes", "bytes", "Cached: the page cache")
    BUFFERS_BYTES = gauge("buffers_bytes", "bytes", "Buffers")
    DIRTY_BYTES = gauge("dirty_bytes", "bytes", "Dirty")
    WRITEBACK_BYTES = gauge("writeback_bytes", "bytes", "Writeback")
    ACTIVE_FILE_BYTES = gauge("active_file_bytes", "bytes", "Active(file)")
    INACTIVE_FILE_BYTES = gauge("inactive_file_bytes", "bytes", "Inactive(file)")
    SHMEM_BYTES = gauge("shmem_bytes", "bytes", "Shmem")
    PGPGIN_BYTES = counter(
        "pgpgin_bytes", "bytes", "vmstat pgpgin x 1024: bytes paged in from block devices"
    )
    PGPGOUT_BYTES = counter(
        "pgpgout_bytes", "bytes", "vmstat pgpgout x 1024: bytes paged out to block devices"
    )
    PGFAULT = counter("pgfault", "count", "vmstat pgfault: page faults")
    PGMAJFAULT = counter("pgmajfault", "count", "vmstat pgmajfault: faults that read storage")
    PAGE_CACHE_DROPS = counter(
        "page_cache_drops", "count", "vmstat drop_pagecache: writes of 1 or 3 to vm.drop_caches"
    )
    FILE_REFAULT_BYTES = counter(
        "file_refault_bytes",
        "bytes",
        "vmstat workingset_refault_file x page size: file pages read back after reclaim",
    )


class Disk(Measurement):
    """/proc/diskstats per block device. Sectors are 512 bytes whatever the device."""

    NAME = "disk"
    TAGS = (Tag.HOST, Tag.DEVICE, Tag.KIND)
    READS = counter("reads", "count", "Reads completed")
    READS_MERGED = counter("reads_merged", "count", "Adjacent reads merged (iostat rrqm/s)")
    READ_BYTES = counter("read_bytes", "bytes", "Bytes read (sectors x 512)")
    READ_TIME_SECONDS = counter("read_time_seconds", "seconds", "Time spent reading")
    WRITES = counter("writes", "count", "Writes completed")
    WRITES_MERGED = counter("writes_merged", "count", "Adjacent writes merged (iostat wrqm/s)")
    WRITE_BYTES = counter("write_bytes", "bytes", "Bytes written (sectors x 512)")
    WRITE_TIME_SECONDS = counter("write_time_seconds", "seconds", "Time spent writing")
    IN_FLIGHT = gauge("in_flight", "count", "I/Os currently in progress")
    IO_TIME_SECONDS = counter("io_time_seconds", "seconds", "Time with I/O in progress")
    IO_TIME_WEIGHTED_SECONDS = counter(
        "io_time_weighted_seconds",
        "seconds",
        "I/O time weighted by I/Os in progress; its rate is the average queue size (aqu-sz)",
    )
    DISCARDS = counter("discards", "count", "Discards completed (Linux 4.18+)")
    DISCARDS_MERGED = counter("discards_merged", "count", "Adjacent discards merged")
    DISCARD_BYTES = counter("discard_bytes", "bytes", "Bytes discarded (sectors x 512)")
    DISCARD_TIME_SECONDS = counter("discard_time_seconds", "seconds", "Time spent discarding")
    FLUSHES = counter("flushes", "count", "Flush requests completed (Linux 5.5+)")
    FLUSH_TIME_SECONDS = counter("flush_time_seconds", "seconds", "Time spent flushing")


class Net(Measurement):
    """/proc/net/dev per interface."""

    NAME = "net"
    TAGS = (Tag.HOST, Tag.INTERFACE, Tag.KIND)
    RX_BYTES = counter("rx_bytes", "bytes", "Bytes received")
    RX_PACKETS = counter("rx_packets", "count", "Packets received")
    RX_ERRORS = counter("rx_errors", "count", "Receive errors")
    RX_DROPS = counter("rx_drops", "count", "Received packets dropped")
    TX_BYTES = counter("tx_bytes", "bytes", "Bytes sent")
    TX_PACKETS = counter("tx_packets", "count", "Packets sent")
    TX_ERRORS = counter("tx_errors", "count", "Send errors")
    TX_DROPS = counter("tx_drops", "count", "Sent packets dropped")


class Infiniband(Measurement):
    """/sys/class/infiniband/<device>/ports/<port>/counters (and hw_counters).

    ``port_rcv_data``/``port_xmit_data`` count 4-byte words; the byte fields are x4.
    A saturated counter (4294967295 for a 32-bit one; error counters are 4 to 16 bits)
    or an ``N/A`` file gives no field at all.
    """

    NAME = "infiniband"
    TAGS = (Tag.HOST, Tag.DEVICE, Tag.PORT)
    HW_COUNTER_PREFIX: ClassVar[str] = "hw_"  # hw_counters/<name> -> field hw_<name>
    RCV_BYTES = counter("rcv_bytes", "bytes", "Bytes received (4 x port_rcv_data)")
    XMIT_BYTES = counter("xmit_bytes", "bytes", "Bytes sent (4 x port_xmit_data)")
    RCV_PACKETS = counter("rcv_packets", "count", "Packets received")
    XMIT_PACKETS = counter("xmit_packets", "count", "Packets sent")
    UNICAST_RCV_PACKETS = counter("unicast_rcv_packets", "count", "Unicast packets received")
    UNICAST_XMIT_PACKETS = counter("unicast_xmit_packets", "count", "Unicast packets sent")
    MULTICAST_RCV_PACKETS = counter("multicast_rcv_packets", "count", "Multicast received")
    MULTICAST_XMIT_PACKETS = counter("multicast_xmit_packets", "count", "Multicast sent")
    XMIT_WAIT = counter("xmit_wait", "ticks", "Ticks with data to send but no credit")
    SYMBOL_ERROR = counter("symbol_error", "count", "Minor link errors")
    LINK_ERROR_RECOVERY = counter("link_error_recovery", "count", "Link error recoveries")
    LINK_DOWNED = counter("link_downed", "count", "Times the link went down")
    RCV_ERRORS = counter("rcv_errors", "count", "Received packets with errors")
    RCV_REMOTE_PHYSICAL_ERRORS = counter(
        "rcv_remote_physical_errors", "count", "Received packets marked bad upstream"
    )
    RCV_SWITCH_RELAY_ERRORS = counter(
        "rcv_switch_relay_errors", "count", "Packets the switch could not relay"
    )
    XMIT_DISCARDS = counter("xmit_discards", "count", "Outbound packets discarded")
    XMIT_CONSTRAINT_ERRORS = counter("xmit_constraint_errors", "count", "Outbound filtered")
    RCV_CONSTRAINT_ERRORS = counter("rcv_constraint_errors", "count", "Inbound filtered")
    LOCAL_LINK_INTEGRITY_ERRORS = counter(
        "local_link_integrity_errors", "count", "Local physical errors over threshold"
    )
    EXCESSIVE_BUFFER_OVERRUN_ERRORS = counter(
        "excessive_buffer_overrun_errors", "count", "Consecutive buffer overruns"
    )
    VL15_DROPPED = counter("vl15_dropped", "count", "Management packets dropped")
    RATE_BYTES_PER_SECOND = gauge("rate_bytes_per_second", "bytes/s", "Link rate")
    STATE = gauge("state", "enum", "Logical state: 1 down, 2 init, 3 armed, 4 active")
    PHYS_STATE = gauge("phys_state", "enum", "Physical state: 5 LinkUp")
    SATURATED_COUNTERS = gauge(
        "saturated_counters", "count", "PMA counters stuck at their maximum (not reported)"
    )


class Nfs(Measurement):
    """/proc/self/mountstats per NFS mount.

    ``app_read_bytes`` is what applications read (page-cache hits included);
    ``server_read_bytes`` is what crossed the wire. Mounts of one export with identical
    counters carry ``duplicate_of`` (the first mountpoint) so totals count them once.
    """

    NAME = "nfs"
    TAGS = (
        Tag.HOST,
        Tag.MOUNTPOINT,
        Tag.SERVER,
        Tag.EXPORT,
        Tag.NFS_VERSION,
        Tag.PROTO,
        Tag.DUPLICATE_OF,
    )
    APP_READ_BYTES = counter("app_read_bytes", "bytes", "Bytes read by applications")
    APP_WRITE_BYTES = counter("app_write_bytes", "bytes", "Bytes written by applications")
    DIRECT_READ_BYTES = counter("direct_read_bytes", "bytes", "O_DIRECT bytes read")
    DIRECT_WRITE_BYTES = counter("direct_write_bytes", "bytes", "O_DIRECT bytes written")
    SERVER_READ_BYTES = counter("server_read_bytes", "bytes", "Bytes read from the server")
    SERVER_WRITE_BYTES = counter("server_write_bytes", "bytes", "Bytes written to the server")
    READ_PAGES = counter("read_pages", "count", "Pages read")
    WRITE_PAGES = counter("write_pages", "count", "Pages written")
    READ_OPS = counter("read_ops", "count", "READ operations")
    READ_TRANSMISSIONS = counter("read_transmissions", "count", "READ transmissions")
    READ_MAJOR_TIMEOUTS = counter("read_major_timeouts", "count", "READ major timeouts")
    READ_BYTES_SENT = counter("read_bytes_sent", "bytes", "READ request bytes sent")
    READ_BYTES_RECEIVED = counter("read_bytes_received", "bytes", "READ reply bytes received")
    READ_QUEUE_SECONDS = counter("read_queue_seconds", "seconds", "READ time queued")
    READ_RTT_SECONDS = counter("read_rtt_seconds", "seconds", "READ round-trip time")
    READ_EXECUTE_SECONDS = counter("read_execute_seconds", "seconds", "READ total execute time")
    READ_ERRORS = counter("read_errors", "count", "READ errors (RPC iostats 1.1 only)")
    WRITE_OPS = counter("write_ops", "count", "WRITE operations")
    WRITE_TRANSMISSIONS = counter("write_transmissions", "count", "WRITE transmissions")
    WRITE_MAJOR_TIMEOUTS = counter("write_major_timeouts", "count", "WRITE major timeouts")
    WRITE_BYTES_SENT = counter("write_bytes_sent", "bytes", "WRITE request bytes sent")
    WRITE_BYTES_RECEIVED = counter("write_bytes_received", "bytes", "WRITE reply bytes")
    WRITE_QUEUE_SECONDS = counter("write_queue_seconds", "seconds", "WRITE time queued")
    WRITE_RTT_SECONDS = counter("write_rtt_seconds", "seconds", "WRITE round-trip time")
    WRITE_EXECUTE_SECONDS = counter("write_execute_seconds", "seconds", "WRITE total execute time")
    WRITE_ERRORS = counter("write_errors", "count", "WRITE errors (RPC iostats 1.1 only)")
    AGE_SECONDS = gauge("age_seconds", "seconds", "Seconds since the mount")


class NfsRpc(Measurement):
    """/proc/net/rpc/nfs: the NFS client's RPC layer, all mounts together."""

    NAME = "nfs_rpc"
    TAGS = (Tag.HOST,)
    CALLS = counter("calls", "count", "RPC calls")
    RETRANSMISSIONS = counter("retransmissions", "count", "RPC retransmissions")
    AUTH_REFRESHES = counter("auth_refreshes", "count", "RPC credential refreshes")


class Gpu(Measurement):
    """NVML, one point per GPU and one per MIG device (tagged ``mig``, its ``uuid`` is
    ``MIG-...``; the parent GPU's point has no ``mig`` tag). Node totals count the points
    without ``mig`` only: a MIG device's memory is part of its parent's."""

    NAME = "gpu"
    TAGS = (Tag.HOST, Tag.GPU, Tag.UUID, Tag.NAME, Tag.MIG)
    UTILIZATION_PERCENT = gauge(
        "utilization_percent",
        "percent",
        "Time a kernel was running: mean of NVML's utilisation samples since the last reading",
    )
    MEMORY_UTILIZATION_PERCENT = gauge(
        "memory_utilization_percent", "percent", "Time device memory was read or written"
    )
    MEMORY_USED_BYTES = gauge("memory_used_bytes", "bytes", "Device memory used")
    MEMORY_TOTAL_BYTES = gauge("memory_total_bytes", "bytes", "Device memory installed")
    POWER_WATTS = gauge("power_watts", "watts", "Power draw")
    ENERGY_JOULES = counter("energy_joules", "joules", "Energy since driver load")
    TEMPERATURE_CELSIUS = gauge("temperature_celsius", "celsius", "GPU core temperature")
    SM_CLOCK_MHZ = gauge("sm_clock_mhz", "megahertz", "SM clock")
    PCIE_RX_BYTES = counter("pcie_rx_bytes", "bytes", "PCIe bytes received (NVML field value)")
    PCIE_TX_BYTES = counter("pcie_tx_bytes", "bytes", "PCIe bytes sent (NVML field value)")
    PCIE_RX_BYTES_PER_SECOND = gauge(
        "pcie_rx_bytes_per_second", "bytes/s", "PCIe receive over NVML's 20 ms window"
    )
    PCIE_TX_BYTES_PER_SECOND = gauge(
        "pcie_tx_bytes_per_second", "bytes/s", "PCIe transmit over NVML's 20 ms window"
    )
    THROTTLE_REASONS = gauge("throttle_reasons", "bitmask", "NVML clocks-throttle reasons")
    READING_AGE_SECONDS = gauge(
        "reading_age_seconds",
        "seconds",
        "How old this NVML reading was at the tick that sent it (GPUs are read in threads)",
    )


class GpuProcess(Measurement):
    """NVML per process: one point per (GPU or MIG device, compute process)."""

    NAME = "gpu_process"
    # job_id: the Slurm job whose cgroup holds the pid (agent/samplers/gpu.py)
    TAGS = (Tag.HOST, Tag.GPU, Tag.UUID, Tag.MIG, Tag.PID, Tag.JOB_ID)
    MEMORY_USED_BYTES = gauge("memory_used_bytes", "bytes", "Device memory the process uses")
    SM_UTILIZATION_PERCENT = gauge(
        "sm_utilization_percent",
        "percent",
        "The process's share of SM time: mean of NVML's samples since the last reading",
    )
    MEMORY_UTILIZATION_PERCENT = gauge(
        "memory_utilization_percent",
        "percent",
        "The process's share of memory-controller time, mean of NVML's samples",
    )


class AgentSelf(Measurement):
    """The agent's own cost and health."""

    NAME = "agent"
    TAGS = (Tag.HOST,)
    CPU_SECONDS = counter("cpu_seconds", "seconds", "Agent process CPU time (user+system)")
    RSS_BYTES = gauge("rss_bytes", "bytes", "Agent resident set size")
    SAMPLE_DURATION_SECONDS = gauge(
        "sample_duration_seconds", "seconds", "Wall time of the last sample of all samplers"
    )
    SPOOL_BYTES = gauge("spool_bytes", "bytes", "Bytes waiting in the disk spool")
    SPOOL_POINTS = gauge("spool_points", "count", "Points waiting in the disk spool")
    POINTS_DROPPED = counter("points_dropped", "count", "Points dropped because the spool was full")
    SPOOL_ERROR = gauge(
        "spool_error", "boolean", "1 while writing, reading or cleaning the disk spool fails"
    )
    MEMORY_POINTS = gauge(
        "memory_points", "count", "Points held in memory while the spool cannot take them"
    )
    EDGE_SAMPLES = counter(
        "edge_samples", "count", "Edge samples taken for ranks' run and epoch events (POST /edge)"
    )
    # Only where [otlp] export is on (agent.otlp):
    OTLP_POINTS_DROPPED = counter(
        "otlp_points_dropped",
        "count",
        "Points the OTLP export dropped: past its queue's cap while the endpoint was down, "
        "or refused",
    )
    # Only on a host where the gpu sampler runs:
    GPUS_HUNG = gauge(
        "gpus_hung", "count", "GPUs with an NVML call outstanding past its timeout (not reported)"
    )
    GPUS_FAILING = gauge(
        "gpus_failing", "count", "GPUs whose last reading met an NVML error other than unsupported"
    )
    GPUS_LOST = gauge("gpus_lost", "count", "GPUs NVML declared lost (fell off the bus)")
    GPU_READING_AGE_SECONDS = gauge(
        "gpu_reading_age_seconds", "seconds", "Age of the oldest GPU reading the last tick sent"
    )


class SamplerSelf(Measurement):
    """The agent's own cost and health per sampler, as node_exporter's
    ``node_scrape_collector_duration_seconds`` and ``_success``: the daemon times each
    sampler's ``sample()`` every tick. Reported only where the ``agent`` sampler runs."""

    NAME = "agent_sampler"
    TAGS = (Tag.HOST, Tag.SAMPLER)
    DURATION_SECONDS = gauge(
        "duration_seconds", "seconds", "Wall time of the sampler's sample() at the last tick"
    )
    SUCCESS = gauge(
        "success", "boolean", "1 if the sampler's sample() returned at the last tick, 0 if raised"
    )


class Ceiling(Measurement):
    """The most a node's hardware delivers, measured once by ``agent ceilings`` and kept
    in a file the ``ceilings`` sampler reports at every tick (``agent/ceilings.py``), so
    a run's per-epoch rates can be stated as a share of them. ``device``: the disk, the
    interface or InfiniBand port (``mlx5_0/1``), the GPU index, ``cpu``, or the peer a
    throughput was measured to (``10.0.0.2:5291``); ``method``: how it was measured
    (``o_direct``, ``fadvise``, ``sysfs``, ``nvml``, ``pillow``, ``tcp``)."""

    NAME = "ceiling"
    TAGS = (Tag.HOST, Tag.DEVICE, Tag.KIND, Tag.METHOD)
    DISK_SEQUENTIAL_READ = gauge(
        "disk_sequential_read_bytes_per_second",
        "bytes/s",
        "1 MiB reads in order, direct I/O, on the device that holds the data",
    )
    DISK_RANDOM_READ = gauge(
        "disk_random_read_bytes_per_second",
        "bytes/s",
        "128 KiB reads at random offsets (a JPEG's size), direct I/O, same device",
    )
    LINK = gauge("link_bytes_per_second", "bytes/s", "A NIC's or InfiniBand port's link rate")
    PCIE = gauge("pcie_bytes_per_second", "bytes/s", "A GPU's PCIe link, one direction, at its max")
    JPEG_DECODE = gauge(
        "jpeg_decode_images_per_second_per_core",
        "images/s",
        "JPEG decode + resize to 224 px of a 500x375 picture, one core",
    )
    PEER_THROUGHPUT = gauge(
        "peer_throughput_bytes_per_second",
        "bytes/s",
        "TCP throughput to a peer node's receiver (agent ceilings --peer), one stream",
    )
    NFS_READ = gauge(
        "nfs_read_bytes_per_second",
        "bytes/s",
        "1 MiB reads in order of a file on an NFS mount, direct I/O (device: the mount point)",
    )
    MEASURED_AT = gauge("measured_at_seconds", "unix seconds", "When it was measured")


class Job(Measurement):
    """One Slurm job on this node, from its cgroup (``agent/samplers/jobs.py``).

    Tagged ``job_id`` only: who owns the job and what it was given is in ``slurm_job``.
    Node series (cpu, memory, disk...) carry no job label. A job whose cgroup is gone
    is not reported.
    """

    NAME = "job"
    TAGS = (Tag.HOST, Tag.JOB_ID)
    CPU_SECONDS = counter(
        "cpu_seconds",
        "seconds",
        "CPU time of the job's processes (cpuacct.usage / cpu.stat usage_usec)",
    )
    MEMORY_BYTES = gauge(
        "memory_bytes", "bytes", "Memory charged to the job (usage_in_bytes / memory.current)"
    )
    MEMORY_PEAK_BYTES = gauge(
        "memory_peak_bytes", "bytes", "Highest memory charge (max_usage_in_bytes / memory.peak)"
    )
    CACHE_BYTES = gauge(
        "cache_bytes", "bytes", "Page cache charged to the job (memory.stat total_cache / file)"
    )
    FILE_REFAULT_BYTES = counter(
        "file_refault_bytes",
        "bytes",
        "The job's file pages read back after the kernel's reclaim evicted them "
        "(memory.stat workingset_refault_file x page size)",
    )
    BLOCK_READ_BYTES = counter(
        "block_read_bytes", "bytes", "Bytes read from block devices (blkio / io.stat rbytes)"
    )
    BLOCK_WRITE_BYTES = counter(
        "block_write_bytes", "bytes", "Bytes written to block devices (blkio / io.stat wbytes)"
    )
    PROCESS_READ_BYTES = counter(
        "process_read_bytes",
        "bytes",
        "read_bytes of /proc/<pid>/io over the job's processes, exited ones kept",
    )
    PROCESS_WRITE_BYTES = counter(
        "process_write_bytes",
        "bytes",
        "write_bytes of /proc/<pid>/io over the job's processes, exited ones kept",
    )
    PROCESSES = gauge("processes", "count", "Processes in the job's cgroups")


class JobInfo(Measurement):
    """One info series per Slurm job on this node: who and what, as labels, value 1.

    As node_exporter's ``node_uname_info``: ``epochscope_slurm_job_info{job_id, user,
    ...} 1``, joined on ``job_id`` to name a ``job`` series. A label that cannot be read
    (no process environment readable yet) is left out.
    """

    NAME = "slurm_job"
    TAGS = (Tag.HOST, Tag.JOB_ID, Tag.UID, Tag.USER, Tag.ACCOUNT, Tag.PARTITION, Tag.GPUS)
    INFO = gauge("info", "", "Always 1: the labels are the information")
    ALLOCATED_CPUS = gauge("allocated_cpus", "count", "CPUs in the job's cpuset.cpus")
    ALLOCATED_MEMORY_BYTES = gauge(
        "allocated_memory_bytes", "bytes", "The job's memory limit (limit_in_bytes / memory.max)"
    )
    ALLOCATED_GPUS = gauge(
        "allocated_gpus", "count", "GPUs in SLURM_JOB_GPUS / CUDA_VISIBLE_DEVICES of a job process"
    )


class Process(Measurement):
    """One of the node's busiest processes since the agent's previous sample
    (``agent/samplers/processes.py``): the top few by CPU and the top few by storage I/O.

    A process is reported only while it is among the busiest, so its series has gaps; its
    counters (the process's own, from its start) stay right across them. ``job_id`` is
    set when the process is in a Slurm job's cgroup, ``user`` when its uid resolves.
    """

    NAME = "process"
    TAGS = (Tag.HOST, Tag.PID, Tag.COMMAND, Tag.USER, Tag.JOB_ID)
    CPU_SECONDS = counter(
        "cpu_seconds", "seconds", "utime + stime of the process since it started (/proc/<pid>/stat)"
    )
    READ_BYTES = counter(
        "read_bytes", "bytes", "Bytes the process had fetched from storage (/proc/<pid>/io)"
    )
    WRITE_BYTES = counter(
        "write_bytes", "bytes", "Bytes the process had sent to storage (/proc/<pid>/io)"
    )
    CPU_SECONDS_PER_SECOND = gauge(
        "cpu_seconds_per_second", "seconds/s", "CPU seconds per second since the last sample"
    )
    READ_BYTES_PER_SECOND = gauge(
        "read_bytes_per_second", "bytes/s", "Storage reads per second since the last sample"
    )
    WRITE_BYTES_PER_SECOND = gauge(
        "write_bytes_per_second", "bytes/s", "Storage writes per second since the last sample"
    )
    PPID = gauge("ppid", "", "The parent's pid (a training's data loaders are its rank's)")


class Event:
    """Values of the ``event`` field of ``workload`` points."""

    RUN_START = "run_start"
    EPOCH_START = "epoch_start"
    EPOCH_END = "epoch_end"
    STEP = "step"
    RUN_END = "run_end"
    # `workloads infer`: one per precision and batch size, between run_start and run_end
    INFERENCE = "inference"
    ALL = (RUN_START, EPOCH_START, EPOCH_END, STEP, RUN_END, INFERENCE)


INFERENCE_FRAMEWORK = "onnxruntime"  # the framework tag of `workloads infer` runs
SYNTHETIC_DATA = "synthetic"  # the data format of a run on random tensors: no data set read


class ExecutionProvider:
    """Values of ``execution_provider`` (``workloads infer``): ONNX Runtime's names."""

    TENSORRT = "TensorrtExecutionProvider"
    CUDA = "CUDAExecutionProvider"
    CPU = "CPUExecutionProvider"
    PREFERRED = (TENSORRT, CUDA, CPU)  # best first
    GPU = (TENSORRT, CUDA)


class InferencePrecision:
    """Values of ``precision`` on ``inference`` events (``workloads infer``)."""

    FP32 = "fp32"
    INT8 = "int8"
    ALL = (FP32, INT8)


class Workload(Measurement):
    """Events written by every training rank (the workloads -> collector contract).

    Timestamps are the writing host's clock; the collector correlates per host.
    """

    NAME = "workload"
    TAGS = (Tag.HOST, Tag.RUN_ID, Tag.RANK, Tag.FRAMEWORK)
    EVENT = text("event", "run_start | epoch_start | epoch_end | step | run_end")
    EPOCH = gauge("epoch", "count", "Epoch number, from 1")
    STEP = gauge("step", "count", "Global step number")
    IMAGES = gauge("images", "count", "Images this rank processed in the epoch or step")
    SECONDS = gauge("seconds", "seconds", "Duration of the epoch or step")
    # epoch_end: the epoch's steps after the run's warm-up steps (tf_cnn_benchmarks'
    # throughput is timed_images / timed_seconds; equal to images/seconds past warm-up).
    TIMED_IMAGES = gauge("timed_images", "count", "Images of the epoch's post-warm-up steps")
    TIMED_SECONDS = gauge("timed_seconds", "seconds", "Wall time of those steps")
    # The step's anatomy (step: that step; epoch_end: sums over all the epoch's steps).
    # input_wait + compute + communication + other_step = seconds; the overlap is not in
    # the sum (see workloads/record/anatomy.py and docs/anatomy.md).
    INPUT_WAIT_SECONDS = gauge(
        "input_wait_seconds", "seconds", "Time blocked waiting for the next batch"
    )
    COMPUTE_SECONDS = gauge(
        "compute_seconds", "seconds", "Forward and backward until every gradient is ready"
    )
    COMMUNICATION_SECONDS = gauge(
        "communication_seconds",
        "seconds",
        "Gradient all-reduce still running after the gradients were ready (exposed)",
    )
    OTHER_STEP_SECONDS = gauge(
        "other_step_seconds", "seconds", "The rest of the step: optimizer update, callbacks"
    )
    OVERLAP_SECONDS = gauge(
        "communication_overlap_seconds",
        "seconds",
        "All-reduce in flight while backward was still computing (not in the sum)",
    )
    # epoch_end: the input wait of the epoch's timed steps only (those of timed_seconds),
    # for the accelerator utilisation (AU) the MLPerf Storage way
    TIMED_INPUT_WAIT_SECONDS = gauge(
        "timed_input_wait_seconds", "seconds", "input_wait_seconds of the post-warm-up steps"
    )
    # epoch_end of a profiled rank (``workloads profile``: every step is timed): the wall
    # time of the epoch's steps after its first, which its AU is over (MLPerf Storage's rule,
    # as DLIO computes it: each epoch's first step left out), and the part of it in which
    # the accelerator did not work: their input wait; for an emulated accelerator (DLIO's
    # sleep) everything but its emulated compute
    AU_STEP_SECONDS = gauge(
        "au_step_seconds", "seconds", "Wall time of the epoch's steps after its first (AU's)"
    )
    AU_IDLE_SECONDS = gauge(
        "au_idle_seconds", "seconds", "The accelerator's idle time in au_step_seconds"
    )
    # epoch_end: /proc/<pid>/io growth over the epoch of the rank and its data loaders
    PROCESS_READ_BYTES = gauge(
        "process_read_bytes", "bytes", "read_bytes: what the rank's processes read from storage"
    )
    PROCESS_RCHAR_BYTES = gauge(
        "process_rchar_bytes", "bytes", "rchar: all the rank's processes read (page cache too)"
    )
    LOSS = gauge("loss", "", "Training loss")
    TOP1 = gauge("top1", "fraction", "Validation top-1 accuracy, 0..1")
    TOP5 = gauge("top5", "fraction", "Validation top-5 accuracy, 0..1")
    STATE = text("state", "run_end only: finished | failed | interrupted")
    # run_start carries the whole configuration:
    MODEL = text("model", "Model name, e.g. resnet50")
    BATCH_SIZE = gauge("batch_size", "count", "Batch size per rank")
    WORLD_SIZE = gauge("world_size", "count", "Ranks (GPUs or processes) in the run")
    LOCAL_SIZE = gauge("local_size", "count", "Ranks on this host")
    PRECISION = text("precision", "fp32 | fp16 | bf16 (training); fp32 | int8 (inference)")
    DATA_FORMAT = text("data_format", "tfrecord | recordio | jpeg | synthetic")
    DATASET_IMAGES = gauge("dataset_images", "count", "Training images in the data set")
    DATASET_BYTES = gauge("dataset_bytes", "bytes", "Bytes of the training data set")
    IMAGE_SIZE = gauge("image_size", "pixels", "Side of the square input image")
    HOST_MEMORY_BYTES = gauge("host_memory_bytes", "bytes", "RAM of this host")
    WARMUP_STEPS = gauge("warmup_steps", "count", "Steps excluded from throughput")
    TARGET_TOP1 = gauge("target_top1", "fraction", "Top-1 the run aims for, if any")
    # learning (collector.analysis.learning): chance top-1 is 1/num_classes; line protocol
    # carries no NaN or Inf, so an epoch_end says when its mean loss was one
    NUM_CLASSES = gauge("num_classes", "count", "Classes the model tells apart")
    LOSS_NOT_FINITE = gauge(
        "loss_not_finite",
        "count",
        "epoch_end: 1 when the epoch's mean training loss was NaN or Inf",
    )
    # run_start of a rank inside a Slurm job: the job_id tag of the agent's job and
    # slurm_job series on its node (text: Slurm ids need not be numbers)
    SLURM_JOB_ID = text("slurm_job_id", "SLURM_JOB_ID of the rank's environment")
    SLURM_STEP_ID = text("slurm_step_id", "SLURM_STEP_ID of the rank's environment (srun steps)")
    # run_start: the rank's pid, so the node's busiest processes (``process``) can be told
    # apart into the training's own (the rank and its children) and everything else's
    PID = gauge("pid", "", "The rank's process id on its host")
    # epoch_end: CPU seconds of the rank and its children (data loaders) over the epoch
    CPU_SECONDS = gauge(
        "cpu_seconds", "seconds", "CPU time (user + system) of the rank and its loaders"
    )
    # epoch_end of a profiled PyTorch rank (``workloads profile``): the worker processes its
    # training DataLoader started at the epoch's start (0: it kept them from the last epoch)
    LOADER_WORKERS_STARTED = gauge(
        "loader_workers_started",
        "count",
        "Loader worker processes started at the epoch's start (0: kept from the last epoch)",
    )
    # epoch_end: the most throttled CPU cgroup with a quota holding the rank or its loaders
    # over the epoch (its cpu.stat; workloads/record/cputime.py): a quota that held them back
    CPU_THROTTLED_SHARE = gauge(
        "cpu_throttled_share",
        "fraction",
        "Share of that cgroup's scheduling periods in the epoch whose CPU quota ran out"
        " (cpu.stat nr_throttled / nr_periods)",
    )
    THROTTLED_QUOTA_CPUS = gauge(
        "throttled_quota_cpus", "cpus", "That cgroup's CPU quota (cfs_quota_us / cfs_period_us)"
    )
    THROTTLED_GROUP_HOLDS = text(
        "throttled_group_holds", "rank | loaders: whether that cgroup holds the rank itself"
    )
    # inference events (``workloads infer``): precision, batch_size, timed_images and
    # timed_seconds (the timed batches: images/s is contract.throughput's rule), top1 on the
    # validation split, and these:
    LATENCY_P10_SECONDS = gauge("latency_p10_seconds", "seconds", "10th percentile latency")
    LATENCY_P50_SECONDS = gauge("latency_p50_seconds", "seconds", "Median batch latency")
    LATENCY_P90_SECONDS = gauge("latency_p90_seconds", "seconds", "90th percentile latency")
    LATENCY_P99_SECONDS = gauge("latency_p99_seconds", "seconds", "99th percentile latency")
    LATENCY_SPREAD = gauge(
        "latency_spread", "ratio", "p90 / p10 of the timed batches' latencies (1: no spread)"
    )
    TIMED_BATCHES = gauge("timed_batches", "count", "Batches timed (cycling over the pictures)")
    MIN_TIMED_SECONDS = gauge(
        "min_timed_seconds", "seconds", "The least time each measurement was asked to time"
    )
    WARMUP_BATCHES = gauge("warmup_batches", "count", "Untimed batches before the timed ones")
    VALIDATION_IMAGES = gauge("validation_images", "count", "Images top-1 was measured on")
    CALIBRATION_IMAGES = gauge(
        "calibration_images", "count", "Training images the INT8 ranges were calibrated on"
    )
    EXECUTION_PROVIDER = text("execution_provider", "ONNX Runtime provider, e.g. CPU")
    INT8_FORMAT = text("int8_format", "qdq | qoperator: how the INT8 model was quantised")
    WEIGHTS = text("weights", "The checkpoint the model came from, or 'initialised'")
    # run_start: the CPUs a rank computes on and where its thread counts came from
    # (workloads/record/cpus.py; the cpu_oversubscription finding reads them)
    CPU_THREADS = gauge(
        "cpu_threads",
        "count",
        "Compute threads of the rank: torch.get_num_threads(), TensorFlow's intra-op "
        "threads, MXNet's OMP threads",
    )
    CPU_THREADS_SOURCE = text(
        "cpu_threads_source",
        "Where cpu_threads came from, e.g. 'OMP_NUM_THREADS=1 set by torchrun'",
    )
    INTER_OP_THREADS = gauge("inter_op_threads", "count", "TensorFlow's inter-op threads")
    LOADER_WORKERS = gauge(
        "loader_workers", "count", "Data loader worker processes or decode threads per rank"
    )
    PERSISTENT_WORKERS = gauge(
        "persistent_workers", "boolean", "1 when the loader's workers live across epochs"
    )
    CPUS_ALLOWED = text(
        "cpus_allowed", "The CPUs the rank may run on (sched_getaffinity), as a list: 0-3,8"
    )
    CPU_QUOTA_CPUS = gauge(
        "cpu_quota_cpus", "cpus", "The rank's cgroup CPU quota (cfs_quota_us / cfs_period_us)"
    )
    # run_start of each rank: contract.procfs.memory_limit_bytes (issue 42, item 4)
    MEMORY_LIMIT_BYTES = gauge(
        "memory_limit_bytes",
        "bytes",
        "The rank's memory cgroup limit: the smallest its cgroup or an ancestor sets (a"
        " container's, a pod's, a Slurm job's); absent where none is set",
    )
    # run_start and epoch_end of a host's local rank 0, with --data-dir: how much of the data
    # set's files (train and val) sat in this host's page cache then (mincore(2);
    # workloads/train/pagecache.py); cached / files is the share
    DATASET_CACHED_BYTES = gauge(
        "dataset_cached_bytes", "bytes", "Bytes of the data set's files in this host's page cache"
    )
    DATASET_FILES_BYTES = gauge(
        "dataset_files_bytes", "bytes", "Bytes of the data set's files dataset_cached_bytes is of"
    )


class RunState:
    LIVE = "live"
    FINISHED = "finished"
    FAILED = "failed"
    INTERRUPTED = "interrupted"  # the user stopped it (Ctrl-C or SIGTERM to `workloads run`)


SAMPLE_MEASUREMENTS: tuple[type[Measurement], ...] = (
    Cpu,
    Memory,
    Disk,
    Net,
    Infiniband,
    Nfs,
    NfsRpc,
    Gpu,
    GpuProcess,
    Job,
    JobInfo,
    Ceiling,
    AgentSelf,
    SamplerSelf,
    Process,
)
ALL_MEASUREMENTS: tuple[type[Measurement], ...] = (*SAMPLE_MEASUREMENTS, Workload)
BY_NAME: dict[str, type[Measurement]] = {m.NAME: m for m in ALL_MEASUREMENTS}


def field_spec(measurement: str, field: str) -> FieldName | None:
    """The spec of a field, or None for a name the schema does not know.

    ``hw_*`` InfiniBand fields are counters named after the driver's files.
    """
    spec = BY_NAME.get(measurement)
    if spec is None:
        return None
    known = spec.fields().get(field)
    if known is not None:
        return known
    if spec is Infiniband and field.startswith(Infiniband.HW_COUNTER_PREFIX):
        return counter(field, "count", f"Driver hardware counter {field[3:]}")
    return None


def prometheus_name(measurement: str, field: FieldName) -> str:
    """``epochscope_disk_read_bytes_total`` for a counter, no suffix for a gauge.

    A field of a shared family is named after the family: every CPU mode is
    ``epochscope_cpu_seconds_total`` (told apart by ``prometheus_labels``).
    """
    name = f"{PROMETHEUS_NAMESPACE}_{measurement}_{field.family or field}"
    return f"{name}_total" if field.is_counter else name


def prometheus_labels(field: FieldName) -> dict[str, str]:
    """The labels that pick a field's samples out of its family (``{"mode": "user"}``)."""
    return dict(field.labels)


def prometheus_help(field: FieldName) -> str:
    return field.family_help or field.help
