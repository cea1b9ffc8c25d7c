"""The DCGM parser on the real dcgm-exporter scrapes in tests/fixtures/reference/dcgm/samples, and on injected variants."""

from __future__ import annotations

import pytest

from pools.health.dcgm import INT32_BLANK, INT64_BLANK, ScrapeError, parse_scrape

SAMPLES = {
    "grid-a100-40c_vgpu_vks_driver580.126.prom": (
        "GPU-0946f70c-659b-4c39-8b78-7e7600000000",
        "test-ai-1-node-pool-40c-d5ds8-br9r6-9tb2c",
        "GRID A100-40C",
    ),
    "l40s_upcloud_driver595.58.prom": ("GPU-5b4e07f6-3a86-4340-039d-25f2a83cdc43", "gpu1-wl8sg", "NVIDIA L40S"),
    "l4_kops_k8s1.35_driver580.105.prom": (
        "GPU-c2f76b33-7953-256e-8f33-1343419b1a1c",
        "i-030791dc5a37cd257",
        "NVIDIA L4",
    ),
    "t4_ericsson_driver590.48.prom": ("GPU-6d5c0ac5-74d7-3130-46f1-e93ed57f469a", "cp-bm14r7", "Tesla T4"),
}


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_parse_scrape_reads_each_real_sample(reference, name):
    text = (reference / "dcgm/samples" / name).read_text()
    scrape = parse_scrape(text)
    uuid, host, model = SAMPLES[name]
    [gpu] = scrape.gpus
    assert (gpu.uuid, gpu.hostname, gpu.model, gpu.gpu) == (uuid, host, model, 0)
    assert gpu.driver_version
    assert gpu.pci_bus_id.startswith("00000000:")
    # Every sample reports MEMORY_TEMP 0 (no memory sensor on these boards): unsupported, dropped.
    assert "DCGM_FI_DEV_MEMORY_TEMP" in gpu.blank_fields
    assert not gpu.has("DCGM_FI_DEV_MEMORY_TEMP")
    # None of the samples carries an XID series: the XID signal is unknown, not "no XID".
    assert gpu.last_xid is None
    assert not gpu.has("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")


def test_parse_scrape_names_counters_without_the_clients_total_suffix(reference):
    gpu = parse_scrape((reference / "dcgm/samples/l40s_upcloud_driver595.58.prom").read_text()).gpus[0]
    assert gpu.fields["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"] == 0
    assert gpu.fields["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] == 5551899580
    assert gpu.fields["DCGM_FI_DEV_ROW_REMAP_FAILURE"] == 0
    assert gpu.fields["DCGM_FI_DEV_GPU_TEMP"] == 32


def test_parse_scrape_untyped_sample_without_help_lines(reference):
    gpu = parse_scrape((reference / "dcgm/samples/t4_ericsson_driver590.48.prom").read_text()).gpus[0]
    assert gpu.fields["DCGM_FI_DEV_GPU_TEMP"] == 74
    assert gpu.fields["DCGM_FI_DEV_GPU_UTIL"] == 91


def test_parse_scrape_accepts_lowercase_hostname_label(reference):
    text = (reference / "dcgm/samples/l4_kops_k8s1.35_driver580.105.prom").read_text().replace("Hostname=", "hostname=")
    [gpu] = parse_scrape(text).gpus
    assert gpu.hostname == "i-030791dc5a37cd257"


def test_parse_scrape_drops_dcgm_blank_sentinels():
    text = "\n".join(
        [
            f'DCGM_FI_DEV_GPU_TEMP{{gpu="0",UUID="GPU-a",Hostname="n"}} {INT32_BLANK + 2}',
            f'DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{gpu="0",UUID="GPU-a",Hostname="n"}} {INT64_BLANK + 2}',
            'DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-a",Hostname="n"} 140737488355328.0',
            'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0",UUID="GPU-a",Hostname="n"} 3000000000',
            'DCGM_FI_DEV_MEMORY_TEMP{gpu="0",UUID="GPU-a",Hostname="n"} 9223372036854775794',
        ]
    )
    [gpu] = parse_scrape(text).gpus
    assert set(gpu.blank_fields) == {
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_MEMORY_TEMP",
    }
    assert gpu.fields == {"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 3000000000}  # int64 field above int32 blank: real


def test_parse_scrape_reads_xid_gauge_with_labels_and_windowed_counts():
    text = "\n".join(
        [
            "# TYPE DCGM_FI_DEV_XID_ERRORS gauge",
            'DCGM_FI_DEV_XID_ERRORS{gpu="1",UUID="GPU-b",hostname="n",err_code="79",'
            'err_msg="GPU has fallen off the bus"} 79',
            "# TYPE DCGM_EXP_XID_ERRORS_COUNT counter",
            'DCGM_EXP_XID_ERRORS_COUNT{gpu="1",UUID="GPU-b",hostname="n",window_size_in_ms="300000",xid="48"} 2',
            "# TYPE DCGM_EXP_GPU_HEALTH_STATUS gauge",
            'DCGM_EXP_GPU_HEALTH_STATUS{gpu="1",UUID="GPU-b",hostname="n",health_watch="MEM",health_error_code="x"} 20',
        ]
    )
    [gpu] = parse_scrape(text).gpus
    assert (gpu.last_xid, gpu.last_xid_message) == (79, "GPU has fallen off the bus")
    assert gpu.xid_counts == {48: 2}
    assert gpu.xid_window_ms == 300000
    assert gpu.health_watches == {"MEM": 20}


def test_parse_scrape_old_namespace_and_lowercase_uuid():
    text = 'dcgm_gpu_temp{gpu="2",uuid="GPU-c",Hostname="n"} 91\ndcgm_xid_errors{gpu="2",uuid="GPU-c",Hostname="n"} 0\n'
    [gpu] = parse_scrape(text).gpus
    assert gpu.uuid == "GPU-c"
    assert gpu.fields["DCGM_FI_DEV_GPU_TEMP"] == 91
    assert gpu.last_xid == 0


def test_parse_scrape_folds_mig_instances_into_their_card_and_skips_switch_series():
    base = 'gpu="0",UUID="GPU-m",modelName="NVIDIA A30",Hostname="n"'
    text = "\n".join(
        [
            f'DCGM_FI_DEV_GPU_TEMP{{{base},GPU_I_PROFILE="1g.6gb",GPU_I_ID="3"}} 50',
            f'DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{base},GPU_I_PROFILE="1g.6gb",GPU_I_ID="3"}} 0.5',
            f'DCGM_FI_DEV_GPU_TEMP{{{base},GPU_I_PROFILE="2g.12gb",GPU_I_ID="1"}} 50',
            'DCGM_FI_DEV_NVSWITCH_TEMPERATURE_CURRENT{nvswitch="0",hostname="n"} 40',
        ]
    )
    scrape = parse_scrape(text)
    [gpu] = scrape.gpus
    assert gpu.mig_instances == ["1g.6gb/3", "2g.12gb/1"]
    assert gpu.fields == {"DCGM_FI_DEV_GPU_TEMP": 50}
    assert scrape.skipped_series == 1


def test_parse_scrape_rejects_text_that_is_not_an_exposition():
    with pytest.raises(ScrapeError):
        parse_scrape('DCGM_FI_DEV_GPU_TEMP{gpu="0" 12 13 14\n')
