"""Hydra reads ablate's config files once per process (hydra_plugins/ablate_config_cache): what a kept
source loads is what Hydra's own source loads, a fresh copy each time, read again when the file
changes; ablate's search path goes through it, another Hydra app's does not."""

from __future__ import annotations

import os
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra._internal.core_plugins.file_config_source import FileConfigSource
from hydra._internal.core_plugins.importlib_resources_config_source import ImportlibResourcesConfigSource

from ablate.compose import TINY
from ablate.compose import compose as ablate_compose
from ablate.paths import CONF_DIR
from hydra_plugins.ablate_config_cache import config_cache
from hydra_plugins.ablate_config_cache.config_cache import CachedFileSource, CachedPackageSource


def _empty(cfg) -> None:
    for key in list(cfg.keys()):
        del cfg[key]


def _names(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root).with_suffix("")) for p in root.rglob("*.yaml"))


def test_every_config_loads_as_hydras_own_source_loads_it_and_each_load_is_a_fresh_copy() -> None:
    kept, plain = CachedFileSource("main", f"ablate+file://{CONF_DIR}"), FileConfigSource("main", f"file://{CONF_DIR}")
    names = _names(CONF_DIR)
    assert len(names) > 50
    for name in names:
        expected = plain.load_config(name)
        for _ in range(2):  # the second load is the kept one
            got = kept.load_config(name)
            assert got.config == expected.config, name
            assert (got.header, got.path, got.provider) == (expected.header, expected.path, expected.provider), name
            _empty(got.config)  # Hydra pops the defaults list from what it loads: the next load must not see that
    for group in ("", "pos_enc", "task"):
        assert kept.list(group, None) == plain.list(group, None)
        assert kept.is_group(group) and kept.exists(group)
    assert kept.is_config("config") and not kept.is_config("no_such_config") and kept.available()

    hydra_kept = CachedPackageSource("hydra", "ablate+pkg://hydra.conf")
    hydra_plain = ImportlibResourcesConfigSource("hydra", "pkg://hydra.conf")
    for name in ("hydra/output/default", "hydra/help/default", "hydra/job_logging/default"):
        for _ in range(2):
            got = hydra_kept.load_config(name)
            assert got.config == hydra_plain.load_config(name).config
            _empty(got.config)


def test_an_edited_file_is_read_again(tmp_path: Path) -> None:
    source = CachedFileSource("main", f"ablate+file://{tmp_path}")
    path = tmp_path / "a.yaml"
    path.write_text("x: 1\n")
    assert source.load_config("a").config.x == 1
    path.write_text("x: 22\n")  # another size
    assert source.load_config("a").config.x == 22
    stat = path.stat()
    path.write_text("x: 33\n")  # the same size: its modification time tells it apart
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert source.load_config("a").config.x == 33
    assert [key for key in config_cache._loaded if key[1] == str(tmp_path)] == [("file", str(tmp_path), "a")], \
        "what is kept of an edited file replaces what was kept of it before"


def test_ablates_search_path_goes_through_the_kept_sources_and_another_apps_does_not(tmp_path: Path) -> None:
    sources = {s.provider: s.schema for s in ablate_compose(TINY, hydra_config=True).hydra.runtime.config_sources}
    assert sources == {"hydra": "ablate+pkg", "main": "ablate+file", "schema": "structured"}
    (tmp_path / "config.yaml").write_text("y: 2\n")
    with initialize_config_dir(config_dir=str(tmp_path), version_base=None):
        cfg = compose(config_name="config", return_hydra_config=True)
    assert cfg.y == 2
    assert {s.provider: s.schema for s in cfg.hydra.runtime.config_sources} == \
        {"hydra": "pkg", "main": "file", "schema": "structured"}
