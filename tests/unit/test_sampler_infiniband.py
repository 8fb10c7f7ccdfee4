"""The infiniband sampler against the captured sysfs trees (this machine has no HCA).

Every expected number below is read by hand from the files under
``/work/shared/fixtures/roots/<tree>/sys/class/infiniband``; the arithmetic is in the
comments. Synthetic trees in ``tmp_path`` cover the edge cases no capture shows.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from agent.samplers import make_sampler
from agent.samplers.base import Roots
from agent.samplers.infiniband import parse_counter, parse_port, parse_rate, parse_state
from contract.point import encode_lines
from contract.schema import Infiniband
from tests.conftest import fixture_root

NOW = 1_700_000_000_000_000_000

# The 12 PortCounters error fields the schema carries, all 0 in every capture.
ERROR_FIELDS_ZERO = {
    "symbol_error": 0,
    "link_error_recovery": 0,
    "link_downed": 0,
    "rcv_errors": 0,
    "rcv_remote_physical_errors": 0,
    "rcv_switch_relay_errors": 0,
    "xmit_discards": 0,
    "xmit_constraint_errors": 0,
    "rcv_constraint_errors": 0,
    "local_link_integrity_errors": 0,
    "excessive_buffer_overrun_errors": 0,
    "vl15_dropped": 0,
}


def sample_tree(name: str) -> dict[tuple[str, str], dict]:
    root = fixture_root(name)
    sampler = make_sampler("infiniband", Roots(proc=root / "proc", sys=root / "sys"))
    assert sampler.available()
    points = sampler.sample(NOW)
    assert all(p.measurement == Infiniband.NAME and p.time_ns == NOW for p in points)
    return {(p.tags["device"], p.tags["port"]): p.fields for p in points}


def test_procfs_tree_mlx4_mlx5_hfi1():
    ports = sample_tree("procfs-mlx-hfi")
    assert sorted(ports) == [("hfi1_0", "1"), ("mlx4_0", "1"), ("mlx4_0", "2"), ("mlx5_0", "1")]

    # mlx4_0 has no unicast_* files, but port_xmit_data = 26509113295 > 2**32 - 1, so its
    # data counters are the 64-bit PortCountersExtended ones.
    assert ports["mlx4_0", "1"] == {
        "rcv_bytes": 8_884_894_436,  # 2221223609 words x 4
        "xmit_bytes": 106_036_453_180,  # 26509113295 x 4
        "rcv_packets": 87_169_372,
        "xmit_packets": 85_734_114,
        **ERROR_FIELDS_ZERO,
        "xmit_wait": 3599,
        "rate_bytes_per_second": 5e9,  # "40 Gb/sec (4X QDR)": 40e9 / 8
        "state": 4.0,  # "4: ACTIVE"
        "phys_state": 5.0,  # "5: LinkUp"
        "saturated_counters": 0.0,
    }
    assert ports["mlx4_0", "2"] == {
        "rcv_bytes": 9_841_747_136,  # 2460436784 x 4
        "xmit_bytes": 106_161_427_560,  # 26540356890 x 4
        "rcv_packets": 89_332_064,
        "xmit_packets": 88_622_850,
        **ERROR_FIELDS_ZERO,
        "xmit_wait": 3846,
        "rate_bytes_per_second": 5e9,
        "state": 4.0,
        "phys_state": 5.0,
        "saturated_counters": 0.0,
    }

    # Omni-Path (hfi1): 100 Gb/s, word counters far above 2**32.
    assert ports["hfi1_0", "1"] == {
        "rcv_bytes": 1_380_366_808_104,  # 345091702026 x 4
        "xmit_bytes": 1_094_233_306_172,  # 273558326543 x 4
        "rcv_packets": 638_036_947,
        "xmit_packets": 568_318_856,
        **ERROR_FIELDS_ZERO,
        "xmit_wait": 0,
        "rate_bytes_per_second": 12.5e9,  # "100 Gb/sec (4X EDR)": 100e9 / 8
        "state": 4.0,
        "phys_state": 5.0,
        "saturated_counters": 0.0,
    }

    mlx5 = ports["mlx5_0", "1"]
    hw = {k: v for k, v in mlx5.items() if k.startswith("hw_")}
    rest = {k: v for k, v in mlx5.items() if not k.startswith("hw_")}
    assert rest == {
        "rcv_bytes": 72_505_381_512,  # 18126345378 x 4
        "xmit_bytes": 11_523_046_035_392,  # 2880761508848 x 4
        "rcv_packets": 541_889_824,
        "xmit_packets": 10_907_922_116,
        "unicast_rcv_packets": 541_889_824,
        "unicast_xmit_packets": 10_907_922_116,
        "multicast_rcv_packets": 0,
        "multicast_xmit_packets": 0,
        **ERROR_FIELDS_ZERO,
        "xmit_wait": 0,
        "rate_bytes_per_second": 3.125e9,  # "25 Gb/sec (1X EDR)": 25e9 / 8
        "state": 4.0,
        "phys_state": 4.0,  # this capture's phys_state file reads "4: ACTIVE"
        "saturated_counters": 0.0,
    }
    # 25 hw_counters files; lifespan (10, a cache setting in ms) is not a counter.
    assert hw == {
        "hw_duplicate_request": 41,
        "hw_implied_nak_seq_err": 0,
        "hw_local_ack_timeout_err": 131,
        "hw_out_of_buffer": 0,
        "hw_out_of_sequence": 1,
        "hw_packet_seq_err": 1,
        "hw_req_cqe_error": 3481,
        "hw_req_cqe_flush_error": 80,
        "hw_req_remote_access_errors": 0,
        "hw_req_remote_invalid_request": 0,
        "hw_resp_cqe_error": 8109,
        "hw_resp_cqe_flush_error": 4708,
        "hw_resp_local_length_error": 0,
        "hw_resp_remote_access_errors": 0,
        "hw_rnr_nak_retry_err": 0,
        "hw_roce_adp_retrans": 99,
        "hw_roce_adp_retrans_to": 4,
        "hw_roce_slow_restart": 0,
        "hw_roce_slow_restart_cnps": 131,
        "hw_roce_slow_restart_trans": 0,
        "hw_rx_atomic_requests": 0,
        "hw_rx_dct_connect": 0,
        "hw_rx_read_requests": 175_528_982,
        "hw_rx_write_requests": 742_114,
    }


def test_telegraf_tree_saturated_xmit_wait():
    ports = sample_tree("telegraf-mixed")
    assert list(ports) == [("m1x5_0", "1")]
    # port_xmit_wait reads 4294967295: a saturated 32-bit counter, so no xmit_wait field
    # (a stuck counter would read as "never waited") and saturated_counters = 1. The data
    # counters are 64-bit (unicast_* files exist) and far above 2**32. This tree has no
    # rate/state/phys_state files, so those gauges are absent.
    assert ports["m1x5_0", "1"] == {
        "rcv_bytes": 948_637_661_383_288,  # 237159415345822 x 4
        "xmit_bytes": 953_339_799_751_036,  # 238334949937759 x 4
        "rcv_packets": 801_977_655_075,
        "xmit_packets": 803_162_651_391,
        "unicast_rcv_packets": 801_977_655_075,
        "unicast_xmit_packets": 803_162_651_391,
        "multicast_rcv_packets": 0,
        "multicast_xmit_packets": 0,
        **ERROR_FIELDS_ZERO,
        "saturated_counters": 1.0,
    }


def test_fields_are_schema_names_with_right_types():
    for tree in ("procfs-mlx-hfi", "telegraf-mixed"):
        for fields in sample_tree(tree).values():
            known = Infiniband.fields()
            for name, value in fields.items():
                spec = known.get(name)
                if spec is None:
                    assert name.startswith(Infiniband.HW_COUNTER_PREFIX)
                    assert type(value) is int
                elif spec.is_counter:
                    assert type(value) is int and 0 <= value < 2**63
                else:
                    assert type(value) is float


def test_line_protocol_of_a_port():
    root = fixture_root("telegraf-mixed")
    sampler = make_sampler("infiniband", Roots(sys=root / "sys"))
    line = encode_lines(sampler.sample(NOW))
    assert line.startswith("infiniband,device=m1x5_0,port=1 rcv_bytes=948637661383288i,")
    assert "xmit_wait" not in line
    assert line.endswith(f"saturated_counters=1.0 {NOW}")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("100 Gb/sec (4X EDR)\n", 12.5e9),
        ("56 Gb/sec (4X FDR)\n", 7e9),  # the kernel prints FDR 4X as 56
        ("2.5 Gb/sec (1X SDR)\n", 312_500_000.0),
        ("25 Gb/sec (1X EDR)\n", 3.125e9),
        ("200 Gb/sec (2X HDR)\n", 25e9),
        ("40 Gb/sec (4X QDR)\n", 5e9),
        ("", None),
        (None, None),
        ("unknown\n", None),
    ],
)
def test_parse_rate(text, expected):
    assert parse_rate(text) == expected


def test_parse_state_and_counter():
    assert parse_state("4: ACTIVE\n") == 4.0
    assert parse_state("5: LinkUp\n") == 5.0
    assert parse_state("1: DOWN") == 1.0
    assert parse_state("garbage") is None
    assert parse_counter("N/A (no PMA)\n") is None
    assert parse_counter("12\n") == 12
    assert parse_counter("") is None
    assert parse_counter(None) is None


def write_port(root: Path, files: dict[str, str], device: str = "dev0", port: str = "1") -> Roots:
    port_dir = root / "class" / "infiniband" / device / "ports" / port
    for relative, text in files.items():
        path = port_dir / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return Roots(sys=root)


def sample_one(roots: Roots) -> dict:
    points = make_sampler("infiniband", roots).sample(NOW)
    assert len(points) == 1
    return points[0].fields


def test_no_pma_gives_no_field_not_zero(tmp_path):
    # iWARP devices have no PMA: their counter files read "N/A (no PMA)".
    roots = write_port(
        tmp_path,
        {
            "counters/port_rcv_data": "N/A (no PMA)\n",
            "counters/port_xmit_data": "N/A (no PMA)\n",
            "counters/symbol_error": "N/A (no PMA)\n",
            "rate": "10 Gb/sec (4X)\n",
            "state": "4: ACTIVE\n",
        },
    )
    assert sample_one(roots) == {
        "rate_bytes_per_second": 1.25e9,
        "state": 4.0,
        "saturated_counters": 0.0,
    }


def test_legacy_32bit_counter_saturated(tmp_path):
    # Legacy PortCounters only (no unicast_* files, all values below 2**32): data counters
    # are 32-bit, and port_rcv_data stopped at 2**32 - 1.
    roots = write_port(
        tmp_path,
        {
            "counters/port_rcv_data": "4294967295\n",
            "counters/port_xmit_data": "1000\n",
            "counters/port_rcv_packets": "4294967295\n",
            "counters/port_xmit_packets": "7\n",
            "counters/symbol_error": "65535\n",  # 16-bit, stopped at its maximum
            "counters/link_downed": "254\n",  # 8-bit, one below its maximum: reported
            "counters/local_link_integrity_errors": "15\n",  # 4-bit, saturated
        },
    )
    assert sample_one(roots) == {
        "xmit_bytes": 4000,  # 1000 x 4
        "xmit_packets": 7,
        "link_downed": 254,
        "saturated_counters": 4.0,  # rcv_data, rcv_packets, symbol_error, local_link_...
    }


def test_extended_counter_at_uint32_max_is_not_saturated(tmp_path):
    # With unicast_* present the data counters are 64-bit: 4294967295 is just a value.
    roots = write_port(
        tmp_path,
        {
            "counters/port_rcv_data": "4294967295\n",
            "counters/unicast_rcv_packets": "5\n",
        },
    )
    assert sample_one(roots) == {
        "rcv_bytes": 17_179_869_180,  # 4294967295 x 4
        "unicast_rcv_packets": 5,
        "saturated_counters": 0.0,
    }


def test_counters_ext_preferred_when_non_zero(tmp_path):
    # Old Mellanox OFED kernels: 32-bit counters/ plus 64-bit counters_ext/*_64.
    roots = write_port(
        tmp_path,
        {
            "counters/port_rcv_data": "4294967295\n",  # saturated, but _64 is used
            "counters/port_xmit_data": "300\n",
            "counters_ext/port_rcv_data_64": "10000000000\n",
            "counters_ext/port_xmit_data_64": "0\n",  # never updated: use counters/
            "counters_ext/port_unicast_rcv_packets": "42\n",
        },
    )
    assert sample_one(roots) == {
        "rcv_bytes": 40_000_000_000,  # 10000000000 x 4 from counters_ext
        "xmit_bytes": 1200,  # 300 x 4 from counters/
        "unicast_rcv_packets": 42,
        "saturated_counters": 0.0,
    }


def test_value_beyond_int64_is_a_gap(tmp_path):
    # A 64-bit word counter x 4 can exceed the signed 64-bit line protocol integer.
    roots = write_port(
        tmp_path,
        {
            "counters/port_xmit_data": f"{2**62}\n",  # x 4 = 2**64: does not fit
            "counters/unicast_xmit_packets": "1\n",
            "hw_counters/rx_write_requests": f"{2**64 - 1}\n",  # u64 above 2**63 - 1
            "hw_counters/out_of_buffer": "3\n",
        },
    )
    assert sample_one(roots) == {
        "unicast_xmit_packets": 1,
        "hw_out_of_buffer": 3,
        "saturated_counters": 0.0,
    }


def test_unavailable_without_devices_logs_once(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="agent.samplers.infiniband")
    sampler = make_sampler("infiniband", Roots(sys=tmp_path))
    assert sampler.available() is False
    assert len(caplog.records) == 1
    assert sampler.sample(NOW) == []


def test_vanished_port_is_skipped(tmp_path):
    port_dir = tmp_path / "class" / "infiniband" / "mlx5_9" / "ports" / "1"
    port_dir.mkdir(parents=True)  # listed, but every file is gone
    assert make_sampler("infiniband", Roots(sys=tmp_path)).sample(NOW) == []


def test_parse_port_is_pure():
    from agent.samplers.infiniband import PortFiles

    fields = parse_port(PortFiles(counters={"port_rcv_data": "10\n"}, rate="200 Gb/sec (2X HDR)\n"))
    assert fields == {"rcv_bytes": 40, "rate_bytes_per_second": 25e9, "saturated_counters": 0.0}
